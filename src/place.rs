//! `headroom place`: what-if scheduling on real objects.
//!
//! The cluster file is what `kubectl get nodes,pods -A -o yaml` prints; pods with
//! `spec.nodeName` count as running there. Each pod of the pod file is placed in turn, and
//! each placement is assumed before the next pod is considered, as the scheduler would.

use std::path::Path;
use std::sync::Arc;

use crate::config::Config;
use crate::framework::decision::Explanation;
use crate::objects::{LoadError, Objects};
use crate::scheduler::Scheduler;
use crate::snapshot::{PodInfo, Snapshot};

/// Why `place` could not run (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// A file could not be read or parsed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The pod file holds no pod.
    #[error("{0}: no Pod objects found")]
    NoPods(String),
    /// The requested profile does not exist.
    #[error("no profile named {0:?} in the configuration (profiles: {1})")]
    UnknownProfile(String, String),
}

/// What `place` decided, pod by pod.
#[derive(Debug)]
pub struct PlaceReport {
    /// One explanation per pod, in input order.
    pub results: Vec<Explanation>,
    /// Kinds in the input that were ignored.
    pub ignored: Vec<String>,
}

impl PlaceReport {
    /// True when every pod found a node.
    pub fn all_placed(&self) -> bool {
        self.results.iter().all(|r| r.placed)
    }

    /// The text rendering.
    pub fn to_text(&self) -> String {
        self.results
            .iter()
            .map(Explanation::to_text)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Options of one `place` run.
#[derive(Debug, Clone, Default)]
pub struct PlaceOptions {
    /// Profile to use (default: the first).
    pub profile: Option<String>,
}

/// Builds the snapshot from cluster objects.
pub fn snapshot_of(objects: &Objects) -> Snapshot {
    let mut snap = Snapshot::build(objects.nodes.iter().cloned(), objects.pods.iter().cloned());
    for ns in &objects.namespaces {
        snap.upsert_namespace(ns);
    }
    snap
}

/// Runs `place` over already-loaded objects.
pub fn place_objects(
    config: &Config,
    cluster: &Objects,
    pods: &Objects,
    options: &PlaceOptions,
) -> Result<PlaceReport, PlaceError> {
    let mut scheduler = Scheduler::new(config)?;
    if let Some(p) = &options.profile
        && scheduler.framework(Some(p)).is_none()
    {
        return Err(PlaceError::UnknownProfile(
            p.clone(),
            scheduler.profiles().join(", "),
        ));
    }
    *scheduler.snapshot_mut() = snapshot_of(cluster);
    let mut results = Vec::new();
    for pod in &pods.pods {
        let info = PodInfo::new(Arc::new(pod.clone()));
        let attempt = scheduler.schedule_one(&info, options.profile.as_deref(), true);
        results.push(attempt.decision.explain());
    }
    let mut ignored = cluster.ignored.clone();
    ignored.extend(pods.ignored.iter().cloned());
    Ok(PlaceReport { results, ignored })
}

/// Runs `place` on files.
pub fn place_files(
    config: &Config,
    cluster: &Path,
    pods: &Path,
    options: &PlaceOptions,
) -> Result<PlaceReport, PlaceError> {
    let cluster_objects = Objects::load(cluster)?;
    let pod_objects = Objects::load(pods)?;
    if pod_objects.pods.is_empty() {
        return Err(PlaceError::NoPods(pods.display().to_string()));
    }
    place_objects(config, &cluster_objects, &pod_objects, options)
}

//! `headroom place`: what-if scheduling on real objects.
//!
//! The cluster file is what `kubectl get nodes,pods -A -o yaml` prints; pods with
//! `spec.nodeName` count as running there. Each pod of the pod file is placed in turn, and
//! each placement is assumed before the next pod is considered, as the scheduler would.
//!
//! Real usage comes from `--usage FILE` (see [`crate::usage::file`]) and/or `--data-dir DIR`
//! (the usage view computed from a store, as the running scheduler computes it). Without
//! either, the real-usage plugins have no data and headroom decides as kube-scheduler.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::analytics::UsageView;
use crate::config::Config;
use crate::framework::decision::Explanation;
use crate::objects::{LoadError, Objects};
use crate::plugins::PluginDeps;
use crate::reservation::{InMemoryReservations, Reservation, ReservationSource};
use crate::scheduler::Scheduler;
use crate::snapshot::{PodInfo, Snapshot};
use crate::usage::file::UsageFile;

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
    /// The usage file is unreadable or invalid.
    #[error(transparent)]
    Usage(#[from] crate::usage::file::Error),
    /// The store given by `--data-dir` does not exist.
    #[error("{0}: no store there (run `headroom collect` first, or check --data-dir)")]
    NoStore(String),
    /// The store could not be read.
    #[error("reading the store at {path}: {message}")]
    Store {
        /// The directory.
        path: String,
        /// What failed.
        message: String,
    },
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
    /// A usage file (node usage, builder profiles, reservations, history).
    pub usage: Option<PathBuf>,
    /// A store to compute the usage view from (as the running scheduler would).
    pub data_dir: Option<PathBuf>,
}

/// The real-usage inputs of a `place` run.
#[derive(Debug, Clone, Default)]
pub struct PlaceUsage {
    /// Decision time, ms since the epoch.
    pub now_ms: i64,
    /// The usage view.
    pub view: UsageView,
    /// Reservations.
    pub reservations: Vec<Reservation>,
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Gathers the usage inputs of `options`: the store's view (if `data_dir`), overlaid by the
/// usage file's entries (if `usage`); the file's `now` (else the wall clock) is the time.
pub fn load_usage(config: &Config, options: &PlaceOptions) -> Result<PlaceUsage, PlaceError> {
    let file = options
        .usage
        .as_deref()
        .map(|p| UsageFile::load(p, wall_ms()))
        .transpose()?;
    let now_ms = file.as_ref().map_or_else(wall_ms, |f| f.now_ms);
    let mut view = UsageView {
        generated_ms: now_ms,
        ..UsageView::default()
    };
    if let Some(dir) = &options.data_dir {
        let shown = dir.display().to_string();
        let has_store = std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some());
        if !has_store {
            return Err(PlaceError::NoStore(shown));
        }
        let store_err = |message: String| PlaceError::Store {
            path: shown.clone(),
            message,
        };
        let store = headroom_storage::Store::open_existing(dir, config.storage.clone())
            .map_err(|e| store_err(e.to_string()))?;
        view = crate::analytics::compute(&store, &config.analytics, now_ms)
            .map_err(|e| store_err(e.to_string()))?;
    }
    let mut reservations = Vec::new();
    if let Some(f) = file {
        view.nodes.extend(f.view.nodes);
        view.builders.extend(f.view.builders);
        view.placements.extend(f.view.placements);
        reservations = f.reservations;
    }
    Ok(PlaceUsage {
        now_ms,
        view,
        reservations,
    })
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
    let usage = load_usage(config, options)?;
    place_with_usage(config, cluster, pods, options, usage)
}

/// Runs `place` over loaded objects and usage inputs.
pub fn place_with_usage(
    config: &Config,
    cluster: &Objects,
    pods: &Objects,
    options: &PlaceOptions,
    usage: PlaceUsage,
) -> Result<PlaceReport, PlaceError> {
    let source = Arc::new(InMemoryReservations::new(usage.reservations));
    // Expired holds are gone before the first pod, as the purge loop would have done.
    source.purge_expired(usage.now_ms);
    let deps = PluginDeps::from_config(config).with_reservations(source);
    let mut scheduler = Scheduler::with_deps(config, &deps)?;
    if let Some(p) = &options.profile
        && scheduler.framework(Some(p)).is_none()
    {
        return Err(PlaceError::UnknownProfile(
            p.clone(),
            scheduler.profiles().join(", "),
        ));
    }
    *scheduler.snapshot_mut() = snapshot_of(cluster);
    scheduler.set_now_ms(usage.now_ms);
    scheduler.set_usage_view(Arc::new(usage.view));
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

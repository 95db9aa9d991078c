//! `headroom place`: what-if scheduling on real objects.
//!
//! The cluster file is what `kubectl get nodes,pods -A -o yaml` prints; pods with
//! `spec.nodeName` count as running there. Each pod of the pod file is placed in turn, and
//! each placement is assumed before the next pod is considered, as the scheduler would.
//!
//! Real usage comes from `--usage FILE` (see [`headroom_scheduler::usage::file`]) and/or `--data-dir DIR`
//! (the usage view computed from a store, as the running scheduler computes it). Without
//! either, the real-usage plugins have no data and headroom decides as kube-scheduler.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::analytics::UsageView;
use crate::config::Config;
use crate::engine::{Engine, EngineError, Parts};
use headroom_scheduler::clock::{Clock, wall_ms};
use headroom_scheduler::framework::decision::Explanation;
use headroom_scheduler::objects::{LoadError, Objects};
use headroom_scheduler::reservation::InMemoryReservations;
use headroom_scheduler::usage::file::UsageFile;

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
    Usage(#[from] headroom_scheduler::usage::file::Error),
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

/// Runs `place` over already-loaded objects: the [`Engine`] (the same profiles, plugin
/// dependencies and usage computation as `serve`) on a clock stopped at the decision
/// time, its cluster state fed from `cluster` as a watch would feed it, each pod of `pods`
/// scheduled in turn and assumed before the next.
pub fn place_objects(
    config: &Config,
    cluster: &Objects,
    pods: &Objects,
    options: &PlaceOptions,
) -> Result<PlaceReport, PlaceError> {
    let file = options
        .usage
        .as_deref()
        .map(|p| UsageFile::load(p, wall_ms()))
        .transpose()?;
    let now_ms = file.as_ref().map_or_else(wall_ms, |f| f.now_ms);
    // A store only to read usage from (`--data-dir`); a what-if run writes nothing.
    let store = match &options.data_dir {
        Some(dir) => {
            let shown = dir.display().to_string();
            let has_store = std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some());
            if !has_store {
                return Err(PlaceError::NoStore(shown));
            }
            Some(
                headroom_storage::Store::open_existing(dir, config.storage.clone()).map_err(
                    |e| PlaceError::Store {
                        path: shown,
                        message: e.to_string(),
                    },
                )?,
            )
        }
        None => None,
    };
    let reservations = file
        .as_ref()
        .map(|f| f.reservations.clone())
        .unwrap_or_default();
    let source = Arc::new(InMemoryReservations::new(reservations));
    let (clock, _) = Clock::manual(now_ms);
    let parts = Parts {
        clock,
        store,
        reservations: Some(source),
        nodes_observer: None,
        // What-if: nothing from the cluster file is queued; the pods to place are given.
        schedule: false,
        explain: true,
        decision_channel: Default::default(),
        async_preemption: false,
    };
    let engine = Engine::new(config.clone(), parts).map_err(|e| match e {
        EngineError::Config(c) => PlaceError::Config(c),
        other => PlaceError::Store {
            path: "(engine)".into(),
            message: other.to_string(),
        },
    })?;
    if let Some(p) = &options.profile
        && engine.scheduler_profile_missing(p)
    {
        let names = engine.scheduler().profiles().join(", ");
        return Err(PlaceError::UnknownProfile(p.clone(), names));
    }
    // Expired holds are gone before the first pod, as the housekeeping tick would have
    // done; the scheduler's clock is the decision time.
    engine.housekeeping();
    let mut view = if options.data_dir.is_some() {
        engine.compute_view().map_err(|e| PlaceError::Store {
            path: options
                .data_dir
                .as_deref()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
            message: e.to_string(),
        })?
    } else {
        UsageView {
            generated_ms: now_ms,
            ..UsageView::default()
        }
    };
    if let Some(f) = file {
        view.nodes.extend(f.view.nodes);
        view.builders.extend(f.view.builders);
        view.placements.extend(f.view.placements);
    }
    engine.publish_view(Arc::new(view));
    let feed = engine.cluster();
    feed.replace_namespaces(cluster.namespaces.clone());
    for kind in headroom_scheduler::snapshot::workloads::WorkloadKind::ALL {
        let of_kind = cluster.workloads.iter().filter(|w| w.kind == kind).cloned();
        feed.replace_workloads(kind, of_kind.collect());
    }
    // Volume objects from either file (a pod file may carry its claims).
    let volumes: Vec<_> = cluster
        .volumes
        .iter()
        .chain(&pods.volumes)
        .cloned()
        .collect();
    if !volumes.is_empty() {
        use headroom_scheduler::snapshot::volumes::VolumeKind;
        for kind in [
            VolumeKind::Class,
            VolumeKind::Pv,
            VolumeKind::Pvc,
            VolumeKind::CsiNode,
        ] {
            feed.replace_volumes(kind, volumes.clone());
        }
    }
    feed.replace_nodes(cluster.nodes.clone());
    feed.replace_pods(cluster.pods.clone());
    feed.replace_pdbs(cluster.pdbs.clone());
    feed.replace_priority_classes(cluster.priority_classes.clone());
    let scheduler = engine.scheduler();
    let evict = crate::preemption::EvictAtOnce::new(scheduler.cache().clone());
    let results = pods
        .pods
        .iter()
        .map(|pod| crate::preemption::place_one(scheduler, &evict, pod, options.profile.as_deref()))
        .collect();
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

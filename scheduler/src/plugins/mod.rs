//! Scheduler plugins, one file each, and the registry that assembles a profile's framework
//! ([`registry`]: one table row per plugin; adding a plugin is its file, its `pub mod` and
//! its row there, plus its line in the tables below and in docs/configuration.md, which a test checks
//! against the registry).
//!
//! The default profile is kube-scheduler's default plugin set, in its order and with its
//! weights, for the plugins headroom implements:
//!
//! | plugin | extension points | weight |
//! |---|---|---|
//! | SchedulingGates | PreEnqueue | |
//! | NodeUnschedulable | Filter | |
//! | NodeName | Filter | |
//! | TaintToleration | Filter, PreScore, Score | 3 |
//! | NodeAffinity | PreFilter, Filter, PreScore, Score | 2 |
//! | NodePorts | PreFilter, Filter | |
//! | NodeResourcesFit | PreFilter, Filter, Score | 1 |
//! | VolumeRestrictions | PreFilter, Filter | |
//! | NodeVolumeLimits | PreFilter, Filter, Reserve | |
//! | VolumeBinding | PreFilter, Filter, Reserve, PreBind | |
//! | VolumeZone | PreFilter, Filter | |
//! | PodTopologySpread | PreFilter, Filter, PreScore, Score | 2 |
//! | InterPodAffinity | PreFilter, Filter, PreScore, Score | 2 |
//! | DefaultPreemption | PostFilter | |
//! | NodeResourcesBalancedAllocation | PreScore, Score | 1 |
//! | ImageLocality | PreScore, Score | 1 |
//!
//! and then headroom's own (see [`crate::usage`] for the data they read):
//!
//! | plugin | extension points | weight | default |
//! |---|---|---|---|
//! | Reservation | PreFilter, Filter, Reserve | | on |
//! | NodeStartRate | PreFilter, Filter | | off |
//! | RealMemoryFit | PreFilter, Filter | | on |
//! | RealDiskFit | PreFilter, Filter | | on (database classes) |
//! | RealCpuFit | PreFilter, Filter | | off |
//! | History | PreScore, Score, Permit | 10 | on |
//! | RealHeadroom | PreScore, Score | 7 | on |
//! | Fragmentation | PreScore, Score | 7 | off |
//!
//! and the peers' plugins, each a faithful copy of another load-aware scheduler's, fed by
//! headroom's usage view ([`peers`] says how each metric is derived), for users migrating
//! with their tuning and for `simulate`/`sweep`'s policies `trimaran-tlp`, `trimaran-lvrb`,
//! `koordinator` and `crane`:
//!
//! | plugin | extension points | weight | default |
//! |---|---|---|---|
//! | TargetLoadPacking | PreScore, Score | 1 | off (Trimaran) |
//! | LoadVariationRiskBalancing | PreScore, Score | 1 | off (Trimaran) |
//! | LoadAwareScheduling | PreFilter, Filter, PreScore, Score | 1 | off (Koordinator) |
//! | Dynamic | PreFilter, Filter, PreScore, Score | 3 | off (crane) |
//!
//! The default weights reproduce seed 000's balance: History scores at most 30 and
//! RealHeadroom at most 100, so with weights 10 and 7 their maxima are 300 and 700 —
//! history up to 30 %, real resources up to 70 % of headroom's own 1000 points, next to
//! the upstream plugins' 1200. With no usage data at all, RealHeadroom skips and History
//! scores nothing, so headroom decides exactly as kube-scheduler.
//!
//! The volume plugins read PersistentVolumes, claims, StorageClasses and CSINodes from the
//! snapshot ([`crate::snapshot::volumes`]); each skips pods without volumes in PreFilter,
//! so such pods cost nothing more. VolumeBinding's PreBind writes the chosen PVs'
//! `claimRef`s under `serve` (through the [`volume_binding::VolumeBinderSlot`] in
//! [`PluginDeps`]).
//!
//! DefaultPreemption decides only (node and victims, in the decision record); the caller
//! acts on it outside the cycle (`serve`: nominatedNodeName, DisruptionTarget, deletion;
//! `place`: the victims leave the what-if cluster). In extender mode preemption stays
//! kube-scheduler's.
//!
//! Not implemented: DynamicResources.

pub mod balanced_allocation;
pub mod crane_dynamic;
pub mod default_preemption;
pub mod fragmentation;
pub mod history;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod load_aware;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_start_rate;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod peers;
pub mod pod_topology_spread;
pub mod real_cpu_fit;
pub mod real_disk_fit;
mod real_fit;
pub mod real_headroom;
pub mod real_memory_fit;
pub mod registry;
pub mod reservation;
pub mod scheduling_gates;
pub mod taint_toleration;
mod topology;
pub mod trimaran_lvrb;
pub mod trimaran_tlp;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

/// Builders of nodes, pods and usage views for tests (this crate's and, with the
/// `testutil` feature, its dependents').
#[cfg(any(test, feature = "testutil"))]
pub mod testutil;

pub use registry::{KNOWN_PLUGINS, KnownPlugin, build_framework, build_framework_with, known};

use std::sync::Arc;

use crate::config::CoreConfig;
use crate::reservation::{InMemoryReservations, ReservationSource};
use crate::usage::UsagePolicy;

/// What plugins may hold besides their args: handles to state that lives outside the
/// cycle (never I/O inside it).
#[derive(Clone)]
pub struct PluginDeps {
    /// Where the Reservation plugin reads reservations and reports their consumption.
    /// Default: an empty in-memory source.
    pub reservations: Arc<dyn ReservationSource>,
    /// How a pod's builder identity is derived (the collectors' rule, so that profiles
    /// computed from collected runs are found again at scheduling time).
    pub identity: crate::identity::IdentityConfig,
    /// The `usage` section: staleness, prediction percentile, class policies.
    pub policy: Arc<UsagePolicy>,
    /// Threads a cycle may use (`scheduler.parallelism`; 0: the machine's cores, at most
    /// 16). Default 1: serial.
    pub parallelism: usize,
    /// Where `serve` installs VolumeBinding's PreBind writer (empty: nothing to write).
    pub volume_binder: Arc<volume_binding::VolumeBinderSlot>,
}

impl PluginDeps {
    /// The dependencies a configuration implies (identity rule and usage policy), with no
    /// reservations.
    pub fn from_config(config: &CoreConfig) -> PluginDeps {
        PluginDeps {
            reservations: Arc::new(InMemoryReservations::default()),
            identity: config.identity.clone(),
            policy: Arc::new(config.usage.clone()),
            parallelism: config.scheduler.parallelism,
            volume_binder: Arc::default(),
        }
    }

    /// Replaces the reservation source.
    pub fn with_reservations(mut self, source: Arc<dyn ReservationSource>) -> PluginDeps {
        self.reservations = source;
        self
    }
}

impl Default for PluginDeps {
    fn default() -> Self {
        PluginDeps {
            reservations: Arc::new(InMemoryReservations::default()),
            identity: crate::identity::IdentityConfig::default(),
            policy: Arc::new(UsagePolicy::default()),
            parallelism: 1,
            volume_binder: Arc::default(),
        }
    }
}

impl std::fmt::Debug for PluginDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginDeps")
            .field("reservations", &self.reservations.current().len())
            .field("identity", &self.identity)
            .finish()
    }
}

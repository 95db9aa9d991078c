//! Cluster events that can make unschedulable pods schedulable, and the record of why an
//! attempt failed (which decides which events are worth a retry).

use std::collections::BTreeSet;

use serde::Serialize;

use crate::framework::{Code, Decision, Outcome, Status};

/// A change in the cluster that may let unschedulable pods fit (upstream's `ClusterEvent`,
/// reduced to the events headroom's plugins care about).
///
/// Which unschedulable pods an event moves (see [`ClusterEvent::may_help`]):
///
/// | event | moves every unschedulable pod except those rejected only by |
/// |---|---|
/// | `NodeAdded`, `NodeUpdated` | — (a new or changed node can cure any filter) |
/// | `PodDeleted` | node-only plugins: `NodeAffinity`, `NodeName`, `NodeUnschedulable`, `TaintToleration` |
/// | `AssignedPodAdded` | node-only plugins, `NodeResourcesFit`, `NodePorts` (a new pod only takes) |
/// | `AssignedPodUpdated` | node-only plugins, `NodePorts` (ports are immutable; a resize can free resources) |
/// | `UnschedulableTimeout` | — (the periodic flush retries everything that overstayed) |
/// | `UsageRefreshed` | every plugin but the usage-based ones ([`USAGE_PLUGINS`]): only they read the usage view |
/// | `VolumeChanged` | every plugin but the volume plugins ([`VOLUME_PLUGINS`]): only they read volumes |
///
/// Pods whose rejection names no plugin, or any plugin outside the table (headroom's own
/// usage-based plugins, say), move on every event: a needless retry costs one cycle, while a
/// missed one strands the pod until the timeout flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ClusterEvent {
    /// A node joined.
    NodeAdded,
    /// A node changed in a way scheduling can see: labels, taints, allocatable, the
    /// `unschedulable` flag (uncordon). Callers should not send it for heartbeats or
    /// condition-only status updates, which would retry every unschedulable pod each time.
    NodeUpdated,
    /// A pod bound to a node was deleted (or finished): frees resources and ports, and can
    /// lift anti-affinity or spread constraints.
    PodDeleted,
    /// A pod was bound to a node: can satisfy pod affinity or change spread skew.
    AssignedPodAdded,
    /// A pod bound to a node changed (labels for affinity, an in-place resize down).
    AssignedPodUpdated,
    /// Internal: the pod overstayed `unschedulableTimeout`.
    UnschedulableTimeout,
    /// A new usage view was published (the analytics refresh): real usage may have
    /// dropped, and a pod waiting for real room may have reached `usage.maxWait`.
    UsageRefreshed,
    /// A PersistentVolume, claim, StorageClass or CSINode was added, changed or deleted:
    /// can cure the volume plugins' rejections (a claim created or bound, a PV released).
    VolumeChanged,
}

/// headroom's plugins whose verdict depends on the usage view (or on time, as a start
/// rate does), so a refreshed view may change it.
pub const USAGE_PLUGINS: &[&str] = &[
    "RealMemoryFit",
    "RealCpuFit",
    "RealDiskFit",
    "NodeStartRate",
];

/// The volume plugins, whose verdicts depend on PVs, claims, classes and CSINodes.
pub const VOLUME_PLUGINS: &[&str] = &[
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
];

/// Plugins whose verdict depends only on the node and the pod itself, so no change to other
/// pods can alter it.
const NODE_ONLY_PLUGINS: &[&str] = &[
    "NodeAffinity",
    "NodeName",
    "NodeUnschedulable",
    "TaintToleration",
];

impl ClusterEvent {
    pub(crate) const ALL: [ClusterEvent; 8] = [
        ClusterEvent::NodeAdded,
        ClusterEvent::NodeUpdated,
        ClusterEvent::PodDeleted,
        ClusterEvent::AssignedPodAdded,
        ClusterEvent::AssignedPodUpdated,
        ClusterEvent::UnschedulableTimeout,
        ClusterEvent::UsageRefreshed,
        ClusterEvent::VolumeChanged,
    ];

    /// Upstream-style label, e.g. `NodeAdd`, for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            ClusterEvent::NodeAdded => "NodeAdd",
            ClusterEvent::NodeUpdated => "NodeUpdate",
            ClusterEvent::PodDeleted => "AssignedPodDelete",
            ClusterEvent::AssignedPodAdded => "AssignedPodAdd",
            ClusterEvent::AssignedPodUpdated => "AssignedPodUpdate",
            ClusterEvent::UnschedulableTimeout => "UnschedulableTimeout",
            ClusterEvent::UsageRefreshed => "UsageRefresh",
            ClusterEvent::VolumeChanged => "StorageChange",
        }
    }

    /// Whether a plugin's rejection could be undone by this event.
    fn may_cure(self, plugin: &str) -> bool {
        let node_only = NODE_ONLY_PLUGINS.contains(&plugin);
        match self {
            ClusterEvent::NodeAdded
            | ClusterEvent::NodeUpdated
            | ClusterEvent::UnschedulableTimeout => true,
            ClusterEvent::PodDeleted => !node_only,
            ClusterEvent::AssignedPodAdded => {
                !node_only && plugin != "NodeResourcesFit" && plugin != "NodePorts"
            }
            ClusterEvent::AssignedPodUpdated => !node_only && plugin != "NodePorts",
            ClusterEvent::UsageRefreshed => USAGE_PLUGINS.contains(&plugin),
            ClusterEvent::VolumeChanged => VOLUME_PLUGINS.contains(&plugin),
        }
    }

    /// Whether this event may make a pod rejected by `rejectors` schedulable: true unless
    /// every rejecting plugin is one the event cannot affect (see the table on the type).
    pub fn may_help<'a>(self, rejectors: impl IntoIterator<Item = &'a str>) -> bool {
        let mut any = false;
        for p in rejectors {
            any = true;
            if self.may_cure(p) {
                return true;
            }
        }
        // Nobody to blame: be conservative and retry.
        !any
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A small set of events, recorded for each pod while it is being scheduled so that an event
/// that arrives mid-cycle is not lost (upstream's in-flight events / `moveRequestCycle`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EventSet(u8);

impl EventSet {
    pub(crate) fn insert(&mut self, e: ClusterEvent) {
        self.0 |= e.bit();
    }

    pub(crate) fn iter(self) -> impl Iterator<Item = ClusterEvent> {
        ClusterEvent::ALL
            .into_iter()
            .filter(move |e| self.0 & e.bit() != 0)
    }
}

/// How an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum FailureKind {
    /// No node fits: the pod waits among the unschedulable pods for a helpful event.
    Unschedulable,
    /// Something went wrong that is not about fit (a plugin error, a failed bind): the pod is
    /// retried after its backoff, without waiting for an event.
    Error,
}

/// Why a scheduling attempt failed, as [`SchedulingQueue::add_unschedulable`](super::SchedulingQueue::add_unschedulable)
/// needs it: the kind, the plugins that rejected the pod (upstream's `UnschedulablePlugins`),
/// and the message shown in `/queue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Unschedulable or error.
    pub kind: FailureKind,
    /// The plugins that rejected the pod on some node or in PreFilter.
    pub plugins: BTreeSet<&'static str>,
    /// The FailedScheduling message.
    pub message: String,
}

impl Failure {
    /// An unschedulable failure blamed on `plugins`.
    pub fn unschedulable(
        message: impl Into<String>,
        plugins: impl IntoIterator<Item = &'static str>,
    ) -> Self {
        Failure {
            kind: FailureKind::Unschedulable,
            plugins: plugins.into_iter().filter(|p| !p.is_empty()).collect(),
            message: message.into(),
        }
    }

    /// An error (retried after backoff regardless of events).
    pub fn error(message: impl Into<String>) -> Self {
        Failure {
            kind: FailureKind::Error,
            plugins: BTreeSet::new(),
            message: message.into(),
        }
    }
}

impl From<&Status> for Failure {
    /// Rejections become unschedulable failures blamed on the status's plugin; anything else
    /// (an `Error`, or a success/skip that still ended the attempt) is an error.
    fn from(s: &Status) -> Self {
        if s.is_rejected() {
            Failure::unschedulable(s.message(), [s.plugin])
        } else if s.code == Code::Error {
            Failure::error(s.message())
        } else {
            Failure::error(s.to_string())
        }
    }
}

impl From<Status> for Failure {
    fn from(s: Status) -> Self {
        Failure::from(&s)
    }
}

impl From<&Decision> for Failure {
    /// An unschedulable outcome is blamed on every plugin that rejected some node or the pod
    /// in PreFilter; an error outcome (or a placed pod whose later steps failed) is an error.
    fn from(d: &Decision) -> Self {
        match &d.outcome {
            Outcome::Unschedulable { message } => {
                let plugins = d
                    .pre_filter
                    .iter()
                    .filter(|s| s.is_rejected())
                    .chain(d.rejected.iter().map(|(_, s)| s))
                    .chain(d.absent.iter())
                    .map(|s| s.plugin);
                Failure::unschedulable(message.clone(), plugins)
            }
            Outcome::Error { message } => Failure::error(message.clone()),
            Outcome::Placed { node } => Failure::error(format!("placed on {node} but not bound")),
        }
    }
}

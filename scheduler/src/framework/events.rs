//! Cluster events that can make unschedulable pods schedulable, and the set of them a plugin
//! declares (upstream's `ClusterEvent` and `EnqueueExtensions.EventsToRegister`).
//!
//! Each plugin says which events may undo its own rejections
//! ([`Plugin::events_to_register`](super::Plugin::events_to_register)); the queue moves an
//! unschedulable pod on an event only when the event is in the set of some plugin that
//! rejected it ([`QueueingHints`]). A plugin that declares nothing gets
//! [`ClusterEvents::OBJECTS`]: every change to nodes and pods, and the periodic flush.

use std::collections::HashMap;

use serde::Serialize;

/// A change in the cluster that may let unschedulable pods fit (upstream's `ClusterEvent`,
/// reduced to the events headroom's plugins care about).
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
    /// Internal: the pod overstayed `unschedulableTimeout`. Every plugin's rejection is
    /// retried on it (the queue does not ask the hints).
    UnschedulableTimeout,
    /// A new usage view was published (the analytics refresh): real usage may have
    /// dropped, and a pod waiting for real room may have reached `usage.maxWait`.
    UsageRefreshed,
    /// Some node's figures in a peer's own metric pipeline were refreshed
    /// ([`crate::usage_context::held`]): what Koordinator's NodeMetric updates and crane's
    /// node annotation rewrites are upstream.
    PeerMetricsRefreshed,
    /// A PersistentVolume, claim, StorageClass or CSINode was added, changed or deleted:
    /// can cure the volume plugins' rejections (a claim created or bound, a PV released).
    VolumeChanged,
}

impl ClusterEvent {
    /// Every event.
    pub const ALL: [ClusterEvent; 9] = [
        ClusterEvent::NodeAdded,
        ClusterEvent::NodeUpdated,
        ClusterEvent::PodDeleted,
        ClusterEvent::AssignedPodAdded,
        ClusterEvent::AssignedPodUpdated,
        ClusterEvent::UnschedulableTimeout,
        ClusterEvent::UsageRefreshed,
        ClusterEvent::PeerMetricsRefreshed,
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
            ClusterEvent::PeerMetricsRefreshed => "PeerMetricsRefresh",
            ClusterEvent::VolumeChanged => "StorageChange",
        }
    }

    const fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// A set of [`ClusterEvent`]s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ClusterEvents(u16);

impl ClusterEvents {
    /// No event.
    pub const NONE: ClusterEvents = ClusterEvents(0);
    /// Every event.
    pub const ALL: ClusterEvents = ClusterEvents::of(&ClusterEvent::ALL);
    /// What a plugin that declares nothing gets: every change to nodes and pods, and the
    /// timeout flush; not usage refreshes or volume changes, which only the plugins that
    /// read usage or volumes declare.
    pub const OBJECTS: ClusterEvents = ClusterEvents::ALL
        .without(ClusterEvent::UsageRefreshed)
        .without(ClusterEvent::PeerMetricsRefreshed)
        .without(ClusterEvent::VolumeChanged);
    /// For plugins whose verdict depends only on the node and the pod itself (node
    /// affinity, taints, `nodeName`, cordons): no change to other pods can alter it.
    pub const NODE_ONLY: ClusterEvents = ClusterEvents::of(&[
        ClusterEvent::NodeAdded,
        ClusterEvent::NodeUpdated,
        ClusterEvent::UnschedulableTimeout,
    ]);

    /// The set of `events`.
    pub const fn of(events: &[ClusterEvent]) -> ClusterEvents {
        let mut bits = 0;
        let mut i = 0;
        while i < events.len() {
            bits |= events[i].bit();
            i += 1;
        }
        ClusterEvents(bits)
    }

    /// This set and `e`.
    pub const fn with(self, e: ClusterEvent) -> ClusterEvents {
        ClusterEvents(self.0 | e.bit())
    }

    /// This set without `e`.
    pub const fn without(self, e: ClusterEvent) -> ClusterEvents {
        ClusterEvents(self.0 & !e.bit())
    }

    /// Adds `e`.
    pub fn insert(&mut self, e: ClusterEvent) {
        self.0 |= e.bit();
    }

    /// Whether `e` is in the set.
    pub const fn contains(self, e: ClusterEvent) -> bool {
        self.0 & e.bit() != 0
    }

    /// The events in the set, in [`ClusterEvent::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = ClusterEvent> {
        ClusterEvent::ALL
            .into_iter()
            .filter(move |e| self.contains(*e))
    }
}

/// Which events may undo each plugin's rejections, by plugin name: built by the scheduler
/// from its profiles' plugins, read by the queue (upstream's `queueingHintMap`).
#[derive(Debug, Clone, Default)]
pub struct QueueingHints(HashMap<&'static str, ClusterEvents>);

impl QueueingHints {
    /// Records `plugin`'s events (a plugin in several profiles declares the same set).
    pub fn insert(&mut self, plugin: &'static str, events: ClusterEvents) {
        let e = self.0.entry(plugin).or_default();
        *e = e.union(events);
    }

    /// The events declared by `plugin`, if it is known.
    pub fn get(&self, plugin: &str) -> Option<ClusterEvents> {
        self.0.get(plugin).copied()
    }

    /// Whether `event` may make a pod rejected by `rejectors` schedulable: true when some
    /// rejecting plugin declared it, when a rejector is unknown (a plugin outside every
    /// profile, or a rejection naming none) or when nobody is blamed — a needless retry costs
    /// one cycle, a missed one strands the pod until the timeout flush.
    pub fn may_help<'a>(
        &self,
        event: ClusterEvent,
        rejectors: impl IntoIterator<Item = &'a str>,
    ) -> bool {
        if event == ClusterEvent::UnschedulableTimeout {
            return true;
        }
        let mut any = false;
        for p in rejectors {
            any = true;
            if self.get(p).is_none_or(|set| set.contains(event)) {
                return true;
            }
        }
        !any
    }
}

impl ClusterEvents {
    /// Both sets.
    pub const fn union(self, o: ClusterEvents) -> ClusterEvents {
        ClusterEvents(self.0 | o.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_and_hints() {
        let s = ClusterEvents::OBJECTS.without(ClusterEvent::AssignedPodAdded);
        assert!(!s.contains(ClusterEvent::AssignedPodAdded));
        assert!(s.contains(ClusterEvent::PodDeleted));
        assert!(!s.contains(ClusterEvent::UsageRefreshed));
        assert!(
            s.with(ClusterEvent::UsageRefreshed)
                .contains(ClusterEvent::UsageRefreshed)
        );
        assert_eq!(ClusterEvents::ALL.iter().count(), 9);
        assert!(!ClusterEvents::OBJECTS.contains(ClusterEvent::PeerMetricsRefreshed));
        let mut h = QueueingHints::default();
        h.insert("Taints", ClusterEvents::NODE_ONLY);
        h.insert("Fit", s);
        assert!(!h.may_help(ClusterEvent::PodDeleted, ["Taints"]));
        assert!(h.may_help(ClusterEvent::PodDeleted, ["Taints", "Fit"]));
        assert!(!h.may_help(ClusterEvent::AssignedPodAdded, ["Taints", "Fit"]));
        // Unknown plugins and nobody to blame: retry.
        assert!(h.may_help(ClusterEvent::AssignedPodAdded, ["Unknown"]));
        assert!(h.may_help(ClusterEvent::AssignedPodAdded, std::iter::empty::<&str>()));
        // The timeout flush retries everything.
        assert!(h.may_help(ClusterEvent::UnschedulableTimeout, ["Taints"]));
    }
}

//! Queue entries and the active queue's order (upstream's `PrioritySort`).

use std::cmp::Reverse;
use std::sync::Arc;

use tokio::time::Instant;

use crate::key::PodId;
use crate::snapshot::PodInfo;

/// A pod as the queue hands it out (upstream's `QueuedPodInfo`).
#[derive(Debug, Clone)]
pub struct QueuedPodInfo {
    /// The pod, in its latest version known to the queue.
    pub pod_info: Arc<PodInfo>,
    /// When the pod was added, or re-added after a failed attempt; the FIFO tie-breaker of
    /// the active queue and the start of its backoff and of its unschedulable timeout.
    pub timestamp: Instant,
    /// Scheduling attempts so far, counting the one the pod is popped for.
    pub attempts: u32,
    /// When the first attempt started (`None` until the pod is first popped); the end-to-end
    /// scheduling latency metric starts here.
    pub initial_attempt_timestamp: Option<Instant>,
}

impl QueuedPodInfo {
    /// The queue's id of the pod.
    pub fn id(&self) -> PodId {
        PodId::of(&self.pod_info)
    }
}

/// Upstream's `PrioritySort` QueueSort plugin: higher `spec.priority` first, then the pod
/// queued earlier first.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueSort;

impl QueueSort {
    /// The plugin name, as in upstream profiles.
    pub const NAME: &str = "PrioritySort";

    /// Whether `a` goes before `b`.
    pub fn less(a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        queue_sort_less(a, b)
    }
}

/// Whether `a` goes before `b` in the active queue: higher priority first, then the earlier
/// timestamp (upstream's `PrioritySort.Less`).
pub fn queue_sort_less(a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
    let (pa, pb) = (a.pod_info.priority, b.pod_info.priority);
    pa > pb || (pa == pb && a.timestamp < b.timestamp)
}

/// The active queue's sort key: the same order as [`queue_sort_less`], made total by an
/// insertion sequence number. Upstream's heap leaves equal timestamps in arbitrary order;
/// a sequence number keeps them FIFO, which matters when the clock is coarse or paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ActiveOrd {
    priority: Reverse<i32>,
    timestamp: Instant,
    seq: u64,
}

impl ActiveOrd {
    pub(crate) fn new(info: &QueuedPodInfo, seq: u64) -> Self {
        ActiveOrd {
            priority: Reverse(info.pod_info.priority),
            timestamp: info.timestamp,
            seq,
        }
    }

    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }
}

/// Kept so the ordering of [`ActiveOrd`] is visibly the one [`queue_sort_less`] defines.
#[cfg(test)]
pub(crate) fn active_cmp(a: &QueuedPodInfo, b: &QueuedPodInfo) -> std::cmp::Ordering {
    ActiveOrd::new(a, 0).cmp(&ActiveOrd::new(b, 0))
}

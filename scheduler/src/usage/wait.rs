//! Waiting vs placing: how long real usage alone may keep a pod off every node
//! (`usage.maxWait`), and the fallback after it.
//!
//! The scheduler writes a [`Wait`] into the cycle state before the plugins run: how long
//! the pod has waited since its first attempt (the queue's `initial_attempt_timestamp`,
//! handed over by the scheduling loop) and whether the fallback applies to this cycle. The
//! fallback applies only when a normal cycle found no node, some node was rejected by a
//! relaxable real filter (one whose
//! [`relaxed_by_usage_fallback`](crate::framework::Plugin::relaxed_by_usage_fallback) is
//! true: RealMemoryFit and RealCpuFit; disk holds and reservations are promises to other
//! pods) and the pod has waited at least `maxWait`: the framework then runs its second
//! pass ([`Framework::schedule_passes`](crate::framework::Framework::schedule_passes))
//! with [`Wait::fallback`] set, in which those filters let nodes through (the verdict
//! they would have given stays visible in the detail) and History stays out of the score,
//! so RealHeadroom sends the pod to the least-hot node that fits by requests. RealMemoryFit
//! still keeps the pod off a node where its *expected* demand (means, no reserve) passes
//! the node's memory while some schedulable node has that room (only requests, affinity or
//! taints keep the pod off it there, and they free up as pods end): such a placement would
//! more likely than not start the OOM killer. With no such room anywhere, every node
//! passes. No I/O, no clock: the wait is measured by the caller.

use crate::framework::{CycleState, Status};
pub use crate::framework::{Wait, relaxable_rejections, waiting_message};

/// Whether the usage fallback applies to this cycle.
pub fn fallback_active(state: &CycleState) -> bool {
    state.read::<Wait>().is_some_and(|w| w.fallback)
}

/// What a relaxable filter returns instead of `rejected` when the fallback applies: the
/// node passes; when explaining, the detail keeps the verdict it would have given.
pub fn relaxed(rejected: Status, explain: bool) -> Status {
    let s = Status::success();
    if explain {
        let why = match &rejected.detail {
            Some(d) => format!("{} ({d})", rejected.message()),
            None => rejected.message(),
        };
        s.with_detail(format!("passed by the usage fallback; would reject: {why}"))
    } else {
        s
    }
}

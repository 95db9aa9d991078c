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
//! pods) and the pod has waited at least `maxWait`: the scheduler then runs the cycle
//! again with [`Wait::fallback`] set, in which those filters let nodes through (the verdict
//! they would have given stays visible in the detail) and History stays out of the score,
//! so RealHeadroom sends the pod to the least-hot node that fits by requests. RealMemoryFit
//! still keeps the pod off a node where its *expected* demand (means, no reserve) passes
//! the node's memory while some schedulable node has that room (only requests, affinity or
//! taints keep the pod off it there, and they free up as pods end): such a placement would
//! more likely than not start the OOM killer. With no such room anywhere, every node
//! passes. No I/O, no clock: the wait is measured by the caller.

use std::sync::Arc;
use std::time::Duration;

use crate::framework::{CycleState, Decision, Framework, Status};

/// What the scheduler tells a cycle about the pod's wait (a [`CycleState`] slot).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Wait {
    /// Time since the pod's first scheduling attempt (zero on the first attempt).
    pub waited: Duration,
    /// The usage fallback applies to this cycle: the relaxable filters let nodes through
    /// (RealMemoryFit all but those the pod's expected memory would overflow while another
    /// node has room).
    pub fallback: bool,
    /// The queue's tail this pod may wait in: p99 − p50 of the time to schedule of the
    /// pods the scheduling loop placed without a hold, over `usage.warmWait.tailWindow`,
    /// or zero when the tail has no room for another held build
    /// ([`QueueTail::tail_for`](crate::usage::QueueTail::tail_for)). The warm wait holds a
    /// pod only while its expected wait stays below it ([`crate::usage::warm`]); zero
    /// (nothing held) outside the loop: `place`, the extender.
    pub tail: Duration,
    /// The nodes other held builds wait for, each until its hold would end
    /// ([`QueueTail::awaited_by_others`](crate::usage::QueueTail::awaited_by_others)): the
    /// build expected to end on such a node frees room for the build already waiting, so
    /// the warm wait does not hold a second one for it. Empty outside the loop.
    pub awaited: Arc<[Arc<str>]>,
}

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

/// The plugins of `fw` the fallback relaxes that rejected some node in `d`, in profile
/// order.
pub fn relaxable_rejections(fw: &Framework, d: &Decision) -> Vec<&'static str> {
    fw.plugins()
        .iter()
        .filter(|r| r.relaxed_by_usage_fallback())
        .map(|r| r.name)
        .filter(|p| d.rejected.iter().any(|(_, s)| s.plugin == *p))
        .collect()
}

/// The sentence appended to the FailedScheduling message of a pod that waits for real
/// room: constant per pod, so repeated failures still fold into one event series.
pub fn waiting_message(max_wait: Duration) -> String {
    format!(
        " Waiting for real free memory/CPU: after usage.maxWait ({}) from its first attempt the pod goes to the least-hot node that fits by requests and can hold its expected memory.",
        humantime_serde::re::humantime::format_duration(max_wait)
    )
}

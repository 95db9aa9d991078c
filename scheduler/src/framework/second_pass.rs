//! The second pass: the usage fallback (`usage.maxWait`) as a phase of the cycle.
//!
//! Real usage may keep a pod off every node that fits it by requests: the real memory and
//! CPU fits reject nodes whose measured use leaves too little room. Such room comes back
//! only as other pods end, so a pod must not wait for it forever. Plugins declare whether
//! their Filter may be relaxed ([`Plugin::relaxed_by_usage_fallback`](super::Plugin)); when
//! the first pass finds no node and one of them rejected some node, the framework either
//! tells the pod how long it may still wait (the FailedScheduling message says so) or,
//! once it has waited `usage.maxWait`, runs the cycle again with [`Wait::fallback`] set: the
//! declared filters let nodes through, and the second pass's record, with
//! [`Decision::fallback`] set, is the decision. What the plugins do under the fallback is
//! theirs to say ([`crate::usage::wait`]); the framework knows no plugin by name.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use super::{CycleState, Decision, Fallback, Framework, Outcome};
use crate::snapshot::{PodInfo, Snapshot};

/// What the scheduler tells a cycle about the pod's wait (a [`CycleState`] input).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Wait {
    /// Time since the pod's first scheduling attempt (zero on the first attempt).
    pub waited: Duration,
    /// The second pass (the usage fallback) is running: the relaxable filters let nodes
    /// through (RealMemoryFit all but those the pod's expected memory would overflow while
    /// another node has room). Set by [`Framework::schedule_passes`].
    pub fallback: bool,
    /// The queue's tail this pod may wait in: p99 − p50 of the time to schedule of the
    /// pods the scheduling loop placed without a hold, over `usage.warmWait.tailWindow`,
    /// or zero when the tail has no room for another held build
    /// ([`QueueTail::tail_for`](crate::usage::QueueTail::tail_for)). The warm wait (History's
    /// Permit) holds a pod only while its expected wait stays below it
    /// ([`crate::usage::warm`]); zero (nothing held) outside the loop: `place`, the extender.
    pub tail: Duration,
    /// The nodes other held builds wait for, each until its hold would end
    /// ([`QueueTail::awaited_by_others`](crate::usage::QueueTail::awaited_by_others)): the
    /// build expected to end on such a node frees room for the build already waiting, so
    /// the warm wait does not hold a second one for it. Empty outside the loop.
    pub awaited: Arc<[Arc<str>]>,
}

impl Framework {
    /// The cycle with its second pass: [`schedule_in`](Self::schedule_in) a state holding
    /// `wait`, and when no node fits and a relaxable filter rejected some node, either the
    /// waiting sentence appended to the FailedScheduling message (the pod has waited less
    /// than `usage.maxWait`) or the second pass, whose record is the decision.
    pub fn schedule_passes<R: Rng + ?Sized>(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        rng: &mut R,
        explain: bool,
        wait: Wait,
    ) -> (Decision, CycleState) {
        let waited = wait.waited;
        let cycle_state = |fallback: bool| {
            let mut state = CycleState::new(explain);
            state.write_input(Wait {
                fallback,
                ..wait.clone()
            });
            state
        };
        let (mut decision, mut state) = self.schedule_in(pod, snapshot, rng, cycle_state(false));
        let Some(max_wait) = self.second_pass_after else {
            return (decision, state);
        };
        if !matches!(decision.outcome, Outcome::Unschedulable { .. }) {
            return (decision, state);
        }
        let relaxable = relaxable_rejections(self, &decision);
        if relaxable.is_empty() {
            return (decision, state);
        }
        if waited >= max_wait {
            let (mut d, st) = self.schedule_in(pod, snapshot, rng, cycle_state(true));
            if d.node().is_some() {
                d.fallback = Some(Fallback {
                    waited_seconds: waited.as_secs_f64(),
                    max_wait_seconds: max_wait.as_secs_f64(),
                    relaxed: relaxable.iter().map(|p| p.to_string()).collect(),
                });
            } else {
                d.notes.push(format!(
                    "usage fallback: waited past usage.maxWait, but no node fits even with {} relaxed",
                    relaxable.join(", ")
                ));
            }
            decision = d;
            state = st;
        } else if let Outcome::Unschedulable { message } = &mut decision.outcome {
            message.push_str(&waiting_message(max_wait));
        }
        (decision, state)
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

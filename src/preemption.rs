//! Acting on a preemption decision, outside the scheduling cycle.
//!
//! DefaultPreemption (`plugins::default_preemption`) only records a
//! [`Nomination`](crate::framework::Nomination) in the decision. What follows is the caller's:
//! - `place`: the victims leave the what-if cluster and the pod is scheduled again with its
//!   `status.nominatedNodeName` set, as kube-scheduler retries it once the victims are gone
//!   ([`place_after_preemption`]);
//! - `serve`: the pod's `status.nominatedNodeName` is patched with its FailedScheduling
//!   condition, and every victim gets upstream's `DisruptionTarget` condition and is deleted
//!   (`kube::preempt`, with the bodies built here: [`nominated_node_patch`],
//!   [`disruption_target_patch`]).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::framework::decision::Explanation;
use crate::framework::{Decision, Nomination};
use crate::plugins::default_preemption::REASON_PREEMPTION_BY_SCHEDULER;
use crate::scheduler::Scheduler;
use crate::snapshot::PodInfo;

/// The `DisruptionTarget` condition's message, as upstream's executor writes it.
pub fn disruption_message(scheduler_name: &str) -> String {
    format!("{scheduler_name}: preempting to accommodate a higher priority pod")
}

/// The strategic-merge body of `pods/status` that marks a victim (`DisruptionTarget`,
/// status `True`, reason `PreemptionByScheduler`, upstream's message).
pub fn disruption_target_patch(scheduler_name: &str, now: &str) -> Value {
    json!({
        "status": {
            "conditions": [{
                "type": "DisruptionTarget",
                "status": "True",
                "reason": REASON_PREEMPTION_BY_SCHEDULER,
                "message": disruption_message(scheduler_name),
                "lastTransitionTime": now,
            }]
        }
    })
}

/// The `pods/status` body fields that nominate the preemptor (merged into the
/// FailedScheduling condition's patch).
pub fn nominated_node_patch(node: &str) -> Value {
    json!({ "status": { "nominatedNodeName": node } })
}

/// `place`: when `first` nominated a node, removes its victims from the scheduler's
/// snapshot (a what-if run deletes them at once: no grace period) and schedules `pod` again
/// with `status.nominatedNodeName` set, so it goes to the nominated node as kube-scheduler's
/// retry does. The explanation is the second cycle's, carrying the nomination and the
/// victims, with the first FailedScheduling message as a note. Without a nomination it is
/// `first`'s.
pub fn place_after_preemption(
    scheduler: &mut Scheduler,
    pod: &Pod,
    first: Decision,
    profile: Option<&str>,
) -> Explanation {
    let Some(nomination) = first.nomination.clone() else {
        return first.explain();
    };
    remove_victims(scheduler, &nomination);
    let mut nominated = pod.clone();
    nominated
        .status
        .get_or_insert_with(Default::default)
        .nominated_node_name = Some(nomination.node.to_string());
    let info = PodInfo::new(Arc::new(nominated));
    let second = scheduler.schedule_one(&info, profile, true).decision;
    let mut out = second.explain();
    out.nominated_node = Some(nomination.node.to_string());
    out.victims = nomination.victim_keys();
    if let crate::framework::Outcome::Unschedulable { message } = &first.outcome {
        out.notes
            .insert(0, format!("first attempt (before preemption): {message}"));
    }
    out
}

/// Removes the victims of `nomination` from the scheduler's snapshot.
fn remove_victims(scheduler: &mut Scheduler, nomination: &Nomination) {
    let snap = scheduler.snapshot_mut();
    for v in &nomination.victims {
        snap.remove_pod(&v.namespace, &v.name, &v.uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_match_upstream() {
        let p = disruption_target_patch("default-scheduler", "2024-01-01T00:00:00Z");
        let c = &p["status"]["conditions"][0];
        assert_eq!(c["type"], "DisruptionTarget");
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "PreemptionByScheduler");
        assert_eq!(
            c["message"],
            "default-scheduler: preempting to accommodate a higher priority pod"
        );
        assert_eq!(
            nominated_node_patch("n1")["status"]["nominatedNodeName"],
            "n1"
        );
    }
}

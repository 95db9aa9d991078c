//! Acting on a preemption decision, outside the scheduling cycle.
//!
//! DefaultPreemption (`plugins::default_preemption`) only records a
//! [`Nomination`](headroom_scheduler::framework::Nomination) in the decision. What follows is the caller's:
//! - `place`: the victims leave the what-if cluster ([`EvictAtOnce`], its
//!   [`OutcomeHandler`]) and the pod is scheduled again with its `status.nominatedNodeName`
//!   set, as kube-scheduler retries it once the victims are gone ([`place_one`]);
//! - `simulate`: the victims leave the farm and their controllers make them again
//!   (`simulate::run`'s handler);
//! - `serve`: the pod's `status.nominatedNodeName` is patched with its FailedScheduling
//!   condition, and every victim gets upstream's `DisruptionTarget` condition and is deleted
//!   (`kube::preempt`, with the bodies built here: [`nominated_node_patch`],
//!   [`disruption_target_patch`]).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::decisions::{OutcomeHandler, Settled};
use headroom_scheduler::cache::Cache;
use headroom_scheduler::framework::decision::Explanation;
use headroom_scheduler::plugins::default_preemption::REASON_PREEMPTION_BY_SCHEDULER;
use headroom_scheduler::scheduler::Scheduler;
use headroom_scheduler::snapshot::PodInfo;

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

/// `place`'s [`OutcomeHandler`]: a what-if run deletes preemption's victims at once (no
/// grace period) from the engine's snapshot, as `serve`'s reporter deletes them from the
/// cluster and `simulate` from its farm.
pub struct EvictAtOnce {
    cache: Arc<Cache>,
}

impl EvictAtOnce {
    /// The handler over the engine's cache.
    pub fn new(cache: Arc<Cache>) -> EvictAtOnce {
        EvictAtOnce { cache }
    }
}

impl OutcomeHandler for EvictAtOnce {
    fn settled(&self, settled: Settled) {
        if let Some(n) = &settled.nomination {
            self.cache.update(|c| {
                let snap = c.snapshot_mut();
                for v in &n.victims {
                    snap.remove_pod(&v.key(), &v.uid);
                }
            });
        }
    }
}

/// `place`: schedules `pod`; when the cycle nominated a node, `handler` acts on the
/// outcome (the victims leave) and `pod` is scheduled again with
/// `status.nominatedNodeName` set, so it goes to the nominated node as kube-scheduler's
/// retry does. The explanation is the second cycle's, carrying the nomination and the
/// victims, with the first FailedScheduling message as a note; without a nomination it
/// is the first's.
pub fn place_one(
    scheduler: &Scheduler,
    handler: &dyn OutcomeHandler,
    pod: &Pod,
    profile: Option<&str>,
) -> Explanation {
    let info = PodInfo::new(Arc::new(pod.clone()));
    let first = scheduler.schedule_one(&info, profile, true).decision;
    let Some(nomination) = first.nomination.clone() else {
        return first.explain();
    };
    handler.settled(Settled::of(&first, None));
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
    if let headroom_scheduler::framework::Outcome::Unschedulable { message } = &first.outcome {
        out.notes
            .insert(0, format!("first attempt (before preemption): {message}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use headroom_scheduler::framework::Outcome;
    use headroom_scheduler::key::PodKey;
    use headroom_scheduler::plugins::testutil::{info, node, pod};
    use headroom_scheduler::snapshot::Snapshot;
    use serde_json::json;

    fn prio_pod(name: &str, cpu: &str, priority: i32, node: Option<&str>) -> PodInfo {
        let mut extra = json!({"spec": {"priority": priority,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}});
        if let Some(n) = node {
            extra["spec"]["nodeName"] = json!(n);
            extra["status"] = json!({"phase": "Running", "startTime": "2024-01-01T00:00:00Z"});
        }
        info(pod(name, extra))
    }

    /// Upstream's nominator: a nominated pod holds its node against pods of lower or equal
    /// priority (not higher) until it is placed there.
    #[test]
    fn nominated_pods_hold_their_node() {
        let s = Scheduler::new(&Config::default().core()).unwrap();
        let low = prio_pod("low", "3", 100, Some("n1"));
        s.cache().update(|c| {
            c.replace(Snapshot::build(
                [node("n1", json!({}))],
                [(*low.pod).clone()],
            ))
        });
        let a = prio_pod("a", "2", 1000, None);
        let first = s.schedule_one(&a, None, false).decision;
        let n = first.nomination.clone().expect("a preempts");
        assert_eq!(&*n.node, "n1");
        assert_eq!(n.victim_keys(), ["default/low"]);
        assert!(
            matches!(&first.outcome, Outcome::Unschedulable { message } if !message.contains("preemption:"))
        );
        // The victim is gone (deleted); `a` has not been retried yet.
        s.cache().update(|c| {
            c.snapshot_mut()
                .remove_pod(&PodKey::new("default", "low"), &low.uid)
        });
        // b (500 ≤ 1000) would fit alone (4 free) but not beside a's 2 CPUs.
        let b = s
            .schedule_one(&prio_pod("b", "3", 500, None), None, true)
            .decision;
        assert_eq!(b.node(), None);
        let Outcome::Unschedulable { message } = &b.outcome else {
            panic!("{:?}", b.outcome)
        };
        assert!(
            message.starts_with("0/1 nodes are available: 1 Insufficient cpu."),
            "{message}"
        );
        assert!(
            b.rejected[0]
                .1
                .detail
                .as_deref()
                .unwrap_or("")
                .contains("default/a")
        );
        // c (2000 > 1000) does not see a's nomination.
        let c = s.schedule_one(&prio_pod("c", "1", 2000, None), None, false);
        assert_eq!(c.decision.node(), Some("n1"));
        // a, retried, takes its node and its nomination is done.
        let mut retried = (*a.pod).clone();
        retried
            .status
            .get_or_insert_with(Default::default)
            .nominated_node_name = Some("n1".into());
        let again = s.schedule_one(&PodInfo::new(Arc::new(retried)), None, false);
        assert_eq!(again.decision.node(), Some("n1"));
        assert!(!s.snapshot().policy().has_nominations());
    }

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

//! RealMemoryFit: keep a share of each node's memory really free (seed 003's MySQL rule).
//!
//! Rejects a node when `total − (real_used + recently_assigned + pod_predicted) < reserve`,
//! with `reserve = total × memoryReservePercent` of the pod's class (default 10 %). `total`
//! is the node's memory capacity, `real_used` its measured working set (the larger of now
//! and the windowed statistic), `recently_assigned` the predicted memory of pods placed after
//! its newest sample, `pod_predicted` the pod's prediction (profile, annotation or request).
//! Nodes with stale or missing usage follow `usage.onStale`.

use std::sync::Arc;

use crate::framework::{
    CycleState, FilterPlugin, NodeBatch, NodeNames, Plugin, PreFilterPlugin, Registered, Status,
};
use crate::quantity::format_bytes;
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};
use crate::usage::node::degraded_status;
use crate::usage::{CycleUsage, NodeReal, UsagePolicy, pod_usage};

use super::{PluginDeps, real_fit};

/// Plugin name.
pub const NAME: &str = "RealMemoryFit";
/// The reason counted in FailedScheduling messages.
pub const REASON: &str = "node(s) didn't have enough real free memory";

/// The RealMemoryFit plugin. Its settings come from the `usage` section (class reserves).
#[derive(Debug)]
pub struct RealMemoryFit {
    policy: Arc<UsagePolicy>,
    identity: headroom_collectors::IdentityConfig,
}

impl RealMemoryFit {
    /// Creates the plugin.
    pub fn new(deps: &PluginDeps) -> Self {
        RealMemoryFit {
            policy: deps.policy.clone(),
            identity: deps.identity.clone(),
        }
    }

    /// Registers its extension points (PreFilter, Filter).
    pub fn register(self) -> Registered {
        let me = Arc::new(self);
        Registered {
            pre_filter: Some(me.clone()),
            filter: Some(me),
            ..Registered::new(NAME)
        }
    }
}

impl Plugin for RealMemoryFit {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Reads the usage view: a refresh may show the room.
    fn events_to_register(&self) -> crate::framework::ClusterEvents {
        crate::framework::ClusterEvents::OBJECTS
            .with(crate::framework::ClusterEvent::UsageRefreshed)
    }

    fn relaxed_by_usage_fallback(&self) -> bool {
        <Self as super::real_fit::RealFit>::RELAXED_BY_FALLBACK
    }
}

impl PreFilterPlugin for RealMemoryFit {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, Option<NodeNames>) {
        let u = pod_usage(state, pod, snapshot, &self.policy, &self.identity);
        if !u.pod.class.real_memory_fit {
            return (Status::skip(), None);
        }
        (Status::success(), None)
    }
}

impl FilterPlugin for RealMemoryFit {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        real_fit::filter(self, state, node)
    }

    fn filter_batch(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        snapshot: &Snapshot,
        batch: &mut NodeBatch,
    ) {
        real_fit::filter_batch(self, state, snapshot, batch);
    }
}

impl real_fit::RealFit for RealMemoryFit {
    const NAME: &'static str = NAME;
    const RELAXED_BY_FALLBACK: bool = true;

    fn policy(&self) -> &UsagePolicy {
        &self.policy
    }

    /// The verdict on a node's real state.
    #[inline]
    fn check(&self, u: &CycleUsage, real: &NodeReal, _node: &NodeInfo, explain: bool) -> Status {
        if !real.freshness.is_fresh() {
            return degraded_status(
                &self.policy,
                || format!("memory usage {}", real.freshness.describe()),
                explain,
            );
        }
        let predicted = u.pod.prediction.memory_bytes;
        let free = real.memory_total - real.memory_used;
        let reserve = real.memory_total * u.pod.class.memory_reserve;
        if free - predicted < reserve {
            let s = Status::unschedulable(REASON);
            if explain {
                return s.with_detail(format!(
                    "real free memory {} − predicted {} < reserve {} ({:.0} % of {}, class {}); {}; {}",
                    format_bytes(free as i64),
                    format_bytes(predicted as i64),
                    format_bytes(reserve as i64),
                    u.pod.class.memory_reserve * 100.0,
                    format_bytes(real.memory_total as i64),
                    u.pod.class.name,
                    real.describe_memory(),
                    u.pod.prediction.describe(),
                ));
            }
            return s;
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::testutil::*;
    use crate::usage::RecentPlacement;
    use serde_json::json;

    fn plugin(policy: UsagePolicy) -> Registered {
        let deps = PluginDeps {
            policy: Arc::new(policy),
            ..PluginDeps::default()
        };
        RealMemoryFit::new(&deps).register()
    }

    fn mem_pod(mem: &str) -> PodInfo {
        info(pod(
            "p",
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": mem}}}]}}),
        ))
    }

    #[test]
    fn table() {
        // 8 GiB nodes (testutil), reserve 10 % = 0.8 GiB.
        let snap = with_usage(
            Snapshot::build(
                [
                    node("free", json!({})),
                    node("busy", json!({})),
                    node("edge", json!({})),
                    node("stale", json!({})),
                    node("unknown", json!({})),
                ],
                [],
            ),
            vec![
                usage("free", 0.5, 1.0 * GI, 10, None),
                usage("busy", 0.5, 6.5 * GI, 10, None),
                // 8 − 5.19 − 2 = 0.81 GiB, just above the 0.8 GiB reserve: fits.
                usage("edge", 0.5, 5.19 * GI, 10, None),
                usage("stale", 0.5, 7.9 * GI, 600, None),
            ],
            vec![],
        );
        let p = mem_pod("2Gi");
        let got = filter_all(&plugin(UsagePolicy::default()), &snap, &p);
        let codes: Vec<Code> = got.iter().map(|(_, s)| s.code).collect();
        use Code::*;
        assert_eq!(codes, [Success, Unschedulable, Success, Success, Success]);
        let detail = got[1].1.detail.as_deref().unwrap();
        assert!(
            detail.starts_with("real free memory 1.5Gi − predicted 2Gi < reserve 819.2Mi"),
            "{detail}"
        );

        // onStale: reject turns stale and missing nodes away, with the stale reason.
        let reject: UsagePolicy = serde_norway::from_str("onStale: reject").unwrap();
        let got = filter_all(&plugin(reject), &snap, &p);
        assert_eq!(got[3].1.reasons[0], crate::usage::node::STALE_REASON);
        assert_eq!(got[4].1.code, Unschedulable);

        // A class with a 30 % reserve rejects the edge node too; a class that turns the
        // filter off skips it.
        let strict: UsagePolicy = serde_norway::from_str(
            "classes: [{name: strict, match: {labels: {tier: [db]}}, memoryReservePercent: 30}, {name: off, match: {labels: {tier: [batch]}}, realMemoryFit: false}]",
        )
        .unwrap();
        let mut db = pod(
            "p",
            json!({"metadata": {"labels": {"tier": "db"}}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": "2Gi"}}}]}}),
        );
        let got = filter_all(&plugin(strict.clone()), &snap, &info(db.clone()));
        assert_eq!(got[2].1.code, Unschedulable);
        db.metadata.labels = Some([("tier".to_string(), "batch".to_string())].into());
        let got = filter_all(&plugin(strict), &snap, &info(db));
        assert!(got.iter().all(|(_, s)| s.code == Skip));
    }

    #[test]
    fn recent_placements_count_until_metrics_catch_up() {
        let mut snap = with_usage(
            Snapshot::build([node("n", json!({}))], []),
            vec![usage("n", 0.5, 3.0 * GI, 10, None)],
            vec![],
        );
        let p = mem_pod("2Gi");
        assert_eq!(
            filter_all(&plugin(UsagePolicy::default()), &snap, &p)[0]
                .1
                .code,
            Code::Success
        );
        // A 3 GiB pod placed 5 s ago, after the newest sample (10 s ago): counted.
        let recent = RecentPlacement {
            pod: "default/other".into(),
            at_ms: NOW_MS - 5000,
            cpu_cores: 0.0,
            memory_bytes: 3.0 * GI,
            disk_bytes: 0.0,
        };
        snap.usage_mut().record_placement(None, "n", recent.clone());
        let got = filter_all(&plugin(UsagePolicy::default()), &snap, &p);
        assert_eq!(got[0].1.code, Code::Unschedulable);
        assert!(
            got[0]
                .1
                .detail
                .as_deref()
                .unwrap()
                .contains("incl. 1 recent pod(s) 3Gi")
        );
        // Placed before the newest sample, 20 s ago: the metrics show part of it, the
        // rest still counts while it warms up (93 % of 3 GiB with the default 5 min) ...
        snap.usage_mut().forget_placement("n", "default/other");
        snap.usage_mut().record_placement(
            None,
            "n",
            RecentPlacement {
                at_ms: NOW_MS - 20_000,
                ..recent.clone()
            },
        );
        let code =
            |policy: UsagePolicy, snap: &Snapshot| filter_all(&plugin(policy), snap, &p)[0].1.code;
        assert_eq!(code(UsagePolicy::default(), &snap), Code::Unschedulable);
        // ... and not at all without a warm-up window,
        let no_warmup = UsagePolicy {
            warmup: std::time::Duration::ZERO,
            ..UsagePolicy::default()
        };
        assert_eq!(code(no_warmup, &snap), Code::Success);
        // nor once the window is over.
        snap.usage_mut().forget_placement("n", "default/other");
        snap.usage_mut().record_placement(
            None,
            "n",
            RecentPlacement {
                at_ms: NOW_MS - 301_000,
                ..recent
            },
        );
        assert_eq!(code(UsagePolicy::default(), &snap), Code::Success);
    }
}

//! RealMemoryFit: keep a share of each node's memory really free (seed 003's MySQL rule).
//!
//! Rejects a node when `total − (real_used + recently_assigned + pod_predicted) < reserve`,
//! with `reserve = total × memoryReservePercent` of the pod's class (default 10 %). `total`
//! is the node's memory capacity, `real_used` its measured working set (the larger of now
//! and the windowed statistic), `recently_assigned` the predicted memory of pods placed after
//! its newest sample, `pod_predicted` the pod's prediction (profile, annotation or request).
//! Nodes with stale or missing usage follow `usage.onStale`.

use crate::framework::{CycleState, Registered, Status};
use crate::quantity::format_bytes;
use crate::snapshot::table::NodeTable;
use crate::snapshot::{NodeIdx, NodeInfo, Snapshot};
use crate::usage::node::{RealUse, degraded_status};
use crate::usage::policy::Class;
use crate::usage::{CycleUsage, NodeReal, UsagePolicy};

use super::{PluginDeps, real_fit};

/// Plugin name.
pub const NAME: &str = "RealMemoryFit";
/// The reason counted in FailedScheduling messages.
pub const REASON: &str = "node(s) didn't have enough real free memory";

/// The RealMemoryFit plugin. Its settings come from the `usage` section (class reserves).
#[derive(Debug)]
pub struct RealMemoryFit {
    deps: real_fit::FitDeps,
    /// `usage.memoryRiskPercent` as a normal quantile, when the risk-based fit is on.
    risk_z: Option<f64>,
}

impl RealMemoryFit {
    /// Creates the plugin.
    pub fn new(deps: &PluginDeps) -> Self {
        RealMemoryFit {
            deps: real_fit::FitDeps::of(deps),
            risk_z: deps.policy.memory_risk_z(),
        }
    }

    /// Registers its extension points (PreFilter, Filter).
    pub fn register(self) -> Registered {
        real_fit::register(self)
    }
}

impl real_fit::RealFit for RealMemoryFit {
    const NAME: &'static str = NAME;
    const RELAXED_BY_FALLBACK: bool = true;
    const BATCH_FROM_TABLE: bool = true;

    fn fit_deps(&self) -> &real_fit::FitDeps {
        &self.deps
    }

    fn enabled(class: &Class) -> bool {
        class.real_memory_fit
    }

    /// Under the usage fallback, whether some node has room for the pod's expected memory
    /// (read by [`RealFit::fallback_check`](real_fit::RealFit::fallback_check)).
    fn pre_filter_with(&self, state: &mut CycleState, u: &CycleUsage, snapshot: &Snapshot) {
        if crate::usage::fallback_active(state) {
            let room = room_elsewhere(u, snapshot, &self.deps.policy);
            state.write(RoomElsewhere(room));
        }
    }

    /// The plain verdict (no risk target) from the node's memory alone.
    #[inline]
    fn surely_passes(&self, u: &CycleUsage, table: &NodeTable, idx: NodeIdx) -> bool {
        self.risk_z.is_none()
            && RealUse::at(u, table, idx).is_some_and(|r| !short(u, r.memory_total, r.memory_used))
    }

    /// The verdict on a node's real state.
    #[inline]
    fn check(&self, u: &CycleUsage, real: &NodeReal, _node: &NodeInfo, explain: bool) -> Status {
        if !real.freshness.is_fresh() {
            return degraded_status(
                &self.deps.policy,
                || format!("memory usage {}", real.freshness.describe()),
                explain,
            );
        }
        if let Some(z) = self.risk_z {
            return self.check_risk(u, real, z, explain);
        }
        if short(u, real.memory_total, real.memory_used) {
            let predicted = u.pod.prediction.memory_bytes;
            let free = real.memory_total - real.memory_used;
            let reserve = real.memory_total * u.pod.class.memory_reserve;
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

    /// Under the usage fallback: while some schedulable node has real room for the pod's
    /// expected demand (only requests, affinity or taints keep the pod off it, and those
    /// free up as the pods there end), a node where the expected demand (every mean, no
    /// reserve) passes its whole memory still rejects the pod: placing it there would more
    /// likely than not start the OOM killer, which takes the largest pod on the node, often
    /// a build that has run for a while. When no node has that room, the cluster is out of
    /// real memory, waiting has no end in sight, and every node passes (the pod goes to
    /// the least-hot one, as kube-scheduler would place it without waiting).
    fn fallback_check(
        &self,
        state: &CycleState,
        u: &CycleUsage,
        real: &NodeReal,
        explain: bool,
    ) -> Option<Status> {
        let demand = real.memory_demand(u.pod.prediction.memory_dist);
        if demand.mean <= real.memory_total || !state.read::<RoomElsewhere>().is_some_and(|r| r.0) {
            return None;
        }
        let s = Status::unschedulable(REASON);
        Some(if explain {
            s.with_detail(format!(
                "usage fallback: expected demand {} passes the node's memory {} while another node has room ({}; pod expected {})",
                format_bytes(demand.mean as i64),
                format_bytes(real.memory_total as i64),
                real.describe_memory(),
                format_bytes(u.pod.prediction.memory_dist.mean as i64),
            ))
        } else {
            s
        })
    }
}

impl RealMemoryFit {
    /// The risk-based verdict: `P(demand > limit) ≤ target` as `mean + z·sd ≤ limit`.
    fn check_risk(&self, u: &CycleUsage, real: &NodeReal, z: f64, explain: bool) -> Status {
        let demand = real.memory_demand(u.pod.prediction.memory_dist);
        let limit = real.memory_total * (1.0 - u.pod.class.memory_reserve);
        if demand.upper(z) <= limit {
            return Status::success();
        }
        let s = Status::unschedulable(REASON);
        if !explain {
            return s;
        }
        s.with_detail(format!(
            "memory risk {:.1} % > target {} %: expected {} ± {} (sd) against {} ({:.0} % of {}, class {}); {}; {}",
            demand.exceed_probability(limit) * 100.0,
            self.deps.policy.memory_risk_percent.unwrap_or_default(),
            format_bytes(demand.mean as i64),
            format_bytes(demand.sd() as i64),
            format_bytes(limit as i64),
            (1.0 - u.pod.class.memory_reserve) * 100.0,
            format_bytes(real.memory_total as i64),
            u.pod.class.name,
            real.describe_memory(),
            u.pod.prediction.describe(),
        ))
    }
}

/// The plain verdict: whether a node of `total` memory with `used` in use (real, with the
/// recent placements) is left short of the class's reserve by the pod's prediction. One
/// function for [`RealFit::check`](real_fit::RealFit::check) and the quick pass, so the two
/// cannot disagree.
#[inline(always)]
fn short(u: &CycleUsage, total: f64, used: f64) -> bool {
    let free = total - used;
    free - u.pod.prediction.memory_bytes < total * u.pod.class.memory_reserve
}

/// Whether some schedulable node with fresh usage has room for the pod's expected demand
/// (a [`CycleState`] slot written in the fallback cycle's PreFilter).
struct RoomElsewhere(bool);

/// [`RoomElsewhere`] over every node of the snapshot (only in a fallback cycle: rare).
fn room_elsewhere(u: &CycleUsage, snapshot: &Snapshot, policy: &UsagePolicy) -> bool {
    let table = snapshot.table();
    (0..snapshot.len()).any(|i| {
        let idx = i as crate::snapshot::NodeIdx;
        if table.flags[i] & crate::snapshot::table::flag::UNSCHEDULABLE != 0
            || !u.is_fresh(idx, policy)
        {
            return false;
        }
        let real = u.node_real_at(table, idx, policy);
        real.memory_demand(u.pod.prediction.memory_dist).mean <= real.memory_total
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::key::PodKey;
    use crate::plugins::testutil::*;
    use crate::snapshot::PodInfo;
    use crate::usage_context::RecentPlacement;
    use serde_json::json;
    use std::sync::Arc;

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
    fn filter_without_its_pre_filter_says_so() {
        let snap = with_usage(
            Snapshot::build([node("n", json!({}))], []),
            vec![usage("n", 0.5, 1.0 * GI, 10, None)],
            vec![],
        );
        let reg = plugin(UsagePolicy::default());
        let state = CycleState::new(false);
        let s = reg
            .filter
            .as_ref()
            .unwrap()
            .filter(&state, &mem_pod("1Gi"), &snap.nodes()[0]);
        assert_eq!(s.code, Code::Error);
        assert_eq!(s.message(), "RealMemoryFit: PreFilter did not run");
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
            pod: PodKey::new("default", "other"),
            at_ms: NOW_MS - 5000,
            cpu_cores: 0.0,
            memory_bytes: 3.0 * GI,
            disk_bytes: 0.0,
            ..Default::default()
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
        snap.usage_mut()
            .forget_placement("n", &PodKey::new("default", "other"));
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
        snap.usage_mut()
            .forget_placement("n", &PodKey::new("default", "other"));
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

    /// A pod whose builder's profile has a median of 2 GiB and a p95 of 3 GiB (20 runs).
    fn profiled_pod() -> (PodInfo, crate::view::BuilderProfile) {
        let mut prof = profile("default/Pod/p", 0.1, 2.0 * GI);
        prof.memory.p95 = 3.0 * GI;
        prof.runs = 20;
        (mem_pod("1Gi"), prof)
    }

    /// Under `memoryRiskPercent` the node's demand is a distribution: one pod is judged at
    /// its own tail (5 % ⇔ its p95), several uncounted recent pods add their spreads in
    /// quadrature rather than their p95s in a row, and `/explain` gives the risk.
    #[test]
    fn risk_based_fit() {
        let (p, prof) = profiled_pod();
        let risk = |r: f64| UsagePolicy {
            memory_risk_percent: Some(r),
            ..UsagePolicy::default()
        };
        // 8 GiB nodes, limit 7.2 GiB. The pod: mean 2 GiB, sd 1/1.645·√1.05 ≈ 0.623 GiB.
        // "low" 4.0 GiB used: 6.0 + 1.645·0.623 = 7.03 ≤ 7.2 passes at 5 %; at 1 %,
        // 6.0 + 2.326·0.623 = 7.45 > 7.2 does not. "high" 4.6 GiB: 6.6 GiB expected, 0.6
        // GiB (0.96 sd) below the limit: a risk of 16.8 %.
        let snap = with_usage(
            Snapshot::build([node("low", json!({})), node("high", json!({}))], []),
            vec![
                usage("low", 0.5, 4.0 * GI, 10, None),
                usage("high", 0.5, 4.6 * GI, 10, None),
            ],
            vec![prof],
        );
        let codes = |policy: UsagePolicy, snap: &Snapshot| -> Vec<Code> {
            filter_all(&plugin(policy), snap, &p)
                .iter()
                .map(|(_, s)| s.code)
                .collect()
        };
        use Code::*;
        assert_eq!(codes(risk(5.0), &snap), [Success, Unschedulable]);
        assert_eq!(codes(risk(1.0), &snap), [Unschedulable, Unschedulable]);
        let got = filter_all(&plugin(risk(5.0)), &snap, &p);
        let detail = got[1].1.detail.as_deref().unwrap();
        assert!(
            detail.starts_with("memory risk 16.8 %") && detail.contains("> target 5 %"),
            "{detail}"
        );
        // Four pods of a builder with median 1 GiB and p95 1.5 GiB (sd ≈ 0.31 GiB): three
        // placed but not sampled yet, and the pod. Measured 1.5 GiB. The point rule adds
        // four p95s: 1.5 + 4 × 1.5 = 7.5 GiB > 7.2, rejected. Together they are
        // 1.5 + 4 ± 2 × 0.31 GiB: at 5 %, 6.5 GiB ≤ 7.2, they fit.
        let mut small = profile("default/Pod/p", 0.1, GI);
        small.memory.p95 = 1.5 * GI;
        small.runs = 20;
        let dist = crate::usage_context::MemoryDist::from_percentiles(GI, 1.5 * GI, 20);
        let mut snap = with_usage(
            Snapshot::build([node("n", json!({}))], []),
            vec![usage("n", 0.5, 1.5 * GI, 10, None)],
            vec![small],
        );
        for i in 0..3 {
            snap.usage_mut().record_placement(
                None,
                "n",
                RecentPlacement {
                    pod: PodKey::new("default", format!("r{i}")),
                    at_ms: NOW_MS - 1_000,
                    memory_bytes: 1.5 * GI,
                    memory_dist: dist,
                    ..Default::default()
                },
            );
        }
        assert_eq!(codes(UsagePolicy::default(), &snap), [Unschedulable]);
        assert_eq!(codes(risk(5.0), &snap), [Success]);
        // ... and at 0.1 % (z ≈ 3.09: 5.5 + 1.92 GiB) they do not.
        assert_eq!(codes(risk(0.1), &snap), [Unschedulable]);
    }

    /// The usage fallback lets a node through only if the pod's expected demand fits its
    /// memory, while some schedulable node has that room; with no room anywhere every
    /// node passes (the pod goes to the least-hot one).
    #[test]
    fn fallback_keeps_expected_overflow_off_while_room_exists() {
        let (p, prof) = profiled_pod();
        // 8 GiB nodes: "over" 6.5 GiB used (+2 GiB expected = 8.5 > 8), "tight" 5.5 GiB
        // (7.5 ≤ 8: expected fits, though not at the 10 % reserve), "roomy" 1 GiB but
        // cordoned.
        let build = |roomy_cordoned: bool| {
            let roomy = if roomy_cordoned {
                node("roomy", json!({"spec": {"unschedulable": true}}))
            } else {
                node("roomy", json!({}))
            };
            with_usage(
                Snapshot::build(
                    [node("over", json!({})), node("tight", json!({})), roomy],
                    [],
                ),
                vec![
                    usage("over", 0.5, 6.5 * GI, 10, None),
                    usage("tight", 0.5, 5.5 * GI, 10, None),
                    usage("roomy", 0.5, 1.0 * GI, 10, None),
                ],
                vec![prof.clone()],
            )
        };
        let fallback = |snap: &Snapshot| -> Vec<(String, Code)> {
            let reg = plugin(UsagePolicy::default());
            let mut state = CycleState::new(true);
            state.write_input(crate::usage::Wait {
                waited: std::time::Duration::from_secs(1),
                fallback: true,
                ..Default::default()
            });
            let (s, _) = reg
                .pre_filter
                .as_ref()
                .unwrap()
                .pre_filter(&mut state, &p, snap);
            assert!(s.is_success());
            let f = reg.filter.as_ref().unwrap();
            let per_node: Vec<(String, Code)> = snap
                .nodes()
                .iter()
                .map(|n| (n.name.to_string(), f.filter(&state, &p, n).code))
                .collect();
            // The batch path agrees.
            let mut batch = crate::framework::NodeBatch::new(
                (0..snap.len() as crate::snapshot::NodeIdx).collect(),
            );
            f.filter_batch(&state, &p, snap, &mut batch);
            let (_, rejected) = batch.into_parts();
            for (i, (_, c)) in per_node.iter().enumerate() {
                let batch_code = rejected
                    .iter()
                    .find(|(idx, _)| *idx as usize == i)
                    .map_or(Code::Success, |(_, s)| s.code);
                assert_eq!(batch_code, *c, "node {i}");
            }
            per_node
        };
        use Code::*;
        // "roomy" is schedulable and has room: "over" stays rejected, "tight" passes.
        let got = fallback(&build(false));
        assert_eq!(
            got,
            [
                ("over".into(), Unschedulable),
                ("tight".into(), Success),
                ("roomy".into(), Success)
            ]
        );
        // "roomy" cordoned: "tight" still has room for the expected demand.
        let got = fallback(&build(true));
        assert_eq!(got[0].1, Unschedulable);
        // No node with room (only "over" left schedulable): it passes, least-hot wins.
        let snap = with_usage(
            Snapshot::build([node("over", json!({}))], []),
            vec![usage("over", 0.5, 6.5 * GI, 10, None)],
            vec![prof],
        );
        assert_eq!(fallback(&snap), [("over".to_string(), Success)]);
    }
}

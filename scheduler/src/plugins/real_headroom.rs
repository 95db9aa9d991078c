//! RealHeadroom: scores nodes by what would really be free after placing the pod.
//!
//! For CPU and memory, `free_after = (capacity − real_used − recently_assigned −
//! predicted) / capacity`, with the pod's prediction from its builder's profile (default
//! p95), the bk-ci `builder-real-resources` annotation, or its requests. On a node whose
//! usage is stale or missing the node's *requests* stand in for its real usage (a stale
//! node's last measurement serving as a floor, so a node whose metrics stopped does not
//! look empty) and the pod's requests for its prediction — the score falls back to
//! requests, node by node, visibly.
//! When no feasible node has fresh usage at all, PreScore skips the plugin: the request-based
//! plugins (NodeResourcesFit, BalancedAllocation) alone then decide, as in kube-scheduler.
//!
//! Strategies (`pluginArgs.realHeadroom.strategy`):
//! - `spread` (default): more free wins, `100 × mean(free_after)`;
//! - `binpack`: fuller wins, `100 × (1 − mean(free_after))`, but a node that would fall
//!   below the class's memory reserve scores 0;
//! - `target`: utilisation closest to `targetPercent` wins, `100 × (1 − |u − t| /
//!   max(t, 1 − t))` with `u = 1 − mean(free_after)`;
//! - `fill`: nodes fill up to `targetPercent` of their fuller resource, `u = 1 −
//!   min(free_after)`: `100 × (0.5 + 0.5 u / t)` while `u ≤ t`, `100 × 0.5 (1 − (u − t) /
//!   (1 − t))` past it, so a node the pod would take past the level loses to every node it
//!   would not, and among those the emptiest wins. Small pods gather on the nodes already in
//!   use and leave whole nodes free for builds as big as a node (and for scale-down),
//!   while no node is aimed past the level.
//!
//! Pods that run until removed (services, databases: [`crate::usage::lifetime`]) follow
//! `longRunningStrategy` when it is set, builds `strategy`. With `longRunningStrategy:
//! binpack` the services pack together, on nodes with no replica of their own workload
//! (such a node scores 0, so replicas stay apart), and leave whole nodes to the builds: a
//! service never leaves its node, and spread over the cluster each one keeps a node from
//! holding a build as big as the node and takes CPU from the builders whose caches are
//! there. Measured on the farm families in docs/placement.md (*Services pack, builds spread*):
//! fewer hot node-hours on farms of small nodes, not on big ones; off by default.
//!
//! In a cycle of the usage fallback (`usage.maxWait`, see [`crate::usage::wait`]) the mean
//! is memory alone: the pod goes where the least memory is really in use.
//!
//! `keepWhole` (on by default): while builds that need half a node's memory or more run,
//! and their requests do not keep that room themselves, the `k` feasible nodes with the
//! most free memory score 0 for every other pod, so that the next such build finds a node
//! empty enough instead of going through the usage fallback beside small builds. `k` comes
//! from the big builds' arrivals over the small builds' run length
//! ([`crate::usage_context::whole`]); with no such build running it is 0 and nothing
//! changes. Not in a fallback cycle, and never with `k` or fewer feasible nodes.

use std::collections::HashSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::field;
use crate::framework::{
    CycleState, Plugin, PreScorePlugin, Registered, ScorePlugin, Status, WrittenIn,
};
use crate::snapshot::table::NodeTable;
use crate::snapshot::{NodeIdx, NodeInfo, PodInfo, Snapshot};
use crate::usage::lifetime::same_workload;
use crate::usage::{
    CycleUsage, FreeAfter, FreeColumn, FreeFractions, UsagePolicy, cycle_usage_ref,
    cycle_usage_written, fallback_active, free_after_column, free_column, pod_usage,
};

use super::PluginDeps;

/// Plugin name.
pub const NAME: &str = "RealHeadroom";

/// How free space turns into a score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Strategy {
    /// More real free space wins (default): spreads load, keeps headroom for spikes.
    #[default]
    Spread,
    /// Fuller nodes win while staying above the reserve: frees whole nodes for scale-down.
    Binpack,
    /// Utilisation closest to `targetPercent` wins.
    Target,
    /// Nodes fill up to `targetPercent`, the fuller the better; past it, the emptier wins,
    /// below every node the pod leaves at or under `targetPercent`.
    Fill,
}

/// RealHeadroom's args (`pluginArgs.realHeadroom`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct RealHeadroomArgs {
    /// How pods are placed (with `longRunningStrategy` set: the pods that run to
    /// completion, builds). Default `spread`.
    pub strategy: Strategy,
    /// How pods that run until removed (services, databases) are placed, when set.
    /// `binpack` packs them together but never beside a replica of their own workload.
    /// Default unset: as `strategy`.
    pub long_running_strategy: Option<Strategy>,
    /// Utilisation aimed at by `target`, and the level `fill` fills nodes to, percent.
    /// Default `70`.
    pub target_percent: f64,
    /// Weight of CPU in the mean. Default `1`.
    pub cpu_weight: f64,
    /// Weight of memory in the mean. Default `1`.
    pub memory_weight: f64,
    /// Keep the nodes with the most free memory whole for builds as big as half a node
    /// while such builds run (as many as they need, [`crate::usage_context::whole`]):
    /// other pods score 0 there. Default `true`.
    pub keep_whole: bool,
}

impl Default for RealHeadroomArgs {
    fn default() -> Self {
        RealHeadroomArgs {
            strategy: Strategy::Spread,
            long_running_strategy: None,
            target_percent: 70.0,
            cpu_weight: 1.0,
            memory_weight: 1.0,
            keep_whole: true,
        }
    }
}

/// The feasible nodes this cycle's pod keeps off (`keepWhole`), written by PreScore.
#[derive(Debug, Clone, Default)]
struct KeptWhole {
    /// The nodes, by index.
    nodes: HashSet<NodeIdx>,
}

impl KeptWhole {
    fn holds(state: &CycleState, idx: NodeIdx) -> bool {
        state
            .read::<KeptWhole>()
            .is_some_and(|k| k.nodes.contains(&idx))
    }
}

/// The RealHeadroom plugin.
#[derive(Debug)]
pub struct RealHeadroom {
    args: RealHeadroomArgs,
    policy: Arc<UsagePolicy>,
    identity: crate::identity::IdentityConfig,
    /// The risk target's normal quantile under `usage.memoryRiskPercent` (free memory is
    /// judged at it), computed once.
    risk_z: Option<f64>,
}

impl RealHeadroom {
    /// Creates the plugin.
    pub fn new(args: RealHeadroomArgs, deps: &PluginDeps) -> Result<Self, field::Error> {
        if !(0.0..=100.0).contains(&args.target_percent) {
            return Err(super::registry::not_in(
                field::Path::new("targetPercent"),
                args.target_percent,
                "[0, 100]",
            ));
        }
        if args.cpu_weight < 0.0
            || args.memory_weight < 0.0
            || args.cpu_weight + args.memory_weight <= 0.0
        {
            return Err(field::Error::invalid(
                field::Path::new("cpuWeight"),
                format!("{} (memoryWeight {})", args.cpu_weight, args.memory_weight),
                "cpuWeight and memoryWeight must be ≥ 0 and not both 0",
            ));
        }
        Ok(RealHeadroom {
            args,
            policy: deps.policy.clone(),
            risk_z: deps.policy.memory_risk_z(),
            identity: deps.identity.clone(),
        })
    }

    /// Registers its extension points (PreScore, Score).
    pub fn register(self) -> Registered {
        let me = Arc::new(self);
        Registered {
            pre_score: Some(me.clone()),
            score: Some(me),
            ..Registered::new(NAME)
        }
    }

    /// The long-running strategy when it applies to this cycle's pod. The usage fallback
    /// keeps `strategy` for every pod: it is about overflow, not placement style.
    fn long_running(&self, u: &CycleUsage, fallback: bool) -> Option<Strategy> {
        self.args
            .long_running_strategy
            .filter(|_| u.pod.long_running && !fallback)
    }

    /// Whether a long-running pod packed by `longRunningStrategy: binpack` keeps off
    /// `node`: a replica of its own workload runs there.
    fn keeps_off(&self, long: Option<Strategy>, pod: &PodInfo, node: &NodeInfo) -> bool {
        long == Some(Strategy::Binpack) && node.pods.iter().any(|q| same_workload(&q.pod, &pod.pod))
    }

    /// The nodes kept whole from `pod` this cycle (`keepWhole`): the `k` feasible nodes
    /// with the most memory free after it, while big builds need `k`; `None` for a big
    /// pod itself, in a fallback cycle, or with `k` or fewer feasible nodes.
    fn kept_whole(
        &self,
        u: &CycleUsage,
        column: &FreeColumn,
        table: &NodeTable,
        feasible: &[NodeIdx],
        fallback: bool,
    ) -> Option<KeptWhole> {
        let need = &u.ctx.whole;
        let k = need.nodes();
        if !self.args.keep_whole
            || fallback
            || k == 0
            || feasible.len() <= k
            || need.is_big(u.pod.prediction.memory_bytes)
        {
            return None;
        }
        let mut free: Vec<(f64, NodeIdx)> = feasible
            .iter()
            .filter_map(|&i| {
                let f = column.get(i)?;
                Some((table.capacity[i as usize][1] * f.memory, i))
            })
            .collect();
        if free.len() <= k {
            return None;
        }
        // The k emptiest first (ties by index, so the choice does not depend on order).
        free.select_nth_unstable_by(k - 1, |a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        Some(KeptWhole {
            nodes: free[..k].iter().map(|&(_, i)| i).collect(),
        })
    }

    /// `/explain`'s line for a node kept whole: how many, and why.
    fn explain_kept(u: &CycleUsage, k: usize) -> String {
        let need = &u.ctx.whole;
        let gi = (1u64 << 30) as f64;
        format!(
            "kept whole: 0, one of the {k} feasible nodes with the most free memory kept for builds of half a node or more ({} running, runs of {:.0} s against the others' {:.0} s: {:.1} arriving while a node empties, plus {}; the pod's {:.1} GiB is under half the largest node's {:.1} GiB)",
            need.big_running,
            need.big_run_s,
            need.small_run_s,
            need.arriving(),
            crate::usage_context::whole::SPARE_NODES,
            u.pod.prediction.memory_bytes / gi,
            need.largest_memory / gi,
        )
    }

    fn score_of(&self, i: &FreeFractions, strategy: Strategy, reserve: f64, fallback: bool) -> i64 {
        // The usage fallback places a pod real memory kept off every node: memory alone
        // decides then (it is what an overfull node kills for; CPU only slows down).
        let (wc, wm) = if fallback {
            (0.0, 1.0)
        } else {
            (self.args.cpu_weight, self.args.memory_weight)
        };
        let free = (i.cpu * wc + i.memory * wm) / (wc + wm);
        let s = match strategy {
            Strategy::Spread => free,
            Strategy::Binpack => {
                if i.memory < reserve {
                    0.0
                } else {
                    1.0 - free
                }
            }
            Strategy::Target => {
                let t = self.args.target_percent / 100.0;
                let u = 1.0 - free;
                1.0 - (u - t).abs() / t.max(1.0 - t)
            }
            Strategy::Fill => {
                let t = self.args.target_percent / 100.0;
                // The fuller resource (of those weighed) decides: a node whose memory
                // passes the level is full however idle its CPU.
                let cpu = if wc > 0.0 { i.cpu } else { 1.0 };
                let mem = if wm > 0.0 { i.memory } else { 1.0 };
                let u = 1.0 - cpu.min(mem);
                if u <= t {
                    0.5 + 0.5 * u / t.max(f64::EPSILON)
                } else {
                    0.5 * (1.0 - (u - t) / (1.0 - t).max(f64::EPSILON))
                }
            }
        };
        score_0_100(s * 100.0)
    }
}

/// `x.round().clamp(0.0, 100.0) as i64`, exactly, without the call to libm's `round`
/// (the baseline x86-64 target has no instruction for it): that call was 2 % of a decision
/// with usage live at 5,000 nodes, one per feasible node.
#[inline]
fn score_0_100(x: f64) -> i64 {
    // Inside ±2^52 the fraction below is exact; outside [-1, 101] the answer is 0 or 100
    // either way. NaN stays NaN and ends as 0, as `round` leaves it.
    // Without branches: whether a score rounds up is as good as random from node to node,
    // and a mispredicted branch per feasible node made this the costliest line of the
    // cycle with usage live (12 % of a decision's cycles at 5,000 nodes, `perf`).
    let x = x.clamp(-1.0, 101.0);
    let t = x as i64;
    let frac = x - t as f64;
    let r = t + i64::from(frac >= 0.5) - i64::from(frac <= -0.5);
    r.clamp(0, 100)
}

impl Plugin for RealHeadroom {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl PreScorePlugin for RealHeadroom {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: &[NodeIdx],
    ) -> Status {
        let u = pod_usage(state, pod, snapshot, &self.policy, &self.identity);
        let oldest_fresh = u
            .ctx
            .now_ms
            .saturating_sub(self.policy.stale_after.as_millis() as i64);
        // No fresh entry in the whole view: no need to look at the nodes.
        let any_fresh = u.rows.fresh_count(oldest_fresh) > 0
            && feasible.iter().any(|&i| u.is_fresh(i, &self.policy));
        if !any_fresh {
            return Status::skip();
        }
        let column = free_after_column(
            state,
            &u,
            pod,
            snapshot.table(),
            feasible,
            &self.policy,
            self.risk_z,
        );
        // A state carried into a fallback cycle must not keep the first cycle's choice.
        state.take::<KeptWhole>();
        if let Some(kept) = self.kept_whole(
            &u,
            &column,
            snapshot.table(),
            feasible,
            fallback_active(state),
        ) {
            state.write(kept);
        }
        Status::success()
    }
}

impl ScorePlugin for RealHeadroom {
    fn normalizes(&self) -> bool {
        // No NormalizeScore: the raw scores are the normalised ones.
        false
    }

    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let u = cycle_usage_written(state, NAME, WrittenIn::PreScore)?;
        let fallback = fallback_active(state);
        let long = self.long_running(u, fallback);
        if self.keeps_off(long, pod, node) || KeptWhole::holds(state, node.idx) {
            return Ok(0);
        }
        let i = FreeFractions::of(&FreeAfter::of(u, pod, node, &self.policy, self.risk_z));
        let strategy = long.unwrap_or(self.args.strategy);
        Ok(self.score_of(&i, strategy, u.pod.class.memory_reserve, fallback))
    }

    fn score_batch(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[NodeIdx],
        scores: &mut Vec<i64>,
    ) -> Result<(), (usize, Status)> {
        scores.reserve(nodes.len());
        let u = cycle_usage_written(state, NAME, WrittenIn::PreScore).map_err(|e| (0, e))?;
        let reserve = u.pod.class.memory_reserve;
        let fallback = fallback_active(state);
        let long = self.long_running(u, fallback);
        let strategy = long.unwrap_or(self.args.strategy);
        let table = snapshot.table();
        let kept = state.read::<KeptWhole>();
        let column = free_column(state);
        for &idx in nodes {
            if self.keeps_off(long, pod, snapshot.node(idx))
                || kept.is_some_and(|k| k.nodes.contains(&idx))
            {
                scores.push(0);
                continue;
            }
            // PreScore computed the numbers of every feasible node; a node scored outside
            // that list (none in a cycle) is computed here.
            let s = match column.and_then(|c| c.get(idx)) {
                Some(i) => self.score_of(i, strategy, reserve, fallback),
                None => {
                    let i = FreeAfter::at(u, pod, table, idx, &self.policy, self.risk_z);
                    self.score_of(&FreeFractions::of(&i), strategy, reserve, fallback)
                }
            };
            scores.push(s);
        }
        Ok(())
    }

    fn explain_score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let u = cycle_usage_ref(state)?;
        let fallback = fallback_active(state);
        let long = self.long_running(u, fallback);
        if self.keeps_off(long, pod, node) {
            return Some(
                "Binpack (runs until removed): 0, a replica of the pod's workload runs here"
                    .to_string(),
            );
        }
        if let Some(k) = state
            .read::<KeptWhole>()
            .filter(|k| k.nodes.contains(&node.idx))
        {
            return Some(Self::explain_kept(u, k.nodes.len()));
        }
        let i = FreeAfter::of(u, pod, node, &self.policy, self.risk_z);
        let gi = |b: f64| b / (1u64 << 30) as f64;
        let who = if long.is_some() {
            " (runs until removed)"
        } else {
            ""
        };
        let basis = if fallback {
            format!(
                "usage fallback: memory alone; real usage, {}",
                u.pod.prediction.describe()
            )
        } else if i.fresh {
            format!("real usage, {}", u.pod.prediction.describe())
        } else {
            "usage stale or missing: node and pod requests (a stale node's last measurement as a floor)".to_string()
        };
        // Under the risk-based fit, the node's risk too (`/explain` shows it for every
        // feasible node; RealMemoryFit's detail gives it for the rejected ones).
        let risk = match self.policy.memory_risk_percent {
            Some(target) if i.fresh => {
                let real = u.node_real(node, &self.policy);
                let limit = real.memory_total * (1.0 - u.pod.class.memory_reserve);
                let p = real
                    .memory_demand(u.pod.prediction.memory_dist)
                    .exceed_probability(limit);
                format!("; memory risk {:.1} % (target {target} %)", p * 100.0)
            }
            _ => String::new(),
        };
        // Free memory is judged at the risk target: the demand's quantile against the
        // point predictions.
        let margin = if i.memory_margin != 0.0 {
            format!(" {:+.1} at the risk target", gi(i.memory_margin))
        } else {
            String::new()
        };
        Some(format!(
            "{:?}{who}: cpu {:.2} used + {:.2} pod of {:.2} → {:.0} % free; memory {:.1} + {:.1}{margin} of {:.1} GiB → {:.0} % free ({basis}){risk}",
            long.unwrap_or(self.args.strategy),
            i.cpu_used,
            i.cpu_pod,
            i.cpu_total,
            i.cpu() * 100.0,
            gi(i.memory_used),
            gi(i.memory_pod),
            gi(i.memory_total),
            i.memory() * 100.0,
        ))
    }
}

impl super::registry::PluginArgs for RealHeadroomArgs {
    /// `targetPercent` and the weights: the constructor's checks.
    fn validate(&self, path: &crate::field::Path) -> crate::field::ErrorList {
        super::registry::constructed(
            RealHeadroom::new(self.clone(), &super::PluginDeps::default()),
            path,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::*;
    use serde_json::json;

    fn plugin(args: RealHeadroomArgs) -> Registered {
        RealHeadroom::new(args, &PluginDeps::default())
            .unwrap()
            .register()
    }

    fn snap() -> Snapshot {
        snap_with(vec![])
    }

    /// `snap()` with `pods` on their nodes.
    fn snap_with(pods: Vec<k8s_openapi::api::core::v1::Pod>) -> Snapshot {
        // 4 CPU / 8 GiB nodes.
        with_usage(
            Snapshot::build(
                [
                    node("idle", json!({})),
                    node("half", json!({})),
                    node("full", json!({})),
                    node("dark", json!({})),
                ],
                pods,
            ),
            vec![
                usage("idle", 0.0, 0.0, 5, None),
                usage("half", 2.0, 4.0 * GI, 5, None),
                usage("full", 3.6, 7.2 * GI, 5, None),
            ],
            vec![profile("default/Pod/p", 0.4, 0.8 * GI)],
        )
    }

    fn scores(args: RealHeadroomArgs, p: &PodInfo) -> Vec<i64> {
        score_all(plugin(args), &snap(), p)
            .unwrap()
            .into_iter()
            .map(|(_, s)| s)
            .collect()
    }

    /// The score's rounding is `round`'s, at its edges too.
    #[test]
    fn scores_round_as_round_does() {
        let mut xs = vec![
            0.0,
            -0.0,
            0.5,
            0.49999999999999994,
            1.5,
            2.5,
            99.49999999999999,
            99.5,
            100.5,
            101.0,
            1e300,
            -0.5,
            -0.4,
            -1.5,
            -1e300,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        use rand::{Rng, SeedableRng};
        xs.extend((0..100_000).map(|_| rng.random_range(-5.0..105.0)));
        xs.extend((0..=2000).map(|i| f64::from(i) * 0.05));
        for x in xs {
            assert_eq!(score_0_100(x), x.round().clamp(0.0, 100.0) as i64, "{x}");
        }
    }

    /// The cycle's free-after column holds, for each feasible node, what `FreeAfter` gives
    /// it; it is computed once for the PreScores that ask with the same nodes, and again
    /// (complete) when a later pass asks with more; Score reads it and scores as the
    /// per-node path does.
    #[test]
    fn the_free_after_column_is_computed_once_and_read_by_score() {
        let snap = snap();
        let p = info(pod("p", json!({})));
        let deps = PluginDeps::default();
        let policy = deps.policy.clone();
        let risk_z = policy.memory_risk_z();
        let mut state = CycleState::new(false);
        let u = pod_usage(&mut state, &p, &snap, &policy, &deps.identity);
        let table = snap.table();
        let first = free_after_column(&mut state, &u, &p, table, &[0, 2], &policy, risk_z);
        for i in [0, 2] {
            assert_eq!(
                first.get(i),
                Some(&FreeFractions::of(&FreeAfter::at(
                    &u, &p, table, i, &policy, risk_z
                )))
            );
        }
        assert_eq!(first.get(1), None, "not feasible, not computed");
        let again = free_after_column(&mut state, &u, &p, table, &[2], &policy, risk_z);
        assert!(Arc::ptr_eq(&first, &again), "computed once");
        let wider = free_after_column(&mut state, &u, &p, table, &[0, 1, 2, 3], &policy, risk_z);
        assert!(!Arc::ptr_eq(&first, &wider));
        assert!((0..4).all(|i| wider.get(i).is_some()));
        assert!(std::ptr::eq(free_column(&state).unwrap(), &*wider), "kept");

        // Through PreScore and the batch Score, the scores of the per-node path.
        let plugin = RealHeadroom::new(RealHeadroomArgs::default(), &deps).unwrap();
        let mut state = CycleState::new(false);
        let feasible: Vec<NodeIdx> = (0..4).collect();
        assert!(
            plugin
                .pre_score(&mut state, &p, &snap, &feasible)
                .is_success()
        );
        assert!(free_column(&state).is_some());
        let mut batch = Vec::new();
        plugin
            .score_batch(&state, &p, &snap, &feasible, &mut batch)
            .unwrap();
        let single: Vec<i64> = feasible
            .iter()
            .map(|&i| plugin.score(&state, &p, snap.node(i)).unwrap())
            .collect();
        assert_eq!(batch, single);
        assert!(batch.windows(2).any(|w| w[0] != w[1]), "{batch:?}");
    }

    /// The table's quick path for a fresh node gives what the whole real state gives, on
    /// fresh, stale and unmeasured nodes, with recent placements sampled and not, with and
    /// without a risk target.
    #[test]
    fn free_after_from_the_table_is_free_after_from_the_node() {
        let mut snap = with_usage(
            Snapshot::build(
                ["idle", "half", "stale", "dark"].map(|n| node(n, json!({}))),
                [pod(
                    "on-half",
                    json!({"spec": {"nodeName": "half", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}),
                )],
            ),
            vec![
                usage("idle", 0.3, 0.5 * GI, 5, Some((100.0 * GI, 60.0 * GI))),
                usage("half", 2.0, 4.0 * GI, 5, None),
                usage("stale", 1.0, 6.0 * GI, 900, None),
            ],
            vec![profile("default/Pod/p", 0.4, 0.8 * GI)],
        );
        for (i, (node, ago_ms)) in [("half", 2_000), ("half", 30_000), ("idle", 1_000)]
            .into_iter()
            .enumerate()
        {
            snap.record_placement(
                None,
                node,
                crate::usage_context::RecentPlacement {
                    pod: crate::key::PodKey::new("default", format!("r{i}")),
                    at_ms: NOW_MS - ago_ms,
                    cpu_cores: 0.5,
                    memory_bytes: 0.7 * GI,
                    disk_bytes: 1e9,
                    memory_dist: crate::usage_context::MemoryDist {
                        mean: 0.6 * GI,
                        var: 1e16,
                    },
                },
            );
        }
        let p = info(pod("p", json!({})));
        for risk in ["{}", "memoryRiskPercent: 5"] {
            let policy: UsagePolicy = serde_norway::from_str(risk).unwrap();
            let risk_z = policy.memory_risk_z();
            let mut state = CycleState::new(false);
            let deps = PluginDeps::default();
            let u = pod_usage(&mut state, &p, &snap, &policy, &deps.identity);
            for n in snap.nodes() {
                assert_eq!(
                    FreeAfter::at(&u, &p, snap.table(), n.idx, &policy, risk_z),
                    FreeAfter::of(&u, &p, n, &policy, risk_z),
                    "{} with {risk}",
                    n.name
                );
            }
        }
    }

    /// Under `usage.memoryRiskPercent` free memory is judged at the risk target: of two
    /// nodes with the same expected memory, the one whose demand is uncertain (pods placed
    /// but not sampled yet) scores lower, and `/explain` gives the correction. Without
    /// the knob both score the same.
    #[test]
    fn free_memory_is_scored_at_the_risk_target() {
        let mut prof = profile("default/Pod/p", 0.1, GI);
        prof.memory.p95 = 1.5 * GI;
        prof.runs = 20;
        let p = info(pod(
            "p",
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": "1Gi"}}}]}}),
        ));
        // 8 GiB nodes. "steady": 3 GiB measured. "warming": 1.5 GiB measured and three
        // pods placed since, 0.5 GiB each on average but spread (sd ≈ 0.3 GiB each).
        let mut snap = with_usage(
            Snapshot::build([node("steady", json!({})), node("warming", json!({}))], []),
            vec![
                usage("steady", 0.5, 3.0 * GI, 10, None),
                usage("warming", 0.5, 1.5 * GI, 10, None),
            ],
            vec![prof],
        );
        let dist = crate::usage_context::MemoryDist::from_percentiles(0.5 * GI, GI, 20);
        for i in 0..3 {
            snap.usage_mut().record_placement(
                None,
                "warming",
                crate::usage_context::RecentPlacement {
                    pod: crate::key::PodKey::new("default", format!("r{i}")),
                    at_ms: NOW_MS - 1_000,
                    memory_bytes: 0.5 * GI,
                    memory_dist: dist,
                    ..Default::default()
                },
            );
        }
        let mem_only = RealHeadroomArgs {
            cpu_weight: 0.0,
            ..Default::default()
        };
        let with = |risk: Option<f64>| {
            let deps = PluginDeps {
                policy: Arc::new(UsagePolicy {
                    memory_risk_percent: risk,
                    ..UsagePolicy::default()
                }),
                ..PluginDeps::default()
            };
            RealHeadroom::new(mem_only.clone(), &deps)
                .unwrap()
                .register()
        };
        let scores = |reg: Registered| -> Vec<i64> {
            score_all(reg, &snap, &p)
                .unwrap()
                .into_iter()
                .map(|(_, s)| s)
                .collect()
        };
        let point = scores(with(None));
        assert_eq!(point[0], point[1], "same expected memory: {point:?}");
        let risk = scores(with(Some(5.0)));
        assert!(
            risk[1] < risk[0],
            "the uncertain node scores lower: {risk:?}"
        );
        let fw = crate::framework::Framework::new("t", vec![with(Some(5.0))], &[]);
        let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(1);
        let (d, _) = fw.schedule(&p, &snap, &mut rng, true);
        let details = d.scores[0].details.as_ref().unwrap();
        let warming = details[1].as_deref().unwrap();
        assert!(warming.contains("at the risk target"), "{warming}");
    }

    /// With `longRunningStrategy: binpack`, a pod that runs until removed (a bare pod,
    /// `restartPolicy: Always` by default) is packed, but a node that runs a replica of its
    /// workload scores 0; a build (`restartPolicy: Never`) keeps `strategy`. Unset, both
    /// follow `strategy`.
    #[test]
    fn long_running_pods_pack_apart_from_their_replicas() {
        let svc = |name: &str, extra: serde_json::Value| {
            let mut v = json!({"metadata": {"labels": {"app": "svc"}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "4", "memory": "256Mi"}}}]}});
            crate::plugins::testutil::merge(&mut v, extra);
            pod(name, v)
        };
        let p = info(svc("p", json!({})));
        let build = info(svc("p", json!({"spec": {"restartPolicy": "Never"}})));
        let pack = RealHeadroomArgs {
            long_running_strategy: Some(Strategy::Binpack),
            ..Default::default()
        };
        // As `strategies`: spread by default; binpack's fuller node wins, "full" is below
        // the reserve.
        assert_eq!(scores(RealHeadroomArgs::default(), &p), [90, 40, 0, 48]);
        assert_eq!(scores(pack.clone(), &p), [10, 60, 0, 52]);
        assert_eq!(scores(pack.clone(), &build), [90, 40, 0, 48]);
        // A replica on "half" (same labels, no owner), another workload's pod on "idle".
        let replica = svc("p-2", json!({"spec": {"nodeName": "half"}}));
        let other = pod(
            "db-0",
            json!({"metadata": {"labels": {"app": "db"}}, "spec": {"nodeName": "idle"}}),
        );
        let snap = snap_with(vec![replica, other]);
        let on = |args: RealHeadroomArgs, p: &PodInfo| -> Vec<i64> {
            score_all(plugin(args), &snap, p)
                .unwrap()
                .into_iter()
                .map(|(_, s)| s)
                .collect()
        };
        assert_eq!(
            on(pack.clone(), &p),
            [10, 0, 0, 52],
            "the replica's node scores 0"
        );
        assert_eq!(on(RealHeadroomArgs::default(), &p), [90, 40, 0, 48]);
        let fw = crate::framework::Framework::new("t", vec![plugin(pack)], &[]);
        let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(1);
        let (d, _) = fw.schedule(&p, &snap, &mut rng, true);
        let details = d.scores[0].details.as_ref().unwrap();
        let shown = |i: usize| details[i].as_deref().unwrap();
        assert!(
            shown(1).contains("a replica of the pod's workload"),
            "{}",
            shown(1)
        );
        assert!(
            shown(0).starts_with("Binpack (runs until removed)"),
            "{}",
            shown(0)
        );
    }

    #[test]
    fn strategies() {
        // The profile predicts 0.4 CPU / 0.8 GiB: 10 % of each.
        // Big requests (4 CPU) do not matter where usage is fresh: only on "dark" (no
        // metrics), where requests stand in: 4 CPU of 4 → 0 % cpu free, 7.8 GiB free.
        let p = info(pod(
            "p",
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "4", "memory": "256Mi"}}}]}}),
        ));
        assert_eq!(scores(RealHeadroomArgs::default(), &p), [90, 40, 0, 48]);
        let binpack = RealHeadroomArgs {
            strategy: Strategy::Binpack,
            ..Default::default()
        };
        // full: 0 % memory free after < 10 % reserve → 0.
        assert_eq!(scores(binpack, &p), [10, 60, 0, 52]);
        let target = RealHeadroomArgs {
            strategy: Strategy::Target,
            ..Default::default()
        };
        // u = 0.1, 0.6, 1.0, 0.52 vs 0.7 → 1 − |u − 0.7| / 0.7.
        assert_eq!(scores(target, &p), [14, 86, 57, 74]);
        let fill = RealHeadroomArgs {
            strategy: Strategy::Fill,
            ..Default::default()
        };
        // The fuller resource: u = 0.1, 0.6, 1.0, 1.0 (dark's CPU, by requests). Up to 0.7,
        // 0.5 + 0.5·u/0.7; past it 0.5·(1 − (u − 0.7)/0.3).
        assert_eq!(scores(fill, &p), [57, 93, 0, 0]);
        let mem_only = RealHeadroomArgs {
            cpu_weight: 0.0,
            ..Default::default()
        };
        assert_eq!(scores(mem_only, &p), [90, 40, 0, 97]);
    }

    /// `keepWhole`: with one big build running (a profile of half a node's memory or
    /// more), the two feasible nodes with the most free memory score 0 for a small pod
    /// (`dark`, by requests, and `idle`), and `/explain` says why; a big pod, or the
    /// setting off, scores as before.
    #[test]
    fn keep_whole_keeps_the_emptiest_nodes_from_small_pods() {
        let mut s = snap();
        s.usage_mut().whole = crate::usage_context::WholeNeed {
            big_running: 1,
            big_run_s: 3600.0,
            small_run_s: 0.0,
            largest_memory: 8.0 * GI,
        };
        let p = info(pod(
            "p",
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "4", "memory": "256Mi"}}}]}}),
        ));
        let scored = |args: RealHeadroomArgs, s: &Snapshot, p: &PodInfo| -> Vec<i64> {
            score_all(plugin(args), s, p)
                .unwrap()
                .into_iter()
                .map(|(_, v)| v)
                .collect()
        };
        // Without it: [90, 40, 0, 48] (`strategies`).
        assert_eq!(scored(RealHeadroomArgs::default(), &s, &p), [0, 40, 0, 0]);
        let off = RealHeadroomArgs {
            keep_whole: false,
            ..Default::default()
        };
        assert_eq!(scored(off, &s, &p), [90, 40, 0, 48]);
        let fw = crate::framework::Framework::new("t", vec![plugin(Default::default())], &[]);
        let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(1);
        let (d, _) = fw.schedule(&p, &s, &mut rng, true);
        let idle = d.scores[0].details.as_ref().unwrap()[0].clone().unwrap();
        assert!(
            idle.starts_with("kept whole: 0, one of the 2 feasible nodes"),
            "{idle}"
        );
        // A pod predicted at half the largest node is what the nodes are kept for.
        let mut big = snap_with(vec![]);
        big.usage_mut().whole = s.usage().whole;
        let view = Arc::make_mut(&mut big.usage_mut().view);
        view.builders.insert(
            "default/Pod/p".into(),
            profile("default/Pod/p", 0.4, 4.0 * GI),
        );
        let kept = scored(RealHeadroomArgs::default(), &big, &p);
        assert!(kept[0] > 0 && kept[3] > 0, "{kept:?}");
    }

    #[test]
    fn skips_without_fresh_usage_and_explains() {
        let p = info(pod("p", json!({})));
        let bare = Snapshot::build([node("a", json!({})), node("b", json!({}))], []);
        assert!(score_all(plugin(RealHeadroomArgs::default()), &bare, &p).is_none());
        let fw =
            crate::framework::Framework::new("t", vec![plugin(RealHeadroomArgs::default())], &[]);
        let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(1);
        let (d, _) = fw.schedule(&p, &snap(), &mut rng, true);
        let details = d.scores[0].details.as_ref().unwrap();
        let idle = details[0].as_deref().unwrap();
        assert!(idle.contains("profile p95 of 5 runs"), "{idle}");
        assert!(
            details[3]
                .as_deref()
                .unwrap()
                .contains("node and pod requests")
        );
        assert!(
            RealHeadroom::new(
                RealHeadroomArgs {
                    target_percent: 120.0,
                    ..Default::default()
                },
                &PluginDeps::default()
            )
            .is_err()
        );
    }
}

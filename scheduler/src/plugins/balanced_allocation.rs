//! NodeResourcesBalancedAllocation: prefers nodes whose balance between resources improves
//! when the pod is placed there.
//!
//! The balance of a node is `(1 - std(requested fractions)) × 100` (50..=100 for two
//! resources). Since kube-scheduler v1.35 (kubernetes#135573) the score is the *change* of that
//! balance: `(150 + balance_after - balance_before) / 2`, so no change scores 75, going from
//! perfectly balanced to perfectly imbalanced 50, and the reverse 100. Best-effort pods (no
//! requests for the scored resources) are skipped, as upstream does.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::node_resources_fit::{
    ResourceKind, ResourceSpec, allocatable_requested, default_resources,
    table_allocatable_requested,
};
use crate::field;
use crate::framework::{
    CycleState, MAX_NODE_SCORE, Plugin, PreScorePlugin, Registered, ScorePlugin, Status,
};
use crate::snapshot::table::res;
use crate::snapshot::{NodeIdx, NodeInfo, PodInfo, Snapshot};

/// Plugin name.
pub const NAME: &str = "NodeResourcesBalancedAllocation";

/// Arguments (upstream's `NodeResourcesBalancedAllocationArgs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct BalancedAllocationArgs {
    /// Resources to balance (default cpu and memory; weights are ignored by this plugin).
    pub resources: Vec<ResourceSpec>,
}

impl Default for BalancedAllocationArgs {
    fn default() -> Self {
        BalancedAllocationArgs {
            resources: default_resources(),
        }
    }
}

/// The NodeResourcesBalancedAllocation plugin.
#[derive(Debug, Clone)]
pub struct BalancedAllocation {
    args: BalancedAllocationArgs,
    /// The resources, resolved (in `resources` order).
    kinds: Vec<ResourceKind>,
}

impl BalancedAllocation {
    /// Creates the plugin.
    pub fn new(args: BalancedAllocationArgs) -> Result<Self, field::Error> {
        if args.resources.is_empty() {
            return Err(field::Error::required(
                field::Path::new("resources"),
                "at least one resource is required",
            ));
        }
        let kinds = args
            .resources
            .iter()
            .map(|r| ResourceKind::of(&r.name))
            .collect();
        Ok(BalancedAllocation { args, kinds })
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

    /// Requested fractions (after, before) placing the pod.
    fn fractions(&self, pod: &PodInfo, node: &NodeInfo) -> (Fractions, Fractions) {
        self.fractions_with(pod, |name, _| allocatable_requested(node, pod, name, true))
    }

    /// Requested fractions from each resource's (allocatable, requested with the pod).
    #[inline(always)]
    fn fractions_with(
        &self,
        pod: &PodInfo,
        mut get: impl FnMut(&str, ResourceKind) -> Option<(i64, i64)>,
    ) -> (Fractions, Fractions) {
        let mut after = Fractions::new();
        let mut before = Fractions::new();
        for (r, kind) in self.args.resources.iter().zip(&self.kinds) {
            if let Some((alloc, req)) = get(&r.name, *kind) {
                let pod_req = match kind {
                    ResourceKind::Cpu => pod.requests.requests.milli_cpu,
                    ResourceKind::Memory => pod.requests.requests.memory,
                    ResourceKind::EphemeralStorage => pod.requests.requests.ephemeral_storage,
                    ResourceKind::Scalar => pod.requests.requests.get(&r.name),
                };
                after.push((req as f64 / alloc as f64).min(1.0));
                before.push(((req - pod_req) as f64 / alloc as f64).min(1.0));
            }
        }
        (after, before)
    }

    fn score_of(&self, pod: &PodInfo, node: &NodeInfo) -> (i64, i64, i64) {
        score_from(self.fractions(pod, node))
    }
}

/// The score, and the balance after and before, from the requested fractions.
#[inline(always)]
fn score_from((after, before): (Fractions, Fractions)) -> (i64, i64, i64) {
    let a = balanced_score(&after);
    let b = balanced_score(&before);
    ((150 + a - b) / 2, a, b)
}

/// Requested fractions, inline for the usual handful of resources (no allocation per node).
type Fractions = smallvec::SmallVec<[f64; 4]>;

/// Upstream's `balancedResourceScorer` over requested fractions.
#[inline(always)]
fn balanced_score(fractions: &[f64]) -> i64 {
    let std = match fractions.len() {
        0 | 1 => 0.0,
        2 => ((fractions[0] - fractions[1]) / 2.0).abs(),
        n => {
            let mean = fractions.iter().sum::<f64>() / n as f64;
            (fractions
                .iter()
                .map(|f| (f - mean) * (f - mean))
                .sum::<f64>()
                / n as f64)
                .sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl PreScorePlugin for BalancedAllocation {
    fn pre_score(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
        _feasible: &[NodeIdx],
    ) -> Status {
        let best_effort = self
            .args
            .resources
            .iter()
            .all(|r| pod.requests.requests.get(&r.name) == 0);
        if best_effort {
            Status::skip()
        } else {
            Status::success()
        }
    }
}

impl ScorePlugin for BalancedAllocation {
    fn normalizes(&self) -> bool {
        // No NormalizeScore: the raw scores are the normalised ones.
        false
    }

    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(self.score_of(pod, node).0)
    }

    fn score_batch(
        &self,
        _state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[NodeIdx],
        scores: &mut Vec<i64>,
    ) -> Result<(), (usize, Status)> {
        scores.reserve(nodes.len());
        if self.kinds.contains(&ResourceKind::Scalar) || self.kinds.len() > 4 {
            for &idx in nodes {
                let f = self.fractions_with(pod, |name, kind| {
                    table_allocatable_requested(snapshot, idx, pod, kind, name, true)
                });
                scores.push(score_from(f).0);
            }
            return Ok(());
        }
        // Every resource is a column of the node table: fixed arrays, the node's rows read
        // once (the same arithmetic as `fractions_with`).
        let t = snapshot.table();
        let mut cols = [0usize; 4];
        let mut pod_req = [0i64; 4];
        let k = self.kinds.len();
        for (j, kind) in self.kinds.iter().enumerate() {
            let (col, req) = match kind {
                ResourceKind::Cpu => (res::CPU, pod.requests.requests.milli_cpu),
                ResourceKind::Memory => (res::MEMORY, pod.requests.requests.memory),
                _ => (
                    res::EPHEMERAL_STORAGE,
                    pod.requests.requests.ephemeral_storage,
                ),
            };
            cols[j] = col;
            pod_req[j] = req;
        }
        if k == 2 {
            // The default: two resources, no loops.
            let [c0, c1, ..] = cols;
            let [p0, p1, ..] = pod_req;
            for &idx in nodes {
                let i = idx as usize;
                let (a, rq) = (&t.allocatable[i], &t.requested[i]);
                let (a0, a1) = (a[c0], a[c1]);
                if a0 == 0 || a1 == 0 {
                    // A resource the node lacks drops out: the general path.
                    scores.push(self.score_of(pod, snapshot.node(idx)).0);
                    continue;
                }
                let (r0, r1) = (rq[c0].saturating_add(p0), rq[c1].saturating_add(p1));
                let (a0, a1) = (a0 as f64, a1 as f64);
                // `balanced_score` of two fractions, written out.
                let two =
                    |x: f64, y: f64| ((1.0 - ((x - y) / 2.0).abs()) * MAX_NODE_SCORE as f64) as i64;
                let after = two((r0 as f64 / a0).min(1.0), (r1 as f64 / a1).min(1.0));
                let before = two(
                    ((r0 - p0) as f64 / a0).min(1.0),
                    ((r1 - p1) as f64 / a1).min(1.0),
                );
                scores.push((150 + after - before) / 2);
            }
            return Ok(());
        }
        for &idx in nodes {
            let i = idx as usize;
            let (a, rq) = (&t.allocatable[i], &t.requested[i]);
            let mut after = [0f64; 4];
            let mut before = [0f64; 4];
            let mut n = 0;
            for j in 0..k {
                let alloc = a[cols[j]];
                if alloc == 0 {
                    continue;
                }
                let req = rq[cols[j]].saturating_add(pod_req[j]);
                after[n] = (req as f64 / alloc as f64).min(1.0);
                before[n] = ((req - pod_req[j]) as f64 / alloc as f64).min(1.0);
                n += 1;
            }
            let (sa, sb) = (balanced_score(&after[..n]), balanced_score(&before[..n]));
            scores.push((150 + sa - sb) / 2);
        }
        Ok(())
    }

    fn explain_score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let (after, before) = self.fractions(pod, node);
        let (_, a, b) = self.score_of(pod, node);
        let show = |f: &[f64]| {
            f.iter()
                .map(|x| format!("{x:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        Some(format!(
            "requested fractions before [{}] balance {b}, after [{}] balance {a}",
            show(&before),
            show(&after)
        ))
    }
}

impl super::registry::PluginArgs for BalancedAllocationArgs {
    /// At least one resource: the constructor's check.
    fn validate(&self, path: &crate::field::Path) -> crate::field::ErrorList {
        super::registry::constructed(BalancedAllocation::new(self.clone()), path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::*;
    use serde_json::json;

    #[test]
    fn table() {
        assert_eq!(balanced_score(&[0.5, 0.5]), 100);
        assert_eq!(balanced_score(&[0.2, 0.6]), 80);
        assert_eq!(balanced_score(&[1.0, 0.0]), 50);
        assert_eq!(balanced_score(&[0.3]), 100);
        // three resources: population std of (0, 0.5, 1) = 0.408
        assert_eq!(balanced_score(&[0.0, 0.5, 1.0]), 59);

        let snap = Snapshot::build(
            [node("a", json!({})), node("b", json!({}))],
            [pod(
                "x",
                json!({"spec": {"nodeName": "a", "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "2"}}}]}}),
            )],
        );
        let p = info(pod(
            "p",
            json!({"spec": {"containers": [
            {"name": "c", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}}),
        ));
        // a: before cpu .5, mem 0 → balance 75; after cpu .75, mem .25 → 75: no change, 75.
        // b: before 0, 0 → 100; after .25, .25 → 100: no change, 75.
        let got = score_all(
            BalancedAllocation::new(Default::default())
                .unwrap()
                .register(),
            &snap,
            &p,
        );
        assert_eq!(got.unwrap(), vec![("a".into(), 75), ("b".into(), 75)]);
        // A memory-heavy pod on "a" (cpu .5, mem 0) balances it: after cpu .5, mem .5 → 100.
        let heavy = info(pod(
            "h",
            json!({"spec": {"containers": [
            {"name": "c", "resources": {"requests": {"memory": "4Gi"}}}]}}),
        ));
        let got = score_all(
            BalancedAllocation::new(Default::default())
                .unwrap()
                .register(),
            &snap,
            &heavy,
        );
        // a: (150 + 100 - 75) / 2 = 87; b: before 100, after (0, .5) → 75: (150 + 75 - 100) / 2 = 62.
        assert_eq!(got.unwrap(), vec![("a".into(), 87), ("b".into(), 62)]);
        let best_effort = info(pod("q", json!({})));
        assert!(
            score_all(
                BalancedAllocation::new(Default::default())
                    .unwrap()
                    .register(),
                &snap,
                &best_effort
            )
            .is_none()
        );
    }
}

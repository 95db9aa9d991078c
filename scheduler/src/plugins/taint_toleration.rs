//! TaintToleration: a node's `NoSchedule`/`NoExecute` taints must be tolerated (filter);
//! fewer untolerated `PreferNoSchedule` taints score higher.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Taint, Toleration};

use crate::framework::{
    CycleState, FilterPlugin, MAX_NODE_SCORE, NodeBatch, Plugin, PreScorePlugin, Registered,
    ScorePlugin, Status, default_normalize_score,
};
use crate::snapshot::table::flag;
use crate::snapshot::{NodeIdx, NodeInfo, PodInfo, Snapshot};

/// Plugin name.
pub const NAME: &str = "TaintToleration";
/// Upstream's (v1.36) reason; the taint itself goes into the detail.
pub const ERR_REASON: &str = "node(s) had untolerated taint(s)";

/// Whether one toleration tolerates one taint (upstream's `Toleration.ToleratesTaint`):
/// the effect matches (an empty toleration effect matches all), the key matches (an empty key
/// with `Exists` matches all keys), and `Exists` ignores the value while `Equal` (or empty)
/// compares it.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    tolerates_parts(
        t,
        &taint.key,
        taint.value.as_deref().unwrap_or(""),
        &taint.effect,
    )
}

/// [`tolerates`] for a taint given as key, value (empty when absent) and effect.
pub fn tolerates_parts(t: &Toleration, key: &str, value: &str, effect: &str) -> bool {
    if let Some(e) = t.effect.as_deref().filter(|e| !e.is_empty())
        && e != effect
    {
        return false;
    }
    if let Some(k) = t.key.as_deref().filter(|k| !k.is_empty())
        && k != key
    {
        return false;
    }
    match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => t.value.as_deref().unwrap_or("") == value,
        "Exists" => true,
        _ => false,
    }
}

/// Per taint id of the snapshot's taint dictionary: whether it counts against the pod
/// (`effects` holds its effect and no toleration tolerates it). Compiled once per batch:
/// clusters have few distinct taints.
pub fn untolerated_taints(
    snapshot: &Snapshot,
    tolerations: &[Toleration],
    effects: &[&str],
) -> Vec<bool> {
    let dict = &snapshot.table().taint_dict;
    let mut out = vec![false; dict.capacity()];
    for (id, t) in dict.iter() {
        out[id as usize] = effects.contains(&t.effect.as_str())
            && !tolerations
                .iter()
                .any(|tol| tolerates_parts(tol, &t.key, &t.value, &t.effect));
    }
    out
}

/// Whether any toleration tolerates the taint.
pub fn tolerations_tolerate(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

/// The first `NoSchedule`/`NoExecute` taint none of the tolerations tolerate.
pub fn find_untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints.iter().find(|t| {
        (t.effect == "NoSchedule" || t.effect == "NoExecute")
            && !tolerations_tolerate(tolerations, t)
    })
}

/// The TaintToleration plugin (no args).
#[derive(Debug, Default)]
pub struct TaintToleration;

/// PreScore state: the pod's tolerations that can apply to `PreferNoSchedule` taints.
struct PreScoreState {
    tolerations: Vec<Toleration>,
}

impl TaintToleration {
    /// Creates the plugin.
    pub fn new() -> Self {
        TaintToleration
    }

    /// Registers its extension points (Filter, PreScore, Score).
    pub fn register(self) -> Registered {
        let me = Arc::new(self);
        Registered {
            filter: Some(me.clone()),
            pre_score: Some(me.clone()),
            score: Some(me),
            ..Registered::new(NAME)
        }
    }

    fn count_intolerable(node: &NodeInfo, tolerations: &[Toleration]) -> i64 {
        node.taints()
            .iter()
            .filter(|t| t.effect == "PreferNoSchedule" && !tolerations_tolerate(tolerations, t))
            .count() as i64
    }
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Only the node's taints decide: a node joining or changing.
    fn events_to_register(&self) -> crate::framework::ClusterEvents {
        crate::framework::ClusterEvents::NODE_ONLY
    }
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        // Only NoSchedule/NoExecute taints can fail: skip other nodes without reading the taints.
        if !node.has_no_schedule_taints {
            return Status::success();
        }
        match find_untolerated(node.taints(), pod.tolerations()) {
            None => Status::success(),
            Some(t) => {
                let s = Status::unresolvable(ERR_REASON);
                if state.explain {
                    s.with_detail(format!(
                        "untolerated taint {{{}: {}}} ({})",
                        t.key,
                        t.value.as_deref().unwrap_or(""),
                        t.effect
                    ))
                } else {
                    s
                }
            }
        }
    }

    fn filter_batch(
        &self,
        _state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        batch: &mut NodeBatch,
    ) {
        let table = snapshot.table();
        if table.taint_dict.is_empty() {
            return;
        }
        let untolerated =
            untolerated_taints(snapshot, pod.tolerations(), &["NoSchedule", "NoExecute"]);
        if !untolerated.contains(&true) {
            return;
        }
        batch.reject_if(&Status::unresolvable(ERR_REASON), |idx| {
            table.has(idx, flag::NO_SCHEDULE_TAINTS)
                && table.taints[idx as usize]
                    .iter()
                    .any(|&t| untolerated[t as usize])
        });
    }
}

impl PreScorePlugin for TaintToleration {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
        _feasible: &[NodeIdx],
    ) -> Status {
        let tolerations = pod
            .tolerations()
            .iter()
            .filter(|t| {
                matches!(
                    t.effect.as_deref(),
                    None | Some("") | Some("PreferNoSchedule")
                )
            })
            .cloned()
            .collect();
        state.write(PreScoreState { tolerations });
        Status::success()
    }
}

impl ScorePlugin for TaintToleration {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        // Only PreferNoSchedule taints count: skip other nodes without reading the taints.
        if !node.has_prefer_no_schedule_taints {
            return Ok(0);
        }
        Ok(match state.read::<PreScoreState>() {
            Some(s) => Self::count_intolerable(node, &s.tolerations),
            None => Self::count_intolerable(node, pod.tolerations()),
        })
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
        let table = snapshot.table();
        let tolerations = match state.read::<PreScoreState>() {
            Some(s) => s.tolerations.as_slice(),
            None => pod.tolerations(),
        };
        let untolerated = untolerated_taints(snapshot, tolerations, &["PreferNoSchedule"]);
        for &idx in nodes {
            scores.push(if table.has(idx, flag::PREFER_NO_SCHEDULE_TAINTS) {
                table.taints[idx as usize]
                    .iter()
                    .filter(|&&t| untolerated[t as usize])
                    .count() as i64
            } else {
                0
            });
        }
        Ok(())
    }

    fn explain_score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let n = self.score(state, pod, node).ok()?;
        Some(format!("{n} untolerated PreferNoSchedule taint(s)"))
    }

    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, true, scores);
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::testutil::*;
    use serde_json::json;

    fn tol(v: serde_json::Value) -> Toleration {
        serde_json::from_value(v).unwrap()
    }
    fn taint(v: serde_json::Value) -> Taint {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn toleration_table() {
        let t = taint(json!({"key": "dedicated", "value": "db", "effect": "NoSchedule"}));
        let cases = [
            (
                json!({"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}),
                true,
            ),
            (json!({"key": "dedicated", "value": "db"}), true),
            (
                json!({"key": "dedicated", "operator": "Equal", "value": "web"}),
                false,
            ),
            (json!({"key": "dedicated", "operator": "Exists"}), true),
            (json!({"operator": "Exists"}), true),
            (json!({"operator": "Exists", "effect": "NoExecute"}), false),
            (json!({"key": "other", "operator": "Exists"}), false),
            (
                json!({"key": "dedicated", "operator": "Exists", "effect": "PreferNoSchedule"}),
                false,
            ),
            (
                json!({"key": "dedicated", "operator": "Bogus", "value": "db"}),
                false,
            ),
        ];
        for (tv, want) in cases {
            assert_eq!(tolerates(&tol(tv.clone()), &t), want, "{tv}");
        }
    }

    #[test]
    fn filter_and_score() {
        let snap = crate::snapshot::Snapshot::build(
            [
                node("clean", json!({})),
                node(
                    "db",
                    json!({"spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}}),
                ),
                node(
                    "soft1",
                    json!({"spec": {"taints": [{"key": "a", "effect": "PreferNoSchedule"}]}}),
                ),
                node(
                    "soft2",
                    json!({"spec": {"taints": [
                    {"key": "a", "effect": "PreferNoSchedule"}, {"key": "b", "effect": "PreferNoSchedule"}]}}),
                ),
                node(
                    "exec",
                    json!({"spec": {"taints": [{"key": "x", "effect": "NoExecute"}]}}),
                ),
            ],
            [],
        );
        let p = info(pod("p", json!({})));
        let got = filter_all(&TaintToleration::new().register(), &snap, &p);
        let codes: Vec<Code> = got.iter().map(|(_, s)| s.code).collect();
        use Code::*;
        assert_eq!(
            codes,
            [
                Success,
                UnschedulableAndUnresolvable,
                Success,
                Success,
                UnschedulableAndUnresolvable
            ]
        );
        assert_eq!(got[1].1.message(), ERR_REASON);
        assert!(
            got[1]
                .1
                .detail
                .as_deref()
                .unwrap()
                .contains("{dedicated: db}")
        );

        let scores = score_all(TaintToleration::new().register(), &snap, &p).unwrap();
        assert_eq!(
            scores,
            vec![
                ("clean".into(), 100),
                ("soft1".into(), 50),
                ("soft2".into(), 0)
            ]
        );
        // Tolerating "a" leaves one intolerable taint on soft2 only.
        let p2 = info(pod(
            "p2",
            json!({"spec": {"tolerations": [{"key": "a", "operator": "Exists"}]}}),
        ));
        let scores = score_all(TaintToleration::new().register(), &snap, &p2).unwrap();
        assert_eq!(
            scores,
            vec![
                ("clean".into(), 100),
                ("soft1".into(), 100),
                ("soft2".into(), 0)
            ]
        );
    }
}

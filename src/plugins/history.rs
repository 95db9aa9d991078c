//! History: a builder returns to the nodes it ran on, where its cache is warm (seed 000).
//!
//! The node at history index 0, 1, 2 scores 30, 20, 10 (`scores`), any other node 0. The
//! history is the pod annotation `bkci.dispatch.kubenetes/builder-history-nodes` (a JSON
//! list, most recent first) when present and readable; otherwise headroom's own placement
//! history of the builder (its placements since the last usage refresh, then the store's).
//! An entry matches a node by name or by any of its `status.addresses` (bk-ci lists IPs).
//! A malformed annotation is ignored with a note in the decision record, as bk-ci does.
//! Scores are not normalised: 30/20/10 are absolute, so that with the default weights the
//! history is worth at most 30 % of headroom's own score (seed 000's balance).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::framework::{CycleState, Plugin, PreScorePlugin, Registered, ScorePlugin, Status};
use crate::snapshot::{NodeIdx, NodeInfo, PodInfo, Snapshot};

use super::PluginDeps;

/// Plugin name.
pub const NAME: &str = "History";
/// bk-ci's annotation with the builder's previous nodes.
pub const HISTORY_ANNOTATION: &str = "bkci.dispatch.kubenetes/builder-history-nodes";

/// History's args (`pluginArgs.history`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct HistoryArgs {
    /// Score of the node at each history index, most recent first. Default `[30, 20, 10]`.
    pub scores: Vec<i64>,
}

impl Default for HistoryArgs {
    fn default() -> Self {
        HistoryArgs {
            scores: vec![30, 20, 10],
        }
    }
}

/// Where the cycle's history came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum From {
    Annotation,
    Scheduler,
}

struct Cycle {
    nodes: Vec<String>,
    from: From,
}

/// The History plugin.
#[derive(Debug)]
pub struct History {
    args: HistoryArgs,
    identity: headroom_collectors::IdentityConfig,
}

impl History {
    /// Creates the plugin; scores must be within 0..=100.
    pub fn new(args: HistoryArgs, deps: &PluginDeps) -> Result<Self, String> {
        if let Some(bad) = args.scores.iter().find(|s| !(0..=100).contains(*s)) {
            return Err(format!("score {bad} is not in 0..=100"));
        }
        Ok(History {
            args,
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

    fn index_of(&self, nodes: &[String], node: &NodeInfo) -> Option<usize> {
        let addresses = node
            .node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_deref())
            .unwrap_or(&[]);
        nodes
            .iter()
            .take(self.args.scores.len())
            .position(|h| **h == *node.name || addresses.iter().any(|a| a.address == *h))
    }
}

impl Plugin for History {
    fn name(&self) -> &'static str {
        NAME
    }
}

/// Reads the annotation: the list, or why it is ignored.
pub fn parse_history(text: &str) -> Result<Vec<String>, String> {
    let v: Vec<String> =
        serde_json::from_str(text).map_err(|e| format!("not a JSON list of node names: {e}"))?;
    Ok(v.into_iter().filter(|s| !s.trim().is_empty()).collect())
}

impl PreScorePlugin for History {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        _feasible: &[NodeIdx],
    ) -> Status {
        let annotated = pod
            .pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(HISTORY_ANNOTATION));
        let mut cycle = None;
        if let Some(text) = annotated {
            match parse_history(text) {
                Ok(nodes) if !nodes.is_empty() => {
                    cycle = Some(Cycle {
                        nodes,
                        from: From::Annotation,
                    })
                }
                Ok(_) => {}
                Err(e) => state.note(format!("ignored {HISTORY_ANNOTATION}: {e}")),
            }
        }
        if cycle.is_none() {
            let builder = headroom_collectors::builder_identity(&pod.pod.metadata, &self.identity);
            let usage = snapshot.usage();
            let mut nodes: Vec<String> = usage
                .history
                .get(&builder)
                .map(|h| h.iter().cloned().collect())
                .unwrap_or_default();
            for n in usage.view.placements.get(&builder).into_iter().flatten() {
                if !nodes.contains(n) {
                    nodes.push(n.clone());
                }
            }
            if !nodes.is_empty() {
                cycle = Some(Cycle {
                    nodes,
                    from: From::Scheduler,
                });
            }
        }
        match cycle {
            Some(c) => {
                state.write(c);
                Status::success()
            }
            None => Status::skip(),
        }
    }
}

impl ScorePlugin for History {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(c) = state.read::<Cycle>() else {
            return Err(Status::error("History: PreScore did not run"));
        };
        Ok(self
            .index_of(&c.nodes, node)
            .map_or(0, |i| self.args.scores[i]))
    }

    fn explain_score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let c = state.read::<Cycle>()?;
        let from = match c.from {
            From::Annotation => "from the builder-history-nodes annotation",
            From::Scheduler => "from headroom's placement history",
        };
        Some(match self.index_of(&c.nodes, node) {
            Some(i) => format!("history index {i} {from} → {}", self.args.scores[i]),
            None => format!(
                "not in the builder's last {} nodes {from}",
                self.args.scores.len()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::*;
    use rand::SeedableRng;
    use serde_json::json;

    fn nodes() -> Snapshot {
        Snapshot::build(
            ["n1", "n2", "n3", "n4"].map(|n| {
                node(
                    n,
                    json!({"status": {"addresses": [{"type": "InternalIP", "address": format!("10.0.0.{}", &n[1..])}]}}),
                )
            }),
            [],
        )
    }

    fn plugin() -> Registered {
        History::new(HistoryArgs::default(), &PluginDeps::default())
            .unwrap()
            .register()
    }

    #[test]
    fn seed_000_scores_30_20_10() {
        let cases = [
            // IPs, as in the seed's example.
            (r#"["10.0.0.3","10.0.0.1","10.0.0.2"]"#, [20, 10, 30, 0]),
            // Names; a fourth entry scores nothing.
            (r#"["n2","n4","n1","n3"]"#, [10, 30, 0, 20]),
        ];
        for (annotation, want) in cases {
            let p = info(pod(
                "b",
                json!({"metadata": {"annotations": {HISTORY_ANNOTATION: annotation}}}),
            ));
            let got = score_all(plugin(), &nodes(), &p).unwrap();
            let scores: Vec<i64> = got.iter().map(|(_, s)| *s).collect();
            assert_eq!(scores, want, "{annotation}");
        }
    }

    #[test]
    fn garbage_is_ignored_and_own_history_used() {
        let p = info(pod(
            "b",
            json!({"metadata": {"labels": {"bkci.dispatch.kubenetes/core": "builder-7"},
                   "annotations": {HISTORY_ANNOTATION: "10.0.0.1,10.0.0.2"}}}),
        ));
        // No other history: skipped, with the note in the record.
        assert!(score_all(plugin(), &nodes(), &p).is_none());
        let fw = crate::framework::Framework::new("t", vec![plugin()], &[]);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let (d, _) = fw.schedule(&p, &nodes(), &mut rng, true);
        assert!(
            d.notes[0].starts_with(
                "ignored bkci.dispatch.kubenetes/builder-history-nodes: not a JSON list"
            ),
            "{:?}",
            d.notes
        );

        // headroom's own history (scheduler first, then the store's view).
        let mut snap = nodes();
        snap.usage_mut()
            .history
            .insert("builder-7".into(), ["n4".to_string()].into());
        let mut view = crate::analytics::UsageView::default();
        view.placements
            .insert("builder-7".into(), vec!["n4".into(), "n2".into()]);
        snap.usage_mut().view = Arc::new(view);
        let got = score_all(plugin(), &snap, &p).unwrap();
        let scores: Vec<i64> = got.iter().map(|(_, s)| *s).collect();
        assert_eq!(scores, [0, 20, 0, 30]);
        assert!(History::new(HistoryArgs { scores: vec![101] }, &PluginDeps::default()).is_err());
    }
}

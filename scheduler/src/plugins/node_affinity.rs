//! NodeAffinity: `spec.nodeSelector` and required node affinity filter nodes (terms ORed,
//! expressions ANDed, `matchFields` on `metadata.name`); preferred terms score by weight.

use std::sync::Arc;

use k8s_openapi::api::core::v1::NodeAffinity as K8sNodeAffinity;
use serde::{Deserialize, Serialize};

use crate::field;
use crate::framework::NodeBatch;
use crate::framework::{
    CycleState, FilterPlugin, MAX_NODE_SCORE, NodeNames, Plugin, PreFilterPlugin, PreScorePlugin,
    Registered, ScorePlugin, Status, WrittenIn, default_normalize_score,
};
use crate::selector::{
    CompiledNodeSelector, CompiledSelector, CompiledTerm, NodeSelector, Selector, Term,
};
use crate::snapshot::{NodeIdx, NodeInfo, PodInfo, Snapshot};

/// Plugin name.
pub const NAME: &str = "NodeAffinity";
/// Upstream's reason for a node that does not match the pod's selector or required affinity.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";
/// Upstream's reason for a node that does not match the profile's added affinity.
pub const ERR_REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";
/// Upstream's reason when `matchFields` terms name no node at all.
pub const ERR_REASON_CONFLICT: &str = "pod affinity terms conflict";

/// Arguments (upstream's `NodeAffinityArgs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct NodeAffinityArgs {
    /// Node affinity added to every pod of the profile: its required terms must hold in
    /// addition to the pod's own, its preferred terms add to the score. Default: none.
    pub added_affinity: Option<K8sNodeAffinity>,
}

/// A pod's required node constraints: `nodeSelector` AND (any required term).
#[derive(Debug, Clone)]
pub struct RequiredNodeAffinity {
    selector: Option<Selector>,
    terms: Option<NodeSelector>,
}

impl RequiredNodeAffinity {
    /// Compiles a pod's `nodeSelector` and required node affinity.
    pub fn of(pod: &PodInfo) -> RequiredNodeAffinity {
        let spec = pod.pod.spec.as_ref();
        let selector = spec
            .and_then(|s| s.node_selector.as_ref())
            .filter(|m| !m.is_empty())
            .map(Selector::from_map);
        let terms = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| na.required_during_scheduling_ignored_during_execution.as_ref())
            .map(|ns| {
                NodeSelector::new(
                    &ns.node_selector_terms,
                    "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
                )
            });
        RequiredNodeAffinity { selector, terms }
    }

    /// Compiled against the snapshot's label columns, for [`CompiledRequired::matches`].
    pub fn compile(&self, snapshot: &Snapshot) -> CompiledRequired {
        let labels = &snapshot.table().labels;
        CompiledRequired {
            selector: self
                .selector
                .as_ref()
                .map(|s| CompiledSelector::new(s, labels)),
            terms: self
                .terms
                .as_ref()
                .map(|t| CompiledNodeSelector::new(t, labels, &|n| snapshot.index_of(n))),
        }
    }

    /// Whether the node satisfies both parts.
    pub fn matches(&self, node: &NodeInfo) -> bool {
        if let Some(s) = &self.selector
            && !s.matches(node.labels())
        {
            return false;
        }
        match &self.terms {
            Some(t) => t.matches(node.labels(), &node.name),
            None => true,
        }
    }
}

/// [`RequiredNodeAffinity`] compiled against one snapshot: node by index.
#[derive(Debug, Clone)]
pub struct CompiledRequired {
    selector: Option<CompiledSelector>,
    terms: Option<CompiledNodeSelector>,
}

impl CompiledRequired {
    /// Whether node `idx` of the snapshot it was compiled for satisfies both parts.
    #[inline]
    pub fn matches(&self, snapshot: &Snapshot, idx: NodeIdx) -> bool {
        let labels = &snapshot.table().labels;
        self.selector
            .as_ref()
            .is_none_or(|s| s.matches(labels, idx))
            && self.terms.as_ref().is_none_or(|t| t.matches(labels, idx))
    }
}

struct PreFilterState {
    required: RequiredNodeAffinity,
    compiled: CompiledRequired,
    added: Option<CompiledNodeSelector>,
}

struct PreScoreState {
    preferred: Vec<(Term, i64)>,
    compiled: Vec<(CompiledTerm, i64)>,
}

/// The NodeAffinity plugin.
#[derive(Debug, Clone)]
pub struct NodeAffinity {
    added_required: Option<NodeSelector>,
    added_preferred: Vec<(Term, i64)>,
}

/// A compiled term's error as a field error (its field is a path under the args).
fn selector_error(e: &crate::selector::SelectorError) -> field::Error {
    field::Error::invalid(field::Path::new(e.field.clone()), "", e.message.clone())
}

fn compile_preferred(
    terms: &[k8s_openapi::api::core::v1::PreferredSchedulingTerm],
    field: &str,
) -> Result<Vec<(Term, i64)>, field::Error> {
    let mut out = Vec::new();
    for (i, t) in terms.iter().enumerate() {
        let term = Term::new(&t.preference, &format!("{field}[{i}].preference"));
        // Upstream skips zero weights and empty terms before parsing.
        if t.weight == 0 || term.is_empty() {
            continue;
        }
        if let Some(e) = &term.error {
            return Err(selector_error(e));
        }
        out.push((term, i64::from(t.weight)));
    }
    Ok(out)
}

impl NodeAffinity {
    /// Creates the plugin; an invalid added affinity is a configuration error.
    pub fn new(args: NodeAffinityArgs) -> Result<Self, field::Error> {
        let mut added_required = None;
        let mut added_preferred = Vec::new();
        if let Some(a) = &args.added_affinity {
            if let Some(req) = &a.required_during_scheduling_ignored_during_execution {
                let ns = NodeSelector::new(&req.node_selector_terms, "addedAffinity.required");
                if let Some(e) = ns.terms.iter().find_map(|t| t.error.as_ref()) {
                    return Err(selector_error(e));
                }
                added_required = Some(ns);
            }
            if let Some(pref) = &a.preferred_during_scheduling_ignored_during_execution {
                added_preferred = compile_preferred(pref, "addedAffinity.preferred")?;
            }
        }
        Ok(NodeAffinity {
            added_required,
            added_preferred,
        })
    }

    /// Registers its extension points (PreFilter, Filter, PreScore, Score).
    pub fn register(self) -> Registered {
        let me = Arc::new(self);
        Registered {
            pre_filter: Some(me.clone()),
            filter: Some(me.clone()),
            pre_score: Some(me.clone()),
            score: Some(me),
            ..Registered::new(NAME)
        }
    }
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Only the node's labels decide: a node joining or changing.
    fn events_to_register(&self) -> crate::framework::ClusterEvents {
        crate::framework::ClusterEvents::NODE_ONLY
    }
}

impl PreFilterPlugin for NodeAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, Option<NodeNames>) {
        let required = RequiredNodeAffinity::of(pod);
        if required.selector.is_none() && required.terms.is_none() && self.added_required.is_none()
        {
            return (Status::skip(), None);
        }
        // Terms that all name nodes through `metadata.name In [...]` restrict the cycle to those
        // nodes (upstream's PreFilterResult); any term without such a field keeps all nodes.
        let mut names: Option<NodeNames> = None;
        if let Some(terms) = required.terms.as_ref().filter(|t| !t.terms.is_empty()) {
            let mut all_named = true;
            for t in &terms.terms {
                let mut term_names: Option<NodeNames> = None;
                for r in &t.fields {
                    if let (true, crate::selector::Op::In(vs)) = (r.key == "metadata.name", &r.op) {
                        let s: NodeNames = vs.iter().cloned().collect();
                        term_names = Some(match term_names {
                            None => s,
                            Some(prev) => prev.intersection(&s).cloned().collect(),
                        });
                    }
                }
                match term_names {
                    None => {
                        all_named = false;
                        break;
                    }
                    Some(s) => names.get_or_insert_with(NodeNames::new).extend(s),
                }
            }
            if !all_named {
                names = None;
            }
        }
        let compiled = required.compile(snapshot);
        let added = self.added_required.as_ref().map(|a| {
            CompiledNodeSelector::new(a, &snapshot.table().labels, &|n| snapshot.index_of(n))
        });
        state.write(PreFilterState {
            required,
            compiled,
            added,
        });
        match names {
            Some(n) if n.is_empty() => (Status::unresolvable(ERR_REASON_CONFLICT), None),
            other => (Status::success(), other),
        }
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if let Some(added) = &self.added_required
            && !added.matches(node.labels(), &node.name)
        {
            return Status::unresolvable(ERR_REASON_ENFORCED);
        }
        let ok = match state.read::<PreFilterState>() {
            Some(s) => s.required.matches(node),
            None => RequiredNodeAffinity::of(pod).matches(node),
        };
        if ok {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_POD)
        }
    }

    fn filter_batch(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        batch: &mut NodeBatch,
    ) {
        let Some(s) = state.read::<PreFilterState>() else {
            return batch.retain(|idx| {
                let st = self.filter(state, pod, snapshot.node(idx));
                (!st.is_success()).then_some(st)
            });
        };
        let labels = &snapshot.table().labels;
        let enforced = Status::unresolvable(ERR_REASON_ENFORCED);
        let mismatch = Status::unresolvable(ERR_REASON_POD);
        batch.retain(|idx| {
            if let Some(added) = &s.added
                && !added.matches(labels, idx)
            {
                return Some(enforced.clone());
            }
            (!s.compiled.matches(snapshot, idx)).then(|| mismatch.clone())
        });
    }
}

impl PreScorePlugin for NodeAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        _feasible: &[NodeIdx],
    ) -> Status {
        let pref = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| {
                na.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            });
        if pref.is_none() && self.added_preferred.is_empty() {
            return Status::skip();
        }
        let mut preferred = self.added_preferred.clone();
        if let Some(p) = pref {
            match compile_preferred(
                p,
                "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution",
            ) {
                Ok(v) => preferred.extend(v),
                Err(e) => return Status::error(e.to_string()),
            }
        }
        let labels = &snapshot.table().labels;
        let compiled = preferred
            .iter()
            .map(|(t, w)| (CompiledTerm::new(t, labels, &|n| snapshot.index_of(n)), *w))
            .collect();
        state.write(PreScoreState {
            preferred,
            compiled,
        });
        Status::success()
    }
}

impl ScorePlugin for NodeAffinity {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state.written_by::<PreScoreState>(NAME, WrittenIn::PreScore)?;
        Ok(s.preferred
            .iter()
            .filter(|(t, _)| t.matches(node.labels(), &node.name))
            .map(|(_, w)| *w)
            .sum())
    }

    fn score_batch(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[NodeIdx],
        scores: &mut Vec<i64>,
    ) -> Result<(), (usize, Status)> {
        let labels = &snapshot.table().labels;
        state.score_each::<PreScoreState>(NAME, nodes, scores, |s, idx| {
            s.compiled
                .iter()
                .filter(|(t, _)| t.matches(labels, idx))
                .map(|(_, w)| *w)
                .sum()
        })
    }

    fn explain_score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let s = state.read::<PreScoreState>()?;
        let matched: Vec<String> = s
            .preferred
            .iter()
            .enumerate()
            .filter(|(_, (t, _))| t.matches(node.labels(), &node.name))
            .map(|(i, (_, w))| format!("term {i} (weight {w})"))
            .collect();
        Some(if matched.is_empty() {
            "no preferred term matches".to_string()
        } else {
            format!("matches {}", matched.join(", "))
        })
    }

    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, false, scores);
        Status::success()
    }
}

impl super::registry::PluginArgs for NodeAffinityArgs {
    /// Upstream's `ValidateNodeAffinityArgs` (the added affinity compiles): the
    /// constructor's check.
    fn validate(&self, path: &crate::field::Path) -> crate::field::ErrorList {
        super::registry::constructed(NodeAffinity::new(self.clone()), path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::testutil::*;
    use serde_json::json;

    fn snap() -> Snapshot {
        Snapshot::build(
            [
                node(
                    "n1",
                    json!({"metadata": {"labels": {"zone": "a", "gen": "3"}}}),
                ),
                node(
                    "n2",
                    json!({"metadata": {"labels": {"zone": "b", "gen": "5"}}}),
                ),
                node("n3", json!({"metadata": {"labels": {"gen": "x"}}})),
            ],
            [],
        )
    }

    fn codes(extra: serde_json::Value) -> Vec<Code> {
        let reg = NodeAffinity::new(NodeAffinityArgs::default())
            .unwrap()
            .register();
        filter_all(&reg, &snap(), &info(pod("p", extra)))
            .into_iter()
            .map(|(_, s)| s.code)
            .collect()
    }

    fn required(terms: serde_json::Value) -> serde_json::Value {
        json!({"spec": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}})
    }

    #[test]
    fn filter_table() {
        use Code::*;
        const NO: Code = UnschedulableAndUnresolvable;
        let cases = [
            ("no constraints: skip", json!({}), [Skip, Skip, Skip]),
            (
                "nodeSelector",
                json!({"spec": {"nodeSelector": {"zone": "a"}}}),
                [Success, NO, NO],
            ),
            (
                "In",
                required(
                    json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]),
                ),
                [Success, Success, NO],
            ),
            (
                "NotIn matches absent keys",
                required(
                    json!([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}]),
                ),
                [NO, Success, Success],
            ),
            (
                "Gt ignores non-integers",
                required(
                    json!([{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]}]),
                ),
                [NO, Success, NO],
            ),
            (
                "Lt",
                required(
                    json!([{"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["4"]}]}]),
                ),
                [Success, NO, NO],
            ),
            (
                "terms are ORed",
                required(json!([
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}])),
                [Success, NO, Success],
            ),
            (
                "expressions are ANDed",
                required(json!([{"matchExpressions": [
                    {"key": "zone", "operator": "Exists"}, {"key": "gen", "operator": "In", "values": ["5"]}]}])),
                [NO, Success, NO],
            ),
            (
                "selector AND affinity",
                {
                    let mut v = required(
                        json!([{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]),
                    );
                    merge(&mut v, json!({"spec": {"nodeSelector": {"gen": "3"}}}));
                    v
                },
                [Success, NO, NO],
            ),
            (
                "invalid term matches nothing",
                required(
                    json!([{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["a"]}]}]),
                ),
                [NO, NO, NO],
            ),
            (
                "empty term list matches nothing",
                required(json!([])),
                [NO, NO, NO],
            ),
        ];
        for (name, extra, want) in cases {
            assert_eq!(codes(extra), want, "{name}");
        }
    }

    #[test]
    fn match_fields_restrict_nodes() {
        let reg = NodeAffinity::new(NodeAffinityArgs::default())
            .unwrap()
            .register();
        let p = info(pod(
            "p",
            required(json!([
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["ghost"]}]}])),
        ));
        let mut state = CycleState::new(false);
        let (s, names) = reg
            .pre_filter
            .as_ref()
            .unwrap()
            .pre_filter(&mut state, &p, &snap());
        assert!(s.is_success());
        assert_eq!(
            names.unwrap().into_iter().collect::<Vec<_>>(),
            vec!["ghost", "n2"]
        );

        let conflict = info(pod(
            "p",
            required(json!([
            {"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n1"]},
                {"key": "metadata.name", "operator": "In", "values": ["n2"]}]}])),
        ));
        let (s, _) = reg
            .pre_filter
            .as_ref()
            .unwrap()
            .pre_filter(&mut state, &conflict, &snap());
        assert_eq!(s.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), ERR_REASON_CONFLICT);
    }

    #[test]
    fn preferred_scores() {
        let p = info(pod(
            "p",
            json!({"spec": {"affinity": {"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
                {"weight": 30, "preference": {"matchExpressions": [{"key": "gen", "operator": "Exists"}]}},
                {"weight": 0, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}}
            ]}}}}),
        ));
        let reg = NodeAffinity::new(NodeAffinityArgs::default())
            .unwrap()
            .register();
        let scores = score_all(reg, &snap(), &p).unwrap();
        // raw: n1 40, n2 30, n3 30 → normalised against the max 40.
        assert_eq!(
            scores,
            vec![("n1".into(), 100), ("n2".into(), 75), ("n3".into(), 75)]
        );
        let reg = NodeAffinity::new(NodeAffinityArgs::default())
            .unwrap()
            .register();
        assert!(score_all(reg, &snap(), &info(pod("q", json!({})))).is_none());
    }

    #[test]
    fn added_affinity() {
        let args: NodeAffinityArgs = serde_json::from_value(json!({"addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]}}}))
        .unwrap();
        let reg = NodeAffinity::new(args).unwrap().register();
        let got = filter_all(&reg, &snap(), &info(pod("p", json!({}))));
        assert_eq!(got[2].1.message(), ERR_REASON_ENFORCED);
        assert!(got[0].1.is_success());
        let bad: NodeAffinityArgs = serde_json::from_value(json!({"addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["x"]}]}]}}}))
        .unwrap();
        assert!(NodeAffinity::new(bad).is_err());
    }
}

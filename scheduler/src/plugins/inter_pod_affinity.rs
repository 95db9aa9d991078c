//! `InterPodAffinity`: required pod affinity and anti-affinity (Filter) and preferred pod
//! affinity and anti-affinity (Score), as upstream's
//! `pkg/scheduler/framework/plugins/interpodaffinity`.
//!
//! PreFilter counts, per topology domain (`topologyKey=value` of the node an existing pod sits
//! on):
//! - existing pods whose required anti-affinity terms match the incoming pod (only pods with
//!   such terms are visited, from the snapshot's [`PodIndex`](crate::snapshot::PodIndex) list);
//! - existing pods matching *all* of the incoming pod's required affinity terms (one increment
//!   per term, in that term's domain);
//! - existing pods matching each required anti-affinity term of the incoming pod.
//!
//! Candidates for the incoming pod's selectors come from the label index and are confirmed
//! with the full term (namespaces, namespace selector, label selector). Filter then only looks
//! up the node's labels in those counts. Nodes lacking a required affinity term's topology key
//! fail affinity; a node lacking an anti-affinity term's key is not in any domain of that term
//! and passes it.
//!
//! Score sums, per domain, the weights of the incoming pod's preferred terms matched by
//! existing pods (anti-affinity subtracts), plus the existing pods' required affinity terms
//! (`hardPodAffinityWeight`) and preferred terms that match the incoming pod. Normalisation is
//! min/max scaling to 0..=100, truncated.

use std::cell::OnceCell;
use std::sync::Arc;

use smallvec::SmallVec;

use serde::{Deserialize, Serialize};

use super::topology::{DomainCounts, TopologyCounts};
use crate::framework::{
    CycleState, FilterPlugin, MAX_NODE_SCORE, NodeBatch, NodeNames, Plugin, PreFilterPlugin,
    PreScorePlugin, Registered, ScorePlugin, Status, WrittenIn,
};
use crate::selector::{Labels, Selector};
use crate::snapshot::{AffinityTerm, NodeIdx, NodeInfo, PodInfo, Snapshot};

/// The plugin's name.
pub const NAME: &str = "InterPodAffinity";

/// Reason when a node's domain lacks the pods the incoming pod's required affinity needs.
pub const ERR_REASON_AFFINITY_RULES_NOT_MATCH: &str = "node(s) didn't match pod affinity rules";
/// Reason when a node's domain has pods the incoming pod's required anti-affinity forbids.
pub const ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't match pod anti-affinity rules";
/// Reason when an existing pod's required anti-affinity forbids the incoming pod there.
pub const ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// Arguments of the plugin (upstream's `InterPodAffinityArgs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct InterPodAffinityArgs {
    /// Score weight of an existing pod's *required* affinity term that the incoming pod
    /// matches (0..=100; 0 ignores such terms when scoring). Default 1.
    pub hard_pod_affinity_weight: i32,
    /// When true, existing pods' preferred terms are ignored for incoming pods that have no
    /// preferred (anti-)affinity terms of their own (PreScore skips). Default false.
    pub ignore_preferred_terms_of_existing_pods: bool,
}

impl Default for InterPodAffinityArgs {
    fn default() -> Self {
        InterPodAffinityArgs {
            hard_pod_affinity_weight: 1,
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

impl super::registry::PluginArgs for InterPodAffinityArgs {
    /// Upstream's `ValidateInterPodAffinityArgs`: the weight within 0..=100.
    fn validate(&self, path: &crate::field::Path) -> crate::field::ErrorList {
        let mut errors = crate::field::ErrorList::new();
        if !(0..=100).contains(&self.hard_pod_affinity_weight) {
            errors.push(super::registry::not_in(
                path.child("hardPodAffinityWeight"),
                self.hard_pod_affinity_weight,
                "0..=100",
            ));
        }
        errors
    }
}

/// The InterPodAffinity plugin.
#[derive(Debug, Clone, Default)]
pub struct InterPodAffinity {
    args: InterPodAffinityArgs,
}

impl InterPodAffinity {
    /// Builds the plugin.
    pub fn new(args: InterPodAffinityArgs) -> Self {
        InterPodAffinity { args }
    }

    /// Registers the plugin for PreFilter, Filter, PreScore and Score.
    pub fn register(self) -> Registered {
        let me = Arc::new(self);
        let mut r = Registered::new(NAME);
        r.pre_filter = Some(me.clone());
        r.filter = Some(me.clone());
        r.pre_score = Some(me.clone());
        r.score = Some(me);
        r
    }
}

/// Whether `pod`'s namespace is one `term` is about. The namespace labels are read only when
/// the term has a namespace selector that needs them.
fn namespace_matches(term: &AffinityTerm, pod: &PodInfo, snapshot: &Snapshot) -> bool {
    if term.namespaces.contains(&*pod.namespace) {
        return true;
    }
    let sel = &term.namespace_selector;
    if sel.nothing {
        return false;
    }
    sel.is_everything() || sel.matches(&snapshot.namespace_labels(&pod.namespace))
}

/// Whether `pod` is one `term` is about (namespace and labels).
pub(crate) fn term_matches(term: &AffinityTerm, pod: &PodInfo, snapshot: &Snapshot) -> bool {
    term.selector.matches(pod.labels()) && namespace_matches(term, pod, snapshot)
}

/// Calls `f` for every assigned pod `selector` may match (a superset: confirm with the full
/// selector), from the label index when it can narrow the selector down, else for all pods.
pub(crate) fn for_each_candidate(
    snapshot: &Snapshot,
    selector: &Selector,
    mut f: impl FnMut(NodeIdx, &PodInfo),
) {
    match snapshot.pod_index().candidates(selector) {
        Some(lists) => {
            for list in lists {
                for e in list {
                    f(e.node, &e.pod);
                }
            }
        }
        None => {
            for (i, node) in snapshot.nodes().iter().enumerate() {
                for p in &node.pods {
                    f(i as NodeIdx, p);
                }
            }
        }
    }
}

/// The incoming pod's namespace labels, read at most once per call site.
struct IncomingNamespace<'a> {
    snapshot: &'a Snapshot,
    namespace: &'a str,
    labels: OnceCell<Labels>,
}

impl<'a> IncomingNamespace<'a> {
    fn new(snapshot: &'a Snapshot, namespace: &'a str) -> Self {
        IncomingNamespace {
            snapshot,
            namespace,
            labels: OnceCell::new(),
        }
    }

    /// Whether an existing pod's `term` is about the incoming pod (`pod`).
    fn term_matches(&self, term: &AffinityTerm, pod: &PodInfo) -> bool {
        if !term.selector.matches(pod.labels()) {
            return false;
        }
        if term.namespaces.contains(self.namespace) {
            return true;
        }
        let sel = &term.namespace_selector;
        if sel.nothing {
            return false;
        }
        sel.is_everything()
            || sel.matches(
                self.labels
                    .get_or_init(|| self.snapshot.namespace_labels(self.namespace).into_owned()),
            )
    }
}

/// A term's topology key, resolved for the cycle: the counts slot it adds to.
#[derive(Debug, Clone, Copy)]
struct TermKey {
    slot: Option<usize>,
}

/// What PreFilter computed for Filter.
#[derive(Debug, Default)]
struct PreFilterState {
    /// Domains holding existing pods whose required anti-affinity matches the incoming pod.
    existing_anti_affinity: TopologyCounts,
    /// Domains holding pods that match all of the incoming pod's required affinity terms.
    affinity: TopologyCounts,
    /// Domains holding pods that match the incoming pod's required anti-affinity terms.
    anti_affinity: TopologyCounts,
    /// Per required affinity term of the incoming pod: its key in `affinity` (`None`: no
    /// node has the key).
    affinity_keys: Vec<TermKey>,
    /// Per required anti-affinity term: its key in `anti_affinity`.
    anti_affinity_keys: Vec<TermKey>,
    /// The incoming pod matches all of its own required affinity terms.
    self_match: bool,
}

/// What PreScore computed for Score.
#[derive(Debug, Default)]
struct PreScoreState {
    /// Per topology key, per domain: summed weights.
    topology_score: TopologyCounts,
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, Option<NodeNames>) {
        let index = snapshot.pod_index();
        let no_terms = pod.required_affinity.is_empty() && pod.required_anti_affinity.is_empty();
        if no_terms && index.with_required_anti_affinity().is_empty() {
            return (Status::skip(), None);
        }
        let labels = &snapshot.table().labels;
        let mut s = PreFilterState::default();

        // Existing pods' required anti-affinity against the incoming pod.
        let incoming_ns = IncomingNamespace::new(snapshot, &pod.namespace);
        for e in index.anti_affinity_terms_for(pod.labels()) {
            let t = &e.pod.required_anti_affinity[e.term];
            if incoming_ns.term_matches(t, pod) {
                let slot = s.existing_anti_affinity.slot(labels, &t.topology_key);
                s.existing_anti_affinity.add(slot, e.node, 1);
            }
        }
        if no_terms && s.existing_anti_affinity.is_empty() {
            return (Status::skip(), None);
        }

        // Pods matching all of the incoming pod's required affinity terms; candidates from the
        // most selective term.
        let keys: Vec<TermKey> = pod
            .required_affinity
            .iter()
            .map(|t| TermKey {
                slot: s.affinity.slot(labels, &t.topology_key),
            })
            .collect();
        if let Some(narrowest) = pod
            .required_affinity
            .iter()
            .min_by_key(|t| index.candidate_count(&t.selector).unwrap_or(usize::MAX))
        {
            for_each_candidate(snapshot, &narrowest.selector, |n, p| {
                if pod
                    .required_affinity
                    .iter()
                    .all(|t| term_matches(t, p, snapshot))
                {
                    for k in &keys {
                        s.affinity.add(k.slot, n, 1);
                    }
                }
            });
            s.self_match = pod
                .required_affinity
                .iter()
                .all(|t| term_matches(t, pod, snapshot));
        }
        s.affinity_keys = keys;

        // Pods matching each of the incoming pod's required anti-affinity terms.
        for t in &pod.required_anti_affinity {
            let slot = s.anti_affinity.slot(labels, &t.topology_key);
            s.anti_affinity_keys.push(TermKey { slot });
            for_each_candidate(snapshot, &t.selector, |n, p| {
                if term_matches(t, p, snapshot) {
                    s.anti_affinity.add(slot, n, 1);
                }
            });
        }

        state.write(s);
        (Status::success(), None)
    }
}

/// Why a node fails, before it becomes a status (no strings off the explain path).
enum Failure<'a> {
    LacksKey(&'a str),
    NoAffinityPods(&'a str),
    AntiAffinity(&'a str, i64),
    ExistingAntiAffinity(&'a str, i64),
}

impl Failure<'_> {
    fn status(&self) -> Status {
        match self {
            Failure::LacksKey(_) | Failure::NoAffinityPods(_) => {
                Status::unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH)
            }
            Failure::AntiAffinity(..) => {
                Status::unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH)
            }
            Failure::ExistingAntiAffinity(..) => {
                Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH)
            }
        }
    }

    fn detail(&self, node: &NodeInfo) -> String {
        let value = |key: &str| node.labels().get(key).cloned().unwrap_or_default();
        match self {
            Failure::LacksKey(key) => format!("node lacks topology key {key:?}"),
            Failure::NoAffinityPods(key) => {
                format!("no pod matching all required affinity terms in this node's {key:?} domain")
            }
            Failure::AntiAffinity(key, c) => format!(
                "{c} pod(s) matching a required anti-affinity term in {key}={}",
                value(key)
            ),
            Failure::ExistingAntiAffinity(key, c) => format!(
                "{c} existing pod(s) in {key}={} have required anti-affinity matching this pod",
                value(key)
            ),
        }
    }
}

/// The PreFilter state arranged for per-node checks (built once per batch).
struct Checks<'a> {
    /// Per required affinity term: its key and its counts (`None`: no node has the key).
    affinity: SmallVec<[(&'a str, Option<&'a DomainCounts>); 2]>,
    /// Upstream's escape hatch: no pod matches the terms, but the pod itself does.
    first_of_series: bool,
    /// Per required anti-affinity term that some pod matched: its key and counts.
    anti: SmallVec<[(&'a str, &'a DomainCounts); 2]>,
    /// Existing pods' anti-affinity, per topology key.
    existing: SmallVec<[&'a DomainCounts; 2]>,
}

impl<'a> Checks<'a> {
    fn new(s: &'a PreFilterState, pod: &'a PodInfo) -> Checks<'a> {
        let anti = if s.anti_affinity.is_empty() {
            SmallVec::new()
        } else {
            pod.required_anti_affinity
                .iter()
                .zip(&s.anti_affinity_keys)
                .filter_map(|(t, k)| Some((t.topology_key.as_str(), s.anti_affinity.get(k.slot)?)))
                .collect()
        };
        Checks {
            affinity: pod
                .required_affinity
                .iter()
                .zip(&s.affinity_keys)
                .map(|(t, k)| (t.topology_key.as_str(), s.affinity.get(k.slot)))
                .collect(),
            first_of_series: s.affinity.is_empty() && s.self_match,
            anti,
            existing: s.existing_anti_affinity.keys().collect(),
        }
    }

    /// Why node `idx` fails, if it does.
    #[inline]
    fn check(&self, idx: NodeIdx) -> Option<Failure<'a>> {
        // Required affinity: every term's domain must hold matching pods, unless no pod in
        // the cluster matches and the pod matches its own terms.
        let mut pods_exist = true;
        let mut missing: Option<&str> = None;
        for &(key, counts) in &self.affinity {
            let Some(domain) = counts.and_then(|c| c.domain(idx)) else {
                return Some(Failure::LacksKey(key));
            };
            if counts.map_or(0, |c| c.get(domain)) <= 0 {
                pods_exist = false;
                missing.get_or_insert(key);
            }
        }
        if !pods_exist && !self.first_of_series {
            return Some(Failure::NoAffinityPods(missing.unwrap_or_default()));
        }
        for &(key, counts) in &self.anti {
            if let Some(c) = counts.at(idx)
                && c > 0
            {
                return Some(Failure::AntiAffinity(key, c));
            }
        }
        for counts in &self.existing {
            if let Some(c) = counts.at(idx)
                && c > 0
            {
                return Some(Failure::ExistingAntiAffinity(&counts.key, c));
            }
        }
        None
    }
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let s = match state.written_by::<PreFilterState>(NAME, WrittenIn::PreFilter) {
            Ok(s) => s,
            Err(e) => return e,
        };
        match Checks::new(s, pod).check(node.idx) {
            None => Status::success(),
            Some(f) if state.explain => f.status().with_detail(f.detail(node)),
            Some(f) => f.status(),
        }
    }

    fn filter_batch(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
        batch: &mut NodeBatch,
    ) {
        let s = match state.written_by::<PreFilterState>(NAME, WrittenIn::PreFilter) {
            Ok(s) => s,
            Err(e) => return batch.reject_all(&e),
        };
        let checks = Checks::new(s, pod);
        batch.retain(|idx| checks.check(idx).map(|f| f.status()));
    }
}

impl PreScorePlugin for InterPodAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: &[NodeIdx],
    ) -> Status {
        if feasible.is_empty() {
            return Status::skip();
        }
        let has_constraints =
            !pod.preferred_affinity.is_empty() || !pod.preferred_anti_affinity.is_empty();
        if self.args.ignore_preferred_terms_of_existing_pods && !has_constraints {
            return Status::skip();
        }
        let index = snapshot.pod_index();
        if !has_constraints && index.with_affinity().is_empty() {
            return Status::skip();
        }
        let labels = &snapshot.table().labels;
        let mut m = TopologyCounts::default();

        // The incoming pod's preferred terms, matched by any existing pod.
        for (terms, sign) in [
            (&pod.preferred_affinity, 1i64),
            (&pod.preferred_anti_affinity, -1i64),
        ] {
            for wt in terms {
                let delta = sign * i64::from(wt.weight);
                let slot = m.slot(labels, &wt.term.topology_key);
                for_each_candidate(snapshot, &wt.term.selector, |n, p| {
                    if term_matches(&wt.term, p, snapshot) {
                        m.add(slot, n, delta);
                    }
                });
            }
        }

        // Existing pods' terms that the incoming pod matches.
        let incoming_ns = IncomingNamespace::new(snapshot, &pod.namespace);
        let hard = i64::from(self.args.hard_pod_affinity_weight);
        for e in index.with_scoring_terms() {
            if snapshot.node(e.node).labels().is_empty() {
                continue;
            }
            if hard > 0 {
                for t in &e.pod.required_affinity {
                    if incoming_ns.term_matches(t, pod) {
                        let slot = m.slot(labels, &t.topology_key);
                        m.add(slot, e.node, hard);
                    }
                }
            }
            for wt in &e.pod.preferred_affinity {
                if incoming_ns.term_matches(&wt.term, pod) {
                    let slot = m.slot(labels, &wt.term.topology_key);
                    m.add(slot, e.node, i64::from(wt.weight));
                }
            }
            for wt in &e.pod.preferred_anti_affinity {
                if incoming_ns.term_matches(&wt.term, pod) {
                    let slot = m.slot(labels, &wt.term.topology_key);
                    m.add(slot, e.node, -i64::from(wt.weight));
                }
            }
        }

        if m.is_empty() {
            return Status::skip();
        }
        state.write(PreScoreState { topology_score: m });
        Status::success()
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state.written_by::<PreScoreState>(NAME, WrittenIn::PreScore)?;
        Ok(s.topology_score.keys().filter_map(|c| c.at(node.idx)).sum())
    }

    fn score_batch(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
        nodes: &[NodeIdx],
        scores: &mut Vec<i64>,
    ) -> Result<(), (usize, Status)> {
        let s = state
            .written_by::<PreScoreState>(NAME, WrittenIn::PreScore)
            .map_err(|e| (0, e))?;
        // The domain counts gathered once for the batch, not once a node.
        let keys: SmallVec<[&DomainCounts; 4]> = s.topology_score.keys().collect();
        scores.extend(
            nodes
                .iter()
                .map(|&idx| keys.iter().filter_map(|c| c.at(idx)).sum::<i64>()),
        );
        Ok(())
    }

    fn explain_score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let s = state.read::<PreScoreState>()?;
        let labels = node.labels();
        let mut parts: Vec<String> = s
            .topology_score
            .keys()
            .filter_map(|c| {
                let v = labels.get(&c.key)?;
                Some(format!("{}={v}: {}", c.key, c.at(node.idx).unwrap_or(0)))
            })
            .collect();
        parts.sort();
        Some(if parts.is_empty() {
            "no weighted domain".to_string()
        } else {
            parts.join(", ")
        })
    }

    fn normalize(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        match state.read::<PreScoreState>() {
            Some(s) if !s.topology_score.is_empty() => {}
            _ => return Status::success(),
        }
        let min = scores.iter().copied().min().unwrap_or(0);
        let max = scores.iter().copied().max().unwrap_or(0);
        let diff = max - min;
        for s in scores.iter_mut() {
            let f = if diff > 0 {
                MAX_NODE_SCORE as f64 * ((*s - min) as f64 / diff as f64)
            } else {
                0.0
            };
            *s = f as i64;
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::{Value, json};

    fn node(name: &str, labels: Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
        }))
        .unwrap()
    }

    fn pod(name: &str, ns: &str, node: &str, labels: Value, affinity: Value) -> Pod {
        let mut spec = json!({"containers": [{"name": "c"}]});
        if !node.is_empty() {
            spec["nodeName"] = json!(node);
        }
        if !affinity.is_null() {
            spec["affinity"] = affinity;
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}"), "labels": labels},
            "spec": spec
        }))
        .unwrap()
    }

    fn term(labels: Value, key: &str) -> Value {
        json!({"labelSelector": {"matchLabels": labels}, "topologyKey": key})
    }

    /// Runs the plugin over every node: per node the filter verdict (`None` = pass), and the
    /// normalized scores of the feasible nodes (`None` when PreScore skips).
    #[allow(clippy::type_complexity)]
    fn run(
        pl: &InterPodAffinity,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (
        Code,
        Vec<(String, Option<(Code, String)>)>,
        Option<Vec<(String, i64)>>,
    ) {
        let pi = PodInfo::new(Arc::new(pod.clone()));
        let mut state = CycleState::new(true);
        let (s, _) = pl.pre_filter(&mut state, &pi, snapshot);
        let mut verdicts = Vec::new();
        let mut feasible = Vec::new();
        for (i, n) in snapshot.nodes().iter().enumerate() {
            let v = if s.is_skip() {
                None
            } else {
                let f = pl.filter(&state, &pi, n);
                (!f.is_success()).then(|| (f.code, f.message()))
            };
            if v.is_none() {
                feasible.push(i as NodeIdx);
            }
            verdicts.push((n.name.to_string(), v));
        }
        let ps = pl.pre_score(&mut state, &pi, snapshot, &feasible);
        let scores = (!ps.is_skip()).then(|| {
            let mut raw: Vec<i64> = feasible
                .iter()
                .map(|i| pl.score(&state, &pi, snapshot.node(*i)).unwrap())
                .collect();
            assert!(pl.normalize(&state, &pi, &mut raw).is_success());
            feasible
                .iter()
                .zip(raw)
                .map(|(i, s)| (snapshot.node(*i).name.to_string(), s))
                .collect()
        });
        (s.code, verdicts, scores)
    }

    fn zones() -> Vec<Node> {
        vec![
            node("n1", json!({"zone": "a", "kubernetes.io/hostname": "n1"})),
            node("n2", json!({"zone": "a", "kubernetes.io/hostname": "n2"})),
            node("n3", json!({"zone": "b", "kubernetes.io/hostname": "n3"})),
            node("n4", json!({"kubernetes.io/hostname": "n4"})),
        ]
    }

    fn rejected(v: &[(String, Option<(Code, String)>)]) -> Vec<(&str, Code, &str)> {
        v.iter()
            .filter_map(|(n, r)| r.as_ref().map(|(c, m)| (n.as_str(), *c, m.as_str())))
            .collect()
    }

    #[test]
    fn prefilter_skips_without_required_terms() {
        let snap = Snapshot::build(
            zones(),
            [pod(
                "e",
                "default",
                "n1",
                json!({"app": "web"}),
                Value::Null,
            )],
        );
        let p = pod("p", "default", "", json!({"app": "web"}), Value::Null);
        let (code, verdicts, scores) = run(&InterPodAffinity::default(), &p, &snap);
        assert_eq!(code, Code::Skip);
        assert!(rejected(&verdicts).is_empty());
        assert!(scores.is_none());
    }

    #[test]
    fn required_affinity_table() {
        use Code::UnschedulableAndUnresolvable as U;
        let r = ERR_REASON_AFFINITY_RULES_NOT_MATCH;
        let aff = |terms: Vec<Value>| json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}});
        type Case = (
            &'static str,
            Vec<Pod>,
            Pod,
            Vec<(&'static str, Code, &'static str)>,
        );
        let cases: Vec<Case> = vec![
            (
                "zone with a matching pod; n4 lacks the key",
                vec![pod(
                    "db",
                    "default",
                    "n2",
                    json!({"app": "db"}),
                    Value::Null,
                )],
                pod(
                    "p",
                    "default",
                    "",
                    json!({}),
                    aff(vec![term(json!({"app": "db"}), "zone")]),
                ),
                vec![("n3", U, r), ("n4", U, r)],
            ),
            (
                "no matching pod anywhere, pod does not match itself",
                vec![],
                pod(
                    "p",
                    "default",
                    "",
                    json!({}),
                    aff(vec![term(json!({"app": "db"}), "zone")]),
                ),
                vec![("n1", U, r), ("n2", U, r), ("n3", U, r), ("n4", U, r)],
            ),
            (
                "first of a series: matches its own term, allowed where the key exists",
                vec![],
                pod(
                    "p",
                    "default",
                    "",
                    json!({"app": "db"}),
                    aff(vec![term(json!({"app": "db"}), "zone")]),
                ),
                vec![("n4", U, r)],
            ),
            (
                "matching pod in another namespace does not count, self-match rescues",
                vec![pod("db", "other", "n3", json!({"app": "db"}), Value::Null)],
                pod(
                    "p",
                    "default",
                    "",
                    json!({"app": "db"}),
                    aff(vec![term(json!({"app": "db"}), "zone")]),
                ),
                vec![("n4", U, r)],
            ),
            (
                "namespaceSelector {} selects all namespaces",
                vec![pod("db", "other", "n3", json!({"app": "db"}), Value::Null)],
                pod(
                    "p",
                    "default",
                    "",
                    json!({}),
                    aff(vec![
                        json!({"labelSelector": {"matchLabels": {"app": "db"}}, "namespaceSelector": {}, "topologyKey": "zone"}),
                    ]),
                ),
                vec![("n1", U, r), ("n2", U, r), ("n4", U, r)],
            ),
            (
                "two terms: a pod must match both; each term counts in its own key",
                vec![
                    pod("x", "default", "n1", json!({"app": "db"}), Value::Null),
                    pod(
                        "y",
                        "default",
                        "n3",
                        json!({"app": "db", "tier": "1"}),
                        Value::Null,
                    ),
                ],
                pod(
                    "p",
                    "default",
                    "",
                    json!({}),
                    aff(vec![
                        term(json!({"app": "db"}), "zone"),
                        term(json!({"tier": "1"}), "kubernetes.io/hostname"),
                    ]),
                ),
                vec![("n1", U, r), ("n2", U, r), ("n4", U, r)],
            ),
        ];
        for (name, existing, p, want) in cases {
            let snap = Snapshot::build(zones(), existing);
            let (code, verdicts, _) = run(&InterPodAffinity::default(), &p, &snap);
            assert_eq!(code, Code::Success, "{name}");
            assert_eq!(rejected(&verdicts), want, "{name}");
        }
    }

    #[test]
    fn anti_affinity_both_directions() {
        use Code::Unschedulable as U;
        let anti = |labels: Value, key: &str| json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(labels, key)]}});
        // Incoming pod's anti-affinity: n1/n2 share zone a with a web pod; n4 has no zone.
        let snap = Snapshot::build(
            zones(),
            [pod(
                "w",
                "default",
                "n1",
                json!({"app": "web"}),
                Value::Null,
            )],
        );
        let p = pod(
            "p",
            "default",
            "",
            json!({"app": "web"}),
            anti(json!({"app": "web"}), "zone"),
        );
        let (_, v, _) = run(&InterPodAffinity::default(), &p, &snap);
        assert_eq!(
            rejected(&v),
            vec![
                ("n1", U, ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH),
                ("n2", U, ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH)
            ]
        );

        // Existing pod's anti-affinity (hostname) against the incoming pod; the incoming pod
        // has no terms of its own.
        let snap = Snapshot::build(
            zones(),
            [
                pod(
                    "g",
                    "default",
                    "n3",
                    json!({"app": "guard"}),
                    anti(json!({"app": "web"}), "kubernetes.io/hostname"),
                ),
                pod(
                    "h",
                    "default",
                    "n2",
                    json!({"app": "guard"}),
                    anti(json!({"app": "other"}), "zone"),
                ),
            ],
        );
        let p = pod("p", "default", "", json!({"app": "web"}), Value::Null);
        let (code, v, _) = run(&InterPodAffinity::default(), &p, &snap);
        assert_eq!(code, Code::Success);
        assert_eq!(
            rejected(&v),
            vec![("n3", U, ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH)]
        );
        // A pod the existing terms do not match: PreFilter skips.
        let p = pod("p", "default", "", json!({"app": "api"}), Value::Null);
        assert_eq!(run(&InterPodAffinity::default(), &p, &snap).0, Code::Skip);
    }

    #[test]
    fn scores_preferred_terms_and_symmetry() {
        let pref = |kind: &str, w: i32, labels: Value, key: &str| {
            json!({kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "podAffinityTerm": term(labels, key)}
            ]}})
        };
        let snap = Snapshot::build(
            zones(),
            [
                pod("a", "default", "n1", json!({"app": "db"}), Value::Null),
                pod("b", "default", "n3", json!({"app": "db"}), Value::Null),
                pod("c", "default", "n3", json!({"app": "db"}), Value::Null),
            ],
        );
        // Preferred affinity weight 10 toward db in zone: a=10, b=20, n4 none (0).
        let p = pod(
            "p",
            "default",
            "",
            json!({}),
            pref("podAffinity", 10, json!({"app": "db"}), "zone"),
        );
        let (_, _, scores) = run(&InterPodAffinity::default(), &p, &snap);
        // raw: n1 10, n2 10, n3 20, n4 0 → min 0, max 20.
        assert_eq!(
            scores.unwrap(),
            vec![
                ("n1".into(), 50),
                ("n2".into(), 50),
                ("n3".into(), 100),
                ("n4".into(), 0)
            ]
        );

        // Preferred anti-affinity: negative sums; min/max scaling, truncated.
        let p = pod(
            "p",
            "default",
            "",
            json!({}),
            pref(
                "podAntiAffinity",
                3,
                json!({"app": "db"}),
                "kubernetes.io/hostname",
            ),
        );
        let (_, _, scores) = run(&InterPodAffinity::default(), &p, &snap);
        // raw: n1 -3, n2 0, n3 -6, n4 0 → (s+6)/6*100: 50, 100, 0, 100.
        assert_eq!(
            scores.unwrap(),
            vec![
                ("n1".into(), 50),
                ("n2".into(), 100),
                ("n3".into(), 0),
                ("n4".into(), 100)
            ]
        );

        // Existing pods' required affinity (hardPodAffinityWeight) and preferred anti-affinity
        // toward a pod without terms.
        let snap = Snapshot::build(
            zones(),
            [
                pod(
                    "x",
                    "default",
                    "n1",
                    json!({}),
                    json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(json!({"app": "web"}), "zone")]}}),
                ),
                pod(
                    "y",
                    "default",
                    "n3",
                    json!({}),
                    pref("podAntiAffinity", 7, json!({"app": "web"}), "zone"),
                ),
            ],
        );
        let p = pod("p", "default", "", json!({"app": "web"}), Value::Null);
        let pl = InterPodAffinity::new(InterPodAffinityArgs {
            hard_pod_affinity_weight: 5,
            ..Default::default()
        });
        let (_, _, scores) = run(&pl, &p, &snap);
        // raw: n1 5, n2 5, n3 -7, n4 0 → (s+7)/12*100 = 100, 100, 0, 58.33→58.
        assert_eq!(
            scores.unwrap(),
            vec![
                ("n1".into(), 100),
                ("n2".into(), 100),
                ("n3".into(), 0),
                ("n4".into(), 58)
            ]
        );
        // With the weight at 0 and the option to ignore existing pods' preferences: skip.
        let pl = InterPodAffinity::new(InterPodAffinityArgs {
            hard_pod_affinity_weight: 0,
            ignore_preferred_terms_of_existing_pods: true,
        });
        assert!(run(&pl, &p, &snap).2.is_none());
        // Terms that match nothing: PreScore skips.
        let p = pod("p", "default", "", json!({"app": "api"}), Value::Null);
        assert!(run(&InterPodAffinity::default(), &p, &snap).2.is_none());
    }

    #[test]
    fn args_serde_and_validation() {
        let a: InterPodAffinityArgs = serde_json::from_value(json!({})).unwrap();
        assert_eq!(a, InterPodAffinityArgs::default());
        assert_eq!(a.hard_pod_affinity_weight, 1);
        let a: InterPodAffinityArgs =
            serde_json::from_value(json!({"hardPodAffinityWeight": 101})).unwrap();
        use crate::plugins::registry::PluginArgs;
        let e = a.validate(&crate::field::Path::root()).to_string();
        assert_eq!(e, "hardPodAffinityWeight: 101 is not in 0..=100");
        assert!(serde_json::from_value::<InterPodAffinityArgs>(json!({"nope": 1})).is_err());
        let r = InterPodAffinity::default().register();
        assert_eq!(r.name, NAME);
        assert!(
            r.pre_filter.is_some()
                && r.filter.is_some()
                && r.pre_score.is_some()
                && r.score.is_some()
        );
    }
}

//! DefaultPreemption (PostFilter): when no node fits a pod, find the node where evicting
//! lower-priority pods makes it fit, with the fewest and least important victims — upstream's
//! `pkg/scheduler/framework/plugins/defaultpreemption` and `framework/preemption` (v1.36).
//!
//! The cycle stays pure: the plugin only *decides* (the [`Nomination`]: node and victims).
//! Acting on it — the pod's `status.nominatedNodeName`, each victim's `DisruptionTarget`
//! condition and deletion — is the caller's, outside the cycle (`serve`: `kube::preempt`;
//! `place`: the victims leave the what-if cluster and the pod is scheduled again).
//!
//! The steps, as upstream's `Evaluator.Preempt`:
//! 1. `PodEligibleToPreemptOthers`: not with `preemptionPolicy: Never`; not when the pod is
//!    already nominated to a node where a lower-priority pod is still terminating because of
//!    an earlier preemption (unless that node is now unresolvable for it).
//! 2. Candidates: only nodes whose filter status was `Unschedulable` (an
//!    `UnschedulableAndUnresolvable` node — a selector, a taint — cannot be helped).
//! 3. Dry run, from a random offset, until `max(nodes × minCandidateNodesPercentage %,
//!    minCandidateNodesAbsolute)` candidates are found (at least one not violating a PDB):
//!    on each node, `selectVictimsOnNode` removes every lower-priority pod, re-runs
//!    PreFilter and **every** Filter of the profile (headroom's own included) on the
//!    changed snapshot, then reprieves victims — those whose eviction would violate a
//!    PodDisruptionBudget first, then the others, most important first — keeping each one
//!    whose return still lets the pod fit.
//! 4. `pickOneNodeForPreemption`: fewest PDB violations, then the lowest priority of the
//!    most important victim, the smallest sum of priorities, the fewest victims, the latest
//!    start among the highest-priority victims; then the first candidate.
//!
//! With no candidate the status is `preemption: 0/N nodes are available: ...`, each node's
//! dry-run status counted, the nodes not tried saying `Preemption is not helpful for
//! scheduling`.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::framework::{
    Code, Nomination, Plugin, PostFilterArgs, PostFilterPlugin, Registered, Status,
    decision::NO_NODE_AVAILABLE,
};
use crate::snapshot::policy::DisruptionBudget;
use crate::snapshot::{NodeIdx, PodInfo, Snapshot};

/// Plugin name.
pub const NAME: &str = "DefaultPreemption";
/// The status of a node with no lower-priority pod.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";
/// The status of nodes preemption did not try (unresolvable for the pod).
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// `preemptionPolicy: Never`.
pub const NOT_ELIGIBLE_NEVER: &str = "not eligible due to preemptionPolicy=Never.";
/// Nominated, and a victim of an earlier preemption is still terminating there.
pub const NOT_ELIGIBLE_TERMINATING: &str =
    "not eligible due to a terminating pod on the nominated node.";
/// The condition reason upstream writes on victims (and reads back in eligibility).
pub const REASON_PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";

/// DefaultPreemption's args (`pluginArgs.defaultPreemption`), upstream's
/// `DefaultPreemptionArgs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct DefaultPreemptionArgs {
    /// The share of candidate nodes (in %, 0..=100) the dry run looks for before it stops.
    /// Default `10`.
    pub min_candidate_nodes_percentage: i32,
    /// At least this many candidate nodes (≥ 0). Default `100`. Both zero is invalid.
    pub min_candidate_nodes_absolute: i32,
}

impl Default for DefaultPreemptionArgs {
    fn default() -> Self {
        DefaultPreemptionArgs {
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
        }
    }
}

impl super::registry::PluginArgs for DefaultPreemptionArgs {
    /// Upstream's `ValidateDefaultPreemptionArgs`: the percentage within 0..=100, the
    /// absolute count not negative, and not both zero.
    fn validate(&self, path: &crate::field::Path) -> crate::field::ErrorList {
        use crate::field::Error;
        let p = path.child("minCandidateNodesPercentage");
        let a = path.child("minCandidateNodesAbsolute");
        let mut errors = crate::field::ErrorList::new();
        if !(0..=100).contains(&self.min_candidate_nodes_percentage) {
            errors.push(super::registry::not_in(
                p.clone(),
                self.min_candidate_nodes_percentage,
                "0..=100",
            ));
        }
        if self.min_candidate_nodes_absolute < 0 {
            errors.push(Error::invalid(
                a.clone(),
                self.min_candidate_nodes_absolute,
                "must not be negative",
            ));
        }
        if self.min_candidate_nodes_percentage == 0 && self.min_candidate_nodes_absolute == 0 {
            errors.push(Error::invalid(
                p,
                0,
                "cannot be zero at the same time as minCandidateNodesAbsolute",
            ));
            errors.push(Error::invalid(
                a,
                0,
                "cannot be zero at the same time as minCandidateNodesPercentage",
            ));
        }
        errors
    }
}

/// The DefaultPreemption plugin.
#[derive(Debug)]
pub struct DefaultPreemption {
    args: DefaultPreemptionArgs,
}

/// One node where preemption would work.
struct Candidate {
    node: NodeIdx,
    /// In the order upstream keeps them (see `select_victims`).
    victims: Vec<Arc<PodInfo>>,
    pdb_violations: usize,
}

/// `status.startTime` in nanoseconds; a pod without one counts as starting now (upstream's
/// `GetPodStartTime`), i.e. later than every recorded start.
fn start_nanos(p: &PodInfo) -> i64 {
    p.pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| {
            t.0.as_nanosecond()
                .clamp(i64::MIN as i128, i64::MAX as i128 - 1) as i64
        })
        .unwrap_or(i64::MAX)
}

/// Upstream's `MoreImportantPod` as an ordering: higher priority first, then earlier start.
fn more_important_first(a: &PodInfo, b: &PodInfo) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then_with(|| start_nanos(a).cmp(&start_nanos(b)))
}

/// The pod's `spec.preemptionPolicy` is `Never`.
fn preempt_never(pod: &PodInfo) -> bool {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.preemption_policy.as_deref())
        == Some("Never")
}

/// Upstream's `podTerminatingByPreemption`: deleted, with a true `DisruptionTarget`
/// condition whose reason is `PreemptionByScheduler`.
pub fn terminating_by_preemption(p: &PodInfo) -> bool {
    if p.pod.metadata.deletion_timestamp.is_none() {
        return false;
    }
    p.pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
        .is_some_and(|c| {
            c.status == "True" && c.reason.as_deref() == Some(REASON_PREEMPTION_BY_SCHEDULER)
        })
}

/// Upstream's `filterPodsWithPDBViolation` (the plugin's variant: every matching budget is
/// decremented, a pod violates when any goes below zero). Input order is kept in both
/// halves.
fn split_by_pdb_violation(
    pods: Vec<Arc<PodInfo>>,
    pdbs: &[&Arc<DisruptionBudget>],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i32> = pdbs.iter().map(|b| b.disruptions_allowed).collect();
    let (mut violating, mut fine) = (Vec::new(), Vec::new());
    for p in pods {
        let mut violated = false;
        for (i, b) in pdbs.iter().enumerate() {
            if b.covers(&p) {
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated {
            violating.push(p);
        } else {
            fine.push(p);
        }
    }
    (violating, fine)
}

/// `0/N nodes are available: <count> <reason>, ....` over explicit statuses, the other
/// nodes counted with `absent` (upstream's `FitError.Error()` without PreFilter or
/// PostFilter messages).
fn fit_message(n: usize, explicit: &[(NodeIdx, Status)], absent: &str) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, s) in explicit {
        for r in &s.reasons {
            *counts.entry(r.as_ref()).or_insert(0) += 1;
        }
    }
    if explicit.len() < n {
        *counts.entry(absent).or_insert(0) += n - explicit.len();
    }
    let mut parts: Vec<String> = counts.iter().map(|(r, c)| format!("{c} {r}")).collect();
    parts.sort();
    let mut msg = format!("0/{n} {NO_NODE_AVAILABLE}:");
    if !parts.is_empty() {
        msg.push_str(&format!(" {}.", parts.join(", ")));
    }
    msg
}

impl DefaultPreemption {
    /// Creates the plugin with validated args.
    pub fn new(args: DefaultPreemptionArgs) -> Result<Self, crate::field::Error> {
        use super::registry::PluginArgs;
        match args.validate(&crate::field::Path::root()).iter().next() {
            Some(e) => Err(e.clone()),
            None => Ok(DefaultPreemption { args }),
        }
    }

    /// Registers its extension points (PostFilter).
    pub fn register(self) -> Registered {
        Registered {
            post_filter: Some(Arc::new(self)),
            ..Registered::new(NAME)
        }
    }

    /// Upstream's `calculateNumCandidates`.
    fn num_candidates(&self, nodes: usize) -> usize {
        let n = nodes as i64 * self.args.min_candidate_nodes_percentage as i64 / 100;
        n.max(self.args.min_candidate_nodes_absolute as i64)
            .min(nodes as i64)
            .max(0) as usize
    }

    /// Upstream's `PodEligibleToPreemptOthers`: `Err(message)` when not eligible.
    fn eligible(&self, a: &PostFilterArgs<'_>) -> Result<(), &'static str> {
        if preempt_never(a.pod) {
            return Err(NOT_ELIGIBLE_NEVER);
        }
        let nominated = a
            .pod
            .pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .filter(|n| !n.is_empty());
        let Some(nominated) = nominated else {
            return Ok(());
        };
        let Some(idx) = a.snapshot.index_of(nominated) else {
            return Ok(());
        };
        if node_code(a, idx) == Some(Code::UnschedulableAndUnresolvable) {
            return Ok(());
        }
        let terminating = a
            .snapshot
            .node(idx)
            .pods
            .iter()
            .any(|p| p.priority < a.pod.priority && terminating_by_preemption(p));
        if terminating {
            return Err(NOT_ELIGIBLE_TERMINATING);
        }
        Ok(())
    }

    /// Upstream's `SelectVictimsOnNode`, on `work`: a copy of the snapshot made on first
    /// need (a node with no lower-priority pod costs no copy, so a cluster without
    /// priorities pays one pass over the pods of the candidate nodes), which this restores:
    /// every pod removed here is back on its node when it returns.
    fn select_victims(
        &self,
        a: &PostFilterArgs<'_>,
        work: &mut Option<Snapshot>,
        idx: NodeIdx,
        pdbs: &[&Arc<DisruptionBudget>],
    ) -> Result<(Vec<Arc<PodInfo>>, usize), Status> {
        let node = a.snapshot.node(idx);
        let node_name = node.name.to_string();
        let mut potential: Vec<Arc<PodInfo>> = node
            .pods
            .iter()
            .filter(|p| p.priority < a.pod.priority)
            .cloned()
            .collect();
        if potential.is_empty() {
            return Err(Status::unresolvable(NO_VICTIMS));
        }
        let work = work.get_or_insert_with(|| a.snapshot.clone());
        for p in &potential {
            work.remove_pod(&p.key(), &p.uid);
        }
        let restore = |work: &mut Snapshot, pods: &[Arc<PodInfo>]| {
            for p in pods {
                work.add_pod(p.clone(), &node_name);
            }
        };
        let s = a.framework.filter_node_in(a.state, a.pod, work, idx);
        if !s.is_success() {
            restore(work, &potential);
            return Err(s);
        }
        potential.sort_by(|x, y| more_important_first(x, y));
        let (violating, fine) = split_by_pdb_violation(potential, pdbs);
        let both = !violating.is_empty() && !fine.is_empty();
        let mut victims: Vec<Arc<PodInfo>> = Vec::new();
        let mut violations = 0;
        for (group, is_violating) in [(violating, true), (fine, false)] {
            for p in group {
                work.add_pod(p.clone(), &node_name);
                let fits = a.framework.filter_node_in(a.state, a.pod, work, idx);
                if fits.code == Code::Error {
                    work.remove_pod(&p.key(), &p.uid);
                    victims.push(p);
                    restore(work, &victims);
                    return Err(fits);
                }
                if !fits.is_success() {
                    work.remove_pod(&p.key(), &p.uid);
                    victims.push(p);
                    if is_violating {
                        violations += 1;
                    }
                }
            }
        }
        if both {
            victims.sort_by(|x, y| more_important_first(x, y));
        }
        restore(work, &victims);
        Ok((victims, violations))
    }
}

/// The code of a node's status in the failed cycle's record.
fn node_code(a: &PostFilterArgs<'_>, idx: NodeIdx) -> Option<Code> {
    let d = a.decision;
    if let Some((_, s)) = d.rejected.iter().find(|(i, _)| *i == idx) {
        return Some(s.code);
    }
    if d.feasible.contains(&idx) {
        return Some(Code::Success);
    }
    d.absent.as_ref().map(|s| s.code)
}

/// Every node's status code in the failed cycle's record, by index (one pass).
fn node_codes(a: &PostFilterArgs<'_>) -> Vec<Option<Code>> {
    let d = a.decision;
    let mut codes = vec![d.absent.as_ref().map(|s| s.code); a.snapshot.len()];
    for (i, s) in &d.rejected {
        if let Some(c) = codes.get_mut(*i as usize) {
            *c = Some(s.code);
        }
    }
    for i in &d.feasible {
        if let Some(c) = codes.get_mut(*i as usize) {
            *c = Some(Code::Success);
        }
    }
    codes
}

/// Upstream's `pickOneNodeForPreemption` (no extender score functions): each criterion
/// keeps the best candidates, the first left wins.
fn pick_one(candidates: &[Candidate]) -> usize {
    type Criterion = fn(&Candidate) -> i64;
    let criteria: [Criterion; 5] = [
        |c| -(c.pdb_violations as i64),
        |c| -(c.victims.first().map_or(0, |p| p.priority) as i64),
        |c| {
            -c.victims
                .iter()
                .map(|p| p.priority as i64 + i32::MAX as i64 + 1)
                .sum::<i64>()
        },
        |c| -(c.victims.len() as i64),
        |c| {
            // The earliest start among the highest-priority victims; the latest wins.
            let top = c.victims.iter().map(|p| p.priority).max().unwrap_or(0);
            c.victims
                .iter()
                .filter(|p| p.priority == top)
                .map(|p| start_nanos(p))
                .min()
                .unwrap_or(i64::MIN)
        },
    ];
    let mut left: Vec<usize> = (0..candidates.len()).collect();
    for f in criteria {
        let best = left
            .iter()
            .map(|&i| f(&candidates[i]))
            .max()
            .unwrap_or(i64::MIN);
        left.retain(|&i| f(&candidates[i]) == best);
        if left.len() == 1 {
            break;
        }
    }
    left.first().copied().unwrap_or(0)
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl PostFilterPlugin for DefaultPreemption {
    fn post_filter(&self, a: &PostFilterArgs<'_>) -> (Option<Nomination>, Status) {
        let tail = |s: Status| {
            let message = format!("preemption: {}", s.message());
            (None, Status::new(s.code, message).with_plugin(NAME))
        };
        if let Err(message) = self.eligible(a) {
            return tail(Status::unschedulable(message));
        }
        let n = a.snapshot.len();
        if n == 0 {
            return tail(Status::error("no nodes available"));
        }
        // Candidates: nodes the filters found Unschedulable (resolvable by removing pods).
        let codes = node_codes(a);
        let potential: Vec<NodeIdx> = (0..n as NodeIdx)
            .filter(|&i| codes[i as usize] == Some(Code::Unschedulable))
            .collect();
        let mut statuses: Vec<(NodeIdx, Status)> = Vec::new();
        let mut fine: Vec<Candidate> = Vec::new();
        let mut violating: Vec<Candidate> = Vec::new();
        if !potential.is_empty() {
            let pdbs: Vec<&Arc<DisruptionBudget>> = a.snapshot.policy().pdbs().collect();
            let offset = (a.random % potential.len() as u64) as usize;
            let wanted = self.num_candidates(potential.len());
            // At most one copy of the snapshot for the whole dry run; each node is
            // restored after.
            let mut work: Option<Snapshot> = None;
            for i in 0..potential.len() {
                let idx = potential[(offset + i) % potential.len()];
                match self.select_victims(a, &mut work, idx, &pdbs) {
                    Ok((victims, _)) if victims.is_empty() => statuses.push((
                        idx,
                        Status::error(format!(
                            "expected at least one victim pod on node {:?}",
                            a.snapshot.node(idx).name
                        )),
                    )),
                    Ok((victims, pdb_violations)) => {
                        let c = Candidate {
                            node: idx,
                            victims,
                            pdb_violations,
                        };
                        if pdb_violations == 0 {
                            fine.push(c);
                        } else {
                            violating.push(c);
                        }
                        if !fine.is_empty() && fine.len() + violating.len() >= wanted {
                            break;
                        }
                    }
                    Err(s) => statuses.push((idx, s)),
                }
            }
        }
        fine.append(&mut violating);
        let candidates = fine;
        if candidates.is_empty() {
            if let Some((_, e)) = statuses.iter().find(|(_, s)| s.code == Code::Error) {
                return tail(e.clone());
            }
            statuses.sort_by_key(|(i, _)| *i);
            return tail(Status::unschedulable(fit_message(
                n,
                &statuses,
                NOT_HELPFUL,
            )));
        }
        let best = &candidates[pick_one(&candidates)];
        (
            Some(Nomination {
                node: a.snapshot.names()[best.node as usize].clone(),
                victims: best.victims.clone(),
                pdb_violations: best.pdb_violations,
                cleared: Vec::new(),
            }),
            Status::success(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{Decision, Framework, Outcome};
    use crate::plugins::testutil::{info, node, pod};
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use serde_json::json;

    fn running(
        name: &str,
        node: &str,
        cpu: &str,
        priority: i32,
        start: &str,
    ) -> k8s_openapi::api::core::v1::Pod {
        pod(
            name,
            json!({
                "metadata": {"labels": {"app": name.trim_end_matches(char::is_numeric).trim_end_matches('-')}},
                "spec": {"nodeName": node, "priority": priority,
                         "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
                "status": {"phase": "Running", "startTime": start}
            }),
        )
    }

    fn framework() -> Framework {
        let profile = crate::config::ProfileConfig::default();
        crate::plugins::build_framework(&profile).expect("default profile")
    }

    fn decide(snap: &Snapshot, p: &PodInfo) -> Decision {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        framework().schedule(p, snap, &mut rng, false).0
    }

    use rand::SeedableRng;

    fn pending(priority: i32, cpu: &str, extra: serde_json::Value) -> PodInfo {
        let mut p = pod(
            "incoming",
            json!({"spec": {"priority": priority,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}),
        );
        let mut v = serde_json::to_value(&p).unwrap();
        crate::plugins::testutil::merge(&mut v, extra);
        p = serde_json::from_value(v).unwrap();
        info(p)
    }

    #[test]
    fn args_validation_table() {
        let cases = [
            (10, 100, None),
            (0, 1, None),
            (100, 0, None),
            (
                101,
                100,
                Some("minCandidateNodesPercentage: 101 is not in 0..=100"),
            ),
            (
                -1,
                100,
                Some("minCandidateNodesPercentage: -1 is not in 0..=100"),
            ),
            (
                10,
                -1,
                Some("minCandidateNodesAbsolute: must not be negative, got -1"),
            ),
            (
                0,
                0,
                Some("cannot be zero at the same time as minCandidateNodesAbsolute"),
            ),
        ];
        for (p, a, want) in cases {
            let args = DefaultPreemptionArgs {
                min_candidate_nodes_percentage: p,
                min_candidate_nodes_absolute: a,
            };
            match (DefaultPreemption::new(args), want) {
                (Ok(_), None) => {}
                (Err(e), Some(w)) => assert!(e.to_string().contains(w), "{p}/{a}: {e}"),
                (r, w) => panic!("{p}/{a}: got {:?}, want {w:?}", r.err()),
            }
        }
        let parsed: DefaultPreemptionArgs =
            serde_json::from_value(json!({"minCandidateNodesAbsolute": 5})).unwrap();
        assert_eq!(parsed.min_candidate_nodes_percentage, 10);
        assert!(serde_json::from_value::<DefaultPreemptionArgs>(json!({"bogus": 1})).is_err());
    }

    #[test]
    fn num_candidates_table() {
        let pl = DefaultPreemption::new(DefaultPreemptionArgs::default()).unwrap();
        for (nodes, want) in [(3, 3), (100, 100), (1000, 100), (5000, 500)] {
            assert_eq!(pl.num_candidates(nodes), want, "{nodes}");
        }
        let pl = DefaultPreemption::new(DefaultPreemptionArgs {
            min_candidate_nodes_percentage: 50,
            min_candidate_nodes_absolute: 1,
        })
        .unwrap();
        assert_eq!(pl.num_candidates(10), 5);
    }

    /// Two nodes of 4 CPUs, each full; the pod needs 2 CPUs.
    fn full_cluster(extra_pods: Vec<k8s_openapi::api::core::v1::Pod>) -> Snapshot {
        let mut pods = vec![
            running("a-low-1", "n1", "2", 100, "2024-01-01T00:00:01Z"),
            running("a-low-2", "n1", "2", 100, "2024-01-01T00:00:02Z"),
            running("b-mid-1", "n2", "2", 1000, "2024-01-01T00:00:03Z"),
            running("b-low-1", "n2", "2", 100, "2024-01-01T00:00:04Z"),
        ];
        pods.extend(extra_pods);
        Snapshot::build([node("n1", json!({})), node("n2", json!({}))], pods)
    }

    fn nomination(d: &Decision) -> (Option<String>, Vec<String>) {
        (
            d.nomination.as_ref().map(|n| n.node.to_string()),
            d.nomination
                .as_ref()
                .map(|n| n.victim_keys())
                .unwrap_or_default(),
        )
    }

    fn message(d: &Decision) -> String {
        match &d.outcome {
            Outcome::Unschedulable { message } => message.clone(),
            other => panic!("not unschedulable: {other:?}"),
        }
    }

    #[test]
    fn preemption_table() {
        struct Case {
            name: &'static str,
            snap: Snapshot,
            pod: PodInfo,
            node: Option<&'static str>,
            victims: &'static [&'static str],
            tail: Option<&'static str>,
        }
        let pdb = |name: &str, app: &str, allowed: i32| -> PodDisruptionBudget {
            serde_json::from_value(json!({
                "metadata": {"namespace": "default", "name": name},
                "spec": {"selector": {"matchLabels": {"app": app}}},
                "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
            }))
            .unwrap()
        };
        let with_pdbs = |mut s: Snapshot, pdbs: &[PodDisruptionBudget]| {
            s.policy_mut().replace_pdbs(pdbs);
            s
        };
        let cases = vec![
            Case {
                // n1: one low victim suffices (the later-started one is reprieved last, so
                // the more important one — earlier start — stays). n2's lowest victim has
                // priority 100 too, but n2 would keep the mid pod: equal; both need one
                // victim of 100 → latest start of the victims wins.
                name: "one victim, latest start wins",
                snap: full_cluster(vec![]),
                pod: pending(100000, "2", json!({})),
                node: Some("n2"),
                victims: &["default/b-low-1"],
                tail: None,
            },
            Case {
                name: "preemptionPolicy Never",
                snap: full_cluster(vec![]),
                pod: pending(100000, "2", json!({"spec": {"preemptionPolicy": "Never"}})),
                node: None,
                victims: &[],
                tail: Some(" preemption: not eligible due to preemptionPolicy=Never."),
            },
            Case {
                name: "no lower priority pods",
                snap: full_cluster(vec![]),
                pod: pending(100, "2", json!({})),
                node: None,
                victims: &[],
                tail: Some(
                    " preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.",
                ),
            },
            Case {
                name: "unresolvable nodes are not helped",
                snap: full_cluster(vec![]),
                pod: pending(
                    100000,
                    "2",
                    json!({"spec": {"nodeSelector": {"zone": "nowhere"}}}),
                ),
                node: None,
                victims: &[],
                tail: Some(
                    " preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
                ),
            },
            Case {
                name: "removing every victim is not enough",
                snap: full_cluster(vec![]),
                pod: pending(1000, "3", json!({})),
                // n2 keeps its mid pod (1000 is not lower than 1000): 2 free < 3; on n1
                // both low pods must go.
                node: Some("n1"),
                victims: &["default/a-low-1", "default/a-low-2"],
                tail: None,
            },
            Case {
                name: "PDB-protected victims are avoided",
                snap: with_pdbs(full_cluster(vec![]), &[pdb("b", "b-low", 0)]),
                pod: pending(100000, "2", json!({})),
                node: Some("n1"),
                victims: &["default/a-low-2"],
                tail: None,
            },
        ];
        for c in cases {
            let d = decide(&c.snap, &c.pod);
            let (node, victims) = nomination(&d);
            assert_eq!(node.as_deref(), c.node, "{}: {}", c.name, message(&d));
            assert_eq!(victims, c.victims, "{}", c.name);
            let msg = message(&d);
            match c.tail {
                Some(t) => assert!(msg.ends_with(t), "{}: {msg}", c.name),
                None => assert!(!msg.contains("preemption:"), "{}: {msg}", c.name),
            }
        }
    }

    #[test]
    fn filter_failure_after_removal_is_counted() {
        // The pod needs a host port a priority-1000 pod holds on n1, and n2 is
        // unresolvable (cordoned): after removing n1's lower pods it still conflicts.
        let mut holder = running("port-1", "n1", "1", 1000, "2024-01-01T00:00:00Z");
        holder.spec.as_mut().unwrap().containers[0].ports = Some(vec![
            serde_json::from_value(json!({"containerPort": 80, "hostPort": 80})).unwrap(),
        ]);
        let snap = Snapshot::build(
            [
                node("n1", json!({})),
                node("n2", json!({"spec": {"unschedulable": true}})),
            ],
            vec![
                holder,
                running("a-low-1", "n1", "3", 100, "2024-01-01T00:00:01Z"),
            ],
        );
        let p = pending(
            1000,
            "1",
            json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}],
                "resources": {"requests": {"cpu": "1"}}}]}}),
        );
        let d = decide(&snap, &p);
        assert!(d.nomination.is_none());
        assert!(
            message(&d).ends_with(" preemption: 0/2 nodes are available: 1 Preemption is not helpful for scheduling, 1 node(s) didn't have free ports for the requested pod ports."),
            "{}",
            message(&d)
        );
    }

    #[test]
    fn terminating_victim_on_nominated_node_blocks() {
        let mut victim = running("a-low-1", "n1", "4", 100, "2024-01-01T00:00:01Z");
        victim.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2024-01-01T00:01:00Z")).unwrap());
        victim.status.as_mut().unwrap().conditions = Some(vec![
            serde_json::from_value(json!({"type": "DisruptionTarget", "status": "True",
                "reason": "PreemptionByScheduler"}))
            .unwrap(),
        ]);
        let snap = Snapshot::build([node("n1", json!({}))], vec![victim]);
        let p = pending(1000, "2", json!({"status": {"nominatedNodeName": "n1"}}));
        let d = decide(&snap, &p);
        assert!(d.nomination.is_none());
        assert!(message(&d).ends_with(
            " preemption: not eligible due to a terminating pod on the nominated node."
        ));
        // Not nominated there: eligible, and the terminating pod is the victim again.
        let p = pending(1000, "2", json!({}));
        assert_eq!(nomination(&decide(&snap, &p)).0.as_deref(), Some("n1"));
    }

    /// Upstream's `PreemptionBasic` half-way (`synthetic::Case::Preemption`): every other
    /// node holds a nominated preemptor of the same priority, which the filters see only
    /// when the nominated pods are counted. One copy of the snapshot serves the whole cycle
    /// (the nominated pods are added and removed again), and it must give each node the
    /// verdict a fresh copy gives it.
    #[test]
    fn nominated_pods_counted_on_one_shared_copy() {
        use crate::synthetic::Case;
        let snap = Case::Preemption.snapshot(10);
        let p = PodInfo::new(Arc::new(Case::Preemption.pod()));
        let fw = framework();
        let d = decide(&snap, &p);
        // The freed nodes (even) are held by their nominated preemptors; only the full
        // (odd) ones can be preempted on.
        let n = d.nomination.as_ref().expect("preempts");
        let idx = snap.index_of(&n.node).unwrap();
        assert_eq!(idx % 2, 1, "{}", n.node);
        assert_eq!(n.victims.len(), 3);
        for i in (0..10).step_by(2) {
            let (_, s) = d.rejected.iter().find(|(r, _)| *r == i).expect("rejected");
            let detail = s.detail.as_deref().unwrap_or("");
            assert!(
                detail.contains(&format!("default/preemptor-{i}")),
                "{detail}"
            );
        }
        // Node by node on one copy, the same verdicts as on a fresh copy each, and the
        // copy is as it was after every node.
        let state = crate::framework::CycleState::new(false);
        let mut work = snap.clone();
        let pods = |s: &Snapshot| -> Vec<Vec<String>> {
            s.nodes()
                .iter()
                .map(|n| n.pods.iter().map(|p| p.key().to_string()).collect())
                .collect()
        };
        let before = pods(&work);
        for i in 0..10 {
            let shared = fw.filter_node_in(&state, &p, &mut work, i);
            let fresh = fw.filter_node(&state, &p, &snap, i);
            assert_eq!(shared.code, fresh.code, "node {i}");
            assert_eq!(shared.detail, fresh.detail, "node {i}");
            assert_eq!(pods(&work), before, "node {i}");
        }
    }

    #[test]
    fn pick_one_criteria_in_order() {
        let p = |name: &str, prio: i32, start: &str| {
            Arc::new(info(running(name, "n", "1", prio, start)))
        };
        let c = |node: NodeIdx, v: Vec<Arc<PodInfo>>, pdb: usize| Candidate {
            node,
            victims: v,
            pdb_violations: pdb,
        };
        let t1 = "2024-01-01T00:00:01Z";
        let t2 = "2024-01-01T00:00:02Z";
        // fewest PDB violations
        assert_eq!(
            pick_one(&[c(0, vec![p("a", 1, t1)], 1), c(1, vec![p("b", 5, t1)], 0)]),
            1
        );
        // lowest highest priority
        assert_eq!(
            pick_one(&[c(0, vec![p("a", 5, t1)], 0), c(1, vec![p("b", 1, t1)], 0)]),
            1
        );
        // smallest sum
        assert_eq!(
            pick_one(&[
                c(0, vec![p("a", 5, t1), p("b", 4, t1)], 0),
                c(1, vec![p("c", 5, t1), p("d", 1, t1)], 0)
            ]),
            1
        );
        // fewest victims
        assert_eq!(
            pick_one(&[
                c(0, vec![p("a", 5, t1), p("b", 0, t1)], 0),
                c(1, vec![p("c", 5, t1)], 0)
            ]),
            1
        );
        // latest start of the highest-priority victims
        assert_eq!(
            pick_one(&[c(0, vec![p("a", 5, t2)], 0), c(1, vec![p("b", 5, t1)], 0)]),
            0
        );
        // then the first
        assert_eq!(
            pick_one(&[c(0, vec![p("a", 5, t1)], 0), c(1, vec![p("b", 5, t1)], 0)]),
            0
        );
    }

    #[test]
    fn pdb_split_counts_every_budget() {
        let b: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "a-low"}}},
            "status": {"disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2}
        }))
        .unwrap();
        let b = Arc::new(DisruptionBudget::new(&b));
        let pods = vec![
            Arc::new(info(running(
                "a-low-1",
                "n",
                "1",
                1,
                "2024-01-01T00:00:01Z",
            ))),
            Arc::new(info(running(
                "a-low-2",
                "n",
                "1",
                1,
                "2024-01-01T00:00:02Z",
            ))),
            Arc::new(info(running(
                "other-1",
                "n",
                "1",
                1,
                "2024-01-01T00:00:03Z",
            ))),
        ];
        let (v, f) = split_by_pdb_violation(pods, &[&b]);
        let names = |x: &[Arc<PodInfo>]| x.iter().map(|p| p.name.to_string()).collect::<Vec<_>>();
        assert_eq!(names(&v), ["a-low-2"]);
        assert_eq!(names(&f), ["a-low-1", "other-1"]);
    }
}

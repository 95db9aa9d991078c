//! `PodTopologySpread`: spreads matching pods evenly over topology domains, as upstream's
//! `pkg/scheduler/framework/plugins/podtopologyspread`.
//!
//! - Filter enforces the pod's `DoNotSchedule` constraints: for the node's domain,
//!   `matching pods + (1 if the pod matches its own selector) - global minimum ≤ maxSkew`,
//!   where the global minimum is 0 while fewer than `minDomains` domains are eligible. A node
//!   lacking a constraint's topology key is rejected (unresolvable).
//! - Score ranks nodes for the `ScheduleAnyway` constraints: fewer matching pods in the node's
//!   domain is better, each constraint weighted by `ln(number of domains + 2)`.
//!
//! Only nodes carrying every constraint's topology key take part. With
//! `nodeAffinityPolicy: Honor` (the default) only nodes matching the pod's `nodeSelector` and
//! required node affinity count; with `nodeTaintsPolicy: Honor` (default `Ignore`) only nodes
//! whose `NoSchedule`/`NoExecute` taints the pod tolerates count. Pods are counted in the
//! incoming pod's namespace, terminating pods excluded; a selector without requirements
//! counts nothing (as upstream). `matchLabelKeys` add `key=value` (from the pod's labels) to
//! the selector. Matching pods are found through the snapshot's label index.
//!
//! Default constraints (`defaultConstraints` with `defaultingType: List`, or upstream's
//! system ones with `System`: hostname `maxSkew: 3` and zone `maxSkew: 5`, `ScheduleAnyway`)
//! apply to pods without constraints of their own, with the selector of the Services,
//! ReplicationControllers, ReplicaSets and StatefulSets the pod belongs to (upstream's
//! `helper.DefaultSelector`, [`crate::snapshot::workloads`]); a pod nothing selects gets no
//! default constraints. By default `defaultConstraints` is empty and `defaultingType` is
//! `List`: headroom deliberately leaves upstream's system default spreading off unless
//! configured.

use std::sync::Arc;

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use serde::{Deserialize, Serialize};

use super::inter_pod_affinity::for_each_candidate;
use super::node_affinity::{CompiledRequired, RequiredNodeAffinity};
use super::taint_toleration::untolerated_taints;
use crate::framework::{
    CycleState, FilterPlugin, MAX_NODE_SCORE, NodeBatch, NodeNames, Plugin, PreFilterPlugin,
    PreScorePlugin, Registered, ScorePlugin, Status, WrittenIn,
};
use crate::labels::NONE;
use crate::selector::{Labels, Op, Requirement, Selector, SelectorError};
use crate::snapshot::table::flag;
use crate::snapshot::{NodeIdx, NodeInfo, PodInfo, Snapshot};
use smallvec::SmallVec;

/// The plugin's name.
pub const NAME: &str = "PodTopologySpread";

/// Reason when placing the pod on the node would exceed a constraint's `maxSkew`.
pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
/// Reason when the node lacks a constraint's topology key.
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

/// `kubernetes.io/hostname`: per-node domains, counted at Score time.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// `topology.kubernetes.io/zone`.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

const DO_NOT_SCHEDULE: &str = "DoNotSchedule";
const SCHEDULE_ANYWAY: &str = "ScheduleAnyway";

/// Where default constraints come from (upstream's `PodTopologySpreadConstraintsDefaulting`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum DefaultingType {
    /// Use `defaultConstraints` as given (headroom's default).
    #[default]
    List,
    /// Use upstream's system defaults: hostname `maxSkew: 3` and zone `maxSkew: 5`, both
    /// `ScheduleAnyway`; `defaultConstraints` must then be empty.
    System,
}

/// Arguments of the plugin (upstream's `PodTopologySpreadArgs`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct PodTopologySpreadArgs {
    /// Constraints applied to pods that have none of their own, with the selector of the
    /// workloads owning the pod (no `labelSelector` allowed here). Default: none. Note that
    /// upstream defaults to `System` spreading; headroom does not.
    pub default_constraints: Vec<TopologySpreadConstraint>,
    /// `List` (use `defaultConstraints`) or `System` (upstream's built-in defaults).
    /// Default `List`.
    pub defaulting_type: DefaultingType,
}

impl super::registry::PluginArgs for PodTopologySpreadArgs {
    /// Upstream's `ValidatePodTopologySpreadArgs`: no list with `System`; each constraint
    /// with `maxSkew` ≥ 1, a topology key, a known `whenUnsatisfiable`, no selector, and no
    /// two with the same key and `whenUnsatisfiable`.
    fn validate(&self, path: &crate::field::Path) -> crate::field::ErrorList {
        use crate::field::Error;
        let mut errors = crate::field::ErrorList::new();
        let list = path.child("defaultConstraints");
        if self.defaulting_type == DefaultingType::System && !self.default_constraints.is_empty() {
            errors.push(Error::invalid(
                list.clone(),
                "",
                "when .defaultingType is \"System\", .defaultConstraints must be empty",
            ));
        }
        let mut seen: Vec<(&str, &str)> = Vec::new();
        for (i, c) in self.default_constraints.iter().enumerate() {
            let f = list.index(i);
            if c.max_skew <= 0 {
                errors.push(super::registry::not_in(
                    f.child("maxSkew"),
                    c.max_skew,
                    "1..",
                ));
            }
            if c.topology_key.is_empty() {
                errors.push(Error::required(f.child("topologyKey"), "can not be empty"));
            } else if let Some(e) =
                crate::field::label_key(&f.child("topologyKey"), &c.topology_key)
            {
                errors.push(e);
            }
            if c.when_unsatisfiable != DO_NOT_SCHEDULE && c.when_unsatisfiable != SCHEDULE_ANYWAY {
                errors.push(Error::not_supported(
                    f.child("whenUnsatisfiable"),
                    &c.when_unsatisfiable,
                    &[DO_NOT_SCHEDULE, SCHEDULE_ANYWAY],
                ));
            }
            if c.label_selector.is_some() {
                errors.push(Error::invalid(
                    f.child("labelSelector"),
                    "",
                    "constraint must not define a selector, as they deduced for each pod",
                ));
            }
            let pair = (c.topology_key.as_str(), c.when_unsatisfiable.as_str());
            if let Some(j) = seen.iter().position(|p| *p == pair) {
                errors.push(Error::duplicate(
                    f.clone(),
                    format!("defaultConstraints[{j}] ({pair:?})"),
                ));
            }
            seen.push(pair);
        }
        errors
    }
}

/// Computes the selector of the workloads (Services, ReplicationControllers, ReplicaSets,
/// StatefulSets) owning a pod, for default constraints (upstream's `helper.DefaultSelector`).
pub type DefaultSelectorFn = Arc<dyn Fn(&PodInfo) -> Selector + Send + Sync>;

/// The PodTopologySpread plugin.
#[derive(Clone, Default)]
pub struct PodTopologySpread {
    args: PodTopologySpreadArgs,
    /// The effective default constraints.
    default_constraints: Vec<TopologySpreadConstraint>,
    /// True with `DefaultingType::System`.
    system_defaulted: bool,
    default_selector: Option<DefaultSelectorFn>,
}

impl std::fmt::Debug for PodTopologySpread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodTopologySpread")
            .field("args", &self.args)
            .field("system_defaulted", &self.system_defaulted)
            .field("default_selector", &self.default_selector.is_some())
            .finish()
    }
}

impl PodTopologySpread {
    /// Builds the plugin.
    pub fn new(args: PodTopologySpreadArgs) -> Self {
        let (default_constraints, system_defaulted) = match args.defaulting_type {
            DefaultingType::List => (args.default_constraints.clone(), false),
            DefaultingType::System => (system_default_constraints(), true),
        };
        PodTopologySpread {
            args,
            default_constraints,
            system_defaulted,
            default_selector: None,
        }
    }

    /// Replaces where the owning workloads' selector for default constraints comes from
    /// (by default the snapshot's workloads, [`crate::snapshot::workloads`]).
    pub fn with_default_selector(
        mut self,
        f: impl Fn(&PodInfo) -> Selector + Send + Sync + 'static,
    ) -> Self {
        self.default_selector = Some(Arc::new(f));
        self
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

    /// The pod's constraints for one `whenUnsatisfiable` action (its own, else the defaults
    /// with the selector of the pod's workloads: upstream's `buildDefaultConstraints`).
    fn constraints(
        &self,
        pod: &PodInfo,
        action: &str,
        snapshot: &Snapshot,
    ) -> Result<Vec<Constraint>, SelectorError> {
        let own = pod_constraints(pod);
        if !own.is_empty() {
            return compile_constraints(own, pod.labels(), action);
        }
        let mut cs = compile_constraints(&self.default_constraints, pod.labels(), action)?;
        if cs.is_empty() {
            return Ok(cs);
        }
        let selector = match &self.default_selector {
            Some(f) => f(pod),
            None => snapshot.workloads().default_selector(pod),
        };
        if selector.nothing || selector.requirements.is_empty() {
            return Ok(Vec::new());
        }
        for c in &mut cs {
            c.selector = selector.clone();
        }
        Ok(cs)
    }
}

fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    vec![
        TopologySpreadConstraint {
            topology_key: LABEL_HOSTNAME.to_string(),
            when_unsatisfiable: SCHEDULE_ANYWAY.to_string(),
            max_skew: 3,
            ..Default::default()
        },
        TopologySpreadConstraint {
            topology_key: LABEL_ZONE.to_string(),
            when_unsatisfiable: SCHEDULE_ANYWAY.to_string(),
            max_skew: 5,
            ..Default::default()
        },
    ]
}

fn pod_constraints(pod: &PodInfo) -> &[TopologySpreadConstraint] {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_deref())
        .unwrap_or(&[])
}

/// A compiled constraint (upstream's `topologySpreadConstraint`).
#[derive(Debug, Clone)]
struct Constraint {
    max_skew: i32,
    topology_key: String,
    selector: Selector,
    min_domains: i32,
    honor_node_affinity: bool,
    honor_node_taints: bool,
}

impl Constraint {
    /// Upstream's `countPodsMatchSelector` for one pod: same namespace, not terminating,
    /// selected (a selector without requirements selects nothing here).
    fn counts(&self, p: &PodInfo, namespace: &str) -> bool {
        !self.selector.requirements.is_empty()
            && *p.namespace == *namespace
            && p.pod.metadata.deletion_timestamp.is_none()
            && self.selector.matches(p.labels())
    }
}

fn compile_constraints(
    list: &[TopologySpreadConstraint],
    pod_labels: &Labels,
    action: &str,
) -> Result<Vec<Constraint>, SelectorError> {
    let mut out = Vec::new();
    for (i, c) in list.iter().enumerate() {
        if c.when_unsatisfiable != action {
            continue;
        }
        let field = format!("spec.topologySpreadConstraints[{i}].labelSelector");
        let mut selector = Selector::from_label_selector(c.label_selector.as_ref(), &field)?;
        if !selector.nothing {
            let mut extra: Vec<Requirement> = Vec::new();
            for key in c.match_label_keys.iter().flatten() {
                if let Some(v) = pod_labels.get(key)
                    && !extra.iter().any(|r| &r.key == key)
                {
                    extra.push(Requirement {
                        key: key.clone(),
                        op: Op::In(vec![v.clone()]),
                    });
                }
            }
            if !extra.is_empty() {
                extra.append(&mut selector.requirements);
                selector.requirements = extra;
            }
        }
        out.push(Constraint {
            max_skew: c.max_skew,
            topology_key: c.topology_key.clone(),
            selector,
            min_domains: c.min_domains.unwrap_or(1),
            honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
            honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
        });
    }
    Ok(out)
}

/// Which nodes take part in the pod's constraints: all constraint keys present (when
/// required), the pod's node affinity (`nodeAffinityPolicy: Honor`) and its tolerations of
/// `NoSchedule`/`NoExecute` taints (`nodeTaintsPolicy: Honor`), compiled once per cycle.
struct Eligibility {
    /// Per constraint, its key's column (`None`: no node has it).
    keys: Vec<Option<Arc<Vec<u32>>>>,
    affinity: Option<CompiledRequired>,
    /// Per taint id: a `NoSchedule`/`NoExecute` taint the pod does not tolerate.
    untolerated: Option<Vec<bool>>,
}

impl Eligibility {
    fn new(snapshot: &Snapshot, pod: &PodInfo, constraints: &[Constraint]) -> Eligibility {
        let labels = &snapshot.table().labels;
        let need_affinity = constraints.iter().any(|c| c.honor_node_affinity);
        let need_taints = constraints.iter().any(|c| c.honor_node_taints);
        Eligibility {
            keys: constraints
                .iter()
                .map(|c| labels.column(&c.topology_key).map(|col| col.values.clone()))
                .collect(),
            affinity: need_affinity.then(|| RequiredNodeAffinity::of(pod).compile(snapshot)),
            untolerated: need_taints.then(|| {
                untolerated_taints(snapshot, pod.tolerations(), &["NoSchedule", "NoExecute"])
            }),
        }
    }

    /// Whether node `idx` carries every constraint's key.
    #[inline]
    fn has_all_keys(&self, idx: NodeIdx) -> bool {
        self.keys
            .iter()
            .all(|k| k.as_ref().is_some_and(|col| col[idx as usize] != NONE))
    }

    /// Per constraint, whether node `idx` takes part, into `out`.
    fn node(
        &self,
        snapshot: &Snapshot,
        constraints: &[Constraint],
        idx: NodeIdx,
        require_all_keys: bool,
        out: &mut [bool],
    ) {
        if require_all_keys && !self.has_all_keys(idx) {
            out.iter_mut().for_each(|e| *e = false);
            return;
        }
        let affinity_ok = self
            .affinity
            .as_ref()
            .is_none_or(|a| a.matches(snapshot, idx));
        let table = snapshot.table();
        let taints_ok = self.untolerated.as_ref().is_none_or(|u| {
            !table.has(idx, flag::NO_SCHEDULE_TAINTS)
                || !table.taints[idx as usize].iter().any(|&t| u[t as usize])
        });
        for (e, c) in out.iter_mut().zip(constraints) {
            *e = (!c.honor_node_affinity || affinity_ok) && (!c.honor_node_taints || taints_ok);
        }
    }

    /// Per node and constraint (`node * constraints + constraint`): does the node take part?
    fn all(
        &self,
        snapshot: &Snapshot,
        constraints: &[Constraint],
        require_all_keys: bool,
    ) -> Vec<bool> {
        let k = constraints.len();
        if self.affinity.is_none() && self.untolerated.is_none() {
            // Only the keys decide: the same verdict for every constraint of a node.
            if !require_all_keys {
                return vec![true; snapshot.len() * k];
            }
            let Some(columns) = self
                .keys
                .iter()
                .map(|c| c.as_deref().map(Vec::as_slice))
                .collect::<Option<SmallVec<[&[u32]; 4]>>>()
            else {
                return vec![false; snapshot.len() * k];
            };
            let mut out = Vec::with_capacity(snapshot.len() * k);
            for i in 0..snapshot.len() {
                let all = columns.iter().all(|c| c[i] != NONE);
                out.extend(std::iter::repeat_n(all, k));
            }
            return out;
        }
        let mut out = vec![false; snapshot.len() * k];
        for (i, chunk) in out.chunks_mut(k.max(1)).enumerate() {
            self.node(snapshot, constraints, i as NodeIdx, require_all_keys, chunk);
        }
        out
    }
}

/// One constraint's matching pods per domain of its topology key, dense by value id. A
/// node lacking the key belongs to the domain of the empty value (as upstream's lookups of
/// a missing label do).
#[derive(Debug)]
struct SpreadCounts {
    /// The key's value id per node (`None`: no node has the key).
    column: Option<Arc<Vec<u32>>>,
    /// The domain of nodes lacking the key.
    empty: u32,
    /// Per domain.
    counts: Vec<i64>,
    /// Per domain: counted at all (an eligible node has it).
    tracked: Vec<bool>,
    /// Number of tracked domains.
    domains: usize,
}

impl SpreadCounts {
    fn new(snapshot: &Snapshot, key: &str) -> SpreadCounts {
        let col = snapshot.table().labels.column(key);
        let cap = col.map_or(0, |c| c.dict.capacity());
        SpreadCounts {
            column: col.map(|c| c.values.clone()),
            empty: col.and_then(|c| c.dict.get("")).unwrap_or(cap as u32),
            counts: vec![0; cap + 1],
            tracked: vec![false; cap + 1],
            domains: 0,
        }
    }

    /// Node `idx`'s value id, when it has the key.
    #[inline]
    fn value(&self, idx: NodeIdx) -> Option<u32> {
        let v = self.column.as_ref()?[idx as usize];
        (v != NONE).then_some(v)
    }

    /// Node `idx`'s domain, the empty value's when it lacks the key.
    #[inline]
    fn domain(&self, idx: NodeIdx) -> u32 {
        self.value(idx).unwrap_or(self.empty)
    }

    fn track(&mut self, d: u32) {
        if !self.tracked[d as usize] {
            self.tracked[d as usize] = true;
            self.domains += 1;
        }
    }

    /// Counts a matching pod in its node's domain, when the domain is tracked.
    #[inline]
    fn count(&mut self, idx: NodeIdx) {
        let d = self.domain(idx) as usize;
        if self.tracked[d] {
            self.counts[d] += 1;
        }
    }

    #[inline]
    fn get(&self, d: u32) -> i64 {
        self.counts[d as usize]
    }

    /// The smallest count over tracked domains (`i32::MAX` with none).
    fn min(&self) -> i64 {
        self.counts
            .iter()
            .zip(&self.tracked)
            .filter(|(_, t)| **t)
            .map(|(c, _)| *c)
            .min()
            .unwrap_or(i64::from(i32::MAX))
    }
}

/// What PreFilter computed for Filter.
#[derive(Debug)]
struct PreFilterState {
    constraints: Vec<Constraint>,
    /// Per constraint: matching pods per eligible domain.
    counts: Vec<SpreadCounts>,
    /// Per constraint: the smallest count over eligible domains (`i32::MAX` with none).
    min: Vec<i64>,
    /// Per constraint: whether the incoming pod matches its own selector.
    self_match: Vec<bool>,
}

/// What PreScore computed for Score and NormalizeScore.
#[derive(Debug)]
struct PreScoreState {
    constraints: Vec<Constraint>,
    /// Nodes lacking a topology key are not scored (only with the pod's own constraints or
    /// non-system defaults).
    require_all_keys: bool,
    /// Per constraint: matching pods per domain of a feasible node (hostname constraints:
    /// unused).
    counts: Vec<SpreadCounts>,
    /// Per constraint with the hostname key: matching pods per node index.
    per_node: Vec<Option<Vec<i64>>>,
    /// Per constraint: `ln(domains + 2)`.
    weights: Vec<f64>,
    /// Per feasible node (in order): ignored for missing keys.
    ignored: Vec<bool>,
    /// Whether node `idx` carries every constraint's key.
    keys: Vec<Option<Arc<Vec<u32>>>>,
}

impl PreScoreState {
    #[inline]
    fn ignored(&self, idx: NodeIdx) -> bool {
        self.require_all_keys
            && !self
                .keys
                .iter()
                .all(|k| k.as_ref().is_some_and(|col| col[idx as usize] != NONE))
    }

    /// Per constraint: the matching-pod count of node `idx`'s domain, when it has the key.
    #[inline]
    fn node_count(&self, i: usize, idx: NodeIdx) -> Option<i64> {
        let c = &self.counts[i];
        let v = c.value(idx)?;
        Some(match &self.per_node[i] {
            Some(per_node) => per_node[idx as usize],
            None => c.get(v),
        })
    }

    #[inline]
    fn score(&self, idx: NodeIdx) -> i64 {
        if self.ignored(idx) {
            return 0;
        }
        let mut score = 0f64;
        for (i, c) in self.constraints.iter().enumerate() {
            if let Some(cnt) = self.node_count(i, idx) {
                score += cnt as f64 * self.weights[i] + f64::from(c.max_skew - 1);
            }
        }
        score.round() as i64
    }
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, Option<NodeNames>) {
        let constraints = match self.constraints(pod, DO_NOT_SCHEDULE, snapshot) {
            Ok(c) => c,
            Err(e) => {
                return (
                    Status::error(format!("get constraints from pod: {e}")),
                    None,
                );
            }
        };
        if constraints.is_empty() {
            return (Status::skip(), None);
        }
        let k = constraints.len();
        let eligible =
            Eligibility::new(snapshot, pod, &constraints).all(snapshot, &constraints, true);
        let mut counts: Vec<SpreadCounts> = constraints
            .iter()
            .map(|c| SpreadCounts::new(snapshot, &c.topology_key))
            .collect();
        for (i, e) in eligible.chunks(k).enumerate() {
            for (ci, counts) in counts.iter_mut().enumerate() {
                if e[ci]
                    && let Some(v) = counts.value(i as NodeIdx)
                {
                    counts.track(v);
                }
            }
        }
        for (ci, c) in constraints.iter().enumerate() {
            if c.selector.requirements.is_empty() {
                continue;
            }
            let counts = &mut counts[ci];
            for_each_candidate(snapshot, &c.selector, |n, p| {
                if eligible[n as usize * k + ci] && c.counts(p, &pod.namespace) {
                    counts.count(n);
                }
            });
        }
        let min = counts.iter().map(SpreadCounts::min).collect();
        let self_match = constraints
            .iter()
            .map(|c| c.selector.matches(pod.labels()))
            .collect();
        state.write(PreFilterState {
            constraints,
            counts,
            min,
            self_match,
        });
        (Status::success(), None)
    }
}

/// Why a node fails a `DoNotSchedule` constraint.
enum Failure {
    LacksKey(usize),
    Skew {
        constraint: usize,
        matching: i64,
        self_match: i64,
        min: i64,
    },
}

impl PreFilterState {
    /// The global minimum constraint `i` measures skew against.
    fn min_of(&self, i: usize) -> i64 {
        if (self.counts[i].domains as i64) < i64::from(self.constraints[i].min_domains) {
            0
        } else {
            self.min[i]
        }
    }
}

/// Per constraint, what a node's domain may hold: `(column, counts, limit)` with a node
/// failing when its domain's count exceeds `limit = maxSkew + min − self match`.
type Limits<'a> = SmallVec<[(&'a [u32], &'a [i64], i64); 2]>;

impl PodTopologySpread {
    fn limits(s: &PreFilterState) -> Limits<'_> {
        s.constraints
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let counts = &s.counts[i];
                let column = counts.column.as_deref().map_or(&[][..], Vec::as_slice);
                let limit = i64::from(c.max_skew) + s.min_of(i) - i64::from(s.self_match[i]);
                (column, counts.counts.as_slice(), limit)
            })
            .collect()
    }

    #[inline]
    fn check(s: &PreFilterState, limits: &Limits<'_>, idx: NodeIdx) -> Option<Failure> {
        for (i, &(column, counts, limit)) in limits.iter().enumerate() {
            let v = column.get(idx as usize).copied().unwrap_or(NONE);
            if v == NONE {
                return Some(Failure::LacksKey(i));
            }
            let matching = counts[v as usize];
            if matching > limit {
                return Some(Failure::Skew {
                    constraint: i,
                    matching,
                    self_match: i64::from(s.self_match[i]),
                    min: s.min_of(i),
                });
            }
        }
        None
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let s = match state.written_by::<PreFilterState>(NAME, WrittenIn::PreFilter) {
            Ok(s) => s,
            Err(e) => return e,
        };
        match Self::check(s, &Self::limits(s), node.idx) {
            None => Status::success(),
            Some(Failure::LacksKey(i)) => {
                let st = Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
                if state.explain {
                    st.with_detail(format!(
                        "node lacks topology key {:?}",
                        s.constraints[i].topology_key
                    ))
                } else {
                    st
                }
            }
            Some(Failure::Skew {
                constraint,
                matching,
                self_match,
                min,
            }) => {
                let st = Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
                if state.explain {
                    let c = &s.constraints[constraint];
                    let value = node
                        .labels()
                        .get(&c.topology_key)
                        .map_or("", String::as_str);
                    st.with_detail(format!(
                        "{}={value}: {matching} matching + {self_match} self - global minimum {min} = skew {} > maxSkew {}",
                        c.topology_key,
                        matching + self_match - min,
                        c.max_skew
                    ))
                } else {
                    st
                }
            }
        }
    }

    fn filter_batch(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
        batch: &mut NodeBatch,
    ) {
        let s = match state.written_by::<PreFilterState>(NAME, WrittenIn::PreFilter) {
            Ok(s) => s,
            Err(e) => return batch.reject_all(&e),
        };
        let lacks = Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
        let skew = Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
        let limits = Self::limits(s);
        batch.retain(|idx| match Self::check(s, &limits, idx)? {
            Failure::LacksKey(_) => Some(lacks.clone()),
            Failure::Skew { .. } => Some(skew.clone()),
        });
    }
}

impl PreScorePlugin for PodTopologySpread {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: &[NodeIdx],
    ) -> Status {
        if snapshot.is_empty() {
            return Status::skip();
        }
        let constraints = match self.constraints(pod, SCHEDULE_ANYWAY, snapshot) {
            Ok(c) => c,
            Err(e) => return Status::error(format!("calculating preScoreState: {e}")),
        };
        if constraints.is_empty() {
            return Status::skip();
        }
        let require_all_keys = !pod_constraints(pod).is_empty() || !self.system_defaulted;
        let k = constraints.len();
        let eligibility = Eligibility::new(snapshot, pod, &constraints);
        let mut counts: Vec<SpreadCounts> = constraints
            .iter()
            .map(|c| SpreadCounts::new(snapshot, &c.topology_key))
            .collect();
        let mut ignored = Vec::with_capacity(feasible.len());
        for &idx in feasible {
            let skip = require_all_keys && !eligibility.has_all_keys(idx);
            ignored.push(skip);
            if skip {
                continue;
            }
            for (c, counts) in constraints.iter().zip(counts.iter_mut()) {
                if c.topology_key != LABEL_HOSTNAME {
                    let d = counts.domain(idx);
                    counts.track(d);
                }
            }
        }
        let scored = ignored.iter().filter(|i| !**i).count();
        let weights = constraints
            .iter()
            .zip(&counts)
            .map(|(c, m)| {
                let size = if c.topology_key == LABEL_HOSTNAME {
                    scored
                } else {
                    m.domains
                };
                ((size + 2) as f64).ln()
            })
            .collect();

        // Hostname constraints count the pods on each node (eligible or not, as upstream's
        // Score does); the others the pods on eligible nodes per tracked domain.
        let eligible = constraints
            .iter()
            .any(|c| c.topology_key != LABEL_HOSTNAME && !c.selector.requirements.is_empty())
            .then(|| eligibility.all(snapshot, &constraints, require_all_keys));
        let mut per_node = Vec::with_capacity(k);
        for (ci, c) in constraints.iter().enumerate() {
            if c.topology_key == LABEL_HOSTNAME {
                let mut on_node = vec![0i64; snapshot.len()];
                if !c.selector.requirements.is_empty() {
                    for_each_candidate(snapshot, &c.selector, |n, p| {
                        if c.counts(p, &pod.namespace) {
                            on_node[n as usize] += 1;
                        }
                    });
                }
                per_node.push(Some(on_node));
                continue;
            }
            per_node.push(None);
            let (Some(eligible), false) = (&eligible, c.selector.requirements.is_empty()) else {
                continue;
            };
            let counts = &mut counts[ci];
            for_each_candidate(snapshot, &c.selector, |n, p| {
                if eligible[n as usize * k + ci] && c.counts(p, &pod.namespace) {
                    counts.count(n);
                }
            });
        }
        state.write(PreScoreState {
            keys: eligibility.keys,
            constraints,
            require_all_keys,
            counts,
            per_node,
            weights,
            ignored,
        });
        Status::success()
    }
}

impl ScorePlugin for PodTopologySpread {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state.written_by::<PreScoreState>(NAME, WrittenIn::PreScore)?;
        Ok(s.score(node.idx))
    }

    fn score_batch(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
        nodes: &[NodeIdx],
        scores: &mut Vec<i64>,
    ) -> Result<(), (usize, Status)> {
        state.score_each::<PreScoreState>(NAME, nodes, scores, |s, idx| s.score(idx))
    }

    fn explain_score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let s = state.read::<PreScoreState>()?;
        if s.ignored(node.idx) {
            return Some("node lacks a topology key: not scored".to_string());
        }
        let parts: Vec<String> = s
            .constraints
            .iter()
            .enumerate()
            .map(|(i, c)| match s.node_count(i, node.idx) {
                Some(cnt) => format!(
                    "{}: {cnt} matching × ln-weight {:.3} + (maxSkew-1) {}",
                    c.topology_key,
                    s.weights[i],
                    c.max_skew - 1
                ),
                None => format!("{}: no such label", c.topology_key),
            })
            .collect();
        Some(parts.join("; "))
    }

    fn normalize(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        let Some(s) = state.read::<PreScoreState>() else {
            return Status::success();
        };
        let ignored = |i: usize| s.ignored.get(i).copied().unwrap_or(false);
        let mut min = i64::MAX;
        let mut max = 0i64;
        for (i, v) in scores.iter().enumerate() {
            if ignored(i) {
                continue;
            }
            min = min.min(*v);
            max = max.max(*v);
        }
        for (i, v) in scores.iter_mut().enumerate() {
            *v = if ignored(i) {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - *v) / max
            };
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

    fn node(name: &str, labels: Value, taints: Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
        }))
        .unwrap()
    }

    fn pod(name: &str, node: &str, labels: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c"}]}
        }))
        .unwrap()
    }

    fn incoming(labels: Value, extra_spec: Value) -> PodInfo {
        let mut spec = json!({"containers": [{"name": "c"}]});
        for (k, v) in extra_spec.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "incoming", "namespace": "default", "labels": labels},
            "spec": spec
        }))
        .unwrap();
        PodInfo::new(Arc::new(p))
    }

    type Verdicts = Vec<(String, Code, String)>;

    /// Runs PreFilter/Filter over every node, then PreScore/Score/Normalize over `feasible`
    /// (node names; `None`: the nodes that passed). Returns the prefilter code, the rejected
    /// nodes, and the normalized scores (`None` when PreScore skips).
    fn run(
        pl: &PodTopologySpread,
        pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: Option<&[&str]>,
    ) -> (Code, Verdicts, Option<Vec<(String, i64)>>) {
        let mut state = CycleState::new(true);
        let (s, _) = pl.pre_filter(&mut state, pod, snapshot);
        let mut rejected = Vec::new();
        let mut passed = Vec::new();
        for (i, n) in snapshot.nodes().iter().enumerate() {
            if !s.is_skip() {
                let f = pl.filter(&state, pod, n);
                if !f.is_success() {
                    rejected.push((n.name.to_string(), f.code, f.message()));
                    continue;
                }
            }
            passed.push(i as NodeIdx);
        }
        let feasible: Vec<NodeIdx> = match feasible {
            Some(names) => names
                .iter()
                .map(|n| snapshot.index_of(n).unwrap())
                .collect(),
            None => passed,
        };
        let ps = pl.pre_score(&mut state, pod, snapshot, &feasible);
        let scores = (!ps.is_skip()).then(|| {
            let mut raw: Vec<i64> = feasible
                .iter()
                .map(|i| pl.score(&state, pod, snapshot.node(*i)).unwrap())
                .collect();
            assert!(pl.normalize(&state, pod, &mut raw).is_success());
            feasible
                .iter()
                .zip(raw)
                .map(|(i, s)| (snapshot.node(*i).name.to_string(), s))
                .collect()
        });
        (s.code, rejected, scores)
    }

    fn zone(z: &str) -> Value {
        json!({"topology.kubernetes.io/zone": z})
    }

    fn spread(when: &str, max_skew: i32, key: &str, labels: Value, extra: Value) -> Value {
        let mut c = json!({"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when,
                           "labelSelector": {"matchLabels": labels}});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        json!({"topologySpreadConstraints": [c]})
    }

    #[test]
    fn skips_without_constraints() {
        let snap = Snapshot::build([node("a", zone("z1"), Value::Null)], []);
        let p = incoming(json!({"app": "web"}), json!({}));
        let (code, rejected, scores) = run(&PodTopologySpread::default(), &p, &snap, None);
        assert_eq!(code, Code::Skip);
        assert!(rejected.is_empty());
        assert!(scores.is_none());
    }

    #[test]
    fn filter_table() {
        use Code::{Unschedulable as U, UnschedulableAndUnresolvable as UU};
        let skew = ERR_REASON_CONSTRAINTS_NOT_MATCH;
        let label = ERR_REASON_NODE_LABEL_NOT_MATCH;
        let nodes = || {
            vec![
                node("a1", zone("a"), Value::Null),
                node("a2", zone("a"), Value::Null),
                node("b1", zone("b"), Value::Null),
                node(
                    "c1",
                    zone("c"),
                    json!([{"key": "gpu", "effect": "NoSchedule"}]),
                ),
                node("x", json!({}), Value::Null),
            ]
        };
        let web = || json!({"app": "web"});
        // zone a: 2 web pods, b: 1, c: 0.
        let pods = || {
            vec![
                pod("w1", "a1", web()),
                pod("w2", "a2", web()),
                pod("w3", "b1", web()),
                pod("d1", "b1", json!({"app": "db"})),
            ]
        };
        type Case = (
            &'static str,
            Value,
            Value,
            Vec<(&'static str, Code, &'static str)>,
        );
        let cases: Vec<Case> = vec![
            (
                "maxSkew 1: min is zone c (0); a (2+1) and b (1+1) too skewed",
                web(),
                spread(DO_NOT_SCHEDULE, 1, LABEL_ZONE, web(), json!({})),
                vec![
                    ("a1", U, skew),
                    ("a2", U, skew),
                    ("b1", U, skew),
                    ("x", UU, label),
                ],
            ),
            (
                "pod not matching its own selector: no self count",
                json!({"app": "other"}),
                spread(DO_NOT_SCHEDULE, 1, LABEL_ZONE, web(), json!({})),
                vec![("a1", U, skew), ("a2", U, skew), ("x", UU, label)],
            ),
            (
                "nodeTaintsPolicy Honor: zone c (untolerated taint) leaves; min becomes 1",
                web(),
                spread(
                    DO_NOT_SCHEDULE,
                    1,
                    LABEL_ZONE,
                    web(),
                    json!({"nodeTaintsPolicy": "Honor"}),
                ),
                vec![("a1", U, skew), ("a2", U, skew), ("x", UU, label)],
            ),
            (
                "minDomains 4 > 3 eligible domains: global minimum 0",
                web(),
                spread(
                    DO_NOT_SCHEDULE,
                    2,
                    LABEL_ZONE,
                    web(),
                    json!({"nodeTaintsPolicy": "Honor", "minDomains": 4}),
                ),
                vec![("a1", U, skew), ("a2", U, skew), ("x", UU, label)],
            ),
            (
                "minDomains 2 ≤ 2 eligible domains: minimum 1, a (3-1=2) fits maxSkew 2",
                web(),
                spread(
                    DO_NOT_SCHEDULE,
                    2,
                    LABEL_ZONE,
                    web(),
                    json!({"nodeTaintsPolicy": "Honor", "minDomains": 2}),
                ),
                vec![("x", UU, label)],
            ),
            (
                "empty selector counts nothing, yet the pod matches itself",
                web(),
                json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": LABEL_ZONE,
                    "whenUnsatisfiable": DO_NOT_SCHEDULE, "labelSelector": {}}]}),
                vec![("x", UU, label)],
            ),
            (
                "matchLabelKeys narrows the selector to app=db",
                json!({"app": "db"}),
                spread(
                    DO_NOT_SCHEDULE,
                    1,
                    LABEL_ZONE,
                    json!({}),
                    json!({"matchLabelKeys": ["app"]}),
                ),
                vec![("b1", U, skew), ("x", UU, label)],
            ),
            (
                "ScheduleAnyway constraints do not filter",
                web(),
                spread(SCHEDULE_ANYWAY, 1, LABEL_ZONE, web(), json!({})),
                vec![],
            ),
        ];
        for (name, labels, spec, want) in cases {
            let snap = Snapshot::build(nodes(), pods());
            let p = incoming(labels, spec);
            let (_, rejected, _) = run(&PodTopologySpread::default(), &p, &snap, None);
            let got: Vec<(&str, Code, &str)> = rejected
                .iter()
                .map(|(n, c, m)| (n.as_str(), *c, m.as_str()))
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn node_affinity_policy_restricts_domains() {
        // Zone c holds no pod but the pod's nodeSelector excludes it: with Honor the minimum
        // is zone b's 1; with Ignore it is zone c's 0.
        let nodes = vec![
            node(
                "a1",
                json!({"topology.kubernetes.io/zone": "a", "disk": "ssd"}),
                Value::Null,
            ),
            node(
                "b1",
                json!({"topology.kubernetes.io/zone": "b", "disk": "ssd"}),
                Value::Null,
            ),
            node(
                "c1",
                json!({"topology.kubernetes.io/zone": "c"}),
                Value::Null,
            ),
        ];
        let pods = vec![
            pod("w1", "a1", json!({"app": "web"})),
            pod("w2", "a1", json!({"app": "web"})),
            pod("w3", "b1", json!({"app": "web"})),
        ];
        let snap = Snapshot::build(nodes, pods);
        // Honor: domains a=2, b=1 (c1 excluded), minimum 1: only a1 (2+1-1) is too skewed; c1's
        // zone is not eligible (count 0) and the NodeAffinity plugin, not this one, rejects it.
        // Ignore: zone c counts with 0 pods, minimum 0: a1 and b1 are too skewed.
        for (policy, want) in [("Honor", vec!["a1"]), ("Ignore", vec!["a1", "b1"])] {
            let mut spec = spread(
                DO_NOT_SCHEDULE,
                1,
                LABEL_ZONE,
                json!({"app": "web"}),
                json!({"nodeAffinityPolicy": policy}),
            );
            spec["nodeSelector"] = json!({"disk": "ssd"});
            let p = incoming(json!({"app": "web"}), spec);
            let (_, rejected, _) = run(&PodTopologySpread::default(), &p, &snap, None);
            let got: Vec<&str> = rejected.iter().map(|r| r.0.as_str()).collect();
            assert_eq!(got, want, "{policy}");
        }
    }

    /// Modelled on kube-scheduler case 292: one ScheduleAnyway zone constraint (maxSkew 2,
    /// app=cache), required node affinity `zone NotIn [zone-b]`; nodes without a zone are
    /// ignored (0), zone-a holds 3 cache pods, zone-c 2. Upstream: zone-a 80, zone-c 100.
    #[test]
    fn score_like_case_292() {
        let nodes = vec![
            node("node-1", json!({}), Value::Null),
            node("node-5", zone("zone-a"), Value::Null),
            node("node-25", zone("zone-c"), Value::Null),
            node("node-26", zone("zone-c"), Value::Null),
            node("node-29", zone("zone-a"), Value::Null),
            node("node-16", zone("zone-a"), Value::Null),
            node("node-28", zone("zone-a"), Value::Null),
            node(
                "node-30",
                zone("zone-a"),
                json!([{"key": "m", "value": "true", "effect": "NoExecute"}]),
            ),
            node("node-17", zone("zone-c"), Value::Null),
            node("node-8", zone("zone-c"), Value::Null),
            node("node-10", zone("zone-b"), Value::Null),
        ];
        let cache = || json!({"app": "cache"});
        let pods = vec![
            pod("c1", "node-16", cache()),
            pod("c2", "node-28", cache()),
            pod("c3", "node-30", cache()),
            pod("c4", "node-17", cache()),
            pod("c5", "node-8", cache()),
            pod("c6", "node-10", cache()),
            pod("c7", "node-1", cache()),
            pod("w1", "node-5", json!({"app": "web"})),
        ];
        let snap = Snapshot::build(nodes, pods);
        let mut spec = spread(SCHEDULE_ANYWAY, 2, LABEL_ZONE, cache(), json!({}));
        spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": LABEL_ZONE, "operator": "NotIn", "values": ["zone-b"]}]}]}}});
        let p = incoming(json!({"app": "web"}), spec);
        let feasible = ["node-1", "node-5", "node-25", "node-26", "node-29"];
        let (code, rejected, scores) =
            run(&PodTopologySpread::default(), &p, &snap, Some(&feasible));
        assert_eq!(code, Code::Skip, "no DoNotSchedule constraint");
        assert!(rejected.is_empty());
        let want = [
            ("node-1", 0),
            ("node-5", 80),
            ("node-25", 100),
            ("node-26", 100),
            ("node-29", 80),
        ];
        let want: Vec<(String, i64)> = want.iter().map(|(n, s)| (n.to_string(), *s)).collect();
        assert_eq!(scores.unwrap(), want);
    }

    #[test]
    fn score_hostname_and_all_zero() {
        let nodes = vec![
            node("h1", json!({"kubernetes.io/hostname": "h1"}), Value::Null),
            node("h2", json!({"kubernetes.io/hostname": "h2"}), Value::Null),
            node("h3", json!({"kubernetes.io/hostname": "h3"}), Value::Null),
        ];
        let pods = vec![
            pod("a", "h1", json!({"app": "web"})),
            pod("b", "h1", json!({"app": "web"})),
            pod("c", "h2", json!({"app": "web"})),
        ];
        let snap = Snapshot::build(nodes, pods);
        let p = incoming(
            json!({"app": "web"}),
            spread(
                SCHEDULE_ANYWAY,
                1,
                LABEL_HOSTNAME,
                json!({"app": "web"}),
                json!({}),
            ),
        );
        // 3 scored nodes: weight ln(5) = 1.609; raw h1 round(3.22)=3, h2 2, h3 0.
        // normalized 100*(3+0-s)/3: 0, 33, 100.
        let (_, _, scores) = run(&PodTopologySpread::default(), &p, &snap, None);
        assert_eq!(
            scores.unwrap(),
            vec![("h1".into(), 0), ("h2".into(), 33), ("h3".into(), 100)]
        );
        // No matching pod anywhere: all raw 0 → all 100.
        let p = incoming(
            json!({}),
            spread(
                SCHEDULE_ANYWAY,
                1,
                LABEL_HOSTNAME,
                json!({"app": "none"}),
                json!({}),
            ),
        );
        let (_, _, scores) = run(&PodTopologySpread::default(), &p, &snap, None);
        assert!(scores.unwrap().iter().all(|(_, s)| *s == 100));
    }

    #[test]
    fn default_constraints_need_a_selector_source() {
        let nodes = vec![
            node("h1", json!({"kubernetes.io/hostname": "h1"}), Value::Null),
            node("h2", json!({"kubernetes.io/hostname": "h2"}), Value::Null),
        ];
        let snap = Snapshot::build(nodes, [pod("a", "h1", json!({"app": "web"}))]);
        let p = incoming(json!({"app": "web"}), json!({}));
        let args = PodTopologySpreadArgs {
            defaulting_type: DefaultingType::System,
            ..Default::default()
        };
        use crate::plugins::registry::PluginArgs;
        assert!(args.validate(&crate::field::Path::root()).is_empty());
        // Nothing in the snapshot selects the pod: nothing to spread.
        let pl = PodTopologySpread::new(args.clone());
        assert!(run(&pl, &p, &snap, None).2.is_none());
        // A Service selecting it: its selector is the default constraints' (same scores as
        // the installed selector below).
        let mut with_service = snap.clone();
        with_service
            .workloads_mut()
            .upsert(crate::snapshot::workloads::Workload::service(
                &serde_json::from_value(json!({
                    "metadata": {"name": "web", "namespace": "default"},
                    "spec": {"selector": {"app": "web"}}
                }))
                .unwrap(),
            ));
        let (_, _, scores) = run(&pl, &p, &with_service, None);
        assert_eq!(scores.unwrap(), vec![("h1".into(), 66), ("h2".into(), 100)]);
        // With the owning workload's selector: hostname spreading (maxSkew 3) applies, and
        // nodes without a zone still score (system defaults do not require every key).
        let pl = PodTopologySpread::new(args).with_default_selector(|_| {
            Selector::from_map(&[("app".to_string(), "web".to_string())].into())
        });
        // weight ln(4)=1.386: h1 1*1.386+2 = 3.39 → 3, h2 2 → 100*(3+2-s)/3: 66, 100.
        let (_, _, scores) = run(&pl, &p, &snap, None);
        assert_eq!(scores.unwrap(), vec![("h1".into(), 66), ("h2".into(), 100)]);
    }

    #[test]
    fn args_serde_and_validation() {
        let a: PodTopologySpreadArgs = serde_json::from_value(json!({})).unwrap();
        assert_eq!(a.defaulting_type, DefaultingType::List);
        assert!(a.default_constraints.is_empty());
        let a: PodTopologySpreadArgs = serde_json::from_value(json!({
            "defaultingType": "System",
            "defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]
        }))
        .unwrap();
        use crate::plugins::registry::PluginArgs;
        assert!(!a.validate(&crate::field::Path::root()).is_empty());
        assert!(serde_json::from_value::<PodTopologySpreadArgs>(json!({"x": 1})).is_err());
        let r = PodTopologySpread::default().register();
        assert_eq!(r.name, NAME);
        assert!(
            r.pre_filter.is_some()
                && r.filter.is_some()
                && r.pre_score.is_some()
                && r.score.is_some()
        );
    }

    #[test]
    fn toleration_matching() {
        use crate::plugins::taint_toleration::find_untolerated;
        let taint = |k: &str, v: &str, e: &str| -> k8s_openapi::api::core::v1::Taint {
            serde_json::from_value(json!({"key": k, "value": v, "effect": e})).unwrap()
        };
        let t = taint("gpu", "yes", "NoSchedule");
        // PreferNoSchedule taints never block.
        assert!(find_untolerated(&[taint("x", "", "PreferNoSchedule")], &[]).is_none());
        assert!(find_untolerated(std::slice::from_ref(&t), &[]).is_some());
    }
}

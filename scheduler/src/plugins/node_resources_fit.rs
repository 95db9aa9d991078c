//! NodeResourcesFit: the pod's requests must fit in the node's allocatable minus what its pods
//! request (cpu, memory, ephemeral-storage, extended resources, pod count); scores by a
//! strategy: `LeastAllocated` (default: emptier wins), `MostAllocated` (fuller wins) or
//! `RequestedToCapacityRatio` (a piecewise-linear shape over utilisation).
//!
//! Scoring uses "non-zero" requests: a container that does not mention cpu or memory counts
//! upstream's defaults (100m, 200 MiB), so best-effort pods do not all land on one node.

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::field;
use crate::framework::{
    Code, CycleState, FilterPlugin, MAX_NODE_SCORE, NodeBatch, NodeNames, Plugin, PreFilterPlugin,
    Reasons, Registered, ScorePlugin, Status,
};
use crate::quantity::{format_bytes, format_milli};
use crate::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, is_scalar_resource};
use crate::snapshot::table::{Divisor, res};
use crate::snapshot::{NodeIdx, NodeInfo, PodInfo, Snapshot};

/// Plugin name.
pub const NAME: &str = "NodeResourcesFit";
/// Upstream's reason when the node's pod count is exhausted.
pub const REASON_TOO_MANY_PODS: &str = "Too many pods";

/// A resource and its weight in scoring.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceSpec {
    /// Resource name (`cpu`, `memory`, `ephemeral-storage`, or an extended resource).
    pub name: String,
    /// Weight (≥ 1; default 1).
    #[serde(default = "one")]
    pub weight: i64,
}

fn one() -> i64 {
    1
}

/// Default scored resources: cpu and memory, weight 1 each.
pub fn default_resources() -> Vec<ResourceSpec> {
    vec![
        ResourceSpec {
            name: CPU.to_string(),
            weight: 1,
        },
        ResourceSpec {
            name: MEMORY.to_string(),
            weight: 1,
        },
    ]
}

/// One point of the `RequestedToCapacityRatio` shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UtilizationShapePoint {
    /// Utilisation, 0..=100.
    pub utilization: i64,
    /// Score at that utilisation, 0..=10.
    pub score: i64,
}

/// Scoring strategy type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum StrategyType {
    /// Emptier nodes win (upstream default).
    #[default]
    LeastAllocated,
    /// Fuller nodes win (bin-packing).
    MostAllocated,
    /// A configurable shape over utilisation.
    RequestedToCapacityRatio,
}

/// `scoringStrategy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct ScoringStrategy {
    /// Strategy (default `LeastAllocated`).
    #[serde(rename = "type")]
    pub kind: StrategyType,
    /// Scored resources (default cpu and memory, weight 1).
    pub resources: Vec<ResourceSpec>,
    /// Shape for `RequestedToCapacityRatio` (default: `[{0, 10}, {100, 0}]`, i.e. least
    /// allocated).
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatio>,
}

/// `requestedToCapacityRatio` parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RequestedToCapacityRatio {
    /// Points in increasing utilisation.
    pub shape: Vec<UtilizationShapePoint>,
}

impl Default for ScoringStrategy {
    fn default() -> Self {
        ScoringStrategy {
            kind: StrategyType::LeastAllocated,
            resources: default_resources(),
            requested_to_capacity_ratio: None,
        }
    }
}

/// Arguments (upstream's `NodeResourcesFitArgs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct NodeResourcesFitArgs {
    /// Extended resources the filter ignores (default none).
    pub ignored_resources: Vec<String>,
    /// Extended resource groups (the part before `/`) the filter ignores (default none).
    pub ignored_resource_groups: Vec<String>,
    /// How nodes are scored.
    pub scoring_strategy: ScoringStrategy,
}

/// The NodeResourcesFit plugin.
#[derive(Debug, Clone)]
pub struct NodeResourcesFit {
    args: NodeResourcesFitArgs,
    shape: Vec<(i64, i64)>,
    /// The scored resources, resolved (in `scoringStrategy.resources` order).
    kinds: Vec<ResourceKind>,
}

/// A resource name resolved once: a column of the node table, or a scalar read from the
/// node's [`NodeInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResourceKind {
    /// `cpu`.
    Cpu,
    /// `memory`.
    Memory,
    /// `ephemeral-storage`.
    EphemeralStorage,
    /// Anything else.
    Scalar,
}

impl ResourceKind {
    /// Resolves a resource name.
    pub(crate) fn of(name: &str) -> ResourceKind {
        match name {
            CPU => ResourceKind::Cpu,
            MEMORY => ResourceKind::Memory,
            EPHEMERAL_STORAGE => ResourceKind::EphemeralStorage,
            _ => ResourceKind::Scalar,
        }
    }
}

/// The largest capacity whose products with [`MAX_NODE_SCORE`] fit in `i64`.
const EXACT_IN_I64: i64 = i64::MAX / MAX_NODE_SCORE;

/// `n * 100 / capacity` for `0 ≤ n ≤ capacity`, `capacity > 0`: through the [`Divisor`]
/// when the product fits in `i64`, in `i128` otherwise.
#[inline(always)]
fn percent_of(n: i64, capacity: Divisor) -> i64 {
    let c = capacity.get();
    if c <= EXACT_IN_I64 {
        capacity.divide(n * MAX_NODE_SCORE)
    } else {
        (i128::from(n) * i128::from(MAX_NODE_SCORE) / i128::from(c)) as i64
    }
}

/// `LeastAllocated`: the free share of `capacity` after `requested`, 0..=100 (0 for a
/// capacity ≤ 0; a negative request counts as zero).
#[inline(always)]
fn least_allocated(requested: i64, capacity: Divisor) -> i64 {
    let (r, c) = (requested.max(0), capacity.get());
    if c <= 0 || r > c {
        0
    } else {
        percent_of(c - r, capacity)
    }
}

/// `MostAllocated`: the used share of `capacity` with `requested`, 0..=100 (0 for a
/// capacity ≤ 0; a negative request counts as zero).
#[inline(always)]
fn most_allocated(requested: i64, capacity: Divisor) -> i64 {
    let (r, c) = (requested.max(0), capacity.get());
    if c <= 0 {
        0
    } else {
        percent_of(r.min(c), capacity)
    }
}

/// Whether a capacity is in `1..=EXACT_IN_I64`, where [`least_allocated`] and
/// [`most_allocated`] are [`least_allocated_plain`] and [`most_allocated_plain`].
#[inline(always)]
fn plain_capacity(capacity: Divisor) -> bool {
    (capacity.get() as u64).wrapping_sub(1) < EXACT_IN_I64 as u64
}

/// [`least_allocated`] for a [`plain_capacity`]: no range checks left but the request's.
#[inline(always)]
fn least_allocated_plain(requested: i64, capacity: Divisor) -> i64 {
    let (r, c) = (requested.max(0), capacity.get());
    if r > c {
        0
    } else {
        capacity.divide_non_negative((c - r) * MAX_NODE_SCORE)
    }
}

/// [`most_allocated`] for a [`plain_capacity`].
#[inline(always)]
fn most_allocated_plain(requested: i64, capacity: Divisor) -> i64 {
    capacity.divide_non_negative(requested.max(0).min(capacity.get()) * MAX_NODE_SCORE)
}

/// [`allocatable_requested`] for node `idx`, from the node table.
#[inline(always)]
pub(crate) fn table_allocatable_requested(
    snapshot: &Snapshot,
    idx: NodeIdx,
    pod: &PodInfo,
    kind: ResourceKind,
    name: &str,
    use_requested: bool,
) -> Option<(i64, i64)> {
    let t = snapshot.table();
    let i = idx as usize;
    let r = &pod.requests;
    let (alloc, req) = match kind {
        ResourceKind::Cpu => (
            t.allocatable[i][res::CPU],
            if use_requested {
                t.requested[i][res::CPU].saturating_add(r.requests.milli_cpu)
            } else {
                t.non_zero[i][0].saturating_add(r.non_zero_milli_cpu)
            },
        ),
        ResourceKind::Memory => (
            t.allocatable[i][res::MEMORY],
            if use_requested {
                t.requested[i][res::MEMORY].saturating_add(r.requests.memory)
            } else {
                t.non_zero[i][1].saturating_add(r.non_zero_memory)
            },
        ),
        ResourceKind::EphemeralStorage => (
            t.allocatable[i][res::EPHEMERAL_STORAGE],
            t.requested[i][res::EPHEMERAL_STORAGE].saturating_add(r.requests.ephemeral_storage),
        ),
        ResourceKind::Scalar => {
            return allocatable_requested(snapshot.node(idx), pod, name, use_requested);
        }
    };
    (alloc != 0).then_some((alloc, req))
}

/// Node's allocatable and requested (with the pod) for one scored resource; `None` skips it.
pub(crate) fn allocatable_requested(
    node: &NodeInfo,
    pod: &PodInfo,
    resource: &str,
    use_requested: bool,
) -> Option<(i64, i64)> {
    let (alloc, req) = match resource {
        CPU => {
            let node_req = if use_requested {
                node.requested.milli_cpu
            } else {
                node.non_zero_milli_cpu
            };
            let pod_req = if use_requested {
                pod.requests.requests.milli_cpu
            } else {
                pod.requests.non_zero_milli_cpu
            };
            (node.allocatable.milli_cpu, node_req.saturating_add(pod_req))
        }
        MEMORY => {
            let node_req = if use_requested {
                node.requested.memory
            } else {
                node.non_zero_memory
            };
            let pod_req = if use_requested {
                pod.requests.requests.memory
            } else {
                pod.requests.non_zero_memory
            };
            (node.allocatable.memory, node_req.saturating_add(pod_req))
        }
        EPHEMERAL_STORAGE => (
            node.allocatable.ephemeral_storage,
            node.requested
                .ephemeral_storage
                .saturating_add(pod.requests.requests.ephemeral_storage),
        ),
        other => {
            let pod_req = pod.requests.requests.scalar(other);
            // A scalar the pod does not request is left out of the score.
            if pod_req == 0 {
                return None;
            }
            (
                node.allocatable.scalar(other),
                node.requested.scalar(other).saturating_add(pod_req),
            )
        }
    };
    (alloc != 0).then_some((alloc, req))
}

impl NodeResourcesFit {
    /// Creates the plugin, validating its arguments.
    pub fn new(args: NodeResourcesFitArgs) -> Result<Self, field::Error> {
        let st = &args.scoring_strategy;
        let strategy = field::Path::new("scoringStrategy");
        if st.resources.is_empty() {
            return Err(field::Error::required(
                strategy.child("resources"),
                "at least one resource is required",
            ));
        }
        for (i, r) in st.resources.iter().enumerate() {
            if !(1..=100).contains(&r.weight) {
                let at = strategy.child("resources").index(i).child("weight");
                return Err(super::registry::not_in(at, r.weight, "1..=100"));
            }
        }
        let mut shape = Vec::new();
        if st.kind == StrategyType::RequestedToCapacityRatio {
            let points = st
                .requested_to_capacity_ratio
                .as_ref()
                .map(|r| r.shape.clone())
                .unwrap_or_else(|| {
                    vec![
                        UtilizationShapePoint {
                            utilization: 0,
                            score: 10,
                        },
                        UtilizationShapePoint {
                            utilization: 100,
                            score: 0,
                        },
                    ]
                });
            let shape_at = strategy.child("requestedToCapacityRatio").child("shape");
            if points.is_empty() {
                return Err(field::Error::required(
                    shape_at,
                    "at least one point is required",
                ));
            }
            let mut prev = -1;
            for (i, p) in points.iter().enumerate() {
                if !(0..=100).contains(&p.utilization) || p.utilization <= prev {
                    return Err(field::Error::out_of_range(
                        shape_at.index(i).child("utilization"),
                        p.utilization,
                        "in 0..=100 and increasing",
                    ));
                }
                if !(0..=10).contains(&p.score) {
                    return Err(super::registry::not_in(
                        shape_at.index(i).child("score"),
                        p.score,
                        "0..=10",
                    ));
                }
                prev = p.utilization;
                // Shape scores are 0..=10; node scores are 0..=100.
                shape.push((p.utilization, p.score * (MAX_NODE_SCORE / 10)));
            }
        }
        let kinds = st
            .resources
            .iter()
            .map(|r| ResourceKind::of(&r.name))
            .collect();
        Ok(NodeResourcesFit { args, shape, kinds })
    }

    /// The score from each scored resource's (allocatable as a [`Divisor`], requested with
    /// the pod); `all_weights` divides by the sum of every resource's weight.
    #[inline(always)]
    fn score_with(
        &self,
        all_weights: Divisor,
        mut get: impl FnMut(&str, ResourceKind) -> Option<(Divisor, i64)>,
    ) -> i64 {
        let mut node_score = 0i64;
        let mut weight_sum = 0i64;
        let ratio = self.args.scoring_strategy.kind == StrategyType::RequestedToCapacityRatio;
        for (r, kind) in self.args.scoring_strategy.resources.iter().zip(&self.kinds) {
            let Some((alloc, req)) = get(&r.name, *kind) else {
                continue;
            };
            let s = self.resource_score(req, alloc);
            if ratio && s <= 0 {
                // RequestedToCapacityRatio only averages resources that score above zero.
                continue;
            }
            node_score += s * r.weight;
            weight_sum += r.weight;
        }
        if weight_sum == 0 {
            return 0;
        }
        if ratio {
            (node_score as f64 / weight_sum as f64).round() as i64
        } else if weight_sum == all_weights.get() {
            all_weights.divide(node_score)
        } else {
            node_score / weight_sum
        }
    }

    /// Scores over cpu and memory from the node table, each resource scored by `score` on
    /// nodes whose cpu and memory capacities are both [`plain_capacity`], by the general
    /// path on the others.
    #[inline(always)]
    fn cpu_memory(
        &self,
        snapshot: &Snapshot,
        pod: &PodInfo,
        nodes: &[NodeIdx],
        scores: &mut Vec<i64>,
        all_weights: Divisor,
        score: impl Fn(i64, Divisor) -> i64,
    ) {
        let t = snapshot.table();
        let r = &pod.requests;
        let res = &self.args.scoring_strategy.resources;
        let (w0, w1) = (res[0].weight, res[1].weight);
        for &idx in nodes {
            let i = idx as usize;
            let [ac, am, _] = t.allocatable_div[i];
            if !(plain_capacity(ac) && plain_capacity(am)) {
                // A resource the node lacks drops out, a huge one is scored in i128: the
                // general path.
                scores.push(self.score_with(all_weights, |name, kind| {
                    table_allocatable_requested(snapshot, idx, pod, kind, name, false)
                        .map(|(a, r)| (Divisor::new(a), r))
                }));
                continue;
            }
            let nz = &t.non_zero[i];
            let s = score(nz[0].saturating_add(r.non_zero_milli_cpu), ac) * w0
                + score(nz[1].saturating_add(r.non_zero_memory), am) * w1;
            scores.push(all_weights.divide(s));
        }
    }

    /// The sum of the scored resources' weights.
    fn all_weights(&self) -> Divisor {
        Divisor::new(
            self.args
                .scoring_strategy
                .resources
                .iter()
                .map(|r| r.weight)
                .sum(),
        )
    }

    /// Registers its extension points (PreFilter, Filter, Score).
    pub fn register(self) -> Registered {
        let me = Arc::new(self);
        Registered {
            pre_filter: Some(me.clone()),
            filter: Some(me.clone()),
            score: Some(me),
            ..Registered::new(NAME)
        }
    }

    fn ignored(&self, name: &str) -> bool {
        self.args.ignored_resources.iter().any(|r| r == name)
            || name
                .split_once('/')
                .is_some_and(|(g, _)| self.args.ignored_resource_groups.iter().any(|x| x == g))
    }

    fn broken_linear(&self, p: i64) -> i64 {
        let shape = &self.shape;
        for i in 0..shape.len() {
            if p <= shape[i].0 {
                if i == 0 {
                    return shape[0].1;
                }
                let (u0, s0) = shape[i - 1];
                let (u1, s1) = shape[i];
                return s0 + (s1 - s0) * (p - u0) / (u1 - u0);
            }
        }
        shape[shape.len() - 1].1
    }

    /// One resource's score, always in `0..=MAX_NODE_SCORE`; `capacity` divides exactly as
    /// `/` ([`Divisor`]). A negative request or capacity (which the pod and node readers
    /// reject) counts as zero, and a capacity near `i64::MAX` (where `capacity * 100` would
    /// overflow `i64`) is scored in `i128`.
    #[inline(always)]
    fn resource_score(&self, requested: i64, capacity: Divisor) -> i64 {
        match self.args.scoring_strategy.kind {
            StrategyType::LeastAllocated => least_allocated(requested, capacity),
            StrategyType::MostAllocated => most_allocated(requested, capacity),
            StrategyType::RequestedToCapacityRatio => {
                let (r, c) = (requested.max(0), capacity.get());
                let ratio = if c <= 0 || r > c {
                    100
                } else {
                    percent_of(r, capacity)
                };
                self.broken_linear(ratio).clamp(0, MAX_NODE_SCORE)
            }
        }
    }
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }

    /// A pod bound elsewhere only takes resources; a deletion or a resize down frees them.
    fn events_to_register(&self) -> crate::framework::ClusterEvents {
        crate::framework::ClusterEvents::OBJECTS
            .without(crate::framework::ClusterEvent::AssignedPodAdded)
    }
}

impl PreFilterPlugin for NodeResourcesFit {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (Status, Option<NodeNames>) {
        // The pod's requests are computed once when its PodInfo is built; nothing to add.
        (Status::success(), None)
    }
}

impl FilterPlugin for NodeResourcesFit {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let req = &pod.requests.requests;
        let alloc = &node.allocatable;
        let used = &node.requested;
        let mut reasons = crate::framework::Reasons::new();
        let mut details: Vec<String> = Vec::new();
        // Upstream's `InsufficientResource.Unresolvable`: the pod asks for more than the
        // node has at all, so preemption cannot help there.
        let mut unresolvable = false;
        if node.pods.len() as i64 + 1 > alloc.pods {
            reasons.push(Cow::Borrowed(REASON_TOO_MANY_PODS));
            if state.explain {
                details.push(format!("pods: {} of {} used", node.pods.len(), alloc.pods));
            }
        }
        if !req.is_zero() {
            let mut check =
                |name: &'static str, want: i64, a: i64, u: i64, fmt: fn(i64) -> String| {
                    if want > 0 && want > a - u {
                        unresolvable |= want > a;
                        reasons.push(Cow::Borrowed(name));
                        if state.explain {
                            details.push(format!(
                                "{}: requested {}, free {} of {}",
                                &name["Insufficient ".len()..],
                                fmt(want),
                                fmt(a - u),
                                fmt(a)
                            ));
                        }
                    }
                };
            check(
                "Insufficient cpu",
                req.milli_cpu,
                alloc.milli_cpu,
                used.milli_cpu,
                format_milli,
            );
            check(
                "Insufficient memory",
                req.memory,
                alloc.memory,
                used.memory,
                format_bytes,
            );
            check(
                "Insufficient ephemeral-storage",
                req.ephemeral_storage,
                alloc.ephemeral_storage,
                used.ephemeral_storage,
                format_bytes,
            );
            for (name, want) in &req.scalars {
                if *want == 0 || (!is_scalar_resource(name)) || self.ignored(name) {
                    continue;
                }
                let free = node.allocatable.scalar(name) - node.requested.scalar(name);
                if *want > free {
                    unresolvable |= *want > node.allocatable.scalar(name);
                    reasons.push(Cow::Owned(format!("Insufficient {name}")));
                    if state.explain {
                        details.push(format!("{name}: requested {want}, free {free}"));
                    }
                }
            }
        }
        if reasons.is_empty() {
            return Status::success();
        }
        Status {
            code: if unresolvable {
                crate::framework::Code::UnschedulableAndUnresolvable
            } else {
                crate::framework::Code::Unschedulable
            },
            reasons,
            plugin: "",
            detail: (!details.is_empty()).then(|| details.join("; ")),
        }
    }

    fn filter_batch(
        &self,
        _state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        batch: &mut NodeBatch,
    ) {
        let t = snapshot.table();
        let req = &pod.requests.requests;
        let checked = !req.is_zero();
        let want = [req.milli_cpu, req.memory, req.ephemeral_storage];
        const INSUFFICIENT: [&str; 3] = [
            "Insufficient cpu",
            "Insufficient memory",
            "Insufficient ephemeral-storage",
        ];
        let scalars: Vec<&(Arc<str>, i64)> = req
            .scalars
            .iter()
            .filter(|(name, want)| *want != 0 && is_scalar_resource(name) && !self.ignored(name))
            .collect();
        batch.retain(|idx| {
            let i = idx as usize;
            let (a, u) = (&t.allocatable[i], &t.requested[i]);
            // The common case first: everything fits.
            let short = |k: usize| want[k] > 0 && want[k] > a[k] - u[k];
            if u[res::PODS] < a[res::PODS]
                && (!checked
                    || (!short(res::CPU)
                        && !short(res::MEMORY)
                        && !short(res::EPHEMERAL_STORAGE)
                        && scalars.is_empty()))
            {
                return None;
            }
            let mut reasons = Reasons::new();
            let mut unresolvable = false;
            if u[res::PODS] + 1 > a[res::PODS] {
                reasons.push(Cow::Borrowed(REASON_TOO_MANY_PODS));
            }
            if checked {
                for k in [res::CPU, res::MEMORY, res::EPHEMERAL_STORAGE] {
                    if want[k] > 0 && want[k] > a[k] - u[k] {
                        unresolvable |= want[k] > a[k];
                        reasons.push(Cow::Borrowed(INSUFFICIENT[k]));
                    }
                }
                if !scalars.is_empty() {
                    let node = snapshot.node(idx);
                    for (name, want) in &scalars {
                        let free = node.allocatable.scalar(name) - node.requested.scalar(name);
                        if *want > free {
                            unresolvable |= *want > node.allocatable.scalar(name);
                            reasons.push(Cow::Owned(format!("Insufficient {name}")));
                        }
                    }
                }
            }
            (!reasons.is_empty()).then_some(Status {
                code: if unresolvable {
                    Code::UnschedulableAndUnresolvable
                } else {
                    Code::Unschedulable
                },
                reasons,
                plugin: "",
                detail: None,
            })
        });
    }
}

impl ScorePlugin for NodeResourcesFit {
    fn normalizes(&self) -> bool {
        // No NormalizeScore: the raw scores are the normalised ones.
        false
    }

    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(self.score_with(self.all_weights(), |name, _| {
            allocatable_requested(node, pod, name, false).map(|(a, r)| (Divisor::new(a), r))
        }))
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
        let all_weights = self.all_weights();
        if self.kinds.contains(&ResourceKind::Scalar) {
            for &idx in nodes {
                scores.push(self.score_with(all_weights, |name, kind| {
                    table_allocatable_requested(snapshot, idx, pod, kind, name, false)
                        .map(|(a, r)| (Divisor::new(a), r))
                }));
            }
            return Ok(());
        }
        let t = snapshot.table();
        let r = &pod.requests;
        let ratio = self.args.scoring_strategy.kind == StrategyType::RequestedToCapacityRatio;
        if !ratio && self.kinds == [ResourceKind::Cpu, ResourceKind::Memory] {
            // The default: cpu and memory, straight arithmetic, the strategy chosen once.
            match self.args.scoring_strategy.kind {
                StrategyType::MostAllocated => self.cpu_memory(
                    snapshot,
                    pod,
                    nodes,
                    scores,
                    all_weights,
                    most_allocated_plain,
                ),
                _ => self.cpu_memory(
                    snapshot,
                    pod,
                    nodes,
                    scores,
                    all_weights,
                    least_allocated_plain,
                ),
            }
            return Ok(());
        }
        // Every scored resource is a column of the node table: read the node's rows once.
        for &idx in nodes {
            let i = idx as usize;
            let (a, nz, rq) = (&t.allocatable_div[i], &t.non_zero[i], &t.requested[i]);
            scores.push(self.score_with(all_weights, |_, kind| {
                let (alloc, req) = match kind {
                    ResourceKind::Cpu => (a[0], nz[0].saturating_add(r.non_zero_milli_cpu)),
                    ResourceKind::Memory => (a[1], nz[1].saturating_add(r.non_zero_memory)),
                    _ => (
                        a[2],
                        rq[res::EPHEMERAL_STORAGE].saturating_add(r.requests.ephemeral_storage),
                    ),
                };
                (alloc.get() != 0).then_some((alloc, req))
            }));
        }
        Ok(())
    }

    fn explain_score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let parts: Vec<String> = self
            .args
            .scoring_strategy
            .resources
            .iter()
            .filter_map(|r| {
                let (alloc, req) = allocatable_requested(node, pod, &r.name, false)?;
                Some(format!(
                    "{}: {} requested of {} → {}",
                    r.name,
                    if r.name == CPU {
                        format_milli(req)
                    } else {
                        format_bytes(req)
                    },
                    if r.name == CPU {
                        format_milli(alloc)
                    } else {
                        format_bytes(alloc)
                    },
                    self.resource_score(req, Divisor::new(alloc))
                ))
            })
            .collect();
        Some(format!(
            "{:?}: {}",
            self.args.scoring_strategy.kind,
            parts.join(", ")
        ))
    }
}

impl super::registry::PluginArgs for NodeResourcesFitArgs {
    /// Upstream's `ValidateNodeResourcesFitArgs` (resources and weights, the shape): the
    /// constructor's checks.
    fn validate(&self, path: &crate::field::Path) -> crate::field::ErrorList {
        super::registry::constructed(NodeResourcesFit::new(self.clone()), path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::testutil::*;
    use serde_json::json;

    fn req_pod(
        name: &str,
        node: Option<&str>,
        requests: serde_json::Value,
    ) -> k8s_openapi::api::core::v1::Pod {
        let mut extra =
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}});
        if let Some(n) = node {
            merge(&mut extra, json!({"spec": {"nodeName": n}}));
        }
        pod(name, extra)
    }

    fn snap() -> Snapshot {
        Snapshot::build(
            [
                node(
                    "small",
                    json!({"status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "2"}}}),
                ),
                node(
                    "big",
                    json!({"status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110", "example.com/gpu": "2"}}}),
                ),
            ],
            [
                req_pod("a", Some("small"), json!({"cpu": "1", "memory": "1Gi"})),
                req_pod("b", Some("small"), json!({"cpu": "500m"})),
                req_pod(
                    "c",
                    Some("big"),
                    json!({"cpu": "2", "memory": "4Gi", "example.com/gpu": "1"}),
                ),
            ],
        )
    }

    #[test]
    fn filter_table() {
        let fit = || {
            NodeResourcesFit::new(NodeResourcesFitArgs::default())
                .unwrap()
                .register()
        };
        let cases: Vec<(serde_json::Value, Vec<Vec<&str>>)> = vec![
            (json!({"cpu": "100m"}), vec![vec!["Too many pods"], vec![]]),
            (
                json!({"cpu": "7", "memory": "13Gi"}),
                vec![
                    vec!["Too many pods", "Insufficient cpu", "Insufficient memory"],
                    vec!["Insufficient cpu", "Insufficient memory"],
                ],
            ),
            (
                json!({"cpu": "6"}),
                vec![vec!["Too many pods", "Insufficient cpu"], vec![]],
            ),
            (
                json!({"example.com/gpu": "2"}),
                vec![
                    vec!["Too many pods", "Insufficient example.com/gpu"],
                    vec!["Insufficient example.com/gpu"],
                ],
            ),
            (
                json!({"example.com/gpu": "1"}),
                vec![
                    vec!["Too many pods", "Insufficient example.com/gpu"],
                    vec![],
                ],
            ),
        ];
        // Upstream's `Unresolvable`: more than the node's allocatable at all (preemption
        // cannot help); "small" is full (2 pods, 2 CPUs, no GPU), "big" has 6 CPUs, 12Gi
        // and one GPU free of 8, 16Gi and 2.
        use Code::{Unschedulable as U, UnschedulableAndUnresolvable as UU};
        let codes: [[Option<Code>; 2]; 5] = [
            [Some(U), None],
            [Some(UU), Some(U)],
            [Some(UU), None],
            [Some(UU), Some(U)],
            [Some(UU), None],
        ];
        for ((requests, want), want_codes) in cases.into_iter().zip(codes) {
            let got = filter_all(&fit(), &snap(), &info(req_pod("p", None, requests.clone())));
            let got_codes: Vec<Option<Code>> = got
                .iter()
                .map(|(_, s)| (!s.is_success()).then_some(s.code))
                .collect();
            assert_eq!(got_codes, want_codes, "{requests}");
            let reasons: Vec<Vec<String>> = got
                .iter()
                .map(|(_, s)| s.reasons.iter().map(|r| r.to_string()).collect())
                .collect();
            assert_eq!(reasons, want, "{requests}");
            for (_, s) in &got {
                if !s.is_success() {
                    assert!(s.detail.is_some(), "explain mode attaches numbers");
                }
            }
        }
        let args = NodeResourcesFitArgs {
            ignored_resource_groups: vec!["example.com".into()],
            ..Default::default()
        };
        let got = filter_all(
            &NodeResourcesFit::new(args).unwrap().register(),
            &snap(),
            &info(req_pod("p", None, json!({"example.com/gpu": "5"}))),
        );
        assert!(got[1].1.is_success());
    }

    #[test]
    fn resource_scores_stay_in_range_on_any_input() {
        // Regression (issue #15, 7): a negative request scored 102 ("returns an invalid
        // score"), and a capacity near i64::MAX overflowed `capacity * 100`.
        for kind in [
            StrategyType::LeastAllocated,
            StrategyType::MostAllocated,
            StrategyType::RequestedToCapacityRatio,
        ] {
            let fit = NodeResourcesFit::new(NodeResourcesFitArgs {
                scoring_strategy: ScoringStrategy {
                    kind,
                    ..Default::default()
                },
                ..Default::default()
            })
            .unwrap();
            let values = [
                i64::MIN,
                -1000,
                -1,
                0,
                1,
                1000,
                i64::MAX / 100 + 1,
                i64::MAX,
            ];
            for r in values {
                for c in values {
                    let s = fit.resource_score(r, Divisor::new(c));
                    assert!((0..=MAX_NODE_SCORE).contains(&s), "{kind:?} {r} {c}: {s}");
                }
            }
            assert_eq!(
                fit.resource_score(-1000, Divisor::new(4000)),
                fit.resource_score(0, Divisor::new(4000)),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn plain_capacity_paths_equal_the_general_ones() {
        let values = [
            i64::MIN,
            -1,
            0,
            1,
            2,
            99,
            4000,
            EXACT_IN_I64 - 1,
            EXACT_IN_I64,
            EXACT_IN_I64 + 1,
            i64::MAX,
        ];
        for c in values {
            let d = Divisor::new(c);
            assert_eq!(plain_capacity(d), (1..=EXACT_IN_I64).contains(&c), "{c}");
            if !plain_capacity(d) {
                continue;
            }
            for r in values.into_iter().chain([c - 1, c, c.saturating_add(1)]) {
                assert_eq!(
                    least_allocated_plain(r, d),
                    least_allocated(r, d),
                    "{r} {c}"
                );
                assert_eq!(most_allocated_plain(r, d), most_allocated(r, d), "{r} {c}");
            }
        }
    }

    #[test]
    fn score_strategies() {
        // big: non-zero cpu 2000 + 1000 = 3000 of 8000; memory 4Gi + 200Mi(default) of 16Gi.
        let p = info(req_pod("p", None, json!({"cpu": "1"})));
        let node = snap().get("big").unwrap().clone();
        let state = CycleState::new(false);
        let least = NodeResourcesFit::new(NodeResourcesFitArgs::default()).unwrap();
        let cpu = (8000 - 3000) * 100 / 8000; // 62
        let mem_req: i64 = (4 << 30) + (200 << 20);
        let mem = ((16i64 << 30) - mem_req) * 100 / (16i64 << 30); // 73
        assert_eq!(least.score(&state, &p, &node).unwrap(), (cpu + mem) / 2);

        let most = NodeResourcesFit::new(NodeResourcesFitArgs {
            scoring_strategy: ScoringStrategy {
                kind: StrategyType::MostAllocated,
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            most.score(&state, &p, &node).unwrap(),
            (3000 * 100 / 8000 + mem_req * 100 / (16i64 << 30)) / 2
        );

        let ratio = NodeResourcesFit::new(NodeResourcesFitArgs {
            scoring_strategy: ScoringStrategy {
                kind: StrategyType::RequestedToCapacityRatio,
                requested_to_capacity_ratio: Some(RequestedToCapacityRatio {
                    shape: vec![
                        UtilizationShapePoint {
                            utilization: 0,
                            score: 0,
                        },
                        UtilizationShapePoint {
                            utilization: 100,
                            score: 10,
                        },
                    ],
                }),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
        // utilisation cpu 37% → 37, memory 26% → 26; mean 31.5 rounds to 32.
        assert_eq!(ratio.score(&state, &p, &node).unwrap(), 32);

        assert!(
            NodeResourcesFit::new(NodeResourcesFitArgs {
                scoring_strategy: ScoringStrategy {
                    resources: vec![],
                    ..Default::default()
                },
                ..Default::default()
            })
            .is_err()
        );
    }
}

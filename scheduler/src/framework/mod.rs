//! The scheduling framework: extension points as traits, the per-cycle state, statuses, and
//! the runtime that runs a profile's plugins over a snapshot and produces a [`Decision`].
//!
//! Extension points, in cycle order (as upstream's): PreFilter → Filter (per node) →
//! PostFilter (only when no node fits: preemption) → PreScore → Score (per feasible node) →
//! NormalizeScore → weights → host selection → Reserve/Unreserve → Permit → Bind. When no
//! node fits and only filters that declare themselves relaxable
//! ([`Plugin::relaxed_by_usage_fallback`]) kept the pod off some node, a pod that has
//! waited long enough gets a second pass with them relaxed (`second_pass`).
//!
//! Filters and scores are synchronous and pure over an immutable [`Snapshot`]: no I/O happens
//! inside a cycle. Everything that needs the network or the disk (usage data, the API server)
//! is prepared before the cycle into the snapshot or a view the plugin holds.
//!
//! A plugin struct implements the traits of the points it serves and is registered once as a
//! [`Registered`] entry listing them. Scores are 0..=[`MAX_NODE_SCORE`] after normalisation,
//! then multiplied by the plugin's weight from the profile.
//!
//! Filter and Score have a per-node call (`filter`, `score`: the reference semantics, and
//! what explanations use) and a batch call over many nodes (`filter_batch`, `score_batch`)
//! that the runtime uses. The batch calls default to looping over the per-node ones; the
//! plugins on the hot path override them with loops over the snapshot's dense
//! [`NodeTable`](crate::snapshot::NodeTable), with everything about the pod compiled once
//! per cycle. Batches are chunks of the node list, possibly on several threads at once, so
//! the batch calls must not depend on which nodes share a batch.

mod cycle_state;
pub mod decision;
#[cfg(test)]
mod equivalence;
mod events;
mod runtime;
mod second_pass;
mod status;

use std::sync::Arc;

pub use cycle_state::{CycleState, WrittenIn};
pub use decision::{Decision, Fallback, Nomination, Outcome, WarmHold};
pub use events::{ClusterEvent, ClusterEvents, QueueingHints};
pub use runtime::{
    DEFAULT_MIN_CHUNK, FILTER_BLOCK, Framework, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND,
    MIN_FEASIBLE_NODES_TO_FIND, PLUGIN_METRICS_SAMPLE_EVERY, PluginWeight, default_parallelism,
};
pub use second_pass::{Wait, relaxable_rejections, waiting_message};
pub use status::{Code, Reasons, Status};

use crate::snapshot::{NodeIdx, NodeInfo, PodInfo, Snapshot};

/// The highest score a plugin may give a node after normalisation.
pub const MAX_NODE_SCORE: i64 = 100;
/// The lowest.
pub const MIN_NODE_SCORE: i64 = 0;

/// What every plugin has: a name.
pub trait Plugin: Send + Sync {
    /// The plugin's name, as used in profiles and decision records.
    fn name(&self) -> &'static str;

    /// The cluster events that may undo this plugin's rejections (upstream's
    /// `EventsToRegister`): the queue moves a pod it rejected only on these. Default:
    /// [`ClusterEvents::OBJECTS`], every change to nodes and pods.
    fn events_to_register(&self) -> ClusterEvents {
        ClusterEvents::OBJECTS
    }

    /// The peer metric pipelines this plugin reads ([`crate::usage_context::held`]): the
    /// scheduler holds each one's node figures for it, advanced with each usage view.
    /// Default: none (the plugin reads the live view).
    fn metric_paths(&self) -> Vec<crate::usage_context::MetricPath> {
        Vec::new()
    }

    /// Whether the usage fallback (`usage.maxWait`) relaxes this plugin's Filter once a pod
    /// has waited long enough (the real memory and CPU fits: room that only other pods
    /// finishing can give; RealMemoryFit still keeps an expected overflow off a node while
    /// another has room).
    fn relaxed_by_usage_fallback(&self) -> bool {
        false
    }
}

/// Node names a PreFilter restricts the cycle to (upstream's `PreFilterResult`).
pub type NodeNames = std::collections::BTreeSet<String>;

/// Runs once per pod before filtering; may compute state, restrict nodes, reject the pod, or
/// return `Skip` so that its Filter is not run for this pod.
pub trait PreFilterPlugin: Plugin {
    /// The PreFilter call.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, Option<NodeNames>);
}

/// Decides whether one node can run the pod.
pub trait FilterPlugin: Plugin {
    /// The Filter call.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;

    /// Filter over a batch of nodes: removes the nodes it rejects from `batch`, each with
    /// the status [`FilterPlugin::filter`] gives it (details may be left out: the runtime
    /// asks `filter` for them when explaining). The default calls `filter` per node.
    fn filter_batch(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        batch: &mut NodeBatch,
    ) {
        batch.retain_passing(snapshot, |node| self.filter(state, pod, node));
    }
}

/// The nodes a filter batch works on: those still feasible, and those rejected so far.
#[derive(Debug, Default)]
pub struct NodeBatch {
    pub(crate) nodes: Vec<NodeIdx>,
    pub(crate) rejected: Vec<(NodeIdx, Status)>,
}

impl NodeBatch {
    /// A batch of candidate nodes.
    pub fn new(nodes: Vec<NodeIdx>) -> NodeBatch {
        NodeBatch {
            nodes,
            rejected: Vec::new(),
        }
    }

    /// The nodes still feasible, in order.
    #[inline]
    pub fn nodes(&self) -> &[NodeIdx] {
        &self.nodes
    }

    /// Keeps the nodes for which `verdict` says `None`; the others are rejected with the
    /// status it returns (which must not be a success).
    #[inline]
    pub fn retain(&mut self, mut verdict: impl FnMut(NodeIdx) -> Option<Status>) {
        // In-place compaction (cheaper per node than `Vec::retain`'s general machinery).
        let mut kept = 0;
        for read in 0..self.nodes.len() {
            let idx = self.nodes[read];
            match verdict(idx) {
                None => {
                    self.nodes[kept] = idx;
                    kept += 1;
                }
                Some(s) => self.rejected.push((idx, s)),
            }
        }
        self.nodes.truncate(kept);
    }

    /// Keeps the nodes `filter` passes; the others are rejected with its status (a per-node
    /// Filter run over a batch).
    pub fn retain_passing(&mut self, snapshot: &Snapshot, filter: impl Fn(&NodeInfo) -> Status) {
        self.retain(|idx| {
            let s = filter(snapshot.node(idx));
            (!s.is_success()).then_some(s)
        });
    }

    /// Rejects the nodes for which `reject` says true, all with the same `status` (the
    /// cheapest form for filters with a single reason).
    #[inline]
    pub fn reject_if(&mut self, status: &Status, mut reject: impl FnMut(NodeIdx) -> bool) {
        let mut kept = 0;
        for read in 0..self.nodes.len() {
            let idx = self.nodes[read];
            if reject(idx) {
                self.rejected.push((idx, status.clone()));
            } else {
                self.nodes[kept] = idx;
                kept += 1;
            }
        }
        self.nodes.truncate(kept);
    }

    /// Rejects every node still in the batch with `status`.
    pub fn reject_all(&mut self, status: &Status) {
        for idx in self.nodes.drain(..) {
            self.rejected.push((idx, status.clone()));
        }
    }

    /// Splits the batch into the feasible nodes and the rejected ones.
    pub fn into_parts(self) -> (Vec<NodeIdx>, Vec<(NodeIdx, Status)>) {
        (self.nodes, self.rejected)
    }
}

/// What a PostFilter plugin is handed when no node fits.
pub struct PostFilterArgs<'a> {
    /// The profile's framework: preemption re-runs its PreFilter and Filter plugins over a
    /// snapshot with pods removed ([`Framework::filter_node`]).
    pub framework: &'a Framework,
    /// The cycle's state (its inputs are forked for the re-runs).
    pub state: &'a CycleState,
    /// The pod that fits nowhere.
    pub pod: &'a PodInfo,
    /// The snapshot the cycle read.
    pub snapshot: &'a Snapshot,
    /// The record of the failed cycle: each node's status (upstream's `NodeToStatus`).
    pub decision: &'a Decision,
    /// A number drawn from the scheduler's random generator for this call (where a dry run
    /// starts, upstream's random offset), so that runs stay reproducible per seed.
    pub random: u64,
}

/// Runs when no node fits (upstream's PostFilter point, where preemption happens). A
/// success with a [`Nomination`] ends the PostFilter phase; rejections' reasons are joined
/// into the tail of the FailedScheduling message, as upstream's `RunPostFilterPlugins`.
pub trait PostFilterPlugin: Plugin {
    /// The PostFilter call: the nomination (if any) and the status.
    fn post_filter(&self, args: &PostFilterArgs<'_>) -> (Option<Nomination>, Status);
}

/// Runs once per pod before scoring, over the feasible nodes; `Skip` drops the plugin's Score.
pub trait PreScorePlugin: Plugin {
    /// The PreScore call.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: &[NodeIdx],
    ) -> Status;
}

/// Scores one feasible node; optionally normalises all scores of the cycle.
pub trait ScorePlugin: Plugin {
    /// The raw score of a node.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status>;

    /// Appends the raw scores of a batch of nodes to `scores` (one per node, in order), as
    /// [`ScorePlugin::score`] gives them; on failure, the position of the node and the
    /// status. The default calls `score` per node.
    fn score_batch(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[NodeIdx],
        scores: &mut Vec<i64>,
    ) -> Result<(), (usize, Status)> {
        scores.reserve(nodes.len());
        for (i, &idx) in nodes.iter().enumerate() {
            scores.push(
                self.score(state, pod, snapshot.node(idx))
                    .map_err(|s| (i, s))?,
            );
        }
        Ok(())
    }

    /// The numbers behind a node's raw score, for explanations only (never on the hot path).
    fn explain_score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let _ = (state, pod, node);
        None
    }

    /// Rewrites the raw scores into 0..=100 (in feasible-node order). The default keeps them.
    fn normalize(&self, state: &CycleState, pod: &PodInfo, scores: &mut [i64]) -> Status {
        let _ = (state, pod, scores);
        Status::success()
    }

    /// Whether [`ScorePlugin::normalize`] may change the raw scores. Default `true`; a
    /// plugin that keeps the default `normalize` may say `false`, and then the cycle does
    /// not call `normalize` and keeps one column for raw and normalised scores (no copy of
    /// it per cycle; [`decision::ScoreColumn::raw`] is `None`).
    fn normalizes(&self) -> bool {
        true
    }
}

/// The volumes a Reserve plugin chose for the pod on its node (VolumeBinding: claims
/// matched to existing PVs, claims to provision), in the cycle state: the scheduler assumes
/// the PVs bound in the cache when it assumes the pod (upstream's `AssumePodVolumes`, done
/// at settlement here since the cycle changes nothing), blaming `plugin` if that fails, and
/// PreBind writes them to the API server. Empty after Unreserve.
#[derive(Debug, Clone, Default)]
pub struct ReservedVolumes {
    /// The plugin that chose them.
    pub plugin: &'static str,
    /// What it chose.
    pub volumes: crate::snapshot::volumes::PodVolumes,
}

/// Reserve and Unreserve: claim (or release) plugin-side state once a node is chosen.
pub trait ReservePlugin: Plugin {
    /// Called after the node is chosen, before binding.
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;
    /// Called when a later step fails, in reverse order of Reserve.
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str);
}

/// Permit: the last word before the pod is assumed on its chosen node: approve
/// (success), deny (any rejection), or wait ([`Code::Wait`] with a timeout). A waiting pod
/// is unreserved and goes back to the queue (see [`Code::Wait`] for why it keeps no node),
/// retried on the events the plugin declares ([`Plugin::events_to_register`]), when the
/// plugin judges it again; the queue does not retry it at the timeout by itself (History's
/// events include every usage refresh, and its hold ends once the wait reaches the
/// timeout). The scheduler records what the plugin left in the cycle state (a
/// [`WarmHold`]) in the decision.
pub trait PermitPlugin: Plugin {
    /// The Permit call, for `pod` on the chosen `node` of `snapshot`: the status and, for
    /// a wait, how long the pod may wait at most.
    fn permit(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        node: &str,
    ) -> (Status, std::time::Duration);
}

/// A boxed future, for the one asynchronous extension point (Bind).
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Bind: makes the placement real (the API server's `pods/binding`, or instantly in the
/// simulator). It runs outside the scheduling cycle, after the pod was assumed on its node, so
/// the next cycle does not wait for it. It says what the bind came to ([`BindOutcome`]) and
/// does nothing about it: the scheduling loop alone acts on the outcome (confirms, forgets,
/// requeues or drops the pod) and hands it to the decision sink, for every mode.
pub trait BindPlugin: Plugin {
    /// Binds `pod` to `node`, writing `annotations` with the binding.
    fn bind<'a>(
        &'a self,
        pod: &'a PodInfo,
        node: &'a str,
        annotations: &'a BindAnnotations,
    ) -> BoxFuture<'a, BindOutcome>;
}

/// What a bind came to, sorted by what the scheduler does next (upstream's
/// `handleBindingCycleError` and its informer-driven clean-up, as one value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindOutcome {
    /// The pod is bound to the node.
    Bound,
    /// The pod is gone: deleted, or replaced by another pod under its name (the binding's
    /// uid precondition failed). The assumed pod is forgotten and the pod leaves the queue;
    /// the watch brings whatever replaced it.
    Gone(String),
    /// The pod is already bound (by another scheduler, or by an earlier bind whose answer
    /// was lost): the assumed pod is forgotten and the pod leaves the queue; the watch shows
    /// where it runs.
    Conflict(String),
    /// Refused for a reason that may pass (throttled, the server unavailable, a timeout
    /// with the pod still pending, a PreBind that failed): the assumed pod is forgotten and
    /// the pod retried with backoff.
    Retry(String),
}

impl BindOutcome {
    /// Whether the pod is bound.
    pub fn is_bound(&self) -> bool {
        matches!(self, BindOutcome::Bound)
    }

    /// Why the pod is not bound (`None` when it is).
    pub fn error(&self) -> Option<&str> {
        match self {
            BindOutcome::Bound => None,
            BindOutcome::Gone(m) | BindOutcome::Conflict(m) | BindOutcome::Retry(m) => Some(m),
        }
    }

    /// Whether the pod leaves the queue for good (gone, or bound by someone else).
    pub fn is_final(&self) -> bool {
        matches!(self, BindOutcome::Gone(_) | BindOutcome::Conflict(_))
    }
}

/// Annotations a bind writes onto the pod. The API server copies a `Binding`'s annotations
/// onto the pod it binds (kube-apiserver's `setPodNodeAndMetadata`), so they cost no API
/// call of their own: at hundreds of binds a second, a separate patch per pod was a third
/// of headroom's writes.
pub type BindAnnotations = std::collections::BTreeMap<String, String>;
/// PreBind: work that must be done before the pod is bound (upstream's PreBind, e.g.
/// VolumeBinding writing PV claimRefs and waiting for the claims to be bound). It runs in
/// the binding task, outside the scheduling cycle, after Reserve and the assume; a
/// non-success status unreserves, forgets the assumed pod and retries it with backoff.
pub trait PreBindPlugin: Plugin {
    /// Upstream's `PreBindPreFlight`: `Skip` when this pod has nothing to do in PreBind
    /// (the binding task then never calls [`PreBindPlugin::pre_bind`]).
    fn pre_bind_pre_flight(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status;
    /// The PreBind call (may wait, bounded, for the API server).
    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a PodInfo,
        node: &'a str,
    ) -> BoxFuture<'a, Status>;
}

/// PreEnqueue: whether the pod may enter the active queue at all (e.g. scheduling gates).
pub trait PreEnqueuePlugin: Plugin {
    /// The PreEnqueue call.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status;
}

/// One plugin registered with the extension points it serves.
#[derive(Clone, Default)]
pub struct Registered {
    /// The plugin's name.
    pub name: &'static str,
    /// PreEnqueue, if served.
    pub pre_enqueue: Option<Arc<dyn PreEnqueuePlugin>>,
    /// PreFilter, if served.
    pub pre_filter: Option<Arc<dyn PreFilterPlugin>>,
    /// Filter, if served.
    pub filter: Option<Arc<dyn FilterPlugin>>,
    /// PostFilter, if served.
    pub post_filter: Option<Arc<dyn PostFilterPlugin>>,
    /// PreScore, if served.
    pub pre_score: Option<Arc<dyn PreScorePlugin>>,
    /// Score, if served.
    pub score: Option<Arc<dyn ScorePlugin>>,
    /// Reserve, if served.
    pub reserve: Option<Arc<dyn ReservePlugin>>,
    /// Permit, if served.
    pub permit: Option<Arc<dyn PermitPlugin>>,
    /// PreBind, if served.
    pub pre_bind: Option<Arc<dyn PreBindPlugin>>,
}

impl Registered {
    /// Starts a registration for a named plugin.
    pub fn new(name: &'static str) -> Registered {
        Registered {
            name,
            ..Default::default()
        }
    }

    /// The plugin behind the points that can keep a pod from its node (Filter, else
    /// PreFilter, else PreEnqueue, else Permit), if it serves any.
    fn rejecting(&self) -> Option<&dyn Plugin> {
        if let Some(p) = &self.filter {
            return Some(p.as_ref() as &dyn Plugin);
        }
        if let Some(p) = &self.pre_filter {
            return Some(p.as_ref() as &dyn Plugin);
        }
        if let Some(p) = &self.pre_enqueue {
            return Some(p.as_ref() as &dyn Plugin);
        }
        self.permit.as_ref().map(|p| p.as_ref() as &dyn Plugin)
    }

    /// The events that may undo this plugin's rejections or end its Permit's waits
    /// ([`Plugin::events_to_register`]); `None` for a plugin that keeps no pod from a node.
    pub fn events_to_register(&self) -> Option<ClusterEvents> {
        self.rejecting().map(|p| p.events_to_register())
    }

    /// The peer metric pipelines the plugin reads ([`Plugin::metric_paths`], asked of its
    /// Score, else its Filter).
    pub fn metric_paths(&self) -> Vec<crate::usage_context::MetricPath> {
        if let Some(p) = &self.score {
            return p.metric_paths();
        }
        self.filter
            .as_ref()
            .map_or_else(Vec::new, |p| p.metric_paths())
    }

    /// Whether the usage fallback relaxes this plugin's Filter.
    pub fn relaxed_by_usage_fallback(&self) -> bool {
        self.filter
            .as_ref()
            .is_some_and(|p| p.relaxed_by_usage_fallback())
    }
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut points = Vec::new();
        for (has, p) in [
            (self.pre_enqueue.is_some(), "PreEnqueue"),
            (self.pre_filter.is_some(), "PreFilter"),
            (self.filter.is_some(), "Filter"),
            (self.post_filter.is_some(), "PostFilter"),
            (self.pre_score.is_some(), "PreScore"),
            (self.score.is_some(), "Score"),
            (self.reserve.is_some(), "Reserve"),
            (self.permit.is_some(), "Permit"),
            (self.pre_bind.is_some(), "PreBind"),
        ] {
            if has {
                points.push(p);
            }
        }
        write!(f, "{} {:?}", self.name, points)
    }
}

/// Upstream's `DefaultNormalizeScore`: scales scores so the highest becomes `max`; with
/// `reverse`, lower raw scores win (`max - score`). All zero → all zero (or all `max` when
/// reversed).
pub fn default_normalize_score(max: i64, reverse: bool, scores: &mut [i64]) {
    let max_count = scores.iter().copied().max().unwrap_or(0).max(0);
    if max_count == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = max);
        }
        return;
    }
    // The divisor is the same for the whole column: a multiplication instead of a division
    // per node (exactly `/`).
    let by = crate::snapshot::table::Divisor::new(max_count);
    for s in scores.iter_mut() {
        let mut v = by.divide(max * *s);
        if reverse {
            v = max - v;
        }
        *s = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_table() {
        let cases: &[(&[i64], bool, &[i64])] = &[
            (&[0, 0], false, &[0, 0]),
            (&[0, 0], true, &[100, 100]),
            (&[1, 2, 4], false, &[25, 50, 100]),
            (&[1, 2, 4], true, &[75, 50, 0]),
            (&[3, 7], false, &[42, 100]),
        ];
        for (input, reverse, want) in cases {
            let mut s = input.to_vec();
            default_normalize_score(100, *reverse, &mut s);
            assert_eq!(&s, want, "{input:?} reverse={reverse}");
        }
    }
}

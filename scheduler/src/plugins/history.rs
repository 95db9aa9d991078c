//! History: a builder returns to the nodes it ran on, where its cache is warm (seed 000).
//!
//! The node at history index 0, 1, 2 scores 60, 50, 40 (`scores`), a node further back in
//! the history 40 (`olderScore`), any other node 0. The
//! history is the pod annotation `bkci.dispatch.kubenetes/builder-history-nodes` (a JSON
//! list, most recent first) when present and readable; otherwise headroom's own placement
//! history of the builder (its placements since the last usage refresh, then the store's).
//! An entry matches a node by name or by any of its `status.addresses` (bk-ci lists IPs).
//! A malformed annotation is ignored with a note in the decision record, as bk-ci does.
//! Scores are not normalised: they are absolute. Seed 000 scored 30/20/10, so that with the
//! default weights the history was worth at most 30 % of headroom's own score; headroom's
//! defaults score every node that holds the cache nearly alike and twice as much, with the
//! band guarding the hot tail (docs/placement.md, *History's strength*: measured on every
//! farm family, on seeds they were not tuned on too). With `headroomBandScope: sameBuilder`
//! the band judges only a warm node that already runs another pod of the same builder: runs
//! of one builder use alike, so what a prediction misses for one it misses for both, and
//! every OOM kill measured with the band off was two or more runs of one builder that
//! History had drawn onto one node (docs/placement.md, *What the band guards against*).
//!
//! With `coldCpuGuard` (on by default) the band also takes the score from a warm node whose
//! real CPU the pod would push past capacity, when the pod is predicted by its requests
//! alone (no profile, no `builder-real-resources`, no calibration yet). Such a node is
//! busy with running builds, typically the builder's own earlier run that made it warm and
//! is still ramping up; a second unknown run beside it doubles whatever the requests miss
//! (docs/placement.md, *The cold CPU guard*).

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::field;
use crate::framework::{
    ClusterEvents, CycleState, PermitPlugin, Plugin, PreScorePlugin, Registered, ScorePlugin,
    Status, WrittenIn,
};
use crate::snapshot::{NodeIdx, NodeInfo, PodInfo, Snapshot};
use crate::usage::predict::Source;
use crate::usage::{FreeAfter, UsagePolicy, free_after_column, pod_usage};

use super::PluginDeps;

/// Plugin name.
pub const NAME: &str = "History";
/// bk-ci's annotation with the builder's previous nodes.
pub const HISTORY_ANNOTATION: &str = "bkci.dispatch.kubenetes/builder-history-nodes";
/// Default `headroomBand`, percentage points.
pub const BAND: f64 = 10.0;
/// Default `olderScore`.
pub const OLDER_SCORE: i64 = 40;
/// Seed 000's `scores` (with `olderScore: 0`, its plugin).
pub const SEED_SCORES: [i64; 3] = [30, 20, 10];

/// Which warm nodes History's band judges (`headroomBandScope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum BandScope {
    /// Every warm node. The default.
    #[default]
    EveryWarmNode,
    /// Only a warm node that already runs another pod of the same builder (bound or
    /// assumed): the pod's runs use alike, so a second run beside the first doubles
    /// whatever the prediction missed. A warm node that other pods fill (a service, other
    /// builders) keeps its score; RealMemoryFit and RealHeadroom judge it as any node.
    SameBuilder,
}

/// History's args (`pluginArgs.history`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct HistoryArgs {
    /// Score of the node at each history index, most recent first. Default `[60, 50, 40]`
    /// (seed 000: `[30, 20, 10]`; twice that, nearly alike, measured on every farm family:
    /// fewer OOM kills and hot node-hours where nodes are small, more warm caches
    /// everywhere, docs/placement.md, *History's strength*).
    pub scores: Vec<i64>,
    /// How much less real free memory than the median feasible node a warm node may have
    /// and still get its history score, in percentage points of capacity, after placing
    /// the pod (RealHeadroom's numbers). A warm cache is worth some imbalance, not a node
    /// in the cluster's hot tail: below the band the node scores 0. `100` turns the band
    /// off (seed 000's plain scores). Applies only when some feasible node has fresh
    /// usage. Default `10` (tuned on the farm families: `15` left the memory spread
    /// across nodes above the request baseline's on lightly loaded farms).
    pub headroom_band: f64,
    /// Which warm nodes the band judges: `everyWarmNode` (default) or `sameBuilder` (only a
    /// warm node that already runs another pod of the pod's builder: more warm caches and
    /// fewer hot node-hours where builds are big against their nodes, more memory spread
    /// and OOM kills on the family the defaults were tuned on; measured on every farm
    /// family, docs/placement.md, *What the band guards against*).
    pub headroom_band_scope: BandScope,
    /// Whether the band also judges CPU for a pod that headroom can predict only by its
    /// requests (no profile, no `builder-real-resources`, no calibration yet): a warm node
    /// whose real CPU that pod would push past capacity scores 0. Its busy CPU is the
    /// running builds, typically the builder's own run that made the node warm and is still
    /// ramping up; two runs of one unknown builder on one node double what the requests
    /// miss. Capacity is the threshold, no constant; a pod with a prediction of its own is
    /// judged by memory alone. Default `true` (measured on every farm family,
    /// docs/placement.md, *The cold CPU guard*); needs the band (`headroomBand` below 100).
    pub cold_cpu_guard: bool,
    /// Score of a node further back in the builder's history than `scores` reaches: its
    /// cache is still there (headroom's own history keeps the builder's last 8 nodes; an
    /// annotation lists as many as it lists). `0` scores only the first `scores.len()`
    /// nodes, as seed 000's plugin does. Default `40`, the last default score: every node
    /// that holds the cache is worth returning to (measured on the farm families,
    /// docs/placement.md, *History's strength*).
    pub older_score: i64,
}

impl Default for HistoryArgs {
    fn default() -> Self {
        HistoryArgs {
            scores: vec![60, 50, 40],
            headroom_band: BAND,
            headroom_band_scope: BandScope::default(),
            cold_cpu_guard: true,
            older_score: OLDER_SCORE,
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
    /// Each node of the snapshot that one of the scored history entries (the first
    /// `scores.len()`, or all with `olderScore`) names (by name or address), with the
    /// first such entry's index; sorted by node.
    positions: Vec<(NodeIdx, usize)>,
    /// The headroom band, when it applies.
    band: Option<Band>,
}

impl Cycle {
    /// The history index of node `idx`.
    #[inline]
    fn position(&self, idx: NodeIdx) -> Option<usize> {
        let i = self
            .positions
            .binary_search_by_key(&idx, |(n, _)| *n)
            .ok()?;
        Some(self.positions[i].1)
    }
}

/// The band of one cycle, computed once in PreScore so that Score only looks nodes up.
struct Band {
    /// The free memory fraction a node needs for its history score (the median feasible
    /// node's minus `headroomBand`), computed only for `/explain`'s words.
    floor: Option<f64>,
    /// The history nodes the band judges that lose their score, by node index, with why.
    outside: HashMap<NodeIdx, Below>,
    /// Under `sameBuilder`, the history nodes the band would judge that keep their score (no
    /// other pod of the builder runs there), with why: for `/explain`.
    spared: HashMap<NodeIdx, Below>,
}

/// Why the band judges a warm node.
#[derive(Debug, Clone, Copy)]
enum Below {
    /// Its free memory fraction after placement is under the floor.
    Memory(f64),
    /// `coldCpuGuard`: the pod, predicted by its requests alone, would push the node's real
    /// CPU past capacity. CPU in use, the pod's, and capacity, cores.
    ColdCpu { used: f64, pod: f64, total: f64 },
}

impl Below {
    /// `/explain`'s words; `floor` (when computed) and `band` in the memory case.
    fn words(self, floor: Option<f64>, band: f64) -> String {
        match self {
            Below::Memory(free) => match floor {
                Some(floor) => format!(
                    "{:.0} % memory free after placement, below the band's {:.0} % ({:.0} points under the median feasible node)",
                    free * 100.0,
                    floor * 100.0,
                    band
                ),
                None => format!(
                    "{:.0} % memory free after placement, more than {band:.0} points under the median feasible node",
                    free * 100.0,
                ),
            },
            Below::ColdCpu { used, pod, total } => format!(
                "real CPU {used:.2} used + {pod:.2} pod of {total:.2} cores after placement, past capacity, for a pod predicted by its requests alone (coldCpuGuard)"
            ),
        }
    }
}

/// The History plugin.
#[derive(Debug)]
pub struct History {
    args: HistoryArgs,
    identity: crate::identity::IdentityConfig,
    policy: Arc<UsagePolicy>,
    /// The risk target's normal quantile under `usage.memoryRiskPercent` (free memory is
    /// judged at it), computed once.
    risk_z: Option<f64>,
}

impl History {
    /// Creates the plugin; scores must be within 0..=100.
    pub fn new(args: HistoryArgs, deps: &PluginDeps) -> Result<Self, field::Error> {
        if let Some(i) = args.scores.iter().position(|s| !(0..=100).contains(s)) {
            return Err(super::registry::not_in(
                field::Path::new("scores").index(i),
                args.scores[i],
                "0..=100",
            ));
        }
        if !(0..=100).contains(&args.older_score) {
            return Err(super::registry::not_in(
                field::Path::new("olderScore"),
                args.older_score,
                "0..=100",
            ));
        }
        if !(0.0..=100.0).contains(&args.headroom_band) {
            return Err(super::registry::not_in(
                field::Path::new("headroomBand"),
                args.headroom_band,
                "0..=100",
            ));
        }
        Ok(History {
            args,
            identity: deps.identity.clone(),
            policy: deps.policy.clone(),
            risk_z: deps.policy.memory_risk_z(),
        })
    }

    /// Registers its extension points: PreScore, Score, and with the warm wait on
    /// (`usage.warmWait.enabled`) Permit, which holds a returning build off a cold node
    /// (its events are those that may end such a hold).
    pub fn register(self) -> Registered {
        let warm_wait = self.policy.warm_wait.enabled;
        let me = Arc::new(self);
        Registered {
            pre_score: Some(me.clone()),
            score: Some(me.clone()),
            permit: warm_wait.then_some(me as Arc<dyn PermitPlugin>),
            ..Registered::new(NAME)
        }
    }

    /// Whether every history entry scores (`olderScore` past the listed `scores`).
    fn scores_every_entry(&self) -> bool {
        self.args.older_score > 0
    }

    /// How many history entries score: those `scores` lists, or all with `olderScore`.
    fn depth(&self) -> usize {
        if self.scores_every_entry() {
            usize::MAX
        } else {
            self.args.scores.len()
        }
    }

    /// The score of history index `i`.
    fn score_at(&self, i: usize) -> i64 {
        self.args
            .scores
            .get(i)
            .copied()
            .unwrap_or(self.args.older_score)
    }

    /// Where the history entries are in the snapshot ([`Cycle::positions`]).
    fn positions(&self, snapshot: &Snapshot, nodes: &[String]) -> Vec<(NodeIdx, usize)> {
        positions_in(snapshot, nodes, self.depth())
    }
}

/// Where the first `depth` history entries are in the snapshot: each node once, with its
/// first entry's index, sorted by node.
fn positions_in(snapshot: &Snapshot, nodes: &[String], depth: usize) -> Vec<(NodeIdx, usize)> {
    let mut out: Vec<(NodeIdx, usize)> = Vec::new();
    for (i, h) in nodes.iter().take(depth).enumerate() {
        let named = snapshot.index_of(h).into_iter();
        out.extend(
            named
                .chain(snapshot.nodes_with_address(h).iter().copied())
                .map(|idx| (idx, i)),
        );
    }
    // Each node once, at its first entry's index; sorting rather than a search per
    // entry, since with `olderScore` an annotation may list thousands of entries.
    out.sort_unstable();
    out.dedup_by_key(|(idx, _)| *idx);
    out
}

impl History {
    /// The cycle's band: the median feasible node's free memory fraction after placement
    /// minus the band, and the history nodes below it; `None` when no feasible node has
    /// fresh usage (requests alone cannot tell hot from cold). Memory: memory is what cannot
    /// be taken back from a running build (CPU contention slows it, memory pressure kills
    /// it). CPU only under `coldCpuGuard`, for a pod predicted by its requests alone, where
    /// busy CPU is the sign of runs whose memory no sample shows yet. The median, not the
    /// emptiest node: the band guards the hot tail, and a reference that one idle node sets
    /// would turn history off whenever a node is empty.
    fn band(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: &[NodeIdx],
        positions: &[(NodeIdx, usize)],
    ) -> Option<Band> {
        let u = pod_usage(state, pod, snapshot, &self.policy, &self.identity);
        let table = snapshot.table();
        let cold = self.args.cold_cpu_guard && matches!(u.pod.prediction.source, Source::Requests);
        let column = free_after_column(state, &u, pod, table, feasible, &self.policy, self.risk_z);
        let mut frees = Vec::with_capacity(feasible.len());
        let mut warm = Vec::new();
        let mut any_fresh = false;
        for &i in feasible {
            let Some(f) = column.get(i) else { continue };
            any_fresh |= f.fresh;
            frees.push(f.memory);
            if positions.binary_search_by_key(&i, |(n, _)| *n).is_ok() {
                // The few warm nodes: their CPU in full, for the cold CPU guard.
                let cpu = (cold && f.fresh)
                    .then(|| FreeAfter::at(&u, pod, table, i, &self.policy, self.risk_z))
                    .filter(|a| a.cpu_used + a.cpu_pod > a.cpu_total)
                    .map(|a| Below::ColdCpu {
                        used: a.cpu_used,
                        pod: a.cpu_pod,
                        total: a.cpu_total,
                    });
                warm.push((i, f.memory, cpu));
            }
        }
        if !any_fresh || frees.is_empty() {
            return None;
        }
        let band = self.args.headroom_band / 100.0;
        // A hair of tolerance: floating-point noise must not flip a tie.
        let under = |free: f64, median: f64| free < median - band - 1e-9;
        // The floor's value only for `/explain`'s words: where each warm node stands
        // against the median is counted, not selected (a select costs ~70 instructions a
        // feasible node, a count ~3 per warm node, and there are at most `scores.len()`).
        let floor = state.explain.then(|| {
            let mid = frees.len() / 2;
            *frees.select_nth_unstable_by(mid, f64::total_cmp).1 - band
        });
        let (outside, spared) = warm
            .into_iter()
            .filter_map(|(i, free, cpu)| {
                let below =
                    median_satisfies(&frees, |m| under(free, m)).then_some(Below::Memory(free));
                Some((i, below.or(cpu)?))
            })
            .partition(|(i, _)| match self.args.headroom_band_scope {
                BandScope::EveryWarmNode => true,
                BandScope::SameBuilder => runs_sibling(
                    snapshot.node(*i),
                    pod,
                    u.pod.builder.as_str(),
                    &self.identity,
                ),
            });
        Some(Band {
            floor,
            outside,
            spared,
        })
    }
}

/// Whether the median of `values` (the element at `len / 2` in `f64::total_cmp`'s order)
/// satisfies `above`, a predicate that holds on an up-set of that order (where it holds
/// for `x`, it holds for every non-NaN `y ≥ x`), without selecting it: the values it
/// holds for are then a suffix of the sorted values, and the median is in that suffix when
/// it is at least `len − len / 2` long. A positive NaN (sorted above every number) is left
/// out of the count, as `above` is false for it; the median is then the `len / 2`-th of
/// the rest, unless it is itself a NaN.
fn median_satisfies(values: &[f64], above: impl Fn(f64) -> bool) -> bool {
    let mid = values.len() / 2;
    let (mut holds, mut nan_above) = (0usize, 0usize);
    for &v in values {
        holds += usize::from(above(v));
        nan_above += usize::from(v.is_nan() && v.is_sign_positive());
    }
    let numbers = values.len() - nan_above;
    mid < numbers && holds >= numbers - mid
}

/// Whether `node` runs another pod (bound or assumed) of `builder`, the pod's builder.
/// Only the few warm nodes below the band are asked, so the identities are not cached.
fn runs_sibling(
    node: &NodeInfo,
    pod: &PodInfo,
    builder: &str,
    identity: &crate::identity::IdentityConfig,
) -> bool {
    node.pods.iter().any(|p| {
        p.uid != pod.uid
            && crate::identity::builder_identity(&p.pod.metadata, identity).as_str() == builder
    })
}

impl History {
    /// The score of node `idx`.
    #[inline]
    fn score_of(&self, c: &Cycle, idx: NodeIdx) -> i64 {
        let Some(i) = c.position(idx) else {
            return 0;
        };
        if c.band
            .as_ref()
            .is_some_and(|b| b.outside.contains_key(&idx))
        {
            return 0;
        }
        self.score_at(i)
    }
}

impl Plugin for History {
    fn name(&self) -> &'static str {
        NAME
    }

    /// The events that may end a warm wait (History serves no Filter: only its Permit
    /// keeps pods from nodes).
    fn events_to_register(&self) -> ClusterEvents {
        crate::usage::warm::RETRY_ON
    }
}

/// The warm wait (`usage.warmWait`, [`crate::usage::warm`]): a returning builder whose
/// cycle chose a node none of its warm nodes is waits for one, when that is expected to
/// cost less than a cold cache and stays within the queue's tail. The hold is written to
/// the cycle state for the decision record; the timeout is what is left of the tail.
impl PermitPlugin for History {
    fn permit(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        node: &str,
    ) -> (Status, std::time::Duration) {
        let allow = (Status::success(), std::time::Duration::ZERO);
        // Cheap checks first: outside the loop (no tail), past the tail, or under the
        // usage fallback (which keeps History out), nothing is held.
        let Some(wait) = state.read::<crate::usage::Wait>() else {
            return allow;
        };
        if wait.fallback || wait.waited >= wait.tail {
            return allow;
        }
        let Some(chosen) = snapshot.index_of(node) else {
            return allow;
        };
        let wait = wait.clone();
        if state.scoring_skipped() {
            // A single feasible node skips scoring, as upstream's does; History's own
            // PreScore then finds the warm nodes a scored cycle would (its depth, its
            // band's inputs), rather than a second reading of the history that could
            // disagree with it.
            self.pre_score(state, pod, snapshot, &[chosen]);
        }
        let warm = warm_nodes(state);
        let Some(hold) =
            crate::usage::warm::judge(snapshot, pod, &warm, chosen, &wait, &self.identity, NAME)
        else {
            return allow;
        };
        let timeout = wait.tail.saturating_sub(wait.waited);
        state.write(hold);
        (Status::wait(crate::usage::warm::HELD_MESSAGE), timeout)
    }
}

/// The nodes of the snapshot that the history entries History scores name (the pod's
/// warm caches), from the cycle state its PreScore left; for the warm wait at Permit
/// ([`crate::usage::warm`]). Empty when PreScore found no history or did not run (Permit
/// runs it for a cycle whose single feasible node skipped scoring).
pub fn warm_nodes(state: &CycleState) -> Vec<NodeIdx> {
    state
        .read::<Cycle>()
        .map(|c| c.positions.iter().map(|(n, _)| *n).collect())
        .unwrap_or_default()
}

/// The pod's history: the bk-ci annotation when present, readable and not empty, else
/// the builder's own ([`history_of_builder`]); with why the annotation was ignored when
/// it could not be read.
fn history_of(
    pod: &PodInfo,
    snapshot: &Snapshot,
    identity: &crate::identity::IdentityConfig,
) -> (Option<(Vec<String>, From)>, Option<String>) {
    let annotated = pod
        .pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(HISTORY_ANNOTATION));
    let mut ignored = None;
    if let Some(text) = annotated {
        match parse_history(text) {
            Ok(nodes) if !nodes.is_empty() => return (Some((nodes, From::Annotation)), None),
            Ok(_) => {}
            Err(e) => ignored = Some(e),
        }
    }
    (history_of_builder(pod, snapshot, identity), ignored)
}

/// headroom's own placement history of the pod's builder: its placements since the last
/// usage refresh, then the store's.
fn history_of_builder(
    pod: &PodInfo,
    snapshot: &Snapshot,
    identity: &crate::identity::IdentityConfig,
) -> Option<(Vec<String>, From)> {
    let builder = crate::identity::builder_identity(&pod.pod.metadata, identity);
    let usage = snapshot.usage();
    let mut nodes: Vec<String> = usage
        .history
        .get(builder.as_str())
        .map(|h| h.iter().cloned().collect())
        .unwrap_or_default();
    for n in usage
        .view
        .placements
        .get(builder.as_str())
        .into_iter()
        .flatten()
    {
        if !nodes.contains(n) {
            nodes.push(n.clone());
        }
    }
    (!nodes.is_empty()).then_some((nodes, From::Scheduler))
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
        feasible: &[NodeIdx],
    ) -> Status {
        // The usage fallback sends a pod that waited too long to the least-hot node; a warm
        // cache must not pull it to a hotter one.
        if crate::usage::fallback_active(state) {
            return Status::skip();
        }
        let (found, ignored) = history_of(pod, snapshot, &self.identity);
        if let Some(e) = ignored {
            state.note(format!("ignored {HISTORY_ANNOTATION}: {e}"));
        }
        let cycle = found.map(|(nodes, from)| Cycle {
            nodes,
            from,
            positions: Vec::new(),
            band: None,
        });
        match cycle {
            Some(mut c) => {
                c.positions = self.positions(snapshot, &c.nodes);
                if self.args.headroom_band < 100.0 {
                    c.band = self.band(state, pod, snapshot, feasible, &c.positions);
                }
                state.write(c);
                Status::success()
            }
            None => Status::skip(),
        }
    }
}

impl ScorePlugin for History {
    fn normalizes(&self) -> bool {
        // No NormalizeScore: the raw scores are the normalised ones.
        false
    }

    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let c = state.written_by::<Cycle>(NAME, WrittenIn::PreScore)?;
        Ok(self.score_of(c, node.idx))
    }

    fn score_batch(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
        nodes: &[NodeIdx],
        scores: &mut Vec<i64>,
    ) -> Result<(), (usize, Status)> {
        state.score_each::<Cycle>(NAME, nodes, scores, |c, idx| self.score_of(c, idx))
    }

    fn explain_score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let c = state.read::<Cycle>()?;
        let from = match c.from {
            From::Annotation => "from the builder-history-nodes annotation",
            From::Scheduler => "from headroom's placement history",
        };
        Some(match c.position(node.idx) {
            Some(i) => self.explain_warm(c, node.idx, i, from),
            None if self.scores_every_entry() => {
                format!("not in the builder's history {from}")
            }
            None => format!(
                "not in the builder's last {} nodes {from}",
                self.args.scores.len()
            ),
        })
    }
}

impl History {
    /// `/explain`'s words for a node at history index `i`: its score, and the band's
    /// verdict when the band judges it (memory below the floor, or `coldCpuGuard`).
    fn explain_warm(&self, c: &Cycle, idx: NodeIdx, i: usize, from: &str) -> String {
        let Some(b) = c.band.as_ref() else {
            return format!("history index {i} {from} → {}", self.score_at(i));
        };
        let below = |why: Below| why.words(b.floor, self.args.headroom_band);
        if let Some(&why) = b.outside.get(&idx) {
            let scope = match self.args.headroom_band_scope {
                BandScope::SameBuilder => ", with another run of this builder on it",
                BandScope::EveryWarmNode => "",
            };
            // "but only 40 % memory free …", "but real CPU … past capacity …".
            let only = if matches!(why, Below::Memory(_)) {
                "only "
            } else {
                ""
            };
            return format!(
                "history index {i} {from}, but {only}{}{scope} → 0",
                below(why)
            );
        }
        if let Some(&why) = b.spared.get(&idx) {
            return format!(
                "history index {i} {from} → {} ({}, but no other run of this builder is on it)",
                self.score_at(i),
                below(why)
            );
        }
        format!("history index {i} {from} → {}", self.score_at(i))
    }
}

impl super::registry::PluginArgs for HistoryArgs {
    /// Scores and `headroomBand` within 0..=100: the constructor's checks.
    fn validate(&self, path: &crate::field::Path) -> crate::field::ErrorList {
        super::registry::constructed(
            History::new(self.clone(), &super::PluginDeps::default()),
            path,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::*;
    use rand::SeedableRng;
    use serde_json::json;

    /// The count gives what selecting the median and comparing gives, for the band's
    /// predicate, on values with ties, signed zeros, infinities and NaNs of both signs.
    #[test]
    fn the_median_counted_agrees_with_the_median_selected() {
        use rand::Rng;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let specials = [
            0.0,
            -0.0,
            1.0,
            0.5,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
        ];
        for round in 0..4000 {
            let len = rng.random_range(1..40);
            let values: Vec<f64> = (0..len)
                .map(|_| match rng.random_range(0..10) {
                    0 if round % 3 == 0 => specials[rng.random_range(0..specials.len())],
                    1..=3 => f64::from(rng.random_range(0..5u8)) / 4.0,
                    _ => rng.random::<f64>(),
                })
                .collect();
            let band = f64::from(rng.random_range(0..30u8)) / 100.0;
            let free = match rng.random_range(0..8) {
                0 => specials[rng.random_range(0..specials.len())],
                _ => rng.random::<f64>(),
            };
            let under = |m: f64| free < m - band - 1e-9;
            let mut sorted = values.clone();
            let median = *sorted.select_nth_unstable_by(len / 2, f64::total_cmp).1;
            assert_eq!(
                median_satisfies(&values, under),
                under(median),
                "values {values:?}, free {free}, band {band}"
            );
        }
    }

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

    /// Seed 000's plugin, as `olderScore: 0` gives it.
    #[test]
    fn seed_000_scores_30_20_10() {
        let seed = || {
            let args = HistoryArgs {
                scores: SEED_SCORES.to_vec(),
                older_score: 0,
                ..HistoryArgs::default()
            };
            History::new(args, &PluginDeps::default())
                .unwrap()
                .register()
        };
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
            let got = score_all(seed(), &nodes(), &p).unwrap();
            let scores: Vec<i64> = got.iter().map(|(_, s)| *s).collect();
            assert_eq!(scores, want, "{annotation}");
        }
    }

    /// `olderScore` gives every history node past `scores` its score, and the explanation
    /// says so; out of range it is refused naming the field.
    #[test]
    fn older_history_nodes_score_older_score() {
        let args = HistoryArgs {
            older_score: 5,
            ..HistoryArgs::default()
        };
        let older = || {
            History::new(args.clone(), &PluginDeps::default())
                .unwrap()
                .register()
        };
        let annotated = |list: &str| {
            info(pod(
                "b",
                json!({"metadata": {"annotations": {HISTORY_ANNOTATION: list}}}),
            ))
        };
        let scores = |plugin: Registered, p: &PodInfo| -> Vec<i64> {
            let got = score_all(plugin, &nodes(), p).unwrap();
            got.iter().map(|(_, s)| *s).collect()
        };
        let p = annotated(r#"["n2","n4","n1"]"#);
        let short = scores(older(), &p);
        assert_eq!(short, [40, 60, 0, 50], "a node not in the history scores 0");
        let p = annotated(r#"["n2","n4","n1","n3"]"#);
        assert_eq!(scores(older(), &p), [40, 60, 5, 50]);
        // By default an older node scores as the last listed one.
        let by_default = scores(plugin(), &p);
        assert_eq!(by_default, [40, 60, 40, 50]);
        let fw = crate::framework::Framework::new("t", vec![older()], &[]);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let (d, _) = fw.schedule(&p, &nodes(), &mut rng, true);
        let n3 = d.scores[0].details.as_ref().unwrap()[2].clone().unwrap();
        assert!(
            n3.starts_with("history index 3 from the builder-history-nodes annotation → 5"),
            "{n3}"
        );
        let err = History::new(
            HistoryArgs {
                older_score: 101,
                ..HistoryArgs::default()
            },
            &PluginDeps::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("olderScore"), "{err}");
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
        let mut view = crate::view::UsageView::default();
        view.placements
            .insert("builder-7".into(), vec!["n4".into(), "n2".into()]);
        snap.usage_mut().view = Arc::new(view);
        let got = score_all(plugin(), &snap, &p).unwrap();
        let scores: Vec<i64> = got.iter().map(|(_, s)| *s).collect();
        assert_eq!(scores, [0, 50, 0, 60]);
        let bad = |scores: Vec<i64>, headroom_band: f64| {
            History::new(
                HistoryArgs {
                    scores,
                    headroom_band,
                    ..HistoryArgs::default()
                },
                &PluginDeps::default(),
            )
            .is_err()
        };
        assert!(bad(vec![101], BAND));
        assert!(bad(vec![30], -1.0));
        assert!(bad(vec![30], 100.5));
    }

    /// The band tests' 8 GiB nodes in use: with a pod predicted at 0.8 GiB (10 %), memory
    /// free after placement is n1 0 %, n2 40 %, n3 65 %, n4 90 %; the median feasible node
    /// (upper middle) 65 %.
    fn band_usage() -> Vec<crate::view::NodeUsage> {
        vec![
            usage("n1", 1.0, 7.2 * GI, 5, None),
            usage("n2", 1.0, 4.0 * GI, 5, None),
            usage("n3", 1.0, 2.0 * GI, 5, None),
            usage("n4", 0.0, 0.0, 5, None),
        ]
    }

    #[test]
    fn band_keeps_warm_nodes_in_the_hot_tail_out() {
        // The profile predicts 0.8 GiB: free memory after placement as `band_usage` says.
        let snap = with_usage(
            nodes(),
            band_usage(),
            vec![profile("default/Pod/b", 0.1, 0.8 * GI)],
        );
        let p = info(pod(
            "b",
            json!({"metadata": {"annotations": {HISTORY_ANNOTATION: r#"["n1","n2","n3"]"#}}}),
        ));
        let cases = [
            // band → floor: 100 off; 30 → 35 %; 15 → 50 %; 0 → 65 %.
            (100.0, [60, 50, 40, 0]),
            (30.0, [0, 50, 40, 0]),
            (15.0, [0, 0, 40, 0]),
            (0.0, [0, 0, 40, 0]),
        ];
        for (band, want) in cases {
            let plugin = History::new(
                HistoryArgs {
                    headroom_band: band,
                    headroom_band_scope: BandScope::EveryWarmNode,
                    ..Default::default()
                },
                &PluginDeps::default(),
            )
            .unwrap()
            .register();
            let got = score_all(plugin, &snap, &p).unwrap();
            let scores: Vec<i64> = got.iter().map(|(_, s)| *s).collect();
            assert_eq!(scores, want, "band {band}");
        }
        // Without fresh usage the band cannot judge: the plain scores.
        assert_eq!(
            score_all(plugin(), &nodes(), &p)
                .unwrap()
                .iter()
                .map(|(_, s)| *s)
                .collect::<Vec<_>>(),
            [60, 50, 40, 0]
        );
        // The record says why a warm node got nothing.
        let every = History::new(
            HistoryArgs {
                headroom_band_scope: BandScope::EveryWarmNode,
                ..Default::default()
            },
            &PluginDeps::default(),
        )
        .unwrap()
        .register();
        let fw = crate::framework::Framework::new("t", vec![every], &[]);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let (d, _) = fw.schedule(&p, &snap, &mut rng, true);
        let n1 = d.scores[0].details.as_ref().unwrap()[0].clone().unwrap();
        assert!(
            n1.contains("but only 0 % memory free after placement"),
            "{n1}"
        );
    }

    /// `coldCpuGuard`: nodes of 4 CPU and 8 GiB with 2 GiB in use each, n1 and n2 at 3 CPU,
    /// n3 and n4 at 0.5; the builder ran on n1 and n3. A pod of 2 CPU with no profile (its
    /// requests are all headroom knows) would take n1 past capacity, so n1 scores 0 and the
    /// record says why; n3 keeps its 50. With a profile of its own, or the guard off, n1
    /// keeps its 60 (memory alike on every node: the memory band takes nothing).
    #[test]
    fn cold_cpu_guard_takes_the_score_of_a_warm_node_a_cold_pod_would_overcommit() {
        let usage = vec![
            usage("n1", 3.0, 2.0 * GI, 5, None),
            usage("n2", 3.0, 2.0 * GI, 5, None),
            usage("n3", 0.5, 2.0 * GI, 5, None),
            usage("n4", 0.5, 2.0 * GI, 5, None),
        ];
        let p = info(pod(
            "b",
            json!({"metadata": {"annotations": {HISTORY_ANNOTATION: r#"["n1","n3"]"#}},
                   "spec": {"containers": [{"name": "c", "image": "x",
                       "resources": {"requests": {"cpu": "2", "memory": "512Mi"}}}]}}),
        ));
        let guard = |on: bool| {
            History::new(
                HistoryArgs {
                    cold_cpu_guard: on,
                    ..Default::default()
                },
                &PluginDeps::default(),
            )
            .unwrap()
            .register()
        };
        let scores = |reg, snap: &Snapshot| -> Vec<i64> {
            score_all(reg, snap, &p)
                .unwrap()
                .iter()
                .map(|(_, s)| *s)
                .collect()
        };
        let cold = with_usage(nodes(), usage.clone(), vec![]);
        assert_eq!(scores(guard(true), &cold), [0, 0, 50, 0]);
        assert_eq!(scores(guard(false), &cold), [60, 0, 50, 0]);
        // A profile predicts the pod (at 1 CPU): the guard does not judge it.
        let known = with_usage(
            nodes(),
            usage,
            vec![profile("default/Pod/b", 1.0, 0.5 * GI)],
        );
        assert_eq!(scores(guard(true), &known), [60, 0, 50, 0]);
        let fw = crate::framework::Framework::new("t", vec![guard(true)], &[]);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let (d, _) = fw.schedule(&p, &cold, &mut rng, true);
        let n1 = d.scores[0].details.as_ref().unwrap()[0].clone().unwrap();
        assert!(
            n1.contains("real CPU 3.00 used + 2.00 pod of 4.00 cores")
                && n1.contains("coldCpuGuard")
                && n1.ends_with("→ 0"),
            "{n1}"
        );
        // Configuration: on by default, `false` turns it off.
        assert!(HistoryArgs::default().cold_cpu_guard);
        let args: HistoryArgs = serde_json::from_value(json!({"coldCpuGuard": false})).unwrap();
        assert!(!args.cold_cpu_guard);
    }

    /// With `sameBuilder` the band judges only a warm node that already runs another pod of
    /// the builder: the same nodes and usage as above, with a run of the builder on n1 and
    /// a pod of another builder on n2. n1 (0 % free) loses its score; n2 (40 %, below the
    /// band's 55 %) keeps it, and `/explain` says why for both; by default both lose it.
    #[test]
    fn band_judges_warm_nodes_that_run_the_same_builder() {
        let run = |name: &str, builder: &str, node: &str| {
            pod(
                name,
                json!({"metadata": {"annotations": {"headroom.io/builder": builder}},
                       "spec": {"nodeName": node}}),
            )
        };
        let snap = with_usage(
            Snapshot::build(
                nodes().nodes().iter().map(|n| (*n.node).clone()),
                [run("b-1", "b", "n1"), run("c-1", "c", "n2")],
            ),
            band_usage(),
            vec![profile("b", 0.1, 0.8 * GI)],
        );
        let p = info(pod(
            "b-2",
            json!({"metadata": {"annotations": {
                HISTORY_ANNOTATION: r#"["n1","n2","n3"]"#,
                "headroom.io/builder": "b"}}}),
        ));
        let same = || {
            History::new(
                HistoryArgs {
                    headroom_band_scope: BandScope::SameBuilder,
                    ..Default::default()
                },
                &PluginDeps::default(),
            )
            .unwrap()
            .register()
        };
        let scores = |reg| -> Vec<i64> {
            score_all(reg, &snap, &p)
                .unwrap()
                .iter()
                .map(|(_, s)| *s)
                .collect()
        };
        assert_eq!(scores(same()), [0, 50, 40, 0]);
        assert_eq!(scores(plugin()), [0, 0, 40, 0]);
        let fw = crate::framework::Framework::new("t", vec![same()], &[]);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let (d, _) = fw.schedule(&p, &snap, &mut rng, true);
        let details = d.scores[0].details.as_ref().unwrap();
        let n1 = details[0].clone().unwrap();
        assert!(
            n1.contains("with another run of this builder on it → 0"),
            "{n1}"
        );
        let n2 = details[1].clone().unwrap();
        assert!(
            n2.contains("→ 50 (40 % memory free after placement, below the band's 55 %")
                && n2.contains("no other run of this builder is on it"),
            "{n2}"
        );
        // The scope is configuration, and a bad one is refused naming the value.
        let args: HistoryArgs =
            serde_json::from_value(json!({"headroomBandScope": "sameBuilder"})).unwrap();
        assert_eq!(args.headroom_band_scope, BandScope::SameBuilder);
        let err = serde_json::from_value::<HistoryArgs>(json!({"headroomBandScope": "all"}))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sameBuilder") && err.contains("everyWarmNode"),
            "{err}"
        );
    }
}

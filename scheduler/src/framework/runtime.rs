//! The framework runtime: one profile's plugins in order, run over a snapshot for one pod.
//!
//! A cycle runs PreFilter once, then Filter and Score over chunks of the node list. With
//! parallelism above one, the chunks run on a small persistent thread pool (rayon), the
//! calling thread taking the first; the results are merged in chunk order, so the feasible
//! set, every status, every score and the chosen node are those of a serial run (a cycle
//! whose plugins report an error is re-run serially so that the same error is reported).
//! Normalisation, weights and host selection run once over the merged columns.
//!
//! Every node is evaluated and scored by default. `percentageOfNodesToScore` below 100
//! turns on upstream's sampling: nodes are scanned from where the previous cycle stopped
//! (round robin) until `numFeasibleNodesToFind` feasible ones are found; the rest are not
//! evaluated in that cycle.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use smallvec::SmallVec;

use super::decision::{Decision, Outcome, ScoreColumn};
use super::{
    Code, CycleState, FilterPlugin, MAX_NODE_SCORE, MIN_NODE_SCORE, NodeBatch, NodeNames,
    PostFilterArgs, Registered, ScorePlugin, Status,
};
use crate::snapshot::table::flag;
use crate::snapshot::{NodeIdx, PodInfo, Snapshot};

/// A score plugin's weight in a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginWeight {
    /// Plugin name.
    pub name: &'static str,
    /// Weight (≥ 1).
    pub weight: i64,
}

/// Upstream's `minFeasibleNodesToFind`: below this many nodes, all are evaluated.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// Upstream's `minFeasibleNodesPercentageToFind`: the adaptive percentage's floor.
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: usize = 5;
/// Chunks are at least this many nodes: below, a thread hand-off costs more than it saves.
/// Measured (benches/README.md, "Two threads"): on a 2-vCPU machine two threads were slower
/// than one up to ~15,000 nodes (0.78x at 5,000), and on the kit `serve` bound 478 pods/s
/// serially against 395 with two threads at 5,000 nodes, where the API server and etcd
/// share the cores. So a cycle splits only once every thread gets 7,500 nodes.
pub const DEFAULT_MIN_CHUNK: usize = 7_500;
/// Filters run plugin by plugin over blocks of this many nodes. The decision lists rejected
/// nodes block by block, and within a block filter by filter; chunks handed to threads are
/// whole blocks, so that order does not depend on the number of threads.
pub const FILTER_BLOCK: usize = 512;
/// One cycle in this many times each plugin for upstream's
/// `scheduler_plugin_execution_duration_seconds`: upstream's `pluginMetricsSamplePercent`
/// (10 %), drawn by count rather than at random so that no decision's random draws change.
pub const PLUGIN_METRICS_SAMPLE_EVERY: usize = 10;
/// With sampling, nodes are filtered in rounds of at least this many blocks.
const SAMPLING_ROUND_BLOCKS: usize = 4;

/// The round-robin start of the next sampled scan (upstream's `nextStartNodeIndex`).
#[derive(Debug, Default)]
struct NextStart(AtomicUsize);

impl Clone for NextStart {
    fn clone(&self) -> Self {
        NextStart(AtomicUsize::new(self.0.load(Ordering::Relaxed)))
    }
}

/// The plugins of one profile, ready to run.
#[derive(Debug, Clone)]
pub struct Framework {
    profile: String,
    plugins: Vec<Registered>,
    weights: Vec<i64>,
    /// Threads a cycle may use (1: serial).
    parallelism: usize,
    /// The pool of `parallelism - 1` workers (the calling thread is the last one).
    pool: Option<Arc<rayon::ThreadPool>>,
    /// Smallest chunk handed to a thread.
    min_chunk: usize,
    /// Nodes per filter block ([`FILTER_BLOCK`]).
    block: usize,
    /// `percentageOfNodesToScore` (0: adaptive, 100: every node).
    percentage: u32,
    next_start: NextStart,
    /// Cycles run, for [`PLUGIN_METRICS_SAMPLE_EVERY`].
    cycles: NextStart,
    /// How long a pod waits before the second pass relaxes the filters that declare
    /// themselves relaxable ([`Framework::schedule_passes`]); `None`: no second pass.
    pub(super) second_pass_after: Option<Duration>,
}

/// Reason for a node whose own status could not be read.
const NODE_UNREADABLE: &str = "node(s) had an unreadable status";

/// The process-wide pools, one per size, shared by every framework (profiles, extender).
static POOLS: Mutex<Vec<(usize, Arc<rayon::ThreadPool>)>> = Mutex::new(Vec::new());

/// A pool of `workers` threads, built on first use. `None` when it cannot be built (the
/// cycle then runs serially).
fn pool(workers: usize) -> Option<Arc<rayon::ThreadPool>> {
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = pools.iter().find(|(w, _)| *w == workers) {
        return Some(p.clone());
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .thread_name(|i| format!("headroom-cycle-{i}"))
        .build()
        .map_err(|e| tracing::warn!(error = %e, "cannot start the scheduling thread pool"))
        .ok()?;
    let p = Arc::new(p);
    pools.push((workers, p.clone()));
    Some(p)
}

/// The threads a cycle uses by default: the machine's cores, at most 16 (upstream's
/// `parallelism`).
pub fn default_parallelism() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(16)
}

/// The status of nodes a PreFilter restricted away (upstream's message, plugins sorted).
fn restricted_away(mut restricting: Vec<&'static str>) -> Status {
    restricting.sort();
    Status::unresolvable(format!(
        "node(s) didn't satisfy plugin(s) [{}]",
        restricting.join(" ")
    ))
}

/// What filtering one chunk of nodes found.
struct FilterChunk {
    feasible: Vec<NodeIdx>,
    /// Block by block, within a block filter by filter.
    rejected: Vec<(NodeIdx, Status)>,
    /// The first error: node, plugin, message.
    error: Option<(NodeIdx, &'static str, String)>,
    /// Per filter (by position), in a cycle that records plugin metrics; empty otherwise.
    times: Vec<FilterTime>,
}

/// One Filter plugin's work over part of a cycle (plugin metrics).
#[derive(Debug, Clone, Copy, Default)]
struct FilterTime {
    spent: Duration,
    /// Nodes the plugin examined.
    nodes: u32,
    /// Of which it passed.
    passed: u32,
    /// The code of its last rejection.
    rejected: Option<Code>,
    /// It returned an error.
    error: bool,
}

impl FilterTime {
    fn add(&mut self, other: &FilterTime) {
        self.spent += other.spent;
        self.nodes += other.nodes;
        self.passed += other.passed;
        self.rejected = other.rejected.or(self.rejected);
        self.error |= other.error;
    }

    /// Upstream's status label for the plugin: `Success` if it passed any node, else the
    /// code it rejected with.
    fn code(&self) -> Code {
        if self.error {
            Code::Error
        } else if self.passed > 0 || self.nodes == 0 {
            Code::Success
        } else {
            self.rejected.unwrap_or(Code::Unschedulable)
        }
    }

    /// One call's mean time.
    fn per_node(&self) -> Duration {
        self.spent / self.nodes.max(1)
    }
}

/// A chunk's failure while scoring: node, plugin position, status.
type ScoreError = (NodeIdx, usize, Status);

impl Framework {
    /// Builds a framework from registered plugins (in extension-point order) and the weights
    /// of the score plugins (a score plugin without a weight gets 1). It runs serially and
    /// scores every node until [`Framework::with_parallelism`] and
    /// [`Framework::with_percentage_of_nodes_to_score`] say otherwise.
    pub fn new(profile: &str, plugins: Vec<Registered>, weights: &[PluginWeight]) -> Framework {
        let weights = plugins
            .iter()
            .map(|p| {
                weights
                    .iter()
                    .find(|w| w.name == p.name)
                    .map_or(1, |w| w.weight)
            })
            .collect();
        Framework {
            profile: profile.to_string(),
            plugins,
            weights,
            parallelism: 1,
            pool: None,
            min_chunk: DEFAULT_MIN_CHUNK,
            block: FILTER_BLOCK,
            percentage: 100,
            next_start: NextStart::default(),
            cycles: NextStart::default(),
            second_pass_after: None,
        }
    }

    /// Runs the second pass ([`Framework::schedule_passes`]) for a pod that has waited
    /// `max_wait` (`usage.maxWait`) while only relaxable filters kept it off every node.
    pub fn with_second_pass_after(mut self, max_wait: Duration) -> Framework {
        self.second_pass_after = Some(max_wait);
        self
    }

    /// Lets a cycle spread Filter and Score over `threads` threads (0: the machine's cores,
    /// at most 16; 1: serial). Results do not depend on it.
    pub fn with_parallelism(mut self, threads: usize) -> Framework {
        let threads = if threads == 0 {
            default_parallelism()
        } else {
            threads
        };
        self.pool = (threads > 1).then(|| pool(threads - 1)).flatten();
        self.parallelism = if self.pool.is_some() { threads } else { 1 };
        self
    }

    /// The smallest chunk of nodes handed to one thread (default [`DEFAULT_MIN_CHUNK`]);
    /// tests lower it to exercise the parallel path on small clusters.
    pub fn with_min_chunk(mut self, nodes: usize) -> Framework {
        self.min_chunk = nodes.max(1);
        self
    }

    /// Nodes per filter block (default [`FILTER_BLOCK`]); the order of rejected nodes in
    /// a decision depends on it. Tests lower it to split small clusters.
    pub fn with_filter_block(mut self, nodes: usize) -> Framework {
        self.block = nodes.max(1);
        self
    }

    /// Upstream's `percentageOfNodesToScore`: 100 evaluates every node (headroom's
    /// default), 1..=99 that share of the nodes (at least 100 nodes), 0 upstream's adaptive
    /// share (`50 − nodes/125` %, at least 5 %). Values above 100 count as 100.
    pub fn with_percentage_of_nodes_to_score(mut self, percentage: u32) -> Framework {
        self.percentage = percentage.min(100);
        self
    }

    /// The threads a cycle may use.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// The profile (scheduler) name.
    pub fn profile(&self) -> &str {
        &self.profile
    }

    /// The registered plugins, in order.
    pub fn plugins(&self) -> &[Registered] {
        &self.plugins
    }

    /// Runs PreEnqueue plugins: `None` when the pod may be queued, else the blocking status.
    pub fn pre_enqueue(&self, pod: &PodInfo) -> Option<Status> {
        for p in &self.plugins {
            if let Some(pe) = &p.pre_enqueue {
                let s = pe.pre_enqueue(pod);
                if !s.is_success() {
                    return Some(s.with_plugin(p.name));
                }
            }
        }
        None
    }

    /// Upstream's `numFeasibleNodesToFind` for `nodes` candidate nodes.
    pub fn num_feasible_nodes_to_find(&self, nodes: usize) -> usize {
        if nodes < MIN_FEASIBLE_NODES_TO_FIND || self.percentage >= 100 {
            return nodes;
        }
        let mut percentage = self.percentage as usize;
        if percentage == 0 {
            percentage = 50usize
                .saturating_sub(nodes / 125)
                .max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
        }
        (nodes * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
    }

    /// Runs one scheduling cycle (PreFilter through host selection) and returns the record
    /// together with the cycle state (for Reserve/Permit).
    pub fn schedule<R: Rng + ?Sized>(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        rng: &mut R,
        explain: bool,
    ) -> (Decision, CycleState) {
        self.schedule_in(pod, snapshot, rng, CycleState::new(explain))
    }

    /// [`schedule`](Self::schedule) in a cycle state the caller prepared: what the
    /// scheduler knows about the pod beyond its spec (how long it has waited, whether the
    /// usage fallback applies) is written there before the plugins run.
    pub fn schedule_in<R: Rng + ?Sized>(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        rng: &mut R,
        state: CycleState,
    ) -> (Decision, CycleState) {
        self.finish(self.run_cycle(pod, snapshot, None, rng, state))
    }

    /// [`Framework::schedule`] over only the nodes `nodes` (snapshot indices, any order):
    /// the others are neither filtered nor scored and have no verdict in the record. The
    /// extender evaluates just the nodes kube-scheduler asks about this way; PostFilter
    /// (preemption) does not run: that stays kube-scheduler's.
    pub fn schedule_nodes<R: Rng + ?Sized>(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[NodeIdx],
        rng: &mut R,
        explain: bool,
    ) -> (Decision, CycleState) {
        self.finish(self.run_cycle(pod, snapshot, Some(nodes), rng, CycleState::new(explain)))
    }

    fn finish(&self, (mut d, mut state): (Decision, CycleState)) -> (Decision, CycleState) {
        // Plugins' notes (ignored annotations, stale data) belong to the record whatever
        // the outcome; moved, not copied: the state is done with them.
        let mut notes = std::mem::take(&mut state.notes);
        notes.append(&mut d.notes);
        d.notes = notes;
        (d, state)
    }

    /// The Filter plugins that run for this pod (those whose PreFilter did not skip), in
    /// profile order.
    fn active_filters(
        &self,
        skip_filter: &[bool],
    ) -> SmallVec<[(&'static str, &dyn FilterPlugin); 16]> {
        self.plugins
            .iter()
            .enumerate()
            .filter(|(i, _)| !skip_filter[*i])
            .filter_map(|(_, p)| p.filter.as_deref().map(|f| (p.name, f)))
            .collect()
    }

    /// An empty decision record of this profile for `pod` over `snapshot`.
    fn blank_decision(&self, pod: &PodInfo, snapshot: &Snapshot) -> Decision {
        Decision::new(
            &pod.namespace,
            &pod.name,
            pod.uid.clone(),
            &self.profile,
            snapshot.generation(),
            snapshot.names(),
        )
        .with_name_ranks(snapshot.name_ranks())
    }

    /// Decision record, cycle state, and the early outcomes (unreadable pod, no nodes).
    fn start(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        state: CycleState,
    ) -> (Decision, CycleState) {
        let mut d = self.blank_decision(pod, snapshot);
        if let Some(err) = &pod.error {
            d.outcome = Outcome::Error {
                message: format!(
                    "pod {}/{} cannot be scheduled: {err}",
                    pod.namespace, pod.name
                ),
            };
            d.absent =
                Some(Status::unresolvable("pod has an unreadable spec").with_detail(err.clone()));
        } else if snapshot.is_empty() {
            d.outcome = Outcome::Unschedulable {
                message: "no nodes available to schedule pods".to_string(),
            };
        }
        (d, state)
    }

    /// Runs PreFilter; `Err(())` when the cycle ended there (the outcome is set). On
    /// success, which plugins' Filter to skip and the node restriction, if any.
    #[allow(clippy::type_complexity)]
    fn pre_filter(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        state: &mut CycleState,
        d: &mut Decision,
    ) -> Result<(SmallVec<[bool; 16]>, Option<(NodeNames, Vec<&'static str>)>), ()> {
        let mut skip_filter: SmallVec<[bool; 16]> = SmallVec::from_elem(false, self.plugins.len());
        let mut restrict: Option<NodeNames> = None;
        let mut restricting: Vec<&'static str> = Vec::new();
        for (i, p) in self.plugins.iter().enumerate() {
            let Some(pf) = &p.pre_filter else { continue };
            let started = state.record_plugin_metrics.then(Instant::now);
            let (s, names) = pf.pre_filter(state, pod, snapshot);
            if let Some(started) = started {
                d.time_plugin(p.name, "PreFilter", s.code, started.elapsed());
            }
            match s.code {
                Code::Success => {}
                Code::Skip => {
                    skip_filter[i] = true;
                    d.pre_filter.push(s.with_plugin(p.name));
                    continue;
                }
                Code::Unschedulable | Code::UnschedulableAndUnresolvable => {
                    let s = s.with_plugin(p.name);
                    d.absent = Some(s.clone());
                    d.pre_filter.push(s);
                    d.outcome = Outcome::Unschedulable {
                        message: d.fit_error_message(),
                    };
                    return Err(());
                }
                // Wait is Permit's alone: from PreFilter it is a plugin's bug.
                Code::Error | Code::Wait => {
                    let s = s.with_plugin(p.name);
                    d.outcome = Outcome::Error {
                        message: format!("running PreFilter plugin {:?}: {}", p.name, s.message()),
                    };
                    d.pre_filter.push(s);
                    return Err(());
                }
            }
            if let Some(names) = names {
                restricting.push(p.name);
                restrict = Some(match restrict {
                    None => names,
                    Some(prev) => prev.intersection(&names).cloned().collect(),
                });
            }
        }
        Ok((skip_filter, restrict.map(|r| (r, restricting))))
    }

    fn run_cycle<R: Rng + ?Sized>(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        only: Option<&[NodeIdx]>,
        rng: &mut R,
        state: CycleState,
    ) -> (Decision, CycleState) {
        let explain = state.explain;
        let (mut d, mut state) = self.start(pod, snapshot, state);
        if pod.error.is_some() || snapshot.is_empty() {
            return (d, state);
        }
        state.record_plugin_metrics = self
            .cycles
            .0
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(PLUGIN_METRICS_SAMPLE_EVERY);
        // Wall time of each extension point, for upstream's
        // `scheduler_framework_extension_point_duration_seconds`: observability only, no
        // decision reads it.
        let started = Instant::now();
        let pre_filtered = self.pre_filter(pod, snapshot, &mut state, &mut d);
        let code = match (&pre_filtered, &d.outcome) {
            (Ok(_), _) => Code::Success,
            (Err(_), Outcome::Error { .. }) => Code::Error,
            (Err(_), _) => d.pre_filter.last().map_or(Code::Unschedulable, |s| s.code),
        };
        d.time_extension_point("PreFilter", code, started);
        let Ok((skip_filter, restrict)) = pre_filtered else {
            if only.is_none() && matches!(d.outcome, Outcome::Unschedulable { .. }) {
                // Upstream runs PostFilter after a PreFilter rejection too.
                self.post_filter(pod, snapshot, &state, &mut d, rng);
            }
            return (d, state);
        };

        // Which nodes to evaluate: sorted snapshot indices.
        let mut candidates: Vec<NodeIdx> = match only {
            Some(nodes) => {
                let mut v: Vec<NodeIdx> = nodes
                    .iter()
                    .copied()
                    .filter(|&i| (i as usize) < snapshot.len())
                    .collect();
                v.sort_unstable();
                v.dedup();
                v
            }
            None => (0..snapshot.len() as NodeIdx).collect(),
        };
        if let Some((names, restricting)) = restrict {
            d.absent = Some(restricted_away(restricting));
            let mut allowed: Vec<NodeIdx> =
                names.iter().filter_map(|n| snapshot.index_of(n)).collect();
            allowed.sort_unstable();
            candidates.retain(|i| allowed.binary_search(i).is_ok());
        }

        // Filter.
        let filters = self.active_filters(&skip_filter);
        // Upstream's `evaluateNominatedNode`: a pod nominated by an earlier preemption tries
        // its nominated node first and takes it, unscored, when it fits. (Not for the
        // extender's node subsets: kube-scheduler does that itself.)
        if let Some(idx) = only
            .is_none()
            .then(|| nominated_candidate(pod, snapshot, &candidates))
            .flatten()
        {
            let chunk = filter_chunk(&filters, &state, pod, snapshot, &[idx], 1);
            if chunk.error.is_none()
                && chunk.feasible == [idx]
                && self
                    .nominated_reject(&state, pod, snapshot, &mut None, idx)
                    .is_none()
            {
                d.feasible = chunk.feasible;
                d.place(idx);
                return (d, state);
            }
        }
        if let Err(message) =
            self.find_feasible(&filters, &state, pod, snapshot, &candidates, &mut d, true)
        {
            d.outcome = Outcome::Error { message };
            return (d, state);
        }
        self.reject_for_nominated(&state, pod, snapshot, &mut d);
        if explain {
            self.explain_rejections(&filters, &state, pod, snapshot, &mut d);
        }

        if d.feasible.is_empty() {
            d.outcome = Outcome::Unschedulable {
                message: d.fit_error_message(),
            };
            if only.is_none() {
                // Not for the extender's node subsets: there preemption is kube-scheduler's.
                self.post_filter(pod, snapshot, &state, &mut d, rng);
            }
            return (d, state);
        }
        if d.feasible.len() == 1 {
            // Upstream skips scoring when a single node fits.
            d.place(d.feasible[0]);
            state.skip_scoring();
            return (d, state);
        }

        let started = Instant::now();
        let scored = self.pre_score(pod, snapshot, &mut state, &mut d);
        let code = if scored.is_some() {
            Code::Success
        } else {
            Code::Error
        };
        d.time_extension_point("PreScore", code, started);
        let Some(skip_score) = scored else {
            return (d, state);
        };
        let started = Instant::now();
        let totals = self.score(pod, snapshot, &state, &mut d, &skip_score);
        let code = if totals.is_some() {
            Code::Success
        } else {
            Code::Error
        };
        d.time_extension_point("Score", code, started);
        let Some(totals) = totals else {
            return (d, state);
        };
        let pick = select_host(&totals, rng);
        d.totals = totals;
        d.place(d.feasible[pick]);
        (d, state)
    }

    /// PreScore: every plugin's over the feasible nodes; which Score plugins skip (`None`
    /// after an error, recorded in `d`).
    fn pre_score(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        state: &mut CycleState,
        d: &mut Decision,
    ) -> Option<SmallVec<[bool; 16]>> {
        let mut skip_score: SmallVec<[bool; 16]> = SmallVec::from_elem(false, self.plugins.len());
        for (i, p) in self.plugins.iter().enumerate() {
            let Some(ps) = &p.pre_score else { continue };
            let started = state.record_plugin_metrics.then(Instant::now);
            let s = ps.pre_score(state, pod, snapshot, &d.feasible);
            if let Some(started) = started {
                d.time_plugin(p.name, "PreScore", s.code, started.elapsed());
            }
            match s.code {
                Code::Success => {}
                Code::Skip => skip_score[i] = true,
                _ => {
                    d.outcome = Outcome::Error {
                        message: format!("running PreScore plugin {:?}: {}", p.name, s.message()),
                    };
                    return None;
                }
            }
        }
        Some(skip_score)
    }

    /// Score, each active plugin over each chunk of the feasible nodes, normalised and
    /// weighted into `d.scores`; the totals per feasible node (`None` after an error,
    /// recorded in `d`).
    fn score(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        state: &CycleState,
        d: &mut Decision,
        skip_score: &[bool],
    ) -> Option<Vec<i64>> {
        let explain = state.explain;
        // Score, each active plugin over each chunk of the feasible nodes.
        let active: SmallVec<[(usize, &dyn ScorePlugin); 16]> = self
            .plugins
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let sp = p.score.as_deref()?;
                if skip_score[i] {
                    d.skipped_scores.push(p.name);
                    None
                } else {
                    Some((i, sp))
                }
            })
            .collect();
        let raw = match self.score_all(&active, state, pod, snapshot, &d.feasible, true) {
            Ok((raw, spent)) => {
                // Plugin metrics: each plugin's time per node.
                let nodes = d.feasible.len().max(1) as u32;
                for ((i, _), spent) in active.iter().zip(spent) {
                    d.time_plugin(self.plugins[*i].name, "Score", Code::Success, spent / nodes);
                }
                raw
            }
            Err((idx, i, s)) => {
                d.outcome = Outcome::Error {
                    message: format!(
                        "running Score plugin {:?} on node {:?}: {}",
                        self.plugins[i].name,
                        snapshot.node(idx).name,
                        s.message()
                    ),
                };
                return None;
            }
        };
        #[cfg(debug_assertions)]
        if explain {
            self.check_scores_per_node(&active, state, pod, snapshot, &d.feasible, &raw);
        }

        let n = d.feasible.len();
        let mut totals = vec![0i64; n];
        for ((i, sp), raw) in active.iter().zip(raw) {
            let name = self.plugins[*i].name;
            let weight = self.weights[*i];
            match self.normalize(
                *sp,
                state,
                pod,
                snapshot,
                &d.feasible,
                raw,
                explain,
                weight,
                &mut totals,
            ) {
                Ok(column) => {
                    d.scores.push(ScoreColumn {
                        plugin: name,
                        weight,
                        ..column
                    });
                }
                Err(s) => {
                    d.outcome = Outcome::Error {
                        message: format!("running Score plugin {name:?}: {}", s.message()),
                    };
                    return None;
                }
            }
        }

        Some(totals)
    }

    /// Upstream's `RunPostFilterPlugins`, run when no node fits: the first success ends it
    /// (its nomination goes into the record, the message gets no tail); otherwise the
    /// reasons of every plugin, joined with `, `, become the tail of the FailedScheduling
    /// message (`... preemption: 0/3 nodes are available: ...`). Nothing runs, and nothing
    /// is drawn from `rng`, in a profile without PostFilter plugins.
    fn post_filter<R: Rng + ?Sized>(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        state: &CycleState,
        d: &mut Decision,
        rng: &mut R,
    ) {
        if !self.plugins.iter().any(|p| p.post_filter.is_some()) {
            return;
        }
        d.post_filter_ran = true;
        let started = Instant::now();
        let random = rng.random::<u64>();
        let mut reasons: Vec<String> = Vec::new();
        let mut nomination = None;
        for p in &self.plugins {
            let Some(pf) = &p.post_filter else { continue };
            let plugin_started = state.record_plugin_metrics.then(Instant::now);
            let args = PostFilterArgs {
                framework: self,
                state,
                pod,
                snapshot,
                decision: d,
                random,
            };
            let (result, s) = pf.post_filter(&args);
            if let Some(started) = plugin_started {
                d.time_plugin(p.name, "PostFilter", s.code, started.elapsed());
            }
            if s.is_success() {
                nomination = result;
                reasons.clear();
                break;
            }
            reasons.extend(s.reasons.iter().map(|r| r.to_string()));
            if s.code != Code::Unschedulable {
                // Unresolvable or an error ends the phase (upstream); an error's message
                // is still the tail (upstream logs it and keeps the fit error).
                if s.code == Code::Error {
                    tracing::warn!(plugin = p.name, pod = %pod.key(), error = %s.message(), "PostFilter failed");
                }
                break;
            }
        }
        let code = if nomination.is_some() {
            Code::Success
        } else {
            Code::Unschedulable
        };
        d.time_extension_point("PostFilter", code, started);
        d.nomination = nomination;
        if !reasons.is_empty()
            && let Outcome::Unschedulable { message } = &mut d.outcome
        {
            message.push(' ');
            message.push_str(&reasons.join(", "));
        }
    }

    /// Runs every PreFilter, then every Filter, for `pod` on the one node `idx` of
    /// `snapshot` — a snapshot the caller changed (victims removed, nominated pods added) —
    /// in a fork of `base` (its inputs only). Upstream's PreFilter extensions
    /// (AddPod/RemovePod) followed by `RunFilterPluginsWithNominatedPods`; re-running
    /// PreFilter over the changed snapshot computes the same state. The status is that of
    /// the first plugin that rejects (success when the pod fits).
    ///
    /// Pods nominated to the node with a priority at least the pod's count there, as in
    /// upstream's `RunFilterPluginsWithNominatedPods`: the pod must fit with them and
    /// without them. Counting them needs a copy of the snapshot; a caller that checks many
    /// nodes keeps one and calls [`Framework::filter_node_in`].
    pub fn filter_node(
        &self,
        base: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        idx: NodeIdx,
    ) -> Status {
        if idx as usize >= snapshot.len() {
            return Status::error(format!("node index {idx} is not in the snapshot"));
        }
        let mut work = None;
        if let Some(s) = self.nominated_reject(base, pod, snapshot, &mut work, idx) {
            return s;
        }
        self.filter_node_as_is(base, pod, snapshot, idx)
    }

    /// [`Framework::filter_node`] on `work`, a copy of the snapshot the caller owns and may
    /// have changed: the nominated pods are added to it for the check and removed again,
    /// so no further copy is made (a dry run over many nodes pays for one copy, not one
    /// per node). `work` is as it was when this returns.
    pub fn filter_node_in(
        &self,
        base: &CycleState,
        pod: &PodInfo,
        work: &mut Snapshot,
        idx: NodeIdx,
    ) -> Status {
        if idx as usize >= work.len() {
            return Status::error(format!("node index {idx} is not in the snapshot"));
        }
        if let Some(s) = self.nominated_reject_in(base, pod, work, idx) {
            return s;
        }
        self.filter_node_as_is(base, pod, work, idx)
    }

    /// The status of node `idx` with the pods nominated to it (priority ≥ the pod's) added,
    /// when they make it fail; `None` when there are none or the pod still fits. The status
    /// carries which pods (as its detail: the per-node filters alone would pass the node).
    /// The copy the check needs is made in `work` on first need and kept for the next node.
    fn nominated_reject(
        &self,
        base: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        work: &mut Option<Snapshot>,
        idx: NodeIdx,
    ) -> Option<Status> {
        let nominated = nominated_to(snapshot, pod, idx)?;
        let work = work.get_or_insert_with(|| snapshot.clone());
        self.reject_with_nominated(base, pod, work, idx, &nominated)
    }

    /// [`Framework::nominated_reject`] on the caller's copy `work`.
    fn nominated_reject_in(
        &self,
        base: &CycleState,
        pod: &PodInfo,
        work: &mut Snapshot,
        idx: NodeIdx,
    ) -> Option<Status> {
        let nominated = nominated_to(work, pod, idx)?;
        self.reject_with_nominated(base, pod, work, idx, &nominated)
    }

    /// The check itself, on `work`, restored after: only the `nominated` pods not already
    /// in it are added, and exactly those are removed.
    fn reject_with_nominated(
        &self,
        base: &CycleState,
        pod: &PodInfo,
        work: &mut Snapshot,
        idx: NodeIdx,
        nominated: &[Arc<PodInfo>],
    ) -> Option<Status> {
        let node = work.node(idx).name.clone();
        let mut added = Vec::with_capacity(nominated.len());
        for p in nominated {
            if work.node_of_pod(&p.key(), &p.uid).is_none() && work.add_pod(p.clone(), &node) {
                added.push(p);
            }
        }
        let s = self.filter_node_as_is(base, pod, work, idx);
        for p in added {
            work.remove_pod(&p.key(), &p.uid);
        }
        if s.is_success() {
            return None;
        }
        let names: Vec<String> = nominated.iter().map(|p| p.key().to_string()).collect();
        Some(s.with_detail(format!(
            "with the pod(s) nominated to this node: {}",
            names.join(", ")
        )))
    }

    /// Moves the feasible nodes that fail once the pods nominated to them are counted
    /// into the rejected ones. Only runs when some pod is nominated somewhere; one copy of
    /// the snapshot serves every node.
    fn reject_for_nominated(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        d: &mut Decision,
    ) {
        if !snapshot.policy().has_nominations() {
            return;
        }
        let mut work = None;
        let mut kept = Vec::with_capacity(d.feasible.len());
        for idx in std::mem::take(&mut d.feasible) {
            match self.nominated_reject(state, pod, snapshot, &mut work, idx) {
                Some(s) => d.rejected.push((idx, s)),
                None => kept.push(idx),
            }
        }
        d.feasible = kept;
    }

    /// [`Framework::filter_node`] without the nominated pods.
    fn filter_node_as_is(
        &self,
        base: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        idx: NodeIdx,
    ) -> Status {
        let mut state = base.fork();
        let mut d = self.blank_decision(pod, snapshot);
        let Ok((skip_filter, restrict)) = self.pre_filter(pod, snapshot, &mut state, &mut d) else {
            return d
                .pre_filter
                .pop()
                .unwrap_or_else(|| Status::error("PreFilter failed"));
        };
        if let Some((names, restricting)) = restrict
            && !names.contains(&*snapshot.node(idx).name)
        {
            return restricted_away(restricting);
        }
        let filters = self.active_filters(&skip_filter);
        let chunk = filter_chunk(&filters, &state, pod, snapshot, &[idx], 1);
        if let Some((_, name, message)) = chunk.error {
            return Status::error(message).with_plugin(name);
        }
        match chunk.rejected.into_iter().next() {
            Some((_, s)) => s,
            None => Status::success(),
        }
    }

    /// How many chunks `len` items split into (one per thread, each ≥ `min_chunk`).
    fn chunks_for(&self, len: usize, parallel: bool) -> usize {
        if !parallel || self.pool.is_none() {
            return 1;
        }
        (len / self.min_chunk).clamp(1, self.parallelism)
    }

    /// Runs `f` over every part, the first on the calling thread and the others on the
    /// pool; results in part order.
    fn run_parts<P: Send, T: Send>(&self, mut parts: Vec<P>, f: impl Fn(P) -> T + Sync) -> Vec<T> {
        match &self.pool {
            Some(pool) if parts.len() > 1 => {
                let rest = parts.split_off(1);
                let first = parts.pop();
                let mut out: Vec<Option<T>> = (0..rest.len() + 1).map(|_| None).collect();
                let (head, tail) = out.split_at_mut(1);
                let f = &f;
                pool.in_place_scope(|s| {
                    for (slot, part) in tail.iter_mut().zip(rest) {
                        s.spawn(move |_| *slot = Some(f(part)));
                    }
                    head[0] = first.map(f);
                });
                out.into_iter().flatten().collect()
            }
            _ => parts.into_iter().map(f).collect(),
        }
    }

    /// Filters `candidates` (sorted snapshot indices) into `d.feasible` and `d.rejected`:
    /// every node, or with sampling until enough feasible nodes are found, scanning from
    /// where the previous cycle stopped. `Err` carries a plugin's error.
    #[allow(clippy::too_many_arguments)]
    fn find_feasible(
        &self,
        filters: &[(&'static str, &dyn FilterPlugin)],
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        candidates: &[NodeIdx],
        d: &mut Decision,
        parallel: bool,
    ) -> Result<(), String> {
        let n = candidates.len();
        if n == 0 {
            return Ok(());
        }
        let target = self.num_feasible_nodes_to_find(n);
        let start = self.next_start.0.load(Ordering::Relaxed) % n;
        // The scan: candidates[start..], then candidates[..start]; chunks never straddle
        // the wrap, so within a chunk scan order is index order.
        let segments = [&candidates[start..], &candidates[..start]];
        let mut feasible: Vec<NodeIdx> = Vec::with_capacity(target.min(n));
        let mut rejected: Vec<(NodeIdx, Status)> = Vec::new();
        let mut processed = 0usize;
        // Each filter's time (plugin metrics), over the chunks.
        let mut times: Vec<FilterTime> = Vec::new();
        'scan: for seg in segments {
            let mut pos = 0;
            while pos < seg.len() {
                let round = if target >= n {
                    seg.len() - pos
                } else {
                    (2 * (target - feasible.len()))
                        .next_multiple_of(self.block)
                        .max(SAMPLING_ROUND_BLOCKS * self.block)
                        .min(seg.len() - pos)
                };
                let nodes = &seg[pos..pos + round];
                pos += round;
                let k = self.chunks_for(nodes.len(), parallel);
                let size = nodes.len().div_ceil(self.block).div_ceil(k).max(1) * self.block;
                let parts: Vec<&[NodeIdx]> = nodes.chunks(size).collect();
                let chunks = self.run_parts(parts, |part| {
                    filter_chunk(filters, state, pod, snapshot, part, self.block)
                });
                if let Some(c) = chunks.iter().find(|c| c.error.is_some()) {
                    if k > 1 {
                        // Report the error a serial run reports.
                        return self
                            .find_feasible(filters, state, pod, snapshot, candidates, d, false);
                    }
                    add_filter_times(&mut times, &chunks);
                    record_filter_times(filters, &times, d);
                    let (idx, name, message) = c.error.clone().unwrap_or_default();
                    return Err(format!(
                        "running Filter plugin {name:?} on node {:?}: {message}",
                        snapshot.node(idx).name
                    ));
                }
                add_filter_times(&mut times, &chunks);
                for mut c in chunks {
                    let need = target - feasible.len();
                    if c.feasible.len() < need {
                        processed += c.feasible.len() + c.rejected.len();
                        if feasible.is_empty() {
                            feasible = c.feasible;
                        } else {
                            feasible.extend_from_slice(&c.feasible);
                        }
                        if rejected.is_empty() {
                            rejected = c.rejected;
                        } else {
                            rejected.append(&mut c.rejected);
                        }
                        continue;
                    }
                    // Enough: stop at the `need`-th feasible node of this chunk (within a
                    // chunk, index order is scan order).
                    let last = c.feasible[need - 1];
                    c.rejected.retain(|(i, _)| *i < last);
                    processed += need + c.rejected.len();
                    feasible.extend_from_slice(&c.feasible[..need]);
                    rejected.append(&mut c.rejected);
                    break 'scan;
                }
            }
        }
        self.next_start
            .0
            .store((start + processed) % n, Ordering::Relaxed);
        record_filter_times(filters, &times, d);
        d.feasible = feasible;
        // The decision log keeps the list: no room reserved for rejections that did not
        // happen (shrinking reallocates in place).
        rejected.shrink_to_fit();
        d.rejected = rejected;
        Ok(())
    }

    /// With `explain`, asks the rejecting plugin of each rejected node for the numbers
    /// behind its verdict (the batch path leaves them out). Debug builds also check that
    /// the per-node path agrees with the batch path on every node.
    fn explain_rejections(
        &self,
        filters: &[(&'static str, &dyn FilterPlugin)],
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        d: &mut Decision,
    ) {
        for (idx, s) in &mut d.rejected {
            if s.detail.is_some() {
                continue;
            }
            let Some((_, f)) = filters.iter().find(|(name, _)| *name == s.plugin) else {
                continue;
            };
            let per_node = f.filter(state, pod, snapshot.node(*idx));
            debug_assert_eq!(
                (per_node.code, &per_node.reasons),
                (s.code, &s.reasons),
                "{} on {}: batch and per-node filters disagree",
                s.plugin,
                snapshot.node(*idx).name
            );
            s.detail = per_node.detail;
        }
        #[cfg(debug_assertions)]
        for idx in &d.feasible {
            for (name, f) in filters {
                let s = f.filter(state, pod, snapshot.node(*idx));
                debug_assert!(
                    s.is_success(),
                    "{name} on {}: the batch filter passed a node the per-node filter rejects: {s}",
                    snapshot.node(*idx).name
                );
            }
        }
    }

    /// Debug builds, when explaining: every batch score equals the per-node score.
    #[cfg(debug_assertions)]
    fn check_scores_per_node(
        &self,
        active: &[(usize, &dyn ScorePlugin)],
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: &[NodeIdx],
        raw: &[Vec<i64>],
    ) {
        for ((i, sp), column) in active.iter().zip(raw) {
            for (idx, v) in feasible.iter().zip(column) {
                let per_node = sp.score(state, pod, snapshot.node(*idx)).ok();
                debug_assert_eq!(
                    per_node,
                    Some(*v),
                    "{} on {}: batch and per-node scores disagree",
                    self.plugins[*i].name,
                    snapshot.node(*idx).name
                );
            }
        }
    }

    /// Raw score columns of every active plugin over `feasible`, chunk by chunk.
    fn score_all(
        &self,
        active: &[(usize, &dyn ScorePlugin)],
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: &[NodeIdx],
        parallel: bool,
    ) -> Result<(Vec<Vec<i64>>, Vec<Duration>), ScoreError> {
        let n = feasible.len();
        let record = state.record_plugin_metrics;
        let k = self.chunks_for(n, parallel);
        let size = n.div_ceil(k).max(1);
        // Per chunk, one column per plugin; the chunks' columns are then joined in order.
        let parts: Vec<&[NodeIdx]> = feasible.chunks(size).collect();
        let results = self.run_parts(parts, |nodes| {
            let mut cols: Vec<Vec<i64>> = Vec::with_capacity(active.len());
            let mut spent: Vec<Duration> = Vec::new();
            for (i, sp) in active {
                let mut col = Vec::with_capacity(nodes.len());
                let started = record.then(Instant::now);
                sp.score_batch(state, pod, snapshot, nodes, &mut col)
                    .map_err(|(pos, s)| (nodes[pos], *i, s))?;
                if let Some(started) = started {
                    spent.push(started.elapsed());
                }
                if col.len() != nodes.len() {
                    return Err((
                        nodes[0],
                        *i,
                        Status::error(format!("scored {} of {} nodes", col.len(), nodes.len())),
                    ));
                }
                cols.push(col);
            }
            Ok((cols, spent))
        });
        let mut raw: Vec<Vec<i64>> = Vec::new();
        let mut spent: Vec<Duration> = Vec::new();
        // Plugin metrics: each plugin's time summed over the chunks.
        let add = |spent: &mut Vec<Duration>, part: Vec<Duration>| {
            if spent.is_empty() {
                *spent = part;
            } else {
                spent.iter_mut().zip(part).for_each(|(s, p)| *s += p);
            }
        };
        for r in results {
            match r {
                Ok((cols, part)) if raw.is_empty() => {
                    raw = cols;
                    add(&mut spent, part);
                }
                Ok((cols, part)) => {
                    for (column, col) in raw.iter_mut().zip(cols) {
                        column.extend_from_slice(&col);
                    }
                    add(&mut spent, part);
                }
                Err(_) if k > 1 => {
                    // Report the error a serial run reports.
                    return self.score_all(active, state, pod, snapshot, feasible, false);
                }
                Err(err) => return Err(err),
            }
        }
        if raw.is_empty() {
            raw = active.iter().map(|_| Vec::new()).collect();
        }
        Ok((raw, spent))
    }

    /// Normalises one plugin's raw column, checks the range, adds the weighted scores to
    /// `totals`, and collects explanations.
    #[allow(clippy::too_many_arguments)]
    fn normalize(
        &self,
        sp: &dyn ScorePlugin,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: &[NodeIdx],
        raw: Vec<i64>,
        explain: bool,
        weight: i64,
        totals: &mut [i64],
    ) -> Result<ScoreColumn, Status> {
        let (raw, normalized) = if sp.normalizes() {
            let mut normalized = raw.clone();
            let s = sp.normalize(state, pod, &mut normalized);
            if !s.is_success() {
                return Err(s);
            }
            (Some(raw), normalized)
        } else {
            (None, raw)
        };
        // One pass: the range check, and the weighted score into the totals.
        let mut bad = None;
        for (t, v) in totals.iter_mut().zip(&normalized) {
            if !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(v) {
                bad.get_or_insert(*v);
            }
            *t += v * weight;
        }
        if let Some(bad) = bad {
            return Err(Status::error(format!(
                "plugin {:?} returns an invalid score {bad}, it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing",
                sp.name()
            )));
        }
        let details = explain.then(|| {
            feasible
                .iter()
                .map(|idx| sp.explain_score(state, pod, snapshot.node(*idx)))
                .collect()
        });
        Ok(ScoreColumn {
            plugin: sp.name(),
            weight: 1,
            raw,
            // In range, checked above.
            normalized: normalized
                .iter()
                .map(|v| u8::try_from(*v).unwrap_or(0))
                .collect(),
            details,
        })
    }

    /// Runs Reserve plugins in order; on failure, Unreserve runs for all of them in reverse.
    pub fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in &self.plugins {
            if let Some(r) = &p.reserve {
                let s = r.reserve(state, pod, node);
                if !s.is_success() {
                    self.unreserve(state, pod, node);
                    return s.with_plugin(p.name);
                }
            }
        }
        Status::success()
    }

    /// Runs Unreserve plugins in reverse order.
    pub fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        for p in self.plugins.iter().rev() {
            if let Some(r) = &p.reserve {
                r.unreserve(state, pod, node);
            }
        }
    }

    /// Upstream's PreBindPreFlight: whether any PreBind plugin has work for this pod on
    /// `node` (those that say `Skip` are not called).
    pub fn pre_bind_needed(&self, state: &CycleState, pod: &PodInfo, node: &str) -> bool {
        self.plugins.iter().any(|p| {
            p.pre_bind
                .as_ref()
                .is_some_and(|pb| !pb.pre_bind_pre_flight(state, pod, node).is_skip())
        })
    }

    /// Runs the PreBind plugins in order (outside the cycle, in the binding task); the
    /// first non-success status is returned with its plugin.
    pub async fn pre_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in &self.plugins {
            let Some(pb) = &p.pre_bind else { continue };
            if pb.pre_bind_pre_flight(state, pod, node).is_skip() {
                continue;
            }
            let s = pb.pre_bind(state, pod, node).await;
            if !s.is_success() {
                return s.with_plugin(p.name);
            }
        }
        Status::success()
    }

    /// Runs Permit plugins, as upstream's `RunPermitPlugins`: the first status that is
    /// neither success nor wait is returned at once (with its plugin); otherwise a wait,
    /// if any plugin asked for one, with the longest timeout asked; else success.
    pub fn permit(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        node: &str,
    ) -> (Status, Duration) {
        let mut wait: Option<(Status, Duration)> = None;
        for p in &self.plugins {
            let Some(pm) = &p.permit else { continue };
            let (s, timeout) = pm.permit(state, pod, snapshot, node);
            match s.code {
                Code::Success => {}
                Code::Wait => {
                    if wait.as_ref().is_none_or(|(_, t)| timeout > *t) {
                        wait = Some((s.with_plugin(p.name), timeout));
                    }
                }
                _ => return (s.with_plugin(p.name), Duration::ZERO),
            }
        }
        wait.unwrap_or((Status::success(), Duration::ZERO))
    }
}

/// The node named by the pod's `status.nominatedNodeName`, when it is one of `candidates`
/// (sorted). A field read per cycle; nothing more for pods that were never nominated.
fn nominated_candidate(
    pod: &PodInfo,
    snapshot: &Snapshot,
    candidates: &[NodeIdx],
) -> Option<NodeIdx> {
    let name = pod
        .pod
        .status
        .as_ref()?
        .nominated_node_name
        .as_deref()
        .filter(|n| !n.is_empty())?;
    let idx = snapshot.index_of(name)?;
    candidates.binary_search(&idx).ok().map(|_| idx)
}

/// The pods nominated to node `idx` that count against `pod` (priority at least its own),
/// `None` when there are none: the check of nominated pods is then skipped.
fn nominated_to(snapshot: &Snapshot, pod: &PodInfo, idx: NodeIdx) -> Option<Vec<Arc<PodInfo>>> {
    if !snapshot.policy().has_nominations() {
        return None;
    }
    let nominated = snapshot
        .policy()
        .nominated_against(&snapshot.node(idx).name, pod);
    (!nominated.is_empty()).then_some(nominated)
}

/// Runs the filters over a range of nodes (index order), block by block (`block` nodes),
/// each block plugin by plugin over the nodes still feasible.
fn filter_chunk(
    filters: &[(&'static str, &dyn FilterPlugin)],
    state: &CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    nodes: &[NodeIdx],
    block: usize,
) -> FilterChunk {
    let table = snapshot.table();
    let mut feasible = Vec::with_capacity(nodes.len());
    let mut batch = NodeBatch::new(Vec::with_capacity(nodes.len().min(block)));
    // Room for every node to be rejected, reserved once: grown push by push, the list was
    // copied at every doubling (about a thousandth of a plain decision's instructions at
    // 5,000 nodes in callgrind, more where most nodes are rejected). The finished
    // decision gives back what was not used (`find_feasible`).
    batch.rejected.reserve(nodes.len());
    let mut error = None;
    let record = state.record_plugin_metrics;
    let mut times = if record {
        vec![FilterTime::default(); filters.len()]
    } else {
        Vec::new()
    };
    for block in nodes.chunks(block) {
        batch.nodes.clear();
        batch.nodes.extend_from_slice(block);
        batch.retain(|idx| {
            table.has(idx, flag::ERROR).then(|| {
                Status::unresolvable(NODE_UNREADABLE)
                    .with_plugin("NodeInfo")
                    .with_detail(snapshot.node(idx).error.clone().unwrap_or_default())
            })
        });
        for (pos, (name, f)) in filters.iter().enumerate() {
            if batch.nodes.is_empty() {
                break;
            }
            let before = batch.rejected.len();
            let examined = batch.nodes.len();
            let started = record.then(Instant::now);
            f.filter_batch(state, pod, snapshot, &mut batch);
            let mut time = started.map(|started| {
                let t = &mut times[pos];
                t.spent += started.elapsed();
                t.nodes += examined as u32;
                t.passed += batch.nodes.len() as u32;
                t
            });
            for (idx, s) in &mut batch.rejected[before..] {
                s.plugin = name;
                if let Some(t) = time.as_mut() {
                    t.rejected = Some(s.code);
                    t.error |= s.code == Code::Error;
                }
                if s.code == Code::Error && error.as_ref().is_none_or(|(e, _, _)| *idx < *e) {
                    error = Some((*idx, *name, s.message()));
                }
            }
            if error.is_some() {
                break;
            }
        }
        feasible.extend_from_slice(&batch.nodes);
        if error.is_some() {
            break;
        }
    }
    FilterChunk {
        feasible,
        rejected: batch.rejected,
        error,
        times,
    }
}

/// Adds the chunks' filter times (plugin metrics) to `times`.
fn add_filter_times(times: &mut Vec<FilterTime>, chunks: &[FilterChunk]) {
    for c in chunks {
        if times.len() < c.times.len() {
            times.resize(c.times.len(), FilterTime::default());
        }
        for (t, ct) in times.iter_mut().zip(&c.times) {
            t.add(ct);
        }
    }
}

/// Writes each filter's time per node into the decision (plugins that examined no node
/// did not run, as upstream).
fn record_filter_times(
    filters: &[(&'static str, &dyn FilterPlugin)],
    times: &[FilterTime],
    d: &mut Decision,
) {
    for ((name, _), t) in filters.iter().zip(times) {
        if t.nodes > 0 {
            d.time_plugin(name, "Filter", t.code(), t.per_node());
        }
    }
}

/// The index of the highest total; ties are broken uniformly at random, as upstream does
/// (one draw from `rng`, only when there is a tie).
fn select_host<R: Rng + ?Sized>(totals: &[i64], rng: &mut R) -> usize {
    let best = totals.iter().copied().max().unwrap_or(0);
    let ties: SmallVec<[usize; 8]> = totals
        .iter()
        .enumerate()
        .filter(|(_, t)| **t == best)
        .map(|(i, _)| i)
        .collect();
    if ties.len() == 1 {
        ties[0]
    } else {
        ties[rng.random_range(0..ties.len())]
    }
}

#[cfg(test)]
impl Framework {
    /// The cycle as it was before batches and chunks: node by node, plugin by plugin,
    /// through the per-node calls. Tests compare the runtime against it.
    pub(crate) fn schedule_reference<R: Rng + ?Sized>(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        rng: &mut R,
    ) -> Decision {
        let (mut d, mut state) = self.start(pod, snapshot, CycleState::new(false));
        if pod.error.is_some() || snapshot.is_empty() {
            return d;
        }
        let Ok((skip_filter, restrict)) = self.pre_filter(pod, snapshot, &mut state, &mut d) else {
            if matches!(d.outcome, Outcome::Unschedulable { .. }) {
                self.post_filter(pod, snapshot, &state, &mut d, rng);
            }
            return d;
        };
        let candidates: Vec<NodeIdx> = match &restrict {
            None => (0..snapshot.len() as NodeIdx).collect(),
            Some((names, restricting)) => {
                d.absent = Some(restricted_away(restricting.clone()));
                let mut v: Vec<NodeIdx> =
                    names.iter().filter_map(|n| snapshot.index_of(n)).collect();
                v.sort_unstable();
                v
            }
        };
        let filters = self.active_filters(&skip_filter);
        'nodes: for idx in candidates {
            let node = snapshot.node(idx);
            if let Some(err) = &node.error {
                d.rejected.push((
                    idx,
                    Status::unresolvable(NODE_UNREADABLE)
                        .with_plugin("NodeInfo")
                        .with_detail(err.clone()),
                ));
                continue;
            }
            for (name, f) in &filters {
                let s = f.filter(&state, pod, node);
                if !s.is_success() {
                    if s.code == Code::Error {
                        d.outcome = Outcome::Error {
                            message: s.message(),
                        };
                        return d;
                    }
                    // The batch path leaves details out unless explaining.
                    let mut s = s.with_plugin(name);
                    s.detail = None;
                    d.rejected.push((idx, s));
                    continue 'nodes;
                }
            }
            d.feasible.push(idx);
        }
        if d.feasible.is_empty() {
            d.outcome = Outcome::Unschedulable {
                message: d.fit_error_message(),
            };
            self.post_filter(pod, snapshot, &state, &mut d, rng);
            return d;
        }
        if d.feasible.len() == 1 {
            d.place(d.feasible[0]);
            return d;
        }
        let mut skip_score = vec![false; self.plugins.len()];
        for (i, p) in self.plugins.iter().enumerate() {
            let Some(ps) = &p.pre_score else { continue };
            let s = ps.pre_score(&mut state, pod, snapshot, &d.feasible);
            match s.code {
                Code::Success => {}
                Code::Skip => skip_score[i] = true,
                _ => {
                    d.outcome = Outcome::Error {
                        message: s.message(),
                    };
                    return d;
                }
            }
        }
        let mut totals = vec![0i64; d.feasible.len()];
        for (i, p) in self.plugins.iter().enumerate() {
            let Some(sp) = p.score.as_deref() else {
                continue;
            };
            if skip_score[i] {
                d.skipped_scores.push(p.name);
                continue;
            }
            let mut raw = Vec::with_capacity(d.feasible.len());
            for idx in &d.feasible {
                match sp.score(&state, pod, snapshot.node(*idx)) {
                    Ok(v) => raw.push(v),
                    Err(s) => {
                        d.outcome = Outcome::Error {
                            message: s.message(),
                        };
                        return d;
                    }
                }
            }
            let weight = self.weights[i];
            match self.normalize(
                sp,
                &state,
                pod,
                snapshot,
                &d.feasible,
                raw,
                false,
                weight,
                &mut totals,
            ) {
                Ok(column) => {
                    d.scores.push(ScoreColumn {
                        plugin: p.name,
                        weight,
                        ..column
                    });
                }
                Err(s) => {
                    d.outcome = Outcome::Error {
                        message: s.message(),
                    };
                    return d;
                }
            }
        }
        let pick = select_host(&totals, rng);
        d.totals = totals;
        d.place(d.feasible[pick]);
        d
    }
}

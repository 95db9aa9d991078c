//! The kube-scheduler extender protocol (`k8s.io/kube-scheduler/extender/v1`).
//!
//! Those Go types have no json tags, so the JSON field names are the Go field names:
//! `Pod`, `Nodes`, `NodeNames` in [`ExtenderArgs`]; `Nodes`, `NodeNames`, `FailedNodes`,
//! `FailedAndUnresolvableNodes`, `Error` in [`ExtenderFilterResult`]; `Host`, `Score` in
//! [`HostPriority`]; `PodName`, `PodNamespace`, `PodUID`, `Node` in
//! [`ExtenderBindingArgs`]. kube-scheduler sends absent lists as `null`.
//!
//! - `POST /extender/filter`: the nodes that pass headroom's own filters. With
//!   `nodeCacheCapable: true` the request carries node names only and headroom evaluates
//!   its own cache of nodes (cheap requests); with `false` it carries the full `NodeList`,
//!   which is answered with the passing node objects. Rejections go to `FailedNodes`
//!   (or `FailedAndUnresolvableNodes`, which kube-scheduler will not try to preempt for)
//!   with the plugin's reason.
//! - `POST /extender/prioritize`: scores 0..=10 ([`MAX_EXTENDER_PRIORITY`]), the weighted
//!   framework total scaled from 0..=100 per unit of weight.
//! - `POST /extender/bind` (optional): binds through `pods/binding`, and settles the bind on
//!   the engine's decision channel ([`ExtenderSettle`]) as the scheduler's own binds do:
//!   the sink records the node in the pod's builder's placement history in the store, so
//!   that History scores warm caches for the pods kube-scheduler places too.
//!   (kube-scheduler writes the `Scheduled` event; headroom writes none.)
//!
//! Only the extender profile runs ([`ExtenderConfig::profile`]): kube-scheduler has
//! already applied its in-tree plugins, so those are off unless enabled explicitly.
//! Pods come from headroom's own cache in both modes. A node named in a request (the
//! cache-capable form) that headroom does not know goes to `FailedAndUnresolvableNodes`
//! (`node "x" is not known to headroom`): headroom cannot judge it, and passing it would
//! let a name that exists nowhere through; a new node is judged once the watch has seen
//! it. In `prioritize` it scores 0. The full-node form carries the objects, so every
//! readable node there is judged.
//!
//! Bad input never panics: malformed JSON is a 400 naming the field.
//!
//! [`ExtenderConfig::profile`]: crate::config::serve::ExtenderConfig::profile

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use k8s_openapi::api::core::v1::{Node, Pod};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use serde::{Deserialize, Serialize};

use crate::decisions::Settled;
use headroom_scheduler::framework::{
    BindOutcome, BoxFuture, Code, Decision, Framework, Outcome, Status,
};
use headroom_scheduler::snapshot::{PodInfo, Snapshot};

/// The highest score an extender may give (`extenderv1.MaxExtenderPriority`).
pub const MAX_EXTENDER_PRIORITY: i64 = 10;

/// Why an extender request could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum ExtenderError {
    /// The body is not the JSON the verb takes.
    #[error("invalid {kind} at {path}: {message}")]
    BadRequest {
        /// The Go type expected (`ExtenderArgs`).
        kind: &'static str,
        /// Where in the body (`Pod.spec.containers[0].resources`).
        path: String,
        /// What is wrong.
        message: String,
    },
}

impl IntoResponse for ExtenderError {
    fn into_response(self) -> Response {
        (StatusCode::BAD_REQUEST, self.to_string()).into_response()
    }
}

/// A `NodeList` as kube-scheduler sends it (`{"metadata": {}, "items": [...]}`); the items
/// stay raw so the response echoes them unchanged.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NodeList {
    /// List metadata (kept as sent).
    #[serde(default)]
    pub metadata: serde_json::Value,
    /// The nodes.
    #[serde(default)]
    pub items: Vec<serde_json::Value>,
}

/// `extenderv1.ExtenderArgs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled.
    #[serde(rename = "Pod", alias = "pod", default)]
    pub pod: Option<Pod>,
    /// Candidate nodes, when the extender is not `nodeCacheCapable`.
    #[serde(rename = "Nodes", alias = "nodes", default)]
    pub nodes: Option<NodeList>,
    /// Candidate node names, when it is.
    #[serde(
        rename = "NodeNames",
        alias = "nodenames",
        alias = "nodeNames",
        default
    )]
    pub node_names: Option<Vec<String>>,
}

/// `extenderv1.ExtenderFilterResult`. Of `Nodes` and `NodeNames` only the one matching the
/// request's form is sent.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ExtenderFilterResult {
    /// Passing nodes (full-node form).
    #[serde(rename = "Nodes", default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<NodeList>,
    /// Passing node names (cache-capable form).
    #[serde(rename = "NodeNames", default, skip_serializing_if = "Option::is_none")]
    pub node_names: Option<Vec<String>>,
    /// Rejected nodes and why; preemption may help them.
    #[serde(rename = "FailedNodes", default)]
    pub failed_nodes: BTreeMap<String, String>,
    /// Rejected nodes that preemption cannot help.
    #[serde(
        rename = "FailedAndUnresolvableNodes",
        default,
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    /// Set when the request failed as a whole.
    #[serde(rename = "Error", default)]
    pub error: String,
}

/// `extenderv1.HostPriority`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HostPriority {
    /// Node name.
    #[serde(rename = "Host")]
    pub host: String,
    /// 0..=10.
    #[serde(rename = "Score")]
    pub score: i64,
}

/// `extenderv1.ExtenderBindingArgs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ExtenderBindingArgs {
    /// Pod name.
    #[serde(rename = "PodName", default)]
    pub pod_name: String,
    /// Pod namespace.
    #[serde(rename = "PodNamespace", default)]
    pub pod_namespace: String,
    /// Pod UID.
    #[serde(rename = "PodUID", default)]
    pub pod_uid: String,
    /// Node to bind to.
    #[serde(rename = "Node", default)]
    pub node: String,
}

/// `extenderv1.ExtenderBindingResult`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ExtenderBindingResult {
    /// Empty on success.
    #[serde(rename = "Error", default)]
    pub error: String,
}

/// Binds on behalf of kube-scheduler (`bindVerb`). Returns the pod (as it was before the
/// bind, read as the scheduler reads pods) with what the bind came to, or, when the pod could not be bound at all (not
/// found, not pending, another uid), why.
pub trait ExtenderBinder: Send + Sync {
    /// Binds `namespace/name` (with `uid` as precondition when non-empty) to `node`.
    fn bind<'a>(
        &'a self,
        args: &'a ExtenderBindingArgs,
    ) -> BoxFuture<'a, Result<(Arc<PodInfo>, BindOutcome), String>>;
}

/// Where the extender's binds settle: the engine's decision channel, as the scheduler's
/// own binds do, so one sink records every placement (the builder's placement history in
/// the store, its failures summarised) and the mode, told the bind came from the
/// extender, writes no event (kube-scheduler writes its own).
#[derive(Clone)]
pub struct ExtenderSettle {
    /// The engine's decision channel.
    pub decisions: crate::decisions::DecisionSender,
    /// How a pod's builder is named.
    pub identity: headroom_collectors::IdentityConfig,
    /// The extender profile's name, recorded with each bind.
    pub profile: String,
}

impl ExtenderSettle {
    /// Hands what the bind of `pod` to `node` came to to the engine's sink (waiting for
    /// room, as the scheduling loop does). A sink that is gone is logged: the bind stands.
    async fn settle(&self, pod: Arc<PodInfo>, node: &str, outcome: BindOutcome) {
        let builder = headroom_collectors::builder_identity(&pod.pod.metadata, &self.identity);
        let builder = (!builder.is_pod()).then(|| builder.to_string());
        let settled = Settled::extender_bind(pod, node, &self.profile, builder, outcome);
        if self.decisions.settled(settled).await.is_err() {
            tracing::warn!("extender bind: the decision sink has stopped; placement not recorded");
        }
    }
}

/// The verb of an extender request (a metric label).
#[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct VerbLabel {
    verb: &'static str,
}

/// A histogram family whose histograms have the extender's buckets.
type DurationFamily = Family<VerbLabel, Histogram, fn() -> Histogram>;

/// How long the extender takes to answer, by verb
/// (`headroom_extender_request_duration_seconds` once registered): from the request's
/// body to its encoded answer, so kube-scheduler's wait for headroom shows without
/// tracing its traffic.
#[derive(Clone)]
pub struct ExtenderMetrics {
    duration: DurationFamily,
}

impl Default for ExtenderMetrics {
    fn default() -> Self {
        fn histogram() -> Histogram {
            // 50 µs .. ~1.6 s: a filter over 500 names takes ~0.2 ms of CPU.
            Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
        }
        ExtenderMetrics {
            duration: Family::new_with_constructor(histogram),
        }
    }
}

impl ExtenderMetrics {
    /// Registers the histograms on `metrics`.
    pub fn register(&self, metrics: &crate::metrics::Metrics) {
        for verb in ["filter", "prioritize", "bind"] {
            let _ = self.duration.get_or_create(&VerbLabel { verb });
        }
        metrics.register(
            "headroom_extender_request_duration_seconds",
            "Time to answer one extender request, by verb (filter, prioritize, bind)",
            self.duration.clone(),
        );
    }

    fn observe(&self, verb: &'static str, started: std::time::Instant) {
        self.duration
            .get_or_create(&VerbLabel { verb })
            .observe(started.elapsed().as_secs_f64());
    }
}

/// What the handlers share.
#[derive(Clone)]
pub struct ExtenderState {
    /// The extender profile's framework.
    pub framework: Arc<Framework>,
    /// The cache of nodes and assigned pods.
    pub snapshot: Arc<dyn ExtenderSnapshots>,
    /// The binder for `/extender/bind`; `None` answers bind with an error.
    pub binder: Option<Arc<dyn ExtenderBinder>>,
    /// Where a bind settles (`None`: nowhere, e.g. in tests without an engine).
    pub settle: Option<ExtenderSettle>,
    /// The latest evaluations by pod uid: kube-scheduler calls `prioritize` right after
    /// `filter` for the same pod, with a subset of the nodes `filter` judged, so the scores
    /// `filter`'s cycle computed answer it without a second cycle.
    pub recent: Arc<RecentEvaluations>,
    /// Request durations by verb.
    pub metrics: ExtenderMetrics,
}

/// How many pods' evaluations [`RecentEvaluations`] keeps (kube-scheduler schedules one
/// pod at a time; a few spare slots cover retries and a second scheduler profile).
const RECENT_PODS: usize = 16;

/// How long an evaluation answers `prioritize` (kube-scheduler calls it within
/// milliseconds of `filter`; an older one is recomputed on the current snapshot).
const RECENT_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(2);

/// The last few pods' evaluations, newest last (see [`ExtenderState::recent`]).
#[derive(Default)]
pub struct RecentEvaluations(
    std::sync::Mutex<std::collections::VecDeque<(String, Arc<Evaluated>)>>,
);

impl RecentEvaluations {
    fn get(&self, uid: &str) -> Option<Arc<Evaluated>> {
        if uid.is_empty() {
            return None;
        }
        let q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        q.iter()
            .rev()
            .find(|(u, e)| u == uid && e.at.elapsed() < RECENT_MAX_AGE)
            .map(|(_, e)| e.clone())
    }

    fn put(&self, uid: &str, ev: Arc<Evaluated>) {
        if uid.is_empty() {
            return;
        }
        let mut q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        q.retain(|(u, _)| u != uid);
        if q.len() >= RECENT_PODS {
            q.pop_front();
        }
        q.push_back((uid.to_string(), ev));
    }
}

/// Reads a request body of the Go type `kind` (`ExtenderArgs`, `ExtenderBindingArgs`), or
/// says where it is wrong (`invalid ExtenderArgs at Pod.spec.containers: ...`).
pub fn parse<T: serde::de::DeserializeOwned>(
    kind: &'static str,
    body: &[u8],
) -> Result<T, ExtenderError> {
    // The plain decoder first: tracking the path costs on every field of every request,
    // and only a failure needs it (decoded again to name the field).
    if let Ok(v) = serde_json::from_slice(body) {
        return Ok(v);
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| ExtenderError::BadRequest {
        kind,
        path: e.path().to_string(),
        message: e.into_inner().to_string(),
    })
}

/// The candidate nodes of a request.
enum Candidates {
    Names(Vec<String>),
    Full(NodeList, Vec<Result<Arc<Node>, String>>),
}

impl Candidates {
    /// The candidate names, in request order (moved out for the name form).
    fn take_names(&mut self) -> Vec<String> {
        match self {
            Candidates::Names(n) => std::mem::take(n),
            Candidates::Full(list, parsed) => list
                .items
                .iter()
                .zip(parsed)
                .enumerate()
                .map(|(i, (raw, p))| match p {
                    Ok(n) => n.metadata.name.clone().unwrap_or_default(),
                    Err(_) => raw
                        .pointer("/metadata/name")
                        .and_then(|v| v.as_str())
                        .map_or_else(|| format!("<item {i}>"), str::to_string),
                })
                .collect(),
        }
    }
}

/// A validated request: the pod, its candidates and their names.
struct Request {
    pod: PodInfo,
    candidates: Candidates,
    names: Vec<String>,
}

fn request(args: ExtenderArgs) -> Result<Request, ExtenderError> {
    let bad = |path: &str, message: &str| ExtenderError::BadRequest {
        kind: "ExtenderArgs",
        path: path.to_string(),
        message: message.to_string(),
    };
    let pod = args.pod.ok_or_else(|| bad("Pod", "missing"))?;
    let candidates = match (args.node_names, args.nodes) {
        (Some(names), _) => Candidates::Names(names),
        (None, Some(list)) => {
            let parsed = list
                .items
                .iter()
                .map(|v| {
                    serde_json::from_value::<Node>(v.clone())
                        .map(Arc::new)
                        .map_err(|e| format!("unreadable node object: {e}"))
                })
                .collect();
            Candidates::Full(list, parsed)
        }
        (None, None) => return Err(bad(".", "neither NodeNames nor Nodes is set")),
    };
    let mut candidates = candidates;
    let names = candidates.take_names();
    Ok(Request {
        pod: PodInfo::new(Arc::new(pod)),
        candidates,
        names,
    })
}

/// What one evaluation found for each name asked, in request order. It holds no snapshot:
/// the evaluation reads the cluster under a lease that ends with it.
pub struct Evaluated {
    /// Set when the request failed as a whole (a PreFilter error before any verdict).
    error: Option<String>,
    /// One verdict per name of the request, in its order.
    verdicts: Vec<Verdict>,
    /// Where each asked name's verdict is (for `prioritize`, which asks a subset).
    index: std::collections::HashMap<String, usize>,
    /// When it was computed.
    at: std::time::Instant,
}

/// One node's verdict in an [`Evaluated`].
#[derive(Debug, Clone, PartialEq)]
enum Verdict {
    /// Passed every filter, with its 0..=10 score.
    Passed(i64),
    /// Rejected; preemption may help.
    Failed(String),
    /// Rejected, and preemption cannot help (or headroom cannot judge the node).
    Unresolvable(String),
}

impl Evaluated {
    /// The verdicts of decision `d` for the request's names, whose indices in the
    /// snapshot of `nodes` nodes are `found`.
    fn of(
        req: &Request,
        d: &Decision,
        found: &[Option<headroom_scheduler::snapshot::NodeIdx>],
        nodes: usize,
    ) -> Evaluated {
        let error = match &d.outcome {
            Outcome::Error { message }
                if d.feasible.is_empty() && d.rejected.is_empty() && d.absent.is_none() =>
            {
                Some(message.clone())
            }
            _ => None,
        };
        let rejected = rejections(d, nodes);
        let scores = scores(d, nodes);
        let verdicts = req
            .names
            .iter()
            .zip(found)
            .enumerate()
            .map(|(i, (name, idx))| {
                if let Candidates::Full(_, parsed) = &req.candidates
                    && let Err(e) = &parsed[i]
                {
                    return Verdict::Unresolvable(e.clone());
                }
                let Some(idx) = *idx else {
                    return Verdict::Unresolvable(format!(
                        "node {:?} is not known to headroom",
                        headroom_scheduler::field::shown(name)
                    ));
                };
                match rejected.get(idx as usize).copied().flatten() {
                    Some(s) if s.code == Code::UnschedulableAndUnresolvable => {
                        Verdict::Unresolvable(s.message())
                    }
                    Some(s) => Verdict::Failed(s.message()),
                    None => Verdict::Passed(scores.get(idx as usize).copied().unwrap_or(0)),
                }
            })
            .collect();
        let index = req
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        Evaluated {
            error,
            verdicts,
            index,
            at: std::time::Instant::now(),
        }
    }

    /// Whether every name was judged here.
    fn covers(&self, names: &[String]) -> bool {
        names.iter().all(|n| self.index.contains_key(n))
    }

    /// The 0..=10 score of a name (0 when it was not feasible or not asked).
    fn score(&self, name: &str) -> i64 {
        match self.index.get(name).map(|i| &self.verdicts[*i]) {
            Some(Verdict::Passed(score)) => *score,
            _ => 0,
        }
    }
}

/// Where the extender reads the cluster: a snapshot lent for one evaluation.
pub trait ExtenderSnapshots: Send + Sync {
    /// Calls `f` with the cluster as it is now; the snapshot is not kept after `f`.
    fn lend(&self, f: &mut dyn FnMut(&Snapshot));
}

/// Under `serve`: the cache's snapshot, leased for the evaluation (~0.1 ms at 500 names).
/// The watch's writes meanwhile are queued, not copied, and applied as the lease ends, so
/// a request reads the freshest state and never copies the cluster.
impl ExtenderSnapshots for headroom_scheduler::cache::Cache {
    fn lend(&self, f: &mut dyn FnMut(&Snapshot)) {
        let lease = self.lease();
        f(&lease);
    }
}

/// A fixed or computed snapshot (tests, benches, the fuzzer).
impl<F: Fn() -> Arc<Snapshot> + Send + Sync> ExtenderSnapshots for F {
    fn lend(&self, f: &mut dyn FnMut(&Snapshot)) {
        f(&self());
    }
}

impl ExtenderState {
    /// Evaluates the request's pod on the nodes it names. Only the cycle runs under the
    /// lease of the snapshot; the verdicts are built after it ended, so the watch's writes
    /// wait for the cycle alone.
    fn evaluate(&self, req: &Request) -> Evaluated {
        let mut out = None;
        self.snapshot.lend(&mut |snapshot| {
            out = Some(match &req.candidates {
                Candidates::Full(_, parsed) => {
                    // Nodes headroom's cache lacks are added to a copy, so the full-node
                    // form works before the watch has caught up. Known nodes are taken
                    // from the cache, which the same API server feeds.
                    let missing: Vec<&Arc<Node>> = parsed
                        .iter()
                        .flatten()
                        .filter(|n| {
                            let name = n.metadata.name.as_deref().unwrap_or("");
                            snapshot.index_of(name).is_none()
                        })
                        .collect();
                    if missing.is_empty() {
                        self.decide(req, snapshot)
                    } else {
                        let mut copy = snapshot.clone();
                        for n in missing {
                            copy.upsert_node(n.clone());
                        }
                        self.decide(req, &copy)
                    }
                }
                Candidates::Names(_) => self.decide(req, snapshot),
            });
        });
        let (d, found, nodes) = out.expect("the snapshot source calls back once");
        Evaluated::of(req, &d, &found, nodes)
    }

    /// The cycle over the asked nodes of `snapshot`: its decision, each name's index there
    /// (`None`: unknown), and the snapshot's node count.
    fn decide(
        &self,
        req: &Request,
        snapshot: &Snapshot,
    ) -> (
        Decision,
        Vec<Option<headroom_scheduler::snapshot::NodeIdx>>,
        usize,
    ) {
        // Only the nodes asked about are filtered and scored (names the cache lacks have
        // no index and no verdict).
        let found: Vec<Option<headroom_scheduler::snapshot::NodeIdx>> =
            req.names.iter().map(|n| snapshot.index_of(n)).collect();
        let asked: Vec<headroom_scheduler::snapshot::NodeIdx> =
            found.iter().flatten().copied().collect();
        // Host selection is kube-scheduler's job here; the seed only feeds the tie-breaker
        // of a decision nobody acts on.
        let mut rng = SmallRng::seed_from_u64(0);
        let (d, _) = self
            .framework
            .schedule_nodes(&req.pod, snapshot, &asked, &mut rng, false);
        (d, found, snapshot.len())
    }

    /// `/filter`: which candidates pass headroom's filters.
    pub fn filter(&self, args: ExtenderArgs) -> Result<ExtenderFilterResult, ExtenderError> {
        let req = request(args)?;
        let ev = Arc::new(self.evaluate(&req));
        self.recent.put(&req.pod.uid, ev.clone());
        let mut result = ExtenderFilterResult::default();
        if let Some(message) = &ev.error {
            result.error = message.clone();
            return Ok(result);
        }
        let mut passed = Vec::with_capacity(req.names.len());
        for (i, (name, verdict)) in req.names.into_iter().zip(&ev.verdicts).enumerate() {
            match verdict {
                Verdict::Passed(_) => passed.push((i, name)),
                Verdict::Failed(m) => {
                    result.failed_nodes.insert(name, m.clone());
                }
                Verdict::Unresolvable(m) => {
                    result.failed_and_unresolvable_nodes.insert(name, m.clone());
                }
            }
        }
        match &req.candidates {
            Candidates::Names(_) => {
                result.node_names = Some(passed.into_iter().map(|(_, n)| n).collect());
            }
            Candidates::Full(list, _) => {
                result.nodes = Some(NodeList {
                    metadata: list.metadata.clone(),
                    items: passed.iter().map(|(i, _)| list.items[*i].clone()).collect(),
                });
            }
        }
        Ok(result)
    }

    /// `/prioritize`: a 0..=10 score per candidate, in request order.
    pub fn prioritize(&self, args: ExtenderArgs) -> Result<Vec<HostPriority>, ExtenderError> {
        let req = request(args)?;
        let ev = match self.recent.get(&req.pod.uid) {
            Some(ev) if ev.covers(&req.names) => ev,
            _ => Arc::new(self.evaluate(&req)),
        };
        Ok(req
            .names
            .into_iter()
            .map(|host| HostPriority {
                score: ev.score(&host),
                host,
            })
            .collect())
    }
}

/// The 0..=10 score of each feasible node of a decision, dense by snapshot index (0 for
/// the others).
fn scores(d: &Decision, nodes: usize) -> Vec<i64> {
    let total_weight: i64 = d.scores.iter().map(|c| c.weight).sum();
    let mut out = vec![0; nodes];
    if d.totals.len() == d.feasible.len() {
        for (idx, total) in d.feasible.iter().zip(&d.totals) {
            if let Some(slot) = out.get_mut(*idx as usize) {
                *slot = scale(*total, total_weight);
            }
        }
    }
    out
}

/// Scales a weighted total (0..=100 per unit of weight) to 0..=10, rounding to nearest.
pub fn scale(total: i64, total_weight: i64) -> i64 {
    if total_weight <= 0 {
        return 0;
    }
    let max = headroom_scheduler::framework::MAX_NODE_SCORE * total_weight;
    ((total.clamp(0, max) * MAX_EXTENDER_PRIORITY * 2 + max) / (2 * max))
        .clamp(0, MAX_EXTENDER_PRIORITY)
}

/// The rejecting status of each snapshot node (dense by index; `None`: not rejected).
fn rejections(d: &Decision, nodes: usize) -> Vec<Option<&Status>> {
    let mut out: Vec<Option<&Status>> = match &d.absent {
        // PreFilter rejected the pod or restricted the nodes: every node neither rejected
        // nor feasible carries that status.
        Some(absent) => vec![Some(absent); nodes],
        None => vec![None; nodes],
    };
    if d.absent.is_some() {
        for idx in &d.feasible {
            if let Some(slot) = out.get_mut(*idx as usize) {
                *slot = None;
            }
        }
    }
    for (idx, s) in &d.rejected {
        if let Some(slot) = out.get_mut(*idx as usize) {
            *slot = Some(s);
        }
    }
    out
}

/// Runs one verb's `work` and records how long it took under `verb`, whatever it answers.
async fn timed(
    state: &ExtenderState,
    verb: &'static str,
    work: impl std::future::Future<Output = Response>,
) -> Response {
    let started = std::time::Instant::now();
    let r = work.await;
    state.metrics.observe(verb, started);
    r
}

/// The verb's answer as JSON, or its error's response.
fn json_or_error<T: Serialize>(r: Result<T, ExtenderError>) -> Response {
    match r {
        Ok(r) => axum::Json(r).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn filter_handler(State(state): State<ExtenderState>, body: Bytes) -> Response {
    timed(&state, "filter", async {
        json_or_error(parse::<ExtenderArgs>("ExtenderArgs", &body).and_then(|a| state.filter(a)))
    })
    .await
}

async fn prioritize_handler(State(state): State<ExtenderState>, body: Bytes) -> Response {
    timed(&state, "prioritize", async {
        json_or_error(
            parse::<ExtenderArgs>("ExtenderArgs", &body).and_then(|a| state.prioritize(a)),
        )
    })
    .await
}

async fn bind_handler(State(state): State<ExtenderState>, body: Bytes) -> Response {
    timed(&state, "bind", bind(&state, body)).await
}

async fn bind(state: &ExtenderState, body: Bytes) -> Response {
    let args = match parse::<ExtenderBindingArgs>("ExtenderBindingArgs", &body) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    // The uid is the bind's precondition (a pod deleted and recreated under the same
    // name is not bound by mistake): a bind without one is refused, not sent unguarded.
    let missing = [
        ("PodName", args.pod_name.is_empty()),
        ("PodNamespace", args.pod_namespace.is_empty()),
        ("PodUID", args.pod_uid.is_empty()),
        ("Node", args.node.is_empty()),
    ];
    if let Some((field, _)) = missing.iter().find(|(_, m)| *m) {
        return ExtenderError::BadRequest {
            kind: "ExtenderBindingArgs",
            path: (*field).to_string(),
            message: "missing".into(),
        }
        .into_response();
    }
    // Only to a node this scheduler knows (kube-scheduler's own node list and ours come
    // from the same API server).
    let mut known = false;
    state
        .snapshot
        .lend(&mut |s| known = s.get(&args.node).is_some());
    if !known {
        return axum::Json(ExtenderBindingResult {
            error: format!("node {:?} is not known to headroom", args.node),
        })
        .into_response();
    }
    let error = match &state.binder {
        None => "binding is not enabled on this extender".to_string(),
        Some(b) => match b.bind(&args).await {
            Ok((pod, outcome)) => {
                let error = outcome.error().unwrap_or_default().to_string();
                if let Some(s) = &state.settle {
                    s.settle(pod, &args.node, outcome).await;
                }
                error
            }
            Err(e) => e,
        },
    };
    axum::Json(ExtenderBindingResult { error }).into_response()
}

/// The extender routes: `POST /extender/filter`, `/extender/prioritize`, `/extender/bind`
/// (so the kube-scheduler `urlPrefix` is `http://HOST:PORT/extender`).
pub fn router(state: ExtenderState) -> Router {
    Router::new()
        .route("/extender/filter", post(filter_handler))
        .route("/extender/prioritize", post(prioritize_handler))
        .route("/extender/bind", post(bind_handler))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default extender profile over `snapshot`, without a binder.
    fn default_state(snapshot: Arc<dyn ExtenderSnapshots>) -> ExtenderState {
        let cfg = crate::config::serve::ExtenderConfig::default();
        let fw = headroom_scheduler::plugins::build_framework_with(
            &cfg.profile(),
            &headroom_scheduler::plugins::PluginDeps::default(),
        )
        .unwrap();
        ExtenderState {
            framework: Arc::new(fw),
            snapshot,
            binder: None,
            settle: None,
            recent: Default::default(),
            metrics: Default::default(),
        }
    }

    #[test]
    fn scale_maps_weighted_totals_to_0_10() {
        assert_eq!(scale(0, 3), 0);
        assert_eq!(scale(300, 3), 10);
        assert_eq!(scale(150, 3), 5);
        assert_eq!(scale(14, 1), 1);
        assert_eq!(scale(15, 1), 2);
        assert_eq!(scale(999, 1), 10);
        assert_eq!(scale(50, 0), 0);
    }

    #[test]
    fn unknown_node_names_fail_unresolvable() {
        // Regression (issue #15, 11): names headroom does not know were passed in NodeNames.
        let (nodes, pods) = headroom_scheduler::synthetic::cluster(3, 0, 1);
        let known: Vec<String> = nodes
            .iter()
            .map(|n| n.metadata.name.clone().unwrap_or_default())
            .collect();
        let snap = Arc::new(Snapshot::build(nodes, pods));
        let state = default_state(Arc::new(move || snap.clone()));
        let mut names = known.clone();
        names.insert(1, "x".to_string());
        names.push("n".repeat(10_000));
        let args = ExtenderArgs {
            pod: Some(headroom_scheduler::synthetic::plain_pod("p")),
            nodes: None,
            node_names: Some(names),
        };
        let r = state.filter(args.clone()).unwrap();
        assert_eq!(r.node_names.as_ref(), Some(&known));
        assert_eq!(
            r.failed_and_unresolvable_nodes["x"],
            "node \"x\" is not known to headroom"
        );
        assert_eq!(r.failed_and_unresolvable_nodes.len(), 2);
        assert!(r.failed_nodes.is_empty() && r.error.is_empty());
        // Prioritize still answers every name, unknown ones with 0.
        let p = state.prioritize(args).unwrap();
        assert_eq!(p.len(), 5);
        assert_eq!(
            p[1],
            HostPriority {
                host: "x".into(),
                score: 0
            }
        );
    }

    /// kube-scheduler's `prioritize` right after `filter` for the same pod reuses the
    /// filter's cycle (no second snapshot read), with the scores a fresh cycle gives; nodes
    /// the filter did not judge, or another pod, get a cycle of their own.
    #[test]
    fn prioritize_reuses_the_filters_evaluation() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (nodes, pods) = headroom_scheduler::synthetic::cluster(20, 3, 7);
        let names: Vec<String> = nodes
            .iter()
            .map(|n| n.metadata.name.clone().unwrap_or_default())
            .collect();
        let snap = Arc::new(Snapshot::build(nodes, pods));
        let reads = Arc::new(AtomicUsize::new(0));
        let cfg: crate::config::serve::ExtenderConfig = serde_norway::from_str(
            "plugins: {NodeResourcesFit: {enabled: true}, TaintToleration: {enabled: true}}",
        )
        .unwrap();
        let fw = Arc::new(
            headroom_scheduler::plugins::build_framework_with(
                &cfg.profile(),
                &headroom_scheduler::plugins::PluginDeps::default(),
            )
            .unwrap(),
        );
        let state = |reads: Arc<AtomicUsize>| {
            let snap = snap.clone();
            ExtenderState {
                framework: fw.clone(),
                snapshot: Arc::new(move || {
                    reads.fetch_add(1, Ordering::SeqCst);
                    snap.clone()
                }),
                binder: None,
                settle: None,
                recent: Default::default(),
                metrics: Default::default(),
            }
        };
        let args = |pod: &str, names: &[String]| ExtenderArgs {
            pod: Some(headroom_scheduler::synthetic::plain_pod(pod)),
            nodes: None,
            node_names: Some(names.to_vec()),
        };
        let st = state(reads.clone());
        let asked = &names[..15];
        let passed = st.filter(args("p", asked)).unwrap().node_names.unwrap();
        assert!(passed.len() > 5, "{passed:?}");
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        let reused = st.prioritize(args("p", &passed)).unwrap();
        assert_eq!(
            reads.load(Ordering::SeqCst),
            1,
            "answered from the filter's cycle"
        );
        let fresh = state(Arc::new(AtomicUsize::new(0)))
            .prioritize(args("p", &passed))
            .unwrap();
        assert_eq!(reused, fresh);
        assert!(reused.iter().any(|h| h.score > 0));
        // A node the filter was not asked about: a cycle of its own.
        st.prioritize(args("p", &names[14..16])).unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        // Another pod: likewise.
        st.prioritize(args("q", &passed)).unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 3);
    }

    /// Under `serve` a request leases the cache's snapshot: a watch write that arrives
    /// during the evaluation waits for it (the request reads one state) and copies
    /// nothing; the next request reads the write.
    #[test]
    fn requests_lease_the_cache_snapshot() {
        let (nodes, pods) = headroom_scheduler::synthetic::cluster(3, 0, 1);
        let cache = Arc::new(headroom_scheduler::cache::Cache::new(
            std::time::Duration::from_secs(30),
        ));
        cache.update(|c| c.replace(Snapshot::build(nodes, pods)));
        let copies = cache.copies();
        let names: Vec<String> = cache
            .snapshot()
            .names()
            .iter()
            .map(|n| n.to_string())
            .collect();
        let during = cache.clone();
        let first = names[0].clone();
        cache.lend(&mut |s| {
            let gone = first.clone();
            during.write(move |c| {
                c.snapshot_mut().remove_node(&gone);
            });
            assert!(s.get(&first).is_some(), "the lease reads one state");
        });
        assert!(cache.snapshot().get(&names[0]).is_none(), "applied after");
        assert_eq!(copies.get(), 0, "queued, not copied");
        let state = default_state(cache.clone());
        let r = state
            .filter(ExtenderArgs {
                pod: Some(headroom_scheduler::synthetic::plain_pod("p")),
                nodes: None,
                node_names: Some(names.clone()),
            })
            .unwrap();
        assert_eq!(r.node_names.as_deref(), Some(&names[1..]));
        assert!(r.failed_and_unresolvable_nodes.contains_key(&names[0]));
        assert_eq!(copies.get(), 0);
    }

    #[test]
    fn bad_json_names_the_field() {
        let e = parse::<ExtenderArgs>("ExtenderArgs", br#"{"Pod": {"spec": {"containers": 5}}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("invalid ExtenderArgs at Pod.spec.containers"),
            "{e}"
        );
        let e = request(ExtenderArgs::default()).err().unwrap().to_string();
        assert!(e.contains("Pod: missing"), "{e}");
    }
}

//! The inspection API (axum): why a pod went where it went, what nodes really use, what
//! builders need, what is pending, and the Prometheus metrics.
//!
//! | route | what |
//! |---|---|
//! | `GET /explain/{namespace}/{pod}` | the pod's latest decision ([`ExplainResponse`](crate::decisions::ExplainResponse)); `?format=text` for the table |
//! | `GET /explain?uid=UID` | the same, by uid (`?pod=NS/NAME` works too) |
//! | `GET /nodes`, `GET /nodes/{name}` | requested vs measured usage, headroom, freshness |
//! | `GET /builders`, `GET /builders/{id}` | builder profiles, runs, placement history (`id` may contain `/`) |
//! | `GET /queue` | pending pods, where they wait and why |
//! | `GET /advice` | hot nodes by real usage and the moves that would help most ([`crate::advice`]); `?format=text` |
//! | `GET /ui`, `/ui/pods/{namespace}/{pod}`, `/ui/nodes`, `/ui/queue`, `/ui/advice` | the same as HTML pages for people (the `ui` module) |
//! | `GET /metrics` | Prometheus exposition (see [`crate::metrics`]) |
//! | `GET /healthz`, `GET /readyz` | liveness; readiness as set by the owner |
//!
//! Every error is a status code with a JSON body `{"error": "..."}`.
//!
//! [`ApiState`] holds handles only (cheap to clone); whoever runs the scheduler owns the
//! data: the snapshot (via a [`SnapshotSource`], e.g. the cache), the usage
//! view (the one in the snapshot: what the scheduler decides on), the queue, the store. Decisions
//! reach the [`DecisionLog`] through [`crate::decisions::run_decision_sink`], which reads the scheduling
//! loop's decision channel.

mod advice;
mod builders;
mod explain;
mod nodes;
mod queue;
mod system;
mod ui;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use headroom_storage::Store;
use tokio::sync::watch;

pub use builders::{BuilderList, BuilderView};
pub use nodes::{NodeList, NodeView, ResourceAmounts};
pub use queue::QueueResponse;

use crate::analytics::UsageView;
use crate::decisions::DecisionLog;
use crate::metrics::Metrics;
use headroom_scheduler::cache::Cache;
use headroom_scheduler::queue::{PendingPod, QueueLengths, SchedulingQueue};
use headroom_scheduler::snapshot::Snapshot;
use headroom_scheduler::usage::UsagePolicy;

/// Errors the API answers with; each maps to a status code and a JSON body
/// `{"error": "<message>"}`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 404: the pod, node, builder or route is unknown.
    #[error("{0}")]
    NotFound(String),
    /// 400: a malformed path or query.
    #[error("{0}")]
    BadRequest(String),
    /// 503: not ready, or a part this server was started without (no queue, no store).
    #[error("{0}")]
    Unavailable(String),
    /// 500: the store or the metrics encoder failed.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// The status code.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if matches!(self, ApiError::Internal(_)) {
            tracing::warn!(error = %self, "API request failed");
        }
        (
            self.status(),
            Json(serde_json::json!({"error": self.to_string()})),
        )
            .into_response()
    }
}

impl From<headroom_storage::Error> for ApiError {
    fn from(e: headroom_storage::Error) -> Self {
        ApiError::Internal(format!("store: {e}"))
    }
}

/// Where the API reads the current cluster snapshot.
pub trait SnapshotSource: Send + Sync {
    /// The snapshot now (an `Arc` clone; never held across a cycle).
    fn current(&self) -> Arc<Snapshot>;
}

impl SnapshotSource for watch::Receiver<Arc<Snapshot>> {
    fn current(&self) -> Arc<Snapshot> {
        self.borrow().clone()
    }
}

/// The cache's snapshot as written so far, assumed pods included. Takes the cache's lock
/// for an `Arc` clone: a request never waits for a cycle.
impl SnapshotSource for Cache {
    fn current(&self) -> Arc<Snapshot> {
        self.snapshot()
    }
}

/// Where the API reads the pending pods.
pub trait QueueView: Send + Sync {
    /// Every pending pod and why (see [`SchedulingQueue::pending`]).
    fn pending(&self) -> Vec<PendingPod>;
    /// Pods per place.
    fn lengths(&self) -> QueueLengths;
    /// Unschedulable pods per (profile, rejecting plugin) (see
    /// [`SchedulingQueue::unschedulable_by_plugin`]).
    fn unschedulable_by_plugin(&self) -> std::collections::BTreeMap<(String, &'static str), usize>;
}

impl QueueView for SchedulingQueue {
    fn pending(&self) -> Vec<PendingPod> {
        SchedulingQueue::pending(self)
    }

    fn lengths(&self) -> QueueLengths {
        self.len()
    }

    fn unschedulable_by_plugin(&self) -> std::collections::BTreeMap<(String, &'static str), usize> {
        SchedulingQueue::unschedulable_by_plugin(self)
    }
}

/// The clock the API judges freshness by, ms since the epoch.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Wall-clock time, ms since the epoch.
pub fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// How long the runs-per-node gauge is reused before the store is read again: it scans
/// every builder's runs, too much for every scrape on a big store.
const RUNS_PER_NODE_TTL: Duration = Duration::from_secs(30);

/// Runs per node and when they were read.
type RunsCache = (std::time::Instant, HashMap<String, u64>);

/// What the handlers share. Clone it freely: every field is a handle.
#[derive(Clone)]
pub struct ApiState {
    decisions: Arc<DecisionLog>,
    snapshot: Arc<dyn SnapshotSource>,
    policy: Arc<UsagePolicy>,
    queue: Option<Arc<dyn QueueView>>,
    store: Option<Store>,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    clock: Clock,
    runs_cache: Arc<Mutex<Option<RunsCache>>>,
    advice: Arc<crate::advice::AdviceConfig>,
    identity: Arc<headroom_collectors::IdentityConfig>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("decisions", &self.decisions)
            .field("queue", &self.queue.is_some())
            .field("store", &self.store.is_some())
            .field("ready", &self.is_ready())
            .finish_non_exhaustive()
    }
}

impl ApiState {
    /// State over a snapshot source and metrics, with an empty default [`DecisionLog`], no
    /// queue, no store, the wall clock, the default usage policy, and not ready. The usage
    /// view is the one in the snapshot's usage context: what the scheduler decides on.
    pub fn new(snapshot: Arc<dyn SnapshotSource>, metrics: Arc<Metrics>) -> ApiState {
        ApiState {
            decisions: Arc::new(DecisionLog::default()),
            snapshot,
            policy: Arc::new(UsagePolicy::default()),
            queue: None,
            store: None,
            metrics,
            ready: Arc::new(AtomicBool::new(false)),
            clock: Arc::new(wall_clock_ms),
            runs_cache: Arc::new(Mutex::new(None)),
            advice: Arc::new(crate::advice::AdviceConfig::default()),
            identity: Arc::new(headroom_collectors::IdentityConfig::default()),
        }
    }

    /// Computes the descheduling advice with these thresholds, naming builders by this
    /// identity rule (the configuration's `advice` and `collectors.identity`).
    pub fn with_advice(
        mut self,
        advice: crate::advice::AdviceConfig,
        identity: headroom_collectors::IdentityConfig,
    ) -> ApiState {
        self.advice = Arc::new(advice);
        self.identity = Arc::new(identity);
        self
    }

    /// The descheduling advice for the current snapshot, judged as the scheduler judges
    /// headroom.
    pub fn advice(&self) -> crate::advice::Advice {
        crate::advice::advise(&self.snapshot(), &self.policy, &self.identity, &self.advice)
    }

    /// Judges headroom and staleness by this usage policy (the configuration's `usage`
    /// section), as the scheduler does.
    pub fn with_policy(mut self, policy: Arc<UsagePolicy>) -> ApiState {
        self.policy = policy;
        self
    }

    /// The usage policy.
    pub fn policy(&self) -> &UsagePolicy {
        &self.policy
    }

    /// Serves `/queue` and the queue gauges from this queue.
    pub fn with_queue(mut self, queue: Arc<dyn QueueView>) -> ApiState {
        self.queue = Some(queue);
        self
    }

    /// Persists decisions to, and looks older ones up in, this store; builder runs and
    /// placement history and the store gauges come from it too.
    pub fn with_store(mut self, store: Store) -> ApiState {
        self.store = Some(store);
        self
    }

    /// Uses this decision log (e.g. with other limits).
    pub fn with_decision_log(mut self, log: Arc<DecisionLog>) -> ApiState {
        self.decisions = log;
        self
    }

    /// Judges freshness by this clock (the simulator's simulated time).
    pub fn with_clock(mut self, clock: Clock) -> ApiState {
        self.clock = clock;
        self
    }

    /// Marks the server ready (`/readyz` answers 200) or not (503).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The decision log.
    pub fn decisions(&self) -> &Arc<DecisionLog> {
        &self.decisions
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The store, if any.
    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    /// Now, by the state's clock.
    pub fn now_ms(&self) -> i64 {
        (self.clock)()
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.current()
    }

    /// The current usage view: the one in the scheduler's snapshot.
    pub fn usage_view(&self) -> Arc<UsageView> {
        self.snapshot().usage().view.clone()
    }

    /// Sets every gauge from the current state (snapshot, usage view, queue, store,
    /// decision log) and encodes the exposition.
    pub async fn render_metrics(&self) -> Result<String, ApiError> {
        let runs = self.runs_per_node().await;
        let snapshot = self.snapshot();
        let view = snapshot.usage().view.clone();
        let now = self.now_ms();
        let store_stats = self.store.as_ref().map(|s| (s.stats(), s.decision_count()));
        let lengths = self
            .queue
            .as_ref()
            .map(|q| (q.lengths(), q.unschedulable_by_plugin()));
        let (entries, bytes) = self.decisions.size();
        let advice = crate::advice::advise(&snapshot, &self.policy, &self.identity, &self.advice);
        self.metrics
            .refresh_and_encode(|m| {
                m.set_node_usage(&snapshot, &self.policy, now);
                m.set_advice(&advice);
                m.set_builder_profiles(&view);
                if let Some((l, by_plugin)) = &lengths {
                    m.set_queue_lengths(l);
                    m.upstream().set_unschedulable(by_plugin);
                }
                if let Some((stats, decisions)) = &store_stats {
                    m.set_store_stats(stats, *decisions);
                }
                if let Some(r) = &runs {
                    m.set_runs_per_node(r);
                }
                m.set_decision_log(entries, bytes);
            })
            .map_err(|e| ApiError::Internal(e.to_string()))
    }

    /// Runs per node from the store, recomputed at most every [`RUNS_PER_NODE_TTL`];
    /// `None` without a store (or when reading it failed: the gauge keeps its last value).
    async fn runs_per_node(&self) -> Option<HashMap<String, u64>> {
        let store = self.store.clone()?;
        {
            let cache = self.runs_cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((at, counts)) = &*cache
                && at.elapsed() < RUNS_PER_NODE_TTL
            {
                return Some(counts.clone());
            }
        }
        let counts =
            tokio::task::spawn_blocking(move || crate::metrics::runs_per_node(&store)).await;
        match counts {
            Ok(Ok(counts)) => {
                *self.runs_cache.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((std::time::Instant::now(), counts.clone()));
                Some(counts)
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "runs per node: reading the store failed");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "runs per node: task failed");
                None
            }
        }
    }
}

/// The API's routes over `state`. `headroom simulate --serve` and `headroom serve` mount
/// the same router.
pub fn router(state: ApiState) -> Router {
    routes_with(state, true)
}

/// The API's routes without `/healthz` and `/readyz`, for a server that answers those
/// itself (`headroom serve`: ready when its caches synced, and as leader or follower).
pub fn routes(state: ApiState) -> Router {
    routes_with(state, false)
}

/// The routes that read decisions and state, without `/metrics` and the probes: what
/// `serve.viewerListen` serves to `kubectl headroom` through the API server's service proxy.
pub fn viewer_routes(state: ApiState) -> Router {
    inspection_routes()
        .fallback(system::not_found)
        .with_state(state)
}

fn inspection_routes() -> Router<ApiState> {
    Router::new()
        .route("/explain", get(explain::by_query))
        .route("/explain/{namespace}/{pod}", get(explain::by_pod))
        .route("/nodes", get(nodes::list))
        .route("/nodes/{name}", get(nodes::one))
        .route("/builders", get(builders::list))
        .route("/builders/{*id}", get(builders::one))
        .route("/queue", get(queue::pending))
        .route("/advice", get(advice::advice))
        .merge(ui::routes())
}

fn routes_with(state: ApiState, health: bool) -> Router {
    let r = inspection_routes().route("/metrics", get(system::metrics));
    let r = if health {
        r.route("/healthz", get(system::healthz))
            .route("/readyz", get(system::readyz))
    } else {
        r
    };
    r.fallback(system::not_found).with_state(state)
}

/// Serves the router on `listener` until `shutdown` completes (in-flight requests finish).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: ApiState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

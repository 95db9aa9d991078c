//! headroom's own Prometheus metrics, on one `prometheus-client` registry that `/metrics`
//! serves.
//!
//! Counters and histograms are fed as things happen ([`Metrics::observe_decision`],
//! [`Metrics::observe_bind`], [`Metrics::observe_placement`]); gauges describe current
//! state and are set from it ([`Metrics::set_queue_lengths`], [`Metrics::set_node_usage`],
//! [`Metrics::set_builder_profiles`], [`Metrics::set_store_stats`],
//! [`Metrics::set_runs_per_node`]). The inspection API sets the gauges from the current
//! snapshot, usage view, queue and store right before it encodes, so a scrape always sees
//! the present; a caller without the API can call the setters and [`Metrics::encode`] itself.
//! Nothing here reads a clock: times come in as arguments, so the simulator's simulated
//! clock and `serve`'s wall clock are both right.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `headroom_scheduler_schedule_attempts_total` | counter | `result` = scheduled, unschedulable, error |
//! | `headroom_scheduler_decision_duration_seconds` | histogram | |
//! | `headroom_scheduler_filter_rejections_total` | counter | `plugin`, `reason` (one per rejected node) |
//! | `headroom_scheduler_binds_total` | counter | `result` = success, error |
//! | `headroom_scheduler_bind_duration_seconds` | histogram | |
//! | `headroom_scheduler_placements_total` | counter | `cache` = warm, cold, unknown |
//! | `headroom_scheduler_fallback_placements_total` | counter | |
//! | `headroom_scheduler_warm_holds_total` | counter | |
//! | `headroom_scheduler_snapshot_copies_total` | counter | (registered by the engine: changes that copied the whole snapshot because a reader held it) |
//! | `headroom_scheduler_cache_write_panics_total` | counter | (registered by the engine: cache writes, a change or its follow-up, that panicked; caught, the others applied) |
//! | `headroom_scheduler_decisions_summarized_total` | counter | (registered by the engine: decisions queued for the sink as summaries, their explanation shortened, because the queue was over its byte budget; what overload sheds) |
//! | `headroom_extender_request_duration_seconds` | histogram | `verb` = filter, prioritize, bind (registered by `serve` when the extender is on) |
//! | `headroom_queue_pending_pods` | gauge | `queue` = active, backoff, unschedulable, gated, in_flight |
//! | `headroom_node_cpu_cores` | gauge | `node`, `kind` |
//! | `headroom_node_memory_bytes` | gauge | `node`, `kind` |
//! | `headroom_node_disk_bytes` | gauge | `node`, `kind` |
//! | `headroom_node_usage_age_seconds` | gauge | `node` |
//! | `headroom_advice_hot_nodes` | gauge | |
//! | `headroom_advice_moves` | gauge | |
//! | `headroom_advice_memory_excess_bytes` | gauge | |
//! | `headroom_usage_nodes` | gauge | |
//! | `headroom_usage_stale_nodes` | gauge | |
//! | `headroom_usage_view_age_seconds` | gauge | |
//! | `headroom_builder_cpu_cores` | gauge | `builder`, `quantile` |
//! | `headroom_builder_memory_bytes` | gauge | `builder`, `quantile` |
//! | `headroom_builder_profile_runs` | gauge | `builder` |
//! | `headroom_builder_runs_per_node` | gauge | `node` |
//! | `headroom_store_size_bytes` | gauge | `part` = disk, head_chunks, index, pending_wal |
//! | `headroom_store_series` | gauge | |
//! | `headroom_store_decisions` | gauge | |
//! | `headroom_store_compactions_total` | counter | |
//! | `headroom_api_decision_log_entries` | gauge | |
//! | `headroom_api_decision_log_bytes` | gauge | |
//! | `headroom_api_decision_store_errors_total` | counter | |
//! | `headroom_collector_*` | | see `headroom-collectors` |
//! | `scheduler_*` | | kube-scheduler's own, under upstream's names ([`Upstream`]) |
//!
//! `headroom_usage_view_age_seconds` is `+Inf` until a usage view was computed.
//!
//! `kind` on the node gauges: `allocatable`, `requested` (sum of the pods' requests),
//! `used` (newest measured sample), `used_windowed` (the windowed quantile), `headroom`
//! (what the node really has free by the scheduler's own definition,
//! [`headroom_scheduler::usage::Headroom`]: capacity minus the larger of current and windowed usage and
//! the pods placed since the newest sample, or minus requests where usage is stale or
//! missing; for disk, the free space after recent placements), and for disk `capacity`
//! (filesystem size). Measured kinds are absent for a node without usage data; `headroom_usage_stale_nodes` counts those and the ones whose newest
//! sample is older than the usage policy's `staleAfter`.
//!
//! Cardinality is bounded: builder gauges cover the [`MetricsOptions::max_builders`] most
//! recently active builders, and rejection reasons beyond
//! [`MetricsOptions::max_rejection_reasons`] distinct `(plugin, reason)` pairs are counted
//! under `reason="other"` (upstream's reasons are fixed strings, but a plugin may put
//! numbers in one).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::analytics::UsageView;
use headroom_scheduler::framework::{
    BindOutcome, BindPlugin, BoxFuture, Decision, Outcome, Plugin,
};
use headroom_scheduler::queue::QueueLengths;
use headroom_scheduler::snapshot::{PodInfo, Snapshot};
use headroom_scheduler::usage::{Headroom, UsagePolicy};

mod upstream;
pub use upstream::Upstream;

/// Errors of the metrics module.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// Encoding the exposition failed (a label value the encoder refused).
    #[error("encoding metrics: {0}")]
    Encode(#[from] std::fmt::Error),
    /// Reading the store for a gauge failed.
    #[error("reading the store: {0}")]
    Store(#[from] headroom_storage::Error),
}

/// The content type of [`Metrics::encode`]'s output (OpenMetrics text).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Tuning of the metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricsOptions {
    /// At most this many builders get profile gauges, the most recently active first.
    /// Default 500.
    pub max_builders: usize,
    /// At most this many distinct `(plugin, reason)` label pairs; further reasons count as
    /// `other`. Default 200.
    pub max_rejection_reasons: usize,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        MetricsOptions {
            max_builders: 500,
            max_rejection_reasons: 200,
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectionLabels {
    plugin: String,
    reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabel {
    cache: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    queue: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeKindLabels {
    node: String,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuilderQuantileLabels {
    builder: String,
    quantile: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuilderLabel {
    builder: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartLabel {
    part: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// Whether a placement went to a node the pod's builder ran on before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacementCache {
    /// The node is in the builder's placement history (its caches are likely warm).
    Warm,
    /// The builder has never run there (as far as the history goes).
    Cold,
    /// The builder or its history is not known.
    Unknown,
}

impl PlacementCache {
    fn label(self) -> &'static str {
        match self {
            PlacementCache::Warm => "warm",
            PlacementCache::Cold => "cold",
            PlacementCache::Unknown => "unknown",
        }
    }
}

/// The result label of a decision.
pub fn decision_result(d: &Decision) -> &'static str {
    match d.outcome {
        Outcome::Placed { .. } => "scheduled",
        Outcome::Unschedulable { .. } => "unschedulable",
        Outcome::Error { .. } => "error",
    }
}

/// Every metric headroom exports, and the registry that encodes them. Share it behind an
/// `Arc`; every method takes `&self`.
pub struct Metrics {
    /// Behind a lock so other modules can register their own metrics after construction
    /// ([`Metrics::register`]); encoding takes it briefly.
    registry: Mutex<Registry>,
    options: MetricsOptions,
    attempts: Family<ResultLabel, Counter>,
    decision_duration: Histogram,
    rejections: Family<RejectionLabels, Counter>,
    rejection_keys: Mutex<HashSet<(String, String)>>,
    binds: Family<ResultLabel, Counter>,
    bind_duration: Histogram,
    placements: Family<CacheLabel, Counter>,
    fallback_placements: Counter,
    warm_holds: Counter,
    queue_pending: Family<QueueLabel, Gauge>,
    node_cpu: Family<NodeKindLabels, FloatGauge>,
    node_memory: Family<NodeKindLabels, FloatGauge>,
    node_disk: Family<NodeKindLabels, FloatGauge>,
    node_usage_age: Family<NodeLabel, FloatGauge>,
    advice_hot_nodes: Gauge,
    advice_moves: Gauge,
    advice_excess: FloatGauge,
    usage_nodes: Gauge,
    stale_nodes: Gauge,
    view_age: FloatGauge,
    builder_cpu: Family<BuilderQuantileLabels, FloatGauge>,
    builder_memory: Family<BuilderQuantileLabels, FloatGauge>,
    builder_runs: Family<BuilderLabel, Gauge>,
    runs_per_node: Family<NodeLabel, Gauge>,
    store_bytes: Family<PartLabel, Gauge>,
    store_series: Gauge,
    store_decisions: Gauge,
    store_compactions: Counter,
    log_entries: Gauge,
    log_bytes: Gauge,
    decision_store_errors: Counter,
    upstream: Upstream,
    collectors: headroom_collectors::Metrics,
    /// Held while gauges are rebuilt and encoded, so a scrape never sees a family that a
    /// concurrent refresh has just cleared.
    refresh: Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(MetricsOptions::default())
    }
}

fn latency_histogram() -> Histogram {
    // 100 µs .. ~3.3 s: a cycle on a few nodes to one on thousands with pod affinity.
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

fn bind_histogram() -> Histogram {
    // 1 ms .. ~33 s: an instant simulated bind to an API server at its timeout.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

const QUANTILES: [&str; 5] = ["0.5", "0.9", "0.95", "0.99", "1"];

impl Metrics {
    /// Every metric, registered, with the collectors' metrics included (hand
    /// [`collectors`](Self::collectors) to `Collectors::with_metrics` so their errors show).
    pub fn new(options: MetricsOptions) -> Metrics {
        let m = Metrics {
            registry: Mutex::new(Registry::default()),
            options,
            attempts: Family::default(),
            decision_duration: latency_histogram(),
            rejections: Family::default(),
            rejection_keys: Mutex::new(HashSet::new()),
            binds: Family::default(),
            bind_duration: bind_histogram(),
            placements: Family::default(),
            fallback_placements: Counter::default(),
            warm_holds: Counter::default(),
            queue_pending: Family::default(),
            node_cpu: Family::default(),
            node_memory: Family::default(),
            node_disk: Family::default(),
            node_usage_age: Family::default(),
            advice_hot_nodes: Gauge::default(),
            advice_moves: Gauge::default(),
            advice_excess: FloatGauge::default(),
            usage_nodes: Gauge::default(),
            stale_nodes: Gauge::default(),
            view_age: FloatGauge::default(),
            builder_cpu: Family::default(),
            builder_memory: Family::default(),
            builder_runs: Family::default(),
            runs_per_node: Family::default(),
            store_bytes: Family::default(),
            store_series: Gauge::default(),
            store_decisions: Gauge::default(),
            store_compactions: Counter::default(),
            log_entries: Gauge::default(),
            log_bytes: Gauge::default(),
            decision_store_errors: Counter::default(),
            upstream: Upstream::default(),
            collectors: headroom_collectors::Metrics::new(),
            refresh: Mutex::new(()),
        };
        m.register_all()
    }

    fn register_all(mut self) -> Metrics {
        // Counters whose every label value is known up front start at zero, so a rate is
        // defined (0, not "no data") before the first event.
        for result in ["scheduled", "unschedulable", "error"] {
            let _ = self.attempts.get_or_create(&ResultLabel { result });
        }
        for result in ["success", "error"] {
            let _ = self.binds.get_or_create(&ResultLabel { result });
        }
        for c in [
            PlacementCache::Warm,
            PlacementCache::Cold,
            PlacementCache::Unknown,
        ] {
            let _ = self
                .placements
                .get_or_create(&CacheLabel { cache: c.label() });
        }
        // Registered into a registry of its own, then put in place: registering borrows
        // the metrics while the registry is a field of the same struct.
        let mut r = std::mem::take(self.registry.get_mut().unwrap_or_else(|e| e.into_inner()));
        self.register_scheduler(&mut r);
        self.register_nodes(&mut r);
        self.register_builders_and_store(&mut r);
        self.upstream.register(&mut r);
        self.collectors.register(&mut r);
        *self.registry.get_mut().unwrap_or_else(|e| e.into_inner()) = r;
        self
    }

    /// `headroom_scheduler_*` and `headroom_queue_*`.
    fn register_scheduler(&self, r: &mut Registry) {
        // prometheus-client appends `_total` to counter names when encoding.
        r.register(
            "headroom_scheduler_schedule_attempts",
            "Scheduling cycles by result (scheduled, unschedulable, error)",
            self.attempts.clone(),
        );
        r.register(
            "headroom_scheduler_decision_duration_seconds",
            "Wall time of one scheduling cycle",
            self.decision_duration.clone(),
        );
        r.register(
            "headroom_scheduler_filter_rejections",
            "Nodes rejected by a filter, by plugin and upstream reason",
            self.rejections.clone(),
        );
        r.register(
            "headroom_scheduler_binds",
            "Binds by result (success, error)",
            self.binds.clone(),
        );
        r.register(
            "headroom_scheduler_bind_duration_seconds",
            "Duration of one bind",
            self.bind_duration.clone(),
        );
        r.register(
            "headroom_scheduler_placements",
            "Placements by whether the node is in the builder's placement history (warm, cold, unknown)",
            self.placements.clone(),
        );
        r.register(
            "headroom_scheduler_fallback_placements",
            "Pods placed by the usage fallback: real usage had kept them off every node for usage.maxWait",
            self.fallback_placements.clone(),
        );
        r.register(
            "headroom_scheduler_warm_holds",
            "Cycles the warm wait (usage.warmWait) kept a pod unscheduled, waiting for a node with its build cache",
            self.warm_holds.clone(),
        );
        r.register(
            "headroom_queue_pending_pods",
            "Pending pods per queue",
            self.queue_pending.clone(),
        );
    }

    /// `headroom_node_*`, `headroom_advice_*` and `headroom_usage_*`.
    fn register_nodes(&self, r: &mut Registry) {
        r.register(
            "headroom_node_cpu_cores",
            "Node CPU in cores by kind (allocatable, requested, used, used_windowed, headroom)",
            self.node_cpu.clone(),
        );
        r.register(
            "headroom_node_memory_bytes",
            "Node memory in bytes by kind (allocatable, requested, used, used_windowed, headroom)",
            self.node_memory.clone(),
        );
        r.register(
            "headroom_node_disk_bytes",
            "Node ephemeral storage / root filesystem in bytes by kind (allocatable, requested, capacity, used, headroom)",
            self.node_disk.clone(),
        );
        r.register(
            "headroom_node_usage_age_seconds",
            "Age of the node's newest usage sample",
            self.node_usage_age.clone(),
        );
        r.register(
            "headroom_advice_hot_nodes",
            "Nodes above advice.hotMemoryPercent of real memory (descheduling advice)",
            self.advice_hot_nodes.clone(),
        );
        r.register(
            "headroom_advice_moves",
            "Pod moves the descheduling advice suggests",
            self.advice_moves.clone(),
        );
        r.register(
            "headroom_advice_memory_excess_bytes",
            "Real memory above advice.targetMemoryPercent over the hot nodes",
            self.advice_excess.clone(),
        );
        r.register(
            "headroom_usage_nodes",
            "Nodes in the cluster snapshot",
            self.usage_nodes.clone(),
        );
        r.register(
            "headroom_usage_stale_nodes",
            "Nodes without usage data or whose newest sample is too old",
            self.stale_nodes.clone(),
        );
        r.register(
            "headroom_usage_view_age_seconds",
            "Age of the published usage view",
            self.view_age.clone(),
        );
    }

    /// `headroom_builder_*`, `headroom_store_*` and `headroom_api_*`.
    fn register_builders_and_store(&self, r: &mut Registry) {
        r.register(
            "headroom_builder_cpu_cores",
            "Builder profile: quantile over runs of per-run CPU, cores",
            self.builder_cpu.clone(),
        );
        r.register(
            "headroom_builder_memory_bytes",
            "Builder profile: quantile over runs of per-run memory, bytes",
            self.builder_memory.clone(),
        );
        r.register(
            "headroom_builder_profile_runs",
            "Runs a builder's profile is computed from",
            self.builder_runs.clone(),
        );
        r.register(
            "headroom_builder_runs_per_node",
            "Stored builder runs per node",
            self.runs_per_node.clone(),
        );
        r.register(
            "headroom_store_size_bytes",
            "Store size by part (disk, head_chunks, index, pending_wal)",
            self.store_bytes.clone(),
        );
        r.register(
            "headroom_store_series",
            "Series in the store",
            self.store_series.clone(),
        );
        r.register(
            "headroom_store_decisions",
            "Decision records in the store",
            self.store_decisions.clone(),
        );
        r.register(
            "headroom_store_compactions",
            "Compactions of the store in place (sled rewritten into a fresh database)",
            self.store_compactions.clone(),
        );
        r.register(
            "headroom_api_decision_log_entries",
            "Decisions held in memory for /explain",
            self.log_entries.clone(),
        );
        r.register(
            "headroom_api_decision_log_bytes",
            "Approximate memory held by those decisions",
            self.log_bytes.clone(),
        );
        r.register(
            "headroom_api_decision_store_errors",
            "Decisions that could not be written to or read from the store",
            self.decision_store_errors.clone(),
        );
    }

    /// The options.
    pub fn options(&self) -> &MetricsOptions {
        &self.options
    }

    /// The collectors' metrics handle registered here; pass it to
    /// `headroom_collectors::Collectors::with_metrics`.
    pub fn collectors(&self) -> headroom_collectors::Metrics {
        self.collectors.clone()
    }

    /// Counts one scheduling cycle: its result, its latency, a placement by the usage
    /// fallback, a warm hold, and one rejection per node a filter (or a PreFilter, for the nodes it
    /// excluded) rejected.
    pub fn observe_decision(&self, d: &Decision, latency: Duration) {
        self.upstream.observe_decision(d, latency);
        self.attempts
            .get_or_create(&ResultLabel {
                result: decision_result(d),
            })
            .inc();
        self.decision_duration.observe(latency.as_secs_f64());
        if d.fallback.is_some() && d.node().is_some() {
            self.fallback_placements.inc();
        }
        if d.warm_hold.is_some() {
            self.warm_holds.inc();
        }
        let mut counts: HashMap<(&str, &str), u64> = HashMap::new();
        for (_, s) in &d.rejected {
            for r in &s.reasons {
                *counts.entry((s.plugin, r.as_ref())).or_insert(0) += 1;
            }
        }
        let explicit = d.rejected.len() + d.feasible.len();
        if let Some(absent) = &d.absent
            && absent.is_rejected()
            && explicit < d.num_nodes()
        {
            for r in &absent.reasons {
                *counts.entry((absent.plugin, r.as_ref())).or_insert(0) +=
                    (d.num_nodes() - explicit) as u64;
            }
        }
        if counts.is_empty() {
            return;
        }
        let mut keys = self
            .rejection_keys
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for ((plugin, reason), n) in counts {
            let plugin = if plugin.is_empty() { "unknown" } else { plugin };
            let key = (plugin.to_string(), reason.to_string());
            let reason = if keys.contains(&key) || keys.len() < self.options.max_rejection_reasons {
                keys.insert(key.clone());
                key.1
            } else {
                "other".to_string()
            };
            self.rejections
                .get_or_create(&RejectionLabels {
                    plugin: key.0,
                    reason,
                })
                .inc_by(n);
        }
    }

    /// Pods placed by the usage fallback so far.
    pub fn fallback_placements(&self) -> u64 {
        self.fallback_placements.get()
    }

    /// Cycles the warm wait held a pod in so far.
    pub fn warm_holds(&self) -> u64 {
        self.warm_holds.get()
    }

    /// Sets the descheduling advice gauges.
    pub fn set_advice(&self, a: &crate::advice::Advice) {
        self.advice_hot_nodes
            .set(i64::try_from(a.hot_nodes.len()).unwrap_or(i64::MAX));
        self.advice_moves
            .set(i64::try_from(a.moves).unwrap_or(i64::MAX));
        self.advice_excess.set(a.excess_bytes);
    }

    /// Counts one bind and its duration.
    pub fn observe_bind(&self, success: bool, duration: Duration) {
        let result = if success { "success" } else { "error" };
        self.binds.get_or_create(&ResultLabel { result }).inc();
        self.bind_duration.observe(duration.as_secs_f64());
    }

    /// Counts one placement by whether its node was in the builder's history.
    pub fn observe_placement(&self, cache: PlacementCache) {
        self.placements
            .get_or_create(&CacheLabel {
                cache: cache.label(),
            })
            .inc();
    }

    /// Counts a decision that could not be persisted or read back.
    pub fn count_decision_store_error(&self) {
        self.decision_store_errors.inc();
    }

    /// Sets the in-memory decision log's size.
    pub fn set_decision_log(&self, entries: usize, bytes: usize) {
        self.log_entries.set(to_i64(entries));
        self.log_bytes.set(to_i64(bytes));
    }

    /// kube-scheduler's metrics under upstream's names ([`Upstream`]).
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// Sets the pending pods per queue.
    pub fn set_queue_lengths(&self, l: &QueueLengths) {
        self.upstream.set_pending(l);
        for (queue, n) in [
            ("active", l.active),
            ("backoff", l.backoff),
            ("unschedulable", l.unschedulable),
            ("gated", l.gated),
            ("in_flight", l.in_flight),
        ] {
            self.queue_pending
                .get_or_create(&QueueLabel { queue })
                .set(to_i64(n));
        }
    }

    /// Rebuilds the per-node gauges from the snapshot (allocatable, requested) and the
    /// usage view (measured usage, headroom, age) as of `now_ms` (ms since the epoch). Nodes
    /// that left the snapshot disappear from the gauges.
    pub fn set_node_usage(&self, snapshot: &Snapshot, policy: &UsagePolicy, now_ms: i64) {
        for f in [&self.node_cpu, &self.node_memory, &self.node_disk] {
            f.clear();
        }
        self.node_usage_age.clear();
        let ctx = snapshot.usage();
        let view = &ctx.view;
        let stale_ms = i64::try_from(policy.stale_after.as_millis()).unwrap_or(i64::MAX);
        let mut stale = 0i64;
        for n in snapshot.nodes() {
            let name = n.name.to_string();
            let set = |f: &Family<NodeKindLabels, FloatGauge>, kind: &'static str, v: f64| {
                f.get_or_create(&NodeKindLabels {
                    node: name.clone(),
                    kind,
                })
                .set(v);
            };
            set(
                &self.node_cpu,
                "allocatable",
                n.allocatable.milli_cpu as f64 / 1000.0,
            );
            set(
                &self.node_cpu,
                "requested",
                n.requested.milli_cpu as f64 / 1000.0,
            );
            set(
                &self.node_memory,
                "allocatable",
                n.allocatable.memory as f64,
            );
            set(&self.node_memory, "requested", n.requested.memory as f64);
            set(
                &self.node_disk,
                "allocatable",
                n.allocatable.ephemeral_storage as f64,
            );
            set(
                &self.node_disk,
                "requested",
                n.requested.ephemeral_storage as f64,
            );
            // The scheduler's own headroom (measured + recent placements, or requests
            // where usage is stale or missing): the number it decides on.
            let h = Headroom::of(n, ctx, policy);
            set(&self.node_cpu, "headroom", h.cpu_free());
            set(&self.node_memory, "headroom", h.memory_free());
            if let Some(free) = h.disk_free_bytes {
                set(&self.node_disk, "headroom", free);
            }
            let Some(u) = view.node(&n.name) else {
                stale += 1;
                continue;
            };
            let age_ms = now_ms.saturating_sub(u.newest_ms).max(0);
            if age_ms > stale_ms {
                stale += 1;
            }
            self.node_usage_age
                .get_or_create(&NodeLabel { node: name.clone() })
                .set(age_ms as f64 / 1000.0);
            set(&self.node_cpu, "used", u.cpu_cores.current);
            set(&self.node_cpu, "used_windowed", u.cpu_cores.windowed);
            set(
                &self.node_memory,
                "used",
                u.memory_working_set_bytes.current,
            );
            set(
                &self.node_memory,
                "used_windowed",
                u.memory_working_set_bytes.windowed,
            );
            if let Some(cap) = u.fs_capacity_bytes {
                set(&self.node_disk, "capacity", cap);
                if let Some(avail) = u.fs_available_bytes {
                    set(&self.node_disk, "used", cap - avail.current);
                    set(&self.node_disk, "used_windowed", cap - avail.windowed);
                }
            }
        }
        self.usage_nodes.set(to_i64(snapshot.len()));
        self.stale_nodes.set(stale);
        let view_age = if view.generated_ms > 0 {
            now_ms.saturating_sub(view.generated_ms).max(0) as f64 / 1000.0
        } else {
            // Never computed: as old as it gets, not "fresh".
            f64::INFINITY
        };
        self.view_age.set(view_age);
    }

    /// Rebuilds the builder profile gauges from the view: the
    /// [`max_builders`](MetricsOptions::max_builders) builders with the newest runs.
    pub fn set_builder_profiles(&self, view: &UsageView) {
        self.builder_cpu.clear();
        self.builder_memory.clear();
        self.builder_runs.clear();
        let mut profiles: Vec<_> = view.builders.values().collect();
        profiles.sort_by(|a, b| {
            b.newest_ms
                .cmp(&a.newest_ms)
                .then_with(|| a.builder.cmp(&b.builder))
        });
        for p in profiles.into_iter().take(self.options.max_builders) {
            let cpu = [p.cpu.p50, p.cpu.p90, p.cpu.p95, p.cpu.p99, p.cpu.max];
            let mem = [
                p.memory.p50,
                p.memory.p90,
                p.memory.p95,
                p.memory.p99,
                p.memory.max,
            ];
            for (i, quantile) in QUANTILES.iter().enumerate() {
                let labels = BuilderQuantileLabels {
                    builder: p.builder.clone(),
                    quantile,
                };
                self.builder_cpu.get_or_create(&labels).set(cpu[i]);
                self.builder_memory.get_or_create(&labels).set(mem[i]);
            }
            self.builder_runs
                .get_or_create(&BuilderLabel {
                    builder: p.builder.clone(),
                })
                .set(to_i64(p.runs));
        }
    }

    /// Sets the store gauges.
    pub fn set_store_stats(&self, stats: &headroom_storage::StoreStats, decisions: usize) {
        for (part, v) in [
            ("disk", stats.disk_bytes),
            ("head_chunks", stats.head_chunk_bytes),
            ("index", stats.index_bytes),
            ("pending_wal", stats.pending_wal_bytes),
        ] {
            self.store_bytes
                .get_or_create(&PartLabel { part })
                .set(i64::try_from(v).unwrap_or(i64::MAX));
        }
        self.store_series
            .set(i64::try_from(stats.series).unwrap_or(i64::MAX));
        self.store_decisions.set(to_i64(decisions));
        // The store counts; the counter catches up at each scrape.
        let seen = self.store_compactions.get();
        if stats.compactions > seen {
            self.store_compactions.inc_by(stats.compactions - seen);
        }
    }

    /// Replaces the runs-per-node gauges (see [`runs_per_node`]).
    pub fn set_runs_per_node(&self, counts: &HashMap<String, u64>) {
        self.runs_per_node.clear();
        for (node, n) in counts {
            self.runs_per_node
                .get_or_create(&NodeLabel { node: node.clone() })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
    }

    /// Runs `update` (gauge setters) and encodes the exposition while holding the refresh
    /// lock, so concurrent scrapes never see half-rebuilt families.
    pub fn refresh_and_encode(
        &self,
        update: impl FnOnce(&Metrics),
    ) -> Result<String, MetricsError> {
        let _g = self.refresh.lock().unwrap_or_else(|e| e.into_inner());
        update(self);
        self.encode_locked()
    }

    /// The exposition in OpenMetrics text ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> Result<String, MetricsError> {
        let _g = self.refresh.lock().unwrap_or_else(|e| e.into_inner());
        self.encode_locked()
    }

    fn encode_locked(&self) -> Result<String, MetricsError> {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        prometheus_client::encoding::text::encode(&mut out, &registry)?;
        Ok(out)
    }

    /// Registers a metric another module owns and feeds (the cluster feed's and the event
    /// writer's counters), so `/metrics` shows it. `name` follows
    /// `headroom_<subsystem>_<name>`; counters get `_total` appended when encoded.
    pub fn register(
        &self,
        name: &str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        self.registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .register(name, help, metric);
    }
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Stored runs per node over every builder. Blocking (reads every builder's runs): async
/// callers use `spawn_blocking`, and not on every scrape.
pub fn runs_per_node(
    store: &headroom_storage::Store,
) -> Result<HashMap<String, u64>, MetricsError> {
    let mut counts: HashMap<String, u64> = HashMap::new();
    for b in store.builders()? {
        for r in store.runs(&b)? {
            *counts.entry(r.node).or_insert(0) += 1;
        }
    }
    Ok(counts)
}

/// A [`BindPlugin`] that counts every bind of the one it wraps (result and duration) in
/// [`Metrics`]. Wrap the loop's binder in it: `Arc::new(MeteredBinder::new(binder, metrics))`.
pub struct MeteredBinder {
    inner: Arc<dyn BindPlugin>,
    metrics: Arc<Metrics>,
}

impl MeteredBinder {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn BindPlugin>, metrics: Arc<Metrics>) -> MeteredBinder {
        MeteredBinder { inner, metrics }
    }
}

impl Plugin for MeteredBinder {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
}

impl BindPlugin for MeteredBinder {
    fn bind<'a>(
        &'a self,
        pod: &'a PodInfo,
        node: &'a str,
        annotations: &'a headroom_scheduler::framework::BindAnnotations,
    ) -> BoxFuture<'a, BindOutcome> {
        Box::pin(async move {
            // Wall time: a simulated clock would make every bind take zero.
            let started = std::time::Instant::now();
            let outcome = self.inner.bind(pod, node, annotations).await;
            self.metrics
                .observe_bind(outcome.is_bound(), started.elapsed());
            outcome
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analytics::{BuilderProfile, NodeUsage, Percentiles, Stat};
    use headroom_scheduler::framework::{Code, Status};
    use headroom_scheduler::plugins::testutil::*;
    use serde_json::json;

    /// The value of the sample line `name{labels}` (labels in the exposition's order).
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    fn decision(outcome: Outcome) -> Decision {
        let names = Arc::new(vec![Arc::from("a"), Arc::from("b"), Arc::from("c")]);
        let mut d = Decision::new("ns", "p", "u".into(), "headroom", 1, names);
        d.outcome = outcome;
        d
    }

    /// Placements by the usage fallback are counted; others are not.
    #[test]
    fn fallback_placements_are_counted() {
        let m = Metrics::default();
        let mut placed = decision(Outcome::Placed { node: "c".into() });
        placed.feasible = vec![2];
        m.observe_decision(&placed, Duration::from_millis(1));
        let text = m.encode().unwrap();
        assert_eq!(
            sample(&text, "headroom_scheduler_fallback_placements_total"),
            Some(0.0)
        );
        placed.fallback = Some(headroom_scheduler::framework::Fallback {
            waited_seconds: 31.0,
            max_wait_seconds: 30.0,
            relaxed: vec!["RealMemoryFit".into()],
        });
        m.observe_decision(&placed, Duration::from_millis(1));
        // A fallback that found no node is no placement.
        let mut failed = decision(Outcome::Unschedulable {
            message: "0/3".into(),
        });
        failed.fallback = placed.fallback.clone();
        m.observe_decision(&failed, Duration::from_millis(1));
        let text = m.encode().unwrap();
        assert_eq!(
            sample(&text, "headroom_scheduler_fallback_placements_total"),
            Some(1.0)
        );
        assert_eq!(m.fallback_placements(), 1);
    }

    #[test]
    fn decisions_count_results_latency_and_rejections() {
        let m = Metrics::new(MetricsOptions {
            max_rejection_reasons: 2,
            ..MetricsOptions::default()
        });
        let mut d = decision(Outcome::Unschedulable {
            message: "0/3".into(),
        });
        d.rejected = vec![
            (
                0,
                Status::unschedulable("Insufficient cpu").with_plugin("NodeResourcesFit"),
            ),
            (
                1,
                Status::unschedulable("Insufficient cpu").with_plugin("NodeResourcesFit"),
            ),
        ];
        d.absent = Some(Status::new(Code::UnschedulableAndUnresolvable, "gone").with_plugin("X"));
        m.observe_decision(&d, Duration::from_millis(3));
        let mut placed = decision(Outcome::Placed { node: "c".into() });
        placed.rejected = vec![(0, Status::unschedulable("third reason").with_plugin("Y"))];
        placed.feasible = vec![1, 2];
        m.observe_decision(&placed, Duration::from_millis(1));
        let text = m.encode().unwrap();

        assert_eq!(
            sample(
                &text,
                "headroom_scheduler_schedule_attempts_total{result=\"unschedulable\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "headroom_scheduler_schedule_attempts_total{result=\"scheduled\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "headroom_scheduler_schedule_attempts_total{result=\"error\"}"
            ),
            Some(0.0)
        );
        assert_eq!(
            sample(&text, "headroom_scheduler_decision_duration_seconds_count"),
            Some(2.0)
        );
        assert_eq!(
            sample(&text, "headroom_scheduler_decision_duration_seconds_sum"),
            Some(0.004)
        );
        assert_eq!(
            sample(
                &text,
                "headroom_scheduler_filter_rejections_total{plugin=\"NodeResourcesFit\",reason=\"Insufficient cpu\"}"
            ),
            Some(2.0)
        );
        // The node neither rejected nor feasible counts under the absent status.
        assert_eq!(
            sample(
                &text,
                "headroom_scheduler_filter_rejections_total{plugin=\"X\",reason=\"gone\"}"
            ),
            Some(1.0)
        );
        // A third distinct reason exceeds the cap of two.
        assert_eq!(
            sample(
                &text,
                "headroom_scheduler_filter_rejections_total{plugin=\"Y\",reason=\"other\"}"
            ),
            Some(1.0)
        );
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn binds_are_counted_by_the_metered_binder() {
        struct Fails;
        impl Plugin for Fails {
            fn name(&self) -> &'static str {
                "Fails"
            }
        }
        impl BindPlugin for Fails {
            fn bind<'a>(
                &'a self,
                _: &'a PodInfo,
                _: &'a str,
                _: &'a headroom_scheduler::framework::BindAnnotations,
            ) -> BoxFuture<'a, BindOutcome> {
                Box::pin(async { BindOutcome::Retry("throttled".into()) })
            }
        }
        let m = Arc::new(Metrics::default());
        let ok = MeteredBinder::new(
            Arc::new(crate::scheduling_loop::InstantBinder::new()),
            m.clone(),
        );
        let bad = MeteredBinder::new(Arc::new(Fails), m.clone());
        assert_eq!(bad.name(), "Fails");
        let p = info(pod("x", json!({})));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            assert!(ok.bind(&p, "n", &Default::default()).await.is_bound());
            assert!(ok.bind(&p, "n", &Default::default()).await.is_bound());
            assert!(!bad.bind(&p, "n", &Default::default()).await.is_bound());
        });
        let text = m.encode().unwrap();
        assert_eq!(
            sample(&text, "headroom_scheduler_binds_total{result=\"success\"}"),
            Some(2.0)
        );
        assert_eq!(
            sample(&text, "headroom_scheduler_binds_total{result=\"error\"}"),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, "headroom_scheduler_bind_duration_seconds_count"),
            Some(3.0)
        );
    }

    fn usage(node: &str, newest_ms: i64) -> NodeUsage {
        NodeUsage {
            node: node.into(),
            cpu_cores: Stat {
                current: 1.5,
                windowed: 2.5,
            },
            memory_working_set_bytes: Stat {
                current: 3e9,
                windowed: 4e9,
            },
            fs_available_bytes: Some(Stat {
                current: 60e9,
                windowed: 50e9,
            }),
            fs_capacity_bytes: Some(100e9),
            newest_ms,
            window: None,
        }
    }

    #[test]
    fn node_gauges_follow_snapshot_and_view() {
        let m = Metrics::default();
        let alloc = json!({"status": {"allocatable": {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "100Gi", "pods": "110"}}});
        let mut snap = Snapshot::build(
            [
                node("fresh", alloc.clone()),
                node("old", alloc.clone()),
                node("none", alloc),
            ],
            [],
        );
        let now = 1_000_000_000;
        let mut view = UsageView {
            generated_ms: now - 5_000,
            ..UsageView::default()
        };
        view.nodes
            .insert("fresh".into(), usage("fresh", now - 10_000));
        view.nodes.insert("old".into(), usage("old", now - 600_000));
        let view = Arc::new(view);
        snap.usage_mut().view = view.clone();
        snap.usage_mut().now_ms = now;
        let policy = UsagePolicy::default();
        m.set_node_usage(&snap, &policy, now);
        let text = m.encode().unwrap();
        let g = |s: &str| sample(&text, s);
        assert_eq!(
            g("headroom_node_cpu_cores{node=\"fresh\",kind=\"allocatable\"}"),
            Some(4.0)
        );
        assert_eq!(
            g("headroom_node_cpu_cores{node=\"fresh\",kind=\"used\"}"),
            Some(1.5)
        );
        assert_eq!(
            g("headroom_node_cpu_cores{node=\"fresh\",kind=\"headroom\"}"),
            Some(1.5)
        );
        assert_eq!(
            g("headroom_node_memory_bytes{node=\"fresh\",kind=\"headroom\"}"),
            Some(8.0 * 1024.0 * 1024.0 * 1024.0 - 4e9)
        );
        assert_eq!(
            g("headroom_node_disk_bytes{node=\"fresh\",kind=\"used\"}"),
            Some(40e9)
        );
        assert_eq!(
            g("headroom_node_disk_bytes{node=\"fresh\",kind=\"headroom\"}"),
            Some(50e9)
        );
        assert_eq!(
            g("headroom_node_usage_age_seconds{node=\"fresh\"}"),
            Some(10.0)
        );
        assert_eq!(
            g("headroom_node_cpu_cores{node=\"none\",kind=\"used\"}"),
            None
        );
        assert_eq!(g("headroom_usage_stale_nodes"), Some(2.0));
        assert_eq!(g("headroom_usage_nodes"), Some(3.0));
        assert_eq!(g("headroom_usage_view_age_seconds"), Some(5.0));

        // The headroom is the scheduler's: a pod placed after the newest sample counts.
        snap.usage_mut().record_placement(
            None,
            "fresh",
            headroom_scheduler::usage_context::RecentPlacement {
                pod: headroom_scheduler::key::PodKey::new("ci", "new"),
                at_ms: now - 1_000,
                cpu_cores: 0.5,
                memory_bytes: 1e9,
                disk_bytes: 0.0,
                ..Default::default()
            },
        );
        m.set_node_usage(&snap, &policy, now);
        let text = m.encode().unwrap();
        assert_eq!(
            sample(
                &text,
                "headroom_node_memory_bytes{node=\"fresh\",kind=\"headroom\"}"
            ),
            Some(8.0 * 1024.0 * 1024.0 * 1024.0 - 5e9)
        );
        assert_eq!(
            sample(
                &text,
                "headroom_node_cpu_cores{node=\"fresh\",kind=\"headroom\"}"
            ),
            Some(1.0)
        );
        // A node without usage: its requests stand in (none here: all free).
        assert_eq!(
            sample(
                &text,
                "headroom_node_cpu_cores{node=\"none\",kind=\"headroom\"}"
            ),
            Some(4.0)
        );

        // A node that left the snapshot leaves the gauges.
        let mut smaller = Snapshot::build([node("fresh", json!({}))], []);
        smaller.usage_mut().view = view.clone();
        smaller.usage_mut().now_ms = now;
        m.set_node_usage(&smaller, &policy, now);
        let text = m.encode().unwrap();
        assert!(!text.contains("node=\"old\""), "{text}");
        assert_eq!(sample(&text, "headroom_usage_stale_nodes"), Some(0.0));
    }

    #[test]
    fn builder_gauges_keep_the_most_recent_builders() {
        let m = Metrics::new(MetricsOptions {
            max_builders: 1,
            ..MetricsOptions::default()
        });
        let mut view = UsageView::default();
        for (b, newest) in [("ci/old", 1), ("ci/new", 2)] {
            let pct = Percentiles {
                p50: 1.0,
                p90: 2.0,
                p95: 3.0,
                p99: 4.0,
                max: 5.0,
            };
            view.builders.insert(
                b.into(),
                BuilderProfile {
                    builder: b.into(),
                    runs: 7,
                    cpu: pct,
                    memory: pct,
                    newest_ms: newest,
                    cold_run_s: None,
                    warm_run_s: None,
                },
            );
        }
        m.set_builder_profiles(&view);
        let mut counts = HashMap::new();
        counts.insert("n1".to_string(), 3);
        m.set_runs_per_node(&counts);
        m.set_queue_lengths(&QueueLengths {
            active: 1,
            backoff: 2,
            unschedulable: 3,
            gated: 4,
            in_flight: 5,
        });
        let text = m.encode().unwrap();
        let g = |s: &str| sample(&text, s);
        assert_eq!(
            g("headroom_builder_cpu_cores{builder=\"ci/new\",quantile=\"0.99\"}"),
            Some(4.0)
        );
        assert_eq!(
            g("headroom_builder_memory_bytes{builder=\"ci/new\",quantile=\"1\"}"),
            Some(5.0)
        );
        assert_eq!(
            g("headroom_builder_profile_runs{builder=\"ci/new\"}"),
            Some(7.0)
        );
        assert!(!text.contains("ci/old"));
        assert_eq!(g("headroom_builder_runs_per_node{node=\"n1\"}"), Some(3.0));
        assert_eq!(g("headroom_queue_pending_pods{queue=\"gated\"}"), Some(4.0));
        assert_eq!(
            g("headroom_queue_pending_pods{queue=\"in_flight\"}"),
            Some(5.0)
        );
    }

    #[test]
    fn store_gauges_and_runs_per_node() {
        let store =
            headroom_storage::Store::open_temporary(headroom_storage::StoreConfig::default())
                .unwrap();
        let s = headroom_storage::UsageSummary {
            mean: 1.0,
            p95: 1.0,
            max: 1.0,
        };
        for (b, uid, node) in [("b1", "u1", "n1"), ("b1", "u2", "n2"), ("b2", "u3", "n1")] {
            store
                .put_run(
                    b,
                    &headroom_storage::RunRecord {
                        pod_uid: uid.into(),
                        node: node.into(),
                        start_ms: 1,
                        end_ms: 2,
                        cpu: s,
                        memory: s,
                    },
                )
                .unwrap();
        }
        let counts = runs_per_node(&store).unwrap();
        assert_eq!(counts.get("n1"), Some(&2));
        assert_eq!(counts.get("n2"), Some(&1));
        let m = Metrics::default();
        let mut stats = store.stats();
        stats.disk_bytes = 12345;
        m.set_store_stats(&stats, 9);
        m.observe_placement(PlacementCache::Warm);
        let text = m.encode().unwrap();
        assert_eq!(
            sample(&text, "headroom_store_size_bytes{part=\"disk\"}"),
            Some(12345.0)
        );
        assert_eq!(sample(&text, "headroom_store_decisions"), Some(9.0));
        assert_eq!(
            sample(&text, "headroom_scheduler_placements_total{cache=\"warm\"}"),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, "headroom_scheduler_placements_total{cache=\"cold\"}"),
            Some(0.0)
        );
        // The collectors' metrics are in the same registry.
        // (A family without children, like errors before the first one, is not encoded.)
        assert!(text.contains("headroom_collector_runs_total 0"), "{text}");
    }
}

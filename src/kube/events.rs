//! What users see, as with kube-scheduler: `Scheduled` and `FailedScheduling` Events
//! (`events.k8s.io/v1`, the fields kube-scheduler fills), the pod's `PodScheduled=False`
//! condition with the same message, and after a bind bk-ci's optional `builder-history-nodes`
//! annotation and the placement history in the store. (The `headroom.io/decision`
//! annotation travels in the binding itself: [`bind_annotator`].) (The decision log is the engine's decision sink, which forwards each decision
//! here.)
//!
//! All of it runs in background tasks fed by channels, so the scheduling loop never waits
//! on these writes, and a slow API server loses events (counted), never scheduling time.
//!
//! A stuck pod must not flood the API: an event identical to one written within
//! `seriesWindow` (same pod, reason and message) becomes a `series` update of that event,
//! at most one per `seriesUpdateInterval` (repeats in between are counted and sent with the
//! next update, or by the periodic flush), and every write takes a token from a bucket
//! (`qps`, `burst`); without a token the write is dropped and counted. The condition is
//! patched only when its message changes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use prometheus_client::metrics::counter::Counter;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::bind::BindOutcome;
use super::config::{EventsConfig, ServeConfig};
use crate::framework::{Decision, Fallback, Outcome};
use crate::logging::Repeated;
use crate::snapshot::PodInfo;
use crate::usage::UsageContext;

/// The decision summary annotation.
pub const DECISION_ANNOTATION: &str = "headroom.io/decision";
/// bk-ci's placement history annotation (a JSON array of node names, newest first).
pub const BKCI_HISTORY_ANNOTATION: &str = "bkci.dispatch.kubenetes/builder-history-nodes";

/// One event to write.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpec {
    /// The object it is about.
    pub regarding: ObjectReference,
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    /// `Scheduled`, `FailedScheduling`.
    pub reason: &'static str,
    /// `Binding`, `Scheduling`.
    pub action: &'static str,
    /// The message.
    pub note: String,
}

/// A reference to a pod, as kube-scheduler's events carry it.
pub fn pod_ref(pod: &PodInfo) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(pod.namespace.clone()),
        name: Some(pod.name.clone()),
        uid: (!pod.uid.is_empty()).then(|| pod.uid.clone()),
        resource_version: pod.pod.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// `Scheduled`: "Successfully assigned ns/pod to node", and when the usage fallback placed
/// the pod (`usage.maxWait`), why: "... to node (usage fallback: waited 45s ≥ usage.maxWait
/// 30s: RealMemoryFit let it through (least-hot node that fits by requests))".
pub fn scheduled(pod: &PodInfo, node: &str, fallback: Option<&Fallback>) -> EventSpec {
    let mut note = format!(
        "Successfully assigned {}/{} to {node}",
        pod.namespace, pod.name
    );
    if let Some(f) = fallback {
        note.push_str(&format!(" ({})", f.describe()));
    }
    EventSpec {
        regarding: pod_ref(pod),
        type_: "Normal",
        reason: "Scheduled",
        action: "Binding",
        note,
    }
}

/// `FailedScheduling` with the upstream-format message.
pub fn failed_scheduling(regarding: ObjectReference, message: &str) -> EventSpec {
    EventSpec {
        regarding,
        type_: "Warning",
        reason: "FailedScheduling",
        action: "Scheduling",
        note: message.to_string(),
    }
}

/// The strategic merge patch of `pods/status` that sets `PodScheduled=False`.
pub fn unschedulable_condition(reason: &str, message: &str, now_ms: i64) -> serde_json::Value {
    json!({"status": {"conditions": [{
        "type": "PodScheduled",
        "status": "False",
        "lastProbeTime": null,
        "lastTransitionTime": super::rfc3339(now_ms),
        "reason": reason,
        "message": message,
    }]}})
}

/// Counters of the event writer (`headroom_events_*_total` once
/// [`registered`](EventStats::register)).
#[derive(Debug, Default)]
pub struct EventStats {
    /// Events created.
    pub created: Counter,
    /// Series updates written.
    pub series_updates: Counter,
    /// Occurrences folded into a series without a write of their own.
    pub aggregated: Counter,
    /// Dropped: no token, or the writer's channel was full.
    pub dropped: Counter,
    /// API errors.
    pub failed: Counter,
    /// Keeps the failures' warnings to one per interval (an API server refusing events
    /// would otherwise get one line per pod).
    pub warnings: Repeated,
}

impl EventStats {
    /// Counts a failed write; `Some(held_back)` when it is to be logged (see [`Repeated`]).
    fn failure(&self) -> Option<u64> {
        self.failed.inc();
        self.warnings.failure(crate::logging::now())
    }

    /// (created, series updates, aggregated, dropped, failed).
    pub fn get(&self) -> (u64, u64, u64, u64, u64) {
        (
            self.created.get(),
            self.series_updates.get(),
            self.aggregated.get(),
            self.dropped.get(),
            self.failed.get(),
        )
    }

    /// Registers the counters on `metrics`.
    pub fn register(&self, metrics: &crate::metrics::Metrics) {
        for (name, help, c) in [
            ("headroom_events_created", "Events created", &self.created),
            (
                "headroom_events_series_updates",
                "Event series updates written",
                &self.series_updates,
            ),
            (
                "headroom_events_aggregated",
                "Repeated events folded into a series without a write of their own",
                &self.aggregated,
            ),
            (
                "headroom_events_dropped",
                "Events dropped: no rate-limit token, or the writer's queue was full",
                &self.dropped,
            ),
            (
                "headroom_events_failed",
                "Event writes the API server refused or that timed out",
                &self.failed,
            ),
        ] {
            metrics.register(name, help, c.clone());
        }
    }
}

/// A handle to record events (cheap to clone).
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<EventSpec>,
    stats: Arc<EventStats>,
}

impl Recorder {
    /// Queues an event; a full queue drops it (counted).
    pub fn record(&self, ev: EventSpec) {
        if self.tx.try_send(ev).is_err() {
            self.stats.dropped.inc();
        }
    }

    /// The writer's counters.
    pub fn stats(&self) -> &Arc<EventStats> {
        &self.stats
    }
}

/// A recorder and the receiver its writer drains.
pub fn recorder() -> (Recorder, mpsc::Receiver<EventSpec>) {
    let (tx, rx) = mpsc::channel(1024);
    (
        Recorder {
            tx,
            stats: Arc::new(EventStats::default()),
        },
        rx,
    )
}

struct TokenBucket {
    tokens: f64,
    burst: f64,
    qps: f64,
    at: Instant,
}

impl TokenBucket {
    fn take(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + dt * self.qps).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct Series {
    namespace: String,
    name: String,
    started: Instant,
    last_write: Instant,
    count: i32,
    unwritten: bool,
}

type SeriesKey = (String, &'static str, String);

fn key_of(ev: &EventSpec) -> SeriesKey {
    let who = ev
        .regarding
        .uid
        .clone()
        .or_else(|| {
            Some(format!(
                "{}/{}",
                ev.regarding.namespace.as_deref().unwrap_or(""),
                ev.regarding.name.as_deref().unwrap_or("")
            ))
        })
        .unwrap_or_default();
    (who, ev.reason, ev.note.clone())
}

fn micro_now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// Writes events from `rx` until `shutdown` (then drains the queue). `instance` is the
/// `reportingInstance` (this replica).
pub async fn run_event_writer(
    client: Client,
    config: EventsConfig,
    instance: String,
    stats: Arc<EventStats>,
    mut rx: mpsc::Receiver<EventSpec>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let mut bucket = TokenBucket {
        tokens: f64::from(config.burst),
        burst: f64::from(config.burst),
        qps: config.qps,
        at: Instant::now(),
    };
    let mut series: HashMap<SeriesKey, Series> = HashMap::new();
    let mut flush =
        tokio::time::interval(config.series_update_interval.max(Duration::from_millis(10)));
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    let mut stopping = false;
    loop {
        let ev = if stopping {
            match rx.try_recv() {
                Ok(ev) => Some(ev),
                Err(_) => break,
            }
        } else {
            tokio::select! {
                biased;
                ev = rx.recv() => match ev { Some(ev) => Some(ev), None => break },
                _ = flush.tick() => None,
                _ = &mut shutdown => { stopping = true; continue; }
            }
        };
        let now = Instant::now();
        series.retain(|_, s| now.saturating_duration_since(s.started) < config.series_window);
        let Some(ev) = ev else {
            // Periodic flush: repeats that were only counted go out now.
            let due: Vec<SeriesKey> = series
                .iter()
                .filter(|(_, s)| {
                    s.unwritten
                        && now.saturating_duration_since(s.last_write)
                            >= config.series_update_interval
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in due {
                if let Some(s) = series.get_mut(&k) {
                    write_series(&client, s, &mut bucket, &stats, now).await;
                }
            }
            continue;
        };
        let key = key_of(&ev);
        if let Some(s) = series.get_mut(&key) {
            s.count += 1;
            s.unwritten = true;
            if now.saturating_duration_since(s.last_write) >= config.series_update_interval {
                write_series(&client, s, &mut bucket, &stats, now).await;
            } else {
                stats.aggregated.inc();
            }
            continue;
        }
        if !bucket.take(now) {
            stats.dropped.inc();
            continue;
        }
        let namespace = ev
            .regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let t = k8s_openapi::jiff::Timestamp::now();
        let name = format!(
            "{}.{:x}",
            ev.regarding.name.as_deref().unwrap_or("headroom"),
            t.as_nanosecond()
        );
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(t)),
            reporting_controller: Some(config.reporting_controller.clone()),
            reporting_instance: Some(instance.clone()),
            action: Some(ev.action.to_string()),
            reason: Some(ev.reason.to_string()),
            regarding: Some(ev.regarding.clone()),
            note: Some(truncate(&ev.note, 1024)),
            type_: Some(ev.type_.to_string()),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => {
                stats.created.inc();
                series.insert(
                    key,
                    Series {
                        namespace,
                        name,
                        started: now,
                        last_write: now,
                        count: 1,
                        unwritten: false,
                    },
                );
            }
            Err(e) => {
                if let Some(held_back) = stats.failure() {
                    tracing::warn!(error = %e, reason = ev.reason, held_back, "writing an event failed");
                }
            }
        }
    }
}

async fn write_series(
    client: &Client,
    s: &mut Series,
    bucket: &mut TokenBucket,
    stats: &EventStats,
    now: Instant,
) {
    if !bucket.take(now) {
        stats.dropped.inc();
        return;
    }
    let api: Api<Event> = Api::namespaced(client.clone(), &s.namespace);
    let patch = json!({"series": {"count": s.count, "lastObservedTime": micro_now()}});
    s.last_write = now;
    s.unwritten = false;
    match api
        .patch(&s.name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => {
            stats.series_updates.inc();
        }
        Err(e) => {
            if let Some(held_back) = stats.failure() {
                tracing::warn!(error = %e, event = %s.name, held_back, "updating an event series failed");
            }
        }
    }
}

/// Event notes are limited to 1 kB by the API server.
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// What each binding writes onto its pod under `serve`: the decision summary
/// (`serve.decisionAnnotation`), computed in the cycle from the snapshot it read, so the
/// API server writes it with the binding (no patch of its own).
pub fn bind_annotator(config: &ServeConfig) -> Option<crate::scheduling_loop::BindAnnotator> {
    config.decision_annotation.then(|| {
        let annotate: crate::scheduling_loop::BindAnnotator = Arc::new(|d, snapshot| {
            let usage = snapshot.usage();
            let summary = decision_summary(d, usage, usage.now_ms);
            crate::framework::BindAnnotations::from([(
                DECISION_ANNOTATION.to_string(),
                serde_json::to_string(&summary).unwrap_or_default(),
            )])
        });
        annotate
    })
}

/// The decision summary annotation: chosen node, the best totals, how fresh the usage
/// data was, and the usage fallback when it placed the pod. Serialised straight from
/// borrowed fields (it is built for every binding, in the cycle's critical section).
pub fn decision_summary<'a>(
    d: &'a Decision,
    usage: &UsageContext,
    now_ms: i64,
) -> DecisionSummary<'a> {
    let top = d
        .best_nodes(3)
        .into_iter()
        .map(|(score, idx)| TopNode {
            node: d.node_names[idx as usize].as_ref(),
            score,
        })
        .collect();
    let usage = (usage.view.generated_ms > 0).then(|| SummaryUsage {
        view_age_seconds: (now_ms - usage.view.generated_ms).max(0) / 1000,
        node_sample_age_seconds: usage
            .view
            .node(d.node().unwrap_or(""))
            .map(|n| (now_ms - n.newest_ms).max(0) / 1000),
    });
    DecisionSummary {
        node: d.node().unwrap_or(""),
        profile: &d.profile,
        at: super::rfc3339(now_ms),
        nodes: d.num_nodes(),
        feasible_nodes: d.feasible_count(),
        top,
        usage,
        fallback: d.fallback.as_ref(),
    }
}

/// The `headroom.io/decision` annotation's JSON ([`decision_summary`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionSummary<'a> {
    /// The chosen node.
    pub node: &'a str,
    /// The profile that decided.
    pub profile: &'a str,
    /// When (RFC 3339).
    pub at: String,
    /// Nodes in the snapshot.
    pub nodes: usize,
    /// Nodes that passed every filter.
    pub feasible_nodes: usize,
    /// The three best nodes and their totals.
    pub top: Vec<TopNode<'a>>,
    /// How old the usage view and the chosen node's newest sample were (null without a view).
    pub usage: Option<SummaryUsage>,
    /// The usage fallback, when it placed the pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<&'a Fallback>,
}

/// One of a [`DecisionSummary`]'s best nodes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TopNode<'a> {
    /// Node name.
    pub node: &'a str,
    /// Weighted total.
    pub score: i64,
}

/// A [`DecisionSummary`]'s data ages.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryUsage {
    /// Seconds since the usage view was computed.
    pub view_age_seconds: i64,
    /// Seconds since the chosen node's newest sample (null when the view lacks the node).
    pub node_sample_age_seconds: Option<i64>,
}

/// Counters of the reporter (`headroom_reporter_*_total` once
/// [`registered`](ReporterStats::register)). Cheap to clone: the fields are handles.
#[derive(Debug, Default, Clone)]
pub struct ReporterStats {
    /// `PodScheduled` condition patches written.
    pub conditions: Counter,
    /// Annotation patches written.
    pub annotations: Counter,
    /// Placements recorded in the store's history.
    pub placements: Counter,
    /// Failed writes (API or store), logged at most once per interval with the number
    /// held back.
    pub failed: Counter,
    /// Condition and annotation patches skipped because binds were waiting (binds first).
    pub dropped: Counter,
    /// Preemption's calls (victims' DisruptionTarget patches and deletions).
    pub preemption: super::preempt::PreemptStats,
    /// Keeps the failures' warnings to one per interval: a full disk under the store or an
    /// API server refusing patches fails once per pod.
    pub warnings: Arc<Repeated>,
}

impl ReporterStats {
    /// Counts a failed write; `Some(held_back)` when it is to be logged (see [`Repeated`]).
    fn failure(&self) -> Option<u64> {
        self.failed.inc();
        self.warnings.failure(crate::logging::now())
    }

    /// Registers the counters on `metrics`.
    pub fn register(&self, metrics: &crate::metrics::Metrics) {
        for (name, help, c) in [
            (
                "headroom_reporter_conditions",
                "PodScheduled=False condition patches written",
                &self.conditions,
            ),
            (
                "headroom_reporter_annotations",
                "Decision annotation patches written",
                &self.annotations,
            ),
            (
                "headroom_reporter_placements",
                "Placements recorded in the store's placement history",
                &self.placements,
            ),
            (
                "headroom_reporter_failed",
                "Reporter writes (API or store) that failed",
                &self.failed,
            ),
            (
                "headroom_reporter_dropped",
                "Condition and annotation patches skipped because binds were waiting for the API server",
                &self.dropped,
            ),
        ] {
            metrics.register(name, help, c.clone());
        }
        self.preemption.register(metrics);
    }
}

/// Turns decisions and bind outcomes into events, conditions, annotations and placement
/// history.
pub struct Reporter {
    /// The API client.
    pub client: Client,
    /// Where events go.
    pub recorder: Recorder,
    /// The store (placement history); `None` without one.
    pub store: Option<headroom_storage::Store>,
    /// The serve settings (annotations).
    pub config: ServeConfig,
    /// How pods map to builders (for the placement history).
    pub identity: headroom_collectors::IdentityConfig,
    /// Counters (registered on the engine's metrics by the caller).
    pub stats: ReporterStats,
    /// Binds come first: while binds wait for the API server (this flow controller's
    /// window is full), the reporter's own patches (conditions, annotations) are dropped
    /// and counted rather than sent.
    pub yield_to: Option<Arc<super::flow::BindFlow>>,
}

impl Reporter {
    /// Whether to skip a low-priority write now (binds are waiting); counts the skip.
    fn yield_to_binds(&self) -> bool {
        let busy = self.yield_to.as_ref().is_some_and(|f| f.binds_waiting());
        if busy {
            self.stats.dropped.inc();
        }
        busy
    }
}

/// Bind outcomes waiting for their decision, at most: past this, an outcome is reported
/// without its decision summary rather than held.
const MAX_PARKED: usize = 10_000;

/// What the reporter keeps between messages.
#[derive(Default)]
struct ReporterState {
    /// Placed pods whose bind outcome has not arrived, by uid: the usage fallback that
    /// placed each, if any (the `Scheduled` event names it).
    placed: HashMap<String, Option<Fallback>>,
    /// The last `PodScheduled=False` message written per uid (patched only on change).
    conditions: HashMap<String, String>,
    /// Successful bind outcomes that arrived before their decision, by uid. Decisions
    /// reach the reporter through the engine's decision sink, so a fast bind can overtake
    /// its decision; the outcome waits here so the annotation still carries the summary.
    parked: HashMap<String, BindOutcome>,
}

impl Reporter {
    /// Runs until both channels close or `shutdown`; then drains what is queued (parked
    /// outcomes are then reported without a summary).
    pub async fn run(
        self,
        mut decisions: mpsc::Receiver<Arc<Decision>>,
        mut outcomes: mpsc::Receiver<BindOutcome>,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> ReporterStats {
        let mut st = ReporterState::default();
        tokio::pin!(shutdown);
        let mut stopping = false;
        loop {
            // Decisions first, so a summary is there when its outcome comes whenever both
            // are queued.
            let msg = if stopping {
                match decisions.try_recv() {
                    Ok(d) => Some(Ok(d)),
                    Err(_) => outcomes.try_recv().ok().map(Err),
                }
            } else {
                tokio::select! {
                    biased;
                    Some(d) = decisions.recv() => Some(Ok(d)),
                    Some(o) = outcomes.recv() => Some(Err(o)),
                    _ = &mut shutdown => { stopping = true; continue; }
                    else => None,
                }
            };
            let Some(msg) = msg else { break };
            match msg {
                Ok(d) => self.on_decision(&d, &mut st).await,
                Err(o) => {
                    let waiting = o.result.is_ok()
                        && !st.placed.contains_key(&o.pod.uid)
                        && st.parked.len() < MAX_PARKED;
                    if waiting {
                        st.parked.insert(o.pod.uid.clone(), o);
                    } else {
                        self.on_outcome(o, &mut st).await;
                    }
                }
            }
            // Bound the dedupe maps: losing them costs one redundant write per pod.
            if st.placed.len() > 100_000 {
                st.placed.clear();
            }
            if st.conditions.len() > 100_000 {
                st.conditions.clear();
            }
        }
        for (_, o) in std::mem::take(&mut st.parked) {
            self.on_outcome(o, &mut st).await;
        }
        self.stats
    }

    async fn on_decision(&self, d: &Decision, st: &mut ReporterState) {
        let now = super::now_ms();
        let (reason, message) = match &d.outcome {
            Outcome::Placed { .. } => {
                // The decision summary went with the binding (computed in the cycle); the
                // event needs only the fallback, which the record carries.
                st.placed.insert(d.uid.clone(), d.fallback.clone());
                if let Some(o) = st.parked.remove(&d.uid) {
                    self.on_outcome(o, st).await;
                }
                return;
            }
            Outcome::Unschedulable { message } => ("Unschedulable", message.clone()),
            Outcome::Error { message } => ("SchedulerError", message.clone()),
        };
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(d.namespace.clone()),
            name: Some(d.name.clone()),
            uid: (!d.uid.is_empty()).then(|| d.uid.clone()),
            ..Default::default()
        };
        // kube-scheduler logs this at -v 2 ("Unable to schedule pod; no fit; waiting").
        tracing::debug!(pod = %format!("{}/{}", d.namespace, d.name), reason, %message, "unable to schedule the pod");
        self.recorder.record(failed_scheduling(regarding, &message));
        // Preemption: the victims go first (upstream's executor runs before the failure
        // handler writes the condition), whatever the API's load: the pod cannot be placed
        // until they are gone.
        let mut dedupe = message.clone();
        if let Some(n) = &d.nomination {
            super::preempt::actuate(
                &self.client,
                &self.recorder,
                &self.stats.preemption,
                self.config.request_timeout,
                &d.profile,
                (&d.namespace, &d.name, &d.uid),
                n,
            )
            .await;
            dedupe.push_str(&format!("\nnominated: {}", n.node));
        }
        if st.conditions.get(&d.uid) == Some(&dedupe) || self.yield_to_binds() {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &d.namespace);
        let mut patch = unschedulable_condition(reason, &message, now);
        if let Some(n) = &d.nomination {
            patch["status"]["nominatedNodeName"] = json!(n.node.as_ref());
        }
        let res = tokio::time::timeout(
            self.config.request_timeout,
            api.patch_status(&d.name, &PatchParams::default(), &Patch::Strategic(patch)),
        )
        .await;
        match res {
            Ok(Ok(_)) => {
                self.stats.conditions.inc();
                st.conditions.insert(d.uid.clone(), dedupe);
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => {}
            Ok(Err(e)) => {
                if let Some(held_back) = self.stats.failure() {
                    tracing::warn!(pod = %format!("{}/{}", d.namespace, d.name), error = %e, held_back, "patching the PodScheduled condition failed");
                }
            }
            Err(_) => {
                if let Some(held_back) = self.stats.failure() {
                    tracing::warn!(pod = %format!("{}/{}", d.namespace, d.name), held_back, "patching the PodScheduled condition timed out");
                }
            }
        }
    }

    async fn on_outcome(&self, o: BindOutcome, st: &mut ReporterState) {
        let fallback = st.placed.remove(&o.pod.uid).flatten();
        if let Err(e) = &o.result {
            let mut text = e.to_string();
            if let Some(first) = text.get_mut(0..1) {
                first.make_ascii_uppercase();
            }
            self.recorder
                .record(failed_scheduling(pod_ref(&o.pod), &text));
            return;
        }
        st.conditions.remove(&o.pod.uid);
        // kube-scheduler logs this at -v 2 ("Successfully bound pod to node").
        tracing::debug!(pod = %o.pod.key(), node = %o.node, "bound the pod to its node");
        self.recorder
            .record(scheduled(&o.pod, &o.node, fallback.as_ref()));
        let builder = headroom_collectors::builder_identity(&o.pod.pod.metadata, &self.identity);
        let mut history = vec![o.node.clone()];
        if let Some(store) = &self.store
            && !builder.is_pod()
        {
            // sled off the async threads.
            let (store, b, node) = (store.clone(), builder.clone(), o.node.clone());
            let written = tokio::task::spawn_blocking(move || {
                store.record_placement(&b, &node)?;
                store.placement_history(&b)
            })
            .await;
            match written {
                Ok(Ok(h)) => {
                    self.stats.placements.inc();
                    history = h;
                }
                Ok(Err(e)) => {
                    if let Some(held_back) = self.stats.failure() {
                        tracing::warn!(%builder, error = %e, held_back, "recording the placement failed");
                    }
                }
                Err(e) => {
                    if let Some(held_back) = self.stats.failure() {
                        tracing::warn!(%builder, error = %e, held_back, "recording the placement: task failed");
                    }
                }
            }
        }
        // The decision summary went with the binding ([`bind_annotator`]); only bk-ci's
        // history needs the store, so it is a patch of its own.
        let mut annotations = serde_json::Map::new();
        if self.config.builder_history_annotation {
            let v = serde_json::to_string(&history).unwrap_or_else(|_| "[]".into());
            annotations.insert(BKCI_HISTORY_ANNOTATION.into(), json!(v));
        }
        if annotations.is_empty() || self.yield_to_binds() {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &o.pod.namespace);
        let patch = json!({"metadata": {"annotations": annotations}});
        let res = tokio::time::timeout(
            self.config.request_timeout,
            api.patch(&o.pod.name, &PatchParams::default(), &Patch::Merge(patch)),
        )
        .await;
        match res {
            Ok(Ok(_)) => {
                self.stats.annotations.inc();
            }
            Ok(Err(e)) => {
                if let Some(held_back) = self.stats.failure() {
                    tracing::warn!(pod = %o.pod.key(), error = %e, held_back, "annotating the pod failed");
                }
            }
            Err(_) => {
                if let Some(held_back) = self.stats.failure() {
                    tracing::warn!(pod = %o.pod.key(), held_back, "annotating the pod timed out");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reporter gets [`Decision::summary_only`] copies: the annotation it writes is
    /// the one the full record gives, without the per-node columns.
    #[test]
    fn summary_only_copy_gives_the_same_annotation() {
        let names: Vec<Arc<str>> = (0..2000).map(|i| Arc::from(format!("n{i:04}"))).collect();
        let mut d = Decision::new("ci", "b-1", "u-1", "headroom", 3, Arc::new(names));
        d.feasible = (0..1500).rev().collect();
        // Ties on the best total: the node name breaks them.
        d.totals = d.feasible.iter().map(|&i| i64::from(i % 700)).collect();
        d.scores = vec![crate::framework::decision::ScoreColumn {
            plugin: "NodeResourcesFit",
            weight: 1,
            raw: None,
            normalized: d.totals.clone(),
            details: None,
        }];
        d.outcome = Outcome::Placed {
            node: "n0699".into(),
        };
        let slim = d.summary_only();
        assert!(slim.scores.is_empty() && slim.feasible.len() == 3);
        assert_eq!((slim.feasible_count(), d.feasible_count()), (1500, 1500));
        let usage = crate::usage::UsageContext::default();
        let full = serde_json::to_value(decision_summary(&d, &usage, 1_000)).unwrap();
        assert_eq!(
            serde_json::to_value(decision_summary(&slim, &usage, 1_000)).unwrap(),
            full
        );
        assert_eq!(full["feasibleNodes"], 1500);
        assert_eq!(full["usage"], serde_json::Value::Null);
        assert!(full.get("fallback").is_none());
        assert_eq!(full["top"][0], json!({"node": "n0699", "score": 699}));
        assert_eq!(full["top"][1], json!({"node": "n1399", "score": 699}));
        assert!(crate::api::approx_bytes(&slim) * 20 < crate::api::approx_bytes(&d));
    }

    #[test]
    fn token_bucket_limits_bursts() {
        let t0 = Instant::now();
        let mut b = TokenBucket {
            tokens: 2.0,
            burst: 2.0,
            qps: 1.0,
            at: t0,
        };
        assert!(b.take(t0) && b.take(t0));
        assert!(!b.take(t0));
        assert!(!b.take(t0 + Duration::from_millis(500)));
        assert!(b.take(t0 + Duration::from_millis(1000)));
        // Refill is capped at the burst.
        let later = t0 + Duration::from_secs(100);
        assert!(b.take(later) && b.take(later) && !b.take(later));
    }

    #[test]
    fn messages_match_kube_scheduler() {
        let pod = PodInfo::new(Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "plain-1", "namespace": "default", "uid": "u1", "resourceVersion": "213"}}))
                .unwrap(),
        ));
        let ev = scheduled(&pod, "node-c", None);
        assert_eq!(ev.note, "Successfully assigned default/plain-1 to node-c");
        assert_eq!(
            (ev.type_, ev.reason, ev.action),
            ("Normal", "Scheduled", "Binding")
        );
        let r = serde_json::to_value(&ev.regarding).unwrap();
        assert_eq!(
            r,
            json!({"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "plain-1", "uid": "u1", "resourceVersion": "213"})
        );
        let c = unschedulable_condition(
            "Unschedulable",
            "0/3 nodes are available: 3 Insufficient cpu.",
            0,
        );
        assert_eq!(c["status"]["conditions"][0]["type"], "PodScheduled");
        assert_eq!(c["status"]["conditions"][0]["status"], "False");
        assert_eq!(truncate(&"é".repeat(600), 1024).len(), 1023);
    }
}

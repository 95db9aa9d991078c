//! The event recorder: `Scheduled` and `FailedScheduling` Events (`events.k8s.io/v1`, the
//! fields kube-scheduler fills) and the pod's `PodScheduled=False` condition, written by a
//! background task fed by a bounded channel, so nothing that schedules waits on them.
//! Used by the [`Reporter`](super::events::Reporter) after each decision and by preemption
//! ([`super::preempt`]) for its `Preempted` events.
//!
//! Written as kube-scheduler's `tools/events` broadcaster writes them: every bound pod gets
//! its `Scheduled` event. The queue holds 1,000 events ([`QUEUED_EVENTS`]) and drops what
//! does not fit, counted (`headroom_events_dropped_total`), as client-go's broadcaster does;
//! up to `maxInFlight` writes go at once, so the writer keeps up with the binds; with
//! `qps` set, writes wait for a token as a client-go rate limiter makes them wait (kube-
//! scheduler's `clientConnection.qps`), never dropped for want of one.
//!
//! A stuck pod must not flood the API: an event identical to one written within
//! `seriesWindow` (same pod, reason and message) becomes a `series` update of that event,
//! at most one per `seriesUpdateInterval` (repeats in between are counted and sent with the
//! next update, or by the periodic flush).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use prometheus_client::metrics::counter::Counter;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::health::ApiCalls;
use crate::config::serve::EventsConfig;
use headroom_scheduler::framework::Fallback;
use headroom_scheduler::snapshot::PodInfo;

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
        namespace: Some(pod.namespace.to_string()),
        name: Some(pod.name.to_string()),
        uid: pod.uid.non_empty(),
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
#[derive(Debug)]
pub struct EventStats {
    /// Events created.
    pub created: Counter,
    /// Series updates written.
    pub series_updates: Counter,
    /// Occurrences folded into a series without a write of their own.
    pub aggregated: Counter,
    /// Dropped: the writer's queue ([`QUEUED_EVENTS`]) was full.
    pub dropped: Counter,
    /// Event writes given up on: refused by the API server, or still failing after
    /// [`WRITE_TRIES`] tries.
    pub failed: Counter,
    /// Tries again after a write found the API server unreachable.
    pub retried: Counter,
    /// Keeps the failures' warnings to one per interval (an API server refusing events
    /// would otherwise get one line per pod), and reports an unreachable server to the
    /// shared health.
    pub calls: ApiCalls,
}

impl Default for EventStats {
    fn default() -> Self {
        EventStats {
            created: Counter::default(),
            series_updates: Counter::default(),
            aggregated: Counter::default(),
            dropped: Counter::default(),
            failed: Counter::default(),
            retried: Counter::default(),
            calls: ApiCalls::new("event writes", "writing events again"),
        }
    }
}

impl EventStats {
    /// Counts a failed write of `op` and reports it (see [`ApiCalls`]).
    fn failure(&self, op: &str, e: &kube::Error) {
        self.failed.inc();
        self.calls.failed(op, e);
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
                "Event writes given up on: refused by the API server, or unreachable for every try",
                &self.failed,
            ),
            (
                "headroom_events_retried",
                "Event writes tried again after the API server could not be reached",
                &self.retried,
            ),
        ] {
            metrics.register(name, help, c.clone());
        }
    }
}

/// Events queued for the writer at most; more are dropped and counted, as client-go's
/// `tools/events` broadcaster drops them (`maxQueuedEvents`).
pub const QUEUED_EVENTS: usize = 1000;

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
    // client-go's event broadcaster queues 1,000 events and drops what does not fit
    // (`watch.NewBroadcaster(maxQueuedEvents, watch.DropIfChannelFull)`).
    let (tx, rx) = mpsc::channel(QUEUED_EVENTS);
    (
        Recorder {
            tx,
            stats: Arc::new(EventStats::default()),
        },
        rx,
    )
}

/// The client-side rate limit of event writes (`events.qps`, `burst`), as client-go's
/// token bucket (`rate.Limiter.Wait`): each write reserves the instant it may go, it is
/// never dropped for want of a token.
struct TokenBucket {
    tokens: f64,
    burst: f64,
    qps: f64,
    at: Instant,
}

impl TokenBucket {
    /// Reserves a token: the instant (`now` or later) the write may go.
    fn reserve(&mut self, now: Instant) -> Instant {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + dt * self.qps).min(self.burst) - 1.0;
        if self.tokens >= 0.0 {
            now
        } else {
            now + Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

/// Writes started and not yet finished at most (waiting for a slot in flight or for the
/// rate limit): client-go's recorder starts a goroutine per event with no bound; this keeps
/// one, far above any burst of binds, so sustained overload ends in the queue's drops
/// instead of unbounded memory.
const MAX_PENDING_WRITES: usize = 100_000;

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

/// One write to the API server and what it was.
enum Write {
    /// A new event; on failure its series entry goes (a repeat then creates it anew).
    Create(Api<Event>, Box<Event>, SeriesKey),
    /// A series update of the event named.
    Series(Api<Event>, String, serde_json::Value),
}

/// What a finished write came to.
struct Written {
    create: Option<SeriesKey>,
    result: kube::Result<()>,
}

/// How many times a write is tried while the API server cannot be reached, and how long
/// apart: client-go's event sink (`maxTriesPerEvent` 12, `sleepDuration` 10 s in
/// `tools/record/event.go`), so an API server restart loses no event, as it loses none of
/// kube-scheduler's. A refusal (the API server answered) is final.
pub const WRITE_TRIES: u32 = 12;
/// See [`WRITE_TRIES`].
pub const WRITE_RETRY: Duration = Duration::from_secs(10);

impl Write {
    async fn send_once(&self) -> kube::Result<()> {
        match self {
            Write::Create(api, event, _) => {
                api.create(&PostParams::default(), event).await.map(drop)
            }
            Write::Series(api, name, patch) => api
                .patch(name, &PatchParams::default(), &Patch::Merge(patch.clone()))
                .await
                .map(drop),
        }
    }

    /// Sends the write, holding one of the writer's permits per try, and tries again while
    /// the API server cannot be reached ([`WRITE_TRIES`]); the first wait is random within
    /// [`WRITE_RETRY`] (as client-go's, so replicas do not retry in step), the next ones
    /// whole. Once the writer stops, a failed try is the last.
    async fn send(
        self,
        permits: Arc<tokio::sync::Semaphore>,
        mut stopping: tokio::sync::watch::Receiver<bool>,
        stats: Arc<EventStats>,
    ) -> Written {
        let mut tries = 0;
        let result = loop {
            tries += 1;
            // The semaphore is never closed; without a permit the write still goes.
            let permit = permits.acquire().await.ok();
            let result = self.send_once().await;
            drop(permit);
            let again = matches!(&result, Err(e) if super::health::unreachable(e))
                && tries < WRITE_TRIES
                && !*stopping.borrow();
            if !again {
                break result;
            }
            stats.retried.inc();
            let wait = if tries == 1 {
                WRITE_RETRY.mul_f64(rand::random::<f64>())
            } else {
                WRITE_RETRY
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stopping.wait_for(|s| *s) => {}
            }
        };
        let create = match self {
            Write::Create(_, _, key) => Some(key),
            Write::Series(..) => None,
        };
        Written { create, result }
    }
}

/// The writer's state between events: the series within their window, the writes in
/// flight and the rate limit.
struct Writer {
    client: Client,
    config: EventsConfig,
    instance: String,
    stats: Arc<EventStats>,
    bucket: Option<TokenBucket>,
    series: HashMap<SeriesKey, Series>,
    /// Writes started: each waits for its instant under the rate limit, then for one of
    /// the `maxInFlight` permits, then sends.
    in_flight: tokio::task::JoinSet<Written>,
    permits: Arc<tokio::sync::Semaphore>,
    /// Set when the writer stops: writes in flight stop retrying.
    stopping: tokio::sync::watch::Sender<bool>,
}

impl Writer {
    /// Starts `w` without waiting for it, as client-go's recorder starts a goroutine per
    /// event: the queue is only drained slower than events arrive when
    /// [`MAX_PENDING_WRITES`] are already started, and then it drops what it has no room
    /// for (as client-go's broadcaster drops what its 1,000-event queue has no room for).
    async fn send(&mut self, w: Write) {
        while self.in_flight.len() >= MAX_PENDING_WRITES {
            if let Some(done) = self.in_flight.join_next().await {
                self.finished(done);
            }
        }
        let at = self.bucket.as_mut().map(|b| b.reserve(Instant::now()));
        let (permits, stopping, stats) = (
            self.permits.clone(),
            self.stopping.subscribe(),
            self.stats.clone(),
        );
        self.in_flight.spawn(async move {
            if let Some(at) = at {
                tokio::time::sleep_until(at).await;
            }
            w.send(permits, stopping, stats).await
        });
    }

    fn finished(&mut self, done: Result<Written, tokio::task::JoinError>) {
        let Ok(w) = done else { return };
        match (&w.result, w.create) {
            (Ok(()), Some(_)) => {
                self.stats.created.inc();
                self.stats.calls.ok();
            }
            (Ok(()), None) => {
                self.stats.series_updates.inc();
                self.stats.calls.ok();
            }
            (Err(e), create) => {
                let op = match create {
                    Some(key) => {
                        self.series.remove(&key);
                        "creating an event"
                    }
                    None => "updating an event series",
                };
                self.stats.failure(op, e);
            }
        }
    }

    /// One event from the queue: a repeat within its series window is counted into the
    /// series (and updates it at most once per `seriesUpdateInterval`); anything else is a
    /// new event.
    async fn record(&mut self, ev: EventSpec) {
        let now = Instant::now();
        let key = key_of(&ev);
        if let Some(s) = self.series.get_mut(&key)
            && now.saturating_duration_since(s.started) < self.config.series_window
        {
            s.count += 1;
            s.unwritten = true;
            if now.saturating_duration_since(s.last_write) >= self.config.series_update_interval {
                let w = series_write(&self.client, s, now);
                self.send(w).await;
            } else {
                self.stats.aggregated.inc();
            }
            return;
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
            reporting_controller: Some(self.config.reporting_controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            action: Some(ev.action.to_string()),
            reason: Some(ev.reason.to_string()),
            regarding: Some(ev.regarding.clone()),
            note: Some(truncate(&ev.note, 1024)),
            type_: Some(ev.type_.to_string()),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        self.series.insert(
            key.clone(),
            Series {
                namespace,
                name,
                started: now,
                last_write: now,
                count: 1,
                unwritten: false,
            },
        );
        self.send(Write::Create(api, Box::new(event), key)).await;
    }

    /// The periodic flush: series past their window are forgotten; repeats only counted so
    /// far go out.
    async fn flush(&mut self) {
        let now = Instant::now();
        let window = self.config.series_window;
        self.series
            .retain(|_, s| now.saturating_duration_since(s.started) < window);
        let due: Vec<SeriesKey> = self
            .series
            .iter()
            .filter(|(_, s)| {
                s.unwritten
                    && now.saturating_duration_since(s.last_write)
                        >= self.config.series_update_interval
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in due {
            if let Some(s) = self.series.get_mut(&k) {
                let w = series_write(&self.client, s, now);
                self.send(w).await;
            }
        }
    }
}

/// Writes events from `rx` until `shutdown`, then drains the queue and waits for the writes
/// in flight. `instance` is the `reportingInstance` (this replica). Up to
/// `events.maxInFlight` writes go at once, so events keep up with binds; `events.qps`, when
/// set, limits them as kube-scheduler's `clientConnection.qps` limits its event client.
pub async fn run_event_writer(
    client: Client,
    config: EventsConfig,
    instance: String,
    stats: Arc<EventStats>,
    mut rx: mpsc::Receiver<EventSpec>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let bucket = (config.qps > 0.0).then(|| TokenBucket {
        tokens: f64::from(config.burst),
        burst: f64::from(config.burst),
        qps: config.qps,
        at: Instant::now(),
    });
    let mut flush =
        tokio::time::interval(config.series_update_interval.max(Duration::from_millis(10)));
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let permits = Arc::new(tokio::sync::Semaphore::new(config.max_in_flight as usize));
    let mut w = Writer {
        client,
        config,
        instance,
        stats,
        bucket,
        series: HashMap::new(),
        in_flight: tokio::task::JoinSet::new(),
        permits,
        stopping: tokio::sync::watch::channel(false).0,
    };
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            Some(done) = w.in_flight.join_next(), if !w.in_flight.is_empty() => w.finished(done),
            ev = rx.recv() => match ev {
                Some(ev) => w.record(ev).await,
                None => break,
            },
            _ = flush.tick() => w.flush().await,
            _ = &mut shutdown => break,
        }
    }
    // Shutting down: what is queued still goes out (tried once), then every write in
    // flight ends.
    w.stopping.send_replace(true);
    rx.close();
    while let Some(ev) = rx.recv().await {
        w.record(ev).await;
    }
    w.flush().await;
    while let Some(done) = w.in_flight.join_next().await {
        w.finished(done);
    }
}

fn series_write(client: &Client, s: &mut Series, now: Instant) -> Write {
    let api: Api<Event> = Api::namespaced(client.clone(), &s.namespace);
    let patch = json!({"series": {"count": s.count, "lastObservedTime": micro_now()}});
    s.last_write = now;
    s.unwritten = false;
    Write::Series(api, s.name.clone(), patch)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst of writes goes at once; the rest are spaced at `qps`, each waiting for its
    /// turn (reserved, never dropped); idle time refills at most the burst.
    #[test]
    fn token_bucket_spaces_writes_beyond_the_burst() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut b = TokenBucket {
            tokens: 2.0,
            burst: 2.0,
            qps: 1.0,
            at: t0,
        };
        assert_eq!(b.reserve(t0), t0);
        assert_eq!(b.reserve(t0), t0);
        assert_eq!(b.reserve(t0), t0 + ms(1000));
        assert_eq!(b.reserve(t0), t0 + ms(2000));
        // Half a second later the queue of reservations still stands.
        assert_eq!(b.reserve(t0 + ms(500)), t0 + ms(3000));
        // Long idle: the burst again, no more.
        let later = t0 + Duration::from_secs(100);
        assert_eq!(b.reserve(later), later);
        assert_eq!(b.reserve(later), later);
        assert_eq!(b.reserve(later), later + ms(1000));
    }

    /// As client-go's broadcaster: 1,000 events wait in the queue; the rest are dropped and
    /// counted while nothing drains it.
    #[test]
    fn a_full_queue_drops_and_counts_what_does_not_fit() {
        let (r, _rx) = recorder();
        let pod = PodInfo::new(Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": "p", "namespace": "default", "uid": "u"}}),
            )
            .unwrap(),
        ));
        for _ in 0..QUEUED_EVENTS + 500 {
            r.record(scheduled(&pod, "n", None));
        }
        assert_eq!(r.stats().dropped.get(), 500);
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

//! The event recorder: `Scheduled` and `FailedScheduling` Events (`events.k8s.io/v1`, the
//! fields kube-scheduler fills) and the pod's `PodScheduled=False` condition, written by a
//! background task fed by a bounded channel, so nothing that schedules waits on them.
//! Used by the [`Reporter`](super::events::Reporter) after each decision and by preemption
//! ([`super::preempt`]) for its `Preempted` events.
//!
//! A stuck pod must not flood the API: an event identical to one written within
//! `seriesWindow` (same pod, reason and message) becomes a `series` update of that event,
//! at most one per `seriesUpdateInterval` (repeats in between are counted and sent with the
//! next update, or by the periodic flush), and every write takes a token from a bucket
//! (`qps`, `burst`); without a token the write is dropped and counted.

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
use crate::framework::Fallback;
use crate::snapshot::PodInfo;

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
#[derive(Debug)]
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
                stats.calls.ok();
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
            Err(e) => stats.failure("creating an event", &e),
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
            stats.calls.ok();
        }
        Err(e) => stats.failure("updating an event series", &e),
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

#[cfg(test)]
mod tests {
    use super::*;

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

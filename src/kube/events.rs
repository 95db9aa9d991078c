//! What users see after a decision, as with kube-scheduler: `Scheduled` and
//! `FailedScheduling` Events and the pod's `PodScheduled=False` condition with the same
//! message (written by the [`recorder`](super::recorder), which also bounds their rate),
//! evictions for a preemption ([`super::preempt`]), and after a bind bk-ci's optional
//! `builder-history-nodes` annotation. (The `headroom.io/decision` annotation travels in
//! the binding itself: [`bind_annotator`].)
//!
//! This is `serve`'s [`OutcomeHandler`](crate::decisions::OutcomeHandler): the engine's
//! decision sink hands it each decision once settled (a placed pod once its bind ended,
//! with the placement history the sink recorded), through [`ReporterHandle`].
//!
//! All of it runs in background tasks fed by channels, so the scheduling loop never waits
//! on these writes, and a slow API server loses events (counted), never scheduling time.
//! The condition is patched only when its message changes.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use prometheus_client::metrics::counter::Counter;
use serde_json::json;
use tokio::sync::mpsc;

use super::health::ApiCalls;
use super::recorder::{Recorder, failed_scheduling, pod_ref, scheduled, unschedulable_condition};
use crate::config::serve::ServeConfig;
use crate::decisions::Settled;
use headroom_scheduler::framework::{Decision, Fallback, Nomination, Outcome};
use headroom_scheduler::key::{PodId, Uid};
use headroom_scheduler::queue::SchedulingQueue;
use headroom_scheduler::usage_context::UsageContext;

/// The decision summary annotation.
pub const DECISION_ANNOTATION: &str = "headroom.io/decision";
/// bk-ci's placement history annotation (a JSON array of node names, newest first).
pub const BKCI_HISTORY_ANNOTATION: &str = "bkci.dispatch.kubenetes/builder-history-nodes";

/// What each binding writes onto its pod under `serve`: the decision summary
/// (`serve.decisionAnnotation`), computed in the cycle from the snapshot it read, so the
/// API server writes it with the binding (no patch of its own).
pub fn bind_annotator(config: &ServeConfig) -> Option<crate::scheduling_loop::BindAnnotator> {
    config.decision_annotation.then(|| {
        let annotate: crate::scheduling_loop::BindAnnotator = Arc::new(|d, snapshot| {
            let usage = snapshot.usage();
            let summary = decision_summary(d, usage, usage.now_ms);
            headroom_scheduler::framework::BindAnnotations::from([(
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
#[derive(Debug, Clone)]
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
    /// Settled decisions lost because the reporter's queue was full.
    pub overflow: Counter,
    /// Preemption's calls (victims' DisruptionTarget patches and deletions).
    pub preemption: super::preempt::PreemptStats,
    /// Keeps the failures' warnings to one per interval (an API server refusing patches
    /// fails once per pod), and reports an unreachable server to the shared health.
    pub calls: Arc<ApiCalls>,
}

impl Default for ReporterStats {
    fn default() -> Self {
        ReporterStats {
            conditions: Counter::default(),
            annotations: Counter::default(),
            placements: Counter::default(),
            failed: Counter::default(),
            dropped: Counter::default(),
            overflow: Counter::default(),
            preemption: Default::default(),
            calls: Arc::new(ApiCalls::new("pod status patches", "patching again")),
        }
    }
}

impl ReporterStats {
    /// Counts a failed patch of `op` and reports it (see [`ApiCalls`]).
    fn failure(&self, op: &str, e: &kube::Error) {
        self.failed.inc();
        self.calls.failed(op, e);
    }

    /// Counts a patch of `op` without an answer within `after`.
    fn timeout(&self, op: &str, after: std::time::Duration) {
        self.failed.inc();
        self.calls.timed_out(op, after);
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
            (
                "headroom_reporter_overflow",
                "Settled decisions lost because the reporter's queue was full (their events and patches)",
                &self.overflow,
            ),
        ] {
            metrics.register(name, help, c.clone());
        }
        self.preemption.register(metrics);
    }
}

/// Turns settled decisions into events, conditions, evictions and annotations.
pub struct Reporter {
    /// The API client.
    pub client: Client,
    /// Where events go.
    pub recorder: Recorder,
    /// The serve settings (annotations).
    pub config: ServeConfig,
    /// Counters (registered on the engine's metrics by the caller).
    pub stats: ReporterStats,
    /// Binds come first: while binds wait for the API server (this flow controller's
    /// window is full), the reporter's own patches (conditions, annotations) are dropped
    /// and counted rather than sent.
    pub yield_to: Option<Arc<super::flow::BindFlow>>,
    /// Told of victims an eviction found gone already ([`SchedulingQueue::victim_gone`]:
    /// no deletion event will show them) and of evictions that failed
    /// ([`SchedulingQueue::preemption_done`]), so the preemptor waiting for them goes on.
    pub queue: Option<Arc<SchedulingQueue>>,
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

/// Settled decisions waiting for the reporter, at most: past this they are lost (counted
/// in `headroom_reporter_overflow_total`) rather than holding up the decision sink.
pub const REPORTER_QUEUE: usize = 4096;

/// The engine's side of the reporter: hands each settled decision to the reporter's task
/// without waiting.
pub struct ReporterHandle {
    tx: mpsc::Sender<Settled>,
    overflow: Counter,
    queue: Option<Arc<SchedulingQueue>>,
}

impl crate::decisions::OutcomeHandler for ReporterHandle {
    fn settled(&self, settled: Settled) {
        // kube-scheduler writes the events and conditions of the pods it bound through
        // the extender.
        if settled.by_extender {
            return;
        }
        if let Err(e) = self.tx.try_send(settled) {
            self.overflow.inc();
            // A lost nomination is never acted on: its preemptor waits no more, and is
            // retried (and preempts again if it must).
            let settled = e.into_inner();
            if settled.nomination.is_some()
                && let Some(q) = &self.queue
            {
                q.preemption_done(&PodId::new(settled.pod, settled.uid));
            }
        }
    }
}

/// What the reporter keeps between messages.
#[derive(Default)]
struct ReporterState {
    /// The last `PodScheduled=False` message written per uid (patched only on change).
    conditions: HashMap<Uid, String>,
    /// Nominations being acted on (victims evicted), at most
    /// [`super::preempt::NOMINATIONS_IN_FLIGHT`]; awaited before the reporter returns.
    preempting: tokio::task::JoinSet<()>,
}

/// The reporter's queue: the handle for [`crate::engine::Engine::start`] and the receiver
/// for [`Reporter::run`]; losses count into `stats`, and a lost nomination's preemptor is
/// released in `queue`.
pub fn reporter_channel(
    stats: &ReporterStats,
    queue: Option<Arc<SchedulingQueue>>,
) -> (Arc<ReporterHandle>, mpsc::Receiver<Settled>) {
    let (tx, rx) = mpsc::channel(REPORTER_QUEUE);
    let handle = ReporterHandle {
        tx,
        overflow: stats.overflow.clone(),
        queue,
    };
    (Arc::new(handle), rx)
}

impl Reporter {
    /// Runs until the channel closes or `shutdown`; then drains what is queued.
    pub async fn run(
        self,
        mut settled: mpsc::Receiver<Settled>,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> ReporterStats {
        let mut st = ReporterState::default();
        tokio::pin!(shutdown);
        let mut stopping = false;
        loop {
            let next = if stopping {
                settled.try_recv().ok()
            } else {
                tokio::select! {
                    biased;
                    s = settled.recv() => s,
                    _ = &mut shutdown => { stopping = true; continue; }
                }
            };
            let Some(s) = next else { break };
            // Reap finished evictions (their outcome is logged and counted by them).
            while st.preempting.try_join_next().is_some() {}
            match &s.bind {
                Some(_) => self.on_bound(s, &mut st).await,
                None => self.on_unplaced(&s, &mut st).await,
            }
            // Bound the dedupe map: losing it costs one redundant write per pod.
            if st.conditions.len() > 100_000 {
                st.conditions.clear();
            }
        }
        // Phased shutdown: evictions already started finish (each call is bounded by
        // the request timeout) before the reporter says it is done.
        while st.preempting.join_next().await.is_some() {}
        self.stats
    }

    /// Starts acting on `nomination` for the pod of `d` in a task of its own, first
    /// waiting for one in flight to finish when [`super::preempt::NOMINATIONS_IN_FLIGHT`]
    /// are: a nomination is never dropped.
    async fn preempt(&self, d: &Settled, nomination: &Nomination, st: &mut ReporterState) {
        while st.preempting.len() >= super::preempt::NOMINATIONS_IN_FLIGHT {
            st.preempting.join_next().await;
        }
        let client = self.client.clone();
        let recorder = self.recorder.clone();
        let stats = self.stats.preemption.clone();
        let timeout = self.config.request_timeout;
        let profile = d.profile.clone();
        let (pod, uid) = (d.pod.clone(), d.uid.clone());
        let nomination = nomination.clone();
        let queue = self.queue.clone();
        st.preempting.spawn(async move {
            let done = super::preempt::actuate(
                &client,
                &recorder,
                &stats,
                timeout,
                &profile,
                (&pod, &uid),
                &nomination,
            )
            .await;
            let Some(q) = queue else { return };
            // The preemptor waits until the cache has seen every victim go (the informer
            // tells the queue of each deletion). A victim found gone already has shown
            // it; after a failed eviction, the victim may never go: the preemptor waits no
            // more, and preempts again if it still does not fit.
            for v in &done.gone {
                q.victim_gone(v);
            }
            if !done.errors.is_empty() {
                q.preemption_done(&PodId::new(pod, uid));
            }
        });
    }

    async fn on_unplaced(&self, d: &Settled, st: &mut ReporterState) {
        let now = super::now_ms();
        let (reason, message) = match &d.outcome {
            Outcome::Placed { .. } => return,
            Outcome::Unschedulable { message } => ("Unschedulable", message.clone()),
            Outcome::Error { message } => ("SchedulerError", message.clone()),
        };
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(d.pod.namespace.to_string()),
            name: Some(d.pod.name.to_string()),
            uid: d.uid.non_empty(),
            ..Default::default()
        };
        // kube-scheduler logs this at -v 2 ("Unable to schedule pod; no fit; waiting").
        tracing::debug!(pod = %d.pod, reason, %message, "unable to schedule the pod");
        self.recorder.record(failed_scheduling(regarding, &message));
        // Preemption: the victims' evictions start whatever the API's load (the pod cannot
        // be placed until they are gone) and run beside the condition's patch, as with
        // upstream's async preemption, where the failure handler does not wait for them.
        let mut dedupe = message.clone();
        if let Some(n) = &d.nomination {
            self.preempt(d, n, st).await;
            dedupe.push_str(&format!("\nnominated: {}", n.node));
        }
        if st.conditions.get(&d.uid) == Some(&dedupe) || self.yield_to_binds() {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &d.pod.namespace);
        let mut patch = unschedulable_condition(reason, &message, now);
        if let Some(n) = &d.nomination {
            patch["status"]["nominatedNodeName"] = json!(n.node.as_ref());
        }
        let res = tokio::time::timeout(
            self.config.request_timeout,
            api.patch_status(
                &d.pod.name,
                &PatchParams::default(),
                &Patch::Strategic(patch),
            ),
        )
        .await;
        match res {
            Ok(Ok(_)) => {
                self.stats.conditions.inc();
                self.stats.calls.ok();
                st.conditions.insert(d.uid.clone(), dedupe);
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => self.stats.calls.ok(),
            Ok(Err(e)) => {
                tracing::debug!(pod = %d.pod, error = %e, "patching the PodScheduled condition failed");
                self.stats
                    .failure("patching the PodScheduled condition", &e);
            }
            Err(_) => self.stats.timeout(
                "patching the PodScheduled condition",
                self.config.request_timeout,
            ),
        }
    }

    async fn on_bound(&self, s: Settled, st: &mut ReporterState) {
        let Some(o) = &s.bind else { return };
        if let Some(e) = o.outcome.error() {
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
            .record(scheduled(&o.pod, &o.node, s.fallback.as_ref()));
        // The engine recorded the placement in the store's history (the sink, with the
        // store); bk-ci's annotation shows that history.
        let history = match s.history {
            Some(h) => {
                self.stats.placements.inc();
                h
            }
            None => vec![o.node.clone()],
        };
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
                self.stats.calls.ok();
            }
            Ok(Err(e)) => {
                tracing::debug!(pod = %o.pod.key(), error = %e, "annotating the pod failed");
                self.stats.failure("annotating a pod", &e);
            }
            Err(_) => self
                .stats
                .timeout("annotating a pod", self.config.request_timeout),
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
        let mut d = Decision::new("ci", "b-1", "u-1".into(), "headroom", 3, Arc::new(names));
        d.feasible = (0..1500).rev().collect();
        // Ties on the best total: the node name breaks them.
        d.totals = d.feasible.iter().map(|&i| i64::from(i % 700)).collect();
        d.scores = vec![headroom_scheduler::framework::decision::ScoreColumn {
            plugin: "NodeResourcesFit",
            weight: 1,
            raw: None,
            normalized: d.totals.iter().map(|t| (t % 101) as u8).collect(),
            details: None,
        }];
        d.outcome = Outcome::Placed {
            node: "n0699".into(),
        };
        let slim = d.summary_only();
        assert!(slim.scores.is_empty() && slim.feasible.len() == 3);
        assert_eq!((slim.feasible_count(), d.feasible_count()), (1500, 1500));
        let usage = headroom_scheduler::usage_context::UsageContext::default();
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
        assert!(crate::decisions::approx_bytes(&slim) * 20 < crate::decisions::approx_bytes(&d));
    }
}

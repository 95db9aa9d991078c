//! The scheduling loop: pops pods from the queue, runs a cycle, assumes the pod on its node,
//! and binds it in the background so the next cycle does not wait for the bind.
//!
//! ```text
//! queue.pop ─► Scheduler::schedule_then ─► no node: queue.add_unschedulable (backoff/unschedulable)
//!              (cycle on the leased       └─► node:    assumed in the cache ─► spawn bind
//!               snapshot, then settled)                 bind ok:   finish_binding (+ confirm), queue.done
//!                                                       bind fail: forget (node freed), requeue with backoff
//! ```
//!
//! Shutdown stops taking pods at once and then waits for the binds in flight, so a pod that was
//! assumed is either bound or forgotten, never left half-done.

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::task::JoinSet;

use crate::decisions::{Bound, DecisionInputs, Settled};
use headroom_scheduler::cache::Cache;
use headroom_scheduler::framework::{BindAnnotations, BindOutcome, BindPlugin, Decision};
use headroom_scheduler::key::{PodId, PodKey};
use headroom_scheduler::queue::{Failure, QueuedPodInfo, SchedulingQueue};
use headroom_scheduler::scheduler::Scheduler;
use headroom_scheduler::snapshot::PodInfo;
use headroom_scheduler::usage::{QueueTail, Wait};

/// Counters of what the loop did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LoopStats {
    /// Cycles run.
    pub attempts: u64,
    /// Pods bound.
    pub bound: u64,
    /// Cycles that found no node.
    pub unschedulable: u64,
    /// Binds that failed (the pod was forgotten, then requeued or, gone or bound by someone
    /// else, dropped), PreBind failures included.
    pub bind_errors: u64,
    /// PreBind failures (VolumeBinding could not bind the pod's volumes), each also a bind
    /// error.
    pub pre_bind_errors: u64,
    /// Decisions not delivered because the decision sink had stopped (a full channel
    /// makes the loop wait instead: a decision carries what the mode acts on).
    pub decisions_dropped: u64,
    /// Wall time spent in scheduling cycles (not binds).
    pub cycle_time: std::time::Duration,
}

impl LoopStats {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &LoopStats) {
        self.attempts += other.attempts;
        self.bound += other.bound;
        self.unschedulable += other.unschedulable;
        self.bind_errors += other.bind_errors;
        self.pre_bind_errors += other.pre_bind_errors;
        self.decisions_dropped += other.decisions_dropped;
        self.cycle_time += other.cycle_time;
    }
}

/// How the loop runs.
#[derive(Debug, Clone, Copy)]
pub struct LoopOptions {
    /// Build explanations (per-node numbers) for every decision.
    pub explain: bool,
    /// Confirm an assumed pod as soon as its bind succeeded (simulator, tests). Off when a
    /// watch will confirm it (a real cluster), so a lost bind is caught by the assume TTL.
    pub confirm_on_bind: bool,
    /// A pod that preempts waits until the cache has seen its victims go
    /// ([`SchedulingQueue::add_preempting`]): the mode's outcome handler evicts them after
    /// the cycle ([`crate::engine::Parts::async_preemption`]).
    pub hold_preemptors: bool,
}

impl Default for LoopOptions {
    fn default() -> Self {
        LoopOptions {
            explain: false,
            confirm_on_bind: true,
            hold_preemptors: false,
        }
    }
}

/// Computes the annotations a placed pod's binding carries from its decision and the
/// snapshot its cycle read (under `serve`: the `headroom.io/decision` summary). Runs in
/// the cycle's critical section, so it must be cheap and do no I/O.
pub type BindAnnotator = Arc<
    dyn Fn(&Decision, &headroom_scheduler::snapshot::Snapshot) -> BindAnnotations + Send + Sync,
>;

/// The parts the loop works with.
pub struct SchedulingLoop {
    /// The scheduler (profiles, and the cache whose snapshot each cycle leases).
    pub scheduler: Arc<Scheduler>,
    /// The queue of pending pods.
    pub queue: Arc<SchedulingQueue>,
    /// The binder.
    pub binder: Arc<dyn BindPlugin>,
    /// Where decision records go (bounded by count and bytes: a slow reader loses records,
    /// or their detail, never scheduling time).
    pub decisions: Option<crate::decisions::DecisionSender>,
    /// Options.
    pub options: LoopOptions,
    /// What a placed pod's binding writes onto it besides the node (`None`: nothing).
    pub annotate: Option<BindAnnotator>,
    /// Where a bound pod's time since it first entered the queue goes (upstream's
    /// `scheduler_pod_scheduling_sli_duration_seconds`); `None`: nowhere.
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
    /// The queue's tail the warm wait stays within (time to schedule of the pods placed
    /// without a hold): the engine's, so that a loop rebuilt (a new leader term) keeps it.
    /// Only the loop writes it, once per cycle. `None` with the warm wait off: nothing
    /// reads it, so nothing keeps it.
    pub tail: Option<Arc<Mutex<QueueTail>>>,
}

/// The profile a pod asks for: its `spec.schedulerName`, or the first profile when it
/// names none. A pod naming a profile the scheduler does not have gets an error decision
/// from [`Scheduler::schedule_one`], never another profile's verdict.
fn profile_of(pod: &PodInfo) -> Option<&str> {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
}

impl SchedulingLoop {
    /// Runs until `shutdown` completes or the queue closes; returns what it did.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> LoopStats {
        let stats = Arc::new(Mutex::new(LoopStats::default()));
        let mut binds: JoinSet<()> = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            // Reap finished binds so the set does not grow.
            while binds.try_join_next().is_some() {}
            let popped = tokio::select! {
                biased;
                _ = &mut shutdown => break,
                p = self.queue.pop() => p,
            };
            let Some(queued) = popped else { break };
            self.schedule(queued, &mut binds, &stats).await;
        }
        // Finish the binds in flight: every assumed pod ends bound or forgotten.
        while binds.join_next().await.is_some() {}
        *stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Schedules every pod that is ready now, waits for their binds, and repeats until the
    /// queue is settled (nothing ready, nothing in flight); returns what it did. The
    /// simulator drives the loop this way between two steps of simulated time, so a step's
    /// pods are all decided, in the same order, before time moves on.
    pub async fn run_until_settled(&self) -> LoopStats {
        let stats = Arc::new(Mutex::new(LoopStats::default()));
        let mut binds: JoinSet<()> = JoinSet::new();
        loop {
            while let Some(queued) = self.queue.try_pop() {
                self.schedule(queued, &mut binds, &stats).await;
            }
            if binds.is_empty() {
                break;
            }
            while binds.join_next().await.is_some() {}
        }
        *stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One pod: the cycle, the decision published, then either back to the queue or
    /// assumed on its node with the bind spawned (the next cycle does not wait for it).
    /// The pod's wait since its first attempt (tokio's clock: simulated time in the
    /// simulator) decides whether the usage fallback applies (`usage.maxWait`).
    async fn schedule(
        &self,
        queued: QueuedPodInfo,
        binds: &mut JoinSet<()>,
        stats: &Arc<Mutex<LoopStats>>,
    ) {
        let waited = queued
            .initial_attempt_timestamp
            .map_or(std::time::Duration::ZERO, |t| {
                tokio::time::Instant::now().saturating_duration_since(t)
            });
        let (attempts, first_attempt) = (queued.attempts, queued.initial_attempt_timestamp);
        let pod = queued.pod_info;
        let id = PodId::of(&pod);
        let (tail, awaited) = self.tail.as_ref().map_or_else(Default::default, |t| {
            let t = t.lock().unwrap_or_else(|e| e.into_inner());
            let tail = t.tail_for(&id);
            // Only a pod still inside its tail can be held and read the awaited nodes:
            // the rest of the cycles skip the scan of the held pods.
            let awaited = if waited < tail {
                t.awaited_by_others(&id)
            } else {
                Default::default()
            };
            (tail, awaited)
        });
        // Wall time, not tokio's (possibly paused or simulated) clock: the latency metric
        // is what the cycle cost.
        let started = std::time::Instant::now();
        let (mut attempt, (cycle, decided_at_ms, annotations, inputs)) =
            self.scheduler.schedule_then(
                &pod,
                profile_of(&pod),
                self.options.explain,
                Wait {
                    waited,
                    tail,
                    awaited,
                    ..Wait::default()
                },
                // Read from the snapshot the cycle saw, with the pod assumed, as the lease
                // settles: reading it later (the sink) would hold the cache's snapshot while the
                // next change copies all of it.
                |attempt, snapshot| {
                    let cycle = started.elapsed();
                    let annotations = match (&self.annotate, attempt.decision.node()) {
                        (Some(annotate), Some(_)) => annotate(&attempt.decision, snapshot),
                        _ => BindAnnotations::new(),
                    };
                    let inputs = self.decisions.as_ref().map(|_| {
                        let builder = attempt.placement.as_ref().map(|p| p.builder.to_string());
                        DecisionInputs::at_decision(
                            &attempt.decision,
                            builder,
                            snapshot,
                            self.scheduler.usage_policy(),
                        )
                    });
                    (cycle, snapshot.usage().now_ms, annotations, inputs)
                },
            );
        attempt.decision.cycle_duration = cycle;
        attempt.decision.decided_at_ms = decided_at_ms;
        self.count_wait(&id, &attempt.decision, waited);
        // What the mode acts on once the bind ended (small: no per-node numbers), joined
        // with the bind's result in the bind task.
        let settled = match (&self.decisions, &attempt.placement) {
            (Some(_), Some(p)) => Some(Settled::of(
                &attempt.decision,
                (!p.builder.is_pod()).then(|| p.builder.to_string()),
            )),
            _ => None,
        };
        {
            let mut st = stats.lock().unwrap_or_else(|e| e.into_inner());
            st.attempts += 1;
            st.cycle_time += attempt.decision.cycle_duration;
        }
        let node = attempt.decision.node().map(str::to_string);
        let mut failure = Some(Failure::from(&attempt.decision));
        // A preemptor is filed before its decision goes out: the victims are evicted once
        // the decision reached the mode, and the news that they are must find it waiting.
        if self.options.hold_preemptors
            && attempt.assumed.is_none()
            && let Some(n) = &attempt.decision.nomination
            && let Some(f) = failure.take()
        {
            let victims = n.victims.iter().map(|v| PodId::of(v));
            self.queue.add_preempting(pod.clone(), f, victims);
        }
        self.publish(attempt.decision, inputs.unwrap_or_default(), stats)
            .await;
        let (Some(node), Some(assumed)) = (node, attempt.assumed) else {
            stats
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .unschedulable += 1;
            if let Some(f) = failure {
                self.queue.add_unschedulable(pod, f);
            }
            return;
        };
        let parts = BindParts {
            cache: self.scheduler.cache().clone(),
            queue: self.queue.clone(),
            binder: self.binder.clone(),
            stats: stats.clone(),
            metrics: self.metrics.clone(),
            confirm: self.options.confirm_on_bind,
        };
        let job = BindJob {
            pod,
            assumed,
            node,
            pre_bind: attempt.pre_bind,
            annotations,
            attempts,
            first_attempt,
        };
        let decisions = self.decisions.clone();
        binds.spawn(async move {
            // What the settled record names, kept only when there is a sink to tell.
            let bound = settled
                .as_ref()
                .map(|_| (job.assumed.clone(), job.node.clone()));
            let outcome = bind_one(job, &parts).await;
            if let (Some(tx), Some(mut s), Some((pod, node))) = (decisions, settled, bound) {
                s.bind = Some(Bound { pod, node, outcome });
                // Only a sink that is gone refuses it: nothing left to tell.
                let _ = tx.settled(s).await;
            }
        });
    }

    /// Feeds the queue's tail: a held pod is marked (its placement will not count, and no
    /// other pod is held for its node while it waits), a placed one adds its wait.
    fn count_wait(&self, id: &PodId, d: &Decision, waited: std::time::Duration) {
        let Some(tail) = &self.tail else {
            return;
        };
        let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = &d.warm_hold {
            // The hold ends, at the latest, when the pod's wait reaches its tail.
            let left_ms = ((h.tail_seconds - h.waited_seconds).max(0.0) * 1000.0) as i64;
            tail.held(
                id,
                d.decided_at_ms,
                h.node.clone(),
                d.decided_at_ms.saturating_add(left_ms),
            );
        } else if d.node().is_some() {
            tail.placed(id, d.decided_at_ms, waited);
        }
    }

    /// Hands the decision to the sink, waiting for room when its channel is full (the
    /// sink's pace then sets the loop's: an unplaced pod's FailedScheduling, nomination
    /// and preemption victims travel with it, and must not be lost).
    async fn publish(&self, decision: Decision, inputs: DecisionInputs, stats: &Mutex<LoopStats>) {
        if let Some(tx) = &self.decisions
            && tx.send(decision, inputs).await.is_err()
        {
            stats
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .decisions_dropped += 1;
        }
    }
}

/// What a bind task shares with the loop.
struct BindParts {
    cache: Arc<Cache>,
    queue: Arc<SchedulingQueue>,
    binder: Arc<dyn BindPlugin>,
    stats: Arc<Mutex<LoopStats>>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    confirm: bool,
}

/// One placed pod's binding cycle.
struct BindJob {
    pod: Arc<PodInfo>,
    assumed: Arc<PodInfo>,
    node: String,
    pre_bind: Option<headroom_scheduler::scheduler::PreBind>,
    annotations: BindAnnotations,
    attempts: u32,
    first_attempt: Option<tokio::time::Instant>,
}

/// PreBind, then the bind, and what follows from its outcome — the one place that acts on
/// one, for every binder: bound, the assumed pod is bound (confirmed when the loop confirms
/// on bind) and leaves the queue; gone or bound by someone else, it is forgotten (its node
/// freed) and leaves the queue; otherwise (a PreBind that failed included) it is forgotten
/// and retried with backoff. Returns the outcome, for the decision sink.
async fn bind_one(job: BindJob, parts: &BindParts) -> BindOutcome {
    let BindJob {
        pod,
        assumed,
        node,
        pre_bind,
        annotations,
        attempts,
        first_attempt,
    } = job;
    // PreBind (VolumeBinding's PV writes) before the bind; a failure unreserves,
    // forgets the assumed pod (and its assumed PVs) and retries it with backoff.
    if let Some(mut pb) = pre_bind {
        let s = pb.run(&assumed, &node).await;
        if !s.is_success() {
            tracing::warn!(pod = %pod.key(), node = %node, plugin = s.plugin, error = %s.message(), "PreBind failed; retrying the pod");
            pb.unreserve(&assumed, &node);
            forget(&parts.cache, &pod);
            {
                let mut st = parts.stats.lock().unwrap_or_else(|e| e.into_inner());
                st.bind_errors += 1;
                st.pre_bind_errors += 1;
            }
            let message = format!("running PreBind plugin {:?}: {}", s.plugin, s.message());
            parts
                .queue
                .add_unschedulable(pod, Failure::error(message.clone()));
            return BindOutcome::Retry(message);
        }
    }
    let outcome = parts.binder.bind(&assumed, &node, &annotations).await;
    if outcome.is_bound() {
        let (key, now, confirm) = (
            pod.key(),
            tokio::time::Instant::now().into_std(),
            parts.confirm,
        );
        parts.cache.write(move |c| {
            c.finish_binding(&key, now);
            if confirm {
                c.confirm(&key);
            }
        });
        parts.queue.done(&PodId::of(&pod));
        parts.stats.lock().unwrap_or_else(|e| e.into_inner()).bound += 1;
        if let (Some(m), Some(first)) = (&parts.metrics, first_attempt) {
            m.upstream().observe_scheduled(
                attempts,
                tokio::time::Instant::now().saturating_duration_since(first),
            );
        }
        return outcome;
    }
    forget(&parts.cache, &pod);
    parts
        .stats
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .bind_errors += 1;
    let message = outcome.error().unwrap_or_default();
    if outcome.is_final() {
        tracing::debug!(pod = %pod.key(), node = %node, error = %message, "the pod left the queue: gone or bound by someone else");
        parts.queue.done(&PodId::of(&pod));
    } else {
        let message = format!("binding to {node}: {message}");
        parts.queue.add_unschedulable(pod, Failure::error(message));
    }
    outcome
}

/// A failed bind forgets the assumed pod (its node freed). Written like any change: the
/// pod, requeued right after, is popped only once the cycle in flight has settled, which
/// applies the forget first.
fn forget(cache: &Cache, pod: &Arc<PodInfo>) {
    let pod = pod.clone();
    cache.write(move |c| {
        c.forget(&pod);
    });
}

/// A binder that binds instantly and remembers every binding (the simulator, tests).
#[derive(Default)]
pub struct InstantBinder {
    bound: Mutex<Vec<(PodKey, String)>>,
}

impl InstantBinder {
    /// Creates one.
    pub fn new() -> Self {
        InstantBinder::default()
    }

    /// `(pod, node)` of every binding so far.
    pub fn bindings(&self) -> Vec<(PodKey, String)> {
        self.bound.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl headroom_scheduler::framework::Plugin for InstantBinder {
    fn name(&self) -> &'static str {
        "InstantBinder"
    }
}

impl BindPlugin for InstantBinder {
    fn bind<'a>(
        &'a self,
        pod: &'a PodInfo,
        node: &'a str,
        _annotations: &'a headroom_scheduler::framework::BindAnnotations,
    ) -> headroom_scheduler::framework::BoxFuture<'a, BindOutcome> {
        Box::pin(async move {
            self.bound
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((pod.key(), node.to_string()));
            BindOutcome::Bound
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use headroom_scheduler::framework::{BoxFuture, Plugin};
    use headroom_scheduler::plugins::testutil::*;
    use headroom_scheduler::queue::{ClusterEvent, QueueConfig};
    use serde_json::json;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    /// Fails the first `fail` binds, then binds.
    struct FlakyBinder {
        fail: u32,
        calls: AtomicU32,
        inner: InstantBinder,
    }

    impl Plugin for FlakyBinder {
        fn name(&self) -> &'static str {
            "Flaky"
        }
    }

    impl BindPlugin for FlakyBinder {
        fn bind<'a>(
            &'a self,
            pod: &'a PodInfo,
            node: &'a str,
            annotations: &'a headroom_scheduler::framework::BindAnnotations,
        ) -> BoxFuture<'a, BindOutcome> {
            Box::pin(async move {
                // A bind takes time: the next cycle must already see the assumed pod.
                tokio::time::sleep(Duration::from_millis(100)).await;
                if self.calls.fetch_add(1, Ordering::SeqCst) < self.fail {
                    BindOutcome::Retry(
                        "the server is currently unable to handle the request".into(),
                    )
                } else {
                    self.inner.bind(pod, node, annotations).await
                }
            })
        }
    }

    fn cpu_pod(name: &str, cpu: &str) -> Arc<PodInfo> {
        Arc::new(info(pod(
            name,
            json!({"spec": {"containers": [
            {"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}),
        )))
    }

    /// A loop over one 4-CPU node `n1` with `binder`, its decisions on a channel of
    /// `capacity`.
    fn loop_on_one_node(
        binder: Arc<dyn BindPlugin>,
        capacity: usize,
    ) -> (SchedulingLoop, crate::decisions::DecisionReceiver) {
        let scheduler = Arc::new(Scheduler::new(&Config::default().core()).unwrap());
        scheduler.cache().update(|c| {
            c.replace(headroom_scheduler::snapshot::Snapshot::build(
                [node("n1", json!({}))],
                [],
            ))
        });
        let (tx, rx) = crate::decisions::decision_channel(capacity, usize::MAX);
        let lp = SchedulingLoop {
            scheduler,
            queue: Arc::new(SchedulingQueue::new(QueueConfig::default())),
            binder,
            decisions: Some(tx),
            options: LoopOptions::default(),
            annotate: None,
            metrics: None,
            tail: None,
        };
        (lp, rx)
    }

    /// Answers by pod name: `gone` is gone, `taken` bound by someone else, others bound.
    struct SortingBinder;

    impl Plugin for SortingBinder {
        fn name(&self) -> &'static str {
            "Sorting"
        }
    }

    impl BindPlugin for SortingBinder {
        fn bind<'a>(
            &'a self,
            pod: &'a PodInfo,
            _: &'a str,
            _: &'a headroom_scheduler::framework::BindAnnotations,
        ) -> BoxFuture<'a, BindOutcome> {
            Box::pin(async move {
                match &*pod.name {
                    "gone" => BindOutcome::Gone("binding rejected: pods \"gone\" not found".into()),
                    "taken" => BindOutcome::Conflict("the pod is bound to n9".into()),
                    _ => BindOutcome::Bound,
                }
            })
        }
    }

    /// The loop alone acts on a bind's outcome, whatever the binder: a pod that is gone or
    /// bound by someone else is forgotten (its node freed) and leaves the queue, never
    /// retried; the settled record carries the outcome to the sink.
    #[tokio::test(start_paused = true)]
    async fn gone_and_conflicting_binds_leave_the_queue() {
        let (lp, mut rx) = loop_on_one_node(Arc::new(SortingBinder), 16);
        let (scheduler, queue) = (lp.scheduler.clone(), lp.queue.clone());
        for name in ["gone", "taken", "kept"] {
            queue.add(cpu_pod(name, "1"));
        }
        let stats = lp.run_until_settled().await;
        assert_eq!((stats.bound, stats.bind_errors), (1, 2));
        // Well past any backoff: nothing comes back.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(queue.is_empty(), "{:?}", queue.len());
        let on_n1: Vec<String> = scheduler
            .snapshot()
            .get("n1")
            .unwrap()
            .pods
            .iter()
            .map(|p| p.name.to_string())
            .collect();
        assert_eq!(on_n1, ["kept"], "the others were forgotten");
        let mut outcomes = Vec::new();
        while let Some(r) = rx.try_recv() {
            if let crate::decisions::Record::Settled(s) = r {
                outcomes.push((s.pod.name.to_string(), s.bind.unwrap().outcome));
            }
        }
        outcomes.sort_by(|a, b| a.0.cmp(&b.0));
        assert!(
            matches!(outcomes[0], (ref n, BindOutcome::Gone(_)) if n == "gone"),
            "{outcomes:?}"
        );
        assert_eq!(outcomes[1], ("kept".to_string(), BindOutcome::Bound));
        assert!(
            matches!(outcomes[2], (ref n, BindOutcome::Conflict(_)) if n == "taken"),
            "{outcomes:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn binds_requeues_on_bind_failure_and_unblocks_on_node_added() {
        let mut config = Config::default();
        config.scheduler.seed = Some(3);
        let scheduler = Arc::new(Scheduler::new(&config.core()).unwrap());
        scheduler.cache().update(|c| {
            c.replace(headroom_scheduler::snapshot::Snapshot::build(
                [node("n1", json!({}))],
                [],
            ))
        });
        let queue = Arc::new(SchedulingQueue::new(QueueConfig::default()));
        let binder = Arc::new(FlakyBinder {
            fail: 1,
            calls: AtomicU32::new(0),
            inner: InstantBinder::new(),
        });
        let (tx, mut rx) = crate::decisions::decision_channel(16, usize::MAX);
        let lp = SchedulingLoop {
            scheduler: scheduler.clone(),
            queue: queue.clone(),
            binder: binder.clone(),
            decisions: Some(tx),
            options: LoopOptions::default(),
            annotate: None,
            metrics: None,
            tail: None,
        };
        // Decisions, keeping the settled records seen on the way.
        async fn next(
            rx: &mut crate::decisions::DecisionReceiver,
            settled: &mut Vec<Settled>,
        ) -> Decision {
            loop {
                match rx.recv().await.unwrap() {
                    crate::decisions::Record::Decided(d) => return d.decision,
                    crate::decisions::Record::Settled(s) => settled.push(s),
                    crate::decisions::Record::Barrier(_) => {}
                }
            }
        }
        let mut settled = Vec::new();
        // a (3 CPU) fits n1; b (3 CPU) then does not, because a is assumed there.
        queue.add(cpu_pod("a", "3"));
        queue.add(cpu_pod("b", "3"));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(lp.run(async {
            let _ = stop_rx.await;
        }));

        let first = next(&mut rx, &mut settled).await;
        assert_eq!((&*first.name, first.node()), ("a", Some("n1")));
        let second = next(&mut rx, &mut settled).await;
        assert_eq!(&*second.name, "b");
        assert!(
            second.node().is_none(),
            "a is assumed on n1 before its bind finished"
        );

        // a's first bind fails: it is forgotten (n1 freed) and comes back after its 1 s backoff.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            scheduler.snapshot().get("n1").unwrap().requested.milli_cpu,
            0
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let third = next(&mut rx, &mut settled).await;
        assert_eq!((&*third.name, third.node()), ("a", Some("n1")));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            binder.inner.bindings(),
            vec![(PodKey::new("default", "a"), "n1".to_string())]
        );

        // b waits until a node is added.
        while let Some(r) = rx.try_recv() {
            match r {
                crate::decisions::Record::Decided(d) => panic!("{} decided again", d.decision.name),
                crate::decisions::Record::Settled(s) => settled.push(s),
                crate::decisions::Record::Barrier(_) => {}
            }
        }
        scheduler.cache().write(|c| {
            c.snapshot_mut()
                .upsert_node(Arc::new(node("n2", json!({}))));
        });
        queue.move_all_to_active_or_backoff(ClusterEvent::NodeAdded);
        let fourth = next(&mut rx, &mut settled).await;
        assert_eq!((&*fourth.name, fourth.node()), ("b", Some("n2")));

        stop_tx.send(()).unwrap();
        let stats = handle.await.unwrap();
        // Every bind's result reached the sink's channel after its decision, joined with
        // what the decision came to: a failed, then a and b bound.
        while let Some(r) = rx.recv().await {
            if let crate::decisions::Record::Settled(s) = r {
                settled.push(s);
            }
        }
        let seen: Vec<(&str, bool, &str)> = settled
            .iter()
            .map(|s| {
                let b = s.bind.as_ref().unwrap();
                (&*s.pod.name, b.outcome.is_bound(), b.node.as_str())
            })
            .collect();
        assert_eq!(
            seen,
            [("a", false, "n1"), ("a", true, "n1"), ("b", true, "n2")]
        );
        assert!(
            settled[0]
                .bind
                .as_ref()
                .unwrap()
                .outcome
                .error()
                .unwrap()
                .contains("unable to handle the request"),
            "{:?}",
            settled[0].bind
        );
        assert_eq!(stats.bound, 2);
        assert_eq!(stats.bind_errors, 1);
        assert_eq!(stats.unschedulable, 1);
        assert_eq!(scheduler.cache().read(|c| c.assumed_count()), 0);
    }

    /// A sink slower than the loop never loses a decision: with room for one record, 200
    /// pods that fit nowhere each reach the sink with their verdict (what their
    /// FailedScheduling event is written from), and the loop drops none.
    #[tokio::test(start_paused = true)]
    async fn a_full_decision_channel_slows_the_loop_and_loses_nothing() {
        const PODS: usize = 200;
        let (lp, mut rx) = loop_on_one_node(Arc::new(InstantBinder::new()), 1);
        let queue = lp.queue.clone();
        let sink = tokio::spawn(async move {
            let mut unplaced = Vec::new();
            while let Some(r) = rx.recv().await {
                if let crate::decisions::Record::Decided(d) = r {
                    unplaced.push((d.decision.name.clone(), d.decision.node().is_none()));
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            unplaced
        });
        for i in 0..PODS {
            queue.add(cpu_pod(&format!("p{i}"), "64"));
        }
        let stats = lp.run_until_settled().await;
        drop(lp);
        let unplaced = sink.await.unwrap();
        assert_eq!(stats.decisions_dropped, 0);
        assert_eq!(stats.unschedulable, PODS as u64);
        assert_eq!(unplaced.len(), PODS, "every decision reaches the sink");
        assert!(unplaced.iter().all(|(_, none)| *none));
    }

    /// Fails every PreBind, counting calls.
    struct FailingBinder(std::sync::atomic::AtomicU32);

    impl headroom_scheduler::plugins::volume_binding::VolumeBinder for FailingBinder {
        fn bind_pod_volumes<'a>(
            &'a self,
            _pod: &'a PodInfo,
            _node: &'a str,
            _volumes: &'a headroom_scheduler::snapshot::volumes::PodVolumes,
        ) -> BoxFuture<'a, Result<(), String>> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async {
                Err("Operation cannot be fulfilled on persistentvolumes \"pv-n2\"".to_string())
            })
        }
    }

    /// A failed PreBind through the scheduling loop: the pod is not bound, its PV is
    /// given back, and it is requeued with backoff; the failure is counted.
    #[tokio::test(start_paused = true)]
    async fn failed_pre_bind_unreserves_and_requeues() {
        use headroom_scheduler::plugins::testutil::volumes::{cluster, with_claims};
        use headroom_scheduler::queue::{QueueConfig, SchedulingQueue};
        let config = headroom_scheduler::config::CoreConfig::default();
        let deps = headroom_scheduler::plugins::PluginDeps::from_config(&config);
        let failing = Arc::new(FailingBinder(Default::default()));
        deps.volume_binder.set(failing.clone());
        let scheduler =
            Arc::new(headroom_scheduler::scheduler::Scheduler::with_deps(&config, &deps).unwrap());
        scheduler.cache().update(|c| c.replace(cluster()));
        let queue = Arc::new(SchedulingQueue::new(QueueConfig::default()));
        let binder = Arc::new(InstantBinder::new());
        let lp = SchedulingLoop {
            scheduler: scheduler.clone(),
            queue: queue.clone(),
            binder: binder.clone(),
            decisions: None,
            options: LoopOptions::default(),
            annotate: None,
            metrics: None,
            tail: Default::default(),
        };
        queue.add(Arc::new(with_claims(&["big"])));
        let stats = lp.run_until_settled().await;
        assert_eq!(
            (stats.bind_errors, stats.pre_bind_errors, stats.bound),
            (1, 1, 0)
        );
        assert_eq!(failing.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(binder.bindings().is_empty());
        let s = &scheduler;
        assert_eq!(s.cache().read(|c| c.assumed_count()), 0);
        assert!(!s.snapshot().volumes().is_assumed("pv-n1-big"));
        assert!(!s.snapshot().volumes().is_assumed("pv-n2"));
        assert!(s.snapshot().nodes().iter().all(|n| n.pods.is_empty()));
    }
}

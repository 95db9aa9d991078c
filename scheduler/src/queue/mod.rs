//! The scheduling queue: pods waiting for a scheduling cycle, with kube-scheduler's semantics
//! (upstream's `pkg/scheduler/backend/queue/scheduling_queue.go`).
//!
//! Every pending pod is in exactly one place:
//! - **active**: ready to be scheduled, ordered by [`queue_sort_less`] (priority, then FIFO);
//!   [`SchedulingQueue::pop`] takes the head;
//! - **backoff**: failed recently and waits out `initial × 2^(attempts-1)` (capped), ordered by
//!   expiry; then it moves to active;
//! - **unschedulable**: its last attempt found no node; it waits for a [`ClusterEvent`] that
//!   could help (see the table there) or for `unschedulableTimeout`, then moves to backoff
//!   (if still backing off) or active;
//! - **gated**: a PreEnqueue check (by default: `spec.schedulingGates`) refused it; an update
//!   of the pod runs the check again (so does the unschedulable-timeout flush, for custom
//!   checks);
//! - **in flight**: popped and being scheduled or bound, until [`SchedulingQueue::done`] or
//!   [`SchedulingQueue::add_unschedulable`]. Events and updates that arrive meanwhile are
//!   remembered, so a pod rejected on a stale snapshot is retried instead of parked (upstream's
//!   in-flight events).
//!
//! The queue is unbounded, as upstream's: every entry is a pod the API server already stores,
//! so the API server's own limits bound it, and refusing a pod would lose it (the informer
//! would not offer it again).
//!
//! Time is `tokio::time::Instant`, so tests run on tokio's paused clock.

mod config;
mod event;
mod sort;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Notify;
use tokio::time::Instant;

pub use crate::framework::{ClusterEvent, ClusterEvents, QueueingHints};
pub use config::QueueConfig;
pub use event::{Failure, FailureKind};
pub use sort::{QueueSort, QueuedPodInfo, queue_sort_less};

use sort::ActiveOrd;

use crate::framework::Status;
use crate::key::PodId;
use crate::snapshot::PodInfo;

/// The PreEnqueue check the queue runs before a pod may enter the active queue: `None` lets
/// it in, `Some(status)` keeps it gated with that status. Matches
/// [`Framework::pre_enqueue`](crate::framework::Framework::pre_enqueue).
///
/// It runs under the queue's lock, so it must be quick and must not call the queue.
pub type PreEnqueueFn = Arc<dyn Fn(&PodInfo) -> Option<Status> + Send + Sync>;

/// The default PreEnqueue check, upstream's `SchedulingGates` plugin: a pod with any
/// `spec.schedulingGates` waits.
pub fn scheduling_gates(pod: &PodInfo) -> Option<Status> {
    let gates = pod.pod.spec.as_ref()?.scheduling_gates.as_ref()?;
    if gates.is_empty() {
        return None;
    }
    let names: Vec<&str> = gates.iter().map(|g| g.name.as_str()).collect();
    Some(
        Status::unresolvable(format!(
            "waiting for scheduling gates: [{}]",
            names.join(" ")
        ))
        .with_plugin("SchedulingGates"),
    )
}

/// Where a pending pod is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SubQueue {
    /// Ready to be popped.
    Active,
    /// Waiting out its backoff.
    Backoff,
    /// Waiting for a cluster event or the unschedulable timeout.
    Unschedulable,
    /// Refused by PreEnqueue (scheduling gates).
    Gated,
    /// Popped; being scheduled or bound.
    InFlight,
}

/// How many pods each place holds (for the `pending_pods` metric).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueLengths {
    /// Pods in the active queue.
    pub active: usize,
    /// Pods in backoff.
    pub backoff: usize,
    /// Unschedulable pods.
    pub unschedulable: usize,
    /// Gated pods.
    pub gated: usize,
    /// Pods popped and not yet done or re-added (deleted ones not counted).
    pub in_flight: usize,
}

impl QueueLengths {
    /// All pods the queue knows of, in flight included.
    pub fn total(&self) -> usize {
        self.active + self.backoff + self.unschedulable + self.gated + self.in_flight
    }
}

/// One pending pod as `/queue` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingPod {
    /// Namespace, name and uid.
    #[serde(flatten)]
    pub id: PodId,
    /// `spec.priority`.
    pub priority: i32,
    /// Where the pod is.
    pub queue: SubQueue,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// The message of the last failed attempt, or the PreEnqueue status of a gated pod.
    pub last_failure: Option<String>,
    /// The plugins that rejected the last attempt.
    pub rejected_by: Vec<&'static str>,
    /// Time since the pod was (re)queued.
    #[serde(with = "humantime_serde")]
    pub waiting: Duration,
    /// Backoff left, for pods in backoff.
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub backoff_remaining: Option<Duration>,
}

/// Where an entry sits, with the key that finds it in its ordered sub-queue.
#[derive(Debug, Clone, Copy)]
enum Location {
    Active(ActiveOrd),
    Backoff(Instant, u64),
    Unschedulable,
    Gated,
}

/// Where [`Inner::put`] files an entry.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// Active, keeping a sequence number (re-sorting in place) or taking a fresh one.
    Active(Option<u64>),
    Backoff(Instant),
    Unschedulable,
    Gated,
}

/// A queued (not in-flight) pod.
#[derive(Debug, Clone)]
struct Entry {
    info: QueuedPodInfo,
    location: Location,
    last_failure: Option<String>,
    rejectors: Vec<&'static str>,
}

/// A popped pod: what its requeue needs to know.
#[derive(Debug)]
struct InFlight {
    info: QueuedPodInfo,
    /// Events seen while the pod was being scheduled.
    events: ClusterEvents,
    /// The pod was updated meanwhile (`info` holds the new version).
    updated: bool,
    /// The pod was deleted meanwhile: a requeue must drop it.
    deleted: bool,
}

#[derive(Default)]
struct Inner {
    pods: HashMap<PodId, Entry>,
    active: BTreeMap<ActiveOrd, PodId>,
    backoff: BTreeMap<(Instant, u64), PodId>,
    unschedulable: HashSet<PodId>,
    gated: HashSet<PodId>,
    in_flight: HashMap<PodId, InFlight>,
    /// Unschedulable pods whose preemption is being acted on, with how many of their
    /// victims the cluster still shows: no event moves them until that is none, or
    /// [`SchedulingQueue::preemption_done`].
    preempting: HashMap<PodId, usize>,
    /// Each victim of a preemption in progress, with its preemptors (two preemptions may
    /// choose one victim).
    victims: HashMap<PodId, Vec<PodId>>,
    next_seq: u64,
    closed: bool,
}

/// The scheduling queue. Cheap to share behind an `Arc`; every method takes `&self` and may
/// be called from any task or thread.
pub struct SchedulingQueue {
    config: QueueConfig,
    pre_enqueue: PreEnqueueFn,
    /// Which events may undo which plugin's rejections (the plugins' own declarations).
    hints: QueueingHints,
    inner: Mutex<Inner>,
    /// Wakes waiting `pop`s (and the flush loop) after any change that may give them work.
    notify: Notify,
}

impl fmt::Debug for SchedulingQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulingQueue")
            .field("config", &self.config)
            .field("lengths", &self.len())
            .finish()
    }
}

impl SchedulingQueue {
    /// A queue whose PreEnqueue check is [`scheduling_gates`], without queueing hints (every
    /// event retries every unschedulable pod).
    pub fn new(config: QueueConfig) -> Self {
        Self::with_pre_enqueue(config, Arc::new(scheduling_gates), QueueingHints::default())
    }

    /// A queue with a custom PreEnqueue check (e.g. a profile's
    /// [`Framework::pre_enqueue`](crate::framework::Framework::pre_enqueue)) and the
    /// plugins' queueing hints (the scheduler's
    /// [`queueing_hints`](crate::scheduler::Scheduler::queueing_hints)).
    pub fn with_pre_enqueue(
        config: QueueConfig,
        pre_enqueue: PreEnqueueFn,
        hints: QueueingHints,
    ) -> Self {
        SchedulingQueue {
            config,
            pre_enqueue,
            hints,
            inner: Mutex::new(Inner::default()),
            notify: Notify::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves at worst a pod misfiled; refusing every later
        // call would stop scheduling altogether, so the poison is ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new pending pod (informer Add). It goes to active, or gated when PreEnqueue refuses
    /// it. A pod with `spec.nodeName` is already scheduled and is ignored; a pod the queue
    /// already knows is treated as an [`update`](Self::update), so a replayed Add never makes
    /// a second copy or resets a backoff. Returns where the pod went.
    pub fn add(&self, pod: Arc<PodInfo>) -> Option<SubQueue> {
        if pod.node_name().is_some() {
            return None;
        }
        let key = PodId::of(&pod);
        let mut inner = self.lock();
        if inner.pods.contains_key(&key) || inner.in_flight.contains_key(&key) {
            drop(inner);
            return self.update(pod);
        }
        let now = Instant::now();
        let info = QueuedPodInfo {
            pod_info: pod,
            timestamp: now,
            attempts: 0,
            initial_attempt_timestamp: None,
        };
        let entry = Entry {
            info,
            location: Location::Gated,
            last_failure: None,
            rejectors: Vec::new(),
        };
        let to = self.enter_active(&mut inner, key, entry);
        drop(inner);
        self.notify.notify_waiters();
        Some(to)
    }

    /// A changed pod (informer Update), replacing the queued version wherever it is:
    /// - active or backoff: replaced in place (re-sorted if its priority changed);
    /// - unschedulable: moved to backoff (if still backing off) or active, as upstream, unless
    ///   only its status, resourceVersion, generation, managedFields or finalizers changed —
    ///   the scheduler's own `PodScheduled=False` condition must not retry the pod;
    /// - gated: PreEnqueue runs again, so removing the last gate lets it in;
    /// - in flight: remembered; a failed attempt then retries it after backoff;
    /// - unknown: added.
    ///
    /// A pod that gained `spec.nodeName` was scheduled (by us or another scheduler) and
    /// leaves the queue. Returns where the pod is afterwards.
    pub fn update(&self, pod: Arc<PodInfo>) -> Option<SubQueue> {
        let key = PodId::of(&pod);
        if pod.node_name().is_some() {
            self.delete(&key);
            return None;
        }
        let mut inner = self.lock();
        if let Some(f) = inner.in_flight.get_mut(&key) {
            // Only a change scheduling can see earns the pod a retry; a replayed Add or a
            // status write keeps the verdict of the running attempt.
            f.updated |= pod_updated(&f.info.pod_info.pod, &pod.pod);
            f.info.pod_info = pod;
            return Some(SubQueue::InFlight);
        }
        let Some(mut entry) = inner.remove(&key) else {
            drop(inner);
            return self.add(pod);
        };
        let old = std::mem::replace(&mut entry.info.pod_info, pod);
        let now = Instant::now();
        let to = match entry.location {
            // The pod keeps its timestamp and sequence number (its place among equals); `put`
            // rebuilds the key from the possibly changed priority.
            Location::Active(ord) => inner.put(key, entry, Target::Active(Some(ord.seq()))),
            Location::Backoff(at, _) => inner.put(key, entry, Target::Backoff(at)),
            Location::Unschedulable
                if !pod_updated(&old.pod, &entry.info.pod_info.pod)
                    || inner.preempting.contains_key(&key) =>
            {
                inner.put(key, entry, Target::Unschedulable)
            }
            Location::Unschedulable | Location::Gated => self.requeue(&mut inner, key, entry, now),
        };
        drop(inner);
        self.notify.notify_waiters();
        Some(to)
    }

    /// Removes a pod (informer Delete) from wherever it is. A pod in flight is marked so that
    /// its requeue drops it. Returns whether the queue knew the pod.
    pub fn delete(&self, key: &PodId) -> bool {
        let mut inner = self.lock();
        inner.forget_preemption(key);
        if let Some(f) = inner.in_flight.get_mut(key) {
            f.deleted = true;
            return true;
        }
        inner.remove(key).is_some()
    }

    /// Takes the head of the active queue, waiting until there is one. Pods whose backoff
    /// expired are moved first, so a pod is popped on time even without the flush loop.
    /// Returns `None` once the queue is [closed](Self::close); pods still queued then are
    /// not handed out (upstream drains them; a scheduler shutting down should not start new
    /// cycles).
    pub async fn pop(&self) -> Option<QueuedPodInfo> {
        loop {
            // Registered before looking at the queue, so a change between the look and the
            // wait still wakes us.
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next_backoff = {
                let mut inner = self.lock();
                if inner.closed {
                    return None;
                }
                if let Some(p) = self.pop_locked(&mut inner) {
                    return Some(p);
                }
                inner.backoff.keys().next().map(|(at, _)| *at)
            };
            match next_backoff {
                Some(at) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// The head of the active queue if there is one now (after moving expired backoffs);
    /// `None` when empty or closed.
    pub fn try_pop(&self) -> Option<QueuedPodInfo> {
        let mut inner = self.lock();
        if inner.closed {
            return None;
        }
        self.pop_locked(&mut inner)
    }

    fn pop_locked(&self, inner: &mut Inner) -> Option<QueuedPodInfo> {
        let now = Instant::now();
        self.flush_backoff_locked(inner, now);
        let (_, key) = inner.active.pop_first()?;
        let entry = inner
            .pods
            .remove(&key)
            .expect("active queue and pod map agree");
        let mut info = entry.info;
        // Upstream counts an attempt when the pod is popped.
        info.attempts = info.attempts.saturating_add(1);
        info.initial_attempt_timestamp.get_or_insert(now);
        inner.in_flight.insert(
            key,
            InFlight {
                info: info.clone(),
                events: ClusterEvents::default(),
                updated: false,
                deleted: false,
            },
        );
        Some(info)
    }

    /// Requeues a pod after a failed attempt (upstream's `AddUnschedulableIfNotPresent`):
    /// - an [error](FailureKind::Error) goes to backoff;
    /// - an unschedulable pod goes to backoff when something that may help happened while it
    ///   was in flight (a [`ClusterEvent`] that [may help](QueueingHints::may_help) its
    ///   rejectors, or an update of the pod), else to the unschedulable pods.
    ///
    /// The pod's timestamp restarts now (the backoff and the unschedulable timeout run from
    /// here). The attempt was counted by `pop`; a pod that was not popped through this queue
    /// has this attempt counted here. A pod deleted meanwhile, already queued, or now bound
    /// (`spec.nodeName`) is dropped. Returns where the pod went.
    pub fn add_unschedulable(
        &self,
        pod: Arc<PodInfo>,
        failure: impl Into<Failure>,
    ) -> Option<SubQueue> {
        self.file_unschedulable(pod, failure.into(), None)
    }

    /// [`add_unschedulable`](Self::add_unschedulable) for a pod whose preemption is acted
    /// on elsewhere, after the cycle (its `victims` being evicted): it waits among the
    /// unschedulable pods, and no event moves it, until the cluster shows every victim gone
    /// ([`victim_gone`](Self::victim_gone)) — then it is retried at once — or
    /// [`preemption_done`](Self::preemption_done) gives up waiting. Upstream's async
    /// preemption has DefaultPreemption's PreEnqueue refuse the pod while
    /// `IsPodRunningPreemption` and lets the last victim's deletion retry it; retried before
    /// the cache saw its victims go, the pod would not fit and preempt again. The
    /// unschedulable timeout still retries it should the news never come.
    pub fn add_preempting(
        &self,
        pod: Arc<PodInfo>,
        failure: impl Into<Failure>,
        victims: impl IntoIterator<Item = PodId>,
    ) -> Option<SubQueue> {
        let victims: Vec<PodId> = victims.into_iter().collect();
        self.file_unschedulable(pod, failure.into(), Some(victims))
    }

    /// The cluster shows the pod `victim` gone (the informer's deletion, or an eviction
    /// that found it gone): when it was the last victim a preemptor waited for, the
    /// preemptor is retried now (after its backoff). Returns whether a preemptor moved.
    pub fn victim_gone(&self, victim: &PodId) -> bool {
        let now = Instant::now();
        let mut inner = self.lock();
        let Some(preemptors) = inner.victims.remove(victim) else {
            return false;
        };
        let mut moved = false;
        for preemptor in preemptors {
            let Some(left) = inner.preempting.get_mut(&preemptor) else {
                continue;
            };
            *left = left.saturating_sub(1);
            if *left == 0 {
                moved |= self.release_preemptor(&mut inner, &preemptor, now);
            }
        }
        drop(inner);
        if moved {
            self.notify.notify_waiters();
        }
        moved
    }

    /// The preemption of the pod `key` was acted on but not every victim will be seen
    /// to go (an eviction failed, the nomination was never acted on): the pod waits no
    /// more and, if it is among the unschedulable pods, is retried now (after its
    /// backoff); it preempts again if it must. Returns whether it moved.
    pub fn preemption_done(&self, key: &PodId) -> bool {
        let now = Instant::now();
        let mut inner = self.lock();
        if !inner.preempting.contains_key(key) {
            return false;
        }
        let moved = self.release_preemptor(&mut inner, key, now);
        drop(inner);
        if moved {
            self.notify.notify_waiters();
        }
        moved
    }

    /// Whether the pod `key` waits for its preemption to be acted on.
    pub fn is_preempting(&self, key: &PodId) -> bool {
        self.lock().preempting.contains_key(key)
    }

    /// Ends the wait of preemptor `key` and retries it if it waits among the
    /// unschedulable pods; returns whether it moved.
    fn release_preemptor(&self, inner: &mut Inner, key: &PodId, now: Instant) -> bool {
        inner.forget_preemption(key);
        let waiting = inner
            .pods
            .get(key)
            .is_some_and(|e| matches!(e.location, Location::Unschedulable));
        waiting && self.requeue_keys(inner, vec![key.clone()], now) > 0
    }

    fn file_unschedulable(
        &self,
        pod: Arc<PodInfo>,
        failure: Failure,
        victims: Option<Vec<PodId>>,
    ) -> Option<SubQueue> {
        let key = PodId::of(&pod);
        let now = Instant::now();
        let mut inner = self.lock();
        if inner.pods.contains_key(&key) {
            return None;
        }
        let (mut info, helped) = match inner.in_flight.remove(&key) {
            Some(f) if f.deleted => return None,
            Some(f) => {
                let helped = f.updated
                    || f.events
                        .iter()
                        .any(|e| self.hints.may_help(e, failure.plugins.iter().copied()));
                (f.info, helped)
            }
            None => (
                QueuedPodInfo {
                    pod_info: pod,
                    timestamp: now,
                    attempts: 1,
                    initial_attempt_timestamp: Some(now),
                },
                false,
            ),
        };
        if info.pod_info.node_name().is_some() {
            return None;
        }
        info.timestamp = now;
        let entry = Entry {
            info,
            location: Location::Unschedulable,
            last_failure: Some(failure.message),
            rejectors: failure.plugins.into_iter().collect(),
        };
        let to = if let Some(victims) = victims {
            inner.forget_preemption(&key);
            let mut left = 0;
            for v in victims {
                let of = inner.victims.entry(v).or_default();
                if !of.contains(&key) {
                    of.push(key.clone());
                    left += 1;
                }
            }
            // No victim left to see go (none named): nothing would end the wait.
            if left > 0 {
                inner.preempting.insert(key.clone(), left);
            }
            inner.put(key, entry, Target::Unschedulable)
        } else if failure.kind == FailureKind::Error || helped {
            let at = now + self.config.backoff_duration(entry.info.attempts);
            inner.put(key, entry, Target::Backoff(at))
        } else {
            inner.put(key, entry, Target::Unschedulable)
        };
        drop(inner);
        self.notify.notify_waiters();
        Some(to)
    }

    /// The pod's attempt ended (bound, or given up): forget its in-flight record. Upstream's
    /// `Done`. Attempts are forgotten with it, so a pod that comes back later starts afresh.
    pub fn done(&self, key: &PodId) {
        self.lock().in_flight.remove(key);
    }

    /// A cluster event happened: moves the unschedulable pods it [may help](QueueingHints::may_help)
    /// to backoff or active, and remembers the event for pods in flight. Returns how many pods
    /// moved.
    ///
    /// Gated pods stay: the scheduling gates are in the pod's own spec, so only an
    /// [`update`](Self::update) can lift them (as upstream's `SchedulingGates`, which listens
    /// to pod updates only). Re-checking thousands of gated pods on every node heartbeat would
    /// cost a lot for nothing; a custom PreEnqueue check that depends on the cluster is still
    /// re-run by the unschedulable-timeout flush.
    pub fn move_all_to_active_or_backoff(&self, event: ClusterEvent) -> usize {
        let now = Instant::now();
        let mut inner = self.lock();
        for f in inner.in_flight.values_mut() {
            f.events.insert(event);
        }
        let candidates: Vec<PodId> = inner
            .unschedulable
            .iter()
            .filter(|k| {
                let e = &inner.pods[*k];
                !inner.preempting.contains_key(*k)
                    && self.hints.may_help(event, e.rejectors.iter().copied())
            })
            .cloned()
            .collect();
        let moved = self.requeue_keys(&mut inner, candidates, now);
        drop(inner);
        if moved > 0 {
            self.notify.notify_waiters();
        }
        moved
    }

    /// Both periodic moves: expired backoffs to active, and unschedulable pods older than
    /// `unschedulableTimeout` to backoff or active. Returns how many pods moved.
    pub fn flush(&self) -> usize {
        self.flush_backoff_completed() + self.flush_unschedulable_leftover()
    }

    /// Moves pods whose backoff expired to active (upstream's `flushBackoffQCompleted`).
    pub fn flush_backoff_completed(&self) -> usize {
        let mut inner = self.lock();
        let moved = self.flush_backoff_locked(&mut inner, Instant::now());
        drop(inner);
        if moved > 0 {
            self.notify.notify_waiters();
        }
        moved
    }

    /// Moves unschedulable pods that waited `unschedulableTimeout` or longer to backoff or
    /// active, and re-runs PreEnqueue for gated pods that old (upstream's
    /// `flushUnschedulablePodsLeftover`, which covers gated pods too).
    pub fn flush_unschedulable_leftover(&self) -> usize {
        let now = Instant::now();
        let timeout = self.config.unschedulable_timeout;
        let mut inner = self.lock();
        let stale: Vec<PodId> = inner
            .unschedulable
            .iter()
            .chain(inner.gated.iter())
            .filter(|k| now.saturating_duration_since(inner.pods[*k].info.timestamp) >= timeout)
            .cloned()
            .collect();
        let moved = self.requeue_keys(&mut inner, stale, now);
        drop(inner);
        if moved > 0 {
            self.notify.notify_waiters();
        }
        moved
    }

    /// Runs the periodic flushes (backoff every `backoffFlushInterval`, unschedulable
    /// leftovers every `unschedulableFlushInterval`) until `shutdown` completes or the queue
    /// is closed.
    pub async fn run_flush_loop(&self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        // Zero periods would make `interval` panic; validation rejects them, this only keeps
        // an unvalidated config from crashing the loop.
        let period = |d: Duration| d.max(Duration::from_millis(1));
        let mut backoff = tokio::time::interval(period(self.config.backoff_flush_interval));
        let mut leftover = tokio::time::interval(period(self.config.unschedulable_flush_interval));
        for i in [&mut backoff, &mut leftover] {
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        }
        loop {
            // Registered first so that `close` is not missed between the check and the wait.
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lock().closed {
                return;
            }
            tokio::select! {
                _ = &mut shutdown => return,
                _ = backoff.tick() => { self.flush_backoff_completed(); }
                _ = leftover.tick() => { self.flush_unschedulable_leftover(); }
                _ = &mut notified => {}
            }
        }
    }

    /// Closes the queue: waiting and later `pop`s return `None`, the flush loop stops.
    pub fn close(&self) {
        self.lock().closed = true;
        self.notify.notify_waiters();
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Pod counts per place.
    pub fn len(&self) -> QueueLengths {
        let inner = self.lock();
        QueueLengths {
            active: inner.active.len(),
            backoff: inner.backoff.len(),
            unschedulable: inner.unschedulable.len(),
            gated: inner.gated.len(),
            in_flight: inner.in_flight.values().filter(|f| !f.deleted).count(),
        }
    }

    /// True when the queue holds no pod, in flight included.
    pub fn is_empty(&self) -> bool {
        self.len().total() == 0
    }

    /// The pods the queue holds, in flight included (no order): for listers that need the
    /// objects (builder identity), not the queue's bookkeeping.
    pub fn pending_pods(&self) -> Vec<Arc<PodInfo>> {
        let inner = self.lock();
        inner
            .pods
            .values()
            .map(|e| e.info.pod_info.clone())
            .chain(
                inner
                    .in_flight
                    .values()
                    .filter(|f| !f.deleted)
                    .map(|f| f.info.pod_info.clone()),
            )
            .collect()
    }

    /// Whether no pod is ready to pop and none is in flight: a scheduling loop fed by this
    /// queue has nothing to do until time passes or the cluster changes.
    pub fn is_settled(&self) -> bool {
        let inner = self.lock();
        inner.active.is_empty() && inner.in_flight.is_empty()
    }

    /// The unschedulable pods counted per (profile, plugin that rejected them), a pod once
    /// per plugin (upstream's `scheduler_unschedulable_pods`). The profile is the pod's
    /// `schedulerName`, empty when it names none.
    pub fn unschedulable_by_plugin(&self) -> BTreeMap<(String, &'static str), usize> {
        let inner = self.lock();
        let mut counts = BTreeMap::new();
        for key in &inner.unschedulable {
            let e = &inner.pods[key];
            let profile = e
                .info
                .pod_info
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.scheduler_name.clone())
                .unwrap_or_default();
            for plugin in &e.rejectors {
                *counts.entry((profile.clone(), *plugin)).or_insert(0) += 1;
            }
        }
        counts
    }

    /// Every pod the queue knows of: active in pop order, backoff by expiry, then
    /// unschedulable, gated and in-flight pods by key.
    pub fn pending(&self) -> Vec<PendingPod> {
        let now = Instant::now();
        let inner = self.lock();
        let view = |key: &PodId, e: &Entry, queue: SubQueue| PendingPod {
            id: key.clone(),
            priority: e.info.pod_info.priority,
            queue,
            attempts: e.info.attempts,
            last_failure: e.last_failure.clone(),
            rejected_by: e.rejectors.clone(),
            waiting: now.saturating_duration_since(e.info.timestamp),
            backoff_remaining: match e.location {
                Location::Backoff(at, _) => Some(at.saturating_duration_since(now)),
                _ => None,
            },
        };
        let mut out = Vec::with_capacity(inner.pods.len() + inner.in_flight.len());
        for key in inner.active.values() {
            out.push(view(key, &inner.pods[key], SubQueue::Active));
        }
        for key in inner.backoff.values() {
            out.push(view(key, &inner.pods[key], SubQueue::Backoff));
        }
        for (set, queue) in [
            (&inner.unschedulable, SubQueue::Unschedulable),
            (&inner.gated, SubQueue::Gated),
        ] {
            let mut keys: Vec<&PodId> = set.iter().collect();
            keys.sort();
            out.extend(keys.into_iter().map(|k| view(k, &inner.pods[k], queue)));
        }
        let mut flying: Vec<(&PodId, &InFlight)> =
            inner.in_flight.iter().filter(|(_, f)| !f.deleted).collect();
        flying.sort_by(|a, b| a.0.cmp(b.0));
        for (key, f) in flying {
            out.push(PendingPod {
                id: key.clone(),
                priority: f.info.pod_info.priority,
                queue: SubQueue::InFlight,
                attempts: f.info.attempts,
                last_failure: None,
                rejected_by: Vec::new(),
                waiting: now.saturating_duration_since(f.info.timestamp),
                backoff_remaining: None,
            });
        }
        out
    }

    /// Moves backoff-expired pods to active; the caller notifies.
    fn flush_backoff_locked(&self, inner: &mut Inner, now: Instant) -> usize {
        let mut moved = 0;
        while let Some((&(at, _), _)) = inner.backoff.first_key_value() {
            if at > now {
                break;
            }
            let (_, key) = inner.backoff.pop_first().expect("just seen");
            // Already detached from the backoff map; `enter_active` files it anew.
            let entry = inner
                .pods
                .remove(&key)
                .expect("backoff queue and pod map agree");
            self.enter_active(inner, key, entry);
            moved += 1;
        }
        moved
    }

    /// Requeues the given unschedulable or gated pods; returns how many left their place.
    fn requeue_keys(&self, inner: &mut Inner, mut keys: Vec<PodId>, now: Instant) -> usize {
        // The candidates come from hash sets; filing them oldest first (then by key) keeps
        // FIFO fairness among equals and makes the order, and so a simulation, reproducible.
        keys.sort_by(|a, b| {
            let t = |k: &PodId| inner.pods.get(k).map(|e| e.info.timestamp);
            t(a).cmp(&t(b)).then_with(|| a.cmp(b))
        });
        let mut moved = 0;
        for key in keys {
            // A still-gated pod is left where it is (only its message refreshed), rather than
            // taken out and filed again.
            if let Some(e) = inner.pods.get_mut(&key)
                && matches!(e.location, Location::Gated)
                && let Some(status) = (self.pre_enqueue)(&e.info.pod_info)
            {
                e.last_failure = Some(status.to_string());
                continue;
            }
            let Some(entry) = inner.remove(&key) else {
                continue;
            };
            // Only the end of its preemption and the unschedulable timeout get here for a
            // pod waiting on its preemption: either way it waits no more.
            inner.forget_preemption(&key);
            self.requeue(inner, key, entry, now);
            moved += 1;
        }
        moved
    }

    /// Files a detached entry in backoff if it is still backing off, else tries active
    /// (upstream's `movePodsToActiveOrBackoffQueue` for one pod).
    fn requeue(&self, inner: &mut Inner, key: PodId, entry: Entry, now: Instant) -> SubQueue {
        let at = entry.info.timestamp + self.config.backoff_duration(entry.info.attempts);
        if at > now {
            inner.put(key, entry, Target::Backoff(at))
        } else {
            self.enter_active(inner, key, entry)
        }
    }

    /// Files a detached entry in active, or in gated when PreEnqueue refuses it (upstream's
    /// `moveToActiveQ`, which runs PreEnqueue on every way into the active queue).
    fn enter_active(&self, inner: &mut Inner, key: PodId, mut entry: Entry) -> SubQueue {
        match (self.pre_enqueue)(&entry.info.pod_info) {
            Some(status) => {
                entry.last_failure = Some(status.to_string());
                inner.put(key, entry, Target::Gated)
            }
            None => inner.put(key, entry, Target::Active(None)),
        }
    }
}

impl Inner {
    /// Forgets that `key` waits on its preemption, and its victims.
    fn forget_preemption(&mut self, key: &PodId) {
        if self.preempting.remove(key).is_some() {
            self.victims.retain(|_, of| {
                of.retain(|p| p != key);
                !of.is_empty()
            });
        }
    }

    fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// Detaches a queued pod from its sub-queue and the pod map.
    fn remove(&mut self, key: &PodId) -> Option<Entry> {
        let entry = self.pods.remove(key)?;
        match entry.location {
            Location::Active(ord) => {
                self.active.remove(&ord);
            }
            Location::Backoff(at, seq) => {
                self.backoff.remove(&(at, seq));
            }
            Location::Unschedulable => {
                self.unschedulable.remove(key);
            }
            Location::Gated => {
                self.gated.remove(key);
            }
        }
        Some(entry)
    }

    /// Files a detached entry. The active ordering key is built here from the entry's current
    /// priority and timestamp, so no caller can file a pod under a stale priority; a filing
    /// takes a fresh sequence number (FIFO among equals) unless it keeps its place.
    fn put(&mut self, key: PodId, mut entry: Entry, target: Target) -> SubQueue {
        let seq = self.seq();
        let (location, queue) = match target {
            Target::Active(keep) => {
                let ord = ActiveOrd::new(&entry.info, keep.unwrap_or(seq));
                self.active.insert(ord, key.clone());
                (Location::Active(ord), SubQueue::Active)
            }
            Target::Backoff(at) => {
                self.backoff.insert((at, seq), key.clone());
                (Location::Backoff(at, seq), SubQueue::Backoff)
            }
            Target::Unschedulable => {
                self.unschedulable.insert(key.clone());
                (Location::Unschedulable, SubQueue::Unschedulable)
            }
            Target::Gated => {
                self.gated.insert(key.clone());
                (Location::Gated, SubQueue::Gated)
            }
        };
        entry.location = location;
        self.pods.insert(key, entry);
        queue
    }
}

/// Whether an update changed anything scheduling could see (upstream's `isPodUpdated`): the
/// status, resourceVersion, generation, managedFields and finalizers are ignored.
fn pod_updated(
    old: &k8s_openapi::api::core::v1::Pod,
    new: &k8s_openapi::api::core::v1::Pod,
) -> bool {
    let strip = |p: &k8s_openapi::api::core::v1::Pod| {
        let mut p = p.clone();
        p.metadata.resource_version = None;
        p.metadata.generation = None;
        p.metadata.managed_fields = None;
        p.metadata.finalizers = None;
        p.status = None;
        p
    };
    strip(old) != strip(new)
}

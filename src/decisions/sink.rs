//! The task at the end of the decision channel: counts every decision in the metrics,
//! keeps it in the [`DecisionLog`], writes it and the placement history to the store when
//! there is one, and hands what each decision came to ([`Settled`]) to the mode's
//! [`OutcomeHandler`].
//!
//! It takes records in batches: metrics and memory first (cheap), then one blocking task
//! per batch for the store (placement history reads and writes, decision writes), so sled
//! never runs on an async thread. While that task runs, new records wait in the loop's
//! bounded channel: past its byte budget they wait as summaries (counted), so a slow store
//! first costs explanations; when it is full the loop waits for room, since a decision
//! carries what the mode acts on (FailedScheduling, nomination, preemption's victims) and
//! is never dropped.

use std::sync::Arc;

use headroom_storage::{DecisionKey, Store};

use super::channel::{Decided, DecisionReceiver, Record};
use super::log::{DecisionLog, LoggedDecision};
use super::{OutcomeHandler, Settled};
use crate::logging::Trouble;
use crate::metrics::{Metrics, PlacementCache};
use headroom_scheduler::framework::Outcome;

/// Records taken from the channel per batch.
const BATCH: usize = 64;

/// Where the sink writes: the engine's metrics, decision log and store, its clock, and the
/// mode's handler.
#[derive(Clone)]
pub struct Sink {
    /// Decisions and warm-cache placements are counted here.
    pub metrics: Arc<Metrics>,
    /// The in-memory log behind `/explain`.
    pub log: Arc<DecisionLog>,
    /// Explanations and the placement history go here; `None`: nowhere.
    pub store: Option<Store>,
    /// Where the store's failures are logged (shared with its maintenance).
    pub trouble: Arc<Trouble>,
    /// "Now", ms since the epoch, for a decision that carries no time.
    pub clock: headroom_scheduler::clock::Clock,
    /// What the mode does with each settled decision; `None`: nothing.
    pub handler: Option<Arc<dyn OutcomeHandler>>,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink")
            .field("store", &self.store.is_some())
            .field("handler", &self.handler.is_some())
            .finish_non_exhaustive()
    }
}

/// What [`run_decision_sink`] did, returned when the channel closes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkReport {
    /// Decisions received.
    pub decisions: u64,
    /// Decisions written to the store.
    pub stored: u64,
    /// Placements written to the store's placement history.
    pub placements: u64,
    /// Store writes or reads that failed.
    pub store_errors: u64,
    /// Settled records handed to the mode.
    pub settled: u64,
}

/// One record of a batch, in channel order, once its metrics are counted.
enum Item {
    /// A decision to log and store (one that placed nothing is settled with it: it has no
    /// bind to wait for).
    Decision(Arc<LoggedDecision>),
    /// A placed pod's bind ended.
    Settled(Box<Settled>),
}

/// Consumes the scheduling loop's records until every sender is dropped, or until
/// `shutdown` completes and what was already sent is drained. Each decision is counted in
/// the metrics and kept in the decision log with the inputs known now (builder and
/// profile, usage view age, chosen node's usage); with a store its rendered explanation is
/// written there, and its warm cache judged against the builder's placement history. A
/// successful bind's placement joins that history. Then each settled decision goes to the
/// handler: one that placed nothing as soon as it is logged, a placed one once its bind
/// ended — all in channel order.
pub async fn run_decision_sink(
    mut rx: DecisionReceiver,
    sink: Sink,
    shutdown: impl std::future::Future<Output = ()>,
) -> SinkReport {
    let mut report = SinkReport::default();
    let mut batch: Vec<Record> = Vec::with_capacity(BATCH);
    let failures = sink.trouble.clone();
    tokio::pin!(shutdown);
    let mut closing = false;
    loop {
        let n = if closing {
            rx.recv_many(&mut batch, BATCH).await
        } else {
            tokio::select! {
                biased;
                n = rx.recv_many(&mut batch, BATCH) => n,
                _ = &mut shutdown => {
                    // No new senders' messages; what is queued is still served.
                    rx.close();
                    closing = true;
                    continue;
                }
            }
        };
        if n == 0 {
            break;
        }
        let mut barriers = Vec::new();
        let items = take_batch(&sink, &mut batch, &mut barriers, &mut report);
        handle_batch(&sink, items, &failures, &mut report).await;
        for b in barriers {
            let _ = b.send(());
        }
    }
    report
}

/// The batch's records as [`Item`]s, with each decision counted in the metrics; barriers
/// set aside to be answered once the batch is handled.
fn take_batch(
    sink: &Sink,
    batch: &mut Vec<Record>,
    barriers: &mut Vec<tokio::sync::oneshot::Sender<()>>,
    report: &mut SinkReport,
) -> Vec<Item> {
    let now = sink.clock.now_ms();
    let mut items = Vec::with_capacity(batch.len());
    for record in batch.drain(..) {
        match record {
            Record::Decided(Decided {
                decision: d,
                inputs,
            }) => {
                report.decisions += 1;
                sink.metrics.observe_decision(&d, d.cycle_duration);
                let decided_at_ms = if d.decided_at_ms > 0 {
                    d.decided_at_ms
                } else {
                    now
                };
                let logged = LoggedDecision {
                    decision: Arc::new(d),
                    decided_at_ms,
                    inputs,
                };
                items.push(Item::Decision(Arc::new(logged)));
            }
            Record::Settled(s) => items.push(Item::Settled(Box::new(s))),
            Record::Barrier(b) => barriers.push(b),
        }
    }
    items
}

/// Stores the batch (off the async threads), then logs its decisions and hands the
/// settled ones to the handler, in order.
async fn handle_batch(
    sink: &Sink,
    items: Vec<Item>,
    failures: &Arc<Trouble>,
    report: &mut SinkReport,
) {
    let mut stored: Vec<Stored> = (0..items.len()).map(|_| Stored::Nothing).collect();
    if let Some(store) = sink.store.clone() {
        let jobs: Vec<Job> = items.iter().map(Job::of).collect();
        let failures = failures.clone();
        let now = crate::logging::now();
        let now_ms = sink.clock.now_ms();
        match tokio::task::spawn_blocking(move || persist(&store, &jobs, &failures, now, now_ms))
            .await
        {
            Ok((out, counts)) => {
                stored = out;
                report.stored += counts.stored;
                report.placements += counts.placements;
                report.store_errors += counts.errors;
                for _ in 0..counts.errors {
                    sink.metrics.count_decision_store_error();
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "decision store task failed");
                report.store_errors += 1;
                sink.metrics.count_decision_store_error();
            }
        }
    }
    for (item, stored) in items.into_iter().zip(stored) {
        let settled = match item {
            Item::Decision(record) => {
                let warm = match stored {
                    Stored::Warm(w) => w,
                    _ => None,
                };
                if record.decision.node().is_some() {
                    sink.metrics.observe_placement(match warm {
                        Some(true) => PlacementCache::Warm,
                        Some(false) => PlacementCache::Cold,
                        None => PlacementCache::Unknown,
                    });
                }
                let settled = (!matches!(record.decision.outcome, Outcome::Placed { .. }))
                    .then(|| Settled::of(&record.decision, record.inputs.builder.clone()));
                let mut record = Arc::unwrap_or_clone(record);
                record.inputs.warm_cache = warm;
                sink.log.insert(record);
                settled
            }
            Item::Settled(mut s) => {
                if let Stored::History(h) = stored {
                    s.history = Some(h);
                }
                Some(*s)
            }
        };
        if let (Some(s), Some(h)) = (settled, &sink.handler) {
            report.settled += 1;
            h.settled(s);
        }
    }
    let (entries, bytes) = sink.log.size();
    sink.metrics.set_decision_log(entries, bytes);
}

/// Node verdicts a stored explanation keeps at most (chosen, best feasible, then rejected).
pub const STORED_NODES: usize = 100;

/// A store write of the batch, taken to the blocking task (cheap copies of the items).
enum Job {
    /// Store the decision's explanation.
    Decision(Arc<LoggedDecision>),
    /// Record a bound pod's node in its builder's placement history.
    Placement { builder: String, node: String },
    /// Nothing to write.
    Nothing,
}

impl Job {
    fn of(item: &Item) -> Job {
        match item {
            Item::Decision(r) => Job::Decision(r.clone()),
            Item::Settled(s) => match (&s.builder, &s.bind) {
                (Some(builder), Some(b)) if b.outcome.is_bound() => Job::Placement {
                    builder: builder.clone(),
                    node: b.node.clone(),
                },
                _ => Job::Nothing,
            },
        }
    }
}

/// What a [`Job`] gave back.
enum Stored {
    /// The decision's warm-cache verdict (`None`: unknown).
    Warm(Option<bool>),
    /// The builder's placement history after the placement, newest first.
    History(Vec<String>),
    /// Nothing (no job, or it failed).
    Nothing,
}

/// What [`persist`] wrote.
#[derive(Debug, Default)]
struct Written {
    stored: u64,
    placements: u64,
    errors: u64,
}

/// Runs the batch's store writes in channel order: each decision's explanation, after
/// judging whether its chosen node was in its builder's placement history, and each
/// successful bind's placement into that history.
///
/// A full disk fails every write: `failures` keeps that to a warning per interval.
fn persist(
    store: &Store,
    jobs: &[Job],
    failures: &Trouble,
    now: std::time::Instant,
    now_ms: i64,
) -> (Vec<Stored>, Written) {
    let mut w = Written::default();
    let out = jobs
        .iter()
        .map(|job| match job {
            Job::Decision(r) => Stored::Warm(store_decision(store, r, failures, now, &mut w)),
            Job::Placement { builder, node } => {
                match record_placement(store, builder, node, now_ms, failures, now, &mut w) {
                    Some(h) => Stored::History(h),
                    None => Stored::Nothing,
                }
            }
            Job::Nothing => Stored::Nothing,
        })
        .collect();
    (out, w)
}

/// Writes one decision's explanation; returns its warm-cache verdict.
fn store_decision(
    store: &Store,
    r: &LoggedDecision,
    failures: &Trouble,
    now: std::time::Instant,
    w: &mut Written,
) -> Option<bool> {
    let warm = match (r.decision.node(), r.inputs.builder.as_deref()) {
        (Some(node), Some(builder)) => match store.placement_history(builder) {
            Ok(history) => Some(history.iter().any(|n| n == node)),
            Err(e) => {
                w.errors += 1;
                failures.failed(now, "reading a placement history", &e);
                None
            }
        },
        _ => None,
    };
    // The in-memory log keeps every node's verdict; the store keeps the best nodes
    // (a full explanation at 15,000 nodes is megabytes, hundreds of times a second).
    let mut rendered = r.render_at_most(STORED_NODES);
    rendered.inputs.warm_cache = warm;
    let key = DecisionKey {
        namespace: r.decision.namespace.to_string(),
        name: r.decision.name.to_string(),
        uid: r.decision.uid.to_string(),
        ts_ms: r.decided_at_ms.max(0),
    };
    let written = serde_json::to_vec(&rendered)
        .map_err(|e| e.to_string())
        .and_then(|bytes| store.put_decision(&key, &bytes).map_err(|e| e.to_string()));
    match written {
        Ok(()) => {
            w.stored += 1;
            failures.ok(now);
        }
        Err(e) => {
            w.errors += 1;
            tracing::debug!(error = %e, pod = %r.decision.key(), "storing a decision failed");
            failures.failed(now, "storing a decision", &e);
        }
    }
    warm
}

/// Puts a bound pod's node at the front of its builder's placement history; returns the
/// history after it.
fn record_placement(
    store: &Store,
    builder: &str,
    node: &str,
    at_ms: i64,
    failures: &Trouble,
    now: std::time::Instant,
    w: &mut Written,
) -> Option<Vec<String>> {
    match store.record_placement(builder, node, at_ms) {
        Ok(history) => {
            w.placements += 1;
            Some(history)
        }
        Err(e) => {
            w.errors += 1;
            failures.failed(now, "recording a placement", &e);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decisions::{Bound, DecisionInputs, decision_channel};
    use headroom_scheduler::framework::{BindOutcome, Decision};
    use headroom_scheduler::key::PodKey;
    use headroom_scheduler::snapshot::PodInfo;
    use headroom_storage::StoreConfig;
    use std::sync::Mutex;

    /// Keeps what it is handed.
    #[derive(Default)]
    struct Collect(Mutex<Vec<Settled>>);

    impl OutcomeHandler for Collect {
        fn settled(&self, s: Settled) {
            self.0.lock().unwrap().push(s);
        }
    }

    fn decision(name: &str, outcome: Outcome) -> Decision {
        let names: Vec<Arc<str>> = vec![Arc::from("n1"), Arc::from("n2")];
        let mut d = Decision::new(
            "default",
            name,
            format!("uid-{name}").into(),
            "p",
            1,
            Arc::new(names),
        );
        d.outcome = outcome;
        d
    }

    fn placed(name: &str) -> Decision {
        decision(name, Outcome::Placed { node: "n1".into() })
    }

    fn inputs(builder: &str) -> DecisionInputs {
        DecisionInputs {
            builder: Some(builder.into()),
            ..DecisionInputs::default()
        }
    }

    fn settled(d: &Decision, outcome: BindOutcome) -> Settled {
        let mut s = Settled::of(d, Some("default/Job/b".into()));
        let pod = PodInfo::new(Arc::new(headroom_scheduler::synthetic::plain_pod(&d.name)));
        s.bind = Some(Bound {
            pod: Arc::new(pod),
            node: "n1".into(),
            outcome,
        });
        s
    }

    /// A decision that placed nothing is handed over at once; a placed one once its bind
    /// ended, with the placement history the sink wrote (none for a failed bind); warm
    /// caches are judged against the history before the pod's own placement; a barrier
    /// returns only once everything before it was handed over, in order.
    #[tokio::test]
    async fn the_sink_joins_binds_writes_history_and_hands_over_in_order() {
        let store = Store::open_temporary(StoreConfig::default()).unwrap();
        let handler = Arc::new(Collect::default());
        let log = Arc::new(DecisionLog::default());
        let sink = Sink {
            metrics: Arc::new(Metrics::default()),
            log: log.clone(),
            store: Some(store.clone()),
            trouble: Arc::new(Trouble::new("the store", "writing again")),
            clock: headroom_scheduler::clock::Clock::from_fn(|| 5),
            handler: Some(handler.clone()),
        };
        let (tx, rx) = decision_channel(16, usize::MAX);
        let task = tokio::spawn(run_decision_sink(rx, sink, std::future::pending()));
        let unplaced = decision(
            "u",
            Outcome::Unschedulable {
                message: "0/2 nodes are available".into(),
            },
        );
        tx.send(unplaced, DecisionInputs::default()).await.unwrap();
        let first = placed("a");
        tx.send(first.clone(), inputs("default/Job/b"))
            .await
            .unwrap();
        tx.barrier().await;
        let names = |h: &Collect| -> Vec<String> {
            h.0.lock()
                .unwrap()
                .iter()
                .map(|s| s.pod.name.to_string())
                .collect()
        };
        assert_eq!(names(&handler), ["u"], "the placed pod waits for its bind");
        assert_eq!(
            log.by_pod(&PodKey::new("default", "a"))
                .unwrap()
                .inputs
                .warm_cache,
            Some(false)
        );

        tx.settled(settled(&first, BindOutcome::Bound))
            .await
            .unwrap();
        let failed = placed("f");
        tx.send(failed.clone(), inputs("default/Job/b"))
            .await
            .unwrap();
        tx.settled(settled(&failed, BindOutcome::Retry("throttled".into())))
            .await
            .unwrap();
        let second = placed("c");
        tx.send(second.clone(), inputs("default/Job/b"))
            .await
            .unwrap();
        tx.barrier().await;
        assert_eq!(names(&handler), ["u", "a", "f"]);
        {
            let got = handler.0.lock().unwrap();
            assert!(got[0].bind.is_none() && got[0].history.is_none());
            assert!(got[1].bound());
            assert_eq!(got[1].history.as_deref(), Some(&["n1".to_string()][..]));
            assert!(!got[2].bound() && got[2].history.is_none());
        }
        assert_eq!(store.placement_history("default/Job/b").unwrap(), ["n1"]);
        // The history held n1 when c was decided: a warm cache.
        assert_eq!(
            log.by_pod(&PodKey::new("default", "c"))
                .unwrap()
                .inputs
                .warm_cache,
            Some(true)
        );
        drop(tx);
        let report = task.await.unwrap();
        assert_eq!(
            (
                report.decisions,
                report.stored,
                report.placements,
                report.settled
            ),
            (4, 4, 1, 3)
        );
    }
}

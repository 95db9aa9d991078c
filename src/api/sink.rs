//! The task between the scheduling loop's decision channel and the API: counts every
//! decision in the metrics, keeps it in the [`DecisionLog`](super::DecisionLog), and writes
//! it to the store when there is one.
//!
//! It takes decisions in batches: metrics and memory first (cheap), then one blocking task
//! per batch for the store (placement history reads, decision writes), so sled never runs
//! on an async thread. While that task runs, new decisions wait in the loop's bounded
//! channel; if it fills, the loop drops decisions (and counts them) rather than waiting,
//! so a slow store costs explanations, never scheduling time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use headroom_storage::{DecisionKey, Store};
use tokio::sync::mpsc;

use super::ApiState;
use super::log::{DecisionInputs, LoggedDecision};
use crate::framework::Decision;
use crate::logging::Repeated;
use crate::metrics::PlacementCache;

/// Decisions taken from the channel per batch.
const BATCH: usize = 64;

/// The scheduling loop's side of the decision channel: bounded by records and by an
/// estimate of their bytes ([`approx_bytes`](super::log::approx_bytes)).
///
/// Why bytes: a record holds every feasible node's score columns, so at 15,000 nodes one
/// is megabytes, and a queue bounded only by count (4,096) held 4.65 GB on the kit while
/// the sink caught up. Past the byte budget a record is sent as its
/// [`Decision::summary_only`] copy (outcome, notes, the three best nodes): metrics and
/// the cluster reporter still see every decision, only that pod's explanation is shorter
/// (it says so in a note).
#[derive(Clone, Debug)]
pub struct DecisionSender {
    tx: mpsc::Sender<Decided>,
    queued_bytes: Arc<AtomicUsize>,
    max_bytes: usize,
}

/// The sink's side of the decision channel ([`decision_channel`]).
#[derive(Debug)]
pub struct DecisionReceiver {
    rx: mpsc::Receiver<Decided>,
    queued_bytes: Arc<AtomicUsize>,
}

/// A decision with the inputs its cycle saw ([`DecisionInputs::at_decision`]): what the
/// scheduling loop hands the sink, so the sink never reads the scheduler's snapshot.
#[derive(Debug, Clone)]
pub struct Decided {
    /// The record.
    pub decision: Decision,
    /// Builder, profile, usage view age and the chosen node's usage, at decision time.
    pub inputs: DecisionInputs,
}

/// Why [`DecisionSender::send`] did not queue a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The channel holds its maximum number of records.
    #[error("the decision channel is full")]
    Full,
    /// The sink is gone.
    #[error("the decision sink has stopped")]
    Closed,
}

/// A decision channel holding at most `records` records and, past `max_bytes` of queued
/// records, only summaries.
pub fn decision_channel(records: usize, max_bytes: usize) -> (DecisionSender, DecisionReceiver) {
    let (tx, rx) = mpsc::channel(records.max(1));
    let queued_bytes = Arc::new(AtomicUsize::new(0));
    (
        DecisionSender {
            tx,
            queued_bytes: queued_bytes.clone(),
            max_bytes,
        },
        DecisionReceiver { rx, queued_bytes },
    )
}

/// The note a record sent as a summary carries.
pub const SUMMARY_NOTE: &str =
    "explanation shortened to the best nodes: the decision queue was over its byte budget";

impl DecisionSender {
    /// Queues a record without waiting: whole while the queued bytes are under the budget,
    /// else as its summary; returns whether it was a summary.
    pub fn send(&self, decision: Decision, inputs: DecisionInputs) -> Result<bool, SendError> {
        let mut bytes = super::log::approx_bytes(&decision);
        let mut summarized = false;
        let record = if self.queued_bytes.load(Ordering::Relaxed) + bytes > self.max_bytes {
            let mut summary = decision.summary_only();
            summary.notes.push(SUMMARY_NOTE.to_string());
            bytes = super::log::approx_bytes(&summary);
            summarized = true;
            summary
        } else {
            decision
        };
        self.queued_bytes.fetch_add(bytes, Ordering::Relaxed);
        match self.tx.try_send(Decided {
            decision: record,
            inputs,
        }) {
            Ok(()) => Ok(summarized),
            Err(e) => {
                self.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
                Err(match e {
                    mpsc::error::TrySendError::Full(_) => SendError::Full,
                    mpsc::error::TrySendError::Closed(_) => SendError::Closed,
                })
            }
        }
    }

    /// Bytes of records queued now (estimate).
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes.load(Ordering::Relaxed)
    }
}

impl DecisionReceiver {
    /// Takes up to `limit` records into `buffer`; 0 once every sender is gone and the
    /// channel is empty.
    pub async fn recv_many(&mut self, buffer: &mut Vec<Decided>, limit: usize) -> usize {
        let start = buffer.len();
        let n = self.rx.recv_many(buffer, limit).await;
        let bytes: usize = buffer[start..]
            .iter()
            .map(|d| super::log::approx_bytes(&d.decision))
            .sum();
        self.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
        n
    }

    /// Takes one record; `None` once every sender is gone and the channel is empty.
    pub async fn recv(&mut self) -> Option<Decided> {
        let d = self.rx.recv().await?;
        self.queued_bytes
            .fetch_sub(super::log::approx_bytes(&d.decision), Ordering::Relaxed);
        Some(d)
    }

    /// Takes one record if one is queued now.
    pub fn try_recv(&mut self) -> Option<Decided> {
        let d = self.rx.try_recv().ok()?;
        self.queued_bytes
            .fetch_sub(super::log::approx_bytes(&d.decision), Ordering::Relaxed);
        Some(d)
    }

    /// Stops new records; those queued can still be received.
    pub fn close(&mut self) {
        self.rx.close();
    }
}

/// What [`run_decision_sink`] did, returned when the channel closes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkReport {
    /// Decisions received.
    pub decisions: u64,
    /// Decisions written to the store.
    pub stored: u64,
    /// Store writes or reads that failed.
    pub store_errors: u64,
    /// Decisions the `forward` channel had no room for.
    pub forward_dropped: u64,
}

/// Consumes the scheduling loop's decisions until every sender is dropped, or until
/// `shutdown` completes and what was already sent is drained: counts each in the state's
/// metrics, keeps it in its decision log with the inputs known now (builder and profile,
/// usage view age, chosen node's usage), and, when the state has a store, writes its
/// rendered explanation there and counts warm-cache placements against the store's
/// placement history. Each decision is then handed to `forward` (the cluster reporter
/// under `serve`: events, conditions, annotations); a full `forward` loses it there,
/// counted in [`SinkReport::forward_dropped`], never here.
pub async fn run_decision_sink(
    mut rx: DecisionReceiver,
    state: ApiState,
    forward: Option<mpsc::Sender<Arc<Decision>>>,
    shutdown: impl std::future::Future<Output = ()>,
) -> SinkReport {
    let mut report = SinkReport::default();
    let mut batch: Vec<Decided> = Vec::with_capacity(BATCH);
    let store_failures = Arc::new(Repeated::default());
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
        report.decisions += batch.len() as u64;
        let now = state.now_ms();
        let mut logged = Vec::with_capacity(batch.len());
        for Decided {
            decision: d,
            inputs,
        } in batch.drain(..)
        {
            state.metrics().observe_decision(&d, d.cycle_duration);
            if let Some(f) = &forward
                && f.try_send(Arc::new(d.summary_only())).is_err()
            {
                report.forward_dropped += 1;
            }
            let decided_at_ms = if d.decided_at_ms > 0 {
                d.decided_at_ms
            } else {
                now
            };
            logged.push(Arc::new(LoggedDecision {
                decision: Arc::new(d),
                decided_at_ms,
                inputs,
            }));
        }
        let caches = match state.store().cloned() {
            Some(store) => {
                let records = logged.clone();
                let metrics = state.metrics().clone();
                let (failures, now) = (store_failures.clone(), crate::logging::now());
                match tokio::task::spawn_blocking(move || persist(&store, &records, &failures, now))
                    .await
                {
                    Ok((caches, stored, errors)) => {
                        report.stored += stored;
                        report.store_errors += errors;
                        for _ in 0..errors {
                            metrics.count_decision_store_error();
                        }
                        caches
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "decision store task failed");
                        report.store_errors += 1;
                        metrics.count_decision_store_error();
                        vec![None; logged.len()]
                    }
                }
            }
            None => vec![None; logged.len()],
        };
        for (record, warm) in logged.into_iter().zip(caches) {
            if record.decision.node().is_some() {
                state.metrics().observe_placement(match warm {
                    Some(true) => PlacementCache::Warm,
                    Some(false) => PlacementCache::Cold,
                    None => PlacementCache::Unknown,
                });
            }
            let mut record = Arc::unwrap_or_clone(record);
            record.inputs.warm_cache = warm;
            state.decisions().insert(record);
        }
        let (entries, bytes) = state.decisions().size();
        state.metrics().set_decision_log(entries, bytes);
    }
    report
}

/// Node verdicts a stored explanation keeps at most (chosen, best feasible, then rejected).
pub const STORED_NODES: usize = 100;

/// Writes the batch to the store; returns per record whether its chosen node was in its
/// builder's placement history (`None`: unknown), and the counts of writes and failures.
///
/// A full disk fails every write: `failures` keeps that to a warning per interval.
fn persist(
    store: &Store,
    records: &[Arc<LoggedDecision>],
    failures: &Repeated,
    now: std::time::Instant,
) -> (Vec<Option<bool>>, u64, u64) {
    let mut caches = Vec::with_capacity(records.len());
    let (mut stored, mut errors) = (0u64, 0u64);
    for r in records {
        let warm = match (r.decision.node(), r.inputs.builder.as_deref()) {
            (Some(node), Some(builder)) => match store.placement_history(builder) {
                Ok(history) => Some(history.iter().any(|n| n == node)),
                Err(e) => {
                    if let Some(held_back) = failures.failure(now) {
                        tracing::warn!(error = %e, builder, held_back, "reading placement history failed");
                    }
                    errors += 1;
                    None
                }
            },
            _ => None,
        };
        caches.push(warm);
        // The in-memory log keeps every node's verdict; the store keeps the best nodes
        // (a full explanation at 15,000 nodes is megabytes, hundreds of times a second).
        let mut rendered = r.render_at_most(STORED_NODES);
        rendered.inputs.warm_cache = warm;
        let key = DecisionKey {
            namespace: r.decision.namespace.clone(),
            name: r.decision.name.clone(),
            uid: r.decision.uid.clone(),
            ts_ms: r.decided_at_ms.max(0),
        };
        let written = serde_json::to_vec(&rendered)
            .map_err(|e| e.to_string())
            .and_then(|bytes| store.put_decision(&key, &bytes).map_err(|e| e.to_string()));
        match written {
            Ok(()) => {
                stored += 1;
                if let Some(held_back) = failures.success() {
                    tracing::info!(held_back, "storing decisions works again");
                }
            }
            Err(e) => {
                if let Some(held_back) = failures.failure(now) {
                    tracing::warn!(error = %e, pod = %format!("{}/{}", key.namespace, key.name), held_back, "storing a decision failed");
                }
                errors += 1;
            }
        }
    }
    (caches, stored, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{Outcome, decision::ScoreColumn};

    /// A placed decision over `n` feasible nodes with one score column.
    fn big(n: u32) -> Decision {
        let names: Vec<Arc<str>> = (0..n).map(|i| Arc::from(format!("n{i}"))).collect();
        let mut d = Decision::new("default", "p", "u", "headroom", 1, Arc::new(names));
        d.feasible = (0..n).collect();
        d.totals = (0..i64::from(n)).collect();
        d.scores = vec![ScoreColumn {
            plugin: "P",
            weight: 1,
            raw: Some(d.totals.clone()),
            normalized: d.totals.clone(),
            details: None,
        }];
        d.outcome = Outcome::Placed { node: "n0".into() };
        d
    }

    /// Past the byte budget records travel as summaries (with a note saying so), the
    /// queued bytes go back down as the sink takes them, and a full channel refuses.
    #[tokio::test]
    async fn the_byte_budget_turns_records_into_summaries() {
        let one = super::super::log::approx_bytes(&big(1_000));
        let (tx, mut rx) = decision_channel(3, one + one / 2);
        assert_eq!(tx.send(big(1_000), DecisionInputs::default()), Ok(false));
        assert_eq!(tx.queued_bytes(), one);
        assert_eq!(tx.send(big(1_000), DecisionInputs::default()), Ok(true));
        assert!(tx.queued_bytes() < one + one / 10);
        assert_eq!(tx.send(big(1_000), DecisionInputs::default()), Ok(true));
        assert_eq!(
            tx.send(big(1_000), DecisionInputs::default()),
            Err(SendError::Full)
        );
        let whole = rx.recv().await.unwrap();
        assert_eq!(whole.decision.feasible.len(), 1_000);
        let summary = rx.recv().await.unwrap().decision;
        assert_eq!(summary.feasible.len(), 3);
        assert_eq!(summary.feasible_count(), 1_000);
        assert!(summary.notes.iter().any(|n| n == SUMMARY_NOTE));
        let mut rest = Vec::new();
        assert_eq!(rx.recv_many(&mut rest, 8).await, 1);
        assert_eq!(tx.queued_bytes(), 0);
        // Room again: whole records.
        assert_eq!(tx.send(big(1_000), DecisionInputs::default()), Ok(false));
        drop(tx);
        assert!(rx.recv().await.is_some());
        assert!(rx.recv().await.is_none());
    }
}

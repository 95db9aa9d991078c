//! The channel from the scheduling loop to the decision sink: bounded by records (the loop
//! waits for room after a cycle, never drops one) and by an estimate of their bytes (past
//! it, records travel as summaries). It carries the loop's
//! [`Record`]s in the order they were sent: a decision at cycle time, a placed pod's
//! [`Settled`] record once its bind ended, and barriers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use prometheus_client::metrics::counter::Counter;
use tokio::sync::{mpsc, oneshot};

use super::Settled;
use super::log::{DecisionInputs, approx_bytes};
use headroom_scheduler::framework::Decision;

/// The scheduling loop's side of the decision channel: bounded by records and by an
/// estimate of their bytes ([`approx_bytes`]).
///
/// Why bytes: a record holds every feasible node's score columns, so at 15,000 nodes one
/// is megabytes, and a queue bounded only by count (4,096) held 4.65 GB on the kit while
/// the sink caught up. Past the byte budget a record is sent as its
/// [`Decision::summary_only`] copy (outcome, notes, the three best nodes): metrics and
/// the cluster reporter still see every decision, only that pod's explanation is shorter
/// (it says so in a note).
#[derive(Clone, Debug)]
pub struct DecisionSender {
    tx: mpsc::Sender<Record>,
    queued_bytes: Arc<AtomicUsize>,
    max_bytes: usize,
    /// Records sent as summaries: what overload shed (`/metrics`:
    /// `headroom_scheduler_decisions_summarized_total`).
    summarized: Counter,
}

/// How much the decision channel holds ([`decision_channel`]): records at most, and bytes
/// of whole records past which records wait as summaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelBounds {
    /// Records waiting for the sink, at most; past it the scheduling loop waits (a
    /// decision carries what the mode acts on, and is never dropped).
    pub records: usize,
    /// Bytes of whole records waiting for the sink, at most; past it records wait as
    /// summaries.
    pub bytes: usize,
}

impl Default for ChannelBounds {
    /// 4,096 records and 32 MiB. Why a byte budget: at 15,000 nodes a bursting `serve`
    /// outruns the sink, and a budget four times larger kept ~190 MB more of queued
    /// records at the peak (heaptrack on the kit, issue #22). 32 MiB since score columns
    /// are a byte per node: about three quarters of the records 64 MiB held before.
    fn default() -> Self {
        ChannelBounds {
            records: 4096,
            bytes: 32 << 20,
        }
    }
}

/// The sink's side of the decision channel ([`decision_channel`]).
#[derive(Debug)]
pub struct DecisionReceiver {
    rx: mpsc::Receiver<Record>,
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

/// What travels from the scheduling loop to the sink.
// Most records are decisions: boxing them to shrink the rarer variants would add an
// allocation per decision for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Record {
    /// A decision, sent right after its cycle.
    Decided(Decided),
    /// A placed pod's bind result joined with its decision's outcome, sent by the bind
    /// task once the bind (or PreBind) ended: always after the pod's decision.
    Settled(Settled),
    /// Answered once everything sent before it has been handled (logged, stored, given to
    /// the mode): the simulator waits on it so a step's placements are in the store before
    /// simulated time moves on.
    Barrier(oneshot::Sender<()>),
}

impl Record {
    /// The decision, if this is one.
    pub fn decided(self) -> Option<Decided> {
        match self {
            Record::Decided(d) => Some(d),
            _ => None,
        }
    }

    /// What the record counts against the byte budget: a decision its estimate; the rest
    /// are small and bounded by the record count.
    fn bytes(&self) -> usize {
        match self {
            Record::Decided(d) => approx_bytes(&d.decision),
            _ => 0,
        }
    }
}

/// Why [`DecisionSender::send`] did not queue a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
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
            summarized: Counter::default(),
        },
        DecisionReceiver { rx, queued_bytes },
    )
}

/// The note a record sent as a summary carries.
pub const SUMMARY_NOTE: &str =
    "explanation shortened to the best nodes: the decision queue was over its byte budget";

impl DecisionSender {
    /// Queues a record, whole while the queued bytes are under the budget, else as its
    /// summary; returns whether it was a summary. A full channel makes the caller wait for
    /// room: a decision carries what the mode acts on (an unplaced pod's FailedScheduling,
    /// its nomination, preemption's victims), so overload may shorten its explanation but
    /// never lose it. Fails only when the sink is gone.
    pub async fn send(
        &self,
        decision: Decision,
        inputs: DecisionInputs,
    ) -> Result<bool, SendError> {
        let mut bytes = approx_bytes(&decision);
        let mut summarized = false;
        let record = if self.queued_bytes.load(Ordering::Relaxed) + bytes > self.max_bytes {
            let mut summary = decision.summary_only();
            summary.notes.push(SUMMARY_NOTE.to_string());
            bytes = approx_bytes(&summary);
            summarized = true;
            self.summarized.inc();
            summary
        } else {
            decision
        };
        self.queued_bytes.fetch_add(bytes, Ordering::Relaxed);
        let record = Record::Decided(Decided {
            decision: record,
            inputs,
        });
        match self.tx.send(record).await {
            Ok(()) => Ok(summarized),
            Err(_) => {
                self.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
                Err(SendError::Closed)
            }
        }
    }

    /// The records sent as summaries so far (registered by the engine as
    /// `headroom_scheduler_decisions_summarized_total`).
    pub fn summarized(&self) -> &Counter {
        &self.summarized
    }

    /// Queues a placed pod's settled record, waiting for room: it is small, the bind task
    /// that sends it is off the cycle's path, and losing it would lose the placement
    /// history and the pod's `Scheduled` event.
    pub async fn settled(&self, settled: Settled) -> Result<(), SendError> {
        self.tx
            .send(Record::Settled(settled))
            .await
            .map_err(|_| SendError::Closed)
    }

    /// Waits until the sink has handled everything sent before this call (returns at once
    /// when the sink is gone).
    pub async fn barrier(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Record::Barrier(tx)).await.is_ok() {
            let _ = rx.await;
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
    pub async fn recv_many(&mut self, buffer: &mut Vec<Record>, limit: usize) -> usize {
        let start = buffer.len();
        let n = self.rx.recv_many(buffer, limit).await;
        let bytes: usize = buffer[start..].iter().map(Record::bytes).sum();
        self.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
        n
    }

    /// Takes one record; `None` once every sender is gone and the channel is empty.
    pub async fn recv(&mut self) -> Option<Record> {
        let r = self.rx.recv().await?;
        self.queued_bytes.fetch_sub(r.bytes(), Ordering::Relaxed);
        Some(r)
    }

    /// Takes the next decision, passing over the other records (for readers that only
    /// want decisions: tests, tools); `None` once every sender is gone.
    pub async fn recv_decision(&mut self) -> Option<Decided> {
        loop {
            if let Record::Decided(d) = self.recv().await? {
                return Some(d);
            }
        }
    }

    /// Takes one record if one is queued now.
    pub fn try_recv(&mut self) -> Option<Record> {
        let r = self.rx.try_recv().ok()?;
        self.queued_bytes.fetch_sub(r.bytes(), Ordering::Relaxed);
        Some(r)
    }

    /// Stops new records; those queued can still be received.
    pub fn close(&mut self) {
        self.rx.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_scheduler::framework::{Outcome, decision::ScoreColumn};

    /// A placed decision over `n` feasible nodes with one score column.
    fn big(n: u32) -> Decision {
        let names: Vec<Arc<str>> = (0..n).map(|i| Arc::from(format!("n{i}"))).collect();
        let mut d = Decision::new("default", "p", "u".into(), "headroom", 1, Arc::new(names));
        d.feasible = (0..n).collect();
        d.totals = (0..i64::from(n)).collect();
        d.scores = vec![ScoreColumn {
            plugin: "P",
            weight: 1,
            raw: Some(d.totals.clone()),
            normalized: d.totals.iter().map(|t| (t % 101) as u8).collect(),
            details: None,
        }];
        d.outcome = Outcome::Placed { node: "n0".into() };
        d
    }

    /// Past the byte budget records travel as summaries (with a note saying so), the
    /// queued bytes go back down as the sink takes them, and a full channel makes the
    /// sender wait for room instead of losing the record.
    #[tokio::test]
    async fn the_byte_budget_turns_records_into_summaries() {
        let one = approx_bytes(&big(1_000));
        let (tx, mut rx) = decision_channel(3, one + one / 2);
        fn send(tx: &DecisionSender) -> impl Future<Output = Result<bool, SendError>> + '_ {
            tx.send(big(1_000), DecisionInputs::default())
        }
        assert_eq!(send(&tx).await, Ok(false));
        assert_eq!(tx.queued_bytes(), one);
        assert_eq!(send(&tx).await, Ok(true));
        assert!(tx.queued_bytes() < one + one / 10);
        assert_eq!(send(&tx).await, Ok(true));
        // Full: the fourth waits until the sink takes one.
        let mut fourth = Box::pin(send(&tx));
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), &mut fourth)
                .await
                .is_err(),
            "a full channel must make the sender wait"
        );
        let whole = rx.recv_decision().await.unwrap();
        assert_eq!(whole.decision.feasible.len(), 1_000);
        assert_eq!(fourth.await, Ok(true), "room again: it is queued");
        let summary = rx.recv_decision().await.unwrap().decision;
        assert_eq!(summary.feasible.len(), 3);
        assert_eq!(summary.feasible_count(), 1_000);
        assert!(summary.notes.iter().any(|n| n == SUMMARY_NOTE));
        let mut rest = Vec::new();
        assert_eq!(rx.recv_many(&mut rest, 8).await, 2);
        assert_eq!(tx.queued_bytes(), 0);
        // Room again: whole records.
        assert_eq!(send(&tx).await, Ok(false));
        drop(tx);
        assert!(rx.recv().await.is_some());
        assert!(rx.recv().await.is_none());
    }
}

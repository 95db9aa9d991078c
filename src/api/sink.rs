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

use headroom_storage::{DecisionKey, Store};
use tokio::sync::mpsc;

use super::ApiState;
use super::log::{DecisionInputs, LoggedDecision, NodeInputs};
use crate::analytics::UsageView;
use crate::framework::Decision;
use crate::metrics::PlacementCache;
use crate::snapshot::Snapshot;
use crate::usage::Headroom;

/// Decisions taken from the channel per batch.
const BATCH: usize = 64;

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
    mut rx: mpsc::Receiver<Arc<Decision>>,
    state: ApiState,
    forward: Option<mpsc::Sender<Arc<Decision>>>,
    shutdown: impl std::future::Future<Output = ()>,
) -> SinkReport {
    let mut report = SinkReport::default();
    let mut batch: Vec<Arc<Decision>> = Vec::with_capacity(BATCH);
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
        let view = state.usage_view();
        let now = state.now_ms();
        // Once per batch: the snapshot source may be the scheduler's lock, which the loop
        // holds during every cycle.
        let snapshot = batch
            .iter()
            .any(|d| d.node().is_some())
            .then(|| state.snapshot());
        let mut logged = Vec::with_capacity(batch.len());
        for d in batch.drain(..) {
            state.metrics().observe_decision(&d, d.cycle_duration);
            if let Some(f) = &forward
                && f.try_send(Arc::new(d.summary_only())).is_err()
            {
                report.forward_dropped += 1;
            }
            let builder = d.node().and_then(|_| state.builder_of(&d));
            let inputs = inputs(&state, &d, builder, &view, snapshot.as_deref(), now);
            let decided_at_ms = if d.decided_at_ms > 0 {
                d.decided_at_ms
            } else {
                now
            };
            logged.push(Arc::new(LoggedDecision {
                decision: d,
                decided_at_ms,
                inputs,
            }));
        }
        // Not across the store write: while a reader holds the snapshot, the scheduler's
        // next change (an assumed pod) has to copy it.
        drop(snapshot);
        let caches = match state.store().cloned() {
            Some(store) => {
                let records = logged.clone();
                let metrics = state.metrics().clone();
                match tokio::task::spawn_blocking(move || persist(&store, &records)).await {
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

fn inputs(
    state: &ApiState,
    d: &Decision,
    builder: Option<String>,
    view: &UsageView,
    snapshot: Option<&Snapshot>,
    now: i64,
) -> DecisionInputs {
    let policy = state.policy();
    let stale_ms = i64::try_from(policy.stale_after.as_millis()).unwrap_or(i64::MAX);
    let chosen_node = d.node().and_then(|node| {
        let u = view.node(node)?;
        let snapshot = snapshot?;
        let n = snapshot.get(node)?;
        let age_ms = now.saturating_sub(u.newest_ms).max(0);
        Some(NodeInputs {
            usage: u.clone(),
            headroom: Headroom::of(n, snapshot.usage(), policy),
            age_seconds: age_ms as f64 / 1000.0,
            stale: age_ms > stale_ms,
        })
    });
    DecisionInputs {
        profile: builder.as_deref().and_then(|b| view.builder(b).cloned()),
        builder,
        warm_cache: None,
        usage_view_age_seconds: (view.generated_ms > 0)
            .then(|| now.saturating_sub(view.generated_ms).max(0) as f64 / 1000.0),
        chosen_node,
    }
}

/// Writes the batch to the store; returns per record whether its chosen node was in its
/// builder's placement history (`None`: unknown), and the counts of writes and failures.
/// Node verdicts a stored explanation keeps at most (chosen, best feasible, then rejected).
pub const STORED_NODES: usize = 100;

fn persist(store: &Store, records: &[Arc<LoggedDecision>]) -> (Vec<Option<bool>>, u64, u64) {
    let mut caches = Vec::with_capacity(records.len());
    let (mut stored, mut errors) = (0u64, 0u64);
    for r in records {
        let warm = match (r.decision.node(), r.inputs.builder.as_deref()) {
            (Some(node), Some(builder)) => match store.placement_history(builder) {
                Ok(history) => Some(history.iter().any(|n| n == node)),
                Err(e) => {
                    tracing::warn!(error = %e, builder, "reading placement history failed");
                    errors += 1;
                    None
                }
            },
            _ => None,
        };
        caches.push(warm);
        let mut rendered = r.render();
        rendered.inputs.warm_cache = warm;
        // The in-memory log keeps every node's verdict; the store keeps the best nodes
        // (a full explanation at 15,000 nodes is megabytes, hundreds of times a second).
        rendered.explanation.keep_nodes(STORED_NODES);
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
            Ok(()) => stored += 1,
            Err(e) => {
                tracing::warn!(error = %e, pod = %format!("{}/{}", key.namespace, key.name), "storing a decision failed");
                errors += 1;
            }
        }
    }
    (caches, stored, errors)
}

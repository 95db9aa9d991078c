//! The Filter skeleton RealMemoryFit, RealCpuFit and RealDiskFit share (as upstream's
//! `resource_allocation.go` serves its scorers): the cycle's usage from PreFilter, one
//! verdict for every node without fresh usage (`usage.onStale`), the plugin's own check on
//! the fresh ones, and the usage fallback (`usage.maxWait`) letting a fresh node's verdict
//! through unless the plugin's [`RealFit::fallback_check`] still rejects it (RealMemoryFit:
//! an expected overflow while another node has room) — a stale-data verdict stays, it is
//! not about room; and a plugin guarding promises to other pods (RealDiskFit's hold) is
//! never relaxed.

use crate::framework::{CycleState, NodeBatch, Status};
use crate::snapshot::{NodeInfo, Snapshot};
use crate::usage::node::degraded_status;
use crate::usage::wait::relaxed;
use crate::usage::{CycleUsage, NodeReal, UsagePolicy, cycle_usage_ref, fallback_active};

/// A real-usage filter: its name, its policy and its verdict on one node's real state.
pub(super) trait RealFit {
    /// The plugin name (in the error when PreFilter did not run).
    const NAME: &'static str;
    /// Whether the usage fallback (`usage.maxWait`) lets a fresh node's rejection through.
    const RELAXED_BY_FALLBACK: bool;
    /// The usage policy (staleness, onStale).
    fn policy(&self) -> &UsagePolicy;
    /// The verdict on a node's real state (a degraded verdict when it is not fresh);
    /// `node` for what the snapshot knows besides usage (the pods on it).
    fn check(&self, u: &CycleUsage, real: &NodeReal, node: &NodeInfo, explain: bool) -> Status;
    /// Under the usage fallback, a rejection that still stands on a fresh node (`None`:
    /// the node passes).
    fn fallback_check(
        &self,
        _state: &CycleState,
        _u: &CycleUsage,
        _real: &NodeReal,
        _explain: bool,
    ) -> Option<Status> {
        None
    }
}

/// `Filter` for one node.
pub(super) fn filter<P: RealFit>(plugin: &P, state: &CycleState, node: &NodeInfo) -> Status {
    let Some(u) = cycle_usage_ref(state) else {
        return Status::error(format!("{}: PreFilter did not run", P::NAME));
    };
    let real = u.node_real(node, plugin.policy());
    let s = plugin.check(u, &real, node, state.explain);
    if P::RELAXED_BY_FALLBACK
        && !s.is_success()
        && real.freshness.is_fresh()
        && fallback_active(state)
    {
        return plugin
            .fallback_check(state, u, &real, state.explain)
            .unwrap_or_else(|| relaxed(s, state.explain));
    }
    s
}

/// `Filter` over a batch of nodes from the snapshot's node table (for plugins whose
/// verdict without fresh usage is the degraded one: RealMemoryFit, RealCpuFit).
pub(super) fn filter_batch<P: RealFit>(
    plugin: &P,
    state: &CycleState,
    snapshot: &Snapshot,
    batch: &mut NodeBatch,
) {
    let Some(u) = cycle_usage_ref(state) else {
        return batch.reject_all(&Status::error(format!(
            "{}: PreFilter did not run",
            P::NAME
        )));
    };
    let policy = plugin.policy();
    let table = snapshot.table();
    // Nodes without fresh usage all get the same verdict.
    let degraded = degraded_status(policy, String::new, false);
    let oldest_fresh = u
        .ctx
        .now_ms
        .saturating_sub(policy.stale_after.as_millis() as i64);
    if u.rows.fresh_count(oldest_fresh) == 0 {
        // No node has fresh usage: that verdict for all.
        if !degraded.is_success() {
            batch.reject_all(&degraded);
        }
        return;
    }
    let degraded = (!degraded.is_success()).then_some(degraded);
    let fallback = fallback_active(state);
    batch.retain(|idx| {
        if !u.is_fresh(idx, policy) {
            return degraded.clone();
        }
        let real = u.node_real_at(table, idx, policy);
        let s = plugin.check(u, &real, snapshot.node(idx), false);
        if s.is_success() {
            return None;
        }
        if fallback {
            return plugin.fallback_check(state, u, &real, false);
        }
        Some(s)
    });
}

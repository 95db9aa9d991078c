//! The Filter skeleton RealMemoryFit, RealCpuFit and RealDiskFit share (as upstream's
//! `resource_allocation.go` serves its scorers): the cycle's usage from PreFilter, one
//! verdict for every node without fresh usage (`usage.onStale`), the plugin's own check on
//! the fresh ones, and the usage fallback (`usage.maxWait`) letting a fresh node's verdict
//! through unless the plugin's [`RealFit::fallback_check`] still rejects it (RealMemoryFit:
//! an expected overflow while another node has room) — a stale-data verdict stays, it is
//! not about room; and a plugin guarding promises to other pods (RealDiskFit's hold) is
//! never relaxed.
//!
//! A plugin implements [`RealFit`] alone; [`register`] serves it as PreFilter and Filter
//! through [`Fit`], so the three share one plugin skeleton.

use std::sync::Arc;

use crate::framework::{
    ClusterEvent, ClusterEvents, CycleState, FilterPlugin, NodeBatch, NodeNames, Plugin,
    PreFilterPlugin, Registered, Status, WrittenIn,
};
use crate::snapshot::table::NodeTable;
use crate::snapshot::{NodeIdx, NodeInfo, PodInfo, Snapshot};
use crate::usage::node::degraded_status;
use crate::usage::policy::Class;
use crate::usage::wait::relaxed;
use crate::usage::{
    CycleUsage, NodeReal, UsagePolicy, cycle_usage_written, fallback_active, pod_usage,
};

/// What every real fit holds from the plugins' dependencies: the usage policy and the
/// builder identity settings its pod's prediction is looked up with.
#[derive(Debug)]
pub(super) struct FitDeps {
    /// The usage policy (staleness, onStale, classes).
    pub(super) policy: Arc<UsagePolicy>,
    /// The builder identity settings.
    pub(super) identity: crate::identity::IdentityConfig,
}

impl FitDeps {
    /// Taken from the plugins' dependencies.
    pub(super) fn of(deps: &super::PluginDeps) -> FitDeps {
        FitDeps {
            policy: deps.policy.clone(),
            identity: deps.identity.clone(),
        }
    }
}

/// A real-usage filter: its name, its policy and its verdict on one node's real state.
pub(super) trait RealFit: std::fmt::Debug + Send + Sync + 'static {
    /// The plugin name (in the error when PreFilter did not run).
    const NAME: &'static str;
    /// Whether the usage fallback (`usage.maxWait`) lets a fresh node's rejection through.
    const RELAXED_BY_FALLBACK: bool;
    /// Whether a node without fresh usage always gets the degraded verdict, so a batch of
    /// nodes can be judged from the snapshot's node table ([`filter_batch`]); RealDiskFit's
    /// falls back to the node's annotations instead.
    const BATCH_FROM_TABLE: bool;
    /// What every real fit reads the cycle's usage with.
    fn fit_deps(&self) -> &FitDeps;
    /// The usage policy (staleness, onStale).
    fn policy(&self) -> &UsagePolicy {
        &self.fit_deps().policy
    }
    /// The builder identity settings the pod's prediction is looked up with.
    fn identity(&self) -> &crate::identity::IdentityConfig {
        &self.fit_deps().identity
    }
    /// Whether the pod's class turns this filter on (else PreFilter skips it).
    fn enabled(class: &Class) -> bool;
    /// PreFilter's own work once the pod's usage is known (RealMemoryFit: where else the
    /// pod has room, under the usage fallback).
    fn pre_filter_with(&self, _state: &mut CycleState, _u: &CycleUsage, _snapshot: &Snapshot) {}
    /// Whether node `idx`, whose usage is fresh, surely passes [`RealFit::check`], told
    /// from the few numbers the check reads without building the node's whole
    /// [`NodeReal`] (most nodes pass: the batch builds it only for the others). `false`:
    /// ask `check`.
    fn surely_passes(&self, _u: &CycleUsage, _table: &NodeTable, _idx: NodeIdx) -> bool {
        false
    }
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

/// A [`RealFit`] served as a plugin.
#[derive(Debug)]
pub(super) struct Fit<P>(P);

/// Registers a [`RealFit`]'s extension points (PreFilter, Filter).
pub(super) fn register<P: RealFit>(plugin: P) -> Registered {
    let me = Arc::new(Fit(plugin));
    Registered {
        pre_filter: Some(me.clone()),
        filter: Some(me),
        ..Registered::new(P::NAME)
    }
}

impl<P: RealFit> Plugin for Fit<P> {
    fn name(&self) -> &'static str {
        P::NAME
    }

    /// Reads the usage view: a refresh may show the room.
    fn events_to_register(&self) -> ClusterEvents {
        ClusterEvents::OBJECTS.with(ClusterEvent::UsageRefreshed)
    }

    fn relaxed_by_usage_fallback(&self) -> bool {
        P::RELAXED_BY_FALLBACK
    }
}

impl<P: RealFit> PreFilterPlugin for Fit<P> {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, Option<NodeNames>) {
        let p = &self.0;
        let u = pod_usage(state, pod, snapshot, p.policy(), p.identity());
        if !P::enabled(&u.pod.class) {
            return (Status::skip(), None);
        }
        p.pre_filter_with(state, &u, snapshot);
        (Status::success(), None)
    }
}

impl<P: RealFit> FilterPlugin for Fit<P> {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        filter(&self.0, state, node)
    }

    fn filter_batch(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        batch: &mut NodeBatch,
    ) {
        if P::BATCH_FROM_TABLE {
            filter_batch(&self.0, state, snapshot, batch);
        } else {
            batch.retain_passing(snapshot, |node| self.filter(state, pod, node));
        }
    }
}

/// `Filter` for one node.
fn filter<P: RealFit>(plugin: &P, state: &CycleState, node: &NodeInfo) -> Status {
    let u = match cycle_usage_written(state, P::NAME, WrittenIn::PreFilter) {
        Ok(u) => u,
        Err(s) => return s,
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
fn filter_batch<P: RealFit>(
    plugin: &P,
    state: &CycleState,
    snapshot: &Snapshot,
    batch: &mut NodeBatch,
) {
    let u = match cycle_usage_written(state, P::NAME, WrittenIn::PreFilter) {
        Ok(u) => u,
        Err(s) => return batch.reject_all(&s),
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
        if plugin.surely_passes(u, table, idx) {
            return None;
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

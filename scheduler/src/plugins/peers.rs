//! What the peer schedulers' plugins share: their view of a node's load over the peers'
//! windows ([`crate::view`]), the pods placed since a node's newest sample,
//! and a few readers of a pod's spec the peers use (container limits and requests, the
//! DaemonSet owner).
//!
//! Each peer reads its load from its own pipeline (Trimaran's load-watcher, Koordinator's
//! NodeMetric, crane's node annotations); here all of them read headroom's usage view. A
//! node with samples but without windows (a view from `place --usage FILE`, which has one
//! value per node) gets degenerate windows: the newest value as the mean, the windowed
//! statistic (`analytics.nodeQuantile` over `analytics.nodeWindow`) as every percentile and
//! maximum, no deviation.
//!
//! A peer implements `PeerPlugin`, its verdict and score on one node given the usage
//! context; `register` serves it through `Peer` (PreFilter and Filter when it filters,
//! PreScore and Score), so the four share one plugin skeleton.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::framework::{
    ClusterEvents, CycleState, FilterPlugin, NodeNames, Plugin, PreFilterPlugin, PreScorePlugin,
    Registered, ScorePlugin, Status, WrittenIn,
};
use crate::quantity::Quantity;
use crate::snapshot::{NodeIdx, NodeInfo, PodInfo, Snapshot};
use crate::usage_context::{MetricPath, UsageContext};
use crate::view::WINDOWS;
use crate::view::{NodeUsage, NodeWindows, WindowStat};

/// The usage context a peer plugin's PreFilter or PreScore keeps for its per-node calls
/// (one slot shared by the peers: the same snapshot's context).
pub struct Ctx(pub std::sync::Arc<UsageContext>);

impl Ctx {
    /// Keeps the snapshot's usage context in the cycle state.
    pub fn keep(state: &mut crate::framework::CycleState, snapshot: &crate::snapshot::Snapshot) {
        state.write_sharing_snapshot(Ctx(snapshot.usage().clone()));
    }

    /// The context `plugin` kept at `point` ([`CycleState::written_by`]'s error when it
    /// did not run).
    pub fn of<'a>(
        state: &'a CycleState,
        plugin: &str,
        point: WrittenIn,
    ) -> Result<&'a UsageContext, Status> {
        state.written_by::<Ctx>(plugin, point).map(|c| &*c.0)
    }
}

/// A peer scheduler's plugin, per node over the usage context the cycle keeps ([`Ctx`]).
pub(super) trait PeerPlugin: std::fmt::Debug + Send + Sync + 'static {
    /// The plugin name.
    const NAME: &'static str;
    /// Whether it filters (Koordinator's LoadAwareScheduling, crane's Dynamic) or only
    /// scores (Trimaran's).
    const FILTERS: bool;
    /// The Filter verdict on `node` (only called when [`PeerPlugin::FILTERS`]).
    fn filter_at(&self, _ctx: &UsageContext, _pod: &PodInfo, _node: &NodeInfo) -> Status {
        Status::success()
    }
    /// The metric pipelines it reads ([`crate::usage_context::held`]), from its args.
    fn metric_paths(&self) -> Vec<MetricPath>;
    /// The events that retry a pod it rejected, as upstream registers them (only asked
    /// when it filters). Default: every change to nodes and pods.
    fn events(&self) -> ClusterEvents {
        ClusterEvents::OBJECTS
    }
    /// The score of `node`, 0–100 (the peers normalise nothing).
    fn score_at(&self, ctx: &UsageContext, pod: &PodInfo, node: &NodeInfo) -> i64;
    /// What the score of `node` rests on, for `/explain`.
    fn explain_at(&self, ctx: &UsageContext, pod: &PodInfo, node: &NodeInfo) -> Option<String>;
}

/// A [`PeerPlugin`] served as a plugin.
#[derive(Debug)]
pub(super) struct Peer<P>(P);

/// Registers a [`PeerPlugin`]'s extension points: PreFilter and Filter when it filters,
/// PreScore and Score.
pub(super) fn register<P: PeerPlugin>(plugin: P) -> Registered {
    let me = Arc::new(Peer(plugin));
    let filters = P::FILTERS.then(|| me.clone());
    Registered {
        pre_filter: filters.clone().map(|p| p as Arc<dyn PreFilterPlugin>),
        filter: filters.map(|p| p as Arc<dyn FilterPlugin>),
        pre_score: Some(me.clone()),
        score: Some(me),
        ..Registered::new(P::NAME)
    }
}

impl<P: PeerPlugin> Plugin for Peer<P> {
    fn name(&self) -> &'static str {
        P::NAME
    }

    /// The peer's own ([`PeerPlugin::events`]): a pod it rejected is retried on what
    /// upstream retries it on, not on every usage refresh.
    fn events_to_register(&self) -> ClusterEvents {
        if P::FILTERS {
            self.0.events()
        } else {
            ClusterEvents::OBJECTS
        }
    }

    fn metric_paths(&self) -> Vec<MetricPath> {
        self.0.metric_paths()
    }
}

impl<P: PeerPlugin> PreFilterPlugin for Peer<P> {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, Option<NodeNames>) {
        Ctx::keep(state, snapshot);
        (Status::success(), None)
    }
}

impl<P: PeerPlugin> FilterPlugin for Peer<P> {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match Ctx::of(state, P::NAME, WrittenIn::PreFilter) {
            Ok(ctx) => self.0.filter_at(ctx, pod, node),
            Err(s) => s,
        }
    }
}

impl<P: PeerPlugin> PreScorePlugin for Peer<P> {
    fn pre_score(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        snapshot: &Snapshot,
        _feasible: &[NodeIdx],
    ) -> Status {
        Ctx::keep(state, snapshot);
        Status::success()
    }
}

impl<P: PeerPlugin> ScorePlugin for Peer<P> {
    fn normalizes(&self) -> bool {
        false
    }

    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let ctx = Ctx::of(state, P::NAME, WrittenIn::PreScore)?;
        Ok(self.0.score_at(ctx, pod, node))
    }

    fn explain_score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        self.0.explain_at(
            Ctx::of(state, P::NAME, WrittenIn::PreScore).ok()?,
            pod,
            node,
        )
    }
}

/// A node's load over the peers' windows, as a peer's pipeline delivered it: its newest
/// sample's time, when the pipeline took it, and the windows.
#[derive(Debug)]
pub struct Load<'a> {
    /// Time of the node's newest sample, ms since the epoch.
    pub newest_ms: i64,
    /// When the peer's pipeline took these figures (the view's time for the live path).
    pub got_ms: i64,
    /// The windows.
    pub windows: Cow<'a, NodeWindows>,
}

impl Load<'_> {
    /// CPU over `seconds` (one of [`WINDOWS`]).
    pub fn cpu(&self, seconds: u64) -> Option<&WindowStat> {
        self.windows.cpu(seconds)
    }

    /// Memory over `seconds` (one of [`WINDOWS`]).
    pub fn memory(&self, seconds: u64) -> Option<&WindowStat> {
        self.windows.memory(seconds)
    }
}

/// The load of `node` as `path` delivered it ([`crate::usage_context::held`]; the live
/// view for [`MetricPath::LIVE`]), `None` when it has no usage for the node.
pub fn load<'a>(ctx: &'a UsageContext, path: MetricPath, node: &str) -> Option<Load<'a>> {
    let (u, windows, got_ms) = if path.period_ms > 0 {
        let h = ctx.held.node(path, node)?;
        (&h.usage, h.windows.as_ref(), h.got_ms)
    } else {
        let u = ctx.view.node(node)?;
        (u, ctx.view.windows.get(node), ctx.view.generated_ms)
    };
    let windows = match windows {
        Some(w) => Cow::Borrowed(w),
        None => Cow::Owned(degenerate(u)),
    };
    Some(Load {
        newest_ms: u.newest_ms,
        got_ms,
        windows,
    })
}

fn degenerate(u: &NodeUsage) -> NodeWindows {
    let stat = |current: f64, windowed: f64| WindowStat {
        samples: 1,
        mean: current,
        std_dev: 0.0,
        p50: windowed,
        p90: windowed,
        p95: windowed,
        p99: windowed,
        max_5m_mean: windowed,
    };
    let cpu = stat(u.cpu_cores.current, u.cpu_cores.windowed);
    let mem = stat(
        u.memory_working_set_bytes.current,
        u.memory_working_set_bytes.windowed,
    );
    NodeWindows {
        cpu: WINDOWS.map(|_| Some(cpu)),
        memory: WINDOWS.map(|_| Some(mem)),
    }
}

/// The pods the scheduler placed on `node` at or after `since_ms` (from the usage
/// context's recent placements), as they sit in the snapshot's node.
pub fn placed_since<'a>(
    ctx: &'a UsageContext,
    node: &'a NodeInfo,
    since_ms: i64,
) -> impl Iterator<Item = &'a PodInfo> + 'a {
    ctx.recent_on(&node.name)
        .iter()
        .filter(move |r| r.at_ms >= since_ms)
        .filter_map(move |r| node.pods.iter().find(|p| p.is(&r.pod)).map(|p| &**p))
}

fn quantity(
    q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Option<Quantity> {
    Quantity::parse(&q?.0).ok()
}

/// A container's CPU limit and request, millicores (`None` when not set or unreadable).
pub fn container_cpu(c: &Container) -> (Option<i64>, Option<i64>) {
    let r = c.resources.as_ref();
    let get = |list: Option<&std::collections::BTreeMap<String, _>>| {
        quantity(list?.get("cpu")).map(|q| q.milli_value())
    };
    (
        get(r.and_then(|r| r.limits.as_ref())),
        get(r.and_then(|r| r.requests.as_ref())),
    )
}

/// The sum of a pod's containers' limits `(CPU millicores, memory bytes)` plus its
/// overhead; 0 where no container sets one.
pub fn pod_limits(pod: &Pod) -> (i64, i64) {
    let spec = pod.spec.as_ref();
    let mut cpu = 0;
    let mut mem = 0;
    for c in spec.map(|s| &s.containers[..]).unwrap_or_default() {
        let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
        cpu += quantity(limits.and_then(|l| l.get("cpu"))).map_or(0, |q| q.milli_value());
        mem += quantity(limits.and_then(|l| l.get("memory"))).map_or(0, |q| q.value());
    }
    if cpu > 0 || mem > 0 {
        let (oc, om) = overhead(pod);
        cpu += if cpu > 0 { oc } else { 0 };
        mem += if mem > 0 { om } else { 0 };
    }
    (cpu, mem)
}

/// A pod's overhead `(CPU millicores, memory bytes)`.
pub fn overhead(pod: &Pod) -> (i64, i64) {
    let o = pod.spec.as_ref().and_then(|s| s.overhead.as_ref());
    (
        quantity(o.and_then(|o| o.get("cpu"))).map_or(0, |q| q.milli_value()),
        quantity(o.and_then(|o| o.get("memory"))).map_or(0, |q| q.value()),
    )
}

/// Whether a DaemonSet owns the pod (Koordinator and crane let such pods through).
pub fn is_daemonset_pod(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet")
}

/// Test helper: PreScore, then Score on every node of the snapshot (the framework skips
/// scoring with a single feasible node, and these plugins' filters would drop nodes).
#[cfg(test)]
pub fn score_nodes(
    reg: &crate::framework::Registered,
    snap: &crate::snapshot::Snapshot,
    pod: &PodInfo,
) -> Vec<i64> {
    let mut state = crate::framework::CycleState::new(true);
    let all: Vec<crate::snapshot::NodeIdx> = (0..snap.len() as crate::snapshot::NodeIdx).collect();
    let pre = reg.pre_score.as_ref().unwrap();
    assert!(pre.pre_score(&mut state, pod, snap, &all).is_success());
    let score = reg.score.as_ref().unwrap();
    all.iter()
        .map(|&i| score.score(&state, pod, snap.node(i)).unwrap())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::*;
    use serde_json::json;

    #[test]
    fn limits_overhead_daemonsets_and_degenerate_windows() {
        let p = pod(
            "p",
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]},
                   "spec": {"overhead": {"cpu": "100m"}, "containers": [
                {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}},
                {"name": "b", "resources": {"requests": {"cpu": "2"}}}]}}),
        );
        assert_eq!(pod_limits(&p), (1100, 1 << 30));
        assert!(is_daemonset_pod(&p));
        let c = &p.spec.as_ref().unwrap().containers;
        assert_eq!(container_cpu(&c[0]), (Some(1000), Some(500)));
        assert_eq!(container_cpu(&c[1]), (None, Some(2000)));
        let snap = with_usage(
            crate::snapshot::Snapshot::build([node("n", json!({}))], []),
            vec![usage("n", 1.0, GI, 5, None)],
            vec![],
        );
        let l = load(snap.usage(), MetricPath::LIVE, "n").unwrap();
        assert_eq!(l.cpu(900).unwrap().mean, 1.0);
        assert_eq!(l.memory(3600).unwrap().max_5m_mean, GI);
        assert!(load(snap.usage(), MetricPath::LIVE, "other").is_none());
    }
}

//! LoadAwareScheduling (off by default): Koordinator's load-aware filter and score, after
//! koordinator-sh/koordinator `pkg/scheduler/plugins/loadaware/{load_aware,
//! pod_assign_cache}.go` and `estimator/default_estimator.go` (commit a7a1b76bbf81),
//! defaults from `pkg/scheduler/apis/config/v1/defaults.go`: `usageThresholds` cpu 65 /
//! memory 95 %, `estimatedScalingFactors` cpu 85 / memory 70 %, `resourceWeights` cpu 1 /
//! memory 1, `nodeMetricExpirationSeconds` 180, `filterExpiredNodeMetrics` true,
//! `enableScheduleWhenNodeMetricsExpired` false.
//!
//! - **Filter**: a node whose estimated usage — node usage + the pods placed on it that its
//!   metrics do not include yet + the incoming pod, each estimated — is above a threshold,
//!   `round(100 · estimated / allocatable) > threshold`, is rejected (`node(s) cpu usage
//!   exceed threshold`); a node whose metrics are older than `nodeMetricExpirationSeconds`
//!   is rejected (`node(s) nodeMetric expired`) unless `enableScheduleWhenNodeMetricsExpired`;
//!   a node without metrics passes; DaemonSet pods pass.
//! - **Score**: `(Σ weight · s + dominantResourceWeight · min s) / (Σ weight +
//!   dominantResourceWeight)` with `s = 100 · (allocatable − estimated) / allocatable`
//!   (integer division, as Koordinator's `leastUsedScore`); 0 for expired or missing
//!   metrics.
//! - **Estimates**: a pod counts `max(request, limit) × factor / 100`, capped at its limit;
//!   a pod without a request counts 250m CPU / 200 MiB (`DefaultMilliCPURequest`,
//!   `DefaultMemoryRequest`).
//! - **Aggregated**: with `aggregated.usageThresholds` the filter compares
//!   `aggregated.usageAggregationType` (p50, p90, p95, p99, avg) over
//!   `aggregated.usageAggregatedDuration` (default: the longest reported, 30 m) instead;
//!   with `aggregated.scoreAggregationType` the score does.
//!
//! Where headroom's numbers come from (Koordinator reads the koordlet's NodeMetric): node
//! usage is the mean over the last 5 minutes (koordlet's `aggregateDurationSeconds` 300)
//! and the aggregated usages the percentiles over 5, 10 and 30 minutes (koordlet's default
//! `nodeAggregatePolicy`) of headroom's node samples ([`crate::view`]), **as the node last
//! reported them**: each node's figures are refreshed every `reportIntervalSeconds` (60,
//! koordlet's), each node on its own timer ([`crate::usage_context::held`]), so the plugin
//! sees figures up to a minute (plus headroom's refresh interval) old, as koord-scheduler
//! does. The metric's update time is the newest sample in the report; a placed pod is
//! missing from it when placed after `update − reportIntervalSeconds`, or within
//! `estimatedSecondsAfterPodScheduled` of its placement. A pod rejected here is retried on
//! a pod delete or a NodeMetric refresh, as `EventsToRegister` says upstream.
//!
//! A missing pod adds what its estimate exceeds the report's figure for it by,
//! `max(0, estimate − reported usage)`, as upstream (`estimatedAssignedPodUsed` counts
//! `max(estimate, usage)` and `GetEstimatedUsed` takes the estimated pods' reported usage
//! off the node's). The reported usage is the pod's mean over the 5 minutes up to the
//! node's report, from each container's samples ([`crate::view::PodWindow::mean`]); a
//! pod the report has no sample of counts its whole estimate.
//!
//! Where it differs: Koordinator also estimates a pod placed before the report interval
//! that its NodeMetric has no usage for (a pod still pulling its image); here only the
//! pods placed within the interval (or `estimatedSecondsAfterPodScheduled`) are
//! estimated. The koordlet always reports its pods, whereas headroom's sources may carry
//! no per-pod usage at all (Prometheus queries for nodes only): estimating every pod
//! without a sample would then count each one's estimate on top of a node usage that
//! already holds it. `prodUsageThresholds`,
//! `scoreAccordingProdUsage` and `allowCustomizeEstimation` need per-pod metrics and
//! Koordinator's priority classes: they are refused.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::field;
use crate::framework::{ClusterEvent, ClusterEvents, Registered, Status};
use crate::snapshot::{NodeInfo, PodInfo};
use crate::usage_context::held::Phase;
use crate::usage_context::{MetricPath, UsageContext};
use crate::view::Signal;

use super::peers::{self, Load};

/// Plugin name.
pub const NAME: &str = "LoadAwareScheduling";
/// Koordinator's reason for an expired NodeMetric.
pub const REASON_EXPIRED: &str = "node(s) nodeMetric expired";
/// koordlet's default `reportIntervalSeconds`.
pub const REPORT_INTERVAL_S: i64 = 60;
/// koordlet's `aggregateDurationSeconds`: node usage is the mean over it.
pub const NODE_USAGE_WINDOW_S: u64 = 300;
const DEFAULT_MILLI_CPU: i64 = 250;
const DEFAULT_MEMORY: i64 = 200 * 1024 * 1024;

/// Per resource (`cpu`, `memory`) integers, Koordinator's `map[ResourceName]int64`.
pub type ResourceMap = BTreeMap<String, i64>;

/// `aggregated`: filter and score on percentiles.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct AggregatedArgs {
    /// Thresholds, percent, on the aggregated usage; empty: the filter uses node usage.
    pub usage_thresholds: ResourceMap,
    /// `avg`, `p50`, `p90`, `p95` or `p99`.
    pub usage_aggregation_type: Option<String>,
    /// Window of the filter's aggregation (`5m`, `10m`, `30m`, `1h`...); default the longest
    /// the koordlet reports by default, `30m`.
    #[serde(with = "humantime_serde")]
    pub usage_aggregated_duration: Option<std::time::Duration>,
    /// The score's aggregation type; none: the score uses node usage.
    pub score_aggregation_type: Option<String>,
    /// Window of the score's aggregation; default `30m`.
    #[serde(with = "humantime_serde")]
    pub score_aggregated_duration: Option<std::time::Duration>,
}

/// LoadAwareScheduling's args (`pluginArgs.loadAwareScheduling`), Koordinator's names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct LoadAwareSchedulingArgs {
    /// Reject nodes whose metrics expired. Default `true`.
    pub filter_expired_node_metrics: bool,
    /// Metrics older than this are expired, seconds (0: never). Default `180`.
    pub node_metric_expiration_seconds: i64,
    /// Let nodes with expired metrics through the filter. Default `false`.
    pub enable_schedule_when_node_metrics_expired: bool,
    /// Score weights by resource. Default `{cpu: 1, memory: 1}`.
    pub resource_weights: ResourceMap,
    /// Weight of the lowest resource score. Default `0`.
    pub dominant_resource_weight: i64,
    /// Thresholds, percent of allocatable, of estimated usage. Default `{cpu: 65, memory: 95}`.
    pub usage_thresholds: ResourceMap,
    /// Refused when set (needs per-pod metrics).
    pub prod_usage_thresholds: ResourceMap,
    /// Refused when true (needs per-pod metrics).
    pub score_according_prod_usage: bool,
    /// Only `default` (Koordinator's default estimator).
    pub estimator: Option<String>,
    /// Share of a pod's request (or limit) counted until metrics include it, percent.
    /// Default `{cpu: 85, memory: 70}`; a missing resource takes its default.
    pub estimated_scaling_factors: ResourceMap,
    /// Keep estimating a pod this long after it was placed, seconds (none: only until
    /// metrics include it).
    pub estimated_seconds_after_pod_scheduled: Option<i64>,
    /// Refused when true (per-pod estimation annotations).
    pub allow_customize_estimation: bool,
    /// Percentile filtering and scoring.
    pub aggregated: Option<AggregatedArgs>,
    /// How often each node's NodeMetric reaches the plugin, seconds: the koordlet's
    /// `reportIntervalSeconds` (upstream a koord-manager setting, the NodeMetric's
    /// `spec.metricCollectPolicy`, not a plugin arg). Each node reports on its own timer, so
    /// a node's figures are up to this plus `analytics.refreshInterval` old; a placed pod
    /// counts its estimate while it is newer than its node's report minus this. `0`: the
    /// plugin reads headroom's live view. Default `60`.
    pub report_interval_seconds: i64,
}

fn map(cpu: i64, memory: i64) -> ResourceMap {
    BTreeMap::from([("cpu".to_string(), cpu), ("memory".to_string(), memory)])
}

impl Default for LoadAwareSchedulingArgs {
    fn default() -> Self {
        LoadAwareSchedulingArgs {
            filter_expired_node_metrics: true,
            node_metric_expiration_seconds: 180,
            enable_schedule_when_node_metrics_expired: false,
            resource_weights: map(1, 1),
            dominant_resource_weight: 0,
            usage_thresholds: map(65, 95),
            prod_usage_thresholds: ResourceMap::new(),
            score_according_prod_usage: false,
            estimator: None,
            estimated_scaling_factors: map(85, 70),
            estimated_seconds_after_pod_scheduled: None,
            allow_customize_estimation: false,
            aggregated: None,
            report_interval_seconds: REPORT_INTERVAL_S,
        }
    }
}

/// Which statistic of a window: Koordinator's `AggregationType`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Agg {
    Avg,
    P50,
    P90,
    P95,
    P99,
}

impl Agg {
    /// An aggregation type, or the error at `at`.
    fn parse(s: &str, at: field::Path) -> Result<Agg, field::Error> {
        Ok(match s {
            "avg" => Agg::Avg,
            "p50" => Agg::P50,
            "p90" => Agg::P90,
            "p95" => Agg::P95,
            "p99" => Agg::P99,
            _ => {
                return Err(field::Error::not_supported(
                    at,
                    s,
                    &["avg", "p50", "p90", "p95", "p99"],
                ));
            }
        })
    }

    fn of(self, w: &crate::view::WindowStat) -> f64 {
        match self {
            Agg::Avg => w.mean,
            Agg::P50 => w.p50,
            Agg::P90 => w.p90,
            Agg::P95 => w.p95,
            Agg::P99 => w.p99,
        }
    }
}

/// Where a usage comes from: the node usage or an aggregation over a window (seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Basis(Agg, u64);

const NODE_USAGE: Basis = Basis(Agg::Avg, NODE_USAGE_WINDOW_S);

/// `[cpu, memory]`: millicores and bytes.
type Vec2 = [i64; 2];

/// The LoadAwareScheduling plugin.
#[derive(Debug)]
pub struct LoadAwareScheduling {
    args: LoadAwareSchedulingArgs,
    thresholds: Vec2,
    filter_basis: Basis,
    aggregated_filter: bool,
    score_basis: Basis,
    weights: Vec2,
    factors: Vec2,
    /// Where its NodeMetrics come from.
    path: MetricPath,
}

fn pair(m: &ResourceMap, at: &field::Path) -> Result<Vec2, field::Error> {
    if let Some(k) = m.keys().find(|k| *k != "cpu" && *k != "memory") {
        return Err(field::Error::not_supported(
            at.key(k.clone()),
            k,
            &["cpu", "memory"],
        ));
    }
    Ok([
        m.get("cpu").copied().unwrap_or(0),
        m.get("memory").copied().unwrap_or(0),
    ])
}

fn window(d: Option<std::time::Duration>, at: field::Path) -> Result<u64, field::Error> {
    let s = d.map_or(1800, |d| d.as_secs());
    if crate::view::WINDOWS.contains(&s) {
        Ok(s)
    } else {
        Err(field::Error::invalid(
            at,
            format!("{s}s"),
            "must be one of the windows headroom keeps (5m, 10m, 15m, 30m, 1h, 24h)",
        ))
    }
}

impl LoadAwareScheduling {
    /// Creates the plugin from checked args.
    pub fn new(args: LoadAwareSchedulingArgs) -> Result<Self, field::Error> {
        let at = field::Path::new;
        if !args.prod_usage_thresholds.is_empty() || args.score_according_prod_usage {
            return Err(field::Error::invalid(
                at("prodUsageThresholds"),
                "",
                "Prod usage needs per-pod metrics, which headroom does not read here; not supported",
            ));
        }
        if args.allow_customize_estimation {
            return Err(field::Error::invalid(
                at("allowCustomizeEstimation"),
                "true",
                "not supported",
            ));
        }
        if let Some(e) = args.estimator.as_deref().filter(|e| *e != "default") {
            return Err(field::Error::not_supported(
                at("estimator"),
                e,
                &["default"],
            ));
        }
        let thresholds = pair(&args.usage_thresholds, &at("usageThresholds"))?;
        let weights = pair(&args.resource_weights, &at("resourceWeights"))?;
        let mut factors = pair(
            &args.estimated_scaling_factors,
            &at("estimatedScalingFactors"),
        )?;
        for (i, k) in ["cpu", "memory"].iter().enumerate() {
            if !args.estimated_scaling_factors.contains_key(*k) {
                factors[i] = [85, 70][i];
            }
        }
        for (what, v) in [
            ("usageThresholds", thresholds),
            ("estimatedScalingFactors", factors),
        ] {
            if v.iter().any(|x| !(0..=100).contains(x)) {
                return Err(field::Error::out_of_range(
                    at(what),
                    format!("{v:?}"),
                    "in 0..=100",
                ));
            }
        }
        if weights.iter().any(|w| *w < 0) || args.dominant_resource_weight < 0 {
            return Err(field::Error::invalid(
                at("resourceWeights"),
                format!(
                    "{weights:?} (dominantResourceWeight {})",
                    args.dominant_resource_weight
                ),
                "weights must not be negative",
            ));
        }
        if args.report_interval_seconds < 0 {
            return Err(field::Error::out_of_range(
                at("reportIntervalSeconds"),
                args.report_interval_seconds,
                "≥ 0",
            ));
        }
        let path = MetricPath::every(
            std::time::Duration::from_secs(args.report_interval_seconds as u64),
            Phase::PerNode,
        );
        let mut filter_basis = NODE_USAGE;
        let mut aggregated_filter = false;
        let mut score_basis = NODE_USAGE;
        let mut agg_thresholds = None;
        if let Some(a) = &args.aggregated {
            if !a.usage_thresholds.is_empty() {
                let agg = at("aggregated");
                let t = pair(&a.usage_thresholds, &agg.child("usageThresholds"))?;
                let kind = Agg::parse(
                    a.usage_aggregation_type.as_deref().unwrap_or("p95"),
                    agg.child("usageAggregationType"),
                )?;
                filter_basis = Basis(
                    kind,
                    window(
                        a.usage_aggregated_duration,
                        agg.child("usageAggregatedDuration"),
                    )?,
                );
                aggregated_filter = true;
                agg_thresholds = Some(t);
            }
            if let Some(kind) = &a.score_aggregation_type {
                let kind = Agg::parse(kind, at("aggregated").child("scoreAggregationType"))?;
                score_basis = Basis(
                    kind,
                    window(
                        a.score_aggregated_duration,
                        at("aggregated").child("scoreAggregatedDuration"),
                    )?,
                );
            }
        }
        Ok(LoadAwareScheduling {
            thresholds: agg_thresholds.unwrap_or(thresholds),
            filter_basis,
            aggregated_filter,
            score_basis,
            weights,
            factors,
            path,
            args,
        })
    }

    /// Registers its extension points (PreFilter, Filter, PreScore, Score).
    pub fn register(self) -> Registered {
        peers::register(self)
    }

    /// Koordinator's `estimatedPodUsed`: `[cpu millicores, memory bytes]`.
    pub fn estimate(&self, pod: &PodInfo) -> Vec2 {
        let req = &pod.requests.requests;
        let (lc, lm) = peers::pod_limits(&pod.pod);
        let one = |request: i64, limit: i64, factor: i64, default: i64| {
            let q = request.max(limit);
            if q == 0 {
                return default;
            }
            let e = (q as f64 * factor as f64 / 100.0).round() as i64;
            if limit > 0 { e.min(limit) } else { e }
        };
        [
            one(req.milli_cpu, lc, self.factors[0], DEFAULT_MILLI_CPU),
            one(req.memory, lm, self.factors[1], DEFAULT_MEMORY),
        ]
    }

    fn expired(&self, ctx: &UsageContext, load: &Load<'_>) -> bool {
        let s = self.args.node_metric_expiration_seconds;
        s > 0 && ctx.now_ms - load.newest_ms >= s * 1000
    }

    /// Estimated usage of `node` with the pod, by `basis`: node usage + what the pods
    /// placed since the metric may add beyond what it holds of them + the pod. `None`
    /// without usage (or without that window).
    fn estimated(
        &self,
        ctx: &UsageContext,
        load: &Load<'_>,
        basis: Basis,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Option<Vec2> {
        let Basis(kind, w) = basis;
        let mut e = [
            (kind.of(load.cpu(w)?) * 1000.0).round() as i64,
            kind.of(load.memory(w)?).round() as i64,
        ];
        let report_ms = load.newest_ms;
        let cutoff = report_ms - self.args.report_interval_seconds * 1000;
        let keep = self.args.estimated_seconds_after_pod_scheduled.unwrap_or(0) * 1000;
        for r in ctx.recent_on(&node.name) {
            if !(r.at_ms > cutoff || (keep > 0 && r.at_ms + keep > report_ms)) {
                continue;
            }
            let Some(p) = node.pods.iter().find(|p| p.is(&r.pod)) else {
                continue;
            };
            if p.uid == pod.uid {
                continue;
            }
            // Upstream counts max(estimate, reported usage) and takes the reported usage
            // off the node's: the node's figure plus whatever the estimate exceeds it by.
            let x = self.estimate(p);
            let used = reported(ctx, &r.pod, report_ms);
            e[0] += (x[0] - used[0]).max(0);
            e[1] += (x[1] - used[1]).max(0);
        }
        let x = self.estimate(pod);
        Some([e[0] + x[0], e[1] + x[1]])
    }

    fn filter_node(&self, ctx: &UsageContext, pod: &PodInfo, node: &NodeInfo) -> Status {
        if peers::is_daemonset_pod(&pod.pod) || self.thresholds == [0, 0] {
            return Status::success();
        }
        let Some(load) = peers::load(ctx, self.path, &node.name) else {
            return Status::success();
        };
        if self.args.filter_expired_node_metrics && self.expired(ctx, &load) {
            if !self.args.enable_schedule_when_node_metrics_expired {
                return Status::unschedulable(REASON_EXPIRED);
            }
            return Status::success();
        }
        let Some(est) = self.estimated(ctx, &load, self.filter_basis, pod, node) else {
            return Status::success();
        };
        let alloc = [node.allocatable.milli_cpu, node.allocatable.memory];
        for (i, name) in ["cpu", "memory"].iter().enumerate() {
            let t = self.thresholds[i];
            if t == 0 || alloc[i] == 0 {
                continue;
            }
            let usage = (est[i] as f64 / alloc[i] as f64 * 100.0).round() as i64;
            if usage > t {
                let reason = if self.aggregated_filter {
                    format!("node(s) {name} aggregated usage exceed threshold")
                } else {
                    format!("node(s) {name} usage exceed threshold")
                };
                return Status::unschedulable(reason)
                    .with_detail(format!("estimated {name} usage {usage} % > {t} %"));
            }
        }
        Status::success()
    }

    fn score_node(&self, ctx: &UsageContext, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let Some(load) = peers::load(ctx, self.path, &node.name) else {
            return 0;
        };
        if self.expired(ctx, &load) {
            return 0;
        }
        let Some(est) = self.estimated(ctx, &load, self.score_basis, pod, node) else {
            return 0;
        };
        let alloc = [node.allocatable.milli_cpu, node.allocatable.memory];
        let dw = self.args.dominant_resource_weight;
        let (mut sum, mut weights, mut dominant) = (0, 0, if dw != 0 { 100 } else { 0 });
        if dw != 0 {
            weights = dw;
        }
        for i in 0..2 {
            let w = self.weights[i];
            if w == 0 && dw == 0 {
                continue;
            }
            let s = if alloc[i] == 0 || est[i] > alloc[i] {
                0
            } else {
                (alloc[i] - est[i]) * 100 / alloc[i]
            };
            sum += s * w;
            weights += w;
            dominant = dominant.min(s);
        }
        sum += dominant * dw;
        if weights <= 0 { 0 } else { sum / weights }
    }
}

/// What a node's NodeMetric taken at `report_ms` holds of pod `key`: its mean over the
/// koordlet's window ([`NODE_USAGE_WINDOW_S`]) up to the report, `[millicores, bytes]`;
/// `[0, 0]` where the view has no sample of it there (the report has no usage for it).
/// Read from the view's per-pod samples ([`crate::view::PodWindow`]), which span
/// `analytics.nodeWindow` back from the view's time (2 minutes by default): a pod placed
/// since the report interval began has all its samples up to the report there, but for
/// its first seconds when the report is at its oldest (at the defaults a report is up to
/// 75 s old, so a pod placed in the interval's first 15 s loses up to 15 s of its ramp,
/// and its mean errs a little high).
fn reported(ctx: &UsageContext, key: &crate::key::PodKey, report_ms: i64) -> Vec2 {
    let Some(w) = ctx.view.pod_windows.get(key) else {
        return [0, 0];
    };
    let from = report_ms - NODE_USAGE_WINDOW_S as i64 * 1000;
    let mean = |s| w.mean(s, from, report_ms).unwrap_or(0.0);
    [
        (mean(Signal::Cpu) * 1000.0).round() as i64,
        mean(Signal::Memory).round() as i64,
    ]
}

impl peers::PeerPlugin for LoadAwareScheduling {
    const NAME: &'static str = NAME;
    const FILTERS: bool = true;

    fn metric_paths(&self) -> Vec<MetricPath> {
        vec![self.path]
    }

    /// Koordinator's `EventsToRegister`: Pod Delete and NodeMetric Add/Update/Delete of any
    /// node (`load_aware.go`) — here a refresh of the held NodeMetrics (the usage refresh
    /// when it reads the live view).
    fn events(&self) -> ClusterEvents {
        let refreshed = if self.path.period_ms > 0 {
            ClusterEvent::PeerMetricsRefreshed
        } else {
            ClusterEvent::UsageRefreshed
        };
        ClusterEvents::of(&[
            ClusterEvent::PodDeleted,
            ClusterEvent::UnschedulableTimeout,
            refreshed,
        ])
    }

    fn filter_at(&self, ctx: &UsageContext, pod: &PodInfo, node: &NodeInfo) -> Status {
        self.filter_node(ctx, pod, node)
    }

    fn score_at(&self, ctx: &UsageContext, pod: &PodInfo, node: &NodeInfo) -> i64 {
        self.score_node(ctx, pod, node)
    }

    fn explain_at(&self, ctx: &UsageContext, pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let load = peers::load(ctx, self.path, &node.name)?;
        let est = self.estimated(ctx, &load, self.score_basis, pod, node)?;
        Some(format!(
            "estimated usage with the pod: cpu {}m of {}m, memory {} of {} ({:?})",
            est[0],
            node.allocatable.milli_cpu,
            crate::quantity::format_bytes(est[1]),
            crate::quantity::format_bytes(node.allocatable.memory),
            self.score_basis,
        ))
    }
}

impl super::registry::PluginArgs for LoadAwareSchedulingArgs {
    /// Resources only cpu and memory, percentages in 0..=100, known aggregation types and
    /// windows, the unsupported Prod options unset: the constructor's checks.
    fn validate(&self, path: &crate::field::Path) -> crate::field::ErrorList {
        super::registry::constructed(LoadAwareScheduling::new(self.clone()), path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::key::PodKey;
    use crate::plugins::peers::PeerPlugin;
    use crate::plugins::testutil::*;
    use crate::snapshot::Snapshot;
    use crate::usage_context::RecentPlacement;
    use serde_json::json;

    fn plugin(args: LoadAwareSchedulingArgs) -> LoadAwareScheduling {
        LoadAwareScheduling::new(args).unwrap()
    }

    fn req(
        name: &str,
        cpu: &str,
        mem: &str,
        node: Option<&str>,
    ) -> k8s_openapi::api::core::v1::Pod {
        pod(
            name,
            json!({"spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}}),
        )
    }

    /// Koordinator `estimator/default_estimator_test.go`: requests × 85 % / 70 %, a pod
    /// without requests 250m / 200 MiB, a limit above the request scaled and capped.
    #[test]
    fn estimates_like_the_default_estimator() {
        let p = plugin(Default::default());
        assert_eq!(
            p.estimate(&info(req("a", "4", "8Gi", None))),
            [3400, (8.0 * GI * 0.7).round() as i64]
        );
        assert_eq!(
            p.estimate(&info(pod("b", json!({})))),
            [250, 200 * 1024 * 1024]
        );
        let limited = info(pod(
            "c",
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}}]}}),
        ));
        assert_eq!(p.estimate(&limited)[0], 1700);
    }

    /// Koordinator `load_aware_test.go` `TestFilterUsage`'s shape: a 4-CPU node (here
    /// 8 GiB) filtered at 65 % CPU; the estimate of pods assigned after the metric counts.
    #[test]
    fn filter_thresholds_estimates_and_expiry() {
        let build = |cpu: f64, age: i64, assigned: bool| {
            let pods: Vec<_> = if assigned {
                vec![req("new", "2", "0", Some("n"))]
            } else {
                vec![]
            };
            let mut s = with_usage(
                Snapshot::build([node("n", json!({}))], pods),
                vec![usage("n", cpu, GI, age, None)],
                vec![],
            );
            if assigned {
                s.usage_mut().record_placement(
                    None,
                    "n",
                    RecentPlacement {
                        pod: PodKey::new("default", "new"),
                        at_ms: NOW_MS,
                        cpu_cores: 0.0,
                        memory_bytes: 0.0,
                        disk_bytes: 0.0,
                        ..Default::default()
                    },
                );
            }
            s
        };
        let reg = || plugin(Default::default()).register();
        let incoming = info(req("p", "500m", "0", None));
        // 2 cores used + 425m = 60.6 % → 61 ≤ 65: fits.
        let v = filter_all(&reg(), &build(2.0, 5, false), &incoming);
        assert!(v[0].1.is_success(), "{:?}", v);
        // plus a 2-CPU pod assigned after the metric: 2 + 1.7 + 0.425 → 103 % > 65.
        let v = filter_all(&reg(), &build(2.0, 5, true), &incoming);
        assert_eq!(v[0].1.code, Code::Unschedulable);
        assert_eq!(v[0].1.message(), "node(s) cpu usage exceed threshold");
        // metrics 180 s old: expired.
        let v = filter_all(&reg(), &build(0.0, 180, false), &incoming);
        assert_eq!(v[0].1.message(), REASON_EXPIRED);
        let lenient = LoadAwareSchedulingArgs {
            enable_schedule_when_node_metrics_expired: true,
            ..Default::default()
        };
        let v = filter_all(
            &plugin(lenient).register(),
            &build(0.0, 180, false),
            &incoming,
        );
        assert!(v[0].1.is_success());
        // No metrics at all: the node passes.
        let bare = Snapshot::build([node("n", json!({}))], []);
        assert!(filter_all(&reg(), &bare, &incoming)[0].1.is_success());
    }

    /// `estimatedAssignedPodUsed`: a pod placed since the report adds only what its
    /// estimate exceeds its usage in the report by — its mean over the samples up to the
    /// report, not the ones after — and its whole estimate when the report has none.
    #[test]
    fn a_placed_pod_adds_its_estimate_less_what_the_report_holds_of_it() {
        let report_ms = NOW_MS - 5_000;
        let build = |samples: Option<Vec<(i64, f64)>>| {
            let mut s = with_usage(
                Snapshot::build([node("n", json!({}))], [req("new", "2", "0", Some("n"))]),
                vec![usage("n", 2.0, GI, 5, None)],
                vec![],
            );
            let key = PodKey::new("default", "new");
            let u = s.usage_mut();
            u.record_placement(
                None,
                "n",
                RecentPlacement {
                    pod: key.clone(),
                    at_ms: NOW_MS - 40_000,
                    ..Default::default()
                },
            );
            if let Some(cpu) = samples {
                let view = std::sync::Arc::make_mut(&mut u.view);
                view.pod_windows.insert(
                    key,
                    crate::view::PodWindow {
                        cpu: vec![cpu],
                        memory: vec![],
                    },
                );
            }
            s
        };
        let p = plugin(Default::default());
        let incoming = info(req("p", "500m", "0", None));
        let cpu = |s: &Snapshot| {
            p.explain_at(s.usage(), &incoming, s.node(0))
                .unwrap()
                .split("cpu ")
                .nth(1)
                .and_then(|c| c.split('m').next())
                .unwrap()
                .parse::<i64>()
                .unwrap()
        };
        // 2 cores + 1700m estimated + 425m.
        assert_eq!(cpu(&build(None)), 4125);
        // Its mean up to the report is 1.6 cores: it adds 100m; the sample after the report
        // (idle) is not in the report.
        let used = vec![
            (report_ms - 30_000, 1.5),
            (report_ms - 20_000, 1.6),
            (report_ms - 10_000, 1.7),
            (report_ms + 3_000, 0.0),
        ];
        assert_eq!(cpu(&build(Some(used.clone()))), 2525);
        // Above its estimate: nothing added (the node's figure holds it).
        assert_eq!(cpu(&build(Some(vec![(report_ms - 1_000, 3.0)]))), 2425);
        // Samples only after the report: the report has none of it.
        assert_eq!(cpu(&build(Some(vec![(report_ms + 1_000, 1.9)]))), 4125);
        // Through the filter, 65 % of 4 cores: 2525m fits, 4125m does not.
        let reg = plugin(Default::default()).register();
        assert!(
            filter_all(&reg, &build(Some(used)), &incoming)[0]
                .1
                .is_success()
        );
        let v = filter_all(&reg, &build(None), &incoming);
        assert_eq!(v[0].1.code, Code::Unschedulable);
    }

    /// The plugin reads the node's last NodeMetric report, not headroom's live view: a node
    /// that was busy when it reported is rejected until its next report, each node on its
    /// own timer; with `reportIntervalSeconds: 0` it reads the live view.
    #[test]
    fn reads_the_nodes_last_report_not_the_live_view() {
        let idle = with_usage(
            Snapshot::build([node("n", json!({}))], []),
            vec![usage("n", 0.4, GI, 5, None)],
            vec![],
        );
        let busy_view = |t: i64| crate::view::UsageView {
            generated_ms: t,
            nodes: [("n".to_string(), usage("n", 3.6, GI, 5, None))].into(),
            ..Default::default()
        };
        let p = || plugin(Default::default());
        let path = p().metric_paths()[0];
        // The report taken at NOW (busy); the live view since says idle.
        let mut s = idle;
        let (held, changed) =
            crate::usage_context::Held::default().advance(&busy_view(NOW_MS), &[path]);
        assert!(changed);
        s.usage_mut().held = std::sync::Arc::new(held.clone());
        let incoming = info(pod("x", json!({})));
        let v = filter_all(&p().register(), &s, &incoming);
        assert_eq!(v[0].1.message(), "node(s) cpu usage exceed threshold");
        let live = || {
            plugin(LoadAwareSchedulingArgs {
                report_interval_seconds: 0,
                ..Default::default()
            })
        };
        assert!(
            filter_all(&live().register(), &s, &incoming)[0]
                .1
                .is_success()
        );
        // The idle view published at the node's next report instant replaces it.
        let next = path.last_refresh("n", NOW_MS) + 60_000;
        let idle_view = crate::view::UsageView {
            generated_ms: next,
            ..(*s.usage().view).clone()
        };
        let (held, changed) = held.advance(&idle_view, &[path]);
        assert!(changed);
        s.usage_mut().held = std::sync::Arc::new(held);
        assert!(filter_all(&p().register(), &s, &incoming)[0].1.is_success());
        // Upstream's EventsToRegister: pod deletes and NodeMetric updates, not node or
        // pod additions nor headroom's usage refresh.
        let e = p().events();
        assert!(
            e.contains(ClusterEvent::PeerMetricsRefreshed) && e.contains(ClusterEvent::PodDeleted)
        );
        assert!(!e.contains(ClusterEvent::UsageRefreshed) && !e.contains(ClusterEvent::NodeAdded));
        assert!(live().events().contains(ClusterEvent::UsageRefreshed));
    }

    /// `loadAwareSchedulingScorer` / `leastUsedScore`: weighted least-used, integer math.
    #[test]
    fn scores_least_used() {
        let snap = with_usage(
            Snapshot::build([node("a", json!({})), node("b", json!({}))], []),
            vec![
                usage("a", 1.0, 2.0 * GI, 5, None),
                usage("b", 3.0, 6.0 * GI, 5, None),
            ],
            vec![],
        );
        let p = info(req("p", "0", "0", None));
        // The pod counts 250m / 200 MiB. a: cpu (4000 − 1250)·100/4000 = 68, memory
        // (8 − 2.195)/8 → 72: (68 + 72)/2 = 70. b: 18 and 22 → 20.
        let s =
            crate::plugins::peers::score_nodes(&plugin(Default::default()).register(), &snap, &p);
        assert_eq!(s, [70, 20]);
        let dominant = LoadAwareSchedulingArgs {
            dominant_resource_weight: 2,
            ..Default::default()
        };
        // a: (68 + 72 + 2 · 68) / 4 = 69.
        let s = crate::plugins::peers::score_nodes(&plugin(dominant).register(), &snap, &p);
        assert_eq!(s[0], 69);
    }

    #[test]
    fn aggregated_filter_and_bad_args() {
        let a = LoadAwareSchedulingArgs {
            aggregated: Some(AggregatedArgs {
                usage_thresholds: map(50, 0),
                usage_aggregation_type: Some("p99".into()),
                usage_aggregated_duration: Some(std::time::Duration::from_secs(300)),
                ..Default::default()
            }),
            ..Default::default()
        };
        let p = plugin(a);
        assert_eq!(p.filter_basis, Basis(Agg::P99, 300));
        // 2.5 cores (the p99 of a usage file's degenerate windows) + 250m of 4: 69 % > 50.
        let snap = with_usage(
            Snapshot::build([node("n", json!({}))], []),
            vec![usage("n", 2.5, GI, 5, None)],
            vec![],
        );
        let v = filter_all(&p.register(), &snap, &info(pod("x", json!({}))));
        assert_eq!(
            v[0].1.message(),
            "node(s) cpu aggregated usage exceed threshold"
        );
        for bad in [
            json!({"usageThresholds": {"gpu": 1}}),
            json!({"prodUsageThresholds": {"cpu": 50}}),
            json!({"aggregated": {"usageThresholds": {"cpu": 50}, "usageAggregationType": "p42"}}),
            json!({"aggregated": {"scoreAggregationType": "p90", "scoreAggregatedDuration": "7m"}}),
        ] {
            assert!(
                crate::plugins::registry::decode_args::<LoadAwareSchedulingArgs>(Some(&bad))
                    .is_err(),
                "{bad}"
            );
        }
    }
}

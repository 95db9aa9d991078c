//! TargetLoadPacking (off by default): Trimaran's CPU bin-packing toward a target
//! utilisation, after kubernetes-sigs/scheduler-plugins
//! `pkg/trimaran/targetloadpacking/targetloadpacking.go` (commit 903da7df82cb, read
//! 2026-11), its defaults from `apis/config/v1/defaults.go` (`targetUtilization` 40,
//! `defaultRequests` cpu 1000m, `defaultRequestsMultiplier` "1.5").
//!
//! Score: `U = 100 × (node CPU used + pod's predicted CPU + missing CPU) / capacity`; `U ≤
//! T` scores `(100 − T)·U/T + T` (packing toward `T`), `T < U ≤ 100` scores `T·(100 − U)/(100
//! − T)`, above 100 scores 0; no normalisation. A pod's (and a missing pod's) predicted CPU
//! is per container its CPU limit, else its request × `defaultRequestsMultiplier`, else
//! `defaultRequests.cpu`, plus the pod's overhead (`PredictUtilisation`).
//!
//! Where headroom's numbers come from (Trimaran reads load-watcher, here with the
//! Prometheus provider its manifest sets):
//! - node CPU used: the mean of `node_cpu_usage_cores` over the last 15 minutes
//!   ([`crate::view`]; load-watcher's Prometheus window is 15 minutes), against the
//!   node's `status.capacity` CPU as Trimaran computes it, **as load-watcher last fetched
//!   it**: every `fetchIntervalSeconds` (60, load-watcher's loop), every node at once
//!   ([`crate::usage_context::held`]). Upstream the plugin's collector also polls
//!   load-watcher every 30 s, which can add up to 30 s more; headroom's refresh interval
//!   adds up to one interval instead;
//! - missing CPU: the pods the scheduler placed on the node after load-watcher's fetch
//!   (the window's end), or within the 60 s before it
//!   (`metricsAgentReportingIntervalSeconds`), as Trimaran's `ScheduledPodsCache` counts
//!   them (`pkg/trimaran/handler.go`), from the usage context's recent placements;
//! - a node without usage scores 0, as Trimaran's "failed to get metrics" branch does.
//!
//! `metricProvider` and `watcherAddress` are accepted so that a Trimaran configuration
//! reads unchanged, and ignored: usage comes from headroom's collectors.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::field;
use crate::framework::Registered;
use crate::quantity::Quantity;
use crate::snapshot::{NodeInfo, PodInfo};
use crate::usage_context::held::Phase;
use crate::usage_context::{MetricPath, UsageContext};

use super::peers::{self};

/// Plugin name.
pub const NAME: &str = "TargetLoadPacking";
/// load-watcher's window, seconds.
pub const WINDOW_S: u64 = 900;
/// `metricsAgentReportingIntervalSeconds`: a pod placed this long before the newest sample
/// may not be in it yet.
pub const REPORTING_INTERVAL_MS: i64 = 60_000;

/// TargetLoadPacking's args (`pluginArgs.targetLoadPacking`), Trimaran's names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct TargetLoadPackingArgs {
    /// The CPU utilisation packed toward, percent, in 1..=100. Default `40`.
    pub target_utilization: i64,
    /// CPU predicted for a container with neither a CPU limit nor a request. Default
    /// `{cpu: 1000m}`.
    pub default_requests: BTreeMap<String, String>,
    /// A container's CPU request is multiplied by this when it has no limit (a string, as
    /// Trimaran's). Default `"1.5"`.
    pub default_requests_multiplier: String,
    /// Trimaran's metric provider: accepted, unused (headroom's collectors feed usage).
    pub metric_provider: Option<serde_json::Value>,
    /// Trimaran's load-watcher address: accepted, unused.
    pub watcher_address: Option<String>,
    /// How often new figures reach the plugin, seconds: load-watcher's fetch loop
    /// (upstream a fixed minute plus the query's time, `time.Sleep(time.Minute)` in
    /// paypal/load-watcher `pkg/watcher/watcher.go`; not an upstream arg). Every node
    /// refreshes at once. `0`: headroom's live view. Default `60`.
    pub fetch_interval_seconds: i64,
}

/// load-watcher's fetch loop, seconds.
pub const FETCH_INTERVAL_S: i64 = 60;

/// The metric path of a load-watcher fetching every `seconds`, or the error at
/// `fetchIntervalSeconds`.
pub fn fetch_path(seconds: i64) -> Result<MetricPath, field::Error> {
    if seconds < 0 {
        return Err(field::Error::out_of_range(
            field::Path::new("fetchIntervalSeconds"),
            seconds,
            "≥ 0",
        ));
    }
    Ok(MetricPath::every(
        std::time::Duration::from_secs(seconds as u64),
        Phase::Aligned,
    ))
}

impl Default for TargetLoadPackingArgs {
    fn default() -> Self {
        TargetLoadPackingArgs {
            target_utilization: 40,
            default_requests: BTreeMap::from([("cpu".to_string(), "1000m".to_string())]),
            default_requests_multiplier: "1.5".into(),
            metric_provider: None,
            watcher_address: None,
            fetch_interval_seconds: FETCH_INTERVAL_S,
        }
    }
}

/// The TargetLoadPacking plugin.
#[derive(Debug)]
pub struct TargetLoadPacking {
    target: f64,
    default_milli: i64,
    multiplier: f64,
    path: MetricPath,
}

impl TargetLoadPacking {
    /// Creates the plugin from checked args.
    pub fn new(args: TargetLoadPackingArgs) -> Result<Self, field::Error> {
        if !(1..=100).contains(&args.target_utilization) {
            return Err(super::registry::not_in(
                field::Path::new("targetUtilization"),
                args.target_utilization,
                "1..=100",
            ));
        }
        let multiplier: f64 = args
            .default_requests_multiplier
            .parse()
            .ok()
            .filter(|m: &f64| m.is_finite() && *m >= 0.0)
            .ok_or_else(|| {
                field::Error::invalid(
                    field::Path::new("defaultRequestsMultiplier"),
                    field::quoted(&args.default_requests_multiplier),
                    "must be a non-negative number",
                )
            })?;
        let default_milli = match args.default_requests.get("cpu") {
            None => 1000,
            Some(q) => Quantity::parse(q)
                .ok()
                .filter(|q| !q.is_negative())
                .map(|q| q.milli_value())
                .ok_or_else(|| {
                    field::Error::invalid(
                        field::Path::new("defaultRequests").key("cpu"),
                        field::quoted(q),
                        "must be a CPU quantity",
                    )
                })?,
        };
        if let Some(k) = args.default_requests.keys().find(|k| *k != "cpu") {
            return Err(field::Error::invalid(
                field::Path::new("defaultRequests").key(k.clone()),
                "",
                "only cpu is read",
            ));
        }
        Ok(TargetLoadPacking {
            path: fetch_path(args.fetch_interval_seconds)?,
            target: args.target_utilization as f64,
            default_milli,
            multiplier,
        })
    }

    /// Registers its extension points (PreScore, Score).
    pub fn register(self) -> Registered {
        peers::register(self)
    }

    /// Trimaran's `PredictUtilisation` summed over the pod's containers, plus overhead.
    fn predict(&self, pod: &PodInfo) -> i64 {
        let containers = pod.pod.spec.as_ref().map(|s| &s.containers[..]);
        let sum: i64 = containers
            .unwrap_or_default()
            .iter()
            .map(|c| match peers::container_cpu(c) {
                (Some(limit), _) => limit,
                (None, Some(req)) => (req as f64 * self.multiplier).round() as i64,
                (None, None) => self.default_milli,
            })
            .sum();
        sum + peers::overhead(&pod.pod).0
    }

    /// The predicted utilisation (percent) and the score of `node`; `None` without usage.
    fn judge(&self, ctx: &UsageContext, pod: &PodInfo, node: &NodeInfo) -> Option<(f64, i64)> {
        let load = peers::load(ctx, self.path, &node.name)?;
        let used = load.cpu(WINDOW_S)?.mean * 1000.0;
        // Upstream's reference is the window's end, load-watcher's fetch instant.
        let since = load.got_ms - REPORTING_INTERVAL_MS;
        let missing: i64 = peers::placed_since(ctx, node, since)
            .filter(|p| p.uid != pod.uid)
            .map(|p| self.predict(p))
            .sum();
        let cap = node.capacity.0 as f64;
        let u = if cap > 0.0 {
            100.0 * (used + self.predict(pod) as f64 + missing as f64) / cap
        } else {
            0.0
        };
        Some((u, self.score_of(u)))
    }

    fn score_of(&self, u: f64) -> i64 {
        let t = self.target;
        if u > t {
            if u > 100.0 {
                return 0;
            }
            return (t * (100.0 - u) / (100.0 - t)).round() as i64;
        }
        ((100.0 - t) * u / t + t).round() as i64
    }
}

impl peers::PeerPlugin for TargetLoadPacking {
    const NAME: &'static str = NAME;
    const FILTERS: bool = false;

    fn metric_paths(&self) -> Vec<MetricPath> {
        vec![self.path]
    }

    fn score_at(&self, ctx: &UsageContext, pod: &PodInfo, node: &NodeInfo) -> i64 {
        self.judge(ctx, pod, node).map_or(0, |(_, s)| s)
    }

    fn explain_at(&self, ctx: &UsageContext, pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        Some(match self.judge(ctx, pod, node) {
            Some((u, _)) => format!(
                "predicted CPU {u:.1} % of capacity (15-min mean + pod + pods placed since the last sample) against target {} %",
                self.target
            ),
            None => "no usage for the node: minimum score (Trimaran)".into(),
        })
    }
}

impl super::registry::PluginArgs for TargetLoadPackingArgs {
    /// The target's range, the multiplier and the default request: the constructor's checks.
    fn validate(&self, path: &crate::field::Path) -> crate::field::ErrorList {
        super::registry::constructed(TargetLoadPacking::new(self.clone()), path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::PodKey;
    use crate::plugins::testutil::*;
    use crate::snapshot::Snapshot;
    use crate::usage_context::RecentPlacement;
    use serde_json::json;

    fn plugin() -> TargetLoadPacking {
        TargetLoadPacking::new(TargetLoadPackingArgs::default()).unwrap()
    }

    /// scheduler-plugins `targetloadpacking_test.go` `TestTargetLoadPackingScoring`: a
    /// 1-CPU node; an empty pod on an idle node scores the target (40), on a node at 50 %
    /// scores 33; a pod of 1 CPU (limit) on a node at 30 % exceeds 100 % and scores 0; a
    /// node without metrics scores 0.
    #[test]
    fn ported_scoring_cases() {
        let one_cpu = json!({"status": {"capacity": {"cpu": "1", "memory": "1Gi"}, "allocatable": {"cpu": "1", "memory": "1Gi"}}});
        let snap = |cpu: Option<f64>| {
            let s = Snapshot::build([node("node-1", one_cpu.clone())], []);
            with_usage(
                s,
                cpu.map(|c| usage("node-1", c, 0.0, 5, None))
                    .into_iter()
                    .collect(),
                vec![],
            )
        };
        let empty = info(pod("p", json!({"spec": {"containers": []}})));
        let big = info(pod(
            "p",
            json!({"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]}}),
        ));
        let score = |s: &Snapshot, p: &PodInfo| {
            crate::plugins::peers::score_nodes(&plugin().register(), s, p)[0]
        };
        assert_eq!(score(&snap(Some(0.0)), &empty), 40);
        assert_eq!(score(&snap(Some(0.5)), &empty), 33);
        assert_eq!(score(&snap(Some(0.3)), &big), 0);
        assert_eq!(score(&snap(None), &empty), 0);
    }

    #[test]
    fn predictions_and_pods_missing_from_the_metrics() {
        let p = plugin();
        // limit 1; request 1 × 1.5; neither: 1000m; overhead 100m.
        let pod3 = info(pod(
            "p",
            json!({"spec": {"overhead": {"cpu": "100m"}, "containers": [
                {"name": "a", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "200m"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1"}}},
                {"name": "c"}]}}),
        ));
        assert_eq!(p.predict(&pod3), 1000 + 1500 + 1000 + 100);
        // 4-CPU node at 0.4 cores (10 %); a 1-CPU pod placed after the newest sample adds
        // 25 points, one placed 2 minutes before it none.
        let on_node = |name: &str| {
            pod(
                name,
                json!({"spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]}}),
            )
        };
        let mut snap = with_usage(
            Snapshot::build([node("n", json!({}))], [on_node("new"), on_node("old")]),
            vec![usage("n", 0.4, 0.0, 5, None)],
            vec![],
        );
        let newest = NOW_MS - 5_000;
        for (name, at) in [("new", newest + 1_000), ("old", newest - 120_000)] {
            snap.usage_mut().record_placement(
                None,
                "n",
                RecentPlacement {
                    pod: PodKey::new("default", name),
                    at_ms: at,
                    cpu_cores: 1.0,
                    memory_bytes: 0.0,
                    disk_bytes: 0.0,
                    ..Default::default()
                },
            );
        }
        let empty = info(pod("q", json!({"spec": {"containers": []}})));
        let (u, s) = p.judge(snap.usage(), &empty, snap.node(0)).unwrap();
        assert!((u - 35.0).abs() < 1e-9, "{u}");
        assert_eq!(s, (60.0 * 35.0 / 40.0 + 40.0_f64).round() as i64);
        assert!(
            TargetLoadPacking::new(TargetLoadPackingArgs {
                target_utilization: 0,
                ..Default::default()
            })
            .is_err()
        );
        assert!(
            TargetLoadPacking::new(TargetLoadPackingArgs {
                default_requests_multiplier: "x".into(),
                ..Default::default()
            })
            .is_err()
        );
    }
}

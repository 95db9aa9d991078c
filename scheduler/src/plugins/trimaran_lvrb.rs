//! LoadVariationRiskBalancing (off by default): Trimaran's balance of mean and variation of
//! CPU and memory load, after kubernetes-sigs/scheduler-plugins
//! `pkg/trimaran/loadvariationriskbalancing/{loadvariationriskbalancing,analysis}.go` and
//! `pkg/trimaran/resourcestats.go` (commit 903da7df82cb), defaults from
//! `apis/config/v1/defaults.go` (`safeVarianceMargin` 1, `safeVarianceSensitivity` 1).
//!
//! Per resource: `μ = (used mean + pod request) / allocatable`, `σ = used std-dev /
//! allocatable` (each clamped to [0, 1]), `σ' = clamp(margin · σ^(1/sensitivity), 0, 1)`,
//! score `100 · (1 − (μ + σ')/2)`; the node scores the smaller of CPU's and memory's (the
//! larger when only one is known), rounded; no normalisation; a node without usage scores 0.
//!
//! Where headroom's numbers come from (Trimaran reads load-watcher): the mean and the
//! population standard deviation of `node_cpu_usage_cores` and
//! `node_memory_working_set_bytes` over the last 15 minutes ([`crate::view`];
//! load-watcher's window), taken as a share of `status.capacity` (load-watcher reports
//! utilisation percentages) and scaled to allocatable as `CreateResourceStats` does. The pod's
//! request is its effective request (containers, init containers, overhead), as
//! `GetResourceRequested`. Like TargetLoadPacking's, the figures are load-watcher's last
//! fetch (`fetchIntervalSeconds`, [`crate::usage_context::held`]); unlike it, pods placed
//! since are not added (upstream registers the handler but never reads it). Upstream memory
//! is `1 − MemAvailable/MemTotal`; headroom's is the working set.
//!
//! `metricProvider` and `watcherAddress` are accepted, unused (see
//! [`super::trimaran_tlp`]).

use serde::{Deserialize, Serialize};

use crate::field;
use crate::framework::Registered;
use crate::snapshot::{NodeInfo, PodInfo};
use crate::usage_context::{MetricPath, UsageContext};

use super::peers::{self};
use super::trimaran_tlp::WINDOW_S;

/// Plugin name.
pub const NAME: &str = "LoadVariationRiskBalancing";

/// LoadVariationRiskBalancing's args (`pluginArgs.loadVariationRiskBalancing`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct LoadVariationRiskBalancingArgs {
    /// Multiplier of the standard deviation, ≥ 0. Default `1`.
    pub safe_variance_margin: f64,
    /// Root power applied to the standard deviation, ≥ 0. Default `1`.
    pub safe_variance_sensitivity: f64,
    /// Trimaran's metric provider: accepted, unused.
    pub metric_provider: Option<serde_json::Value>,
    /// Trimaran's load-watcher address: accepted, unused.
    pub watcher_address: Option<String>,
    /// load-watcher's fetch loop, seconds (see
    /// [`TargetLoadPackingArgs::fetch_interval_seconds`](super::trimaran_tlp::TargetLoadPackingArgs::fetch_interval_seconds)).
    /// Default `60`.
    pub fetch_interval_seconds: i64,
}

impl Default for LoadVariationRiskBalancingArgs {
    fn default() -> Self {
        LoadVariationRiskBalancingArgs {
            safe_variance_margin: 1.0,
            safe_variance_sensitivity: 1.0,
            metric_provider: None,
            watcher_address: None,
            fetch_interval_seconds: super::trimaran_tlp::FETCH_INTERVAL_S,
        }
    }
}

/// One resource's statistics, Trimaran's `ResourceStats`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResourceStats {
    /// Allocatable.
    pub capacity: f64,
    /// The pod's request.
    pub req: f64,
    /// Mean usage.
    pub used_avg: f64,
    /// Standard deviation of usage.
    pub used_stdev: f64,
}

/// Trimaran's `computeScore`: `100 · (1 − (μ + σ')/2)`.
pub fn compute_score(rs: ResourceStats, margin: f64, sensitivity: f64) -> f64 {
    if rs.capacity <= 0.0 {
        return 0.0;
    }
    let req = rs.req.max(0.0);
    let avg = rs.used_avg.min(rs.capacity).max(0.0);
    let std = rs.used_stdev.min(rs.capacity).max(0.0);
    let mu = ((avg + req) / rs.capacity).clamp(0.0, 1.0);
    let mut sigma = (std / rs.capacity).clamp(0.0, 1.0);
    if sensitivity >= 0.0 {
        sigma = sigma.powf(1.0 / sensitivity);
    }
    sigma = (sigma * margin).clamp(0.0, 1.0);
    (1.0 - (mu + sigma) / 2.0) * 100.0
}

/// The LoadVariationRiskBalancing plugin.
#[derive(Debug)]
pub struct LoadVariationRiskBalancing {
    args: LoadVariationRiskBalancingArgs,
    path: MetricPath,
}

impl LoadVariationRiskBalancing {
    /// Creates the plugin from checked args.
    pub fn new(args: LoadVariationRiskBalancingArgs) -> Result<Self, field::Error> {
        for (name, v) in [
            ("safeVarianceMargin", args.safe_variance_margin),
            ("safeVarianceSensitivity", args.safe_variance_sensitivity),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(field::Error::out_of_range(
                    field::Path::new(name),
                    v,
                    "a finite number ≥ 0",
                ));
            }
        }
        Ok(LoadVariationRiskBalancing {
            path: super::trimaran_tlp::fetch_path(args.fetch_interval_seconds)?,
            args,
        })
    }

    /// Registers its extension points (PreScore, Score).
    pub fn register(self) -> Registered {
        peers::register(self)
    }

    /// CPU's and memory's statistics on `node` (`None` each without usage).
    fn stats(
        &self,
        ctx: &UsageContext,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Option<(ResourceStats, ResourceStats)> {
        let load = peers::load(ctx, self.path, &node.name)?;
        let (cpu, mem) = (load.cpu(WINDOW_S)?, load.memory(WINDOW_S)?);
        let req = &pod.requests.requests;
        let stats = |used: f64, std: f64, capacity: f64, alloc: f64, req: f64| {
            // load-watcher's percentage of capacity, scaled to allocatable.
            let share = |v: f64| if capacity > 0.0 { v / capacity } else { 0.0 };
            ResourceStats {
                capacity: alloc,
                req,
                used_avg: share(used) * alloc,
                used_stdev: share(std) * alloc,
            }
        };
        Some((
            stats(
                cpu.mean * 1000.0,
                cpu.std_dev * 1000.0,
                node.capacity.0 as f64,
                node.allocatable.milli_cpu as f64,
                req.milli_cpu as f64,
            ),
            stats(
                mem.mean,
                mem.std_dev,
                node.capacity.1 as f64,
                node.allocatable.memory as f64,
                req.memory as f64,
            ),
        ))
    }

    fn score_of(&self, cpu: ResourceStats, mem: ResourceStats) -> i64 {
        let (m, s) = (
            self.args.safe_variance_margin,
            self.args.safe_variance_sensitivity,
        );
        compute_score(cpu, m, s)
            .min(compute_score(mem, m, s))
            .round() as i64
    }
}

impl peers::PeerPlugin for LoadVariationRiskBalancing {
    const NAME: &'static str = NAME;
    const FILTERS: bool = false;

    fn metric_paths(&self) -> Vec<MetricPath> {
        vec![self.path]
    }

    fn score_at(&self, ctx: &UsageContext, pod: &PodInfo, node: &NodeInfo) -> i64 {
        self.stats(ctx, pod, node)
            .map_or(0, |(c, m)| self.score_of(c, m))
    }

    fn explain_at(&self, ctx: &UsageContext, pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let Some((c, m)) = self.stats(ctx, pod, node) else {
            return Some("no usage for the node: minimum score (Trimaran)".into());
        };
        let pct = |rs: ResourceStats, v: f64| 100.0 * v / rs.capacity.max(1.0);
        Some(format!(
            "15-min CPU mean {:.0} % σ {:.0} % + request {:.0} %; memory mean {:.0} % σ {:.0} % + request {:.0} %",
            pct(c, c.used_avg),
            pct(c, c.used_stdev),
            pct(c, c.req),
            pct(m, m.used_avg),
            pct(m, m.used_stdev),
            pct(m, m.req),
        ))
    }
}

impl super::registry::PluginArgs for LoadVariationRiskBalancingArgs {
    /// Margin and sensitivity finite and ≥ 0 (Trimaran replaces negative ones by the
    /// defaults; headroom says so instead).
    fn validate(&self, path: &crate::field::Path) -> crate::field::ErrorList {
        super::registry::constructed(LoadVariationRiskBalancing::new(self.clone()), path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::*;
    use crate::snapshot::Snapshot;
    use serde_json::json;

    /// scheduler-plugins `loadvariationriskbalancing/analysis_test.go` `TestComputeScore`,
    /// every case.
    #[test]
    fn ported_compute_score_cases() {
        let rs = |capacity, req, used_avg, used_stdev| ResourceStats {
            capacity,
            req,
            used_avg,
            used_stdev,
        };
        let cases = [
            (1.0, 1.0, rs(100.0, 10.0, 40.0, 36.0), 57),
            (1.0, 2.0, rs(0.0, 10.0, 40.0, 36.0), 0),
            (1.0, 2.0, rs(100.0, 10.0, -40.0, 36.0), 65),
            (1.0, 2.0, rs(100.0, 10.0, 200.0, 36.0), 20),
            (1.0, 2.0, rs(100.0, 10.0, 40.0, -36.0), 75),
            (1.0, 2.0, rs(100.0, 10.0, 40.0, 120.0), 25),
        ];
        for (margin, sensitivity, stats, want) in cases {
            assert_eq!(
                compute_score(stats, margin, sensitivity).round() as i64,
                want,
                "{stats:?}"
            );
        }
    }

    #[test]
    fn scores_the_riskier_resource_of_the_node() {
        // 4 CPU / 8 GiB; CPU mean 1 core (25 %), memory mean 6 GiB (75 %), no deviation
        // (a usage file's degenerate windows); the pod requests 1 CPU and 0 memory.
        let snap = with_usage(
            Snapshot::build([node("n", json!({}))], []),
            vec![usage("n", 1.0, 6.0 * GI, 5, None)],
            vec![],
        );
        let p = info(pod(
            "p",
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}),
        ));
        let plugin = LoadVariationRiskBalancing::new(Default::default()).unwrap();
        // CPU: μ = 0.5 → 75; memory: μ = 0.75 → 62.5; the smaller, rounded.
        assert_eq!(
            crate::plugins::peers::score_nodes(&plugin.register(), &snap, &p)[0],
            63
        );
        assert!(
            LoadVariationRiskBalancing::new(LoadVariationRiskBalancingArgs {
                safe_variance_margin: -1.0,
                ..Default::default()
            })
            .is_err()
        );
    }
}

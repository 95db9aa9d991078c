//! Dynamic (off by default): crane-scheduler's load-aware filter and score with hot-value
//! compensation, after gocrane/crane-scheduler `pkg/plugins/dynamic/{plugins,stats}.go`,
//! `pkg/controller/annotator/node.go` (the hot value) and the default policy
//! `deploy/manifests/dynamic/policy.yaml` (commit c2c05338a5d7), whose spec is this
//! plugin's args: `syncPolicy` (a metric's refresh period), `predicate` (`maxLimitPecent`,
//! crane's spelling), `priority` (weights), `hotValue` (`timeRange`, `count`).
//!
//! - **Filter**: a node whose metric exceeds a predicate's `maxLimitPecent` is rejected
//!   (`Load[cpu_usage_avg_5m] of node[n] is too high`); defaults: 5-minute means above 0.65
//!   and 1-hour maxima above 0.75, CPU and memory. A metric older than its `period` + 5
//!   minutes (crane's annotation validity) or missing says nothing; a limit of 0 is off;
//!   DaemonSet pods pass.
//! - **Score**: `Σ (1 − usage) · weight · 100 / Σ weight` (an expired or missing metric
//!   adds 0 but its weight still counts), truncated, minus `10 ×` the hot value, clamped
//!   to 0..=100.
//! - **Hot value**: `Σ ⌊bindings on the node within timeRange / count⌋` over `hotValue`
//!   (defaults: 5 in 5 minutes, 2 in 1 minute), as crane's annotator computed it at its
//!   last pass over the node (`annotateNodeHotValue`, with every metric's sync), counting
//!   the bindings in the `timeRange` before that pass, valid 5 minutes
//!   (`DefautlHotVauleActivePeriod`); from the scheduler's own placements (crane counts the
//!   `Scheduled` events of every scheduler).
//!
//! Where headroom's numbers come from (crane's annotator queries Prometheus and writes
//! node annotations every `period`, every node at once): `cpu_usage_avg_5m` /
//! `mem_usage_avg_5m` are the mean of `node_cpu_usage_cores` /
//! `node_memory_working_set_bytes` over 5 minutes, as a share of the node's capacity;
//! `*_max_avg_1h` and `*_max_avg_1d` the largest 5-minute-bucket mean over an hour and a
//! day ([`crate::view`]), each **as the annotator last wrote it**: taken every
//! `syncPolicy` period (3 m, 15 m, 3 h), all nodes at once
//! ([`crate::usage_context::held`]), and judged expired by the age of that write. Upstream
//! memory is `1 − MemAvailable/MemTotal` and the maxima run over rolling 5-minute means;
//! headroom has the working set and 5-minute buckets.
//!
//! Retries: Dynamic registers no events, so kube-scheduler v1.23 (crane's base) gives it
//! every event — but there a node update that only changes annotations requeues nothing,
//! so a rewritten annotation retries no pod: pod deletes, node changes and the periodic
//! flush do (headroom's flush is 5 minutes, v1.23's 60 s).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::field;
use crate::framework::{ClusterEvents, Registered, Status};
use crate::snapshot::{NodeInfo, PodInfo};
use crate::usage_context::held::Phase;
use crate::usage_context::{MetricPath, UsageContext};

use super::peers;

/// Plugin name.
pub const NAME: &str = "Dynamic";
/// crane's `ExtraActivePeriod`: an annotation is valid for its period plus this.
pub const EXTRA_ACTIVE_MS: i64 = 300_000;
/// crane's `DefautlHotVauleActivePeriod`: the hot value annotation is valid this long.
pub const HOT_VALUE_ACTIVE_MS: i64 = 300_000;
/// The metrics crane's default policy names, each `(name, cpu?, statistic, window s)`.
const METRICS: [(&str, bool, Stat, u64); 6] = [
    ("cpu_usage_avg_5m", true, Stat::Mean, 300),
    ("cpu_usage_max_avg_1h", true, Stat::MaxMean, 3600),
    ("cpu_usage_max_avg_1d", true, Stat::MaxMean, 86_400),
    ("mem_usage_avg_5m", false, Stat::Mean, 300),
    ("mem_usage_max_avg_1h", false, Stat::MaxMean, 3600),
    ("mem_usage_max_avg_1d", false, Stat::MaxMean, 86_400),
];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Stat {
    Mean,
    MaxMean,
}

/// `syncPolicy[]`: how often crane refreshes a metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SyncPolicy {
    /// The metric (`cpu_usage_avg_5m`...).
    pub name: String,
    /// Its refresh period; it stays valid for this plus 5 minutes.
    #[serde(with = "humantime_serde")]
    pub period: Duration,
}

/// `predicate[]`: a filter limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PredicatePolicy {
    /// The metric.
    pub name: String,
    /// The largest usage share (0..1) a node may have; 0: off. crane's spelling.
    pub max_limit_pecent: f64,
}

/// `priority[]`: a score term.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PriorityPolicy {
    /// The metric.
    pub name: String,
    /// Its weight.
    pub weight: f64,
}

/// `hotValue[]`: bindings per time range that count one hot point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HotValuePolicy {
    /// The time range.
    #[serde(with = "humantime_serde")]
    pub time_range: Duration,
    /// Bindings per hot point (≥ 1).
    pub count: usize,
}

/// Dynamic's args (`pluginArgs.dynamic`): crane's `DynamicSchedulerPolicy` spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct DynamicArgs {
    /// Default: every metric; `*_avg_5m` 3m, `*_max_avg_1h` 15m, `*_max_avg_1d` 3h.
    pub sync_policy: Vec<SyncPolicy>,
    /// Default: `*_avg_5m` 0.65, `*_max_avg_1h` 0.75, CPU and memory.
    pub predicate: Vec<PredicatePolicy>,
    /// Default: `*_avg_5m` 0.2, `*_max_avg_1h` 0.3, `*_max_avg_1d` 0.5, CPU and memory.
    pub priority: Vec<PriorityPolicy>,
    /// Default: 5 in 5m, 2 in 1m.
    pub hot_value: Vec<HotValuePolicy>,
}

impl Default for DynamicArgs {
    fn default() -> Self {
        let sync = |name: &str, m: u64| SyncPolicy {
            name: name.into(),
            period: Duration::from_secs(m * 60),
        };
        let pred = |name: &str, l: f64| PredicatePolicy {
            name: name.into(),
            max_limit_pecent: l,
        };
        let prio = |name: &str, w: f64| PriorityPolicy {
            name: name.into(),
            weight: w,
        };
        let hot = |m: u64, count: usize| HotValuePolicy {
            time_range: Duration::from_secs(m * 60),
            count,
        };
        DynamicArgs {
            sync_policy: vec![
                sync("cpu_usage_avg_5m", 3),
                sync("cpu_usage_max_avg_1h", 15),
                sync("cpu_usage_max_avg_1d", 180),
                sync("mem_usage_avg_5m", 3),
                sync("mem_usage_max_avg_1h", 15),
                sync("mem_usage_max_avg_1d", 180),
            ],
            predicate: vec![
                pred("cpu_usage_avg_5m", 0.65),
                pred("cpu_usage_max_avg_1h", 0.75),
                pred("mem_usage_avg_5m", 0.65),
                pred("mem_usage_max_avg_1h", 0.75),
            ],
            priority: vec![
                prio("cpu_usage_avg_5m", 0.2),
                prio("cpu_usage_max_avg_1h", 0.3),
                prio("cpu_usage_max_avg_1d", 0.5),
                prio("mem_usage_avg_5m", 0.2),
                prio("mem_usage_max_avg_1h", 0.3),
                prio("mem_usage_max_avg_1d", 0.5),
            ],
            hot_value: vec![hot(5, 5), hot(1, 2)],
        }
    }
}

/// The Dynamic plugin.
#[derive(Debug)]
pub struct Dynamic {
    args: DynamicArgs,
    /// The annotator's pass that rewrites the hot value most often: the shortest sync
    /// period's ([`MetricPath::LIVE`] when none is set: live).
    hot_path: MetricPath,
}

fn sync_path(period: Duration) -> MetricPath {
    MetricPath::every(period, Phase::Aligned)
}

fn metric(name: &str) -> Result<(bool, Stat, u64), String> {
    METRICS
        .iter()
        .find(|m| m.0 == name)
        .map(|m| (m.1, m.2, m.3))
        .ok_or_else(|| {
            let names: Vec<&str> = METRICS.iter().map(|m| m.0).collect();
            format!("{name:?} is not one of {}", names.join(", "))
        })
}

/// `list[i].field` under the args.
fn at(list: &str, i: usize, name: &str) -> field::Path {
    field::Path::new(list).index(i).child(name)
}

impl Dynamic {
    /// Creates the plugin from checked args.
    pub fn new(args: DynamicArgs) -> Result<Self, field::Error> {
        for (i, p) in args.sync_policy.iter().enumerate() {
            metric(&p.name)
                .map_err(|e| field::Error::invalid(at("syncPolicy", i, "name"), "", e))?;
        }
        for (i, p) in args.predicate.iter().enumerate() {
            metric(&p.name)
                .map_err(|e| field::Error::invalid(at("predicate", i, "name"), "", e))?;
            if !(p.max_limit_pecent.is_finite() && p.max_limit_pecent >= 0.0) {
                return Err(field::Error::out_of_range(
                    at("predicate", i, "maxLimitPecent"),
                    p.max_limit_pecent,
                    "≥ 0",
                ));
            }
        }
        for (i, p) in args.priority.iter().enumerate() {
            metric(&p.name).map_err(|e| field::Error::invalid(at("priority", i, "name"), "", e))?;
            if !(p.weight.is_finite() && p.weight >= 0.0) {
                return Err(field::Error::out_of_range(
                    at("priority", i, "weight"),
                    p.weight,
                    "≥ 0",
                ));
            }
        }
        if let Some(i) = args.hot_value.iter().position(|h| h.count == 0) {
            return Err(field::Error::out_of_range(
                at("hotValue", i, "count"),
                0,
                "at least 1",
            ));
        }
        let hot_path = args
            .sync_policy
            .iter()
            .map(|s| s.period)
            .filter(|p| !p.is_zero())
            .min()
            .map_or(MetricPath::LIVE, sync_path);
        Ok(Dynamic { args, hot_path })
    }

    /// Registers its extension points (PreFilter, Filter, PreScore, Score).
    pub fn register(self) -> Registered {
        peers::register(self)
    }

    /// The metric's usage share on the node as its annotation holds it (rewritten every
    /// sync period), `None` when unknown or expired (crane's `getResourceUsage` errors).
    fn usage(&self, ctx: &UsageContext, node: &NodeInfo, name: &str) -> Option<f64> {
        let period = self
            .args
            .sync_policy
            .iter()
            .find(|s| s.name == name)?
            .period;
        if period.is_zero() {
            return None;
        }
        let load = peers::load(ctx, sync_path(period), &node.name)?;
        // The annotation's time is the annotator's write.
        if ctx.now_ms - load.got_ms >= period.as_millis() as i64 + EXTRA_ACTIVE_MS {
            return None;
        }
        let (cpu, stat, w) = metric(name).ok()?;
        let (ws, capacity) = if cpu {
            (load.cpu(w)?, node.capacity.0 as f64 / 1000.0)
        } else {
            (load.memory(w)?, node.capacity.1 as f64)
        };
        let v = match stat {
            Stat::Mean => ws.mean,
            Stat::MaxMean => ws.max_5m_mean,
        };
        (capacity > 0.0).then(|| (v / capacity).max(0.0))
    }

    /// crane's hot value: `Σ ⌊bindings within timeRange / count⌋`, as the annotator
    /// computed it at its last pass over the node (the shortest sync period's), counting
    /// the bindings in the `timeRange` before that pass; 0 once that is older than 5
    /// minutes. Live (up to now) when no sync period is set.
    pub fn hot_value(&self, ctx: &UsageContext, node: &str) -> usize {
        let at = if self.hot_path.period_ms > 0 {
            match ctx.held.node(self.hot_path, node) {
                Some(h) if ctx.now_ms - h.got_ms < HOT_VALUE_ACTIVE_MS => h.got_ms,
                _ => return 0,
            }
        } else {
            ctx.now_ms
        };
        self.args
            .hot_value
            .iter()
            .map(|h| ctx.starts_between(node, at - h.time_range.as_millis() as i64, at) / h.count)
            .sum()
    }

    fn filter_node(&self, ctx: &UsageContext, pod: &PodInfo, node: &NodeInfo) -> Status {
        if peers::is_daemonset_pod(&pod.pod) {
            return Status::success();
        }
        for p in &self.args.predicate {
            if p.max_limit_pecent == 0.0 {
                continue;
            }
            if let Some(u) = self.usage(ctx, node, &p.name)
                && u > p.max_limit_pecent
            {
                return Status::unschedulable(format!(
                    "Load[{}] of node[{}] is too high",
                    p.name, node.name
                ))
                .with_detail(format!("{u:.3} > {}", p.max_limit_pecent));
            }
        }
        Status::success()
    }

    /// crane's `getNodeScore` minus the hot value: `(score, hot value)`.
    fn score_node(&self, ctx: &UsageContext, node: &NodeInfo) -> (i64, usize) {
        let hot = self.hot_value(ctx, &node.name);
        if self.args.priority.is_empty() {
            return (0, hot);
        }
        let (mut score, mut weight) = (0.0, 0.0);
        for p in &self.args.priority {
            weight += p.weight;
            if let Some(u) = self.usage(ctx, node, &p.name) {
                score += (1.0 - u) * p.weight * 100.0;
            }
        }
        let base = if weight > 0.0 {
            (score / weight) as i64
        } else {
            0
        };
        ((base - 10 * hot as i64).clamp(0, 100), hot)
    }
}

impl peers::PeerPlugin for Dynamic {
    const NAME: &'static str = NAME;
    const FILTERS: bool = true;

    /// One aligned path per sync period (crane's annotator syncs every node of a metric
    /// at once); metrics sharing a period share its path (the scheduler holds each once).
    fn metric_paths(&self) -> Vec<MetricPath> {
        self.args
            .sync_policy
            .iter()
            .filter(|s| !s.period.is_zero())
            .map(|s| sync_path(s.period))
            .collect()
    }

    /// None of its own: Dynamic declares no `EventsToRegister`, so kube-scheduler v1.23
    /// (crane's base) retries its rejections on every event — but an annotation-only node
    /// update requeues nothing there (`nodeSchedulingPropertiesChange`), so a rewritten
    /// annotation retries no pod; pod deletes, node changes and the unschedulable flush do.
    fn events(&self) -> ClusterEvents {
        ClusterEvents::OBJECTS
    }

    fn filter_at(&self, ctx: &UsageContext, pod: &PodInfo, node: &NodeInfo) -> Status {
        self.filter_node(ctx, pod, node)
    }

    fn score_at(&self, ctx: &UsageContext, _pod: &PodInfo, node: &NodeInfo) -> i64 {
        self.score_node(ctx, node).0
    }

    fn explain_at(&self, ctx: &UsageContext, _pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let (s, hot) = self.score_node(ctx, node);
        Some(format!(
            "windowed usage score, hot value {hot} (−{}) → {s}",
            10 * hot
        ))
    }
}

impl super::registry::PluginArgs for DynamicArgs {
    /// Known metric names, limits and weights ≥ 0, hot-value counts ≥ 1.
    fn validate(&self, path: &crate::field::Path) -> crate::field::ErrorList {
        super::registry::constructed(Dynamic::new(self.clone()), path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::key::PodKey;
    use crate::plugins::testutil::*;
    use crate::snapshot::Snapshot;
    use crate::usage_context::RecentPlacement;
    use serde_json::json;

    /// The annotator's last pass over the node `age` seconds ago.
    fn snap(cpu: f64, mem: f64, age: i64) -> Snapshot {
        let s = with_usage(
            Snapshot::build([node("n", json!({}))], []),
            vec![usage("n", cpu, mem, age, None)],
            vec![],
        );
        held_as_of(s, NOW_MS - age * 1000)
    }

    /// crane `stats.go`'s rules on a 4-CPU / 8-GiB node (crane's own tests cover only
    /// parsing): 5-minute CPU at 70 % > 0.65 rejects; memory 60 % passes; an annotation past
    /// period + 5 m says nothing.
    #[test]
    fn filter_limits_and_expiry() {
        let reg = || Dynamic::new(DynamicArgs::default()).unwrap().register();
        let p = info(pod("p", json!({})));
        let v = filter_all(&reg(), &snap(2.8, 4.8 * GI, 5), &p);
        assert_eq!(v[0].1.code, Code::Unschedulable);
        assert_eq!(
            v[0].1.message(),
            "Load[cpu_usage_avg_5m] of node[n] is too high"
        );
        assert!(
            filter_all(&reg(), &snap(2.0, 4.8 * GI, 5), &p)[0]
                .1
                .is_success()
        );
        // 8 minutes old: the 5-minute metrics (3 m + 5 m) expired; the 1-hour ones (15 m +
        // 5 m) still reject at 0.8.
        let v = filter_all(&reg(), &snap(3.2, 0.0, 480), &p);
        assert_eq!(
            v[0].1.message(),
            "Load[cpu_usage_max_avg_1h] of node[n] is too high"
        );
        let v = filter_all(&reg(), &snap(2.8, 0.0, 480), &p);
        assert!(v[0].1.is_success());
    }

    #[test]
    fn score_and_hot_value() {
        // CPU 25 %, memory 50 %: every window the same → 100·(0.75 + 0.5)/2 = 62.
        let mut s = snap(1.0, 4.0 * GI, 5);
        let d = Dynamic::new(DynamicArgs::default()).unwrap();
        let score = |s: &Snapshot| {
            crate::plugins::peers::score_nodes(
                &Dynamic::new(DynamicArgs::default()).unwrap().register(),
                s,
                &info(pod("p", json!({}))),
            )[0]
        };
        assert_eq!(score(&s), 62);
        // Six bindings in the last minute: ⌊6/5⌋ + ⌊6/2⌋ = 4 → 62 − 40.
        for i in 0..6 {
            s.usage_mut().record_placement(
                None,
                "n",
                RecentPlacement {
                    pod: PodKey::new("default", format!("b{i}")),
                    at_ms: NOW_MS - 10_000,
                    cpu_cores: 0.0,
                    memory_bytes: 0.0,
                    disk_bytes: 0.0,
                    ..Default::default()
                },
            );
        }
        assert_eq!(d.hot_value(s.usage(), "n"), 4);
        assert_eq!(score(&s), 22);
        // Bindings after the annotator's last pass (5 s ago) count from its next one.
        for i in 0..4 {
            s.usage_mut().record_placement(
                None,
                "n",
                RecentPlacement {
                    pod: PodKey::new("default", format!("late{i}")),
                    at_ms: NOW_MS - 1_000,
                    ..Default::default()
                },
            );
        }
        assert_eq!(d.hot_value(s.usage(), "n"), 4);
        // The hot value annotation is valid 5 minutes after the pass that wrote it.
        let s = held_as_of(s, NOW_MS - 301_000);
        assert_eq!(d.hot_value(s.usage(), "n"), 0);
        for bad in [
            json!({"predicate": [{"name": "gpu_usage", "maxLimitPecent": 0.5}]}),
            json!({"hotValue": [{"timeRange": "1m", "count": 0}]}),
            json!({"predicate": [{"name": "cpu_usage_avg_5m", "maxLimitPercent": 0.5}]}),
        ] {
            assert!(
                crate::plugins::registry::decode_args::<DynamicArgs>(Some(&bad)).is_err(),
                "{bad}"
            );
        }
    }
}

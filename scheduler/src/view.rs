//! Measured usage as the core reads it: an immutable [`UsageView`] of builder profiles, node
//! usage, placement histories and the peers' load windows. The analytics (polars over the
//! store, outside this crate) compute it and publish it whole; a cycle only reads it.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::key::PodKey;

/// An immutable snapshot of measured usage, as the analytics publish it (`analytics::run_refresh` in the
/// `headroom` crate).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UsageView {
    /// When it was computed, ms since the epoch (0 for the initial empty view).
    pub generated_ms: i64,
    /// Profiles by builder.
    pub builders: HashMap<String, BuilderProfile>,
    /// Usage by node name.
    pub nodes: HashMap<String, NodeUsage>,
    /// Placement history by builder: the nodes it was placed on, most recent first (the
    /// History plugin's fallback when the pod carries no history annotation).
    pub placements: HashMap<String, Vec<String>>,
    /// Node usage over the peers' windows by node name (empty unless
    /// the analytics' `peerWindows`).
    pub windows: HashMap<String, NodeWindows>,
    /// What each running pod uses now, by pod (the pods with a container sample in the
    /// node window): how much of a just-placed pod's prediction its node's samples
    /// already show ([`crate::usage_context::UsageContext::uncounted`]).
    pub pods: HashMap<PodKey, PodUsage>,
    /// The samples of each running pod over the node window (the pods of `pods`): what a
    /// pod that left its node used comes off the node's window ([`NodeWindow::without`]).
    pub pod_windows: HashMap<PodKey, PodWindow>,
}

impl UsageView {
    /// The profile of `builder`, if it has runs in scope.
    pub fn builder(&self, builder: &str) -> Option<&BuilderProfile> {
        self.builders.get(builder)
    }

    /// The usage of `node`, if it has recent samples.
    pub fn node(&self, node: &str) -> Option<&NodeUsage> {
        self.nodes.get(node)
    }

    /// What `pod` uses now, if its containers have recent samples.
    pub fn pod(&self, pod: &PodKey) -> Option<&PodUsage> {
        self.pods.get(pod)
    }
}

/// Measured usage of one running pod: the sum of its containers' newest samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodUsage {
    /// CPU in use, cores (`None`: no container reported it).
    pub cpu_cores: Option<f64>,
    /// Memory working set, bytes (`None`: no container reported it).
    pub memory_bytes: Option<f64>,
    /// Ephemeral storage in use, bytes (`None`: not reported).
    pub disk_bytes: Option<f64>,
    /// Time of the newest of these samples, ms since the epoch.
    pub newest_ms: i64,
}

/// A usage value now and over the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    /// The newest sample in the window.
    pub current: f64,
    /// The conservative windowed quantile: the `nodeQuantile` (p95 by default) for usage;
    /// for free space, where *low* values are the risk, the `1 − nodeQuantile` quantile.
    pub windowed: f64,
}

/// Measured usage of one node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeUsage {
    /// Node name.
    pub node: String,
    /// CPU in use, in cores.
    pub cpu_cores: Stat,
    /// Memory working set, in bytes.
    pub memory_working_set_bytes: Stat,
    /// Free space on the node's root filesystem, in bytes (absent if not collected).
    pub fs_available_bytes: Option<Stat>,
    /// Size of the node's root filesystem, in bytes: its newest sample.
    pub fs_capacity_bytes: Option<f64>,
    /// Time of the newest sample of any of the node's metrics, ms since the epoch.
    pub newest_ms: i64,
    /// The CPU and memory samples behind `cpu_cores` and `memory_working_set_bytes`
    /// (`None` where the view was not computed from samples).
    #[serde(skip)]
    pub window: Option<Arc<NodeWindow>>,
}

/// Samples over the node window, oldest first: `(ts_ms, value)`.
pub type Samples = Vec<(i64, f64)>;

/// The samples behind a node's CPU and memory [`Stat`]s and the quantile the windowed
/// statistic takes of them (`analytics.nodeQuantile`): what a pod that left the node used
/// comes off them sample by sample ([`NodeWindow::without`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeWindow {
    /// The quantile of the windowed statistic, in `[0, 1]`.
    pub quantile: f64,
    /// CPU, cores.
    pub cpu: Samples,
    /// Memory working set, bytes.
    pub memory: Samples,
}

/// Which signal of a [`NodeWindow`] or [`PodWindow`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// CPU, cores.
    Cpu,
    /// Memory working set, bytes.
    Memory,
}

impl NodeWindow {
    /// The node's usage of `signal` as [`Stat`] gives it to the plugins (the larger of
    /// the newest sample and the windowed quantile), had the `pods` never run on it: each
    /// sample less what each of them used at that moment ([`PodWindow::at`]). A pod that
    /// left does not weigh on the window it no longer explains, while what the pods still
    /// running did within it (their swings) stays. `None` without samples.
    pub fn without(&self, signal: Signal, pods: &[&PodWindow]) -> Option<f64> {
        let node = match signal {
            Signal::Cpu => &self.cpu,
            Signal::Memory => &self.memory,
        };
        let mut rest: Vec<f64> = node
            .iter()
            .map(|&(t, v)| (v - pods.iter().map(|p| p.at(signal, t)).sum::<f64>()).max(0.0))
            .collect();
        let current = *rest.last()?;
        rest.sort_by(f64::total_cmp);
        Some(current.max(quantile(&rest, self.quantile.clamp(0.0, 1.0))))
    }
}

/// The samples of one running pod over the node window, one series per container.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodWindow {
    /// CPU, cores, by container.
    pub cpu: Vec<Samples>,
    /// Memory working set, bytes, by container.
    pub memory: Vec<Samples>,
}

impl PodWindow {
    /// Its containers' samples of `signal`.
    fn containers(&self, signal: Signal) -> &[Samples] {
        match signal {
            Signal::Cpu => &self.cpu,
            Signal::Memory => &self.memory,
        }
    }

    /// What the pod used of `signal` at `t_ms`: over its containers, each one's newest
    /// sample at or before `t_ms`, counted only where the container is known to have run
    /// then (sampled at or before it and at or after it). Outside its samples a container
    /// counts nothing: taking off what it may not have used would make the node look
    /// emptier than it was.
    pub fn at(&self, signal: Signal, t_ms: i64) -> f64 {
        self.containers(signal)
            .iter()
            .filter(|c| c.last().is_some_and(|(last, _)| *last >= t_ms))
            .filter_map(|c| {
                let i = c.partition_point(|(t, _)| *t <= t_ms);
                i.checked_sub(1).map(|i| c[i].1)
            })
            .sum()
    }

    /// The pod's mean use of `signal` over `[from_ms, to_ms]`, as an agent averaging each
    /// container's samples in that span reports it (Koordinator's koordlet: a pod's usage
    /// in a NodeMetric is its mean over the report's window): the sum over containers of
    /// each one's mean of its samples there. `None` when no container has a sample there
    /// (the report would have no usage for the pod).
    pub fn mean(&self, signal: Signal, from_ms: i64, to_ms: i64) -> Option<f64> {
        let mut any = false;
        let mut sum = 0.0;
        for c in self.containers(signal) {
            let lo = c.partition_point(|(t, _)| *t < from_ms);
            let hi = c.partition_point(|(t, _)| *t <= to_ms);
            if let Some(span) = c.get(lo..hi).filter(|s| !s.is_empty()) {
                any = true;
                sum += span.iter().map(|(_, v)| v).sum::<f64>() / span.len() as f64;
            }
        }
        any.then_some(sum)
    }
}

/// Percentiles of a per-run value over a builder's runs (linear interpolation, the analytics' `QUANTILE_METHOD`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

/// The usage profile of one builder over its recent runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BuilderProfile {
    /// Builder identity (e.g. `namespace/Deployment/name`).
    pub builder: String,
    /// Number of runs the profile is computed from (≥ 1).
    pub runs: usize,
    /// Per-run CPU, in cores.
    pub cpu: Percentiles,
    /// Per-run memory, in bytes.
    pub memory: Percentiles,
    /// End of the newest run counted, ms since the epoch: how fresh the profile is.
    pub newest_ms: i64,
    /// Median length, seconds, of the counted runs on a node new to the builder (none
    /// of its earlier runs ran there: a cold cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_run_s: Option<f64>,
    /// Median length, seconds, of the counted runs on a node one of its earlier runs ran
    /// on (a warm cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_run_s: Option<f64>,
}

/// The windows computed, seconds: 5, 10, 15, 30 minutes, 1 hour, 1 day.
pub const WINDOWS: [u64; 6] = [300, 600, 900, 1800, 3600, 86_400];

/// Width of the buckets behind [`WindowStat::max_5m_mean`], ms.
const BUCKET_MS: i64 = 300_000;

/// One metric of one node over one window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WindowStat {
    /// Samples in the window.
    pub samples: usize,
    /// Mean.
    pub mean: f64,
    /// Population standard deviation.
    pub std_dev: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// The largest mean of a 5-minute bucket (counted back from now) in the window.
    pub max_5m_mean: f64,
}

impl WindowStat {
    /// The statistic of `values` (sorted by time, each `(ts_ms, value)`) at and after
    /// `start_ms`; `None` without samples.
    fn of(values: &[(i64, f64)], start_ms: i64, end_ms: i64) -> Option<WindowStat> {
        let from = values.partition_point(|(t, _)| *t < start_ms);
        let window = &values[from..];
        if window.is_empty() {
            return None;
        }
        let n = window.len() as f64;
        let mean = window.iter().map(|(_, v)| v).sum::<f64>() / n;
        let var = window.iter().map(|(_, v)| (v - mean).powi(2)).sum::<f64>() / n;
        let mut sorted: Vec<f64> = window.iter().map(|(_, v)| *v).collect();
        sorted.sort_by(f64::total_cmp);
        let mut buckets: HashMap<i64, (f64, usize)> = HashMap::new();
        for (t, v) in window {
            let b = (end_ms - t).max(0) / BUCKET_MS;
            let e = buckets.entry(b).or_default();
            e.0 += v;
            e.1 += 1;
        }
        let max_5m_mean = buckets
            .values()
            .map(|(s, c)| s / *c as f64)
            .fold(f64::MIN, f64::max);
        Some(WindowStat {
            samples: window.len(),
            mean,
            std_dev: var.sqrt(),
            p50: quantile(&sorted, 0.5),
            p90: quantile(&sorted, 0.9),
            p95: quantile(&sorted, 0.95),
            p99: quantile(&sorted, 0.99),
            max_5m_mean,
        })
    }
}

/// Linear interpolation at `(n − 1)·q` of sorted values (the analytics' `QUANTILE_METHOD`).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = (sorted.len() - 1) as f64 * q;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// A node's CPU (cores) and memory working set (bytes) over each of [`WINDOWS`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeWindows {
    /// CPU, cores, by window (the index of [`WINDOWS`]); `None` without samples.
    pub cpu: [Option<WindowStat>; WINDOWS.len()],
    /// Memory working set, bytes, by window.
    pub memory: [Option<WindowStat>; WINDOWS.len()],
}

impl NodeWindows {
    /// CPU over the window of `seconds` (one of [`WINDOWS`]).
    pub fn cpu(&self, seconds: u64) -> Option<&WindowStat> {
        self.cpu[WINDOWS.iter().position(|w| *w == seconds)?].as_ref()
    }

    /// Memory over the window of `seconds` (one of [`WINDOWS`]).
    pub fn memory(&self, seconds: u64) -> Option<&WindowStat> {
        self.memory[WINDOWS.iter().position(|w| *w == seconds)?].as_ref()
    }

    /// The windows of one series (`(ts_ms, value)`, any order) as of `now_ms`.
    pub fn stats(mut values: Vec<(i64, f64)>, now_ms: i64) -> [Option<WindowStat>; WINDOWS.len()] {
        values.sort_by_key(|(t, _)| *t);
        WINDOWS.map(|w| WindowStat::of(&values, now_ms - w as i64 * 1000, now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod counts at a moment only where one of its containers is known to run then:
    /// sampled at or before it and at or after it; each container by its newest sample at
    /// or before the moment.
    #[test]
    fn a_pod_counts_where_its_containers_are_known_to_run() {
        let p = PodWindow {
            cpu: vec![vec![(10, 1.0)]],
            memory: vec![vec![(10, 100.0), (20, 300.0)], vec![(15, 5.0), (40, 7.0)]],
        };
        let m = |t| p.at(Signal::Memory, t);
        assert_eq!(m(5), 0.0, "before any sample");
        assert_eq!(m(10), 100.0, "the sidecar not sampled yet");
        assert_eq!(m(17), 105.0);
        assert_eq!(m(20), 305.0);
        assert_eq!(m(30), 5.0, "the main container ended after its last sample");
        assert_eq!(m(41), 0.0);
        assert_eq!(p.at(Signal::Cpu, 10), 1.0);
        assert_eq!(p.at(Signal::Cpu, 11), 0.0);
    }

    /// A pod's mean over a span is the sum of its containers' means of their samples in
    /// it; a container without samples there adds nothing, and no samples at all is no
    /// usage.
    #[test]
    fn a_pods_mean_sums_its_containers_means_in_the_span() {
        let p = PodWindow {
            cpu: vec![],
            memory: vec![vec![(10, 100.0), (20, 300.0), (30, 500.0)], vec![(25, 6.0)]],
        };
        let m = |a, b| p.mean(Signal::Memory, a, b);
        assert_eq!(m(0, 20), Some(200.0));
        assert_eq!(m(10, 30), Some(306.0));
        assert_eq!(m(21, 26), Some(6.0));
        assert_eq!(m(31, 40), None);
        assert_eq!(m(0, 9), None);
        assert_eq!(p.mean(Signal::Cpu, 0, 40), None);
    }

    /// Without pods the node's usage is what its [`Stat`] gives (the larger of the newest
    /// sample and the linear quantile); a pod comes off each sample by what it used then,
    /// never below zero.
    #[test]
    fn a_node_without_pods_is_its_samples_less_theirs() {
        let w = NodeWindow {
            quantile: 0.5,
            cpu: vec![],
            memory: vec![(0, 10.0), (10, 30.0), (20, 20.0), (30, 4.0)],
        };
        assert_eq!(w.without(Signal::Memory, &[]), Some(15.0));
        assert_eq!(w.without(Signal::Cpu, &[]), None);
        let left = PodWindow {
            cpu: vec![],
            memory: vec![vec![(10, 25.0), (20, 25.0)]],
        };
        // [10, 5, 0, 4]: median 4.5.
        assert_eq!(w.without(Signal::Memory, &[&left]), Some(4.5));
        let rising = NodeWindow {
            quantile: 0.0,
            cpu: vec![],
            memory: vec![(0, 1.0), (10, 8.0)],
        };
        // The newest sample stands above a lower quantile, as in the Stat.
        assert_eq!(rising.without(Signal::Memory, &[]), Some(8.0));
    }
}

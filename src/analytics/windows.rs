//! Node usage over the peers' windows: the statistics the peer schedulers' plugins
//! ([`crate::plugins::trimaran_tlp`], [`crate::plugins::trimaran_lvrb`],
//! [`crate::plugins::load_aware`], [`crate::plugins::crane_dynamic`]) read from their own
//! metric pipelines, derived here from the node samples headroom's store already holds
//! (`node_cpu_usage_cores`, `node_memory_working_set_bytes`):
//!
//! - Trimaran's load-watcher reports a node's CPU and memory utilisation as the average and
//!   the standard deviation over its 15-minute window: [`WindowStat::mean`] and
//!   [`WindowStat::std_dev`] over 900 s;
//! - crane's annotator writes `cpu_usage_avg_5m` (the mean over 5 minutes),
//!   `cpu_usage_max_avg_1h` and `cpu_usage_max_avg_1d` (the largest 5-minute mean over an
//!   hour, a day): [`WindowStat::mean`] over 300 s and [`WindowStat::max_5m_mean`] over
//!   3,600 s and 86,400 s (5-minute buckets counted back from now, a bucket's mean over
//!   the samples in it);
//! - Koordinator's koordlet reports `nodeUsage` (the mean over `aggregateDurationSeconds`,
//!   300 s by default) and `aggregatedNodeUsages` (p50, p90, p95, p99 over 5, 10 and 30
//!   minutes by default): [`WindowStat::mean`] over 300 s and the percentiles over 300,
//!   600 and 1,800 s.
//!
//! Plain Rust over each series' sorted samples (a handful of windows per node, computed only
//! when a profile enables a peer plugin: [`super::AnalyticsConfig::peer_windows`]). Quantiles
//! interpolate as [`super::QUANTILE_METHOD`] does; the standard deviation is the population
//! one, as Prometheus' `stddev_over_time` (which load-watcher's Prometheus provider uses).

use std::collections::HashMap;

use headroom_storage::{Matcher, Store};

use super::Error;

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

/// Linear interpolation at `(n − 1)·q` of sorted values ([`super::QUANTILE_METHOD`]).
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

/// Reads the last day of node CPU and memory samples and computes every node's windows.
pub fn node_windows(store: &Store, now_ms: i64) -> Result<HashMap<String, NodeWindows>, Error> {
    let start = now_ms.saturating_sub(WINDOWS[WINDOWS.len() - 1] as i64 * 1000);
    let mut out: HashMap<String, NodeWindows> = HashMap::new();
    for (metric, is_cpu) in [
        ("node_cpu_usage_cores", true),
        ("node_memory_working_set_bytes", false),
    ] {
        let mut series: HashMap<String, Vec<(i64, f64)>> = HashMap::new();
        store.for_each_series(&[Matcher::metric(metric)], start, now_ms, |info, s| {
            if let Some(node) = info.labels.get("node") {
                let v = series.entry(node.to_string()).or_default();
                v.extend(s.iter().map(|x| (x.ts_ms, x.value)));
            }
            Ok(())
        })?;
        for (node, values) in series {
            let stats = NodeWindows::stats(values, now_ms);
            let e = out.entry(node).or_default();
            if is_cpu {
                e.cpu = stats;
            } else {
                e.memory = stats;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_mean_std_percentiles_and_bucket_maxima() {
        let now = 10_000_000;
        // One sample a minute for two hours: 1.0 in the last 5 minutes, 3.0 between 30
        // and 35 minutes ago, 2.0 elsewhere.
        let values: Vec<(i64, f64)> = (0..120)
            .map(|m| {
                let t = now - m * 60_000;
                let v = match m {
                    0..=4 => 1.0,
                    30..=34 => 3.0,
                    _ => 2.0,
                };
                (t, v)
            })
            .collect();
        let s = NodeWindows::stats(values, now);
        let w5 = s[0].unwrap();
        // 5 minutes back inclusive: minutes 0..=5 (6 samples: five 1.0 and one 2.0).
        assert_eq!(w5.samples, 6);
        assert!((w5.mean - 7.0 / 6.0).abs() < 1e-9);
        let w15 = s[2].unwrap();
        assert_eq!(w15.samples, 16);
        let mean = (5.0 + 22.0) / 16.0;
        assert!((w15.mean - mean).abs() < 1e-9);
        let var = (5.0 * (1.0 - mean) * (1.0 - mean) + 11.0 * (2.0 - mean) * (2.0 - mean)) / 16.0;
        assert!((w15.std_dev - var.sqrt()).abs() < 1e-9);
        assert_eq!(w15.p50, 2.0);
        // The hour sees the 3.0 bucket as its largest 5-minute mean; 5 minutes do not.
        let h = s[4].unwrap();
        assert_eq!(h.max_5m_mean, 3.0);
        assert_eq!(h.p99, 3.0);
        // The 5-minute window's last sample (5 minutes back) starts the next bucket.
        assert_eq!(w5.max_5m_mean, 2.0);
        // A day holds the two hours there are.
        assert_eq!(s[5].unwrap().samples, 120);
        assert!(NodeWindows::stats(vec![], now)[0].is_none());
    }
}

//! Node usage over the peers' windows: the statistics the peer schedulers' plugins
//! ([`headroom_scheduler::plugins::trimaran_tlp`], [`headroom_scheduler::plugins::trimaran_lvrb`],
//! [`headroom_scheduler::plugins::load_aware`], [`headroom_scheduler::plugins::crane_dynamic`]) read from their own
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

pub use headroom_scheduler::view::{NodeWindows, WINDOWS, WindowStat};

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

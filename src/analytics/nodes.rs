//! Node usage: what each node really uses now and over a recent window.
//!
//! The node metrics of the window are read series by series (`for_each_series` scans the
//! store contiguously) into one long DataFrame `(node, metric, ts_ms, value)`, and one lazy
//! `group_by([node, metric])` computes the newest value, the windowed quantile and the
//! newest timestamp of every node and metric at once.

use std::collections::HashMap;
use std::sync::Arc;

use headroom_storage::{Matcher, Store};
use polars::prelude::*;

use super::{Error, QUANTILE_METHOD};

pub use headroom_scheduler::view::{NodeUsage, NodeWindow, Stat};

/// Stored node metrics read here, in the order of the `metric` codes in the frame.
const METRICS: [&str; 3] = [
    "node_cpu_usage_cores",
    "node_memory_working_set_bytes",
    "node_fs_available_bytes",
];
const CPU: u32 = 0;
const MEMORY: u32 = 1;
const FS_AVAILABLE: u32 = 2;
const FS_CAPACITY_METRIC: &str = "node_fs_capacity_bytes";

/// What to compute node usage over.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeParams {
    /// Window start, ms since the epoch (inclusive).
    pub start_ms: i64,
    /// Window end, ms since the epoch (inclusive; normally now).
    pub end_ms: i64,
    /// Quantile of usage metrics over the window, in `[0, 1]`.
    pub quantile: f64,
}

/// Long-format samples `(node, metric, ts, value)`; separate from the store so benches
/// and tests can feed synthetic samples.
#[derive(Clone, Debug, Default)]
pub struct NodeSamples {
    node: Vec<String>,
    metric: Vec<u32>,
    ts_ms: Vec<i64>,
    value: Vec<f64>,
    /// Newest capacity sample per node: capacity is a size, not usage, so only its
    /// latest value matters and it stays out of the frame.
    capacity: HashMap<String, (i64, f64)>,
}

impl NodeSamples {
    /// Empty.
    pub fn new() -> NodeSamples {
        NodeSamples::default()
    }

    fn push(&mut self, node: &str, metric: u32, ts_ms: i64, value: f64) {
        self.node.push(node.to_string());
        self.metric.push(metric);
        self.ts_ms.push(ts_ms);
        self.value.push(value);
    }

    /// Adds a CPU sample (cores).
    pub fn push_cpu(&mut self, node: &str, ts_ms: i64, cores: f64) {
        self.push(node, CPU, ts_ms, cores);
    }

    /// Adds a memory working set sample (bytes).
    pub fn push_memory(&mut self, node: &str, ts_ms: i64, bytes: f64) {
        self.push(node, MEMORY, ts_ms, bytes);
    }

    /// Adds a filesystem free space sample (bytes).
    pub fn push_fs_available(&mut self, node: &str, ts_ms: i64, bytes: f64) {
        self.push(node, FS_AVAILABLE, ts_ms, bytes);
    }

    /// Records a filesystem capacity sample (bytes); the newest one per node is kept.
    pub fn push_fs_capacity(&mut self, node: &str, ts_ms: i64, bytes: f64) {
        let e = self
            .capacity
            .entry(node.to_string())
            .or_insert((ts_ms, bytes));
        if ts_ms >= e.0 {
            *e = (ts_ms, bytes);
        }
    }

    /// Number of samples held (capacity samples excluded).
    pub fn len(&self) -> usize {
        self.node.len()
    }

    /// True if no sample is held.
    pub fn is_empty(&self) -> bool {
        self.node.is_empty()
    }
}

/// Reads the node metrics of the window from the store and computes every node's usage.
/// A node without a CPU or memory sample in the window is left out: stale data says
/// nothing about what the node uses now.
pub fn node_usage(store: &Store, params: &NodeParams) -> Result<HashMap<String, NodeUsage>, Error> {
    let mut samples = NodeSamples::new();
    for (code, metric) in METRICS.iter().enumerate() {
        store.for_each_series(
            &[Matcher::metric(*metric)],
            params.start_ms,
            params.end_ms,
            |info, s| {
                if let Some(node) = info.labels.get("node") {
                    for x in s {
                        samples.push(node, code as u32, x.ts_ms, x.value);
                    }
                }
                Ok(())
            },
        )?;
    }
    store.for_each_series(
        &[Matcher::metric(FS_CAPACITY_METRIC)],
        params.start_ms,
        params.end_ms,
        |info, s| {
            if let (Some(node), Some(x)) = (info.labels.get("node"), s.last()) {
                samples.push_fs_capacity(node, x.ts_ms, x.value);
            }
            Ok(())
        },
    )?;
    usage_from_samples(samples, params.quantile)
}

/// Computes node usage from collected samples with windowed quantile `quantile`.
pub fn usage_from_samples(
    samples: NodeSamples,
    quantile: f64,
) -> Result<HashMap<String, NodeUsage>, Error> {
    if !(0.0..=1.0).contains(&quantile) {
        return Err(Error::Config(format!(
            "nodeQuantile must be in [0, 1], got {quantile}"
        )));
    }
    let NodeSamples {
        node,
        metric,
        ts_ms,
        value,
        capacity,
    } = samples;
    if node.is_empty() {
        return Ok(HashMap::new());
    }
    let mut windows = node_windows(&node, &metric, &ts_ms, &value, quantile);
    let height = node.len();
    let df = DataFrame::new(
        height,
        vec![
            Column::new("node".into(), node),
            Column::new("metric".into(), metric),
            Column::new("ts_ms".into(), ts_ms),
            Column::new("value".into(), value),
        ],
    )?;
    let usage_q = col("value").quantile(lit(quantile), QUANTILE_METHOD);
    let free_q = col("value").quantile(lit(1.0 - quantile), QUANTILE_METHOD);
    let out = df
        .lazy()
        .group_by([col("node"), col("metric")])
        .agg([
            // Series of one node may interleave (e.g. two `instance`s), so order by time
            // explicitly instead of trusting row order.
            col("value")
                .sort_by([col("ts_ms")], SortMultipleOptions::default())
                .last()
                .alias("current"),
            // Both tails, one picked per metric below: cheaper to reason about than a
            // conditional aggregation, and the extra quantile is one more pass per group.
            usage_q.alias("q_high"),
            free_q.alias("q_low"),
            col("ts_ms").max().alias("newest_ms"),
        ])
        .collect()?;

    let nodes = out.column("node")?.str()?;
    let metrics = out.column("metric")?.u32()?;
    let current = out.column("current")?.f64()?;
    let q_high = out.column("q_high")?.f64()?;
    let q_low = out.column("q_low")?.f64()?;
    let newest = out.column("newest_ms")?.i64()?;

    // Per node: [cpu, memory, fs] stats and the newest timestamp.
    let mut acc: HashMap<&str, ([Option<Stat>; 3], i64)> = HashMap::new();
    for i in 0..out.height() {
        let (Some(n), Some(m), Some(c), Some(t)) =
            (nodes.get(i), metrics.get(i), current.get(i), newest.get(i))
        else {
            continue;
        };
        let w = if m == FS_AVAILABLE {
            q_low.get(i)
        } else {
            q_high.get(i)
        }
        .unwrap_or(c);
        let e = acc.entry(n).or_insert(([None; 3], i64::MIN));
        if let Some(slot) = e.0.get_mut(m as usize) {
            *slot = Some(Stat {
                current: c,
                windowed: w,
            });
        }
        e.1 = e.1.max(t);
    }
    Ok(acc
        .into_iter()
        .filter_map(|(n, (stats, newest_ms))| {
            let [Some(cpu), Some(mem), fs] = stats else {
                return None;
            };
            let cap = capacity.get(n).copied();
            Some((
                n.to_string(),
                NodeUsage {
                    node: n.to_string(),
                    cpu_cores: cpu,
                    memory_working_set_bytes: mem,
                    fs_available_bytes: fs,
                    fs_capacity_bytes: cap.map(|c| c.1),
                    newest_ms: cap.map_or(newest_ms, |c| newest_ms.max(c.0)),
                    window: windows.remove(n).map(Arc::new),
                },
            ))
        })
        .collect())
}

/// Every node's CPU and memory samples, oldest first, with the windowed quantile: what a
/// pod that left the node used comes off them ([`NodeWindow::without`]).
fn node_windows(
    node: &[String],
    metric: &[u32],
    ts_ms: &[i64],
    value: &[f64],
    quantile: f64,
) -> HashMap<String, NodeWindow> {
    let mut out: HashMap<String, NodeWindow> = HashMap::new();
    for (i, n) in node.iter().enumerate() {
        if metric[i] != CPU && metric[i] != MEMORY {
            continue;
        }
        let w = match out.get_mut(n.as_str()) {
            Some(w) => w,
            None => out.entry(n.clone()).or_insert_with(|| NodeWindow {
                quantile,
                ..NodeWindow::default()
            }),
        };
        let series = if metric[i] == CPU {
            &mut w.cpu
        } else {
            &mut w.memory
        };
        series.push((ts_ms[i], value[i]));
    }
    for w in out.values_mut() {
        // Series of one node may interleave (two sources), as in the frame.
        w.cpu.sort_by_key(|(t, _)| *t);
        w.memory.sort_by_key(|(t, _)| *t);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_storage::{Labels, StoreConfig};

    const T0: i64 = 1_000_000;

    /// Quantile positions like 20 × 0.95 are not exact in binary, so interpolation can
    /// be off by an ulp or so.
    fn assert_close(s: Stat, current: f64, windowed: f64) {
        assert_eq!(s.current, current);
        assert!(
            (s.windowed - windowed).abs() < 1e-6,
            "windowed {} != {windowed}",
            s.windowed
        );
    }

    /// n1: cpu 1..=21 at T0 + 15 s i (i = 0..=20), memory 100 × that, fs available
    /// 1000 − 10 × that, capacity 5000; n2: cpu only (no memory) so it is left out.
    fn filled() -> Store {
        let store = Store::open_temporary(StoreConfig::default()).unwrap();
        let n1 = Labels::new([("node", "n1")]).unwrap();
        for i in 0..=20_i64 {
            let ts = T0 + 15_000 * i;
            let v = (i + 1) as f64;
            store.append("node_cpu_usage_cores", &n1, ts, v).unwrap();
            store
                .append("node_memory_working_set_bytes", &n1, ts, 100.0 * v)
                .unwrap();
            store
                .append("node_fs_available_bytes", &n1, ts, 1000.0 - 10.0 * v)
                .unwrap();
        }
        store
            .append("node_fs_capacity_bytes", &n1, T0, 5000.0)
            .unwrap();
        let n2 = Labels::new([("node", "n2")]).unwrap();
        store.append("node_cpu_usage_cores", &n2, T0, 1.0).unwrap();
        store
    }

    #[test]
    fn node_usage_exact() {
        let store = filled();
        let end = T0 + 15_000 * 20;
        let u = node_usage(
            &store,
            &NodeParams {
                start_ms: T0,
                end_ms: end,
                quantile: 0.95,
            },
        )
        .unwrap();
        assert_eq!(u.len(), 1, "n2 has no memory series");
        let n1 = &u["n1"];
        // 21 values 1..=21: linear p95 at position 20 × 0.95 = 19 → 20.
        assert_close(n1.cpu_cores, 21.0, 20.0);
        assert_close(n1.memory_working_set_bytes, 2100.0, 2000.0);
        // Free space 990 .. 790: the p05 at position 20 × 0.05 = 1 of the sorted values
        // is 800.
        assert_close(n1.fs_available_bytes.unwrap(), 790.0, 800.0);
        assert_eq!(n1.fs_capacity_bytes, Some(5000.0));
        // The samples behind the CPU and memory statistics, oldest first: without any pod
        // they give the same statistic.
        let w = n1.window.as_deref().unwrap();
        assert_eq!(w.memory.len(), 21);
        assert_eq!(w.memory[0], (T0, 100.0));
        assert_eq!(w.cpu[20], (end, 21.0));
        let mem = w.without(headroom_scheduler::view::Signal::Memory, &[]);
        assert!((mem.unwrap() - 2100.0).abs() < 1e-9);
        assert_eq!(n1.newest_ms, end);
    }

    #[test]
    fn node_usage_window_and_interpolation() {
        let store = filled();
        // Last 4 samples (values 18..=21): p50 linear = position 1.5 → 19.5.
        let u = node_usage(
            &store,
            &NodeParams {
                start_ms: T0 + 15_000 * 17,
                end_ms: T0 + 15_000 * 20,
                quantile: 0.5,
            },
        )
        .unwrap();
        assert_close(u["n1"].cpu_cores, 21.0, 19.5);
        assert_close(u["n1"].fs_available_bytes.unwrap(), 790.0, 805.0);
        // Capacity's only sample is outside the window.
        assert_eq!(u["n1"].fs_capacity_bytes, None);
        assert!(usage_from_samples(NodeSamples::new(), 1.5).is_err());
    }
}

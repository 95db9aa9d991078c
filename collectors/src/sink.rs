//! Where collected samples, runs and placements go.
//!
//! The real destination is `headroom-storage`'s [`Store`](headroom_storage::Store), which
//! implements [`Sink`] here; the collectors themselves only know the trait. [`MemorySink`]
//! keeps everything in memory (tests, dry runs).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

/// A sink refused a write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SinkError(pub String);

/// A finished run and its usage summary are the store's own types: the collectors produce
/// exactly what `headroom-storage` keeps (cpu in cores, memory in bytes; `pod_uid` is
/// `namespace/name` when the source does not know the UID).
pub use headroom_storage::{RunRecord, UsageSummary};

/// Destination of collected data. Implementations must be cheap to call concurrently.
///
/// Samples are appended with the time they were *observed* (the kubelet's stats time, the
/// Prometheus evaluation time, the exposition timestamp), which doubles as their freshness:
/// a consumer compares the newest `ts_ms` of a series with its clock to tell stale data.
pub trait Sink: Send + Sync {
    /// Appends one sample of the series `metric{labels}`; `labels` are sorted by key.
    fn append(
        &self,
        metric: &str,
        labels: &[(String, String)],
        ts_ms: i64,
        value: f64,
    ) -> Result<(), SinkError>;

    /// Stores a finished run of `builder`.
    fn put_run(&self, builder: &str, run: &RunRecord) -> Result<(), SinkError>;

    /// Records that `builder` was last placed on `node` at `at_ms` (placement history, most
    /// recent first; the time keeps the builder from expiring).
    fn record_placement(&self, builder: &str, node: &str, at_ms: i64) -> Result<(), SinkError>;
}

/// Key of one series in [`MemorySink`]: metric name and sorted labels.
pub type SeriesKey = (String, Vec<(String, String)>);

#[derive(Default)]
struct MemoryInner {
    series: BTreeMap<SeriesKey, Vec<(i64, f64)>>,
    runs: Vec<(String, RunRecord)>,
    placements: HashMap<String, Vec<String>>,
}

/// An in-memory [`Sink`], for tests and dry runs.
#[derive(Default)]
pub struct MemorySink {
    inner: Mutex<MemoryInner>,
    fail_appends: std::sync::atomic::AtomicBool,
}

impl MemorySink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes every following `append` fail (to test that sink failures are counted).
    pub fn set_fail_appends(&self, fail: bool) {
        self.fail_appends
            .store(fail, std::sync::atomic::Ordering::SeqCst);
    }

    fn lock(&self) -> MutexGuard<'_, MemoryInner> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters for tests, so a poisoned lock is simply taken over.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// All series with their samples, in key order.
    pub fn series(&self) -> BTreeMap<SeriesKey, Vec<(i64, f64)>> {
        self.lock().series.clone()
    }

    /// Samples of the series of `metric` whose labels contain all of `matchers`.
    pub fn find(
        &self,
        metric: &str,
        matchers: &[(&str, &str)],
    ) -> Vec<(SeriesKey, Vec<(i64, f64)>)> {
        self.lock()
            .series
            .iter()
            .filter(|((m, labels), _)| {
                m == metric
                    && matchers
                        .iter()
                        .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Newest sample of the single series of `metric` matching `matchers`, if exactly one matches.
    pub fn latest(&self, metric: &str, matchers: &[(&str, &str)]) -> Option<(i64, f64)> {
        let found = self.find(metric, matchers);
        match found.as_slice() {
            [(_, samples)] => samples.last().copied(),
            _ => None,
        }
    }

    /// Total number of samples stored.
    pub fn sample_count(&self) -> usize {
        self.lock().series.values().map(Vec::len).sum()
    }

    /// Number of series stored.
    pub fn series_count(&self) -> usize {
        self.lock().series.len()
    }

    /// Runs stored, in the order they were put.
    pub fn runs(&self) -> Vec<(String, RunRecord)> {
        self.lock().runs.clone()
    }

    /// Placement history of `builder`, most recent first.
    pub fn placements(&self, builder: &str) -> Vec<String> {
        self.lock()
            .placements
            .get(builder)
            .cloned()
            .unwrap_or_default()
    }
}

impl Sink for MemorySink {
    fn append(
        &self,
        metric: &str,
        labels: &[(String, String)],
        ts_ms: i64,
        value: f64,
    ) -> Result<(), SinkError> {
        if self.fail_appends.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(SinkError("memory sink set to fail".into()));
        }
        let mut inner = self.lock();
        let samples = inner
            .series
            .entry((metric.to_owned(), labels.to_vec()))
            .or_default();
        // Keep each series sorted by time with one value per time, as a TSDB would, even if
        // sources interleave or two collectors write the same observation.
        let pos = samples.partition_point(|(t, _)| *t < ts_ms);
        match samples.get_mut(pos) {
            Some(existing) if existing.0 == ts_ms => existing.1 = value,
            _ => samples.insert(pos, (ts_ms, value)),
        }
        Ok(())
    }

    fn put_run(&self, builder: &str, run: &RunRecord) -> Result<(), SinkError> {
        self.lock().runs.push((builder.to_owned(), run.clone()));
        Ok(())
    }

    fn record_placement(&self, builder: &str, node: &str, _at_ms: i64) -> Result<(), SinkError> {
        self.lock()
            .placements
            .entry(builder.to_owned())
            .or_default()
            .insert(0, node.to_owned());
        Ok(())
    }
}

impl Sink for headroom_storage::Store {
    fn append(
        &self,
        metric: &str,
        labels: &[(String, String)],
        ts_ms: i64,
        value: f64,
    ) -> Result<(), SinkError> {
        let set =
            headroom_storage::Labels::new(labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(|e| SinkError(format!("series {metric}: {e}")))?;
        headroom_storage::Store::append(self, metric, &set, ts_ms, value)
            .map(|_| ())
            .map_err(|e| SinkError(format!("appending to {metric}{set} at {ts_ms}: {e}")))
    }

    fn put_run(&self, builder: &str, run: &RunRecord) -> Result<(), SinkError> {
        headroom_storage::Store::put_run(self, builder, run).map_err(|e| {
            SinkError(format!(
                "storing run of {builder} (pod {}) on {}: {e}",
                run.pod_uid, run.node
            ))
        })
    }

    fn record_placement(&self, builder: &str, node: &str, at_ms: i64) -> Result<(), SinkError> {
        headroom_storage::Store::record_placement(self, builder, node, at_ms)
            .map(drop)
            .map_err(|e| SinkError(format!("recording placement of {builder} on {node}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_storage::{Store, StoreConfig, parse_selector};

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn store_sink_appends_samples_readable_by_select_and_latest() {
        let store = Store::open_temporary(StoreConfig::default()).unwrap();
        let sink: &dyn Sink = &store;
        let l = labels(&[("node", "n1")]);
        sink.append("node_memory_working_set_bytes", &l, 1_000, 1.5e9)
            .unwrap();
        sink.append("node_memory_working_set_bytes", &l, 16_000, 1.25e9)
            .unwrap();
        sink.append(
            "node_memory_working_set_bytes",
            &labels(&[("node", "n2")]),
            16_000,
            7.0,
        )
        .unwrap();

        let found = store
            .select(&parse_selector(r#"node_memory_working_set_bytes{node="n1"}"#).unwrap())
            .unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].labels.get("node"), Some("n1"));
        let last = store.latest(found[0].id).unwrap().unwrap();
        assert_eq!((last.ts_ms, last.value), (16_000, 1.25e9));
        assert_eq!(
            store
                .select(&parse_selector("node_memory_working_set_bytes").unwrap())
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn store_sink_errors_carry_context() {
        let store = Store::open_temporary(StoreConfig::default()).unwrap();
        let bad_label = Sink::append(&store, "m", &labels(&[("bad-name", "x")]), 1, 1.0)
            .unwrap_err()
            .0;
        assert!(bad_label.contains("series m"), "{bad_label}");
        Sink::append(&store, "m", &labels(&[("node", "a")]), 10, 1.0).unwrap();
        let old = Sink::append(&store, "m", &labels(&[("node", "a")]), 5, 1.0)
            .unwrap_err()
            .0;
        assert!(
            old.contains("m{node=\"a\"}") && old.contains("out-of-order"),
            "{old}"
        );
        let run = Sink::record_placement(&store, "", "n1", 1).unwrap_err().0;
        assert!(run.contains("placement"), "{run}");
    }

    #[test]
    fn store_sink_round_trips_runs_and_placements() {
        let store = Store::open_temporary(StoreConfig::default()).unwrap();
        let run = RunRecord {
            pod_uid: "uid-1".into(),
            node: "n1".into(),
            start_ms: 1_000,
            end_ms: 61_000,
            cpu: UsageSummary {
                mean: 0.5,
                p95: 0.9,
                max: 1.0,
            },
            memory: UsageSummary {
                mean: 1e9,
                p95: 1.5e9,
                max: 2e9,
            },
        };
        let sink: &dyn Sink = &store;
        sink.put_run("ci/Deployment/b", &run).unwrap();
        sink.record_placement("ci/Deployment/b", "n1", 1).unwrap();
        sink.record_placement("ci/Deployment/b", "n2", 2).unwrap();

        let stored = store.runs("ci/Deployment/b").unwrap();
        assert_eq!(stored.len(), 1);
        let s = &stored[0];
        assert_eq!(
            (s.pod_uid.as_str(), s.node.as_str(), s.start_ms, s.end_ms),
            ("uid-1", "n1", 1_000, 61_000)
        );
        assert_eq!((s.cpu.mean, s.cpu.p95, s.cpu.max), (0.5, 0.9, 1.0));
        assert_eq!(
            (s.memory.mean, s.memory.p95, s.memory.max),
            (1e9, 1.5e9, 2e9)
        );
        assert_eq!(
            store.placement_history("ci/Deployment/b").unwrap(),
            vec!["n2".to_string(), "n1".to_string()]
        );
    }
}

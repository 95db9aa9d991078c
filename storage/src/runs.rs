//! Run records and placement history per builder.
//!
//! A *builder* is a workload identity string (e.g. `namespace/Deployment/name`). Each
//! builder key in the `runs` tree holds its newest `max_runs_per_builder` runs as JSON,
//! and in the `placements` tree its most-recent-first node list. Both are small, so a
//! read-modify-write of one value per call is cheap, and one sled value per builder keeps
//! each update atomic.

use serde::{Deserialize, Serialize};

use crate::Store;
use crate::checksum::{self, PLACEMENTS, RUNS, seal, unseal};
use crate::error::{Error, Result};
use crate::lock;

/// Mean, 95th percentile and maximum of a usage series over one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageSummary {
    /// Mean.
    pub mean: f64,
    /// 95th percentile.
    pub p95: f64,
    /// Maximum.
    pub max: f64,
}

/// One run of a builder: a pod from start to end on one node, with its usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The pod's uid (a run is replaced when the same uid is put again).
    pub pod_uid: String,
    /// Node it ran on.
    pub node: String,
    /// Start, ms since the epoch.
    pub start_ms: i64,
    /// End, ms since the epoch.
    pub end_ms: i64,
    /// CPU usage in cores.
    pub cpu: UsageSummary,
    /// Memory usage in bytes.
    pub memory: UsageSummary,
}

fn check_builder(builder: &str) -> Result<()> {
    if builder.is_empty() || builder.len() > 1024 {
        return Err(Error::InvalidArgument(format!(
            "builder name must be 1..=1024 bytes, got {}",
            builder.len()
        )));
    }
    Ok(())
}

/// Decodes a sealed JSON value of `tree` (`name` is its checksum name).
fn decode<T: for<'de> Deserialize<'de>>(name: &str, key: &[u8], v: &[u8]) -> Result<Vec<T>> {
    let payload = unseal(name, key, v)?;
    serde_json::from_slice(payload)
        .map_err(|e| Error::corrupt(checksum::describe(name, key), e.to_string()))
}

fn load<T: for<'de> Deserialize<'de>>(tree: &sled::Tree, name: &str, key: &str) -> Result<Vec<T>> {
    match tree.get(key)? {
        Some(v) => decode(name, key.as_bytes(), &v),
        None => Ok(Vec::new()),
    }
}

fn save<T: Serialize>(
    tree: &sled::Tree,
    name: &str,
    key: &str,
    v: &[T],
    what: &'static str,
) -> Result<()> {
    let bytes = serde_json::to_vec(v).map_err(|source| Error::Serde { what, source })?;
    tree.insert(key, seal(name, key.as_bytes(), &bytes))?;
    Ok(())
}

impl Store {
    /// Records a run of `builder`, keeping the newest `max_runs_per_builder` (by start).
    /// A run with the same `pod_uid` as a stored one replaces it (e.g. to set its end).
    /// Durable with the next flush (or sled's own periodic flush, within 0.5 s).
    pub fn put_run(&self, builder: &str, run: &RunRecord) -> Result<()> {
        check_builder(builder)?;
        let _g = lock(&self.inner.record_lock);
        let tree = &self.inner.runs;
        let mut runs: Vec<RunRecord> = load(tree, RUNS, builder)?;
        match runs.iter_mut().find(|r| r.pod_uid == run.pod_uid) {
            Some(r) => *r = run.clone(),
            None => runs.push(run.clone()),
        }
        runs.sort_by_key(|r| r.start_ms);
        let max = self.inner.config.max_runs_per_builder.max(1);
        if runs.len() > max {
            runs.drain(..runs.len() - max);
        }
        save(tree, RUNS, builder, &runs, "run records")
    }

    /// Runs of `builder`, oldest first (empty if unknown).
    pub fn runs(&self, builder: &str) -> Result<Vec<RunRecord>> {
        load(&self.inner.runs, RUNS, builder)
    }

    /// Builders that have run records, sorted. Each value's checksum (which covers the
    /// key) is verified, so a damaged key is an error rather than a wrong builder name.
    pub fn builders(&self) -> Result<Vec<String>> {
        self.inner
            .runs
            .iter()
            .map(|kv| {
                let (k, v) = kv?;
                unseal(RUNS, &k, &v)?;
                String::from_utf8(k.to_vec())
                    .map_err(|_| Error::corrupt("builder key", "not UTF-8"))
            })
            .collect()
    }

    /// Moves `node` to the front of `builder`'s placement history (deduplicated, at most
    /// `max_history_nodes` entries); returns the history as written, newest first.
    pub fn record_placement(&self, builder: &str, node: &str) -> Result<Vec<String>> {
        check_builder(builder)?;
        if node.is_empty() || node.len() > 1024 {
            return Err(Error::InvalidArgument(
                "node name must be 1..=1024 bytes".into(),
            ));
        }
        let _g = lock(&self.inner.record_lock);
        let tree = &self.inner.placements;
        let mut nodes: Vec<String> = load(tree, PLACEMENTS, builder)?;
        nodes.retain(|n| n != node);
        nodes.insert(0, node.to_string());
        nodes.truncate(self.inner.config.max_history_nodes.max(1));
        save(tree, PLACEMENTS, builder, &nodes, "placement history")?;
        Ok(nodes)
    }

    /// Every builder's placement history (nodes most recent first), sorted by builder: the
    /// analytics refresh loads them all at once into the usage view.
    pub fn placement_histories(&self) -> Result<Vec<(String, Vec<String>)>> {
        self.inner
            .placements
            .iter()
            .map(|kv| {
                let (k, v) = kv?;
                let builder = String::from_utf8(k.to_vec())
                    .map_err(|_| Error::corrupt("builder key", "not UTF-8"))?;
                let nodes: Vec<String> = decode(PLACEMENTS, &k, &v)?;
                Ok((builder, nodes))
            })
            .collect()
    }

    /// Nodes `builder` ran on, most recent first (empty if unknown).
    pub fn placement_history(&self, builder: &str) -> Result<Vec<String>> {
        load(&self.inner.placements, PLACEMENTS, builder)
    }
}

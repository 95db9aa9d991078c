//! Run records and placement history per builder.
//!
//! A *builder* is a workload identity string (e.g. `namespace/Deployment/name`). Each
//! builder key in the `runs` tree holds its newest `max_runs_per_builder` runs as JSON,
//! and in the `placements` tree its most-recent-first node list with the time of the
//! last placement. Both are small, so a read-modify-write of one value per call is cheap,
//! and one sled value per builder keeps each update atomic.
//!
//! Builders come and go (a bare pod is a builder of its own), so maintenance drops a
//! builder's runs and history once nothing has been recorded for it for
//! `builder_max_age` ([`Store::expire_builders`]).

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

/// A placement history as stored: the nodes, most recent first, and when the last
/// placement was recorded. Stores written before the time was kept hold the bare list;
/// maintenance stamps those with the time it first sees them.
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredHistory {
    Timed {
        nodes: Vec<String>,
        #[serde(rename = "atMs")]
        at_ms: i64,
    },
    Bare(Vec<String>),
}

#[derive(Serialize)]
struct History<'a> {
    nodes: &'a [String],
    #[serde(rename = "atMs")]
    at_ms: i64,
}

impl StoredHistory {
    fn nodes(self) -> Vec<String> {
        match self {
            StoredHistory::Timed { nodes, .. } | StoredHistory::Bare(nodes) => nodes,
        }
    }
}

fn decode_history(key: &[u8], v: &[u8]) -> Result<StoredHistory> {
    let payload = unseal(PLACEMENTS, key, v)?;
    serde_json::from_slice(payload)
        .map_err(|e| Error::corrupt(checksum::describe(PLACEMENTS, key), e.to_string()))
}

fn load_history(tree: &sled::Tree, builder: &str) -> Result<Vec<String>> {
    match tree.get(builder)? {
        Some(v) => Ok(decode_history(builder.as_bytes(), &v)?.nodes()),
        None => Ok(Vec::new()),
    }
}

fn save_history(tree: &sled::Tree, builder: &str, nodes: &[String], at_ms: i64) -> Result<()> {
    let bytes = serde_json::to_vec(&History { nodes, at_ms }).map_err(|source| Error::Serde {
        what: "placement history",
        source,
    })?;
    tree.insert(builder, seal(PLACEMENTS, builder.as_bytes(), &bytes))?;
    Ok(())
}

/// What [`Store::expire_builders`] dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BuildersExpired {
    /// Builders whose run records were dropped.
    pub runs: u64,
    /// Builders whose placement history was dropped.
    pub placements: u64,
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
        // Taken under the record lock, which compaction holds while it copies and swaps.
        let db = self.inner.db();
        let tree = &db.runs;
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
        load(&self.inner.db().runs, RUNS, builder)
    }

    /// Builders that have run records, sorted. Each value's checksum (which covers the
    /// key) is verified, so a damaged key is an error rather than a wrong builder name.
    pub fn builders(&self) -> Result<Vec<String>> {
        self.inner
            .db()
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
    /// `max_history_nodes` entries), placed at `at_ms` (ms since the epoch; it keeps the
    /// builder from expiring, see [`Store::expire_builders`]); returns the history as
    /// written, newest first.
    pub fn record_placement(&self, builder: &str, node: &str, at_ms: i64) -> Result<Vec<String>> {
        check_builder(builder)?;
        if node.is_empty() || node.len() > 1024 {
            return Err(Error::InvalidArgument(
                "node name must be 1..=1024 bytes".into(),
            ));
        }
        let _g = lock(&self.inner.record_lock);
        let db = self.inner.db();
        let tree = &db.placements;
        let mut nodes = load_history(tree, builder)?;
        nodes.retain(|n| n != node);
        nodes.insert(0, node.to_string());
        nodes.truncate(self.inner.config.max_history_nodes.max(1));
        save_history(tree, builder, &nodes, at_ms)?;
        Ok(nodes)
    }

    /// Drops the run records of builders whose newest run ended (or, still running,
    /// started) before `now_ms − builder_max_age`, and the placement histories whose
    /// last placement is that old. A history stored without its time (by an older
    /// build) is stamped `now_ms` instead, so it expires `builder_max_age` from now.
    /// Part of [`Store::maintain`]. Blocking I/O over both trees.
    pub fn expire_builders(&self, now_ms: i64) -> Result<BuildersExpired> {
        let cutoff = now_ms.saturating_sub(crate::config::ms(self.inner.config.builder_max_age));
        let _g = lock(&self.inner.record_lock);
        let db = self.inner.db();
        let mut out = BuildersExpired::default();
        let mut batch = sled::Batch::default();
        for kv in db.runs.iter() {
            let (k, v) = kv?;
            // A damaged value is left alone: reading it reports the damage.
            let Ok(runs) = decode::<RunRecord>(RUNS, &k, &v) else {
                continue;
            };
            let last = runs.iter().map(|r| r.end_ms.max(r.start_ms)).max();
            if last.is_none_or(|t| t < cutoff) {
                batch.remove(k);
                out.runs += 1;
            }
        }
        db.runs.apply_batch(batch)?;
        let mut batch = sled::Batch::default();
        for kv in db.placements.iter() {
            let (k, v) = kv?;
            match decode_history(&k, &v) {
                Ok(StoredHistory::Timed { at_ms, .. }) if at_ms < cutoff => {
                    batch.remove(k);
                    out.placements += 1;
                }
                Ok(StoredHistory::Bare(nodes)) => {
                    let bytes = serde_json::to_vec(&History {
                        nodes: &nodes,
                        at_ms: now_ms,
                    })
                    .map_err(|source| Error::Serde {
                        what: "placement history",
                        source,
                    })?;
                    batch.insert(k.clone(), seal(PLACEMENTS, &k, &bytes));
                }
                _ => {}
            }
        }
        db.placements.apply_batch(batch)?;
        Ok(out)
    }

    /// Every builder's placement history (nodes most recent first), sorted by builder: the
    /// analytics refresh loads them all at once into the usage view.
    pub fn placement_histories(&self) -> Result<Vec<(String, Vec<String>)>> {
        self.inner
            .db()
            .placements
            .iter()
            .map(|kv| {
                let (k, v) = kv?;
                let builder = String::from_utf8(k.to_vec())
                    .map_err(|_| Error::corrupt("builder key", "not UTF-8"))?;
                Ok((builder, decode_history(&k, &v)?.nodes()))
            })
            .collect()
    }

    /// Nodes `builder` ran on, most recent first (empty if unknown).
    pub fn placement_history(&self, builder: &str) -> Result<Vec<String>> {
        load_history(&self.inner.db().placements, builder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreConfig;

    #[test]
    fn a_history_stored_without_its_time_is_read_and_then_stamped() {
        let config = StoreConfig {
            builder_max_age: std::time::Duration::from_secs(60),
            ..StoreConfig::default()
        };
        let s = Store::open_temporary(config).unwrap();
        // As an older build wrote it: the bare list.
        let bytes = serde_json::to_vec(&["n2", "n1"]).unwrap();
        s.inner
            .db()
            .placements
            .insert("b", seal(PLACEMENTS, b"b", &bytes))
            .unwrap();
        assert_eq!(s.placement_history("b").unwrap(), ["n2", "n1"]);
        // Stamped with the pass's time, not dropped...
        assert_eq!(s.expire_builders(1_000_000).unwrap().placements, 0);
        assert_eq!(s.placement_histories().unwrap()[0].1, ["n2", "n1"]);
        // ...and dropped a builderMaxAge later.
        assert_eq!(s.expire_builders(1_000_000 + 59_000).unwrap().placements, 0);
        assert_eq!(s.expire_builders(1_000_000 + 61_000).unwrap().placements, 1);
        assert!(s.placement_history("b").unwrap().is_empty());
    }
}

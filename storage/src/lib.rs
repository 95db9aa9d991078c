//! `headroom-storage`: headroom's embedded time-series store on sled.
//!
//! It keeps samples (metric name + label set → timestamped f64 values), per-builder run
//! records and placement history, the scheduler's decision log and small keyed state, so
//! headroom runs with no external database and survives restarts. It depends on sled and
//! serde only: no Kubernetes types and no analytics engine, so the layering stays clean.
//!
//! Samples live in an in-memory head per series (Gorilla-compressed open chunk) and are
//! made durable by [`Store::flush`] (a write-ahead log segment plus sealed chunks in one
//! atomic sled batch). Chunks are keyed by (series id, chunk start), so a series is
//! contiguous on disk. See `FORMAT.md` for the on-disk layout and `README.md` for the
//! durability contract.
//!
//! A store directory carries a `HEADROOM` marker; [`Store::open`] creates a store only in
//! a missing or empty directory and [`Store::open_existing`] never creates one. Opening
//! checks the marker and sled's files, catches a panic inside sled's recovery and checks
//! that sled kept every completed flush; every stored value carries a checksum. Damage is
//! [`Error::Corrupt`] or [`Error::CorruptValue`], never a panic ([`damage`] has the test
//! harness and a fuzz entry point).
//!
//! All [`Store`] methods are synchronous; the heavy ones (open, flush, maintain, big
//! queries) do disk I/O, so async callers wrap them in `tokio::task::spawn_blocking`.
//! [`run_maintenance`] does that for the periodic flush and retention work.

mod checksum;
mod chunk;
mod compact;
mod config;
pub mod damage;
mod decisions;
mod error;
mod guard;
mod head;
mod index;
mod keys;
mod kv;
mod labels;
mod maintenance;
mod manifest;
mod rescue;
mod rollup;
mod runs;
mod store;

pub use chunk::{
    ChunkEncoder, ChunkHeader, MAX_CHUNK_SAMPLES, MAX_CHUNK_SPAN_MS, chunk_header, decode_chunk,
};
pub use config::{MAX_DURATION, MIN_CACHE_CAPACITY_BYTES, StoreConfig};
pub use decisions::DecisionKey;
pub use error::{Error, Result};
pub use kv::TypedTree;
pub use labels::{
    Labels, MAX_LABELS, MAX_NAME_LEN, MAX_VALUE_LEN, METRIC_NAME_LABEL, MatchOp, Matcher,
    parse_selector, validate_metric_name,
};
pub use maintenance::{MaintenanceConfig, MaintenanceReport, MaintenanceTarget, run_maintenance};
pub use manifest::FORMAT_VERSION;
pub use manifest::{MARKER_FILE, PROBE_FILE};
pub use rescue::{DAMAGED_PREFIX, Kept, Rescue};
pub use rollup::{ROLLUP_STEP_MS, Rollup, bucket_start, rollup_samples};
pub use runs::BuildersExpired;
pub use runs::{RunRecord, UsageSummary};
pub use store::{Compaction, FlushStats, MaintenanceStats, OpenMode, Store, StoreStats};

use serde::{Deserialize, Serialize};
use std::sync::{Mutex, MutexGuard};

/// Largest accepted timestamp (2^53 ms, about 285,000 years): keeps every timestamp
/// delta far from `i64` overflow and exactly representable as f64.
pub const MAX_TIMESTAMP_MS: i64 = 1 << 53;

/// Identifier of a series, stable while the series exists. A series with nothing left
/// after retention is removed by [`Store::maintain`]; its id then names nothing
/// ([`Error::UnknownSeries`]), never the series that reuses its slot (the slot is the low
/// 32 bits, the high 32 count the slot's earlier series).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SeriesId(pub u64);

/// One sample: a timestamp in milliseconds since the Unix epoch and a finite value.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Milliseconds since the Unix epoch.
    pub ts_ms: i64,
    /// The value (never NaN or infinite).
    pub value: f64,
}

/// A series as returned by [`Store::select`].
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesInfo {
    /// Its id.
    pub id: SeriesId,
    /// Metric name.
    pub metric: String,
    /// Labels.
    pub labels: Labels,
    /// Newest raw sample, if any.
    pub last: Option<Sample>,
}

/// Locks a mutex, ignoring poisoning: every critical section leaves the state consistent
/// at each step, so a panic elsewhere must not make the store unusable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

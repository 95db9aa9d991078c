//! Store configuration.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Configuration of a [`Store`](crate::Store). Every field has a default; in YAML,
/// durations are humantime strings such as `"10s"`, `"48h"` or `"30d"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct StoreConfig {
    /// How often the maintenance task flushes appended samples to disk. Samples appended
    /// since the last completed flush are lost on a crash, so this is the loss window.
    /// Default `10s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub flush_interval: Duration,
    /// How long raw samples are kept; older ones are folded into 5-minute rollups.
    /// Default `48h`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub raw_retention: Duration,
    /// How long 5-minute rollups are kept. Default `30d`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub rollup_retention: Duration,
    /// How often the maintenance task runs a retention/downsampling pass. Default `5m`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub maintenance_interval: Duration,
    /// First retry delay after a failed maintenance pass; doubles per failure. Default `1s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub maintenance_backoff_min: Duration,
    /// Largest retry delay after repeated failures. Default `5m`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub maintenance_backoff_max: Duration,
    /// Run records kept per builder (the newest N). Default `50`.
    pub max_runs_per_builder: usize,
    /// Nodes kept in a builder's placement history. Default `10`.
    pub max_history_nodes: usize,
    /// Decision records kept (the newest N). Default `100000`.
    pub decision_log_max_records: usize,
    /// Decision records older than this are dropped by maintenance. Default `7d`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub decision_log_max_age: Duration,
    /// An open chunk whose samples have sat only in the write-ahead log for this many
    /// flushes is written out as a partial chunk, so the log can be truncated. Bounds the
    /// log to about this many flush segments. Default `30` (5 minutes at `10s`).
    pub wal_checkpoint_flushes: u64,
    /// Refuse to create more series than this (a cardinality guard). Default `5000000`.
    pub max_series: usize,
    /// sled page cache size in bytes. Default `67108864` (64 MiB).
    pub cache_capacity_bytes: u64,
    /// A builder's run records and placement history are dropped once nothing has been
    /// recorded for it for this long (a bare pod is a builder of its own, so without a
    /// limit they would pile up). Default `30d`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub builder_max_age: Duration,
    /// sled reclaims the space of overwritten and deleted values only partly, so under
    /// churn its files grow well past the data they hold. When the store's size on disk
    /// reaches this many times its size right after the last compaction (before the
    /// first: its live data), and at least `compactionMinBytes`, maintenance rewrites the
    /// store into a fresh database and swaps it in while headroom runs (about a second
    /// per 25 MB of live data, during which flushes and decision writes wait). `0` turns
    /// this off; otherwise at least `1.5`. Default `2`.
    pub compaction_ratio: f64,
    /// No compaction below this size on disk, in bytes. Default `67108864` (64 MiB).
    pub compaction_min_bytes: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            flush_interval: Duration::from_secs(10),
            raw_retention: Duration::from_secs(48 * 3600),
            rollup_retention: Duration::from_secs(30 * 24 * 3600),
            maintenance_interval: Duration::from_secs(300),
            maintenance_backoff_min: Duration::from_secs(1),
            maintenance_backoff_max: Duration::from_secs(300),
            max_runs_per_builder: 50,
            max_history_nodes: 10,
            decision_log_max_records: 100_000,
            decision_log_max_age: Duration::from_secs(7 * 24 * 3600),
            wal_checkpoint_flushes: 30,
            max_series: 5_000_000,
            cache_capacity_bytes: 64 << 20,
            builder_max_age: Duration::from_secs(30 * 24 * 3600),
            compaction_ratio: 2.0,
            compaction_min_bytes: 64 << 20,
        }
    }
}

/// Longest accepted duration (100 years): longer ones overflow deadline arithmetic.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Smallest accepted `cacheCapacityBytes` (sled refuses smaller caches).
pub const MIN_CACHE_CAPACITY_BYTES: u64 = 256;

impl StoreConfig {
    /// Checks every field with a bound; the error names the field (camelCase, as in
    /// YAML) and the bound:
    ///
    /// | field | bound |
    /// | --- | --- |
    /// | `flushInterval`, `maintenanceInterval`, `maintenanceBackoffMin`, `maintenanceBackoffMax`, `rawRetention`, `decisionLogMaxAge`, `builderMaxAge` | > 0 |
    /// | every duration | ≤ 100 years |
    /// | `rollupRetention` | ≥ `rawRetention` (rollups are made of samples older than it) |
    /// | `maintenanceBackoffMin` | ≤ `maintenanceBackoffMax` |
    /// | `maxRunsPerBuilder`, `maxHistoryNodes`, `decisionLogMaxRecords`, `walCheckpointFlushes` | ≥ 1 |
    /// | `maxSeries` | 1 ..= 2^32 − 1 (series ids are 32-bit) |
    /// | `cacheCapacityBytes` | ≥ 256 |
    /// | `compactionRatio` | 0 (off) or 1.5 ..= 1000 |
    ///
    /// [`Store::open`](crate::Store::open) and friends call it, so no bad value reaches
    /// sled. Errors: [`Error::InvalidConfig`].
    pub fn validate(&self) -> Result<()> {
        let bad =
            |field: &'static str, message: String| Err(Error::InvalidConfig { field, message });
        let durations = [
            ("flushInterval", self.flush_interval, true),
            ("rawRetention", self.raw_retention, true),
            ("rollupRetention", self.rollup_retention, false),
            ("maintenanceInterval", self.maintenance_interval, true),
            ("maintenanceBackoffMin", self.maintenance_backoff_min, true),
            ("maintenanceBackoffMax", self.maintenance_backoff_max, true),
            ("decisionLogMaxAge", self.decision_log_max_age, true),
            ("builderMaxAge", self.builder_max_age, true),
        ];
        for (field, d, positive) in durations {
            if positive && d.is_zero() {
                return bad(field, "must be greater than 0".into());
            }
            if d > MAX_DURATION {
                return bad(field, "must be at most 100 years".into());
            }
        }
        if self.rollup_retention < self.raw_retention {
            return bad(
                "rollupRetention",
                format!(
                    "must be at least rawRetention ({}): rollups are made of samples older than rawRetention",
                    humantime_serde::re::humantime::format_duration(self.raw_retention)
                ),
            );
        }
        if self.maintenance_backoff_min > self.maintenance_backoff_max {
            return bad(
                "maintenanceBackoffMin",
                format!(
                    "must not exceed maintenanceBackoffMax ({})",
                    humantime_serde::re::humantime::format_duration(self.maintenance_backoff_max)
                ),
            );
        }
        let counts = [
            ("maxRunsPerBuilder", self.max_runs_per_builder as u64),
            ("maxHistoryNodes", self.max_history_nodes as u64),
            (
                "decisionLogMaxRecords",
                self.decision_log_max_records as u64,
            ),
            ("walCheckpointFlushes", self.wal_checkpoint_flushes),
            ("maxSeries", self.max_series as u64),
        ];
        for (field, n) in counts {
            if n == 0 {
                return bad(field, "must be at least 1".into());
            }
        }
        if self.max_series as u64 > u64::from(u32::MAX) {
            return bad(
                "maxSeries",
                format!("must be at most {} (series ids are 32-bit)", u32::MAX),
            );
        }
        if self.cache_capacity_bytes < MIN_CACHE_CAPACITY_BYTES {
            return bad(
                "cacheCapacityBytes",
                format!("must be at least {MIN_CACHE_CAPACITY_BYTES} (bytes)"),
            );
        }
        let r = self.compaction_ratio;
        if !(r == 0.0 || (1.5..=1000.0).contains(&r)) {
            return bad(
                "compactionRatio",
                format!("must be 0 (off) or between 1.5 and 1000, got {r}"),
            );
        }
        Ok(())
    }
}

pub(crate) fn ms(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_roundtrip_and_humantime() {
        let c: StoreConfig =
            serde_json::from_str(r#"{"flushInterval":"5s","rawRetention":"1day"}"#).unwrap();
        assert_eq!(c.flush_interval, Duration::from_secs(5));
        assert_eq!(c.raw_retention, Duration::from_secs(86400));
        assert_eq!(c.max_runs_per_builder, 50);
        assert!(serde_json::from_str::<StoreConfig>(r#"{"nope":1}"#).is_err());
        let s = serde_json::to_string(&StoreConfig::default()).unwrap();
        assert_eq!(
            serde_json::from_str::<StoreConfig>(&s).unwrap(),
            StoreConfig::default()
        );
    }
}

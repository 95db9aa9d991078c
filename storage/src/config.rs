//! Store configuration.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Configuration of a [`Store`](crate::Store). Every field has a default; in YAML,
/// durations are humantime strings such as `"10s"`, `"48h"` or `"30d"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct StoreConfig {
    /// How often the maintenance task flushes appended samples to disk. Samples appended
    /// since the last completed flush are lost on a crash, so this is the loss window.
    /// Default `10s`.
    #[serde(with = "humantime_serde")]
    pub flush_interval: Duration,
    /// How long raw samples are kept; older ones are folded into 5-minute rollups.
    /// Default `48h`.
    #[serde(with = "humantime_serde")]
    pub raw_retention: Duration,
    /// How long 5-minute rollups are kept. Default `30d`.
    #[serde(with = "humantime_serde")]
    pub rollup_retention: Duration,
    /// How often the maintenance task runs a retention/downsampling pass. Default `5m`.
    #[serde(with = "humantime_serde")]
    pub maintenance_interval: Duration,
    /// First retry delay after a failed maintenance pass; doubles per failure. Default `1s`.
    #[serde(with = "humantime_serde")]
    pub maintenance_backoff_min: Duration,
    /// Largest retry delay after repeated failures. Default `5m`.
    #[serde(with = "humantime_serde")]
    pub maintenance_backoff_max: Duration,
    /// Run records kept per builder (the newest N). Default `50`.
    pub max_runs_per_builder: usize,
    /// Nodes kept in a builder's placement history. Default `10`.
    pub max_history_nodes: usize,
    /// Decision records kept (the newest N). Default `100000`.
    pub decision_log_max_records: usize,
    /// Decision records older than this are dropped by maintenance. Default `7d`.
    #[serde(with = "humantime_serde")]
    pub decision_log_max_age: Duration,
    /// An open chunk whose samples have sat only in the write-ahead log for this many
    /// flushes is written out as a partial chunk, so the log can be truncated. Bounds the
    /// log to about this many flush segments. Default `30` (5 minutes at `10s`).
    pub wal_checkpoint_flushes: u64,
    /// Refuse to create more series than this (a cardinality guard). Default `5000000`.
    pub max_series: usize,
    /// sled page cache size in bytes. Default `67108864` (64 MiB).
    pub cache_capacity_bytes: u64,
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
        }
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

//! `QueueConfig`: the queue's timings, read from the YAML configuration.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Timings of the scheduling queue. Every field has upstream's default, so an empty (or
/// absent) section is a complete configuration.
///
/// Durations are written the humantime way: `"1s"`, `"500ms"`, `"5m"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct QueueConfig {
    /// Backoff after the first failed attempt; each further attempt doubles it.
    /// Default `1s` (upstream's `podInitialBackoffSeconds`).
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    /// Cap on the per-pod backoff. Default `10s` (upstream's `podMaxBackoffSeconds`).
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// How long a pod may sit among the unschedulable pods without any helpful cluster event
    /// before it is retried anyway. Default `5m` (upstream's
    /// `DefaultPodMaxInUnschedulablePodsDuration`).
    #[serde(with = "humantime_serde")]
    pub unschedulable_timeout: Duration,
    /// How often the flush loop moves pods whose backoff expired to the active queue.
    /// Default `1s` (upstream's `flushBackoffQCompleted` period).
    #[serde(with = "humantime_serde")]
    pub backoff_flush_interval: Duration,
    /// How often the flush loop looks for pods that overstayed `unschedulableTimeout`.
    /// Default `30s` (upstream's `flushUnschedulablePodsLeftover` period).
    #[serde(with = "humantime_serde")]
    pub unschedulable_flush_interval: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            unschedulable_timeout: Duration::from_secs(5 * 60),
            backoff_flush_interval: Duration::from_secs(1),
            unschedulable_flush_interval: Duration::from_secs(30),
        }
    }
}

impl QueueConfig {
    /// Checks the invariants upstream's validation enforces (positive initial backoff, a cap
    /// not below it) plus positive flush intervals, which a ticking loop needs.
    pub fn validate(&self) -> Result<(), String> {
        if self.initial_backoff.is_zero() {
            return Err("queue.initialBackoff must be positive".to_string());
        }
        if self.max_backoff < self.initial_backoff {
            return Err(format!(
                "queue.maxBackoff ({}) must not be below queue.initialBackoff ({})",
                humantime_serde::re::humantime::format_duration(self.max_backoff),
                humantime_serde::re::humantime::format_duration(self.initial_backoff),
            ));
        }
        if self.backoff_flush_interval.is_zero() || self.unschedulable_flush_interval.is_zero() {
            return Err("queue flush intervals must be positive".to_string());
        }
        Ok(())
    }

    /// The backoff a pod serves after `attempts` scheduling attempts:
    /// `initial × 2^(attempts-1)`, capped at `max`; zero for a pod never attempted (upstream's
    /// `calculateBackoffDuration`).
    pub fn backoff_duration(&self, attempts: u32) -> Duration {
        if attempts == 0 {
            return Duration::ZERO;
        }
        let mut d = self.initial_backoff;
        // Doubling stops at the cap, so the loop runs at most ~log2(max/initial) times even
        // for a pod that failed thousands of times; a zero initial backoff never grows.
        for _ in 1..attempts {
            if d.is_zero() || d >= self.max_backoff {
                break;
            }
            d = d.saturating_mul(2);
        }
        d.min(self.max_backoff)
    }
}

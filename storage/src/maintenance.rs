//! The background maintenance task: periodic flush, periodic retention passes, a
//! coalesced on-demand trigger, and exponential backoff when a pass fails.
//!
//! Uses only `tokio::time` for waiting, so tests drive it on a paused clock.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};

use crate::config::StoreConfig;
use crate::error::{Error, Result};
use crate::store::{FlushStats, MaintenanceStats, Store};

/// What the maintenance task drives. [`Store`] implements it; tests use fakes.
pub trait MaintenanceTarget: Clone + Send + Sync + 'static {
    /// Makes appended data durable.
    fn flush(&self) -> Result<FlushStats>;
    /// One retention pass at `now_ms`.
    fn maintain(&self, now_ms: i64) -> Result<MaintenanceStats>;
}

impl MaintenanceTarget for Store {
    fn flush(&self) -> Result<FlushStats> {
        Store::flush(self)
    }
    fn maintain(&self, now_ms: i64) -> Result<MaintenanceStats> {
        Store::maintain(self, now_ms)
    }
}

/// Timing of [`run_maintenance`].
#[derive(Clone)]
pub struct MaintenanceConfig {
    /// Time between flushes.
    pub flush_interval: Duration,
    /// Time between retention passes.
    pub maintenance_interval: Duration,
    /// First retry delay after a failure.
    pub backoff_min: Duration,
    /// Largest retry delay.
    pub backoff_max: Duration,
    /// Wall clock in ms since the epoch, passed to `maintain` (replaceable in tests).
    pub clock: Arc<dyn Fn() -> i64 + Send + Sync>,
}

impl std::fmt::Debug for MaintenanceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaintenanceConfig")
            .field("flush_interval", &self.flush_interval)
            .field("maintenance_interval", &self.maintenance_interval)
            .field("backoff_min", &self.backoff_min)
            .field("backoff_max", &self.backoff_max)
            .finish_non_exhaustive()
    }
}

fn system_clock() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl From<&StoreConfig> for MaintenanceConfig {
    fn from(c: &StoreConfig) -> Self {
        MaintenanceConfig {
            flush_interval: c.flush_interval,
            maintenance_interval: c.maintenance_interval,
            backoff_min: c.maintenance_backoff_min,
            backoff_max: c.maintenance_backoff_max,
            clock: Arc::new(system_clock),
        }
    }
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig::from(&StoreConfig::default())
    }
}

/// Counters returned when the task stops.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    /// Successful periodic flushes.
    pub flushes: u64,
    /// Successful retention passes (each includes a flush).
    pub passes: u64,
    /// Failed attempts (flush or pass).
    pub failures: u64,
    /// Passes started by the trigger (after coalescing).
    pub triggered: u64,
    /// Whether the final flush at shutdown succeeded.
    pub final_flush_ok: bool,
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Task(e.to_string()))?
}

/// Runs until `shutdown` completes, then flushes once more and returns its counters.
///
/// - every `flush_interval`: `flush` (the durability loss window);
/// - every `maintenance_interval`, and whenever `trigger` is notified: a pass (`flush`
///   then `maintain(clock())`). Notifications that arrive before a pass starts are all
///   served by it; those arriving while it runs collapse into one more pass;
/// - after a failure, the next attempt is a full pass after `backoff_min`, doubling up to
///   `backoff_max`; the trigger is ignored (stays coalesced) until an attempt succeeds.
///
/// The store calls run on tokio's blocking pool (`spawn_blocking`).
pub async fn run_maintenance<T: MaintenanceTarget>(
    target: T,
    config: MaintenanceConfig,
    trigger: Arc<Notify>,
    shutdown: impl Future<Output = ()>,
) -> MaintenanceReport {
    let mut report = MaintenanceReport::default();
    let flush_every = config.flush_interval.max(Duration::from_millis(1));
    let pass_every = config.maintenance_interval.max(Duration::from_millis(1));
    let start = Instant::now();
    let mut next_flush = start + flush_every;
    let mut next_pass = start + pass_every;
    let mut backoff: Option<Duration> = None;
    tokio::pin!(shutdown);
    loop {
        // While backing off, the retry is the only scheduled work.
        let (deadline, is_pass) = match backoff {
            Some(_) => (next_pass, true),
            None if next_pass <= next_flush => (next_pass, true),
            None => (next_flush, false),
        };
        let triggered = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            _ = trigger.notified(), if backoff.is_none() => true,
            _ = sleep_until(deadline) => false,
        };
        let pass = triggered || is_pass;
        if pass {
            // This pass covers every notification so far: absorb a stored permit so a
            // burst of notifications yields one pass (ones arriving during the pass
            // still queue exactly one more).
            tokio::select! {
                biased;
                _ = trigger.notified() => {}
                _ = async {} => {}
            }
        }
        let result = if pass {
            let t = target.clone();
            let now_ms = (config.clock)();
            blocking(move || {
                t.flush()?;
                t.maintain(now_ms)
            })
            .await
            .map(|_| ())
        } else {
            let t = target.clone();
            blocking(move || t.flush()).await.map(|_| ())
        };
        let now = Instant::now();
        match result {
            Ok(()) => {
                backoff = None;
                if pass {
                    report.passes += 1;
                    report.triggered += triggered as u64;
                    next_pass = now + pass_every;
                } else {
                    report.flushes += 1;
                }
                // A pass flushes too.
                next_flush = now + flush_every;
            }
            Err(_) => {
                report.failures += 1;
                let d = match backoff {
                    None => config.backoff_min,
                    Some(d) => (d * 2).min(config.backoff_max),
                };
                backoff = Some(d);
                next_pass = now + d;
            }
        }
    }
    let t = target.clone();
    report.final_flush_ok = blocking(move || t.flush()).await.is_ok();
    report
}

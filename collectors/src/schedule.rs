//! Time-based logic: retries with exponential backoff and the collection loop's ticks.
//! Kept apart from I/O so it can be tested on tokio's paused clock.

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::ScheduleConfig;
use crate::error::CollectError;

/// Delay before retry number `attempt` (0-based): `backoff * 2^attempt`, capped.
pub(crate) fn backoff_delay(schedule: &ScheduleConfig, attempt: u32) -> Duration {
    let factor = 1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX);
    schedule
        .backoff
        .saturating_mul(factor)
        .min(schedule.max_backoff)
}

/// Runs `op` until it succeeds, fails with a non-retryable error, or has been retried
/// `schedule.retries` times. `op` gets the attempt number.
pub(crate) async fn retry<T, F, Fut>(
    schedule: &ScheduleConfig,
    mut op: F,
) -> Result<T, CollectError>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, CollectError>>,
{
    let mut attempt = 0;
    loop {
        match op(attempt).await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_retryable() && attempt < schedule.retries => {
                let delay = backoff_delay(schedule, attempt);
                tracing::debug!(error = %e, attempt, ?delay, "retrying");
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A random delay in `[0, jitter)`.
pub(crate) fn jitter(jitter: Duration) -> Duration {
    if jitter.is_zero() {
        return Duration::ZERO;
    }
    let nanos = u64::try_from(jitter.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rand::rng().random_range(0..nanos))
}

/// Waits until `stop` says `true` (or its sender is gone, which also means stop).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    // An error means every sender was dropped: nobody can ask us to keep going.
    let _ = stop.wait_for(|s| *s).await;
}

/// Calls `cycle` every `schedule.interval` (plus jitter) until `stop` turns `true`.
///
/// Ticks stay on a fixed grid from the start, so the average period is the interval even
/// with jitter; a cycle longer than the interval skips the missed ticks instead of running
/// back to back. A stop request interrupts a cycle in flight (its future is dropped, which
/// aborts its requests).
pub(crate) async fn drive<F, Fut>(
    schedule: &ScheduleConfig,
    mut stop: watch::Receiver<bool>,
    mut cycle: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    if *stop.borrow() {
        return;
    }
    let start = Instant::now();
    let mut tick: u32 = 0;
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => return,
            () = cycle() => {}
        }
        tick = tick.saturating_add(1);
        let now = Instant::now();
        let mut due = start + schedule.interval.saturating_mul(tick);
        while due <= now && tick < u32::MAX {
            tick += 1;
            due = start + schedule.interval.saturating_mul(tick);
        }
        let wake = due + jitter(schedule.jitter);
        tokio::select! {
            _ = stopped(&mut stop) => return,
            () = tokio::time::sleep_until(wake) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn schedule() -> ScheduleConfig {
        ScheduleConfig {
            interval: Duration::from_secs(15),
            jitter: Duration::ZERO,
            timeout: Duration::from_secs(1),
            retries: 3,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(1),
            concurrency: 4,
        }
    }

    fn timeout_err() -> CollectError {
        CollectError::Timeout {
            url: "http://x".into(),
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let s = schedule();
        assert_eq!(backoff_delay(&s, 0), Duration::from_millis(500));
        assert_eq!(backoff_delay(&s, 1), Duration::from_secs(1));
        assert_eq!(backoff_delay(&s, 2), Duration::from_secs(1));
        assert_eq!(backoff_delay(&s, 40), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn retry_waits_backoff_then_succeeds() {
        let s = schedule();
        let calls = AtomicU32::new(0);
        let t0 = Instant::now();
        let out = retry(&s, |_| async {
            if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                Err(timeout_err())
            } else {
                Ok(7)
            }
        })
        .await;
        assert_eq!(out.ok(), Some(7));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        // 500 ms + 1 s of backoff, nothing else.
        assert_eq!(t0.elapsed(), Duration::from_millis(1500));
    }

    #[tokio::test(start_paused = true)]
    async fn retry_gives_up_after_retries() {
        let s = schedule();
        let calls = AtomicU32::new(0);
        let out: Result<(), _> = retry(&s, |_| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(timeout_err())
        })
        .await;
        assert!(matches!(out, Err(CollectError::Timeout { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_does_not_retry_client_errors() {
        let s = schedule();
        let calls = AtomicU32::new(0);
        let out: Result<(), _> = retry(&s, |_| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(CollectError::Status {
                url: "u".into(),
                status: 404,
                body: String::new(),
            })
        })
        .await;
        assert!(out.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn drive_ticks_on_interval_and_stops() {
        let s = schedule();
        let (tx, rx) = watch::channel(false);
        let count = Arc::new(AtomicU32::new(0));
        let c = count.clone();
        let task = tokio::spawn(async move {
            drive(&s, rx, || {
                let c = c.clone();
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                }
            })
            .await;
        });
        // Cycles at t = 0, 15, 30, 45, 60.
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(count.load(Ordering::SeqCst), 5);
        tx.send(true).ok();
        task.await.ok();
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(count.load(Ordering::SeqCst), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn drive_skips_missed_ticks_after_a_slow_cycle() {
        let s = schedule();
        let (tx, rx) = watch::channel(false);
        let count = Arc::new(AtomicU32::new(0));
        let c = count.clone();
        let task = tokio::spawn(async move {
            drive(&s, rx, || {
                let c = c.clone();
                async move {
                    // The first cycle takes 40 s (ticks 15 and 30 are missed).
                    if c.fetch_add(1, Ordering::SeqCst) == 0 {
                        tokio::time::sleep(Duration::from_secs(40)).await;
                    }
                }
            })
            .await;
        });
        // Cycles at t = 0 (ends 40), 45, 60.
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(count.load(Ordering::SeqCst), 3);
        tx.send(true).ok();
        task.await.ok();
    }

    #[tokio::test(start_paused = true)]
    async fn stop_interrupts_a_hanging_cycle() {
        let s = schedule();
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            drive(&s, rx, std::future::pending::<()>).await;
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        tx.send(true).ok();
        assert!(
            tokio::time::timeout(Duration::from_secs(1), task)
                .await
                .is_ok()
        );
    }

    #[test]
    fn jitter_is_bounded() {
        for _ in 0..100 {
            assert!(jitter(Duration::from_millis(10)) < Duration::from_millis(10));
        }
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
    }
}

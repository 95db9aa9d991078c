//! The engine's clock: wall time under `serve` and `place`, simulated time under `simulate`.
//!
//! Everything that judges time by milliseconds since the epoch — usage freshness,
//! reservation expiry, recent placements, the analytics window, store retention, the
//! API's ages — reads one [`Clock`] handed to it, never `SystemTime` itself, so the
//! simulator's simulated time reaches every part the same way the wall clock does under
//! `serve`. (Timers and backoffs use tokio's clock, which the simulator pauses and
//! advances in step with this one.)

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the epoch, now, by the wall clock.
pub fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A source of "now", ms since the epoch. Cheap to clone (a handle).
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> i64 + Send + Sync>);

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Clock({})", self.now_ms())
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::wall()
    }
}

impl Clock {
    /// The wall clock.
    pub fn wall() -> Clock {
        Clock(Arc::new(wall_ms))
    }

    /// A clock that shows whatever the returned [`ManualTime`] was last set to (the
    /// simulator's simulated time), starting at `start_ms`.
    pub fn manual(start_ms: i64) -> (Clock, ManualTime) {
        let t = ManualTime(Arc::new(AtomicI64::new(start_ms)));
        let read = t.0.clone();
        (Clock(Arc::new(move || read.load(Ordering::Relaxed))), t)
    }

    /// A clock reading `f` (tests).
    pub fn from_fn(f: impl Fn() -> i64 + Send + Sync + 'static) -> Clock {
        Clock(Arc::new(f))
    }

    /// Now, ms since the epoch.
    pub fn now_ms(&self) -> i64 {
        (self.0)()
    }

    /// The clock as a plain closure, for parts that take one (the store's maintenance).
    pub fn as_fn(&self) -> Arc<dyn Fn() -> i64 + Send + Sync> {
        self.0.clone()
    }
}

/// The setter of a [`Clock::manual`] clock.
#[derive(Clone, Debug)]
pub struct ManualTime(Arc<AtomicI64>);

impl ManualTime {
    /// Sets the time, ms since the epoch.
    pub fn set(&self, ms: i64) {
        self.0.store(ms, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_follows_its_setter_and_wall_clock_moves() {
        let (c, t) = Clock::manual(5);
        assert_eq!(c.now_ms(), 5);
        t.set(42);
        assert_eq!(c.clone().now_ms(), 42);
        assert_eq!((c.as_fn())(), 42);
        let w = Clock::wall();
        assert!(w.now_ms() > 1_700_000_000_000);
    }
}

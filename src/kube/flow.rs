//! Flow control toward the API server for binds: a congestion window on binds in flight and
//! a client-side rate limit with kube-scheduler's `clientConnection.qps`/`burst` semantics.
//!
//! The scheduling loop decides faster than a loaded API server can bind. Without a bound,
//! every decided pod's bind is sent at once; the server queues them, they time out, the
//! retries pile on, and the server stays saturated (measured on the kit: 24,795 binds timed
//! out at 5,000 nodes / 10,000 pods). The window works like TCP's:
//!
//! - at most `window` binds are in flight; the others wait here, in memory (the pods stay
//!   assumed, so later cycles count them);
//! - a bind answered within `latencyTarget` grows the window by one per window's worth of
//!   such answers (additive increase);
//! - a `429 Too Many Requests`, a `5xx`, a timeout, or an answer slower than
//!   `latencyTarget` halves it, at most once per `latencyTarget` (multiplicative decrease,
//!   so one burst of slow answers is one signal, not a collapse to the minimum);
//! - a `Retry-After` (the `429`'s `details.retryAfterSeconds`) pauses every bind until then.
//!
//! The rate limit is a token bucket (`qps`, `burst`): kube-scheduler's client defaults are
//! 50/100, which would cap headroom far below what a server sustains, so headroom's default is
//! no rate limit — the window adapts to what the server answers instead. Set `qps` where a
//! cluster operator wants a hard ceiling.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::serve::FlowConfig;

/// How one bind ended, for the window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Signal {
    /// Answered (success or a final answer such as 409): its latency.
    Answered(Duration),
    /// `429`: the server asks to slow down, optionally saying for how long.
    Throttled(Option<Duration>),
    /// `5xx` or no answer in time.
    Overloaded,
}

#[derive(Debug)]
struct State {
    window: f64,
    in_flight: u32,
    paused_until: Option<Instant>,
    last_decrease: Option<Instant>,
    tokens: f64,
    refilled: Instant,
    throttled: u64,
    decreases: u64,
}

/// Counters and the current window, for metrics and reports.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FlowStats {
    /// Current window.
    pub window: u32,
    /// Binds in flight.
    pub in_flight: u32,
    /// `429` answers seen.
    pub throttled: u64,
    /// Times the window was halved.
    pub decreases: u64,
}

/// The flow controller, shared by every bind.
#[derive(Debug)]
pub struct BindFlow {
    config: FlowConfig,
    state: Mutex<State>,
    changed: Notify,
    window_gauge: Gauge,
    in_flight_gauge: Gauge,
    /// Binds waiting for a place right now.
    waiting: std::sync::atomic::AtomicU32,
}

/// A bind's place in the window; report how it ended with [`Permit::done`]. Dropping it
/// without reporting frees the place and counts as an answer at the latency target.
#[derive(Debug)]
pub struct Permit {
    flow: Arc<BindFlow>,
    started: Instant,
    reported: bool,
}

impl Permit {
    /// When the bind was let through.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Reports how the bind ended and frees its place.
    pub fn done(mut self, signal: Signal) {
        self.reported = true;
        self.flow.release(signal);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.reported {
            let target = self.flow.config.latency_target;
            self.flow.release(Signal::Answered(target));
        }
    }
}

impl BindFlow {
    /// A controller with `config` (validated by the caller).
    pub fn new(config: FlowConfig) -> Arc<BindFlow> {
        let now = Instant::now();
        Arc::new(BindFlow {
            state: Mutex::new(State {
                window: f64::from(config.initial_window),
                in_flight: 0,
                paused_until: None,
                last_decrease: None,
                tokens: f64::from(config.burst),
                refilled: now,
                throttled: 0,
                decreases: 0,
            }),
            window_gauge: Gauge::default(),
            in_flight_gauge: Gauge::default(),
            waiting: std::sync::atomic::AtomicU32::new(0),
            config,
            changed: Notify::new(),
        })
    }

    /// Registers `headroom_bind_window` and `headroom_bind_in_flight` on `metrics`.
    pub fn register(&self, metrics: &crate::metrics::Metrics) {
        self.publish(&self.lock());
        metrics.register(
            "headroom_bind_window",
            "Binds the flow controller lets be in flight at once (congestion window)",
            self.window_gauge.clone(),
        );
        metrics.register(
            "headroom_bind_in_flight",
            "Binds in flight toward the API server",
            self.in_flight_gauge.clone(),
        );
    }

    fn publish(&self, s: &State) {
        self.window_gauge.set(s.window as i64);
        self.in_flight_gauge.set(i64::from(s.in_flight));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current numbers.
    pub fn stats(&self) -> FlowStats {
        let s = self.lock();
        FlowStats {
            window: s.window as u32,
            in_flight: s.in_flight,
            throttled: s.throttled,
            decreases: s.decreases,
        }
    }

    /// Whether binds are waiting for a place: lower-priority writes (annotations,
    /// conditions) yield to them.
    pub fn binds_waiting(&self) -> bool {
        self.waiting.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    /// Waits for a place in the window (and a token, and the end of a pause).
    pub async fn acquire(self: &Arc<Self>) -> Permit {
        struct Waiting<'a>(&'a std::sync::atomic::AtomicU32);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        self.waiting
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _waiting = Waiting(&self.waiting);
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wait = {
                let mut s = self.lock();
                let now = Instant::now();
                if let Some(until) = s.paused_until {
                    if until > now {
                        Some(until)
                    } else {
                        s.paused_until = None;
                        None
                    }
                } else {
                    None
                }
                .or_else(|| {
                    if s.in_flight >= (s.window as u32).max(1) {
                        // Wait for a release.
                        return Some(now + Duration::from_secs(3600));
                    }
                    if self.config.qps > 0.0 {
                        let elapsed = now.saturating_duration_since(s.refilled).as_secs_f64();
                        s.tokens = (s.tokens + elapsed * self.config.qps)
                            .min(f64::from(self.config.burst));
                        s.refilled = now;
                        if s.tokens < 1.0 {
                            let secs = (1.0 - s.tokens) / self.config.qps;
                            return Some(now + Duration::from_secs_f64(secs));
                        }
                        s.tokens -= 1.0;
                    }
                    s.in_flight += 1;
                    self.publish(&s);
                    None
                })
            };
            match wait {
                None => {
                    return Permit {
                        flow: self.clone(),
                        started: Instant::now(),
                        reported: false,
                    };
                }
                Some(until) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(until) => {}
                    }
                }
            }
        }
    }

    fn release(&self, signal: Signal) {
        let now = Instant::now();
        {
            let mut s = self.lock();
            s.in_flight = s.in_flight.saturating_sub(1);
            let congested = match signal {
                Signal::Answered(latency) => latency > self.config.latency_target,
                Signal::Throttled(retry_after) => {
                    s.throttled += 1;
                    if let Some(d) = retry_after {
                        let until = now + d;
                        s.paused_until = Some(s.paused_until.map_or(until, |p| p.max(until)));
                    }
                    true
                }
                Signal::Overloaded => true,
            };
            let (min, max) = (
                f64::from(self.config.min_window),
                f64::from(self.config.max_window),
            );
            if congested {
                // One decrease per latency target: the binds in flight when the server
                // slowed down all report it, and that is one signal.
                let recent = s
                    .last_decrease
                    .is_some_and(|t| now.saturating_duration_since(t) < self.config.latency_target);
                if !recent {
                    s.window = (s.window / 2.0).max(min);
                    s.last_decrease = Some(now);
                    s.decreases += 1;
                }
            } else {
                s.window = (s.window + 1.0 / s.window.max(1.0)).min(max);
            }
            self.publish(&s);
        }
        self.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(initial: u32) -> Arc<BindFlow> {
        BindFlow::new(FlowConfig {
            initial_window: initial,
            min_window: 1,
            max_window: 64,
            latency_target: Duration::from_millis(500),
            qps: 0.0,
            burst: 100,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn window_bounds_binds_in_flight_and_grows_on_fast_answers() {
        let f = flow(2);
        let a = f.acquire().await;
        let b = f.acquire().await;
        // A third waits for a release.
        let f2 = f.clone();
        let third = tokio::spawn(async move { f2.acquire().await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!third.is_finished());
        a.done(Signal::Answered(Duration::from_millis(5)));
        let c = third.await.unwrap();
        assert_eq!(f.stats().in_flight, 2);
        // Fast answers: +1 per window's worth.
        b.done(Signal::Answered(Duration::from_millis(5)));
        c.done(Signal::Answered(Duration::from_millis(5)));
        assert!(f.stats().window >= 3, "{:?}", f.stats());
    }

    #[tokio::test(start_paused = true)]
    async fn congestion_halves_once_per_target_and_retry_after_pauses() {
        let f = flow(32);
        let permits: Vec<Permit> = futures::future::join_all((0..8).map(|_| f.acquire())).await;
        // A burst of timeouts is one signal.
        for p in permits {
            p.done(Signal::Overloaded);
        }
        assert_eq!(f.stats().window, 16);
        assert_eq!(f.stats().decreases, 1);
        tokio::time::advance(Duration::from_millis(600)).await;
        let p = f.acquire().await;
        p.done(Signal::Answered(Duration::from_secs(2)));
        assert_eq!(f.stats().window, 8, "a slow answer is congestion too");
        tokio::time::advance(Duration::from_millis(600)).await;
        let p = f.acquire().await;
        p.done(Signal::Throttled(Some(Duration::from_secs(3))));
        assert_eq!(f.stats().window, 4);
        assert_eq!(f.stats().throttled, 1);
        // Paused until Retry-After has passed.
        let t0 = Instant::now();
        let p = f.acquire().await;
        assert!(Instant::now() - t0 >= Duration::from_secs(3));
        drop(p);
        // Never below the minimum.
        for _ in 0..10 {
            tokio::time::advance(Duration::from_secs(1)).await;
            f.acquire().await.done(Signal::Overloaded);
        }
        assert_eq!(f.stats().window, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limit_is_a_token_bucket() {
        let f = BindFlow::new(FlowConfig {
            qps: 10.0,
            burst: 5,
            max_window: 512,
            ..FlowConfig::default()
        });
        let t0 = Instant::now();
        for _ in 0..15 {
            f.acquire()
                .await
                .done(Signal::Answered(Duration::from_millis(1)));
        }
        // 5 at once, then 10 more at 10/s.
        let took = Instant::now() - t0;
        assert!(
            took >= Duration::from_millis(950) && took <= Duration::from_millis(1100),
            "{took:?}"
        );
    }

    #[test]
    fn config_errors_name_the_field() {
        for (c, field) in [
            (
                FlowConfig {
                    min_window: 0,
                    ..FlowConfig::default()
                },
                "minWindow",
            ),
            (
                FlowConfig {
                    initial_window: 1000,
                    ..FlowConfig::default()
                },
                "initialWindow",
            ),
            (
                FlowConfig {
                    qps: f64::NAN,
                    ..FlowConfig::default()
                },
                "qps",
            ),
            (
                FlowConfig {
                    latency_target: Duration::ZERO,
                    ..FlowConfig::default()
                },
                "latencyTarget",
            ),
        ] {
            let (f, _) = c.validate().unwrap_err();
            assert_eq!(f, format!("serve.binding.{field}"));
        }
        assert!(FlowConfig::default().validate().is_ok());
    }
}

//! The analytics layer: turns the store's history into the usage numbers the scheduler
//! places pods by.
//!
//! - [`profiles`]: per builder, percentiles of per-run CPU and memory over its recent runs;
//! - [`nodes`]: per node, current and windowed CPU, memory and disk usage (the headroom
//!   the scheduler decides on adds its recent placements: [`headroom_scheduler::usage::Headroom`]);
//! - [`pods`]: per running pod, what its containers use now (how much of a just-placed
//!   pod's prediction its node's samples already show).
//!
//! [`compute`] builds a [`UsageView`] with polars (lazy API); [`run_refresh`] recomputes it
//! periodically and on demand off the async threads and publishes it as an
//! `Arc<UsageView>` on a `watch` channel. The scheduling cycle only ever reads that
//! immutable snapshot, so it never waits on polars or on sled.
//!
//! Every quantile here uses [`QUANTILE_METHOD`].

pub mod nodes;
pub mod pods;
pub mod profiles;
pub mod samples;
pub mod windows;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use headroom_storage::Store;
use polars::prelude::{PolarsError, QuantileMethod};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, sleep_until};

pub use headroom_scheduler::view::UsageView;

pub use nodes::{NodeParams, NodeSamples, NodeUsage, Stat, node_usage};
pub use profiles::{
    BuilderProfile, PerRun, Percentiles, ProfileParams, RunColumns, builder_profiles,
};
pub use windows::{NodeWindows, WindowStat};

/// The interpolation of every quantile in this module: linear between the two nearest
/// ranks, at position `(n − 1) · q` of the sorted values (NumPy's default, Hyndman–Fan
/// type 7). Chosen because it is continuous in `q` and exact on small samples, so that
/// p95 of a handful of runs is not just the maximum.
pub const QUANTILE_METHOD: QuantileMethod = QuantileMethod::Linear;

/// Errors of the analytics layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the store failed.
    #[error("store: {0}")]
    Storage(#[from] headroom_storage::Error),
    /// A polars computation failed.
    #[error("polars: {0}")]
    Polars(#[from] PolarsError),
    /// The configuration is invalid.
    #[error("invalid analytics configuration: {0}")]
    Config(String),
    /// The blocking computation task panicked or was cancelled.
    #[error("analytics task: {0}")]
    Task(String),
}

/// Configuration of the analytics layer. In YAML, durations are humantime strings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct AnalyticsConfig {
    /// How often the usage view is recomputed (it is also recomputed on demand).
    /// Default `15s`, the usual scrape interval: refreshing faster finds no new data.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub refresh_interval: Duration,
    /// Builder profiles use at most this many of the builder's newest runs. Default `20`.
    pub profile_runs: usize,
    /// If set, builder profiles use only runs that ended within this long before now.
    /// Default none (the last `profileRuns` runs, however old).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "Option<String>", extend("x-duration" = true))]
    pub profile_window: Option<Duration>,
    /// Which per-run number a profile is built from: `p95` (default), `max` or `mean`.
    pub per_run: PerRun,
    /// Window of node samples behind the windowed node statistics. Default `2m`: long
    /// enough that one quiet scrape does not hide a busy node, short enough that memory
    /// freed by pods that ended is seen as free soon (a CI farm turns over every few
    /// minutes; with a 15-minute p95 a node looks as full as it was a quarter hour ago,
    /// which measured as a 30–40 % worse spread of real memory in `headroom simulate`).
    /// A pod that ended comes off every sample of the window it was in, by what it used
    /// then (while its samples are in the window), so an ended build does not keep its
    /// node looking full for the window; the running pods' own swings stay in it. A farm
    /// whose builds run 2–3 minutes turns over faster still and may want `30s`
    /// (`examples/real-nodes-config.yaml`).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub node_window: Duration,
    /// Quantile of node usage over `nodeWindow`, in `[0, 1]`; free disk uses `1 − q`.
    /// Default `0.95`.
    pub node_quantile: f64,
    /// Whether the view also holds every node's usage over the peers' windows
    /// ([`windows`]: 5 minutes to a day). Not configured: the engine sets it when a profile
    /// enables a peer plugin, so that only they pay for a day of samples per refresh.
    #[serde(skip)]
    pub peer_windows: bool,
}

impl Default for AnalyticsConfig {
    fn default() -> Self {
        AnalyticsConfig {
            refresh_interval: Duration::from_secs(15),
            profile_runs: 20,
            profile_window: None,
            per_run: PerRun::P95,
            node_window: Duration::from_secs(120),
            node_quantile: 0.95,
            peer_windows: false,
        }
    }
}

impl AnalyticsConfig {
    /// Checks values serde cannot (ranges).
    pub fn validate(&self) -> Result<(), Error> {
        if !(0.0..=1.0).contains(&self.node_quantile) {
            return Err(Error::Config(format!(
                "nodeQuantile must be in [0, 1], got {}",
                self.node_quantile
            )));
        }
        if self.profile_runs == 0 {
            return Err(Error::Config("profileRuns must be at least 1".into()));
        }
        Ok(())
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Computes a fresh [`UsageView`] as of `now_ms`. Blocking (store reads and polars):
/// async callers run it in `spawn_blocking`, as [`run_refresh`] does.
pub fn compute(store: &Store, config: &AnalyticsConfig, now_ms: i64) -> Result<UsageView, Error> {
    config.validate()?;
    let profile = ProfileParams {
        last_runs: config.profile_runs,
        ended_after_ms: config.profile_window.map(|w| now_ms.saturating_sub(ms(w))),
        per_run: config.per_run,
    };
    let node = NodeParams {
        start_ms: now_ms.saturating_sub(ms(config.node_window)).max(0),
        end_ms: now_ms,
        quantile: config.node_quantile,
    };
    let (pods, pod_windows) = pods::pod_usage(store, node.start_ms, node.end_ms)?;
    Ok(UsageView {
        generated_ms: now_ms,
        builders: builder_profiles(store, &profile)?,
        nodes: node_usage(store, &node)?,
        placements: store.placement_histories()?.into_iter().collect(),
        pods,
        pod_windows,
        windows: if config.peer_windows {
            windows::node_windows(store, now_ms)?
        } else {
            HashMap::new()
        },
    })
}

/// Counters returned by [`run_refresh`] when it stops.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RefreshReport {
    /// Views computed and published.
    pub published: u64,
    /// Failed computations (the previous view stayed published).
    pub failures: u64,
    /// Computations started by the trigger (after coalescing).
    pub triggered: u64,
}

/// Publishes a fresh [`UsageView`] as of `clock` on `publish` at start, every `refresh_interval` and
/// whenever `trigger` is notified, until `shutdown` completes or every receiver is gone.
///
/// - the computation runs on tokio's blocking pool, so the async threads (and the
///   scheduling cycle) never block on polars or sled;
/// - notifications that arrive before a computation starts are all served by it; any
///   arriving while it runs collapse into one more, so a burst costs at most two;
/// - on failure the error is logged and the previous view stays published (a stale view
///   is better than none: each entry carries its `newest_ms`, so readers can judge age);
/// - the interval restarts after each computation, so a slow one never causes a backlog.
pub async fn run_refresh(
    store: Store,
    config: AnalyticsConfig,
    clock: headroom_scheduler::clock::Clock,
    publish: watch::Sender<Arc<UsageView>>,
    trigger: Arc<Notify>,
    shutdown: impl Future<Output = ()>,
) -> RefreshReport {
    let mut report = RefreshReport::default();
    let every = config.refresh_interval.max(Duration::from_millis(1));
    let config = Arc::new(config);
    // The first view is due at once: until then the scheduler has no usage at all.
    let mut next = Instant::now();
    tokio::pin!(shutdown);
    loop {
        let triggered = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            _ = publish.closed() => break,
            _ = trigger.notified() => true,
            _ = sleep_until(next) => false,
        };
        // This computation covers every notification so far: absorb a stored permit.
        tokio::select! {
            biased;
            _ = trigger.notified() => {}
            _ = async {} => {}
        }
        let (s, c) = (store.clone(), Arc::clone(&config));
        let now_ms = clock.now_ms();
        let result = tokio::task::spawn_blocking(move || compute(&s, &c, now_ms))
            .await
            .map_err(|e| Error::Task(e.to_string()))
            .and_then(|r| r);
        match result {
            Ok(view) => {
                tracing::debug!(
                    builders = view.builders.len(),
                    nodes = view.nodes.len(),
                    triggered,
                    "usage view refreshed"
                );
                publish.send_replace(Arc::new(view));
                report.published += 1;
                report.triggered += u64::from(triggered);
            }
            Err(e) => {
                tracing::warn!(error = %e, "usage view refresh failed; keeping the previous view");
                report.failures += 1;
            }
        }
        next = Instant::now() + every;
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_storage::{Labels, RunRecord, StoreConfig, UsageSummary};

    #[test]
    fn config_defaults_and_yaml() {
        let c: AnalyticsConfig = serde_norway::from_str("{}").unwrap();
        assert_eq!(c, AnalyticsConfig::default());
        let c: AnalyticsConfig = serde_norway::from_str(
            "refreshInterval: 30s\nprofileRuns: 5\nprofileWindow: 2h\nperRun: max\nnodeWindow: 5m\nnodeQuantile: 0.9\n",
        )
        .unwrap();
        assert_eq!(c.refresh_interval, Duration::from_secs(30));
        assert_eq!(c.profile_runs, 5);
        assert_eq!(c.profile_window, Some(Duration::from_secs(7200)));
        assert_eq!(c.per_run, PerRun::Max);
        assert_eq!(c.node_window, Duration::from_secs(300));
        assert_eq!(c.node_quantile, 0.9);
        assert!(serde_norway::from_str::<AnalyticsConfig>("bogus: 1").is_err());
        let bad = AnalyticsConfig {
            node_quantile: 1.5,
            ..AnalyticsConfig::default()
        };
        assert!(matches!(bad.validate(), Err(Error::Config(_))));
    }

    #[test]
    fn compute_builds_view() {
        let store = Store::open_temporary(StoreConfig::default()).unwrap();
        let now = 10_000_000;
        let n1 = Labels::new([("node", "n1")]).unwrap();
        store
            .append("node_cpu_usage_cores", &n1, now - 1000, 2.0)
            .unwrap();
        store
            .append("node_memory_working_set_bytes", &n1, now - 1000, 3e9)
            .unwrap();
        // Older than the 15 min window: ignored.
        let n2 = Labels::new([("node", "n2")]).unwrap();
        store
            .append("node_cpu_usage_cores", &n2, now - 3_600_000, 2.0)
            .unwrap();
        store
            .append("node_memory_working_set_bytes", &n2, now - 3_600_000, 3e9)
            .unwrap();
        let s = UsageSummary {
            mean: 1.0,
            p95: 2.0,
            max: 3.0,
        };
        store
            .put_run(
                "ns/Job/x",
                &RunRecord {
                    pod_uid: "u".into(),
                    node: "n1".into(),
                    start_ms: now - 5000,
                    end_ms: now - 4000,
                    cpu: s,
                    memory: s,
                },
            )
            .unwrap();
        let view = compute(&store, &AnalyticsConfig::default(), now).unwrap();
        assert_eq!(view.generated_ms, now);
        assert_eq!(view.builder("ns/Job/x").unwrap().cpu.p99, 2.0);
        assert!(view.node("n2").is_none());
        assert_eq!(view.node("n1").unwrap().fs_available_bytes, None);
        assert_eq!(view.node("n1").unwrap().newest_ms, now - 1000);

        // A profile window that excludes the run drops the builder.
        let windowed = AnalyticsConfig {
            profile_window: Some(Duration::from_secs(1)),
            ..AnalyticsConfig::default()
        };
        assert!(compute(&store, &windowed, now).unwrap().builders.is_empty());
    }

    /// Lets the blocking computation finish: on the paused clock, yielding lets the
    /// runtime poll the `spawn_blocking` join handle once the thread is done.
    async fn wait_version(rx: &mut watch::Receiver<Arc<UsageView>>) {
        tokio::time::timeout(Duration::from_secs(3600), rx.changed())
            .await
            .expect("a view is published")
            .expect("sender alive");
    }

    #[tokio::test(start_paused = true)]
    async fn refresh_publishes_on_start_trigger_and_interval() {
        let store = Store::open_temporary(StoreConfig::default()).unwrap();
        let n1 = Labels::new([("node", "n1")]).unwrap();
        let now = headroom_scheduler::clock::wall_ms();
        store.append("node_cpu_usage_cores", &n1, now, 1.0).unwrap();
        store
            .append("node_memory_working_set_bytes", &n1, now, 1.0)
            .unwrap();
        let (tx, mut rx) = watch::channel(Arc::new(UsageView::default()));
        let trigger = Arc::new(Notify::new());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let config = AnalyticsConfig {
            refresh_interval: Duration::from_secs(15),
            ..AnalyticsConfig::default()
        };
        let task = tokio::spawn(run_refresh(
            store,
            config,
            headroom_scheduler::clock::Clock::wall(),
            tx,
            Arc::clone(&trigger),
            async move {
                let _ = stop_rx.await;
            },
        ));

        // At start.
        let t0 = Instant::now();
        wait_version(&mut rx).await;
        assert!(rx.borrow_and_update().node("n1").is_some());

        // On trigger, long before the interval: a burst coalesces into one computation.
        tokio::time::sleep(Duration::from_secs(1)).await;
        trigger.notify_one();
        trigger.notify_one();
        wait_version(&mut rx).await;
        rx.borrow_and_update();
        assert!(Instant::now() - t0 < Duration::from_secs(15));

        // On the interval, with no trigger.
        let before = Instant::now();
        wait_version(&mut rx).await;
        rx.borrow_and_update();
        assert!(Instant::now() - before >= Duration::from_secs(14));

        stop_tx.send(()).unwrap();
        let report = task.await.unwrap();
        assert_eq!(report.failures, 0);
        assert_eq!(report.triggered, 1);
        assert_eq!(report.published, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn refresh_keeps_previous_view_on_error() {
        let store = Store::open_temporary(StoreConfig::default()).unwrap();
        let (tx, mut rx) = watch::channel(Arc::new(UsageView::default()));
        let bad = AnalyticsConfig {
            node_quantile: 2.0,
            ..AnalyticsConfig::default()
        };
        let trigger = Arc::new(Notify::new());
        let task = tokio::spawn(run_refresh(
            store,
            bad,
            headroom_scheduler::clock::Clock::wall(),
            tx,
            Arc::clone(&trigger),
            tokio::time::sleep(Duration::from_secs(40)),
        ));
        let report = task.await.unwrap();
        // Start, 15 s, 30 s: all failed, nothing published.
        assert_eq!(report.failures, 3);
        assert_eq!(report.published, 0);
        // The sender is gone now, so `has_changed` would report the closed channel;
        // the initial empty view is still what the channel holds.
        assert_eq!(rx.borrow_and_update().generated_ms, 0);
    }
}

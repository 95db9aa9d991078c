//! The engine: the one composition root behind `headroom serve`, `simulate` and `place`.
//!
//! It is built from the [`Config`] and a few injected [`Parts`] — a [`Clock`] (wall or
//! simulated), a [`Store`], where reservations come from — and owns everything else:
//!
//! - the [`Scheduler`] with one framework per profile and its plugin dependencies (the
//!   `usage` policy, builder identity, reservations), built by [`PluginDeps::from_config`];
//! - the [`SchedulingQueue`], configured from `scheduler` (backoffs), with the profiles'
//!   own PreEnqueue plugins as its gate;
//! - the [`ClusterState`] every cluster feed writes to (the API server's watches, a
//!   scenario, files), which also lists pods for the collectors' builder identity;
//! - one [`Metrics`] registry (the collectors' and the cluster feed's counters included);
//! - the decision sink and the in-memory [`DecisionLog`] behind `/explain`;
//! - the [`SchedulingLoop`] (with a [`MeteredBinder`] around whatever binder the mode
//!   brings: the API, an instant one);
//! - the background work, started by [`Engine::start`]: the collectors, the analytics
//!   refresh, store maintenance (flush every `storage.flushInterval`, retention and
//!   rollups every `storage.maintenanceInterval`, with backoff), the queue's flushes, the
//!   housekeeping tick — and phased shutdown ([`phases`]).
//!
//! Modes are thin adapters. `serve` ([`crate::kube::serve`]) starts everything on
//! timers ([`Drive::Timers`]) and adds the API server's watches, binder, events and
//! leadership. `simulate` ([`crate::simulate`]) drives the same engine by hand on
//! simulated time ([`Drive::Manual`]): it feeds the cluster state, calls
//! [`Engine::housekeeping`], [`Engine::refresh_usage`], [`Engine::maintain_store`] and
//! [`Engine::flush_queue`] at the simulated instants the timers would fire, and runs the
//! real [`SchedulingLoop`] until the queue settles. `place` uses the engine's scheduler
//! for what-if cycles.

pub mod phases;

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use headroom_storage::{
    FlushStats, MaintenanceConfig, MaintenanceReport, MaintenanceStats, MaintenanceTarget, Store,
};
use tokio::sync::{Notify, watch};

use crate::analytics::{self, UsageView};
use crate::api::ApiState;
use crate::cluster::{ClusterState, FeedStats, NodeObserver};
use crate::config::{Config, ConfigError};
use crate::decisions::{ChannelBounds, DecisionLog, OutcomeHandler, Sink, SinkReport};
use crate::logging::Trouble;
use crate::metrics::{MeteredBinder, Metrics, MetricsOptions};
use crate::scheduling_loop::{LoopOptions, LoopStats, SchedulingLoop};
use headroom_scheduler::clock::Clock;
use headroom_scheduler::framework::BindPlugin;
use headroom_scheduler::plugins::PluginDeps;
use headroom_scheduler::queue::{ClusterEvent, SchedulingQueue};
use headroom_scheduler::reservation::{InMemoryReservations, ReservationSource};
use headroom_scheduler::scheduler::Scheduler;
pub use phases::{Phase, Phases};

/// How often the housekeeping tick runs under [`Drive::Timers`]: the scheduler's clock,
/// expired assumed pods, expired reservations.
pub const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(1);

/// Why the engine could not be built or a step of it failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] headroom_storage::Error),
    /// The analytics failed.
    #[error("analytics: {0}")]
    Analytics(#[from] analytics::Error),
    /// The collectors could not be built.
    #[error("collectors: {0}")]
    Collectors(#[from] headroom_collectors::CollectError),
    /// A background task could not be started or failed.
    #[error("task: {0}")]
    Task(String),
}

/// What a mode brings to the engine.
pub struct Parts {
    /// "Now": the wall clock, or the simulator's simulated time.
    pub clock: Clock,
    /// The store (samples, runs, placements, decisions). `None` for a what-if run with
    /// nothing to read or keep (`place` without `--data-dir`): the usage view is then
    /// empty and nothing is written.
    pub store: Option<Store>,
    /// Where reservations come from (the `Reservation` custom resources under `serve`, a
    /// scenario or usage file otherwise). Default: none.
    pub reservations: Option<Arc<dyn ReservationSource>>,
    /// Told when nodes come and go (the reservation cache under `serve`).
    pub nodes_observer: Option<Arc<dyn NodeObserver>>,
    /// Queue the unassigned pods whose `spec.schedulerName` is one of the profiles. False:
    /// an extender only, whose pods kube-scheduler schedules.
    pub schedule: bool,
    /// Build the numbers behind every verdict in each decision (`place`, `simulate
    /// --serve`); off under `serve`, where the cycle's time matters more.
    pub explain: bool,
    /// How much the channel from the scheduling loop to the decision sink holds (default
    /// [`ChannelBounds::default`]; tests shrink it to show that overload sheds only
    /// explanations).
    pub decision_channel: ChannelBounds,
    /// Preemption is acted on after the cycle by the mode's outcome handler (`serve`'s
    /// reporter evicts the victims), which tells the queue when it is done
    /// ([`SchedulingQueue::preemption_done`]): until then the preemptor waits, as with
    /// upstream's async preemption. False (the default) where nothing tells the queue: a
    /// preemptor is then retried on the events its rejectors registered.
    pub async_preemption: bool,
}

impl Parts {
    /// Parts with `clock` and `store`, no reservations, scheduling on, no explanations.
    pub fn new(clock: Clock, store: Store) -> Parts {
        Parts {
            clock,
            store: Some(store),
            reservations: None,
            nodes_observer: None,
            schedule: true,
            explain: false,
            decision_channel: ChannelBounds::default(),
            async_preemption: false,
        }
    }
}

/// How the engine's background work is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drive {
    /// On tokio timers (`serve`): collectors, analytics refresh, store maintenance, queue
    /// flushes and housekeeping all run by themselves.
    Timers,
    /// By the caller (`simulate`): only the decision sink runs by itself; the caller
    /// invokes the steps at the instants it chooses.
    Manual,
}

/// The one scheduler pipeline.
pub struct Engine {
    config: Arc<Config>,
    clock: Clock,
    scheduler: Arc<Scheduler>,
    queue: Arc<SchedulingQueue>,
    cluster: Arc<ClusterState>,
    deps: PluginDeps,
    metrics: Arc<Metrics>,
    store: Option<Store>,
    /// The store's failures (decision writes, flushes, retention passes), logged when they
    /// start, once per interval while they last, and when they end.
    store_trouble: Arc<Trouble>,
    /// Set once something the engine cannot go on without failed for good (see
    /// [`Engine::fatal`]).
    fatal: watch::Sender<Option<String>>,
    log: Arc<DecisionLog>,
    view: watch::Sender<Arc<UsageView>>,
    refresh_trigger: Arc<Notify>,
    decisions: crate::decisions::DecisionSender,
    decisions_rx: Mutex<Option<crate::decisions::DecisionReceiver>>,
    explain: bool,
    /// [`Parts::async_preemption`].
    async_preemption: bool,
    /// The queue's tail the warm wait reads (`usage.warmWait`), kept across the loops a
    /// leader builds; `None` with the warm wait off.
    tail: Option<Arc<Mutex<headroom_scheduler::usage::QueueTail>>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("profiles", &self.config.profiles.len())
            .field("queue", &self.queue.len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Builds the engine: validates `config`, builds the profiles with their plugin
    /// dependencies, the queue, the cluster state and the metrics.
    pub fn new(mut config: Config, parts: Parts) -> Result<Arc<Engine>, EngineError> {
        config.validate()?;
        // Only the peers' plugins read the long windows; without them no refresh reads a
        // day of samples.
        let core = config.core();
        config.analytics.peer_windows |=
            headroom_scheduler::plugins::registry::needs_peer_windows(&core);
        crate::config::validate_config(&config)?;
        let reservations = parts
            .reservations
            .unwrap_or_else(|| Arc::new(InMemoryReservations::default()));
        let deps = PluginDeps::from_config(&core).with_reservations(reservations);
        let scheduler = Arc::new(Scheduler::with_deps(&core, &deps)?);
        let now = parts.clock.now_ms();
        scheduler.cache().update(|c| c.set_now_ms(now));
        let queue = Arc::new(SchedulingQueue::with_pre_enqueue(
            config.scheduler.queue(),
            scheduler.pre_enqueue_fn(),
            scheduler.queueing_hints(),
        ));
        let metrics = Arc::new(Metrics::new(MetricsOptions::default()));
        metrics.register(
            "headroom_scheduler_snapshot_copies",
            "Changes to the scheduler's snapshot that copied all of it because a reader held it",
            scheduler.cache().copies(),
        );
        metrics.register(
            "headroom_scheduler_cache_write_panics",
            "Cache writes (a change or what follows it) that panicked; caught, the others applied",
            scheduler.cache().panics(),
        );
        let feed = FeedStats::default();
        feed.register(&metrics);
        let names: HashSet<String> = if parts.schedule {
            config
                .profiles
                .iter()
                .map(|p| p.scheduler_name.clone())
                .collect()
        } else {
            HashSet::new()
        };
        let cluster = Arc::new(ClusterState::new(
            scheduler.cache().clone(),
            queue.clone(),
            parts.nodes_observer,
            names,
            feed,
        ));
        let (view, _) = watch::channel(Arc::new(UsageView::default()));
        let (decisions, rx) = crate::decisions::decision_channel(
            parts.decision_channel.records,
            parts.decision_channel.bytes,
        );
        metrics.register(
            "headroom_scheduler_decisions_summarized",
            "Decisions sent to the sink as summaries (the explanation shortened) because the queued records were over their byte budget",
            decisions.summarized().clone(),
        );
        let warm_wait = &config.usage.warm_wait;
        let tail = warm_wait.enabled.then(|| {
            Arc::new(Mutex::new(headroom_scheduler::usage::QueueTail::new(
                warm_wait.tail_window,
            )))
        });
        Ok(Arc::new(Engine {
            tail,
            config: Arc::new(config),
            clock: parts.clock,
            scheduler,
            queue,
            cluster,
            deps,
            metrics,
            store_trouble: Arc::new(Trouble::new(
                match parts.store.as_ref().and_then(Store::path) {
                    Some(p) => format!("the store at {}", p.display()),
                    None => "the store".to_string(),
                },
                "writing again",
            )),
            store: parts.store,
            fatal: watch::channel(None).0,
            log: Arc::new(DecisionLog::default()),
            view,
            refresh_trigger: Arc::new(Notify::new()),
            decisions,
            decisions_rx: Mutex::new(Some(rx)),
            explain: parts.explain,
            async_preemption: parts.async_preemption,
        }))
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The scheduler (profiles, the cycle, and the cache it reads).
    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.scheduler
    }

    /// The queue of pending pods.
    pub fn queue(&self) -> &Arc<SchedulingQueue> {
        &self.queue
    }

    /// The cluster state every feed writes to.
    pub fn cluster(&self) -> &Arc<ClusterState> {
        &self.cluster
    }

    /// What the plugins hold (usage policy, identity rule, reservations).
    pub fn deps(&self) -> &PluginDeps {
        &self.deps
    }

    /// The metrics registry `/metrics` serves.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The store, when the engine has one.
    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    /// The in-memory decision log behind `/explain`.
    pub fn decision_log(&self) -> &Arc<DecisionLog> {
        &self.log
    }

    /// The published usage view (`watch` receivers see every refresh).
    pub fn usage_view(&self) -> watch::Receiver<Arc<UsageView>> {
        self.view.subscribe()
    }

    /// Asks the analytics refresh for a new view now (coalesced with one in progress).
    pub fn trigger_refresh(&self) {
        self.refresh_trigger.notify_one();
    }

    /// The decision channel, for binds made outside the scheduling loop (the extender's
    /// `/bind`), which settle through the same sink.
    pub fn decision_sender(&self) -> crate::decisions::DecisionSender {
        self.decisions.clone()
    }

    /// Waits until the decision sink has handled every decision and bind sent so far
    /// (logged, stored, placement history written, handed to the mode): the simulator
    /// calls it after each step's scheduling, so the next refresh reads the placements.
    pub async fn settle_decisions(&self) {
        self.decisions.barrier().await;
    }

    /// The inspection API's state over this engine: its scheduler's snapshot, queue,
    /// store, decision log, metrics, clock and usage policy.
    pub fn api_state(&self) -> ApiState {
        let identity = self.deps.identity.clone();
        let state = ApiState::new(self.scheduler.cache().clone(), self.metrics.clone());
        let state = match &self.store {
            Some(store) => state.with_store(store.clone()),
            None => state,
        };
        state
            .with_queue(self.queue.clone())
            .with_decision_log(self.log.clone())
            .with_clock(self.clock.as_fn())
            .with_policy(self.deps.policy.clone())
            .with_advice(self.config.advice.clone(), identity)
    }

    /// The scheduling loop over this engine's scheduler and queue, binding with `binder`
    /// (metered), publishing decisions to the engine's sink. `confirm_on_bind`: confirm an
    /// assumed pod when its bind succeeds; false when the cluster feed will show it bound
    /// (the API server's watch; the simulator's binder applies the bound pod itself).
    /// `annotate`: what each binding writes onto its pod (under `serve`, the decision
    /// summary).
    pub fn scheduling_loop(
        &self,
        binder: Arc<dyn BindPlugin>,
        confirm_on_bind: bool,
        annotate: Option<crate::scheduling_loop::BindAnnotator>,
    ) -> SchedulingLoop {
        SchedulingLoop {
            scheduler: self.scheduler.clone(),
            queue: self.queue.clone(),
            binder: Arc::new(MeteredBinder::new(binder, self.metrics.clone())),
            decisions: Some(self.decisions.clone()),
            options: LoopOptions {
                explain: self.explain,
                confirm_on_bind,
                hold_preemptors: self.async_preemption,
            },
            annotate,
            metrics: Some(self.metrics.clone()),
            tail: self.tail.clone(),
        }
    }

    /// One housekeeping tick at the clock's now: the scheduler's clock (usage freshness,
    /// reservation expiry, recent placements are judged by it), assumed pods whose bind
    /// was never confirmed, expired reservations.
    pub fn housekeeping(&self) {
        let now = self.clock.now_ms();
        let instant = tokio::time::Instant::now().into_std();
        self.scheduler.cache().write(move |c| {
            c.set_now_ms(now);
            for k in c.expire_assumed(instant) {
                tracing::warn!(pod = %k, "assumed pod expired: the cluster never showed it bound");
            }
        });
        let purged = self.deps.reservations.purge_expired(now);
        if purged > 0 {
            tracing::info!(purged, "expired reservations released");
        }
    }

    /// Moves pods whose backoff is over to the active queue, and pods that waited
    /// `unschedulableTimeout` without a helpful event back for a retry (what the queue's
    /// flush loop does on its timers).
    pub fn flush_queue(&self) {
        self.queue.flush_backoff_completed();
        self.queue.flush_unschedulable_leftover();
    }

    /// Publishes `view` to the scheduler (the next cycle decides on it) and to every
    /// [`usage_view`](Self::usage_view) receiver, and retries the pods that real usage
    /// kept off every node ([`ClusterEvent::UsageRefreshed`]), and those a peer kept off
    /// when its own figures moved ([`ClusterEvent::PeerMetricsRefreshed`]).
    pub fn publish_view(&self, view: Arc<UsageView>) {
        // Written after the cycle in flight, if any; the pods moved below are popped only
        // once that cycle settled, which applies the view first.
        let peers = self.scheduler.set_usage_view(view.clone());
        self.view.send_replace(view);
        retry_after_view(&self.queue, peers);
    }

    /// The descheduling advice for the scheduler's current snapshot (what `/advice`
    /// serves): hot nodes by real usage and the moves that would help most.
    pub fn advice(&self) -> crate::advice::Advice {
        let snapshot = self.scheduler.snapshot();
        crate::advice::advise(
            &snapshot,
            &self.deps.policy,
            &self.deps.identity,
            &self.config.advice,
        )
    }

    /// Computes the usage view from the store as of the clock's now. Blocking (store
    /// reads and polars): async callers use [`refresh_usage`](Self::refresh_usage).
    pub fn compute_view(&self) -> Result<UsageView, EngineError> {
        let now = self.clock.now_ms();
        match &self.store {
            Some(store) => Ok(analytics::compute(store, &self.config.analytics, now)?),
            None => Ok(UsageView {
                generated_ms: now,
                ..UsageView::default()
            }),
        }
    }

    /// Computes the usage view (on the blocking pool) and publishes it.
    pub async fn refresh_usage(self: &Arc<Self>) -> Result<(), EngineError> {
        let engine = self.clone();
        let view = tokio::task::spawn_blocking(move || engine.compute_view())
            .await
            .map_err(|e| EngineError::Task(e.to_string()))??;
        self.publish_view(Arc::new(view));
        Ok(())
    }

    /// Whether no profile is named `profile`.
    pub fn scheduler_profile_missing(&self, profile: &str) -> bool {
        self.scheduler.framework(Some(profile)).is_none()
    }

    /// One store maintenance pass as of the clock's now: flush, then retention and
    /// rollups (on the blocking pool).
    pub async fn maintain_store(&self) -> Result<MaintenanceStats, EngineError> {
        let Some(store) = self.store.clone() else {
            return Ok(MaintenanceStats::default());
        };
        let now = self.clock.now_ms();
        let stats = tokio::task::spawn_blocking(move || {
            store.flush()?;
            store.maintain(now)
        })
        .await
        .map_err(|e| EngineError::Task(e.to_string()))??;
        Ok(stats)
    }

    /// Makes every appended sample durable now (on the blocking pool).
    pub async fn flush_store(&self) -> Result<(), EngineError> {
        let Some(store) = self.store.clone() else {
            return Ok(());
        };
        tokio::task::spawn_blocking(move || store.flush())
            .await
            .map_err(|e| EngineError::Task(e.to_string()))??;
        Ok(())
    }

    /// Starts the background work (see [`Drive`]); `handler` is told what every decision
    /// came to once the sink logged and stored it (the cluster reporter under `serve`,
    /// the farm under `simulate`). Call once.
    pub fn start(
        self: &Arc<Self>,
        drive: Drive,
        handler: Option<Arc<dyn OutcomeHandler>>,
    ) -> Result<Running, EngineError> {
        let phases = Phases::default();
        let rx = self
            .decisions_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| EngineError::Task("the engine was started already".into()))?;
        let sink = Sink {
            metrics: self.metrics.clone(),
            log: self.log.clone(),
            store: self.store.clone(),
            trouble: self.store_trouble.clone(),
            clock: self.clock.clone(),
            handler,
        };
        let sink = tokio::spawn(crate::decisions::run_decision_sink(
            rx,
            sink,
            phases.stopped(Phase::Decisions),
        ));
        let mut running = Running {
            phases,
            sink: Some(sink),
            maintenance: None,
            scheduling: Vec::new(),
        };
        if drive == Drive::Manual {
            return Ok(running);
        }
        let store = self.store.clone().ok_or_else(|| {
            EngineError::Task("an engine without a store cannot run on timers".into())
        })?;
        // The queue's own timers: backoff and unschedulable flushes.
        {
            let queue = self.queue.clone();
            let stop = running.phases.stopped(Phase::Intake);
            running.phases.spawn(Phase::Intake, async move {
                queue.run_flush_loop(stop).await;
            });
        }
        // Housekeeping.
        {
            let engine = self.clone();
            let stop = running.phases.stopped(Phase::Intake);
            running.phases.spawn(Phase::Intake, async move {
                let mut tick = tokio::time::interval(HOUSEKEEPING_INTERVAL);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tokio::pin!(stop);
                loop {
                    tokio::select! {
                        biased;
                        _ = &mut stop => break,
                        _ = tick.tick() => engine.housekeeping(),
                    }
                }
            });
        }
        // The analytics refresh publishes into the view channel; the scheduler follows it.
        {
            let (tx, mut rx) = (self.view.clone(), self.view.subscribe());
            running.phases.spawn(
                Phase::Intake,
                futures::FutureExt::map(
                    analytics::run_refresh(
                        store.clone(),
                        self.config.analytics.clone(),
                        self.clock.clone(),
                        tx,
                        self.refresh_trigger.clone(),
                        running.phases.stopped(Phase::Intake),
                    ),
                    drop,
                ),
            );
            let scheduler = self.scheduler.clone();
            let queue = self.queue.clone();
            let stop = running.phases.stopped(Phase::Intake);
            running.phases.spawn(Phase::Intake, async move {
                tokio::pin!(stop);
                loop {
                    tokio::select! {
                        biased;
                        _ = &mut stop => break,
                        changed = rx.changed() => {
                            if changed.is_err() {
                                break;
                            }
                            let view = rx.borrow_and_update().clone();
                            // The calibration it computes reads every pod: off the
                            // async threads.
                            let s = scheduler.clone();
                            let Ok(peers) =
                                tokio::task::spawn_blocking(move || s.set_usage_view(view)).await
                            else {
                                break;
                            };
                            retry_after_view(&queue, peers);
                        }
                    }
                }
            });
        }
        self.start_collectors(&mut running, &store)?;
        self.start_store_watchdog(&mut running, &store);
        // Store maintenance: the flush interval is the crash-loss window (docs/configuration.md); the
        // final flush runs in the last phase, after every writer is done.
        {
            let mut mc = MaintenanceConfig::from(&self.config.storage);
            mc.clock = self.clock.as_fn();
            let target = ReportedStore {
                store,
                trouble: self.store_trouble.clone(),
            };
            running.maintenance = Some(tokio::spawn(headroom_storage::run_maintenance(
                target,
                mc,
                Arc::new(Notify::new()),
                running.phases.stopped(Phase::Store),
            )));
        }
        Ok(running)
    }

    /// Says why the engine cannot go on, once something it needs failed for good; `serve`
    /// then stops as on SIGTERM and exits non-zero, so that its pod restarts it.
    pub fn fatal(&self) -> watch::Receiver<Option<String>> {
        self.fatal.subscribe()
    }

    /// The store's watchdog: sled turns the first failed write (a full disk) into an error
    /// every later call returns, for good; the store never works again in this process,
    /// though the disk has room. So while the store is failing, every couple of seconds the
    /// watchdog writes a probe file beside it: if the disk takes that write and a flush
    /// still fails, the store is lost for this process — the engine says so
    /// ([`Engine::fatal`]) and `serve` stops, to be restarted with the store reopened (as
    /// it was at its last completed flush). While the disk is full it waits: a restart
    /// would find the same disk. Scheduling never waits for the store meanwhile; what it
    /// decided while the store failed is not kept (the kit's fault run: `/explain` forgets
    /// the pods placed while the disk was full, and only those).
    fn start_store_watchdog(self: &Arc<Self>, running: &mut Running, store: &Store) {
        let Some(dir) = store.path().map(Path::to_path_buf) else {
            return;
        };
        let (store, trouble, fatal) = (
            store.clone(),
            self.store_trouble.clone(),
            self.fatal.clone(),
        );
        let every = watchdog_period(self.config.storage.flush_interval);
        let stop = running.phases.stopped(Phase::Intake);
        running.phases.spawn(Phase::Intake, async move {
            tokio::pin!(stop);
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = &mut stop => break,
                    _ = tick.tick() => {}
                }
                if !trouble.ongoing() {
                    continue;
                }
                let (d, s) = (dir.clone(), store.clone());
                let lost = tokio::task::spawn_blocking(move || {
                    probe_disk(&d).ok()?;
                    s.flush().err().map(|e| e.to_string())
                })
                .await
                .ok()
                .flatten();
                if let Some(e) = lost {
                    fatal.send_replace(Some(format!(
                        "the store at {} keeps failing ({e}) although its disk takes writes \
                         again: it cannot recover in this process",
                        dir.display()
                    )));
                    break;
                }
            }
        });
    }

    /// The collectors, when any source is configured: their loops on a thread of their own
    /// (the future borrows the store across awaits, so it is not `Send`), writing into the
    /// store, counting into the engine's metrics, naming builders from the cluster state,
    /// from the moment the cluster feed's initial lists are in (`ClusterState::synced`).
    fn start_collectors(
        self: &Arc<Self>,
        running: &mut Running,
        store: &Store,
    ) -> Result<(), EngineError> {
        let c = &self.config.collectors;
        if c.prometheus.is_none() && c.kubelet.is_none() && c.scrape.is_none() {
            return Ok(());
        }
        let collectors = headroom_collectors::Collectors::new(c.clone())?
            .with_metrics(self.metrics.collectors())
            .with_pod_lister(self.cluster.clone());
        let sink = store.clone();
        let stop = running.phases.stopped(Phase::Intake);
        let early_stop = running.phases.stopped(Phase::Intake);
        let synced = self.cluster.synced.clone();
        let handle = std::thread::Builder::new()
            .name("collectors".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(error = %e, "collectors: no runtime");
                        return;
                    }
                };
                // The first collection waits for the initial lists: the collectors name a
                // container's builder from the pods the cluster state knows, which are
                // none before the pod list is in, and the lists are what the first bind
                // waits for, on the same cores. The store already holds what was
                // collected before a restart, and the analytics read it meanwhile.
                let run = async {
                    tokio::select! {
                        biased;
                        _ = early_stop => return Ok(()),
                        _ = synced.wait() => {}
                    }
                    collectors.run(&sink, stop).await
                };
                if let Err(e) = rt.block_on(run) {
                    tracing::error!(error = %e, "collectors stopped");
                }
            })
            .map_err(|e| EngineError::Task(format!("starting the collectors thread: {e}")))?;
        running.phases.add(
            Phase::Intake,
            tokio::task::spawn_blocking(move || {
                let _ = handle.join();
            }),
        );
        Ok(())
    }
}

/// The engine's running background work; [`Running::stop`] shuts it down in phases.
pub struct Running {
    /// The phases; adapters add their own tasks (watches, HTTP, event writers, leadership)
    /// to the phase each belongs to.
    pub phases: Phases,
    sink: Option<tokio::task::JoinHandle<SinkReport>>,
    maintenance: Option<tokio::task::JoinHandle<MaintenanceReport>>,
    scheduling: Vec<tokio::task::JoinHandle<(LoopStats, u64)>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("phases", &self.phases)
            .finish_non_exhaustive()
    }
}

/// What the background work did, returned by [`Running::stop`].
#[derive(Debug, Clone, Default)]
pub struct StopReport {
    /// The scheduling loops' counters, summed over every term the gate was open.
    pub scheduling: LoopStats,
    /// Times the gate opened (leadership terms under `serve`).
    pub terms: u64,
    /// The decision sink's counters.
    pub sink: SinkReport,
    /// Store maintenance (flushes, passes, failures, the final flush).
    pub maintenance: Option<MaintenanceReport>,
}

impl Running {
    /// Runs `lp` whenever `gate` shows true (the initial lists are in and this replica
    /// leads), and stops it the moment the gate closes or the intake phase stops.
    pub fn spawn_scheduling(
        &mut self,
        lp: impl Fn() -> SchedulingLoop + Send + 'static,
        gate: watch::Receiver<bool>,
    ) {
        let stop = self.phases.signal(Phase::Intake);
        self.scheduling.push(tokio::spawn(async move {
            let mut total = LoopStats::default();
            let mut terms = 0u64;
            let mut gate = gate;
            loop {
                tokio::select! {
                    biased;
                    _ = phases::stopped(stop.clone()) => break,
                    open = gate.wait_for(|g| *g) => if open.is_err() { break },
                }
                terms += 1;
                tracing::info!("scheduling starts");
                let mut closed = gate.clone();
                let end = {
                    let stop = stop.clone();
                    async move {
                        tokio::select! {
                            _ = phases::stopped(stop) => {}
                            _ = closed.wait_for(|g| !*g) => {}
                        }
                    }
                };
                total.add(&lp().run(end).await);
                if *stop.borrow() {
                    break;
                }
                tracing::warn!("scheduling stopped: the gate closed (leadership lost)");
            }
            (total, terms)
        }));
    }

    /// Stops everything in phase order (see [`phases`]) and reports.
    pub async fn stop(self) -> StopReport {
        self.stop_within(None).await
    }

    /// [`stop`](Self::stop) within `grace`: whatever has not finished by then (binds or
    /// writes to an API server that went away) is aborted, and the store still gets its
    /// final flush.
    pub async fn stop_within(mut self, grace: Option<Duration>) -> StopReport {
        let deadline = grace.map(|g| tokio::time::Instant::now() + g);
        let mut report = StopReport::default();
        // The intake phase's tasks include the scheduling loops: it stops them, then they
        // finish their binds before the decisions phase begins.
        self.phases.stop_through_by(Phase::Intake, deadline).await;
        for mut h in self.scheduling.drain(..) {
            let joined = match deadline {
                None => Some((&mut h).await),
                Some(d) => tokio::time::timeout_at(d, &mut h).await.ok(),
            };
            match joined {
                Some(Ok((s, terms))) => {
                    report.scheduling.add(&s);
                    report.terms += terms;
                }
                Some(Err(_)) => {}
                None => {
                    tracing::warn!(
                        "binds in flight did not finish within the grace period; aborted"
                    );
                    h.abort();
                }
            }
        }
        self.phases
            .stop_through_by(Phase::Decisions, deadline)
            .await;
        if let Some(mut s) = self.sink.take() {
            let joined = match deadline {
                None => Some((&mut s).await),
                Some(d) => tokio::time::timeout_at(d, &mut s).await.ok(),
            };
            match joined {
                Some(r) => report.sink = r.unwrap_or_default(),
                None => s.abort(),
            }
        }
        self.phases.stop_through_by(Phase::Store, deadline).await;
        if let Some(m) = self.maintenance.take() {
            report.maintenance = m.await.ok();
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_scheduler::queue::SubQueue;
    use headroom_scheduler::snapshot::PodInfo;

    fn gated(scheduler: &str) -> Arc<PodInfo> {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g", "namespace": "default", "uid": "u"},
            "spec": {"schedulerName": scheduler, "schedulingGates": [{"name": "wait"}],
                     "containers": [{"name": "c"}]}
        }))
        .unwrap();
        Arc::new(PodInfo::new(Arc::new(pod)))
    }

    fn engine(yaml: &str) -> Arc<Engine> {
        let config = Config::from_yaml(yaml, "test").unwrap();
        let store = Store::open_temporary(headroom_storage::StoreConfig::default()).unwrap();
        Engine::new(config, Parts::new(Clock::manual(0).0, store)).unwrap()
    }

    /// The queue gates a pod by its own profile's PreEnqueue plugins: disabling
    /// SchedulingGates in a profile lets that profile's gated pods in, and only those.
    #[test]
    fn queue_gates_by_the_pods_profile() {
        let e = engine(
            "profiles:\n  - schedulerName: headroom\n  - schedulerName: ungated\n    plugins: {SchedulingGates: {enabled: false}}\n",
        );
        assert_eq!(e.queue().add(gated("headroom")), Some(SubQueue::Gated));
        e.queue()
            .delete(&headroom_scheduler::key::PodId::of(&gated("headroom")));
        assert_eq!(e.queue().add(gated("ungated")), Some(SubQueue::Active));
    }

    /// The queue's backoffs are the configuration's.
    #[test]
    fn queue_takes_the_configured_backoffs() {
        let e = engine("scheduler: {podInitialBackoffSeconds: 3, podMaxBackoffSeconds: 7}\n");
        let q = e.queue().config();
        assert_eq!(
            (q.initial_backoff.as_secs(), q.max_backoff.as_secs()),
            (3, 7)
        );
    }
}

/// How often the store's watchdog looks ([`Engine::fatal`]): every two seconds, or every
/// flush interval when that is shorter. Looking costs nothing while the store is well, and
/// while it fails, every decision made before the restart is one the store will not have.
fn watchdog_period(flush: Duration) -> Duration {
    flush.clamp(Duration::from_millis(100), Duration::from_secs(2))
}

/// Retries what a new usage view may help, once the scheduler took it: the pods real usage
/// kept off every node, and, when `peers_moved` (some peer's held figures changed), the
/// pods a peer kept off.
fn retry_after_view(queue: &SchedulingQueue, peers_moved: bool) {
    queue.move_all_to_active_or_backoff(ClusterEvent::UsageRefreshed);
    if peers_moved {
        queue.move_all_to_active_or_backoff(ClusterEvent::PeerMetricsRefreshed);
    }
}

/// Writes, syncs and removes a small file in `dir`: whether its disk takes writes.
fn probe_disk(dir: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let path = dir.join(headroom_storage::PROBE_FILE);
    let mut f = std::fs::File::create(&path)?;
    let written = f.write_all(&[0u8; 4096]).and_then(|_| f.sync_all());
    drop(f);
    let _ = std::fs::remove_file(&path);
    written
}

/// The store as its maintenance loop runs it: a flush or retention pass that fails (a full
/// disk, a read-only volume) is logged through the store's [`Trouble`], shared with the
/// decision sink's writes, instead of only being counted.
#[derive(Clone)]
struct ReportedStore {
    store: Store,
    trouble: Arc<Trouble>,
}

impl ReportedStore {
    fn report<T>(&self, op: &str, r: headroom_storage::Result<T>) -> headroom_storage::Result<T> {
        let now = crate::logging::now();
        match &r {
            Ok(_) => {
                self.trouble.ok(now);
            }
            Err(e) => {
                self.trouble.failed(now, op, e);
            }
        }
        r
    }
}

impl MaintenanceTarget for ReportedStore {
    fn flush(&self) -> headroom_storage::Result<FlushStats> {
        self.report("flushing", self.store.flush())
    }
    fn maintain(&self, now_ms: i64) -> headroom_storage::Result<MaintenanceStats> {
        let stats = self.report("a retention pass", self.store.maintain(now_ms))?;
        if let Some(c) = &stats.compaction {
            tracing::info!(
                before_mb = c.before_bytes as f64 / 1e6,
                after_mb = c.after_bytes as f64 / 1e6,
                live_mb = c.live_bytes as f64 / 1e6,
                seconds = c.duration.as_secs_f64(),
                directory = %c.directory,
                old_removed = c.old_removed,
                "store compacted in place"
            );
        }
        Ok(stats)
    }
}

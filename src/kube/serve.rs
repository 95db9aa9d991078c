//! `headroom serve`: everything wired together.
//!
//! Tasks, all stopped by one shutdown signal:
//! - the watches ([`reflect`](super::reflect)) feed the snapshot, the queue and the
//!   reservation cache, on every replica;
//! - the Lease elector ([`leader`](super::leader)) publishes leadership;
//! - the scheduling supervisor runs a [`SchedulingLoop`] while this replica leads and the
//!   initial lists are in, and stops it the moment the lease is lost;
//! - the reporter and event writer ([`events`](super::events)), the reservation status
//!   writer and GC ([`crd`](super::crd)), the queue's flush loop, a housekeeping tick
//!   (clock, assumed-pod expiry), and, when collectors are configured, the collectors and
//!   the analytics refresh that feeds the scheduler's usage view;
//! - the HTTP listener: the extender routes, `/healthz`, `/readyz`, and whatever router
//!   the caller adds ([`compose_router`]).
//!
//! Graceful shutdown (SIGTERM): stop taking pods and let the binds in flight finish; then
//! drain the reporter, the events and the status writes; then release the lease; then
//! flush the store.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use kube::Client;
use kube::api::Api;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::bind::ApiBinder;
use super::crd::{self, KubeReservations, ReservationResource};
use super::events::{self, Reporter, ReporterStats};
use super::extender::{self, ExtenderState};
use super::leader::{ElectionStats, KubeLeaseStore, LeaderElector, LeaseStore};
use super::reflect::{self, ClusterState, Synced};
use super::{Error, Result};
use crate::config::Config;
use crate::plugins::{PluginDeps, build_framework_with};
use crate::queue::{QueueConfig, SchedulingQueue};
use crate::scheduler::Scheduler;
use crate::scheduling_loop::{LoopOptions, LoopStats, SchedulingLoop};

/// What `run` needs.
pub struct ServeOptions {
    /// The whole configuration (profiles, `serve`, collectors, store).
    pub config: Config,
    /// The API client.
    pub client: Client,
    /// The store; `None` opens the one in `data_dir` (or the configuration's `dataDir`).
    pub store: Option<headroom_storage::Store>,
    /// Store directory override (`--data-dir`).
    pub data_dir: Option<PathBuf>,
    /// Listener override (`--listen`).
    pub listen: Option<SocketAddr>,
    /// Told the listener's actual address once it is bound (tests listen on port 0).
    pub bound: Option<oneshot::Sender<SocketAddr>>,
    /// Where the Lease lives; `None`: the API server.
    pub lease_store: Option<Arc<dyn LeaseStore>>,
    /// More routes to serve on the same listener (the inspection API).
    pub extra_routes: Option<Router>,
}

impl ServeOptions {
    /// Options with defaults for everything but the configuration and the client.
    pub fn new(config: Config, client: Client) -> ServeOptions {
        ServeOptions {
            config,
            client,
            store: None,
            data_dir: None,
            listen: None,
            bound: None,
            lease_store: None,
            extra_routes: None,
        }
    }
}

/// What a `serve` run did.
#[derive(Debug, Default, Clone)]
pub struct ServeReport {
    /// The scheduling loops' counters, summed over leadership terms.
    pub scheduling: LoopStats,
    /// Leadership terms during which this replica scheduled.
    pub terms: u64,
    /// The leader elector's counters (default when election is off).
    pub election: ElectionStats,
    /// The reporter's counters.
    pub reporter: ReporterStats,
    /// Events (created, series updates, aggregated, dropped, failed).
    pub events: (u64, u64, u64, u64, u64),
    /// Reservation status writes (written, failed).
    pub reservation_status: (u64, u64),
    /// Reservations (marked expired, deleted) by the GC loop.
    pub reservation_gc: (usize, usize),
}

/// What `/healthz` and `/readyz` look at.
#[derive(Clone)]
pub struct Health {
    /// The initial lists.
    pub synced: Arc<Synced>,
    /// Leadership.
    pub leader: watch::Receiver<bool>,
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(h): State<Health>) -> (StatusCode, String) {
    if !h.synced.all() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for the initial lists of nodes, pods and namespaces\n".into(),
        );
    }
    let role = if *h.leader.borrow() {
        "leader"
    } else {
        "follower"
    };
    (StatusCode::OK, format!("ok ({role})\n"))
}

/// The HTTP surface: extender routes (when enabled), `/healthz`, `/readyz`, and `extra`
/// (the inspection API, merged by the caller). Kept small so the composition is easy to
/// change in one place.
pub fn compose_router(extender: Option<Router>, health: Health, extra: Option<Router>) -> Router {
    let mut app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(health);
    if let Some(e) = extender {
        app = app.merge(e);
    }
    if let Some(x) = extra {
        app = app.merge(x);
    }
    app
}

/// A future that completes once `rx` shows true.
async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// Runs `headroom serve` until `shutdown` completes; returns what it did.
pub async fn run(
    opts: ServeOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<ServeReport> {
    let ServeOptions {
        config,
        client,
        store,
        data_dir,
        listen,
        bound,
        lease_store,
        extra_routes,
    } = opts;
    config.validate()?;
    let serve = config.serve.clone();
    serve.validate()?;
    let store = match store {
        Some(s) => s,
        None => headroom_storage::Store::open(
            config.data_dir(data_dir.as_deref()),
            config.storage.clone(),
        )?,
    };

    // Stop signals: phase 1 stops intake (loop, watches, HTTP); phase 2 drains writers;
    // phase 3 releases the lease.
    let (stop1_tx, stop1) = watch::channel(false);
    let (stop2_tx, stop2) = watch::channel(false);
    let (stop3_tx, stop3) = watch::channel(false);
    let mut tasks: Vec<JoinHandle<()>> = Vec::new();

    // Leadership.
    let identity = serve.leader_election.identity();
    let (leader_tx, leader_rx) = watch::channel(!serve.leader_election.enabled);
    let election = if serve.leader_election.enabled {
        let store: Arc<dyn LeaseStore> = lease_store.unwrap_or_else(|| {
            Arc::new(KubeLeaseStore::new(
                client.clone(),
                &serve.leader_election.namespace(),
                &serve.leader_election.lease_name,
            ))
        });
        let elector = LeaderElector::new(store, &serve.leader_election, &identity);
        Some(tokio::spawn(elector.run(leader_tx, stopped(stop3.clone()))))
    } else {
        None
    };

    // Reservations.
    let clock: Arc<dyn Fn() -> i64 + Send + Sync> = Arc::new(super::now_ms);
    let (reservations, status_rx) = if serve.reservations.enabled {
        let (r, rx) = KubeReservations::new(clock);
        (Some(r), Some(rx))
    } else {
        (None, None)
    };
    let mut deps = PluginDeps {
        identity: config.collectors.identity.clone(),
        ..PluginDeps::default()
    };
    if let Some(r) = &reservations {
        deps.reservations = r.clone();
    }

    // Scheduler and queue.
    let mut scheduler = Scheduler::with_deps(&config, &deps)?;
    scheduler.set_assume_ttl(serve.assume_ttl);
    scheduler.set_now_ms(super::now_ms());
    let scheduler = Arc::new(Mutex::new(scheduler));
    let queue = Arc::new(SchedulingQueue::new(QueueConfig::default()));
    let names: HashSet<String> = if serve.schedule {
        config
            .profiles
            .iter()
            .map(|p| p.scheduler_name.clone())
            .collect()
    } else {
        HashSet::new()
    };
    let state = Arc::new(ClusterState::new(
        scheduler.clone(),
        queue.clone(),
        reservations.clone(),
        names,
    ));
    let synced = state.synced.clone();

    // Watches.
    {
        let client = client.clone();
        let state = state.clone();
        let stop = stop1.clone();
        tasks.push(tokio::spawn(async move {
            reflect::run(client, state, stop).await;
        }));
    }

    // Reporter and events.
    let (recorder, events_rx) = events::recorder();
    let event_stats = recorder.stats().clone();
    let events_task = tokio::spawn(events::run_event_writer(
        client.clone(),
        serve.events.clone(),
        identity.clone(),
        event_stats.clone(),
        events_rx,
        stopped(stop2.clone()),
    ));
    let (decisions_tx, decisions_rx) = mpsc::channel(4096);
    let (outcomes_tx, outcomes_rx) = mpsc::channel(4096);
    let reporter = Reporter {
        client: client.clone(),
        recorder: recorder.clone(),
        store: Some(store.clone()),
        scheduler: scheduler.clone(),
        config: serve.clone(),
        identity: config.collectors.identity.clone(),
    };
    let reporter_task =
        tokio::spawn(reporter.run(decisions_rx, outcomes_rx, stopped(stop2.clone())));

    // Reservation status writer and GC.
    let status_task = match status_rx {
        Some(rx) => {
            let client = client.clone();
            Some(tokio::spawn(crd::run_status_writer(
                move |ns: &str| Api::<ReservationResource>::namespaced(client.clone(), ns),
                rx,
                leader_rx.clone(),
                stopped(stop2.clone()),
            )))
        }
        None => None,
    };
    let gc_task = reservations.as_ref().map(|r| {
        tokio::spawn(crd::run_gc(
            r.clone(),
            crd::api_deleter(client.clone()),
            serve.reservations.gc_interval,
            serve.reservations.keep_finished,
            leader_rx.clone(),
            stopped(stop1.clone()),
        ))
    });

    // Queue flush and housekeeping.
    {
        let queue = queue.clone();
        let stop = stop1.clone();
        tasks.push(tokio::spawn(async move {
            queue.run_flush_loop(stopped(stop)).await;
        }));
    }
    {
        let scheduler = scheduler.clone();
        let stop = stop1.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let stop = stopped(stop);
            tokio::pin!(stop);
            loop {
                tokio::select! {
                    _ = &mut stop => break,
                    _ = tick.tick() => {}
                }
                let mut s = scheduler.lock().unwrap_or_else(|e| e.into_inner());
                s.set_now_ms(super::now_ms());
                for k in s.expire_assumed(tokio::time::Instant::now().into_std()) {
                    tracing::warn!(pod = %k, "assumed pod expired: the watch never showed it bound");
                }
            }
        }));
    }

    // Usage: collectors into the store, analytics into the scheduler's usage view.
    let c = &config.collectors;
    if c.prometheus.is_some() || c.kubelet.is_some() || c.scrape.is_some() {
        let collectors = config.collectors.clone();
        let sink = store.clone();
        let stop = stop1.clone();
        // The collectors' future is not `Send` (it borrows the sink across awaits), so it
        // gets a thread and a current-thread runtime of its own, as `collect --once` does.
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
                if let Err(e) =
                    rt.block_on(headroom_collectors::run(&collectors, &sink, stopped(stop)))
                {
                    tracing::error!(error = %e, "collectors stopped");
                }
            })
            .map_err(|e| Error::Task(format!("starting the collectors thread: {e}")))?;
        tasks.push(tokio::task::spawn_blocking(move || {
            let _ = handle.join();
        }));
        let (view_tx, mut view_rx) =
            watch::channel(Arc::new(crate::analytics::UsageView::default()));
        tasks.push(tokio::spawn(
            crate::analytics::run_refresh(
                store.clone(),
                config.analytics.clone(),
                view_tx,
                Arc::new(tokio::sync::Notify::new()),
                stopped(stop1.clone()),
            )
            .map_unit(),
        ));
        let scheduler = scheduler.clone();
        tasks.push(tokio::spawn(async move {
            while view_rx.changed().await.is_ok() {
                let view = view_rx.borrow_and_update().clone();
                scheduler
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .set_usage_view(view);
            }
        }));
    }

    // HTTP.
    let binder = Arc::new(ApiBinder::new(
        client.clone(),
        Some(queue.clone()),
        Some(outcomes_tx),
        serve.request_timeout,
    ));
    let extender_router = if serve.extender.enabled {
        let framework = Arc::new(build_framework_with(&serve.extender.profile(), &deps)?);
        let sched = scheduler.clone();
        let snapshot: extender::SnapshotSource =
            Arc::new(move || sched.lock().unwrap_or_else(|e| e.into_inner()).snapshot());
        let ext_binder: Arc<dyn extender::ExtenderBinder> = Arc::new(ApiBinder::new(
            client.clone(),
            None,
            None,
            serve.request_timeout,
        ));
        Some(extender::router(ExtenderState {
            framework,
            snapshot,
            binder: Some(ext_binder),
        }))
    } else {
        None
    };
    // The inspection API (`/explain`, `/nodes`, `/builders`, `/queue`, `/metrics`) over the
    // scheduler's snapshot and queue; decisions come from the store the reporter writes.
    let api_state = crate::api::ApiState::new(
        scheduler.clone(),
        Arc::new(crate::metrics::Metrics::new(
            crate::metrics::MetricsOptions {
                stale_after: config.usage.stale_after,
                ..Default::default()
            },
        )),
    )
    .with_queue(queue.clone())
    .with_store(store.clone());
    api_state.set_ready(true);
    let api_routes = crate::api::routes(api_state);
    let extra_routes = Some(match extra_routes {
        Some(x) => x.merge(api_routes),
        None => api_routes,
    });
    let app = compose_router(
        extender_router,
        Health {
            synced: synced.clone(),
            leader: leader_rx.clone(),
        },
        extra_routes,
    );
    let addr = match listen {
        Some(a) => a,
        None => serve
            .listen
            .parse()
            .map_err(|_| Error::Task(format!("bad listen address {:?}", serve.listen)))?,
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen {
            addr: addr.to_string(),
            source,
        })?;
    let local = listener.local_addr().map_err(|source| Error::Listen {
        addr: addr.to_string(),
        source,
    })?;
    tracing::info!(%local, identity = %identity, "serving");
    if let Some(tx) = bound {
        let _ = tx.send(local);
    }
    let http = {
        let stop = stop1.clone();
        tokio::spawn(async move {
            let r = axum::serve(listener, app)
                .with_graceful_shutdown(stopped(stop))
                .await;
            if let Err(e) = r {
                tracing::error!(error = %e, "http listener failed");
            }
        })
    };

    // Scheduling supervisor.
    let supervisor = {
        let scheduler = scheduler.clone();
        let queue = queue.clone();
        let binder: Arc<dyn crate::framework::BindPlugin> = binder.clone();
        let mut leader_rx = leader_rx.clone();
        let stop = stop1.clone();
        let synced = synced.clone();
        let schedule = serve.schedule;
        tokio::spawn(async move {
            let mut total = LoopStats::default();
            let mut terms = 0u64;
            if !schedule {
                stopped(stop).await;
                return (total, terms);
            }
            loop {
                let ready = async {
                    synced.wait().await;
                    let _ = leader_rx.wait_for(|l| *l).await;
                };
                tokio::select! {
                    biased;
                    _ = stopped(stop.clone()) => break,
                    _ = ready => {}
                }
                terms += 1;
                tracing::info!("leading: scheduling starts");
                let lp = SchedulingLoop {
                    scheduler: scheduler.clone(),
                    queue: queue.clone(),
                    binder: binder.clone(),
                    decisions: Some(decisions_tx.clone()),
                    options: LoopOptions {
                        explain: false,
                        // The watch confirms binds; a lost confirmation expires the pod.
                        confirm_on_bind: false,
                    },
                };
                let mut lost = leader_rx.clone();
                let end = {
                    let stop = stop.clone();
                    async move {
                        tokio::select! {
                            _ = stopped(stop) => {}
                            _ = lost.wait_for(|l| !*l) => {}
                        }
                    }
                };
                let s = lp.run(end).await;
                total.attempts += s.attempts;
                total.bound += s.bound;
                total.unschedulable += s.unschedulable;
                total.bind_errors += s.bind_errors;
                total.decisions_dropped += s.decisions_dropped;
                if *stop.borrow() {
                    break;
                }
                tracing::warn!("lease lost: scheduling stopped");
            }
            (total, terms)
        })
    };

    // Wait for shutdown, then stop in order.
    shutdown.await;
    tracing::info!("shutting down: no new pods; finishing binds in flight");
    let _ = stop1_tx.send(true);
    let (scheduling, terms) = supervisor.await.map_err(|e| Error::Task(e.to_string()))?;
    let _ = http.await;
    for t in tasks {
        let _ = t.await;
    }
    let reservation_gc = match gc_task {
        Some(t) => t.await.unwrap_or_default(),
        None => (0, 0),
    };
    // The loop is gone, so no more decisions or outcomes: drain the writers.
    drop(binder);
    let _ = stop2_tx.send(true);
    let reporter = reporter_task.await.unwrap_or_default();
    let _ = events_task.await;
    let reservation_status = match status_task {
        Some(t) => t.await.unwrap_or_default(),
        None => (0, 0),
    };
    // Binds are finished: the lease can go.
    let _ = stop3_tx.send(true);
    let election = match election {
        Some(t) => t.await.unwrap_or_default(),
        None => ElectionStats::default(),
    };
    if let Err(e) = store.flush() {
        tracing::error!(error = %e, "flushing the store failed");
    }
    Ok(ServeReport {
        scheduling,
        terms,
        election,
        reporter,
        events: event_stats.get(),
        reservation_status,
        reservation_gc,
    })
}

trait MapUnit: std::future::Future + Sized {
    fn map_unit(self) -> futures::future::Map<Self, fn(Self::Output)> {
        futures::FutureExt::map(self, drop as fn(Self::Output))
    }
}

impl<F: std::future::Future> MapUnit for F {}

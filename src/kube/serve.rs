//! `headroom serve`: the [`Engine`] against a real cluster.
//!
//! The engine (built from the configuration, with the wall clock, the store and the
//! `Reservation` cache) owns the scheduler, the queue, the usage pipeline (collectors,
//! analytics refresh, store maintenance), the decision log and the metrics. This adapter
//! adds what only a cluster has:
//! - the watches ([`reflect`](super::reflect)), the cluster feed into the engine's
//!   cluster state, on every replica;
//! - the `pods/binding` binder ([`bind`](super::bind)) for the engine's scheduling loop,
//!   which runs while this replica leads ([`leader`](super::leader)) and the initial lists
//!   are in, and stops the moment the lease is lost;
//! - the reporter and event writer ([`events`](super::events)), fed by the engine's
//!   decision sink and the binder; the reservation status writer and GC ([`crd`](super::crd));
//! - the HTTP listener: the extender routes, `/healthz`, `/readyz`, the inspection API over
//!   the engine, and whatever router the caller adds ([`compose_router`]).
//!
//! Graceful shutdown (SIGTERM) follows the engine's phases: stop taking pods and let the
//! binds in flight finish; then drain the decision sink, the reporter, the events and the
//! status writes; then release the lease; then flush the store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use kube::Client;
use kube::api::Api;
use tokio::sync::{mpsc, oneshot, watch};

use super::bind::{ApiBinder, BindStats};
use super::crd::{self, KubeReservations, ReservationResource};
use super::events::{self, Reporter, ReporterStats};
use super::extender::{self, ExtenderState};
use super::flow::BindFlow;
use super::leader::{ElectionStats, KubeLeaseStore, LeaderElector, LeaseStore};
use super::reflect;
use super::{Error, Result};
use crate::api::SinkReport;
use crate::clock::Clock;
use crate::cluster::{NodeObserver, Synced};
use crate::config::Config;
use crate::engine::{Drive, Engine, EngineError, Parts, Phase};
use crate::plugins::build_framework_with;
use crate::reservation::ReservationSource;
use crate::scheduling_loop::LoopStats;

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
    /// The decision sink's counters (decisions logged in memory and in the store).
    pub sink: SinkReport,
    /// Store maintenance: flushes, retention passes, failures, the final flush.
    pub maintenance: Option<headroom_storage::MaintenanceReport>,
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

impl From<EngineError> for Error {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Config(c) => Error::Config(c),
            EngineError::Store(s) => Error::Store(s),
            other => Error::Task(other.to_string()),
        }
    }
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
    let addr = match listen {
        Some(a) => a,
        None => serve
            .listen
            .parse()
            .map_err(|_| Error::Task(format!("bad listen address {:?}", serve.listen)))?,
    };
    let store = match store {
        Some(s) => s,
        None => headroom_storage::Store::open(
            config.data_dir(data_dir.as_deref()),
            config.storage.clone(),
        )?,
    };
    let clock = Clock::wall();
    let (reservations, status_rx) = if serve.reservations.enabled {
        let (r, rx) = KubeReservations::new(clock.as_fn());
        (Some(r), Some(rx))
    } else {
        (None, None)
    };
    let mut parts = Parts::new(clock, store.clone());
    parts.schedule = serve.schedule;
    if let Some(r) = &reservations {
        parts.reservations = Some(r.clone() as Arc<dyn ReservationSource>);
        parts.nodes_observer = Some(r.clone() as Arc<dyn NodeObserver>);
    }
    let engine = Engine::new(config, parts)?;

    // The reporter hears of every decision through the engine's sink, and of every bind
    // outcome from the binder.
    let (decisions_tx, decisions_rx) = mpsc::channel(4096);
    let (outcomes_tx, outcomes_rx) = mpsc::channel(4096);
    let mut running = engine.start(Drive::Timers, Some(decisions_tx))?;
    let identity = serve.leader_election.identity();

    // Leadership: released in the handover phase, after every write of ours.
    let (leader_tx, leader_rx) = watch::channel(!serve.leader_election.enabled);
    let (election_tx, election_rx) = oneshot::channel();
    if serve.leader_election.enabled {
        let store: Arc<dyn LeaseStore> = lease_store.unwrap_or_else(|| {
            Arc::new(KubeLeaseStore::new(
                client.clone(),
                &serve.leader_election.namespace(),
                &serve.leader_election.lease_name,
            ))
        });
        let elector = LeaderElector::new(store, &serve.leader_election, &identity);
        let stop = running.phases.stopped(Phase::Handover);
        running.phases.spawn(Phase::Handover, async move {
            let _ = election_tx.send(elector.run(leader_tx, stop).await);
        });
    } else {
        drop(election_tx);
    }

    // The cluster feed.
    {
        let (client, cluster, r) = (
            client.clone(),
            engine.cluster().clone(),
            reservations.clone(),
        );
        let stop = running.phases.signal(Phase::Intake);
        running.phases.spawn(Phase::Intake, async move {
            reflect::run(client, cluster, r, stop).await;
        });
    }

    // Binds toward the API server go through one flow controller; the reporter's own
    // writes yield to it.
    let flow = BindFlow::new(serve.binding.clone());
    flow.register(engine.metrics());

    // Reporter and events: they drain after the decision sink.
    let (recorder, events_rx) = events::recorder();
    let event_stats = recorder.stats().clone();
    event_stats.register(engine.metrics());
    {
        let stop = running.phases.stopped(Phase::Writers);
        running.phases.spawn(
            Phase::Writers,
            futures::FutureExt::map(
                events::run_event_writer(
                    client.clone(),
                    serve.events.clone(),
                    identity.clone(),
                    event_stats.clone(),
                    events_rx,
                    stop,
                ),
                drop,
            ),
        );
    }
    let reporter_stats = ReporterStats::default();
    reporter_stats.register(engine.metrics());
    {
        let reporter = Reporter {
            client: client.clone(),
            recorder: recorder.clone(),
            store: Some(store.clone()),
            scheduler: engine.scheduler().clone(),
            config: serve.clone(),
            identity: engine.config().collectors.identity.clone(),
            stats: reporter_stats.clone(),
            yield_to: Some(flow.clone()),
        };
        let stop = running.phases.stopped(Phase::Writers);
        running.phases.spawn(Phase::Writers, async move {
            reporter.run(decisions_rx, outcomes_rx, stop).await;
        });
    }

    // Reservation status writer and GC.
    let (status_tx, status_done) = oneshot::channel();
    match status_rx {
        Some(rx) => {
            let client = client.clone();
            let (leader, stop) = (leader_rx.clone(), running.phases.stopped(Phase::Writers));
            running.phases.spawn(Phase::Writers, async move {
                let r = crd::run_status_writer(
                    move |ns: &str| Api::<ReservationResource>::namespaced(client.clone(), ns),
                    rx,
                    leader,
                    stop,
                )
                .await;
                let _ = status_tx.send(r);
            });
        }
        None => drop(status_tx),
    }
    let (gc_tx, gc_done) = oneshot::channel();
    match &reservations {
        Some(r) => {
            let gc = crd::run_gc(
                r.clone(),
                crd::api_deleter(client.clone()),
                serve.reservations.gc_interval,
                serve.reservations.keep_finished,
                leader_rx.clone(),
                running.phases.stopped(Phase::Intake),
            );
            running.phases.spawn(Phase::Intake, async move {
                let _ = gc_tx.send(gc.await);
            });
        }
        None => drop(gc_tx),
    }

    // HTTP: extender, probes, the inspection API over the engine.
    let bind_stats = BindStats::default();
    bind_stats.register(engine.metrics());
    let binder = Arc::new(
        ApiBinder::new(
            client.clone(),
            Some(engine.queue().clone()),
            Some(outcomes_tx),
            serve.request_timeout,
        )
        .with_flow(flow, bind_stats),
    );
    let synced = engine.cluster().synced.clone();
    let extender_router = if serve.extender.enabled {
        let framework = Arc::new(build_framework_with(
            &serve.extender.profile(),
            engine.deps(),
        )?);
        let sched = engine.scheduler().clone();
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
    let api_state = engine.api_state();
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
    {
        let stop = running.phases.stopped(Phase::Intake);
        running.phases.spawn(Phase::Intake, async move {
            let r = axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await;
            if let Err(e) = r {
                tracing::error!(error = %e, "http listener failed");
            }
        });
    }

    // Scheduling: while the initial lists are in and this replica leads.
    if serve.schedule {
        let (gate_tx, gate_rx) = watch::channel(false);
        {
            let mut leader = leader_rx.clone();
            let stop = running.phases.stopped(Phase::Intake);
            running.phases.spawn(Phase::Intake, async move {
                tokio::pin!(stop);
                tokio::select! {
                    biased;
                    _ = &mut stop => return,
                    _ = synced.wait() => {}
                }
                loop {
                    let _ = gate_tx.send(*leader.borrow_and_update());
                    tokio::select! {
                        biased;
                        _ = &mut stop => return,
                        changed = leader.changed() => if changed.is_err() { return },
                    }
                }
            });
        }
        let (engine, binder) = (engine.clone(), binder.clone());
        // The watch confirms binds; a lost confirmation expires the pod.
        running.spawn_scheduling(
            move || engine.scheduling_loop(binder.clone(), false),
            gate_rx,
        );
    }
    drop(binder);

    shutdown.await;
    tracing::info!("shutting down: no new pods; finishing binds in flight");
    let stop = running.stop().await;
    let election = election_rx.await.unwrap_or_default();
    Ok(ServeReport {
        scheduling: stop.scheduling,
        terms: stop.terms,
        sink: stop.sink,
        maintenance: stop.maintenance,
        election,
        reporter: reporter_stats,
        events: event_stats.get(),
        reservation_status: status_done.await.unwrap_or_default(),
        reservation_gc: gc_done.await.unwrap_or_default(),
    })
}

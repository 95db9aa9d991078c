//! `headroom serve`: the [`Engine`] against a real cluster.
//!
//! The engine (built from the configuration, with the wall clock, the store and the
//! `Reservation` cache) owns the scheduler, the queue, the usage pipeline (collectors,
//! analytics refresh, store maintenance), the decision log and the metrics. This adapter
//! adds what only a cluster has:
//! - the watches ([`reflect`]), the cluster feed into the engine's
//!   cluster state, on every replica;
//! - the `pods/binding` binder ([`bind`](super::bind)) for the engine's scheduling loop,
//!   which runs while this replica leads ([`leader`](super::leader)) and the initial lists
//!   are in, and stops the moment the lease is lost;
//! - the reporter and event writer ([`events`]), fed by the engine's
//!   decision sink and the binder; the reservation status writer and GC ([`crd`]);
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

use super::auth::{self, Auth, KubeReviewer, Reviewer};
use super::bind::{ApiBinder, BindStats};
use super::crd::{self, KubeReservations, ReservationResource};
use super::events::{self, Reporter, ReporterStats};
use super::extender::{self, ExtenderState};
use super::flow::BindFlow;
use super::health::ApiHealth;
use super::leader::{ElectionStats, KubeLeaseStore, LeaderElector, LeaseStore};
use super::recorder;
use super::reflect;
use super::tls;
use super::{Error, Result};
use crate::cluster::{NodeObserver, Synced};
use crate::config::Config;
use crate::config::serve::SecurityMode;
use crate::config::serve::ServeConfig;
use crate::decisions::SinkReport;
use crate::engine::{Drive, Engine, EngineError, Parts, Phase, Running};
use crate::scheduling_loop::LoopStats;
use headroom_scheduler::clock::Clock;
use headroom_scheduler::plugins::build_framework_with;
use headroom_scheduler::reservation::ReservationSource;

/// What `run` needs.
pub struct ServeOptions {
    /// The whole configuration (profiles, `serve`, collectors, store).
    pub config: Config,
    /// The API client.
    pub client: Client,
    /// The API server's URL, as logs name it (empty: unknown, "the API server").
    pub server: String,
    /// The store; `None` opens the one in `data_dir` (or the configuration's `dataDir`).
    pub store: Option<headroom_storage::Store>,
    /// Store directory override (`--data-dir`).
    pub data_dir: Option<PathBuf>,
    /// Extender listener override (`--listen`).
    pub listen: Option<SocketAddr>,
    /// Inspection API listener override (`--api-listen`).
    pub api_listen: Option<SocketAddr>,
    /// Told the listeners' actual addresses once they are bound (tests listen on port 0).
    pub bound: Option<oneshot::Sender<Bound>>,
    /// Who answers TokenReviews and SubjectAccessReviews; `None`: the API server.
    pub reviewer: Option<Arc<dyn Reviewer>>,
    /// Where the Lease lives; `None`: the API server.
    pub lease_store: Option<Arc<dyn LeaseStore>>,
    /// More routes to serve on the same listener (the inspection API).
    pub extra_routes: Option<Router>,
    /// How much the queue from the scheduling loop to the decision sink holds (default
    /// [`ChannelBounds::default`](crate::decisions::ChannelBounds); tests shrink it to flood it).
    pub decision_channel: crate::decisions::ChannelBounds,
}

impl ServeOptions {
    /// Options with defaults for everything but the configuration and the client.
    pub fn new(config: Config, client: Client) -> ServeOptions {
        ServeOptions {
            config,
            client,
            server: String::new(),
            store: None,
            data_dir: None,
            listen: None,
            api_listen: None,
            bound: None,
            reviewer: None,
            lease_store: None,
            extra_routes: None,
            decision_channel: Default::default(),
        }
    }
}

/// Where `serve` listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// The extender's listener (and probes).
    pub extender: SocketAddr,
    /// The inspection API's listener (and probes).
    pub api: SocketAddr,
    /// The read-only viewer listener (`serve.viewerListen`), if configured.
    pub viewer: Option<SocketAddr>,
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
            "waiting for the initial lists of nodes, pods, namespaces and workloads\n".into(),
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

/// Serves `app` (the read-only inspection routes) on `addr` in plain HTTP without
/// authentication: the API server's service proxy, which has checked the caller's
/// `services/proxy` grant, does not forward credentials (see `serve.viewerListen`).
async fn serve_viewer(running: &mut Running, addr: &str, app: Router) -> Result<SocketAddr> {
    let listen_error = |source| Error::Listen {
        addr: addr.to_string(),
        source,
    };
    let addr: SocketAddr = addr
        .parse()
        .map_err(|_| Error::Task(format!("serve.viewerListen: bad address {addr:?}")))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(listen_error)?;
    let local = listener.local_addr().map_err(listen_error)?;
    tracing::info!(%local, "serving the read-only viewer on http (for kubectl headroom)");
    let stop = running.phases.stopped(Phase::Intake);
    running.phases.spawn(Phase::Intake, async move {
        let r = axum::serve(listener, app)
            .with_graceful_shutdown(stop)
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "viewer listener failed");
        }
    });
    Ok(local)
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
        server,
        store,
        data_dir,
        listen,
        api_listen,
        bound,
        reviewer,
        lease_store,
        extra_routes,
        decision_channel,
    } = opts;
    let mut config = config;
    // The flags win over the file; validation then sees the addresses used (mode `none`
    // is refused on a non-loopback one).
    if let Some(a) = listen {
        config.serve.listen = a.to_string();
    }
    if let Some(a) = api_listen {
        config.serve.api_listen = a.to_string();
    }
    config.validate()?;
    crate::config::validate_config(&config)?;
    let serve = config.serve.clone();
    let parse = |field: &str, v: &str| {
        v.parse::<SocketAddr>()
            .map_err(|_| Error::Task(format!("serve.{field}: bad address {v:?}")))
    };
    let addrs = (
        parse("listen", &serve.listen)?,
        parse("apiListen", &serve.api_listen)?,
    );
    let store = match store {
        Some(s) => s,
        None => open_store(&config.data_dir(data_dir.as_deref()), &config)?,
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
    parts.explain = serve.detailed_explanations;
    parts.decision_channel = decision_channel;
    // The reporter evicts preemption's victims after the cycle and tells the queue.
    parts.async_preemption = true;
    if let Some(r) = &reservations {
        parts.reservations = Some(r.clone() as Arc<dyn ReservationSource>);
        parts.nodes_observer = Some(r.clone() as Arc<dyn NodeObserver>);
    }
    let engine = Engine::new(config, parts)?;
    // The reporter hears what every decision came to through the engine's sink.
    let reporter_stats = ReporterStats::default();
    let (reporter, settled_rx) =
        super::events::reporter_channel(&reporter_stats, Some(engine.queue().clone()));
    let mut running = engine.start(Drive::Timers, Some(reporter))?;
    let cx = Cx {
        engine: engine.clone(),
        client,
        health: Arc::new(ApiHealth::new(&server)),
        identity: serve.leader_election.identity(),
        serve,
    };
    reporter_stats.calls.report_to(cx.health.clone());

    let (leader_rx, election_rx) = cx.start_leadership(&mut running, lease_store);
    cx.start_feed(&mut running, reservations.clone());
    // Binds toward the API server go through one flow controller; the reporter's own
    // writes yield to it.
    let flow = BindFlow::new(cx.serve.binding.clone());
    flow.register(engine.metrics());
    let event_stats = cx.start_reporting(&mut running, reporter_stats.clone(), &flow, settled_rx);
    let (status_done, gc_done) =
        cx.start_reservations(&mut running, reservations, status_rx, &leader_rx);
    let bind_stats = BindStats::default();
    bind_stats.register(engine.metrics());
    let binder = Arc::new(
        ApiBinder::new(cx.client.clone(), cx.serve.request_timeout)
            .with_flow(flow, bind_stats)
            .with_health(cx.health.clone()),
    );
    let reviewer = reviewer.unwrap_or_else(|| {
        Arc::new(KubeReviewer::new(
            cx.client.clone(),
            cx.serve.request_timeout,
        ))
    });
    cx.start_http(
        &mut running,
        addrs,
        bound,
        extra_routes,
        &leader_rx,
        reviewer,
    )
    .await?;
    if cx.serve.schedule {
        cx.start_scheduling(&mut running, binder, leader_rx);
    }

    // A fatal failure stops serve as SIGTERM does (binds finished, lease released, store
    // flushed as far as it can be), then exits non-zero so that its pod is restarted.
    let mut fatal = engine.fatal();
    let fatal = tokio::select! {
        _ = shutdown => None,
        why = fatal.wait_for(Option::is_some) => why.ok().and_then(|w| w.clone()),
    };
    match &fatal {
        Some(why) => tracing::error!("{why}; stopping so that the pod restarts"),
        None => tracing::info!("shutting down: no new pods; finishing binds in flight"),
    }
    let stop = running
        .stop_within(Some(cx.serve.shutdown_grace_period))
        .await;
    let election = election_rx.await.unwrap_or_default();
    if let Some(why) = fatal {
        return Err(Error::Fatal(why));
    }
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

/// The store `serve` runs on. A damaged one (power lost mid-write) does not stop the
/// scheduler: its files are moved aside and what still reads is kept
/// ([`Store::open_or_rescue`](headroom_storage::Store::open_or_rescue)), which is logged
/// loudly, never silently.
fn open_store(dir: &std::path::Path, config: &Config) -> Result<headroom_storage::Store> {
    let (store, rescue) = headroom_storage::Store::open_or_rescue(dir, config.storage.clone())?;
    if let Some(r) = rescue {
        tracing::warn!(
            store = %dir.display(),
            moved_to = %r.moved_to.display(),
            kept = r.kept.total(),
            dropped = r.dropped,
            "the store was damaged and is rescued: {r}"
        );
    }
    Ok(store)
}

/// Reservation status writes: (written, failed).
type StatusCounts = (u64, u64);
/// Reservations the GC (marked expired, deleted).
type GcCounts = (usize, usize);

/// What the parts of the adapter share.
struct Cx {
    engine: Arc<Engine>,
    client: Client,
    /// The API server's reachability, shared by every caller of it.
    health: Arc<ApiHealth>,
    serve: ServeConfig,
    identity: String,
}

impl Cx {
    /// Leadership: the Lease elector (released in the handover phase, after every write
    /// of ours), or "always leader" without election.
    fn start_leadership(
        &self,
        running: &mut Running,
        lease_store: Option<Arc<dyn LeaseStore>>,
    ) -> (watch::Receiver<bool>, oneshot::Receiver<ElectionStats>) {
        let le = &self.serve.leader_election;
        let (leader_tx, leader_rx) = watch::channel(!le.enabled);
        let (election_tx, election_rx) = oneshot::channel();
        if le.enabled {
            let store: Arc<dyn LeaseStore> = lease_store.unwrap_or_else(|| {
                Arc::new(KubeLeaseStore::new(
                    self.client.clone(),
                    &le.namespace(),
                    &le.lease_name,
                    self.health.clone(),
                ))
            });
            let elector = LeaderElector::new(store, le, &self.identity);
            let stop = running.phases.stopped(Phase::Handover);
            running.phases.spawn(Phase::Handover, async move {
                let _ = election_tx.send(elector.run(leader_tx, stop).await);
            });
        } else {
            // Always the leader, until the handover phase (a dropped sender would read as
            // leadership lost).
            let stop = running.phases.stopped(Phase::Handover);
            running.phases.spawn(Phase::Handover, async move {
                stop.await;
                drop(leader_tx);
            });
        }
        (leader_rx, election_rx)
    }

    /// The cluster feed: the watches into the engine's cluster state.
    fn start_feed(&self, running: &mut Running, reservations: Option<Arc<KubeReservations>>) {
        let (client, cluster) = (self.client.clone(), self.engine.cluster().clone());
        let health = self.health.clone();
        // VolumeBinding's PreBind writes PV claimRefs through this client.
        self.engine
            .deps()
            .volume_binder
            .set(Arc::new(super::volumes::KubeVolumeBinder::new(
                client.clone(),
                self.engine.scheduler().cache().clone(),
                self.engine.metrics(),
            )));
        let stop = running.phases.signal(Phase::Intake);
        running.phases.spawn(Phase::Intake, async move {
            reflect::run(client, cluster, reservations, health, stop).await;
        });
    }

    /// The event writer and the reporter; they drain after the decision sink.
    fn start_reporting(
        &self,
        running: &mut Running,
        stats: ReporterStats,
        flow: &Arc<BindFlow>,
        settled: mpsc::Receiver<crate::decisions::Settled>,
    ) -> Arc<recorder::EventStats> {
        let (recorder, events_rx) = recorder::recorder();
        let event_stats = recorder.stats().clone();
        event_stats.register(self.engine.metrics());
        event_stats.calls.report_to(self.health.clone());
        let writer = recorder::run_event_writer(
            self.client.clone(),
            self.serve.events.clone(),
            self.identity.clone(),
            event_stats.clone(),
            events_rx,
            running.phases.stopped(Phase::Writers),
        );
        running
            .phases
            .spawn(Phase::Writers, futures::FutureExt::map(writer, drop));
        stats.register(self.engine.metrics());
        let reporter = Reporter {
            client: self.client.clone(),
            recorder,
            config: self.serve.clone(),
            stats,
            yield_to: Some(flow.clone()),
            queue: Some(self.engine.queue().clone()),
        };
        // The reporter drains before the event writer stops: the Scheduled events of
        // the last binds are recorded by it.
        let stop = running.phases.stopped(Phase::Reports);
        running.phases.spawn(Phase::Reports, async move {
            reporter.run(settled, stop).await;
        });
        event_stats
    }

    /// The `Reservation` status writer (leader only, drains with the writers) and GC.
    fn start_reservations(
        &self,
        running: &mut Running,
        reservations: Option<Arc<KubeReservations>>,
        status_rx: Option<mpsc::UnboundedReceiver<crd::StatusWrite>>,
        leader: &watch::Receiver<bool>,
    ) -> (oneshot::Receiver<StatusCounts>, oneshot::Receiver<GcCounts>) {
        let (status_tx, status_done) = oneshot::channel();
        if let Some(rx) = status_rx {
            let client = self.client.clone();
            let (leader, stop) = (leader.clone(), running.phases.stopped(Phase::Writers));
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
        let (gc_tx, gc_done) = oneshot::channel();
        if let Some(r) = reservations {
            let gc = crd::run_gc(
                r,
                crd::api_deleter(self.client.clone()),
                self.serve.reservations.gc_interval,
                self.serve.reservations.keep_finished,
                leader.clone(),
                running.phases.stopped(Phase::Intake),
            );
            running.phases.spawn(Phase::Intake, async move {
                let _ = gc_tx.send(gc.await);
            });
        }
        (status_done, gc_done)
    }

    /// The two listeners, each with the probes: the extender's (`serve.listen`) and the
    /// inspection API's (`serve.apiListen`, plus the caller's routes); both behind
    /// `serve.security` (TLS, client certificates or TokenReview, SubjectAccessReview).
    async fn start_http(
        &self,
        running: &mut Running,
        (ext_addr, api_addr): (SocketAddr, SocketAddr),
        bound: Option<oneshot::Sender<Bound>>,
        extra_routes: Option<Router>,
        leader: &watch::Receiver<bool>,
        reviewer: Arc<dyn Reviewer>,
    ) -> Result<()> {
        let extender_router = if self.serve.extender.enabled {
            let framework = Arc::new(build_framework_with(
                &self.serve.extender.profile(),
                self.engine.deps(),
            )?);
            // A peer's plugin in the extender's profile reads its own held figures.
            self.engine.scheduler().hold_metric_paths(&framework);
            // Each request leases the cache's snapshot for its evaluation, as a cycle
            // does: it reads the freshest state and copies nothing.
            let snapshot: Arc<dyn extender::ExtenderSnapshots> =
                self.engine.scheduler().cache().clone();
            let binder: Arc<dyn extender::ExtenderBinder> = Arc::new(ApiBinder::new(
                self.client.clone(),
                self.serve.request_timeout,
            ));
            let metrics = extender::ExtenderMetrics::default();
            metrics.register(self.engine.metrics());
            let settle = extender::ExtenderSettle {
                decisions: self.engine.decision_sender(),
                identity: self.engine.deps().identity.clone(),
                profile: crate::config::serve::EXTENDER_PROFILE.to_string(),
            };
            Some(extender::router(ExtenderState {
                framework,
                snapshot,
                binder: Some(binder),
                settle: Some(settle),
                recent: Default::default(),
                metrics,
            }))
        } else {
            None
        };
        let health = Health {
            synced: self.engine.cluster().synced.clone(),
            leader: leader.clone(),
        };
        let api_state = self.engine.api_state();
        api_state.set_ready(true);
        let viewer_app = compose_router(
            None,
            health.clone(),
            Some(crate::api::viewer_routes(api_state.clone())),
        );
        let api_routes = crate::api::routes(api_state);
        let api_app = compose_router(
            None,
            health.clone(),
            Some(match extra_routes {
                Some(x) => x.merge(api_routes),
                None => api_routes,
            }),
        );
        let ext_app = compose_router(extender_router, health, None);
        let security = &self.serve.security;
        let auth = Auth::new(security, reviewer);
        auth.register(self.engine.metrics());
        let handshakes = tls::HandshakeStats::default();
        handshakes.register(self.engine.metrics());
        let layer = axum::middleware::from_fn_with_state(auth, auth::authorize);
        let (ext_app, api_app) = (ext_app.layer(layer.clone()), api_app.layer(layer));
        let tls = match security.mode {
            SecurityMode::None => None,
            SecurityMode::Delegated => {
                let (chain, key) = tls::serving_identity(
                    security.cert_file.as_deref(),
                    security.key_file.as_deref(),
                )
                .map_err(|e| Error::Task(e.to_string()))?;
                Some(
                    tls::acceptor(chain, key, security.client_ca_file.as_deref())
                        .map_err(|e| Error::Task(e.to_string()))?,
                )
            }
        };
        let mut bound_at = Vec::new();
        for (addr, app, what) in [
            (ext_addr, ext_app, "extender"),
            (api_addr, api_app, "inspection API"),
        ] {
            let listen_error = |source| Error::Listen {
                addr: addr.to_string(),
                source,
            };
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(listen_error)?;
            let local = listener.local_addr().map_err(listen_error)?;
            let scheme = if tls.is_some() { "https" } else { "http" };
            tracing::info!(%local, identity = %self.identity, "serving the {what} on {scheme}");
            bound_at.push(local);
            let stop = running.phases.stopped(Phase::Intake);
            match &tls {
                Some(acceptor) => {
                    let (acceptor, handshakes) = (acceptor.clone(), handshakes.clone());
                    running.phases.spawn(Phase::Intake, async move {
                        tls::serve(listener, acceptor, app, handshakes, stop).await;
                    });
                }
                None => running.phases.spawn(Phase::Intake, async move {
                    let r = axum::serve(listener, app)
                        .with_graceful_shutdown(stop)
                        .await;
                    if let Err(e) = r {
                        tracing::error!(error = %e, "http listener failed");
                    }
                }),
            }
        }
        let viewer = match &self.serve.viewer_listen {
            Some(addr) => Some(serve_viewer(running, addr, viewer_app).await?),
            None => None,
        };
        if let Some(tx) = bound {
            let _ = tx.send(Bound {
                extender: bound_at[0],
                api: bound_at[1],
                viewer,
            });
        }
        Ok(())
    }

    /// The engine's scheduling loop, binding through `binder`, while the initial lists
    /// are in and this replica leads.
    fn start_scheduling(
        &self,
        running: &mut Running,
        binder: Arc<ApiBinder>,
        mut leader: watch::Receiver<bool>,
    ) {
        let (gate_tx, gate_rx) = watch::channel(false);
        let synced = self.engine.cluster().synced.clone();
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
        let engine = self.engine.clone();
        let annotate = events::bind_annotator(&self.engine.config().serve);
        // The watch confirms binds; a lost confirmation expires the pod.
        running.spawn_scheduling(
            move || engine.scheduling_loop(binder.clone(), false, annotate.clone()),
            gate_rx,
        );
    }
}

//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection`
//! does it:
//! - every `retryPeriod` each replica reads the Lease; if it holds it, it renews
//!   (`renewTime`), if the holder's lease has expired it takes it over (`holderIdentity`,
//!   `acquireTime`, `leaseTransitions + 1`), else it waits. Writes carry the
//!   `resourceVersion`, so of two replicas racing for an expired lease one gets a 409;
//! - expiry is judged on the local monotonic clock from when this replica *observed* the
//!   last change of the record (not from `renewTime`), so clock skew between nodes cannot
//!   make two replicas believe they lead;
//! - a leader that could not renew for `renewDeadline` (< `leaseDuration`) steps down at
//!   once, before any other replica can consider the lease expired;
//! - on shutdown the leader releases the lease (empty holder, 1 s duration) so a follower
//!   takes over without waiting for expiry.
//!
//! Leadership is published on a `watch` channel; the scheduling loop runs only while it
//! is true. The Lease calls go through [`LeaseStore`], so the loop also runs against an
//! in-memory store on tokio's paused clock in tests.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

use super::health::ApiHealth;
use crate::config::serve::LeaderElectionConfig;
use crate::logging::Trouble;
use headroom_scheduler::framework::BoxFuture;

/// Why a Lease call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaderError {
    /// Someone else wrote the Lease first (409) or it already exists.
    #[error("lease conflict")]
    Conflict,
    /// The API server could not be reached; already counted and logged by the shared
    /// [`ApiHealth`].
    #[error("lease API: {0}")]
    Unreachable(String),
    /// Any other failure.
    #[error("lease API: {0}")]
    Api(String),
}

/// Where the Lease lives.
pub trait LeaseStore: Send + Sync {
    /// The Lease, if it exists.
    fn get(&self) -> BoxFuture<'_, Result<Option<Lease>, LeaderError>>;
    /// Creates it; [`LeaderError::Conflict`] if it exists.
    fn create(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, LeaderError>>;
    /// Replaces it; [`LeaderError::Conflict`] if `metadata.resourceVersion` is stale.
    fn replace(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, LeaderError>>;
}

/// A Lease in the API server.
pub struct KubeLeaseStore {
    api: Api<Lease>,
    name: String,
    health: Arc<ApiHealth>,
}

impl KubeLeaseStore {
    /// The Lease `namespace/name`; calls report to `health`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        health: Arc<ApiHealth>,
    ) -> KubeLeaseStore {
        KubeLeaseStore {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            health,
        }
    }

    fn answer<T>(&self, r: kube::Result<T>) -> Result<T, LeaderError> {
        match r {
            Ok(v) => {
                self.health.answered();
                Ok(v)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                self.health.answered();
                Err(LeaderError::Conflict)
            }
            Err(e) if self.health.failed("lease", &e) => {
                Err(LeaderError::Unreachable(crate::logging::error_chain(&e)))
            }
            Err(e) => Err(LeaderError::Api(crate::logging::error_chain(&e))),
        }
    }
}

impl LeaseStore for KubeLeaseStore {
    fn get(&self) -> BoxFuture<'_, Result<Option<Lease>, LeaderError>> {
        Box::pin(async move { self.answer(self.api.get_opt(&self.name).await) })
    }
    fn create(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, LeaderError>> {
        Box::pin(async move { self.answer(self.api.create(&PostParams::default(), &lease).await) })
    }
    fn replace(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, LeaderError>> {
        Box::pin(async move {
            self.answer(
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await,
            )
        })
    }
}

/// A Lease in memory with optimistic concurrency (tests, and the simulator).
#[derive(Default)]
pub struct MemoryLeaseStore {
    lease: Mutex<Option<Lease>>,
    version: AtomicU64,
}

impl MemoryLeaseStore {
    /// The current holder, if any.
    pub fn holder(&self) -> Option<String> {
        let l = self.lease.lock().unwrap_or_else(|e| e.into_inner());
        l.as_ref()
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.clone())
            .filter(|h| !h.is_empty())
    }

    fn stamp(&self, mut lease: Lease) -> Lease {
        let v = self.version.fetch_add(1, Ordering::SeqCst) + 1;
        lease.metadata.resource_version = Some(v.to_string());
        lease
    }
}

impl LeaseStore for MemoryLeaseStore {
    fn get(&self) -> BoxFuture<'_, Result<Option<Lease>, LeaderError>> {
        Box::pin(async move { Ok(self.lease.lock().unwrap_or_else(|e| e.into_inner()).clone()) })
    }
    fn create(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, LeaderError>> {
        Box::pin(async move {
            let mut l = self.lease.lock().unwrap_or_else(|e| e.into_inner());
            if l.is_some() {
                return Err(LeaderError::Conflict);
            }
            let lease = self.stamp(lease);
            *l = Some(lease.clone());
            Ok(lease)
        })
    }
    fn replace(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, LeaderError>> {
        Box::pin(async move {
            let mut l = self.lease.lock().unwrap_or_else(|e| e.into_inner());
            let current = l.as_ref().and_then(|c| c.metadata.resource_version.clone());
            if current.is_none() || current != lease.metadata.resource_version {
                return Err(LeaderError::Conflict);
            }
            let lease = self.stamp(lease);
            *l = Some(lease.clone());
            Ok(lease)
        })
    }
}

/// A [`LeaseStore`] that can be cut off (a network partition, in tests).
pub struct Partitionable<S> {
    inner: S,
    /// While true every call fails.
    pub cut: AtomicBool,
}

impl<S> Partitionable<S> {
    /// Wraps `inner`, connected.
    pub fn new(inner: S) -> Self {
        Partitionable {
            inner,
            cut: AtomicBool::new(false),
        }
    }
}

impl<S: LeaseStore> LeaseStore for Partitionable<S> {
    fn get(&self) -> BoxFuture<'_, Result<Option<Lease>, LeaderError>> {
        if self.cut.load(Ordering::SeqCst) {
            return Box::pin(async { Err(LeaderError::Api("partitioned".into())) });
        }
        self.inner.get()
    }
    fn create(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, LeaderError>> {
        if self.cut.load(Ordering::SeqCst) {
            return Box::pin(async { Err(LeaderError::Api("partitioned".into())) });
        }
        self.inner.create(lease)
    }
    fn replace(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, LeaderError>> {
        if self.cut.load(Ordering::SeqCst) {
            return Box::pin(async { Err(LeaderError::Api("partitioned".into())) });
        }
        self.inner.replace(lease)
    }
}

impl<S: LeaseStore> LeaseStore for Arc<S> {
    fn get(&self) -> BoxFuture<'_, Result<Option<Lease>, LeaderError>> {
        (**self).get()
    }
    fn create(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, LeaderError>> {
        (**self).create(lease)
    }
    fn replace(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, LeaderError>> {
        (**self).replace(lease)
    }
}

/// One replica's elector.
pub struct LeaderElector {
    store: Arc<dyn LeaseStore>,
    name: String,
    namespace: String,
    identity: String,
    config: LeaderElectionConfig,
    observed: Option<(String, Instant)>,
}

/// What an elector did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ElectionStats {
    /// Times this replica became leader.
    pub acquired: u64,
    /// Times it stepped down (lost the lease or could not renew).
    pub lost: u64,
    /// Failed Lease calls.
    pub errors: u64,
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl LeaderElector {
    /// An elector for `identity` on the Lease behind `store`.
    pub fn new(
        store: Arc<dyn LeaseStore>,
        config: &LeaderElectionConfig,
        identity: &str,
    ) -> LeaderElector {
        LeaderElector {
            store,
            name: config.lease_name.clone(),
            namespace: config.namespace(),
            identity: identity.to_string(),
            config: config.clone(),
            observed: None,
        }
    }

    fn secs(d: Duration) -> i32 {
        i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// One acquire-or-renew attempt; true when this replica holds the lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaderError> {
        let now = Instant::now();
        let Some(current) = self.store.get().await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(Self::secs(self.config.lease_duration)),
                    acquire_time: Some(now_micro()),
                    renew_time: Some(now_micro()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.store.create(lease).await {
                Ok(_) => Ok(true),
                Err(LeaderError::Conflict) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        // The record changed (holder, renewal): restart its expiry from now.
        let fingerprint = format!(
            "{holder}|{:?}|{:?}",
            spec.renew_time.as_ref().map(|t| t.0),
            current.metadata.resource_version
        );
        let observed_at = match &self.observed {
            Some((f, at)) if *f == fingerprint => *at,
            _ => {
                self.observed = Some((fingerprint, now));
                now
            }
        };
        let duration = spec
            .lease_duration_seconds
            .filter(|s| *s > 0)
            .map_or(self.config.lease_duration, |s| {
                Duration::from_secs(s as u64)
            });
        let mine = holder == self.identity;
        let expired = now >= observed_at + duration;
        if !holder.is_empty() && !mine && !expired {
            return Ok(false);
        }
        let mut next = current.clone();
        let mut s = spec.clone();
        if !mine {
            s.acquire_time = Some(now_micro());
            s.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        s.holder_identity = Some(self.identity.clone());
        s.lease_duration_seconds = Some(Self::secs(self.config.lease_duration));
        s.renew_time = Some(now_micro());
        next.spec = Some(s);
        match self.store.replace(next).await {
            Ok(_) => Ok(true),
            Err(LeaderError::Conflict) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn release(&mut self) {
        let Ok(Ok(Some(current))) =
            tokio::time::timeout(self.config.retry_period, self.store.get()).await
        else {
            return;
        };
        let mut spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now_micro());
        let mut next = current;
        next.spec = Some(spec);
        let _ = tokio::time::timeout(self.config.retry_period, self.store.replace(next)).await;
    }

    /// Runs until `shutdown`; publishes leadership on `leader`. On shutdown a leader
    /// releases the lease (after the caller has finished its binds: run this future's
    /// shutdown last).
    pub async fn run(
        mut self,
        leader: watch::Sender<bool>,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> ElectionStats {
        let mut stats = ElectionStats::default();
        let mut last_renew: Option<Instant> = None;
        let mut next_try = Instant::now();
        let refused = Trouble::new(format!("the lease {}", self.name), "renewing again");
        tokio::pin!(shutdown);
        loop {
            let is_leader = *leader.borrow();
            // A leader steps down the moment its renew deadline passes, even while an
            // attempt is still hanging.
            let deadline = match (is_leader, last_renew) {
                (true, Some(at)) => at + self.config.renew_deadline,
                _ => Instant::now() + Duration::from_secs(3600),
            };
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                _ = tokio::time::sleep_until(deadline), if is_leader => {
                    tracing::warn!(identity = %self.identity, "could not renew the lease within renewDeadline; stepping down");
                    leader.send_replace(false);
                    stats.lost += 1;
                    continue;
                }
                _ = tokio::time::sleep_until(next_try) => {}
            }
            next_try = Instant::now() + self.config.retry_period;
            let attempt =
                tokio::time::timeout(self.config.retry_period, self.try_acquire_or_renew());
            let result = tokio::select! {
                biased;
                _ = &mut shutdown => break,
                _ = tokio::time::sleep_until(deadline), if is_leader => {
                    tracing::warn!(identity = %self.identity, "could not renew the lease within renewDeadline; stepping down");
                    leader.send_replace(false);
                    stats.lost += 1;
                    continue;
                }
                r = attempt => r.unwrap_or_else(|_| Err(LeaderError::Api("lease request timed out".into()))),
            };
            if result.is_ok() {
                refused.ok(crate::logging::now());
            }
            match result {
                Ok(true) => {
                    last_renew = Some(Instant::now());
                    if !*leader.borrow() {
                        tracing::info!(identity = %self.identity, lease = %self.name, "became leader");
                        stats.acquired += 1;
                        leader.send_replace(true);
                    }
                }
                Ok(false) => {
                    if *leader.borrow() {
                        tracing::warn!(identity = %self.identity, "lost the lease to another replica");
                        stats.lost += 1;
                        leader.send_replace(false);
                    }
                }
                Err(e) => {
                    stats.errors += 1;
                    tracing::debug!(identity = %self.identity, error = %e, "lease attempt failed");
                    // Unreachability is the shared ApiHealth's to log; a refusal (RBAC, a
                    // timeout of a server that accepted the request) is the lease's own.
                    if !matches!(e, LeaderError::Unreachable(_)) {
                        refused.failed(crate::logging::now(), "acquiring or renewing", &e);
                    }
                }
            }
        }
        if *leader.borrow() {
            leader.send_replace(false);
            self.release().await;
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LeaderElectionConfig {
        LeaderElectionConfig {
            lease_namespace: Some("kube-system".into()),
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_leader_partition_and_handover() {
        let shared = Arc::new(MemoryLeaseStore::default());
        let a_store = Arc::new(Partitionable::new(shared.clone()));
        let (a_tx, a_rx) = watch::channel(false);
        let (b_tx, b_rx) = watch::channel(false);
        let (stop_a, stop_a_rx) = tokio::sync::oneshot::channel::<()>();
        let (stop_b, stop_b_rx) = tokio::sync::oneshot::channel::<()>();
        let a = tokio::spawn(LeaderElector::new(a_store.clone(), &config(), "a").run(
            a_tx,
            async {
                let _ = stop_a_rx.await;
            },
        ));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let b = tokio::spawn(
            LeaderElector::new(shared.clone(), &config(), "b").run(b_tx, async {
                let _ = stop_b_rx.await;
            }),
        );
        let both =
            |a: &watch::Receiver<bool>, b: &watch::Receiver<bool>| (*a.borrow(), *b.borrow());

        // a leads; b follows, for a minute of renewals.
        for _ in 0..600 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_ne!(both(&a_rx, &b_rx), (true, true));
        }
        assert_eq!(both(&a_rx, &b_rx), (true, false));
        assert_eq!(shared.holder().as_deref(), Some("a"));

        // a is cut off: it must step down (renewDeadline 10 s) before b takes over
        // (leaseDuration 15 s after b last saw a renew) — never both at once.
        a_store.cut.store(true, Ordering::SeqCst);
        let cut_at = Instant::now();
        let mut a_down = None;
        let mut b_up = None;
        for _ in 0..300 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let (la, lb) = both(&a_rx, &b_rx);
            assert!(!(la && lb), "two leaders at {:?}", cut_at.elapsed());
            if !la && a_down.is_none() {
                a_down = Some(cut_at.elapsed());
            }
            if lb && b_up.is_none() {
                b_up = Some(cut_at.elapsed());
            }
        }
        let (a_down, b_up) = (a_down.unwrap(), b_up.unwrap());
        assert!(a_down <= Duration::from_secs(11), "{a_down:?}");
        assert!(
            b_up >= Duration::from_secs(13) && b_up <= Duration::from_secs(20),
            "{b_up:?}"
        );
        assert_eq!(shared.holder().as_deref(), Some("b"));

        // a reconnects and stays a follower; b releases on shutdown and a takes over at
        // its next attempt instead of waiting for expiry.
        a_store.cut.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(both(&a_rx, &b_rx), (false, true));
        stop_b.send(()).unwrap();
        let b_stats = b.await.unwrap();
        assert_eq!(b_stats.acquired, 1);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            *a_rx.borrow(),
            "a takes over the released lease within a retry period"
        );
        stop_a.send(()).unwrap();
        let a_stats = a.await.unwrap();
        assert_eq!((a_stats.acquired, a_stats.lost), (2, 1));
        assert!(shared.holder().is_none(), "released on shutdown");
    }
}

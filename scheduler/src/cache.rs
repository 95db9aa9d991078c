//! The cache: the cluster as the feed, the binding tasks and the housekeeping write it,
//! and the immutable snapshot a scheduling cycle reads.
//!
//! Upstream splits the scheduler's Cache (written by informers, and by assume and forget)
//! from the Snapshot a cycle reads. Here the cache holds the one snapshot and *lends* it
//! to the cycle: [`Cache::lease`] hands the cycle an `Arc` of it, which nobody changes
//! while the cycle reads it, and [`Cache::settle`] takes it back together with what the
//! cycle decided (the pod assumed on its node). While a lease is out, a writer neither
//! waits for the cycle nor copies the snapshot: [`Cache::write`] queues its change, and
//! `settle` applies the queued changes, in the order they came, right after the
//! assumption — as if the cycle had taken no time at all. So
//!
//! - no writer waits for a cycle: the lock is held for one change, one lease or one
//!   settlement, never for a cycle;
//! - no cycle waits for the cluster: a list of 15,000 nodes arriving mid-cycle is queued;
//! - the snapshot is never copied because a cycle reads it (copying it is O(nodes + pods):
//!   milliseconds at 15,000 nodes, ten cycles' worth).
//!
//! Readers outside the cycle take [`Cache::snapshot`] (the inspection API: a reader that
//! holds the cache's own `Arc` makes the next change copy the snapshot, counted in
//! `headroom_scheduler_snapshot_copies_total`) or a lease of their own when they read
//! often (the extender's requests, which are cycles over the nodes kube-scheduler asks
//! about).
//!
//! A write is two steps: the change to the state, run under the cache's lock (and queued
//! behind a lease), and what follows from it — queue moves, observers —, run once the lock
//! is released ([`Cache::write_then`]), in the order of the changes. Nothing but the state
//! is touched under the lock, and a change or follow-up that panics is caught, counted
//! ([`Cache::panics`]) and logged: the changes queued beside it are applied all the same,
//! and the lock is never poisoned.
//!
//! The assume cache lives here too (`CacheState::assume`): a pod placed by a cycle counts
//! on its node at once, before its asynchronous bind; a bind that fails is forgotten, a
//! successful one confirmed; an assumed pod that is neither confirmed nor forgotten within
//! the assume TTL after its bind finished expires, so a lost watch event cannot leak
//! capacity forever.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

use crate::key::{PodKey, Uid};
use crate::snapshot::{PodInfo, Snapshot};

/// What follows from a change, run after the cache's lock is released.
type FollowUp = Box<dyn FnOnce() + Send>;

/// A change queued while a cycle held the snapshot ([`Cache::write_then`]): it changes the
/// state and hands back its follow-up.
type Change = Box<dyn FnOnce(&mut CacheState) -> FollowUp + Send>;

/// The cluster state the scheduler knows, its assumed pods, and the lease of its snapshot
/// to the scheduling cycle. Shared (`Arc<Cache>`) by the cluster feed, the scheduling loop,
/// the binding tasks, the housekeeping tick and the readers.
pub struct Cache {
    inner: Mutex<Inner>,
    /// Changes and follow-ups that panicked (caught; the others were applied).
    panics: Counter,
}

struct Inner {
    state: CacheState,
    /// Snapshots lent to cycles and not yet settled (one at most under the loop).
    leases: u32,
    /// Changes written while a lease was out, in arrival order.
    pending: Vec<Change>,
}

/// What the cache holds: the snapshot and the assumed pods. Writers get it by `&mut` from
/// [`Cache::write`] and [`Cache::update`], readers by `&` from [`Cache::read`].
pub struct CacheState {
    snapshot: Arc<Snapshot>,
    assumed: HashMap<PodKey, Assumed>,
    assume_ttl: Duration,
    /// Changes that had to copy the whole snapshot because a reader still held it.
    copies: Counter,
}

/// A pod a cycle placed whose bind the API has not shown yet.
struct Assumed {
    node: String,
    uid: Uid,
    /// PVs assumed bound to the pod's claims (restored when the pod is forgotten).
    volumes: Vec<String>,
    /// Set once binding finished; the entry expires at this instant unless confirmed.
    deadline: Option<Instant>,
}

/// The snapshot lent to one cycle ([`Cache::lease`]). Give it back with [`Cache::settle`];
/// dropped without that (a cycle that panicked), it settles with no change, so changes
/// queued meanwhile are never stranded.
pub struct Lease<'a> {
    cache: &'a Cache,
    snapshot: Option<Arc<Snapshot>>,
}

impl std::ops::Deref for Lease<'_> {
    type Target = Snapshot;
    fn deref(&self) -> &Snapshot {
        self.snapshot
            .as_deref()
            .expect("a lease holds its snapshot until settled")
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if self.snapshot.take().is_some() {
            self.cache.end_lease(|_| ());
        }
    }
}

/// `Arc::make_mut`, counting the copies it makes.
fn make_mut<'a>(snapshot: &'a mut Arc<Snapshot>, copies: &Counter) -> &'a mut Snapshot {
    if Arc::strong_count(snapshot) > 1 {
        copies.inc();
    }
    Arc::make_mut(snapshot)
}

impl CacheState {
    /// The snapshot as written so far.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    /// Mutable access for cluster events. Copies the whole snapshot when a reader still
    /// holds it (counted): readers outside the cycle hold it briefly, or not at all.
    pub fn snapshot_mut(&mut self) -> &mut Snapshot {
        make_mut(&mut self.snapshot, &self.copies)
    }

    /// Replaces the snapshot wholesale, forgetting every assumed pod.
    pub fn replace(&mut self, snapshot: Snapshot) {
        self.snapshot = Arc::new(snapshot);
        self.assumed.clear();
    }

    /// Sets the clock the snapshot's usage is judged by, ms since the epoch (the simulator
    /// sets simulated time; `serve` sets wall-clock time on every housekeeping tick).
    pub fn set_now_ms(&mut self, now_ms: i64) {
        if self.snapshot.usage().now_ms != now_ms {
            self.snapshot_mut().usage_mut().now_ms = now_ms;
        }
    }

    /// Records `pod` as assumed on `node` (already added to the snapshot by the caller),
    /// with the PVs assumed bound to its claims.
    pub(crate) fn assume(&mut self, pod: &PodInfo, node: &str, volumes: Vec<String>) {
        self.assumed.insert(
            pod.key(),
            Assumed {
                node: node.to_string(),
                uid: pod.uid.clone(),
                volumes,
                deadline: None,
            },
        );
    }

    /// Marks the bind of an assumed pod as finished: from `now`, it expires after the TTL
    /// unless the API confirms it.
    pub fn finish_binding(&mut self, pod: &PodKey, now: Instant) {
        if let Some(a) = self.assumed.get_mut(pod) {
            a.deadline = Some(now + self.assume_ttl);
        }
    }

    /// The API shows the pod bound: it is no longer merely assumed.
    pub fn confirm(&mut self, pod: &PodKey) {
        self.assumed.remove(pod);
    }

    /// The bind failed: the pod leaves its node. Returns the node it had been assumed on.
    pub fn forget(&mut self, pod: &PodInfo) -> Option<String> {
        let key = pod.key();
        let a = self.assumed.remove(&key)?;
        self.unassume(&key, &a);
        Some(a.node)
    }

    fn unassume(&mut self, key: &PodKey, a: &Assumed) {
        let snapshot = self.snapshot_mut();
        if !a.volumes.is_empty() {
            snapshot.volumes_mut().restore(&a.volumes);
        }
        snapshot.remove_pod(key, &a.uid);
        snapshot.forget_placement(&a.node, key);
    }

    /// Drops assumed pods whose deadline passed; returns their keys.
    pub fn expire_assumed(&mut self, now: Instant) -> Vec<PodKey> {
        let expired: Vec<PodKey> = self
            .assumed
            .iter()
            .filter(|(_, a)| a.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &expired {
            if let Some(a) = self.assumed.remove(k) {
                self.unassume(k, &a);
            }
        }
        expired
    }

    /// Number of assumed, unconfirmed pods.
    pub fn assumed_count(&self) -> usize {
        self.assumed.len()
    }
}

impl Cache {
    /// An empty cache whose assumed pods expire `assume_ttl` after their bind finished
    /// unless confirmed.
    pub fn new(assume_ttl: Duration) -> Cache {
        Cache {
            inner: Mutex::new(Inner {
                state: CacheState {
                    snapshot: Arc::new(Snapshot::new()),
                    assumed: HashMap::new(),
                    assume_ttl,
                    copies: Counter::default(),
                },
                leases: 0,
                pending: Vec::new(),
            }),
            panics: Counter::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `change` now, or — while a cycle holds the snapshot — when that cycle
    /// settles, after the changes queued before it. The writer never waits for a cycle.
    pub fn write(&self, change: impl FnOnce(&mut CacheState) + Send + 'static) {
        self.write_then(change, |()| {});
    }

    /// [`Cache::write`], then `then` with what `change` returned, once the lock is released:
    /// right away in the writer's thread, or — behind a lease — in the settling thread,
    /// after the settlement, in the order the changes came. Queue moves and observers go
    /// there, so that nothing but the state is touched under the cache's lock.
    pub fn write_then<T: Send + 'static>(
        &self,
        change: impl FnOnce(&mut CacheState) -> T + Send + 'static,
        then: impl FnOnce(T) + Send + 'static,
    ) {
        let change: Change = Box::new(move |state| {
            let t = change(state);
            Box::new(move || then(t))
        });
        let follow_up = {
            let mut inner = self.lock();
            if inner.leases > 0 {
                inner.pending.push(change);
                return;
            }
            self.apply(&mut inner.state, change)
        };
        self.follow(vec![follow_up]);
    }

    /// Runs one change, catching a panic: the state keeps what it did up to there, the
    /// panic is counted and logged, and the change's follow-up is skipped.
    fn apply(&self, state: &mut CacheState, change: Change) -> FollowUp {
        match std::panic::catch_unwind(AssertUnwindSafe(|| change(state))) {
            Ok(f) => f,
            Err(e) => {
                self.panicked("change", &e);
                Box::new(|| {})
            }
        }
    }

    /// Runs follow-ups in order, outside the lock, each on its own (one that panics does
    /// not stop the next).
    fn follow(&self, follow_ups: Vec<FollowUp>) {
        for f in follow_ups {
            if let Err(e) = std::panic::catch_unwind(AssertUnwindSafe(f)) {
                self.panicked("follow-up", &e);
            }
        }
    }

    fn panicked(&self, what: &str, e: &Box<dyn std::any::Any + Send>) {
        self.panics.inc();
        let message = e
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| e.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        tracing::error!(what, %message, "a cache write panicked; the others were applied");
    }

    /// The counter of cache writes (changes or follow-ups) that panicked (a handle:
    /// register it on the metrics).
    pub fn panics(&self) -> Counter {
        self.panics.clone()
    }

    /// Applies `change` now and returns what it returns, after any queued change. While a
    /// cycle holds the snapshot this copies it (counted): for callers that never run
    /// beside a cycle (tests, `place`) or need the answer at once.
    pub fn update<R>(&self, change: impl FnOnce(&mut CacheState) -> R) -> R {
        let (r, follow_ups) = {
            let mut inner = self.lock();
            let follow_ups = self.apply_pending(&mut inner);
            (change(&mut inner.state), follow_ups)
        };
        self.follow(follow_ups);
        r
    }

    /// Reads the state as written so far (changes queued behind a lease not yet applied).
    pub fn read<R>(&self, f: impl FnOnce(&CacheState) -> R) -> R {
        f(&self.lock().state)
    }

    /// The snapshot as written so far, to read outside a cycle. Hold it briefly: while it
    /// is held, the next change copies the snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.lock().state.snapshot.clone()
    }

    /// The counter of whole-snapshot copies (a handle: register it on the metrics).
    pub fn copies(&self) -> Counter {
        self.lock().state.copies.clone()
    }

    /// Lends the snapshot to a cycle: until the lease is settled (or dropped), writes are
    /// queued instead of copying it.
    pub fn lease(&self) -> Lease<'_> {
        let mut inner = self.lock();
        inner.leases += 1;
        Lease {
            cache: self,
            snapshot: Some(inner.state.snapshot.clone()),
        }
    }

    /// Takes a lease back: `decided` applies what the cycle decided (its `&mut` finds the
    /// snapshot unshared, so nothing is copied), then the changes queued meanwhile are
    /// applied in order. Returns what `decided` returns.
    pub fn settle<R>(&self, mut lease: Lease<'_>, decided: impl FnOnce(&mut CacheState) -> R) -> R {
        // The cycle's Arc goes first, so `decided` changes the snapshot in place.
        lease.snapshot = None;
        self.end_lease(decided)
    }

    fn end_lease<R>(&self, decided: impl FnOnce(&mut CacheState) -> R) -> R {
        let (r, follow_ups) = {
            let mut inner = self.lock();
            inner.leases = inner.leases.saturating_sub(1);
            let r = decided(&mut inner.state);
            let follow_ups = if inner.leases == 0 {
                self.apply_pending(&mut inner)
            } else {
                Vec::new()
            };
            (r, follow_ups)
        };
        self.follow(follow_ups);
        r
    }

    /// Applies the queued changes in order; returns their follow-ups.
    fn apply_pending(&self, inner: &mut Inner) -> Vec<FollowUp> {
        std::mem::take(&mut inner.pending)
            .into_iter()
            .map(|change| self.apply(&mut inner.state, change))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::*;
    use serde_json::json;

    fn cache_with(nodes: &[&str]) -> Arc<Cache> {
        let cache = Arc::new(Cache::new(Duration::from_secs(30)));
        cache.update(|c| {
            c.replace(Snapshot::build(
                nodes.iter().map(|n| node(n, json!({}))),
                [],
            ))
        });
        cache
    }

    /// A change or follow-up that panics loses no other write: behind a lease, the changes
    /// queued before and after it are applied and their follow-ups run, in order; the
    /// panics are counted, and the cache's lock is not poisoned. Follow-ups run once the
    /// lock is released: one that reads the cache does not deadlock.
    #[test]
    fn a_panicking_write_loses_no_other_write() {
        let cache = cache_with(&["n1"]);
        let lease = cache.lease();
        let followed = Arc::new(Mutex::new(Vec::new()));
        for name in ["n2", "boom", "n3"] {
            let (followed, reader) = (followed.clone(), cache.clone());
            cache.write_then(
                move |c| {
                    assert_ne!(name, "boom", "a bad change");
                    c.snapshot_mut()
                        .upsert_node(Arc::new(node(name, json!({}))));
                    name
                },
                move |name| {
                    // Outside the lock: reading the cache here would deadlock under it.
                    let nodes = reader.read(|c| c.snapshot().len());
                    followed.lock().unwrap().push((name, nodes));
                },
            );
        }
        cache.write_then(|_| (), |()| panic!("a bad follow-up"));
        let f = followed.clone();
        cache.write_then(
            |c| {
                c.snapshot_mut()
                    .upsert_node(Arc::new(node("n4", json!({}))));
            },
            move |()| f.lock().unwrap().push(("n4", 0)),
        );
        cache.settle(lease, |_| ());
        assert_eq!(cache.snapshot().len(), 4, "n1 and every good change");
        // Each follow-up ran after the whole settlement, in order.
        assert_eq!(
            *followed.lock().unwrap(),
            vec![("n2", 4), ("n3", 4), ("n4", 0)]
        );
        assert_eq!(cache.panics().get(), 2);
        assert!(!cache.inner.is_poisoned());
        // Without a lease, a panicking change is caught too and the next write applies.
        cache.write(|_| panic!("another bad change"));
        cache.write(|c| {
            c.snapshot_mut().remove_node("n4");
        });
        assert_eq!(cache.read(|c| c.snapshot().len()), 3);
        assert_eq!(cache.panics().get(), 3);
    }

    /// While a cycle holds its lease, writes wait in order and copy nothing; settling
    /// applies the cycle's change first, then theirs.
    #[test]
    fn writes_behind_a_lease_wait_for_its_settlement_in_order() {
        let cache = cache_with(&["n1"]);
        let copies = cache.copies();
        let lease = cache.lease();
        let order = Arc::new(Mutex::new(Vec::new()));
        for (i, name) in ["n2", "n3"].into_iter().enumerate() {
            let order = order.clone();
            cache.write(move |c| {
                c.snapshot_mut()
                    .upsert_node(Arc::new(node(name, json!({}))));
                order.lock().unwrap().push(i + 1);
            });
        }
        assert_eq!(lease.len(), 1, "the cycle reads what it leased");
        assert_eq!(cache.snapshot().len(), 1, "the writes wait for the lease");
        let o = order.clone();
        let seen = cache.settle(lease, move |c| {
            o.lock().unwrap().push(0);
            c.snapshot().len()
        });
        assert_eq!(seen, 1, "the cycle's change comes first");
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        assert_eq!(cache.snapshot().len(), 3);
        assert_eq!(copies.get(), 0, "nothing was copied");
        // Without a lease a write applies at once.
        cache.write(|c| {
            c.snapshot_mut().remove_node("n3");
        });
        assert_eq!(cache.read(|c| c.snapshot().len()), 2);
    }

    /// A lease dropped without settling (a cycle that panicked) still lets the queued
    /// writes through.
    #[test]
    fn a_dropped_lease_releases_the_queued_writes() {
        let cache = cache_with(&["n1"]);
        let lease = cache.lease();
        cache.write(|c| {
            c.snapshot_mut().remove_node("n1");
        });
        assert_eq!(cache.snapshot().len(), 1);
        drop(lease);
        assert_eq!(cache.snapshot().len(), 0);
    }

    /// `update` answers at once, after the queued writes, even behind a lease (copying).
    #[test]
    fn update_applies_queued_writes_first() {
        let cache = cache_with(&["n1"]);
        let copies = cache.copies();
        let lease = cache.lease();
        cache.write(|c| {
            c.snapshot_mut().remove_node("n1");
        });
        let len = cache.update(|c| {
            c.snapshot_mut()
                .upsert_node(Arc::new(node("n2", json!({}))));
            c.snapshot().len()
        });
        assert_eq!(len, 1);
        assert_eq!(
            copies.get(),
            1,
            "the leased snapshot was copied, not changed"
        );
        assert_eq!(lease.len(), 1);
        assert!(lease.get("n1").is_some());
        drop(lease);
        assert!(cache.snapshot().get("n2").is_some());
    }
}

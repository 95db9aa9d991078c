//! Watches (kube-rs `watcher`s) for Nodes, Pods, Namespaces and Reservations, applied to
//! the scheduler's snapshot and the scheduling queue.
//!
//! - Nodes: upserted into the snapshot; a new node, or a change scheduling can see (labels,
//!   taints, allocatable, `unschedulable`, images), moves unschedulable pods back
//!   (`NodeAdded`/`NodeUpdated`). Heartbeats and condition-only updates do not.
//! - Pods, all of them: assigned pods feed the snapshot (an assumed pod is confirmed when
//!   the watch shows it bound); unassigned pods whose `schedulerName` is one of ours feed
//!   the queue; terminal or deleted pods leave both (`PodDeleted`). A pod on a node the
//!   snapshot does not know yet waits until that node arrives.
//! - Namespaces: their labels, for namespaceSelector.
//! - Reservations: into [`KubeReservations`](super::crd::KubeReservations).
//!
//! A watch that fails is retried with backoff; when the API server answers `410 Gone`
//! (resourceVersion too old) the watcher re-lists. A re-list is applied as a diff: objects
//! absent from the new list are removed, the rest upserted. The queue is never rebuilt, so
//! backoff and attempts of pending pods survive it.
//!
//! The state here is applied synchronously by [`ClusterState`], which the tests drive
//! directly; the watch loops only feed it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Client;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::Notify;

use super::crd::{KubeReservations, ReservationResource};
use crate::queue::{ClusterEvent, PodKey, SchedulingQueue};
use crate::scheduler::Scheduler;
use crate::snapshot::PodInfo;

/// Counters of the watches.
#[derive(Debug, Default)]
pub struct ReflectStats {
    /// Watch errors (each followed by a retry with backoff).
    pub watch_errors: AtomicU64,
    /// (Re-)lists applied.
    pub relists: AtomicU64,
    /// Pods added to the queue.
    pub queued: AtomicU64,
    /// Objects that could not be read (logged, skipped).
    pub bad_objects: AtomicU64,
}

/// Which initial lists are complete.
#[derive(Debug, Default)]
pub struct Synced {
    nodes: AtomicBool,
    pods: AtomicBool,
    namespaces: AtomicBool,
    changed: Notify,
}

impl Synced {
    /// All of nodes, pods and namespaces have been listed once.
    pub fn all(&self) -> bool {
        self.nodes.load(Ordering::SeqCst)
            && self.pods.load(Ordering::SeqCst)
            && self.namespaces.load(Ordering::SeqCst)
    }

    /// Waits until [`all`](Self::all).
    pub async fn wait(&self) {
        loop {
            let n = self.changed.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            if self.all() {
                return;
            }
            n.await;
        }
    }

    fn set(&self, flag: &AtomicBool) {
        flag.store(true, Ordering::SeqCst);
        self.changed.notify_waiters();
    }
}

#[derive(Default)]
struct Known {
    /// Assigned pods in the snapshot (or waiting for their node): key → node.
    assigned: HashMap<PodKey, String>,
    /// Pods on nodes the snapshot does not have yet, by node.
    orphans: HashMap<String, HashMap<PodKey, Arc<PodInfo>>>,
    /// Pods handed to the queue.
    queued: HashSet<PodKey>,
}

/// The shared state the watches update.
pub struct ClusterState {
    /// The scheduler (snapshot, assume cache).
    pub scheduler: Arc<Mutex<Scheduler>>,
    /// The scheduling queue.
    pub queue: Arc<SchedulingQueue>,
    /// The reservation cache, when reservations are enabled.
    pub reservations: Option<Arc<KubeReservations>>,
    /// The scheduler names whose pods go to the queue (empty: none, extender-only).
    pub scheduler_names: HashSet<String>,
    /// Sync flags.
    pub synced: Arc<Synced>,
    /// Counters.
    pub stats: Arc<ReflectStats>,
    known: Mutex<Known>,
}

fn key_of(pod: &Pod) -> PodKey {
    PodKey::new(
        pod.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        pod.metadata.name.clone().unwrap_or_default(),
        pod.metadata.uid.clone().unwrap_or_default(),
    )
}

fn previous_is_none(event: &Option<ClusterEvent>) -> bool {
    matches!(event, Some(ClusterEvent::AssignedPodAdded))
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether a node change can alter a scheduling decision (not heartbeats or conditions).
fn node_changed(old: &Node, new: &Node) -> bool {
    let spec = |n: &Node| {
        n.spec
            .as_ref()
            .map(|s| (s.taints.clone(), s.unschedulable))
            .unwrap_or_default()
    };
    let status = |n: &Node| {
        n.status
            .as_ref()
            .map(|s| (s.allocatable.clone(), s.images.as_ref().map(Vec::len)))
            .unwrap_or_default()
    };
    old.metadata.labels != new.metadata.labels
        || spec(old) != spec(new)
        || status(old) != status(new)
}

impl ClusterState {
    /// State over the given parts.
    pub fn new(
        scheduler: Arc<Mutex<Scheduler>>,
        queue: Arc<SchedulingQueue>,
        reservations: Option<Arc<KubeReservations>>,
        scheduler_names: HashSet<String>,
    ) -> ClusterState {
        ClusterState {
            scheduler,
            queue,
            reservations,
            scheduler_names,
            synced: Arc::new(Synced::default()),
            stats: Arc::new(ReflectStats::default()),
            known: Mutex::new(Known::default()),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sched(&self) -> std::sync::MutexGuard<'_, Scheduler> {
        self.scheduler.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A node was added or changed.
    pub fn apply_node(&self, node: Node) {
        let Some(name) = node.metadata.name.clone() else {
            self.stats.bad_objects.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let orphans = self.known().orphans.remove(&name);
        let event = {
            let mut s = self.sched();
            let old = s.snapshot().get(&name).map(|i| i.node.clone());
            let event = match &old {
                None => Some(ClusterEvent::NodeAdded),
                Some(o) if node_changed(o, &node) => Some(ClusterEvent::NodeUpdated),
                Some(_) => None,
            };
            let snap = s.snapshot_mut();
            snap.upsert_node(Arc::new(node));
            for (_, p) in orphans.into_iter().flatten() {
                snap.add_pod(p, &name);
            }
            event
        };
        if let Some(r) = &self.reservations {
            r.node_changed(&name, true);
        }
        if let Some(e) = event {
            self.queue.move_all_to_active_or_backoff(e);
        }
    }

    /// A node was deleted.
    pub fn delete_node(&self, name: &str) {
        let removed = {
            let mut s = self.sched();
            let pods: Vec<Arc<PodInfo>> = s
                .snapshot()
                .get(name)
                .map(|n| n.pods.clone())
                .unwrap_or_default();
            let removed = s.snapshot_mut().remove_node(name);
            // Its pods wait for the node to come back (or for their own deletion).
            let mut known = self.known();
            let slot = known.orphans.entry(name.to_string()).or_default();
            for p in pods {
                slot.insert(PodKey::of(&p), p);
            }
            removed
        };
        if removed && let Some(r) = &self.reservations {
            r.node_changed(name, false);
        }
    }

    /// A complete node list (initial list or re-list).
    pub fn replace_nodes(&self, nodes: Vec<Node>) {
        self.stats.relists.fetch_add(1, Ordering::Relaxed);
        let names: HashSet<String> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let stale: Vec<String> = self
            .sched()
            .snapshot()
            .names()
            .iter()
            .filter(|n| !names.contains(n.as_ref()))
            .map(|n| n.to_string())
            .collect();
        for n in stale {
            self.delete_node(&n);
        }
        for n in nodes {
            self.apply_node(n);
        }
        if let Some(r) = &self.reservations {
            r.set_nodes(names, true);
        }
        self.synced.set(&self.synced.nodes);
    }

    /// A pod was added or changed.
    pub fn apply_pod(&self, pod: Pod) {
        let key = key_of(&pod);
        if key.name.is_empty() {
            self.stats.bad_objects.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if is_terminal(&pod) {
            // A finished pod frees its node, as a deleted one does.
            self.delete_pod_key(&key);
            return;
        }
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        let info = Arc::new(PodInfo::new(Arc::new(pod)));
        match node {
            Some(node) => self.apply_assigned(key, info, node),
            None => self.apply_pending(key, info),
        }
    }

    fn apply_assigned(&self, key: PodKey, info: Arc<PodInfo>, node: String) {
        let mut known = self.known();
        let previous = known.assigned.insert(key.clone(), node.clone());
        let was_queued = known.queued.remove(&key);
        let event = {
            let mut s = self.sched();
            s.confirm(&key.namespace, &key.name);
            let event = match previous {
                None => Some(ClusterEvent::AssignedPodAdded),
                Some(_) => {
                    let snap = s.snapshot();
                    let old = snap
                        .node_of_pod(&key.namespace, &key.name, &key.uid)
                        .and_then(|i| {
                            snap.node(i)
                                .pods
                                .iter()
                                .find(|p| p.uid == key.uid && p.name == key.name)
                                .cloned()
                        });
                    // Status-only updates (the common case: readiness, container states)
                    // refresh the object without waking unschedulable pods.
                    let same = old.is_some_and(|o| {
                        o.pod.metadata.labels == info.pod.metadata.labels
                            && o.pod.spec == info.pod.spec
                    });
                    (!same).then_some(ClusterEvent::AssignedPodUpdated)
                }
            };
            if !s.snapshot_mut().add_pod(info.clone(), &node) {
                known
                    .orphans
                    .entry(node)
                    .or_default()
                    .insert(key.clone(), info.clone());
            }
            event
        };
        drop(known);
        // The queue drops a pod that gained spec.nodeName (bound by us or by another
        // scheduler), including one in flight.
        if was_queued || previous_is_none(&event) {
            self.queue.update(info);
        }
        if let Some(e) = event {
            self.queue.move_all_to_active_or_backoff(e);
        }
    }

    fn apply_pending(&self, key: PodKey, info: Arc<PodInfo>) {
        let ours = info
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .is_some_and(|n| self.scheduler_names.contains(n));
        let deleting = info.pod.metadata.deletion_timestamp.is_some();
        let mut known = self.known();
        if !ours || deleting {
            if known.queued.remove(&key) {
                drop(known);
                self.queue.delete(&key);
            }
            return;
        }
        let fresh = known.queued.insert(key);
        drop(known);
        if fresh {
            self.stats.queued.fetch_add(1, Ordering::Relaxed);
        }
        self.queue.add(info);
    }

    /// A pod was deleted.
    pub fn delete_pod(&self, pod: &Pod) {
        self.delete_pod_key(&key_of(pod));
    }

    fn delete_pod_key(&self, key: &PodKey) {
        let mut known = self.known();
        let was_queued = known.queued.remove(key);
        let node = known.assigned.remove(key);
        if let Some(n) = &node
            && let Some(o) = known.orphans.get_mut(n)
        {
            o.remove(key);
        }
        drop(known);
        if was_queued {
            self.queue.delete(key);
        }
        let removed = {
            let mut s = self.sched();
            s.snapshot_mut()
                .remove_pod(&key.namespace, &key.name, &key.uid)
                .is_some()
        };
        if removed || node.is_some() {
            self.queue
                .move_all_to_active_or_backoff(ClusterEvent::PodDeleted);
        }
    }

    /// A complete pod list (initial list or re-list): pods not in it are gone.
    pub fn replace_pods(&self, pods: Vec<Pod>) {
        self.stats.relists.fetch_add(1, Ordering::Relaxed);
        let keys: HashSet<PodKey> = pods.iter().map(key_of).collect();
        let stale: Vec<PodKey> = {
            let known = self.known();
            known
                .assigned
                .keys()
                .chain(known.queued.iter())
                .filter(|k| !keys.contains(*k))
                .cloned()
                .collect()
        };
        for k in stale {
            self.delete_pod_key(&k);
        }
        for p in pods {
            self.apply_pod(p);
        }
        self.synced.set(&self.synced.pods);
    }

    /// A namespace was added or changed.
    pub fn apply_namespace(&self, ns: &Namespace) {
        self.sched().snapshot_mut().upsert_namespace(ns);
    }

    /// A complete namespace list.
    pub fn replace_namespaces(&self, list: Vec<Namespace>) {
        self.stats.relists.fetch_add(1, Ordering::Relaxed);
        for ns in &list {
            self.apply_namespace(ns);
        }
        self.synced.set(&self.synced.namespaces);
    }

    /// Number of pods this state queued and still tracks as pending.
    pub fn queued_count(&self) -> usize {
        self.known().queued.len()
    }
}

/// Feeds one watch's events to `apply` until `shutdown`, buffering a (re-)list until it
/// is complete. Errors are logged and counted; the stream backs off and recovers itself.
async fn pump<K, F>(
    kind: &'static str,
    api: Api<K>,
    stats: Arc<ReflectStats>,
    mut on: F,
    shutdown: impl std::future::Future<Output = ()>,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: FnMut(WatchItem<K>),
{
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    tokio::pin!(stream);
    tokio::pin!(shutdown);
    let mut buffer: Option<Vec<K>> = None;
    loop {
        let ev = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { break };
        match ev {
            Ok(Event::Init) => buffer = Some(Vec::new()),
            Ok(Event::InitApply(o)) => buffer.get_or_insert_with(Vec::new).push(o),
            Ok(Event::InitDone) => on(WatchItem::List(buffer.take().unwrap_or_default())),
            Ok(Event::Apply(o)) => on(WatchItem::Apply(o)),
            Ok(Event::Delete(o)) => on(WatchItem::Delete(o)),
            Err(e) => {
                stats.watch_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(kind, error = %e, "watch failed; retrying with backoff");
            }
        }
    }
}

/// One watch event, after list buffering.
pub enum WatchItem<K> {
    /// A complete list.
    List(Vec<K>),
    /// Added or modified.
    Apply(K),
    /// Deleted.
    Delete(K),
}

/// Runs the watches until `shutdown`: nodes, pods, namespaces, and reservations when
/// the state has a reservation cache.
pub async fn run(
    client: Client,
    state: Arc<ClusterState>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let shutdown = || {
        let mut rx = stop.clone();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    };
    let s = state.clone();
    let nodes = pump::<Node, _>(
        "Node",
        Api::all(client.clone()),
        state.stats.clone(),
        move |item| match item {
            WatchItem::List(l) => s.replace_nodes(l),
            WatchItem::Apply(n) => s.apply_node(n),
            WatchItem::Delete(n) => s.delete_node(n.metadata.name.as_deref().unwrap_or("")),
        },
        shutdown(),
    );
    let s = state.clone();
    let pods = pump::<Pod, _>(
        "Pod",
        Api::all(client.clone()),
        state.stats.clone(),
        move |item| match item {
            WatchItem::List(l) => s.replace_pods(l),
            WatchItem::Apply(p) => s.apply_pod(p),
            WatchItem::Delete(p) => s.delete_pod(&p),
        },
        shutdown(),
    );
    let s = state.clone();
    let namespaces = pump::<Namespace, _>(
        "Namespace",
        Api::all(client.clone()),
        state.stats.clone(),
        move |item| match item {
            WatchItem::List(l) => s.replace_namespaces(l),
            WatchItem::Apply(n) => s.apply_namespace(&n),
            // Labels of a deleted namespace no longer matter: no pod can be in it.
            WatchItem::Delete(_) => {}
        },
        shutdown(),
    );
    let reservations = {
        let r = state.reservations.clone();
        let stats = state.stats.clone();
        let client = client.clone();
        let shutdown = shutdown();
        async move {
            let Some(r) = r else { return };
            pump::<ReservationResource, _>(
                "Reservation",
                Api::all(client),
                stats,
                move |item| match item {
                    WatchItem::List(l) => r.replace_all(l.into_iter().map(Arc::new).collect()),
                    WatchItem::Apply(o) => r.apply(Arc::new(o)),
                    WatchItem::Delete(o) => r.delete(
                        o.metadata.namespace.as_deref().unwrap_or(""),
                        o.metadata.name.as_deref().unwrap_or(""),
                    ),
                },
                shutdown,
            )
            .await
        }
    };
    futures::join!(nodes, pods, namespaces, reservations);
}

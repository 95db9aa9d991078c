//! The cluster as the engine knows it: the sink every cluster feed writes to.
//!
//! A feed — the API server's watches under `serve` ([`crate::kube::reflect`]), the
//! scenario under `simulate` — reports what exists: nodes, pods, namespaces. This module
//! applies it to the scheduler's snapshot and the scheduling queue, the same way for every
//! feed, so `simulate` exercises exactly the path a watch event takes under `serve`:
//!
//! - Nodes: upserted into the snapshot; a new node, or a change scheduling can see (labels,
//!   taints, allocatable, `unschedulable`, images), moves unschedulable pods back
//!   (`NodeAdded`/`NodeUpdated`). Heartbeats and condition-only updates do not.
//! - Pods, all of them: assigned pods feed the snapshot (an assumed pod is confirmed when
//!   the feed shows it bound); unassigned pods whose `schedulerName` is one of ours feed
//!   the queue; terminal or deleted pods leave both (`PodDeleted`). A pod on a node the
//!   snapshot does not know yet waits until that node arrives.
//! - Namespaces: their labels, for namespaceSelector.
//!
//! A complete list (a watch's initial list or a re-list after `410 Gone`) is applied as a
//! diff: objects absent from it are removed, the rest upserted. The queue is never
//! rebuilt, so the backoff and attempts of pending pods survive a re-list.
//!
//! Each change is written to the cache ([`Cache::write_then`]) in two steps: the snapshot
//! and this state's own bookkeeping, under the cache's lock (queued behind a cycle's lease
//! if one is out), then its follow-ups — queue moves, the node observer — once the lock
//! is released, in the order the feed reported the changes.
//!
//! The state also answers the collectors' [`PodLister`]: the pods it knows, so runs
//! collected from kubelet stats or Prometheus get their pod's builder identity.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use headroom_collectors::PodLister;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::Notify;

use headroom_scheduler::cache::{Cache, CacheState};
use headroom_scheduler::key::PodId;
use headroom_scheduler::queue::{ClusterEvent, SchedulingQueue};
use headroom_scheduler::snapshot::PodInfo;
use headroom_scheduler::snapshot::volumes::{VolumeKind, VolumeObject};
use headroom_scheduler::snapshot::workloads::{Workload, WorkloadKind};

/// Told when nodes come and go (the Reservation custom resources show `Pending` while
/// their node is missing).
pub trait NodeObserver: Send + Sync {
    /// `name` was added or changed (`exists`), or deleted.
    fn node_changed(&self, name: &str, exists: bool);
    /// A complete node list arrived: these nodes exist, no others.
    fn nodes_listed(&self, names: &HashSet<String>);
}

/// What a feed change leaves to do once the cache's lock is released: the queue and the
/// node observer are told after the snapshot has the change, never under its lock.
#[derive(Debug)]
enum FollowUp {
    /// Unschedulable pods this event may help go back to active or backoff.
    Move(ClusterEvent),
    /// A pod we queued gained `spec.nodeName` (bound by us or another scheduler): the
    /// queue drops it, one in flight included.
    Assigned(Arc<PodInfo>),
    /// A pending pod of ours, new or changed: into the queue.
    Queue(Arc<PodInfo>),
    /// A pod left the queue's concern (deleted, not ours any more, being deleted).
    Unqueue(PodId),
    /// An assigned pod is gone: a preemptor waiting for its victims may go on.
    Gone(PodId),
    /// A node was added or changed (`true`), or deleted.
    NodeChanged(String, bool),
    /// A complete node list arrived.
    NodesListed(HashSet<String>),
}

/// The follow-ups of one write, in order.
type FollowUps = Vec<FollowUp>;

/// The object kinds a feed reports, as metric label values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Nodes.
    Node,
    /// Pods.
    Pod,
    /// Namespaces.
    Namespace,
    /// `Reservation` custom resources.
    Reservation,
    /// Services, ReplicationControllers, ReplicaSets, StatefulSets (default spreading).
    Workload(WorkloadKind),
    /// PersistentVolumes.
    PersistentVolume,
    /// PersistentVolumeClaims.
    PersistentVolumeClaim,
    /// StorageClasses.
    StorageClass,
    /// CSINodes.
    CSINode,
    /// PodDisruptionBudgets (preemption).
    PodDisruptionBudget,
    /// PriorityClasses.
    PriorityClass,
}

impl Kind {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Node => "Node",
            Kind::Pod => "Pod",
            Kind::Namespace => "Namespace",
            Kind::Reservation => "Reservation",
            Kind::Workload(k) => k.as_str(),
            Kind::PersistentVolume => "PersistentVolume",
            Kind::PersistentVolumeClaim => "PersistentVolumeClaim",
            Kind::StorageClass => "StorageClass",
            Kind::CSINode => "CSINode",
            Kind::PodDisruptionBudget => "PodDisruptionBudget",
            Kind::PriorityClass => "PriorityClass",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

/// Counters of the cluster feed, registered on the engine's metrics
/// (`headroom_cluster_*_total{kind}`). Cheap to clone: every field is a handle.
#[derive(Debug, Clone, Default)]
pub struct FeedStats {
    watch_errors: Family<KindLabel, Counter>,
    lists: Family<KindLabel, Counter>,
    bad_objects: Family<KindLabel, Counter>,
    queued: Counter,
}

impl FeedStats {
    /// Registers the counters on `metrics`.
    pub fn register(&self, metrics: &crate::metrics::Metrics) {
        let workloads = WorkloadKind::ALL.map(Kind::Workload);
        let kinds = [
            Kind::Node,
            Kind::Pod,
            Kind::Namespace,
            Kind::Reservation,
            Kind::PersistentVolume,
            Kind::PersistentVolumeClaim,
            Kind::StorageClass,
            Kind::CSINode,
            Kind::PodDisruptionBudget,
            Kind::PriorityClass,
        ];
        for k in kinds.into_iter().chain(workloads) {
            let l = KindLabel { kind: k.as_str() };
            let _ = self.watch_errors.get_or_create(&l);
            let _ = self.lists.get_or_create(&l);
            let _ = self.bad_objects.get_or_create(&l);
        }
        metrics.register(
            "headroom_cluster_watch_errors",
            "Watch failures, each followed by a retry with backoff, by kind",
            self.watch_errors.clone(),
        );
        metrics.register(
            "headroom_cluster_lists",
            "Complete lists applied (initial lists and re-lists after 410 Gone), by kind",
            self.lists.clone(),
        );
        metrics.register(
            "headroom_cluster_bad_objects",
            "Objects that could not be read (no name), skipped, by kind",
            self.bad_objects.clone(),
        );
        metrics.register(
            "headroom_cluster_pods_queued",
            "Pending pods handed to the scheduling queue",
            self.queued.clone(),
        );
    }

    /// Counts a watch failure.
    pub fn watch_error(&self, kind: Kind) {
        self.watch_errors
            .get_or_create(&KindLabel {
                kind: kind.as_str(),
            })
            .inc();
    }

    fn list(&self, kind: Kind) {
        self.lists
            .get_or_create(&KindLabel {
                kind: kind.as_str(),
            })
            .inc();
    }

    fn bad_object(&self, kind: Kind) {
        self.bad_objects
            .get_or_create(&KindLabel {
                kind: kind.as_str(),
            })
            .inc();
    }

    /// Watch failures of `kind` so far.
    pub fn watch_errors(&self, kind: Kind) -> u64 {
        self.watch_errors
            .get_or_create(&KindLabel {
                kind: kind.as_str(),
            })
            .get()
    }

    /// Complete lists of `kind` applied so far.
    pub fn lists(&self, kind: Kind) -> u64 {
        self.lists
            .get_or_create(&KindLabel {
                kind: kind.as_str(),
            })
            .get()
    }

    /// Pods handed to the queue so far.
    pub fn queued(&self) -> u64 {
        self.queued.get()
    }
}

/// Which initial lists are complete.
#[derive(Debug, Default)]
pub struct Synced {
    nodes: AtomicBool,
    pods: AtomicBool,
    namespaces: AtomicBool,
    /// Per [`WorkloadKind`] (in [`WorkloadKind::ALL`] order).
    workloads: [AtomicBool; 4],
    /// Per [`VolumeKind`] (in declaration order): a pod's claims are judged against the
    /// listed PVs, never against a volume state still loading.
    volumes: [AtomicBool; 4],
    /// PodDisruptionBudgets, PriorityClasses: preemption must not pick victims while the
    /// budgets protecting them are unknown.
    policy: [AtomicBool; 2],
    changed: Notify,
}

impl Synced {
    /// Every kind the scheduler reads has been listed once (nodes, pods, namespaces, the
    /// workload kinds, the volume kinds, PodDisruptionBudgets and PriorityClasses), as
    /// kube-scheduler waits for its informers.
    pub fn all(&self) -> bool {
        self.nodes.load(Ordering::SeqCst)
            && self.pods.load(Ordering::SeqCst)
            && self.namespaces.load(Ordering::SeqCst)
            && self.workloads.iter().all(|w| w.load(Ordering::SeqCst))
            && self.volumes.iter().all(|w| w.load(Ordering::SeqCst))
            && self.policy.iter().all(|w| w.load(Ordering::SeqCst))
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
    assigned: HashMap<PodId, String>,
    /// Pods on nodes the snapshot does not have yet, by node.
    orphans: HashMap<String, HashMap<PodId, Arc<PodInfo>>>,
    /// Pods handed to the queue.
    queued: HashSet<PodId>,
}

/// The shared state every cluster feed updates.
pub struct ClusterState {
    /// The cache (snapshot, assumed pods) the changes are written to.
    pub cache: Arc<Cache>,
    /// The scheduling queue.
    pub queue: Arc<SchedulingQueue>,
    /// Told about nodes (the reservation cache under `serve`).
    pub nodes_observer: Option<Arc<dyn NodeObserver>>,
    /// The scheduler names whose pods go to the queue (empty: none, extender-only).
    pub scheduler_names: HashSet<String>,
    /// Sync flags.
    pub synced: Arc<Synced>,
    /// Counters.
    pub stats: FeedStats,
    known: Mutex<Known>,
}

/// The feed kind of a volume kind (metric labels).
pub fn volume_kind(kind: VolumeKind) -> Kind {
    match kind {
        VolumeKind::Pv => Kind::PersistentVolume,
        VolumeKind::Pvc => Kind::PersistentVolumeClaim,
        VolumeKind::Class => Kind::StorageClass,
        VolumeKind::CsiNode => Kind::CSINode,
    }
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
        cache: Arc<Cache>,
        queue: Arc<SchedulingQueue>,
        nodes_observer: Option<Arc<dyn NodeObserver>>,
        scheduler_names: HashSet<String>,
        stats: FeedStats,
    ) -> ClusterState {
        ClusterState {
            cache,
            queue,
            nodes_observer,
            scheduler_names,
            synced: Arc::new(Synced::default()),
            stats,
            known: Mutex::new(Known::default()),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes `change` to the cache with this state at hand: at once, or after the cycle
    /// in flight (see [`Cache::write_then`]); the follow-ups it lists (queue moves, the
    /// node observer) run once the cache's lock is released. Every change of the feed goes
    /// this way, so the queue and the snapshot see the changes in the order the feed
    /// reported them.
    fn write(
        self: &Arc<Self>,
        change: impl FnOnce(&ClusterState, &mut CacheState, &mut FollowUps) + Send + 'static,
    ) {
        let (this, after) = (self.clone(), self.clone());
        self.cache.write_then(
            move |c| {
                let mut follow_ups = FollowUps::new();
                change(&this, c, &mut follow_ups);
                follow_ups
            },
            move |follow_ups| after.follow(follow_ups),
        );
    }

    /// Runs a write's follow-ups, outside the cache's lock.
    fn follow(&self, follow_ups: FollowUps) {
        for f in follow_ups {
            match f {
                FollowUp::Move(e) => {
                    self.queue.move_all_to_active_or_backoff(e);
                }
                FollowUp::Assigned(info) => {
                    self.queue.update(info);
                }
                FollowUp::Queue(info) => {
                    self.queue.add(info);
                }
                FollowUp::Unqueue(id) => {
                    self.queue.delete(&id);
                }
                FollowUp::Gone(id) => {
                    self.queue.victim_gone(&id);
                }
                FollowUp::NodeChanged(name, exists) => {
                    if let Some(r) = &self.nodes_observer {
                        r.node_changed(&name, exists);
                    }
                }
                FollowUp::NodesListed(names) => {
                    if let Some(r) = &self.nodes_observer {
                        r.nodes_listed(&names);
                    }
                }
            }
        }
    }

    /// A node was added or changed.
    pub fn apply_node(self: &Arc<Self>, node: Node) {
        let Some(name) = node.metadata.name.clone().filter(|n| !n.is_empty()) else {
            self.stats.bad_object(Kind::Node);
            return;
        };
        self.write(move |this, c, f| this.node_applied(c, f, node, name));
    }

    fn node_applied(&self, c: &mut CacheState, f: &mut FollowUps, node: Node, name: String) {
        let orphans = self.known().orphans.remove(&name);
        let old = c.snapshot().get(&name).map(|i| i.node.clone());
        let event = match &old {
            None => Some(ClusterEvent::NodeAdded),
            Some(o) if node_changed(o, &node) => Some(ClusterEvent::NodeUpdated),
            Some(_) => None,
        };
        let snap = c.snapshot_mut();
        snap.upsert_node(Arc::new(node));
        for (_, p) in orphans.into_iter().flatten() {
            snap.add_pod(p, &name);
        }
        f.push(FollowUp::NodeChanged(name, true));
        f.extend(event.map(FollowUp::Move));
    }

    /// A node was deleted.
    pub fn delete_node(self: &Arc<Self>, name: &str) {
        let name = name.to_string();
        self.write(move |this, c, f| this.node_deleted(c, f, &name));
    }

    fn node_deleted(&self, c: &mut CacheState, f: &mut FollowUps, name: &str) {
        let pods: Vec<Arc<PodInfo>> = c
            .snapshot()
            .get(name)
            .map(|n| n.pods.clone())
            .unwrap_or_default();
        let removed = c.snapshot_mut().remove_node(name);
        // Its pods wait for the node to come back (or for their own deletion).
        {
            let mut known = self.known();
            let slot = known.orphans.entry(name.to_string()).or_default();
            for p in pods {
                slot.insert(PodId::of(&p), p);
            }
        }
        if removed {
            f.push(FollowUp::NodeChanged(name.to_string(), false));
        }
    }

    /// A complete node list (initial list or re-list).
    pub fn replace_nodes(self: &Arc<Self>, nodes: Vec<Node>) {
        let names: HashSet<String> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        for n in nodes {
            self.apply_node(n);
        }
        self.nodes_listed(names);
    }

    /// A complete node list ended, its nodes already applied one by one as they arrived:
    /// nodes not in it are gone.
    pub fn nodes_listed(self: &Arc<Self>, names: HashSet<String>) {
        self.stats.list(Kind::Node);
        self.write(move |this, c, f| {
            let stale: Vec<String> = c
                .snapshot()
                .names()
                .iter()
                .filter(|n| !names.contains(n.as_ref()))
                .map(|n| n.to_string())
                .collect();
            for n in stale {
                this.node_deleted(c, f, &n);
            }
            f.push(FollowUp::NodesListed(names));
            this.synced.set(&this.synced.nodes);
        });
    }

    /// A pod was added or changed.
    pub fn apply_pod(self: &Arc<Self>, pod: Pod) {
        let id = PodId::of_pod(&pod);
        if id.key.name.is_empty() {
            self.stats.bad_object(Kind::Pod);
            return;
        }
        if is_terminal(&pod) {
            // A finished pod frees its node, as a deleted one does.
            self.write(move |this, c, f| this.pod_deleted(c, f, &id));
            return;
        }
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        let info = Arc::new(PodInfo::new(Arc::new(pod)));
        match node {
            Some(node) => self.write(move |this, c, f| this.assigned_applied(c, f, id, info, node)),
            None => self.write(move |this, _, f| this.pending_applied(f, id, info)),
        }
    }

    fn assigned_applied(
        &self,
        c: &mut CacheState,
        f: &mut FollowUps,
        id: PodId,
        info: Arc<PodInfo>,
        node: String,
    ) {
        let mut known = self.known();
        let previous = known.assigned.insert(id.clone(), node.clone());
        let was_queued = known.queued.remove(&id);
        c.confirm(&id.key);
        let event = match previous {
            None => Some(ClusterEvent::AssignedPodAdded),
            Some(_) => {
                let snap = c.snapshot();
                let old = snap.node_of_pod(&id.key, &id.uid).and_then(|i| {
                    snap.node(i)
                        .pods
                        .iter()
                        .find(|p| p.uid == id.uid && p.name == id.key.name)
                        .cloned()
                });
                // Status-only updates (the common case: readiness, container states)
                // refresh the object without waking unschedulable pods.
                let same = old.is_some_and(|o| {
                    o.pod.metadata.labels == info.pod.metadata.labels && o.pod.spec == info.pod.spec
                });
                (!same).then_some(ClusterEvent::AssignedPodUpdated)
            }
        };
        if !c.snapshot_mut().add_pod(info.clone(), &node) {
            known
                .orphans
                .entry(node)
                .or_default()
                .insert(id.clone(), info.clone());
        }
        drop(known);
        // The queue drops a pod that gained spec.nodeName (bound by us or by another
        // scheduler), including one in flight.
        if was_queued || previous_is_none(&event) {
            f.push(FollowUp::Assigned(info));
        }
        f.extend(event.map(FollowUp::Move));
    }

    fn pending_applied(&self, f: &mut FollowUps, id: PodId, info: Arc<PodInfo>) {
        let ours = info
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .is_some_and(|n| self.scheduler_names.contains(n));
        let deleting = info.pod.metadata.deletion_timestamp.is_some();
        let mut known = self.known();
        if !ours || deleting {
            if known.queued.remove(&id) {
                f.push(FollowUp::Unqueue(id));
            }
            return;
        }
        let fresh = known.queued.insert(id);
        drop(known);
        if fresh {
            self.stats.queued.inc();
        }
        f.push(FollowUp::Queue(info));
    }

    /// A pod was deleted.
    pub fn delete_pod(self: &Arc<Self>, pod: &Pod) {
        let id = PodId::of_pod(pod);
        self.write(move |this, c, f| {
            this.pod_deleted(c, f, &id);
            if c.snapshot().policy().is_nominated(&id.key) {
                // A deleted pod no longer holds its nominated node.
                c.snapshot_mut().policy_mut().unnominate(&id.key);
            }
        });
    }

    fn pod_deleted(&self, c: &mut CacheState, f: &mut FollowUps, id: &PodId) {
        let mut known = self.known();
        let was_queued = known.queued.remove(id);
        let node = known.assigned.remove(id);
        if let Some(n) = &node
            && let Some(o) = known.orphans.get_mut(n)
        {
            o.remove(id);
        }
        drop(known);
        if was_queued {
            f.push(FollowUp::Unqueue(id.clone()));
        }
        let snap = c.snapshot_mut();
        let on = snap
            .node_of_pod(&id.key, &id.uid)
            .map(|i| snap.node(i).name.to_string())
            .or(node.clone());
        let removed = snap.remove_pod(&id.key, &id.uid).is_some();
        // A pod that finished or was deleted uses nothing on its node any more: its
        // placement stops counting there, and its last sample comes off the node's window.
        // Left in, it counted until `usage.warmup` ran out, on its last samples and then,
        // once they left the node window, on its whole prediction, and the window's p95
        // held it for most of the window (a farm of 2–3-minute builds carried each for
        // minutes after its end).
        if let Some(n) = on {
            snap.pod_left(&n, &id.key);
        }
        if removed || node.is_some() {
            f.push(FollowUp::Move(ClusterEvent::PodDeleted));
            f.push(FollowUp::Gone(id.clone()));
        }
    }

    /// A complete pod list (initial list or re-list): pods not in it are gone.
    pub fn replace_pods(self: &Arc<Self>, pods: Vec<Pod>) {
        let ids: HashSet<PodId> = pods.iter().map(PodId::of_pod).collect();
        for p in pods {
            self.apply_pod(p);
        }
        self.pods_listed(ids);
    }

    /// A complete pod list ended, its pods already applied one by one as they arrived:
    /// pods not in it are gone.
    pub fn pods_listed(self: &Arc<Self>, ids: HashSet<PodId>) {
        self.stats.list(Kind::Pod);
        self.write(move |this, c, f| {
            let stale: Vec<PodId> = {
                let known = this.known();
                known
                    .assigned
                    .keys()
                    .chain(known.queued.iter())
                    .filter(|k| !ids.contains(*k))
                    .cloned()
                    .collect()
            };
            for k in stale {
                this.pod_deleted(c, f, &k);
            }
            this.synced.set(&this.synced.pods);
        });
    }

    /// A namespace was added or changed.
    pub fn apply_namespace(self: &Arc<Self>, ns: Namespace) {
        self.write(move |_, c, _| c.snapshot_mut().upsert_namespace(&ns));
    }

    /// A complete namespace list.
    pub fn replace_namespaces(self: &Arc<Self>, list: Vec<Namespace>) {
        for ns in list {
            self.apply_namespace(ns);
        }
        self.namespaces_listed();
    }

    /// A complete namespace list ended (its namespaces applied as they arrived).
    pub fn namespaces_listed(self: &Arc<Self>) {
        self.stats.list(Kind::Namespace);
        self.write(|this, _, _| this.synced.set(&this.synced.namespaces));
    }

    /// A workload (Service, ReplicationController, ReplicaSet, StatefulSet) was added or
    /// changed.
    pub fn apply_workload(self: &Arc<Self>, w: Workload) {
        self.write(move |_, c, _| {
            // Status updates (a ReplicaSet's replica counts) leave the selectors as they
            // were: no snapshot change.
            if !c.snapshot().workloads().contains(&w) {
                c.snapshot_mut().workloads_mut().upsert(w);
            }
        });
    }

    /// A workload was deleted.
    pub fn delete_workload(self: &Arc<Self>, kind: WorkloadKind, namespace: &str, name: &str) {
        let (namespace, name) = (namespace.to_string(), name.to_string());
        self.write(move |_, c, _| {
            c.snapshot_mut()
                .workloads_mut()
                .delete(kind, &namespace, &name);
        });
    }

    /// A complete list of one workload kind.
    pub fn replace_workloads(self: &Arc<Self>, kind: WorkloadKind, list: Vec<Workload>) {
        self.stats.list(Kind::Workload(kind));
        self.write(move |this, c, _| {
            c.snapshot_mut().workloads_mut().replace(kind, list);
            this.synced.set(&this.synced.workloads[kind as usize]);
        });
    }

    /// A volume object (PV, claim, storage class, CSINode) was added or changed: the
    /// snapshot's volumes take it, and unschedulable pods are retried
    /// ([`ClusterEvent::VolumeChanged`]).
    pub fn apply_volume(self: &Arc<Self>, object: VolumeObject) {
        if object.key().is_empty() || object.key().ends_with('/') {
            self.stats.bad_object(volume_kind(object.kind()));
            return;
        }
        self.write(move |_, c, f| {
            c.snapshot_mut().volumes_mut().apply(object);
            f.push(FollowUp::Move(ClusterEvent::VolumeChanged));
        });
    }

    /// A volume object was deleted (`key`: `namespace/name` for claims, else the name).
    pub fn delete_volume(self: &Arc<Self>, kind: VolumeKind, key: &str) {
        let key = key.to_string();
        self.write(move |_, c, f| {
            if c.snapshot_mut().volumes_mut().delete(kind, &key) {
                f.push(FollowUp::Move(ClusterEvent::VolumeChanged));
            }
        });
    }

    /// A complete list of one volume kind (initial list or re-list): objects of that kind
    /// not in it are gone.
    pub fn replace_volumes(self: &Arc<Self>, kind: VolumeKind, objects: Vec<VolumeObject>) {
        self.stats.list(volume_kind(kind));
        self.write(move |this, c, f| {
            this.synced.set(&this.synced.volumes[kind as usize]);
            c.snapshot_mut().volumes_mut().replace(kind, objects);
            f.push(FollowUp::Move(ClusterEvent::VolumeChanged));
        });
    }

    /// A PodDisruptionBudget was added or changed.
    pub fn apply_pdb(self: &Arc<Self>, pdb: PodDisruptionBudget) {
        self.write(move |_, c, _| c.snapshot_mut().policy_mut().upsert_pdb(&pdb));
    }

    /// A PodDisruptionBudget was deleted.
    pub fn delete_pdb(self: &Arc<Self>, namespace: &str, name: &str) {
        let (namespace, name) = (namespace.to_string(), name.to_string());
        self.write(move |_, c, _| {
            c.snapshot_mut().policy_mut().remove_pdb(&namespace, &name);
        });
    }

    /// A complete PodDisruptionBudget list.
    pub fn replace_pdbs(self: &Arc<Self>, list: Vec<PodDisruptionBudget>) {
        self.stats.list(Kind::PodDisruptionBudget);
        self.write(move |this, c, _| {
            c.snapshot_mut().policy_mut().replace_pdbs(&list);
            this.synced.set(&this.synced.policy[0]);
        });
    }

    /// A PriorityClass was added or changed.
    pub fn apply_priority_class(self: &Arc<Self>, pc: PriorityClass) {
        self.write(move |_, c, _| c.snapshot_mut().policy_mut().upsert_priority_class(&pc));
    }

    /// A PriorityClass was deleted.
    pub fn delete_priority_class(self: &Arc<Self>, name: &str) {
        let name = name.to_string();
        self.write(move |_, c, _| {
            c.snapshot_mut().policy_mut().remove_priority_class(&name);
        });
    }

    /// A complete PriorityClass list.
    pub fn replace_priority_classes(self: &Arc<Self>, list: Vec<PriorityClass>) {
        self.stats.list(Kind::PriorityClass);
        self.write(move |this, c, _| {
            c.snapshot_mut()
                .policy_mut()
                .replace_priority_classes(&list);
            this.synced.set(&this.synced.policy[1]);
        });
    }

    /// Number of pods this state queued and still tracks as pending.
    pub fn queued_count(&self) -> usize {
        self.known().queued.len()
    }
}

/// The pods the cluster state knows: those on nodes (assumed ones included), those
/// waiting for their node, and those in the queue — what the collectors need to name a
/// pod's builder.
impl PodLister for ClusterState {
    fn pods(&self) -> Vec<Arc<Pod>> {
        // Under the cache's lock rather than from an `Arc` of the snapshot held meanwhile,
        // which would make the next change copy it.
        let mut pods: Vec<Arc<Pod>> = self.cache.read(|c| {
            c.snapshot()
                .nodes()
                .iter()
                .flat_map(|n| n.pods.iter().map(|p| p.pod.clone()))
                .collect()
        });
        {
            let known = self.known();
            pods.extend(
                known
                    .orphans
                    .values()
                    .flat_map(|m| m.values().map(|p| p.pod.clone())),
            );
        }
        pods.extend(self.queue.pending_pods().into_iter().map(|p| p.pod.clone()));
        pods
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_scheduler::plugins::testutil::node;
    use headroom_scheduler::queue::QueueConfig;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A node observer that asks, from another thread, whether the cache can be read while
    /// it is told of a node: it can only if it is told outside the cache's lock.
    struct Probe {
        cache: Arc<Cache>,
        told: Mutex<Vec<(String, bool, Option<usize>)>>,
    }

    impl NodeObserver for Probe {
        fn node_changed(&self, name: &str, exists: bool) {
            let (tx, rx) = mpsc::channel();
            let cache = self.cache.clone();
            std::thread::spawn(move || {
                let _ = tx.send(cache.read(|c| c.snapshot().len()));
            });
            let nodes = rx.recv_timeout(Duration::from_secs(2)).ok();
            self.told
                .lock()
                .unwrap()
                .push((name.to_string(), exists, nodes));
        }
        fn nodes_listed(&self, _: &HashSet<String>) {}
    }

    /// The feed's follow-ups (the node observer here, queue moves likewise) run once the
    /// cache's lock is released and the snapshot has the change: right away without a
    /// lease, after the settlement behind one.
    #[test]
    fn observers_are_told_outside_the_cache_lock() {
        let cache = Arc::new(Cache::new(Duration::from_secs(30)));
        let probe = Arc::new(Probe {
            cache: cache.clone(),
            told: Mutex::default(),
        });
        let queue = Arc::new(SchedulingQueue::new(QueueConfig::default()));
        let state = Arc::new(ClusterState::new(
            cache.clone(),
            queue,
            Some(probe.clone()),
            HashSet::from(["headroom".to_string()]),
            FeedStats::default(),
        ));
        state.apply_node(node("n1", serde_json::json!({})));
        let lease = cache.lease();
        state.apply_node(node("n2", serde_json::json!({})));
        assert_eq!(
            probe.told.lock().unwrap().len(),
            1,
            "n2 waits for the lease"
        );
        cache.settle(lease, |_| ());
        state.delete_node("n1");
        assert_eq!(
            *probe.told.lock().unwrap(),
            vec![
                ("n1".to_string(), true, Some(1)),
                ("n2".to_string(), true, Some(2)),
                ("n1".to_string(), false, Some(1)),
            ]
        );
    }
}

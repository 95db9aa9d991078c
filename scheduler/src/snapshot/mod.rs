//! The cluster snapshot the scheduling cycle reads: nodes, the pods on each node with
//! aggregated requests, and indexes built incrementally (never per pod being scheduled).
//!
//! The scheduler owns its snapshot behind an `Arc`; filters and scores only ever see `&Snapshot`
//! for a whole cycle, so they are pure. Between cycles, updates go through `Arc::make_mut`:
//! when nobody else holds the snapshot (the common case) that is an in-place, O(pods on the
//! node) change; when the API server holds a copy for `/explain`, the first update after that
//! pays one copy (each node is itself an `Arc`, so that copy is one pointer per node).

mod index;
mod node_info;
mod pod_info;
pub mod policy;
pub mod table;
pub mod volumes;
pub mod workloads;

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};

pub use index::{IndexedPod, IndexedTerm, PodIndex};
pub use node_info::{
    DISK_FREE_ANNOTATION, DISK_TOTAL_ANNOTATION, NodeImage, NodeInfo, image_hash,
    normalized_image_name,
};
pub use pod_info::{AffinityTerm, HostPort, PodInfo, WeightedAffinityTerm};
pub use table::NodeTable;

pub use crate::key::NodeIdx;
use crate::key::PodKey;
use crate::selector::Labels;
use crate::usage_context::{RecentPlacement, RecentTable, UsageContext, UsageRows};

/// The label every namespace carries with its own name (Kubernetes ≥ 1.22).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// An immutable-per-cycle view of the cluster.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    generation: u64,
    nodes: Vec<Arc<NodeInfo>>,
    /// The hot part of every node in dense columns, by index ([`NodeTable`]).
    table: NodeTable,
    by_name: HashMap<Arc<str>, NodeIdx>,
    /// `status.addresses[].address` → the nodes listing it (History matches bk-ci's node
    /// IPs through it).
    by_address: HashMap<String, Vec<NodeIdx>>,
    /// Node names in index order, shared cheaply with decision records.
    names: Arc<Vec<Arc<str>>>,
    /// For each image name, the nodes that have it with the image's size there
    /// ([`NodeInfo::image_size`]). Its length is ImageLocality's spread numerator, and its
    /// entries let ImageLocality sum sizes over just the nodes that have the pod's images
    /// instead of looking every image up on every node. Shared like the pod index postings, so
    /// a snapshot copy does not copy the lists.
    image_nodes: HashMap<String, Arc<Vec<(NodeIdx, i64)>>>,
    /// Nodes that host at least one pod with (anti-)affinity terms.
    nodes_with_affinity_pods: u32,
    /// Namespace labels, for namespaceSelector.
    namespace_labels: HashMap<String, Labels>,
    /// Where each pod sits ([`PodNodes`]).
    pod_nodes: PodNodes,
    /// Label index over all assigned pods.
    pod_index: PodIndex,
    /// Real usage, time, reservations and recent placements (see [`crate::usage`]).
    usage: Arc<UsageContext>,
    /// Services, ReplicationControllers, ReplicaSets and StatefulSets, for default
    /// topology spreading ([`workloads::Workloads::default_selector`]).
    workloads: Arc<workloads::Workloads>,
    /// Increments when nodes are added or removed (node indices change).
    layout: u64,
    /// The usage view resolved by node index, for the view and layout it was built for.
    usage_rows: Cached<UsageRows>,
    /// The recent placements folded by node index ([`RecentTable`]), for the view, layout
    /// and placements it was built for.
    recent_table: Cached<RecentTable>,
    /// Each node's rank among the node names, for the layout it was built for.
    name_ranks: Cached<NameRanks>,
    /// PersistentVolumes, claims, storage classes, CSINodes and the claims assigned pods
    /// use ([`volumes::Volumes`]).
    volumes: Arc<volumes::Volumes>,
    /// PodDisruptionBudgets and PriorityClasses (preemption reads them).
    policy: Arc<policy::PolicyObjects>,
}

/// Each node's position among the snapshot's node names in sorted order, for one node
/// layout: decision records break ties by node name ([`crate::framework::Decision::best_nodes`]),
/// and at 15,000 nodes of equal score comparing names was a sixth of `serve`'s CPU (issue #22);
/// ranks compare as integers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameRanks {
    layout: u64,
    rank: Vec<u32>,
}

impl NameRanks {
    /// Ranks the names `names` (by node index) of node layout `layout`.
    pub fn build(names: &[Arc<str>], layout: u64) -> NameRanks {
        let mut order: Vec<u32> = (0..names.len() as u32).collect();
        order.sort_unstable_by(|a, b| names[*a as usize].cmp(&names[*b as usize]));
        let mut rank = vec![0; names.len()];
        for (r, idx) in order.into_iter().enumerate() {
            rank[idx as usize] = r as u32;
        }
        NameRanks { layout, rank }
    }

    /// Node `idx`'s rank (0: the first name in sort order).
    #[inline]
    pub fn of(&self, idx: NodeIdx) -> u32 {
        self.rank[idx as usize]
    }

    /// How many nodes are ranked.
    pub fn len(&self) -> usize {
        self.rank.len()
    }

    /// Whether no node is ranked.
    pub fn is_empty(&self) -> bool {
        self.rank.is_empty()
    }
}

/// The last value derived from the snapshot for a cycle ([`UsageRows`], [`RecentTable`],
/// [`NameRanks`]), built again on the first read after what it was derived from changed.
/// Behind a mutex because readers hold only `&Snapshot`; held for a pointer copy, or for
/// the rebuild.
#[derive(Debug)]
struct Cached<T>(std::sync::Mutex<Option<Arc<T>>>);

impl<T> Default for Cached<T> {
    fn default() -> Self {
        Cached(std::sync::Mutex::new(None))
    }
}

impl<T> Clone for Cached<T> {
    fn clone(&self) -> Self {
        Cached(std::sync::Mutex::new(self.peek().clone()))
    }
}

impl<T> Cached<T> {
    fn peek(&self) -> std::sync::MutexGuard<'_, Option<Arc<T>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached value when `current` holds for it, else `build`'s (then cached).
    fn get_or_build(&self, current: impl Fn(&T) -> bool, build: impl FnOnce() -> T) -> Arc<T> {
        let mut cache = self.peek();
        if let Some(v) = cache.as_ref()
            && current(v)
        {
            return v.clone();
        }
        let v = Arc::new(build());
        *cache = Some(v.clone());
        v
    }
}

impl<T: Clone> Cached<T> {
    /// The cached value, mutably (copied first if a reader holds it).
    fn get_mut(&mut self) -> Option<&mut T> {
        self.0
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .map(Arc::make_mut)
    }
}

/// The node of each pod in the snapshot: by uid when the pod has one, so that two
/// incarnations of a pod recreated under the same name (a StatefulSet replica: the old one
/// still terminating on its node, the new one placed) are told apart; by [`PodKey`] for
/// pods without a uid (tests and `headroom place`'s files). A lookup goes by the uid it is
/// given when that is not empty, else by the key.
#[derive(Debug, Clone, Default)]
struct PodNodes {
    /// Pods with a uid, by uid.
    by_uid: HashMap<String, NodeIdx>,
    /// Pods without a uid, by namespace/name.
    by_key: HashMap<PodKey, NodeIdx>,
}

impl PodNodes {
    fn get(&self, key: &PodKey, uid: &str) -> Option<NodeIdx> {
        if uid.is_empty() {
            self.by_key.get(key).copied()
        } else {
            self.by_uid.get(uid).copied()
        }
    }

    fn contains(&self, key: &PodKey, uid: &str) -> bool {
        self.get(key, uid).is_some()
    }

    fn insert(&mut self, key: PodKey, uid: &str, idx: NodeIdx) {
        if uid.is_empty() {
            self.by_key.insert(key, idx);
        } else {
            self.by_uid.insert(uid.to_string(), idx);
        }
    }

    fn remove(&mut self, key: &PodKey, uid: &str) -> Option<NodeIdx> {
        if uid.is_empty() {
            self.by_key.remove(key)
        } else {
            self.by_uid.remove(uid)
        }
    }
}

impl Snapshot {
    /// An empty snapshot.
    pub fn new() -> Snapshot {
        Snapshot::default()
    }

    /// Builds a snapshot from nodes and pods; pods with `spec.nodeName` naming a known node are
    /// placed on it, others are ignored (they are pending, not part of the cluster state).
    pub fn build(
        nodes: impl IntoIterator<Item = Node>,
        pods: impl IntoIterator<Item = Pod>,
    ) -> Snapshot {
        let mut s = Snapshot::new();
        for n in nodes {
            s.upsert_node(Arc::new(n));
        }
        for p in pods {
            // Finished pods hold no resources on their node (the kubelet does not count them).
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed")) {
                continue;
            }
            let info = Arc::new(PodInfo::new(Arc::new(p)));
            if let Some(node) = info.node_name().map(str::to_string) {
                s.add_pod(info, &node);
            }
        }
        s
    }

    /// The usage-side inputs of the cycle.
    pub fn usage(&self) -> &Arc<UsageContext> {
        &self.usage
    }

    /// Mutable usage context (copied first if a cycle or reader still holds it). Counts as
    /// a change ([`Snapshot::generation`]), as every other mutation does.
    pub fn usage_mut(&mut self) -> &mut UsageContext {
        self.generation += 1;
        Arc::make_mut(&mut self.usage)
    }

    /// The usage view's node usage by node index: resolved once per view and node set
    /// (the first cycle after a view refresh or a node change pays one lookup per node).
    pub fn usage_rows(&self) -> Arc<UsageRows> {
        self.usage_rows.get_or_build(
            |rows| rows.is_for(&self.usage.view, self.layout),
            || UsageRows::build(&self.usage.view, &self.names, self.layout),
        )
    }

    /// The recent placements folded by node index: built on the first read after a new
    /// view or node layout (or a change made through [`Snapshot::usage_mut`]), kept
    /// current node by node by [`Snapshot::record_placement`] and
    /// [`Snapshot::forget_placement`].
    pub fn recent_table(&self) -> Arc<RecentTable> {
        self.recent_table.get_or_build(
            |t| t.is_for(&self.usage, self.layout),
            || {
                RecentTable::build(&self.usage, self.nodes.len(), self.layout, |n| {
                    self.index_of(n)
                })
            },
        )
    }

    /// Records a placement in the usage context ([`UsageContext::record_placement`]) and
    /// folds the node's recent placements again.
    pub fn record_placement(&mut self, builder: Option<&str>, node: &str, p: RecentPlacement) {
        self.change_recent(node, |u| u.record_placement(builder, node, p));
    }

    /// Forgets a placement ([`UsageContext::forget_placement`]) and folds the node's
    /// recent placements again.
    pub fn forget_placement(&mut self, node: &str, pod: &PodKey) {
        self.change_recent(node, |u| u.forget_placement(node, pod));
    }

    /// A pod left `node` (it ended or was deleted) at the usage clock's now: its placement
    /// stops counting there ([`UsageContext::forget_placement`]) and what its last sample
    /// shows comes off the node's windowed usage ([`UsageContext::record_departure`]); the
    /// node is folded again once. Nothing changes for a pod neither placed recently nor
    /// measured.
    pub fn pod_left(&mut self, node: &str, pod: &PodKey) {
        let u = self.usage();
        let placed = u.recent_on(node).iter().any(|r| r.pod == *pod);
        if !placed && !u.is_measured(pod) {
            return;
        }
        let at_ms = u.now_ms;
        self.change_recent(node, |u| {
            if placed {
                u.forget_placement(node, pod);
            }
            u.record_departure(node, pod.clone(), at_ms);
        });
    }

    /// Changes `node`'s recent placements; when the recent table was current, refolds that
    /// node alone (a stale table is rebuilt whole on its next read anyway).
    fn change_recent(&mut self, node: &str, change: impl FnOnce(&mut UsageContext)) {
        let layout = self.layout;
        let was_current = self
            .recent_table
            .peek()
            .as_ref()
            .is_some_and(|t| t.is_for(&self.usage, layout));
        change(self.usage_mut());
        if was_current {
            let idx = self.index_of(node);
            if let Some(t) = self.recent_table.get_mut() {
                t.refold(&self.usage, idx, node);
            }
        }
    }

    /// The volume objects (PVs with the scheduler's assumed bindings, claims, classes,
    /// CSINodes).
    pub fn volumes(&self) -> &Arc<volumes::Volumes> {
        &self.volumes
    }

    /// Mutable volume objects (copied first if a cycle or reader still holds them).
    pub fn volumes_mut(&mut self) -> &mut volumes::Volumes {
        self.generation += 1;
        Arc::make_mut(&mut self.volumes)
    }

    /// Increments on every change; recorded in decisions.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Number of nodes.
    #[inline]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True with no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// All nodes, by index.
    #[inline]
    pub fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
    }

    /// One node by index.
    #[inline]
    pub fn node(&self, idx: NodeIdx) -> &NodeInfo {
        &self.nodes[idx as usize]
    }

    /// The dense per-node columns (resources, flags, interned labels and taints).
    #[inline]
    pub fn table(&self) -> &NodeTable {
        &self.table
    }

    /// The nodes that list `address` in `status.addresses`.
    pub fn nodes_with_address(&self, address: &str) -> &[NodeIdx] {
        self.by_address.get(address).map_or(&[], Vec::as_slice)
    }

    /// Adds (or removes) node `idx`'s addresses to (from) the address index.
    fn index_addresses(&mut self, info: &NodeInfo, idx: NodeIdx, add: bool) {
        let addresses = info
            .node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_deref())
            .unwrap_or(&[]);
        for a in addresses {
            if add {
                let list = self.by_address.entry(a.address.clone()).or_default();
                if !list.contains(&idx) {
                    list.push(idx);
                }
            } else if let Some(list) = self.by_address.get_mut(&a.address) {
                list.retain(|i| *i != idx);
                if list.is_empty() {
                    self.by_address.remove(&a.address);
                }
            }
        }
    }

    /// A node's index by name.
    pub fn index_of(&self, name: &str) -> Option<NodeIdx> {
        self.by_name.get(name).copied()
    }

    /// A node by name.
    pub fn get(&self, name: &str) -> Option<&NodeInfo> {
        self.index_of(name).map(|i| self.node(i))
    }

    /// Node names in index order (shared, cheap to clone).
    pub fn names(&self) -> Arc<Vec<Arc<str>>> {
        self.names.clone()
    }

    /// Each node's rank among the node names (built once per node layout).
    pub fn name_ranks(&self) -> Arc<NameRanks> {
        self.name_ranks.get_or_build(
            |r| r.layout == self.layout,
            || NameRanks::build(&self.names, self.layout),
        )
    }

    /// How many nodes carry an image name.
    pub fn image_node_count(&self, image: &str) -> u32 {
        self.image_nodes.get(image).map_or(0, |l| l.len() as u32)
    }

    /// The nodes that have an image name, each with the image's size on it (no order).
    pub fn image_nodes(&self, image: &str) -> &[(NodeIdx, i64)] {
        self.image_nodes.get(image).map_or(&[], |l| l.as_slice())
    }

    /// True when some node hosts a pod with pod (anti-)affinity terms.
    pub fn any_pods_with_affinity(&self) -> bool {
        self.nodes_with_affinity_pods > 0
    }

    /// The labels of a namespace; a namespace we have not seen carries only its automatic
    /// `kubernetes.io/metadata.name` label.
    pub fn namespace_labels(&self, namespace: &str) -> std::borrow::Cow<'_, Labels> {
        match self.namespace_labels.get(namespace) {
            Some(l) => std::borrow::Cow::Borrowed(l),
            None => {
                let mut l = Labels::new();
                l.insert(NAMESPACE_NAME_LABEL.to_string(), namespace.to_string());
                std::borrow::Cow::Owned(l)
            }
        }
    }

    /// All known namespaces with labels.
    pub fn namespaces(&self) -> &HashMap<String, Labels> {
        &self.namespace_labels
    }

    /// The label index over assigned pods.
    pub fn pod_index(&self) -> &PodIndex {
        &self.pod_index
    }

    /// Which node a pod sits on: the pod with `uid` when it is not empty, else the pod
    /// `key` without a uid.
    pub fn node_of_pod(&self, key: &PodKey, uid: &str) -> Option<NodeIdx> {
        self.pod_nodes.get(key, uid)
    }

    /// The workload objects default topology spreading reads.
    pub fn workloads(&self) -> &workloads::Workloads {
        &self.workloads
    }

    /// The workload objects, for an update (copied first if a cycle still holds them).
    pub fn workloads_mut(&mut self) -> &mut workloads::Workloads {
        self.generation += 1;
        Arc::make_mut(&mut self.workloads)
    }

    /// Records a namespace's labels.
    pub fn upsert_namespace(&mut self, ns: &Namespace) {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let mut labels = ns.metadata.labels.clone().unwrap_or_default();
        labels
            .entry(NAMESPACE_NAME_LABEL.to_string())
            .or_insert_with(|| name.clone());
        self.namespace_labels.insert(name, labels);
        self.generation += 1;
    }

    /// Adds (or removes) node `idx`'s image names to (from) the image index.
    fn index_images(&mut self, info: &NodeInfo, idx: NodeIdx, add: bool) {
        let mut seen: Vec<&str> = Vec::new();
        for img in &info.images {
            for n in &img.names {
                if seen.contains(&n.as_str()) {
                    continue;
                }
                seen.push(n);
                if add {
                    // The size ImageLocality has always used for this name on this node.
                    let size = info.image_size(image_hash(n)).unwrap_or(img.size_bytes);
                    Arc::make_mut(self.image_nodes.entry(n.clone()).or_default()).push((idx, size));
                } else if let Some(list) = self.image_nodes.get_mut(n) {
                    if let Some(pos) = list.iter().position(|(i, _)| *i == idx) {
                        Arc::make_mut(list).swap_remove(pos);
                    }
                    if list.is_empty() {
                        self.image_nodes.remove(n);
                    }
                }
            }
        }
    }

    /// Re-points node `from`'s image index entries to `to` (the node moved slots).
    fn move_images(&mut self, info: &NodeInfo, from: NodeIdx, to: NodeIdx) {
        let mut seen: Vec<&str> = Vec::new();
        for n in info.images.iter().flat_map(|img| &img.names) {
            if seen.contains(&n.as_str()) {
                continue;
            }
            seen.push(n);
            if let Some(list) = self.image_nodes.get_mut(n)
                && let Some(pos) = list.iter().position(|(i, _)| *i == from)
            {
                Arc::make_mut(list)[pos].0 = to;
            }
        }
    }

    /// Adds a node, or replaces the node object of a known one (keeping its pods).
    pub fn upsert_node(&mut self, node: Arc<Node>) -> NodeIdx {
        let name = node.metadata.name.clone().unwrap_or_default();
        self.generation += 1;
        if let Some(idx) = self.index_of(&name) {
            let old = self.nodes[idx as usize].clone();
            self.index_images(&old, idx, false);
            self.index_addresses(&old, idx, false);
            let info = Arc::make_mut(&mut self.nodes[idx as usize]);
            info.set_node(node);
            let updated = self.nodes[idx as usize].clone();
            self.index_images(&updated, idx, true);
            self.index_addresses(&updated, idx, true);
            self.table.set_node(idx as usize, &updated);
            return idx;
        }
        let mut info = NodeInfo::new(node);
        self.layout += 1;
        let idx = self.nodes.len() as NodeIdx;
        info.idx = idx;
        self.index_images(&info, idx, true);
        self.index_addresses(&info, idx, true);
        self.table.push(&info);
        self.by_name.insert(info.name.clone(), idx);
        Arc::make_mut(&mut self.names).push(info.name.clone());
        self.nodes.push(Arc::new(info));
        idx
    }

    /// Removes a node with its pods; returns whether it existed.
    pub fn remove_node(&mut self, name: &str) -> bool {
        let Some(idx) = self.index_of(name) else {
            return false;
        };
        self.generation += 1;
        self.layout += 1;
        let info = self.nodes[idx as usize].clone();
        for p in &info.pods {
            self.pod_nodes.remove(&p.key(), &p.uid);
            self.pod_index.remove(idx, p);
            if volumes::has_claims(&p.pod) {
                Arc::make_mut(&mut self.volumes).count_pod(&p.pod, false);
            }
        }
        if info.pods_with_affinity > 0 {
            self.nodes_with_affinity_pods -= 1;
        }
        self.index_images(&info, idx, false);
        self.index_addresses(&info, idx, false);
        self.by_name.remove(name);
        let last = self.nodes.len() - 1;
        self.nodes.swap_remove(idx as usize);
        self.table.swap_remove(idx as usize);
        let names = Arc::make_mut(&mut self.names);
        names.swap_remove(idx as usize);
        if (idx as usize) != last {
            // The last node moved into `idx`: fix every reference to its old index.
            Arc::make_mut(&mut self.nodes[idx as usize]).idx = idx;
            let moved = self.nodes[idx as usize].clone();
            self.move_images(&moved, last as NodeIdx, idx);
            self.index_addresses(&moved, last as NodeIdx, false);
            self.index_addresses(&moved, idx, true);
            self.by_name.insert(moved.name.clone(), idx);
            for p in &moved.pods {
                self.pod_nodes.insert(p.key(), &p.uid, idx);
                self.pod_index.remove(last as NodeIdx, p);
                self.pod_index.add(idx, p);
            }
        }
        true
    }

    /// Assigns a pod to a node (an assumed or bound pod). Returns false when the node is unknown.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>, node: &str) -> bool {
        let Some(idx) = self.index_of(node) else {
            return false;
        };
        let key = pod.key();
        if self.pod_nodes.contains(&key, &pod.uid) {
            // Already present (an update): replace it.
            self.remove_pod(&key, &pod.uid);
        }
        self.pod_nodes.insert(key, &pod.uid, idx);
        self.generation += 1;
        self.pod_index.add(idx, &pod);
        // Only pods with claims touch the volumes (their claims' use counts).
        let with_claims = volumes::has_claims(&pod.pod).then(|| pod.pod.clone());
        let info = Arc::make_mut(&mut self.nodes[idx as usize]);
        let had_affinity = info.pods_with_affinity > 0;
        info.add_pod(pod);
        if !had_affinity && info.pods_with_affinity > 0 {
            self.nodes_with_affinity_pods += 1;
        }
        self.table.set_requested(idx as usize, info);
        if let Some(p) = with_claims {
            Arc::make_mut(&mut self.volumes).count_pod(&p, true);
        }
        true
    }

    /// PodDisruptionBudgets and PriorityClasses.
    pub fn policy(&self) -> &policy::PolicyObjects {
        &self.policy
    }

    /// Changes the policy objects (copied first when a reader still holds them).
    pub fn policy_mut(&mut self) -> &mut policy::PolicyObjects {
        self.generation += 1;
        Arc::make_mut(&mut self.policy)
    }

    /// Removes a pod from whatever node it is on (found as [`Snapshot::node_of_pod`]
    /// finds it); returns it when found.
    pub fn remove_pod(&mut self, key: &PodKey, uid: &str) -> Option<Arc<PodInfo>> {
        let idx = self.pod_nodes.remove(key, uid)?;
        self.generation += 1;
        let info = Arc::make_mut(&mut self.nodes[idx as usize]);
        let had_affinity = info.pods_with_affinity > 0;
        let pod = info.remove_pod(key, uid)?;
        if had_affinity && info.pods_with_affinity == 0 {
            self.nodes_with_affinity_pods -= 1;
        }
        self.table.set_requested(idx as usize, info);
        self.pod_index.remove(idx, &pod);
        if volumes::has_claims(&pod.pod) {
            Arc::make_mut(&mut self.volumes).count_pod(&pod.pod, false);
        }
        Some(pod)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, image: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                        "images": [{"names": [image], "sizeBytes": 100}]}
        }))
        .unwrap()
    }

    fn pod(name: &str, node: &str, cpu: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
        }))
        .unwrap()
    }

    /// Pods with a uid are found by uid, pods without one by their key: a pod without a uid
    /// and one with the same name and a uid (a recreated incarnation) are two pods.
    #[test]
    fn pods_found_by_uid_or_by_key() {
        let mut s = Snapshot::build([node("a", "img:1"), node("b", "img:1")], []);
        let mut bare = pod("p", "a", "1");
        bare.metadata.uid = None;
        let key = PodKey::new("default", "p");
        assert!(s.add_pod(Arc::new(PodInfo::new(Arc::new(bare))), "a"));
        assert!(s.add_pod(Arc::new(PodInfo::new(Arc::new(pod("p", "b", "2")))), "b"));
        let (a, b) = (s.index_of("a"), s.index_of("b"));
        assert_eq!(s.node_of_pod(&key, ""), a);
        assert_eq!(s.node_of_pod(&key, "uid-p"), b);
        assert_eq!(s.node_of_pod(&key, "uid-other"), None);
        assert!(s.remove_pod(&key, "uid-p").is_some());
        assert_eq!(s.get("b").unwrap().requested.milli_cpu, 0);
        assert_eq!(s.node_of_pod(&key, ""), a);
        assert!(s.remove_pod(&key, "").is_some());
        assert_eq!(s.get("a").unwrap().requested.milli_cpu, 0);
    }

    #[test]
    fn incremental_updates_keep_aggregates() {
        let mut s = Snapshot::build(
            [node("a", "img:1"), node("b", "img:1"), node("c", "img:2")],
            [
                pod("p1", "a", "1"),
                pod("p2", "a", "500m"),
                pod("p3", "c", "2"),
                pod("x", "nope", "1"),
            ],
        );
        assert_eq!(s.len(), 3);
        assert_eq!(s.get("a").unwrap().requested.milli_cpu, 1500);
        assert_eq!(s.image_node_count("img:1"), 2);
        s.remove_pod(&PodKey::new("default", "p1"), "uid-p1")
            .unwrap();
        assert_eq!(s.get("a").unwrap().requested.milli_cpu, 500);
        // Removing "a" moves "c" into its slot; its pods must follow.
        assert!(s.remove_node("a"));
        assert_eq!(s.len(), 2);
        assert_eq!(s.image_node_count("img:1"), 1);
        let c = s.index_of("c").unwrap();
        assert_eq!(
            s.node_of_pod(&PodKey::new("default", "p3"), "uid-p3"),
            Some(c)
        );
        assert_eq!(s.names()[c as usize].as_ref(), "c");
        assert_eq!(s.get("c").unwrap().idx, c);
        assert_eq!(s.image_nodes("img:2"), [(c, 100)]);
        assert_eq!(s.image_nodes("img:1"), [(s.index_of("b").unwrap(), 100)]);
        assert!(
            s.remove_pod(&PodKey::new("default", "p3"), "uid-p3")
                .is_some()
        );
        assert_eq!(s.get("c").unwrap().requested.milli_cpu, 0);
        let g = s.generation();
        s.upsert_node(Arc::new(node("b", "img:3")));
        assert!(s.generation() > g);
        assert_eq!(s.image_node_count("img:1"), 0);
        assert_eq!(s.image_node_count("img:3"), 1);
    }

    #[test]
    fn node_table_follows_every_change() {
        let (nodes, pods) = crate::synthetic::random_cluster(40, 3);
        let mut s = Snapshot::build(nodes.clone(), pods);
        s.table.assert_mirrors(&s.nodes);
        for name in ["node-00003", "node-00039", "node-00000"] {
            assert!(s.remove_node(name));
            s.table.assert_mirrors(&s.nodes);
        }
        // Updates change labels, taints and allocatable; a removed node comes back.
        let mut changed = nodes[5].clone();
        changed.metadata.labels = Some(
            [("zone".to_string(), "new".to_string())]
                .into_iter()
                .collect(),
        );
        changed.spec = None;
        s.upsert_node(Arc::new(changed));
        s.upsert_node(Arc::new(nodes[3].clone()));
        s.upsert_node(Arc::new(nodes[13].clone()));
        s.table.assert_mirrors(&s.nodes);
        assert_eq!(
            s.nodes_with_address("10.0.0.3"),
            [s.index_of("node-00003").unwrap()]
        );
        assert!(s.nodes_with_address("10.0.0.39").is_empty());
        let moved = s.index_of("node-00038").unwrap();
        assert_eq!(s.nodes_with_address("10.0.0.38"), [moved]);
        let mut p = crate::synthetic::plain_pod("x");
        p.spec.as_mut().unwrap().node_name = Some("node-00007".into());
        s.add_pod(Arc::new(PodInfo::new(Arc::new(p))), "node-00007");
        s.table.assert_mirrors(&s.nodes);
        s.remove_pod(&PodKey::new("default", "x"), "uid-x").unwrap();
        s.table.assert_mirrors(&s.nodes);
        // Label values whose last node left are recycled.
        let col = s.table().labels.column("kubernetes.io/hostname").unwrap();
        assert_eq!(col.dict.len(), s.len() - 1, "node-00005 lost its labels");
        assert!(col.dict.get("node-00039").is_none());
    }
}

//! `NodeInfo`: a node with the pods assigned to it and their aggregated requests.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Taint};

use super::NodeIdx;
use super::pod_info::{HostPort, PodInfo};
use crate::key::PodKey;
use crate::resources::{Resources, node_allocatable};
use crate::selector::Labels;

static EMPTY_LABELS: Labels = Labels::new();

/// Node annotation with the node's disk size, a quantity (seed 003's sync script).
pub const DISK_TOTAL_ANNOTATION: &str = "headroom.io/disk-total";
/// Node annotation with the node's free disk, a quantity.
pub const DISK_FREE_ANNOTATION: &str = "headroom.io/disk-free";
/// The 128-bit hash ImageLocality uses for image names: two SipHash runs with fixed keys
/// (stable within a process, which is all a snapshot needs).
pub fn image_hash(name: &str) -> u128 {
    use std::hash::{Hash, Hasher};
    let mut a = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut a);
    let mut b = std::collections::hash_map::DefaultHasher::new();
    0xa5u8.hash(&mut b);
    name.hash(&mut b);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

/// Upstream's `normalizedImageName` (ImageLocality): an image without a tag gets `:latest`,
/// so `maven` and `maven:latest` name one image (ImageLocality, the `image` cold-start
/// calibration).
pub fn normalized_image_name(name: &str) -> String {
    let colon = name.rfind(':');
    let slash = name.rfind('/');
    match (colon, slash) {
        (Some(c), Some(s)) if c > s => name.to_string(),
        (Some(_), None) => name.to_string(),
        _ => format!("{name}:latest"),
    }
}

/// One image on a node: every name it is known by, and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeImage {
    /// `status.images[].names`.
    pub names: Vec<String>,
    /// `status.images[].sizeBytes`.
    pub size_bytes: i64,
}

/// A node and what is assigned to it, as of one snapshot generation.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// This node's index in its snapshot (kept current by [`super::Snapshot`]), so plugins can
    /// keep per-cycle data in dense arrays instead of maps keyed by name.
    pub idx: NodeIdx,
    /// The node object.
    pub node: Arc<Node>,
    /// `metadata.name`.
    pub name: Arc<str>,
    /// `status.allocatable`, read once.
    pub allocatable: Resources,
    /// `status.capacity` CPU (millicores) and memory (bytes), falling back to allocatable:
    /// the totals real usage (which includes system daemons) is measured against.
    pub capacity: (i64, i64),
    /// Sum of the effective requests of the pods on the node.
    pub requested: Resources,
    /// Sum of the pods' CPU requests with upstream's scoring default (100m) for containers
    /// that do not mention CPU.
    pub non_zero_milli_cpu: i64,
    /// Same for memory (default 200 MiB).
    pub non_zero_memory: i64,
    /// The pods assigned (or assumed) on the node.
    pub pods: Vec<Arc<PodInfo>>,
    /// How many of them have pod affinity or anti-affinity terms.
    pub pods_with_affinity: u32,
    /// How many of them have required anti-affinity terms.
    pub pods_with_required_anti_affinity: u32,
    /// Host ports bound by the pods.
    pub used_ports: Vec<HostPort>,
    /// `status.images`, names as given.
    pub images: Vec<NodeImage>,
    /// 128-bit hashes of every image name with the size of its image, sorted: lets
    /// ImageLocality look an image up on every node without touching strings (a false match
    /// needs a 128-bit collision between two image names on one node).
    pub image_hashes: Vec<(u128, i64)>,
    /// `spec.unschedulable`, read once.
    pub unschedulable: bool,
    /// Whether the node has any taint (most have none: filters and scores skip them cheaply).
    pub has_taints: bool,
    /// Whether any taint has effect `NoSchedule` or `NoExecute`: only those can fail
    /// TaintToleration's filter, so nodes without them skip it without reading the node object.
    pub has_no_schedule_taints: bool,
    /// Whether any taint has effect `PreferNoSchedule`: only those count in TaintToleration's
    /// score.
    pub has_prefer_no_schedule_taints: bool,
    /// Why the node's status could not be read; such a node accepts no pod.
    pub error: Option<String>,
    /// The `headroom.io/disk-total` and `headroom.io/disk-free` annotations, bytes (absent,
    /// unreadable or negative: `None`), read once.
    pub disk_annotations: (Option<f64>, Option<f64>),
}

/// A node annotation read as a non-negative quantity, in bytes.
fn annotation_bytes(node: &Node, key: &str) -> Option<f64> {
    let text = node.metadata.annotations.as_ref()?.get(key)?;
    let q = crate::quantity::Quantity::parse(text).ok()?;
    (!q.is_negative()).then(|| q.value() as f64)
}

impl NodeInfo {
    /// Builds the info of a node with no pods yet (index 0 until a snapshot places it).
    pub fn new(node: Arc<Node>) -> NodeInfo {
        let name: Arc<str> = Arc::from(node.metadata.name.as_deref().unwrap_or(""));
        let (allocatable, error) = match node_allocatable(&node) {
            Ok(a) => (a, None),
            Err(e) => (
                Resources::default(),
                Some(format!("unreadable quantity at {e}")),
            ),
        };
        let capacity = crate::resources::node_capacity(&node)
            .map(|c| {
                (
                    if c.milli_cpu > 0 {
                        c.milli_cpu
                    } else {
                        allocatable.milli_cpu
                    },
                    if c.memory > 0 {
                        c.memory
                    } else {
                        allocatable.memory
                    },
                )
            })
            .unwrap_or((allocatable.milli_cpu, allocatable.memory));
        let images: Vec<NodeImage> = node
            .status
            .as_ref()
            .and_then(|s| s.images.as_ref())
            .map(|imgs| {
                imgs.iter()
                    .map(|i| NodeImage {
                        names: i.names.clone().unwrap_or_default(),
                        size_bytes: i.size_bytes.unwrap_or(0),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut image_hashes: Vec<(u128, i64)> = images
            .iter()
            .flat_map(|img: &NodeImage| img.names.iter().map(|n| (image_hash(n), img.size_bytes)))
            .collect();
        image_hashes.sort_unstable();
        image_hashes.dedup_by_key(|(h, _)| *h);
        let spec = node.spec.as_ref();
        let unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        let taints = spec.and_then(|s| s.taints.as_deref()).unwrap_or(&[]);
        let has_taints = !taints.is_empty();
        let has_no_schedule_taints = taints
            .iter()
            .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute");
        let has_prefer_no_schedule_taints = taints.iter().any(|t| t.effect == "PreferNoSchedule");
        let disk_annotations = (
            annotation_bytes(&node, DISK_TOTAL_ANNOTATION),
            annotation_bytes(&node, DISK_FREE_ANNOTATION),
        );
        NodeInfo {
            disk_annotations,
            idx: 0,
            has_no_schedule_taints,
            has_prefer_no_schedule_taints,
            image_hashes,
            unschedulable,
            has_taints,
            node,
            name,
            allocatable,
            capacity,
            requested: Resources::default(),
            non_zero_milli_cpu: 0,
            non_zero_memory: 0,
            pods: Vec::new(),
            pods_with_affinity: 0,
            pods_with_required_anti_affinity: 0,
            used_ports: Vec::new(),
            images,
            error,
        }
    }

    /// Replaces the node object, keeping its pods (a node update).
    pub fn set_node(&mut self, node: Arc<Node>) {
        let fresh = NodeInfo::new(node);
        self.node = fresh.node;
        self.name = fresh.name;
        self.allocatable = fresh.allocatable;
        self.capacity = fresh.capacity;
        self.images = fresh.images;
        self.image_hashes = fresh.image_hashes;
        self.unschedulable = fresh.unschedulable;
        self.has_taints = fresh.has_taints;
        self.has_no_schedule_taints = fresh.has_no_schedule_taints;
        self.has_prefer_no_schedule_taints = fresh.has_prefer_no_schedule_taints;
        self.error = fresh.error;
        self.disk_annotations = fresh.disk_annotations;
    }

    /// The node's labels.
    #[inline]
    pub fn labels(&self) -> &Labels {
        self.node.metadata.labels.as_ref().unwrap_or(&EMPTY_LABELS)
    }

    /// The node's taints.
    #[inline]
    pub fn taints(&self) -> &[Taint] {
        if !self.has_taints {
            return &[];
        }
        self.node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or(&[])
    }

    /// The size of the image whose name hashes to `hash` ([`image_hash`]), if present.
    #[inline]
    pub fn image_size(&self, hash: u128) -> Option<i64> {
        let i = self
            .image_hashes
            .binary_search_by_key(&hash, |(h, _)| *h)
            .ok()?;
        Some(self.image_hashes[i].1)
    }

    /// Adds a pod's requests, ports and affinity counters.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests.requests);
        self.non_zero_milli_cpu += pod.requests.non_zero_milli_cpu;
        self.non_zero_memory += pod.requests.non_zero_memory;
        self.used_ports.extend(pod.host_ports.iter().cloned());
        if pod.has_affinity() {
            self.pods_with_affinity += 1;
        }
        if pod.has_required_anti_affinity() {
            self.pods_with_required_anti_affinity += 1;
        }
        self.pods.push(pod);
    }

    /// Removes a pod by uid (or namespace/name when uids are empty); returns it when found.
    pub fn remove_pod(&mut self, key: &PodKey, uid: &str) -> Option<Arc<PodInfo>> {
        let pos = self.pods.iter().position(|p| {
            if !uid.is_empty() && !p.uid.is_empty() {
                p.uid == uid
            } else {
                p.is(key)
            }
        })?;
        let pod = self.pods.swap_remove(pos);
        self.requested.sub(&pod.requests.requests);
        self.non_zero_milli_cpu -= pod.requests.non_zero_milli_cpu;
        self.non_zero_memory -= pod.requests.non_zero_memory;
        for hp in &pod.host_ports {
            if let Some(i) = self.used_ports.iter().position(|u| u == hp) {
                self.used_ports.swap_remove(i);
            }
        }
        if pod.has_affinity() {
            self.pods_with_affinity -= 1;
        }
        if pod.has_required_anti_affinity() {
            self.pods_with_required_anti_affinity -= 1;
        }
        Some(pod)
    }
}

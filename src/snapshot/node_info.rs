//! `NodeInfo`: a node with the pods assigned to it and their aggregated requests.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Taint};

use super::pod_info::{HostPort, PodInfo};
use crate::resources::{Resources, node_allocatable};
use crate::selector::Labels;

static EMPTY_LABELS: Labels = Labels::new();

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
    /// The node object.
    pub node: Arc<Node>,
    /// `metadata.name`.
    pub name: Arc<str>,
    /// `status.allocatable`, read once.
    pub allocatable: Resources,
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
    /// Why the node's status could not be read; such a node accepts no pod.
    pub error: Option<String>,
}

impl NodeInfo {
    /// Builds the info of a node with no pods yet.
    pub fn new(node: Arc<Node>) -> NodeInfo {
        let name: Arc<str> = Arc::from(node.metadata.name.as_deref().unwrap_or(""));
        let (allocatable, error) = match node_allocatable(&node) {
            Ok(a) => (a, None),
            Err(e) => (
                Resources::default(),
                Some(format!("unreadable quantity at {e}")),
            ),
        };
        let images = node
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
        NodeInfo {
            node,
            name,
            allocatable,
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
        self.images = fresh.images;
        self.error = fresh.error;
    }

    /// The node's labels.
    #[inline]
    pub fn labels(&self) -> &Labels {
        self.node.metadata.labels.as_ref().unwrap_or(&EMPTY_LABELS)
    }

    /// The node's taints.
    #[inline]
    pub fn taints(&self) -> &[Taint] {
        self.node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or(&[])
    }

    /// `spec.unschedulable`.
    #[inline]
    pub fn unschedulable(&self) -> bool {
        self.node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
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
    pub fn remove_pod(&mut self, namespace: &str, name: &str, uid: &str) -> Option<Arc<PodInfo>> {
        let pos = self.pods.iter().position(|p| {
            if !uid.is_empty() && !p.uid.is_empty() {
                p.uid == uid
            } else {
                p.namespace == namespace && p.name == name
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

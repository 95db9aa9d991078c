//! `PodInfo`: a pod with everything the scheduler derives from it, computed once.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm, Toleration, WeightedPodAffinityTerm};

use crate::key::{PodId, PodKey, Uid};
use crate::resources::{PodRequests, pod_requests};
use crate::selector::{Labels, Selector};

static EMPTY_LABELS: Labels = Labels::new();

/// A `hostIP/protocol/hostPort` triple a pod binds on its node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// Host IP; empty means all addresses (`0.0.0.0`).
    pub ip: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The port.
    pub port: i32,
}

impl HostPort {
    /// Whether two host ports cannot both be bound (same protocol and port, and either IP is
    /// the wildcard or both are equal), as upstream's `HostPortInfo.CheckConflict`.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

/// A compiled pod (anti-)affinity term, as upstream's `framework.AffinityTerm`.
#[derive(Debug, Clone)]
pub struct AffinityTerm {
    /// Pods the term is about.
    pub selector: Selector,
    /// Namespaces listed explicitly (the pod's own when neither list nor selector is given).
    pub namespaces: BTreeSet<String>,
    /// Namespaces selected by their labels.
    pub namespace_selector: Selector,
    /// The node label that defines the topology domain.
    pub topology_key: String,
}

impl AffinityTerm {
    /// Compiles a term of a pod in `pod_namespace`.
    pub fn new(
        term: &PodAffinityTerm,
        pod_namespace: &str,
        field: &str,
    ) -> Result<Self, crate::selector::SelectorError> {
        let selector = Selector::from_label_selector(
            term.label_selector.as_ref(),
            &format!("{field}.labelSelector"),
        )?;
        let namespace_selector = Selector::from_label_selector(
            term.namespace_selector.as_ref(),
            &format!("{field}.namespaceSelector"),
        )?;
        let mut namespaces: BTreeSet<String> = term.namespaces.iter().flatten().cloned().collect();
        if namespaces.is_empty() && term.namespace_selector.is_none() {
            namespaces.insert(pod_namespace.to_string());
        }
        Ok(AffinityTerm {
            selector,
            namespaces,
            namespace_selector,
            topology_key: term.topology_key.clone(),
        })
    }

    /// Whether `pod` (in a namespace with `namespace_labels`) is one the term is about.
    #[inline]
    pub fn matches(&self, pod: &PodInfo, namespace_labels: &Labels) -> bool {
        (self.namespaces.contains(&*pod.namespace)
            || self.namespace_selector.matches(namespace_labels))
            && self.selector.matches(pod.labels())
    }
}

/// A weighted (preferred) affinity term.
#[derive(Debug, Clone)]
pub struct WeightedAffinityTerm {
    /// The term.
    pub term: AffinityTerm,
    /// Its weight (1..=100).
    pub weight: i32,
}

fn required_terms(
    terms: Option<&[PodAffinityTerm]>,
    namespace: &str,
    field: &str,
) -> Result<Vec<AffinityTerm>, crate::selector::SelectorError> {
    terms
        .unwrap_or(&[])
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let f = format!("{field}.requiredDuringSchedulingIgnoredDuringExecution[{i}]");
            AffinityTerm::new(t, namespace, &f)
        })
        .collect()
}

fn preferred_terms(
    terms: Option<&[WeightedPodAffinityTerm]>,
    namespace: &str,
    field: &str,
) -> Result<Vec<WeightedAffinityTerm>, crate::selector::SelectorError> {
    terms
        .unwrap_or(&[])
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let f = format!("{field}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            Ok(WeightedAffinityTerm {
                term: AffinityTerm::new(&t.pod_affinity_term, namespace, &f)?,
                weight: t.weight,
            })
        })
        .collect()
}

impl PodKey {
    /// The key of a pod the scheduler knows (its namespace and name, shared: allocates
    /// nothing).
    pub fn of(pod: &PodInfo) -> PodKey {
        PodKey {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
        }
    }
}

impl PodId {
    /// The id of a pod the scheduler knows (its key and uid).
    pub fn of(pod: &PodInfo) -> PodId {
        PodId::new(PodKey::of(pod), pod.uid.clone())
    }
}

/// A pod plus what the scheduler derives from it once: requests, ports, affinity terms.
#[derive(Debug, Clone)]
pub struct PodInfo {
    /// The pod as given.
    pub pod: Arc<Pod>,
    /// `metadata.namespace` (`default` when absent); shared with the pod's [`PodKey`].
    pub namespace: Arc<str>,
    /// `metadata.name`; shared with the pod's [`PodKey`].
    pub name: Arc<str>,
    /// `metadata.uid` (empty when absent).
    pub uid: Uid,
    /// `spec.priority` (0 when absent).
    pub priority: i32,
    /// Effective and non-zero requests.
    pub requests: PodRequests,
    /// Host ports of containers and sidecars.
    pub host_ports: Vec<HostPort>,
    /// Required pod affinity terms.
    pub required_affinity: Vec<AffinityTerm>,
    /// Required pod anti-affinity terms.
    pub required_anti_affinity: Vec<AffinityTerm>,
    /// Preferred pod affinity terms.
    pub preferred_affinity: Vec<WeightedAffinityTerm>,
    /// Preferred pod anti-affinity terms.
    pub preferred_anti_affinity: Vec<WeightedAffinityTerm>,
    /// Why the pod cannot be considered at all (an unreadable quantity or selector).
    pub error: Option<String>,
}

impl PodInfo {
    /// Derives the scheduling view of a pod. Never fails: problems land in `error`.
    pub fn new(pod: Arc<Pod>) -> PodInfo {
        let meta = &pod.metadata;
        let PodKey { namespace, name } = PodKey::of_pod(&pod);
        let mut error = None;
        let requests = match pod_requests(&pod) {
            Ok(r) => r,
            Err(e) => {
                error = Some(format!("unreadable quantity at {e}"));
                PodRequests::default()
            }
        };
        let spec = pod.spec.as_ref();
        let mut host_ports = Vec::new();
        if let Some(spec) = spec {
            let sidecars = spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"));
            for c in sidecars.chain(spec.containers.iter()) {
                for p in c.ports.iter().flatten() {
                    if p.host_port.unwrap_or(0) > 0 {
                        host_ports.push(HostPort {
                            ip: p
                                .host_ip
                                .clone()
                                .filter(|s| !s.is_empty())
                                .unwrap_or_else(|| "0.0.0.0".to_string()),
                            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_string()),
                            port: p.host_port.unwrap_or(0),
                        });
                    }
                }
            }
        }
        let mut info = PodInfo {
            namespace,
            name,
            uid: Uid::of(meta),
            priority: spec.and_then(|s| s.priority).unwrap_or(0),
            requests,
            host_ports,
            required_affinity: Vec::new(),
            required_anti_affinity: Vec::new(),
            preferred_affinity: Vec::new(),
            preferred_anti_affinity: Vec::new(),
            error: None,
            pod: pod.clone(),
        };
        if let Err(e) = info.compile_affinity() {
            error.get_or_insert(format!("invalid affinity: {e}"));
        }
        info.error = error;
        info
    }

    fn compile_affinity(&mut self) -> Result<(), crate::selector::SelectorError> {
        let Some(affinity) = self.pod.spec.as_ref().and_then(|s| s.affinity.as_ref()) else {
            return Ok(());
        };
        let ns = &self.namespace;
        let base = "spec.affinity";
        if let Some(a) = &affinity.pod_affinity {
            let f = format!("{base}.podAffinity");
            self.required_affinity = required_terms(
                a.required_during_scheduling_ignored_during_execution
                    .as_deref(),
                ns,
                &f,
            )?;
            self.preferred_affinity = preferred_terms(
                a.preferred_during_scheduling_ignored_during_execution
                    .as_deref(),
                ns,
                &f,
            )?;
        }
        if let Some(a) = &affinity.pod_anti_affinity {
            let f = format!("{base}.podAntiAffinity");
            self.required_anti_affinity = required_terms(
                a.required_during_scheduling_ignored_during_execution
                    .as_deref(),
                ns,
                &f,
            )?;
            self.preferred_anti_affinity = preferred_terms(
                a.preferred_during_scheduling_ignored_during_execution
                    .as_deref(),
                ns,
                &f,
            )?;
        }
        Ok(())
    }

    /// The pod's labels.
    #[inline]
    pub fn labels(&self) -> &Labels {
        self.pod.metadata.labels.as_ref().unwrap_or(&EMPTY_LABELS)
    }

    /// The pod's key, `namespace/name` (shares the pod's strings: allocates nothing).
    pub fn key(&self) -> PodKey {
        PodKey::of(self)
    }

    /// Whether `key` is this pod's key.
    pub fn is(&self, key: &PodKey) -> bool {
        key.is(&self.namespace, &self.name)
    }

    /// The pod's tolerations.
    pub fn tolerations(&self) -> &[Toleration] {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or(&[])
    }

    /// `spec.nodeName`, when set.
    pub fn node_name(&self) -> Option<&str> {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|s| !s.is_empty())
    }

    /// True when the pod has any pod affinity or anti-affinity term (required or preferred).
    pub fn has_affinity(&self) -> bool {
        !self.required_affinity.is_empty()
            || !self.required_anti_affinity.is_empty()
            || !self.preferred_affinity.is_empty()
            || !self.preferred_anti_affinity.is_empty()
    }

    /// True when the pod has required anti-affinity terms.
    pub fn has_required_anti_affinity(&self) -> bool {
        !self.required_anti_affinity.is_empty()
    }
}

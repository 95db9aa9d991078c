//! Resource vectors and the effective request of a pod, computed exactly as upstream's
//! `resourcehelper.PodRequests` does:
//!
//! `max(sum(containers) + sum(sidecars), max over init containers i of (init_i + sidecars
//! started before i)) + overhead`, where sidecars are init containers with
//! `restartPolicy: Always`. Pod-level `spec.resources.requests` (cpu, memory), when set,
//! replace the container sum for those resources.
//!
//! Container requests are summed at nano scale before rounding, so the per-pod rounding
//! matches upstream's `Quantity` arithmetic; node totals are sums of per-pod rounded values,
//! also as upstream's `NodeInfo` keeps them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Node, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use crate::quantity::{Quantity, nanos_to_milli, nanos_to_value};

/// `cpu`.
pub const CPU: &str = "cpu";
/// `memory`.
pub const MEMORY: &str = "memory";
/// `ephemeral-storage`.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// `pods`.
pub const PODS: &str = "pods";

/// Upstream's `DefaultMilliCPURequest`: what scoring assumes for a container with no CPU request.
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Upstream's `DefaultMemoryRequest` (200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// A resource quantity that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {source}")]
pub struct QuantityError {
    /// Where the bad value sits, e.g. `spec.containers[0].resources.requests[cpu]`.
    pub field: String,
    /// What is wrong with it.
    pub source: crate::quantity::Error,
}

/// Whether a resource name is a scalar resource in upstream's sense (extended resources,
/// hugepages, attachable volumes): anything tracked besides cpu, memory, ephemeral-storage, pods.
pub fn is_scalar_resource(name: &str) -> bool {
    name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
        || (name.contains('/') && !name.starts_with("kubernetes.io/"))
        || name.starts_with("requests.")
}

/// An integer resource vector in the scheduler's units: CPU in millicores, everything else in
/// whole units (bytes, counts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    /// CPU, millicores.
    pub milli_cpu: i64,
    /// Memory, bytes.
    pub memory: i64,
    /// Ephemeral storage, bytes.
    pub ephemeral_storage: i64,
    /// Pod count (for a node's allocatable: how many pods it admits).
    pub pods: i64,
    /// Scalar resources (extended, hugepages), sorted by name.
    pub scalars: Vec<(Arc<str>, i64)>,
}

impl Resources {
    /// The amount of a scalar resource (0 when absent).
    pub fn scalar(&self, name: &str) -> i64 {
        self.scalars
            .binary_search_by(|(n, _)| (**n).cmp(name))
            .map(|i| self.scalars[i].1)
            .unwrap_or(0)
    }

    /// Any resource by its Kubernetes name.
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.milli_cpu,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.pods,
            other => self.scalar(other),
        }
    }

    /// Adds `other` to `self`, element-wise.
    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        self.pods = self.pods.saturating_add(other.pods);
        for (name, v) in &other.scalars {
            self.add_scalar(name, *v);
        }
    }

    /// Subtracts `other` from `self`, element-wise.
    pub fn sub(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_sub(other.milli_cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
        self.pods = self.pods.saturating_sub(other.pods);
        for (name, v) in &other.scalars {
            self.add_scalar(name, v.saturating_neg());
        }
    }

    fn add_scalar(&mut self, name: &Arc<str>, v: i64) {
        match self.scalars.binary_search_by(|(n, _)| n.cmp(name)) {
            Ok(i) => self.scalars[i].1 = self.scalars[i].1.saturating_add(v),
            Err(i) => self.scalars.insert(i, (name.clone(), v)),
        }
    }

    /// True when every component is zero.
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalars.iter().all(|(_, v)| *v == 0)
    }
}

/// An exact (nano-scaled) resource list, used while summing containers.
type ExactList = BTreeMap<String, i128>;

/// Parses a request, limit or capacity: a negative one is an error (the API server rejects
/// them; the scheduler's arithmetic and scores assume they cannot occur).
fn non_negative(s: &str) -> Result<Quantity, crate::quantity::Error> {
    let q = Quantity::parse(s)?;
    if q.is_negative() {
        return Err(crate::quantity::Error::Negative(s.to_string()));
    }
    Ok(q)
}

fn parse_list(
    list: Option<&BTreeMap<String, K8sQuantity>>,
    field: &dyn Fn(&str) -> String,
) -> Result<ExactList, QuantityError> {
    let mut out = ExactList::new();
    if let Some(list) = list {
        for (name, q) in list {
            let parsed = non_negative(&q.0).map_err(|source| QuantityError {
                field: field(name),
                source,
            })?;
            out.insert(name.clone(), parsed.nano_value());
        }
    }
    Ok(out)
}

fn add_into(acc: &mut ExactList, other: &ExactList) {
    for (k, v) in other {
        let e = acc.entry(k.clone()).or_insert(0);
        *e = e.saturating_add(*v);
    }
}

fn max_into(acc: &mut ExactList, other: &ExactList) {
    for (k, v) in other {
        let e = acc.entry(k.clone()).or_insert(*v);
        if *v > *e {
            *e = *v;
        }
    }
}

fn container_requests(
    c: &Container,
    field_prefix: &str,
    non_missing: bool,
) -> Result<ExactList, QuantityError> {
    let requests = c
        .resources
        .as_ref()
        .and_then(|r: &ResourceRequirements| r.requests.as_ref());
    let mut list = parse_list(requests, &|name| {
        format!("{field_prefix}.resources.requests[{name}]")
    })?;
    if non_missing {
        // Upstream's NonMissingContainerRequests: a container that does not mention cpu or
        // memory counts the defaults for scoring, so best-effort pods do not all pile onto one
        // node. An explicit zero stays zero.
        list.entry(CPU.to_string())
            .or_insert(i128::from(DEFAULT_MILLI_CPU_REQUEST) * 1_000_000);
        list.entry(MEMORY.to_string())
            .or_insert(i128::from(DEFAULT_MEMORY_REQUEST) * 1_000_000_000);
    }
    Ok(list)
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Computes `PodRequests(pod)` exactly; `non_missing` applies the scoring defaults for
/// containers that do not mention cpu or memory.
fn pod_requests_exact(pod: &Pod, non_missing: bool) -> Result<ExactList, QuantityError> {
    let mut reqs = ExactList::new();
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(reqs);
    };
    for (i, c) in spec.containers.iter().enumerate() {
        let list = container_requests(c, &format!("spec.containers[{i}]"), non_missing)?;
        add_into(&mut reqs, &list);
    }
    let mut restartable = ExactList::new();
    let mut init_max = ExactList::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let list = container_requests(c, &format!("spec.initContainers[{i}]"), non_missing)?;
        let during_init = if is_sidecar(c) {
            add_into(&mut reqs, &list);
            add_into(&mut restartable, &list);
            restartable.clone()
        } else {
            let mut tmp = list;
            add_into(&mut tmp, &restartable);
            tmp
        };
        max_into(&mut init_max, &during_init);
    }
    max_into(&mut reqs, &init_max);
    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        let list = parse_list(Some(pod_level), &|name| {
            format!("spec.resources.requests[{name}]")
        })?;
        for (k, v) in list {
            // Only cpu and memory are supported at pod level (PodLevelResources).
            if k == CPU || k == MEMORY {
                reqs.insert(k, v);
            }
        }
    }
    if let Some(overhead) = spec.overhead.as_ref() {
        let list = parse_list(Some(overhead), &|name| format!("spec.overhead[{name}]"))?;
        add_into(&mut reqs, &list);
    }
    Ok(reqs)
}

fn to_resources(list: &ExactList) -> Resources {
    let mut r = Resources::default();
    for (name, v) in list {
        match name.as_str() {
            CPU => r.milli_cpu = nanos_to_milli(*v),
            MEMORY => r.memory = nanos_to_value(*v),
            EPHEMERAL_STORAGE => r.ephemeral_storage = nanos_to_value(*v),
            PODS => {}
            other if is_scalar_resource(other) => {
                r.scalars.push((Arc::from(other), nanos_to_value(*v)));
            }
            _ => {}
        }
    }
    // BTreeMap iteration is sorted, so scalars are sorted too.
    r
}

/// A pod's requests as the scheduler sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRequests {
    /// The effective request (what NodeResourcesFit checks and nodes accumulate).
    pub requests: Resources,
    /// CPU with the scoring default for containers that do not mention it (millicores).
    pub non_zero_milli_cpu: i64,
    /// Memory with the scoring default for containers that do not mention it (bytes).
    pub non_zero_memory: i64,
}

/// Computes a pod's effective and non-zero requests, or the first unreadable quantity.
pub fn pod_requests(pod: &Pod) -> Result<PodRequests, QuantityError> {
    let exact = pod_requests_exact(pod, false)?;
    let non_zero = pod_requests_exact(pod, true)?;
    Ok(PodRequests {
        requests: to_resources(&exact),
        non_zero_milli_cpu: non_zero.get(CPU).map_or(0, |v| nanos_to_milli(*v)),
        non_zero_memory: non_zero.get(MEMORY).map_or(0, |v| nanos_to_value(*v)),
    })
}

/// Reads a node's `status.capacity` CPU and memory (zero when absent).
pub fn node_capacity(node: &Node) -> Result<Resources, QuantityError> {
    let mut r = Resources::default();
    let cap = node.status.as_ref().and_then(|s| s.capacity.as_ref());
    for (name, q) in cap.into_iter().flatten() {
        let parse = || {
            non_negative(&q.0).map_err(|source| QuantityError {
                field: format!("status.capacity[{name}]"),
                source,
            })
        };
        match name.as_str() {
            CPU => r.milli_cpu = parse()?.milli_value(),
            MEMORY => r.memory = parse()?.value(),
            _ => {}
        }
    }
    Ok(r)
}

/// Reads a node's `status.allocatable` (falling back to `status.capacity` per resource, as
/// the kubelet would report it if allocatable were missing).
pub fn node_allocatable(node: &Node) -> Result<Resources, QuantityError> {
    let status = node.status.as_ref();
    let mut merged: BTreeMap<String, K8sQuantity> = BTreeMap::new();
    if let Some(cap) = status.and_then(|s| s.capacity.as_ref()) {
        merged.extend(cap.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    if let Some(alloc) = status.and_then(|s| s.allocatable.as_ref()) {
        merged.extend(alloc.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let mut r = Resources::default();
    for (name, q) in &merged {
        let parsed = non_negative(&q.0).map_err(|source| QuantityError {
            field: format!("status.allocatable[{name}]"),
            source,
        })?;
        match name.as_str() {
            CPU => r.milli_cpu = parsed.milli_value(),
            MEMORY => r.memory = parsed.value(),
            EPHEMERAL_STORAGE => r.ephemeral_storage = parsed.value(),
            PODS => r.pods = parsed.value(),
            other if is_scalar_resource(other) => {
                r.scalars.push((Arc::from(other), parsed.value()));
            }
            _ => {}
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    #[test]
    fn table() {
        struct Case {
            name: &'static str,
            spec: serde_json::Value,
            cpu: i64,
            mem: i64,
            nz_cpu: i64,
            nz_mem: i64,
        }
        let cases = [
            Case {
                name: "no requests: defaults only for scoring",
                spec: json!({"containers": [{"name": "a"}]}),
                cpu: 0,
                mem: 0,
                nz_cpu: 100,
                nz_mem: DEFAULT_MEMORY_REQUEST,
            },
            Case {
                name: "sum of containers",
                spec: json!({"containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "1"}}}]}),
                cpu: 1250,
                mem: 1 << 30,
                nz_cpu: 1250,
                nz_mem: (1 << 30) + DEFAULT_MEMORY_REQUEST,
            },
            Case {
                name: "init container larger than the sum wins",
                spec: json!({"containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "500m"}}}],
                    "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2", "memory": "10Mi"}}}]}),
                cpu: 2000,
                mem: 10 << 20,
                nz_cpu: 2000,
                nz_mem: DEFAULT_MEMORY_REQUEST,
            },
            Case {
                name: "sidecars add to containers and to later init containers",
                spec: json!({"containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "1"}}}],
                    "initContainers": [
                        {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
                        {"name": "i", "resources": {"requests": {"cpu": "1200m"}}}]}),
                // containers+sidecar = 1500; init phase: 1200 + 500 = 1700
                cpu: 1700,
                mem: 0,
                nz_cpu: 1700,
                nz_mem: 2 * DEFAULT_MEMORY_REQUEST,
            },
            Case {
                name: "overhead is added",
                spec: json!({"containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                    "overhead": {"cpu": "250m", "memory": "120Mi"}}),
                cpu: 1250,
                mem: (1 << 30) + (120 << 20),
                nz_cpu: 1250,
                nz_mem: (1 << 30) + (120 << 20),
            },
            Case {
                name: "exact sum before rounding",
                spec: json!({"containers": [
                    {"name": "a", "resources": {"requests": {"memory": "0.5"}}},
                    {"name": "b", "resources": {"requests": {"memory": "0.5"}}}]}),
                cpu: 0,
                mem: 1,
                nz_cpu: 200,
                nz_mem: 1,
            },
            Case {
                name: "pod-level requests replace cpu and memory",
                spec: json!({"containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "100m"}}}],
                    "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}),
                cpu: 2000,
                mem: 1 << 30,
                nz_cpu: 2000,
                nz_mem: 1 << 30,
            },
        ];
        for c in cases {
            let r = pod_requests(&pod(c.spec)).unwrap();
            assert_eq!(r.requests.milli_cpu, c.cpu, "{}: cpu", c.name);
            assert_eq!(r.requests.memory, c.mem, "{}: memory", c.name);
            assert_eq!(r.non_zero_milli_cpu, c.nz_cpu, "{}: non-zero cpu", c.name);
            assert_eq!(r.non_zero_memory, c.nz_mem, "{}: non-zero memory", c.name);
        }
    }

    #[test]
    fn extended_resources_and_bad_quantities() {
        let p = pod(json!({"containers": [
            {"name": "a", "resources": {"requests": {"example.com/gpu": "2", "cpu": "1"}}}]}));
        let r = pod_requests(&p).unwrap();
        assert_eq!(r.requests.scalar("example.com/gpu"), 2);
        let bad = pod(json!({"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}));
        let err = pod_requests(&bad).unwrap_err();
        assert_eq!(err.field, "spec.containers[0].resources.requests[cpu]");
        assert!(err.to_string().contains("lots"));
    }

    #[test]
    fn negative_requests_and_capacities_are_errors() {
        // Regression (issue #15, 7): `cpu: "-1"` made NodeResourcesFit score 102, and
        // `memory: "-1"` was placed. A negative request, overhead or capacity is an error,
        // so the pod (or node) is unschedulable with the reason.
        for (spec, field) in [
            (
                json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "-1"}}}]}),
                "spec.containers[0].resources.requests[cpu]",
            ),
            (
                json!({"containers": [{"name": "a", "resources": {"requests": {"memory": "-1"}}}]}),
                "spec.containers[0].resources.requests[memory]",
            ),
            (
                json!({"containers": [], "overhead": {"cpu": "-10m"}}),
                "spec.overhead[cpu]",
            ),
            (
                json!({"containers": [], "initContainers": [{"name": "i", "resources": {"requests": {"memory": "-1Gi"}}}]}),
                "spec.initContainers[0].resources.requests[memory]",
            ),
        ] {
            let err = pod_requests(&pod(spec)).unwrap_err();
            assert_eq!(err.field, field);
            assert!(err.to_string().contains("is negative"), "{err}");
        }
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": "n"}, "status": {"allocatable": {"memory": "-1"}}}),
        )
        .unwrap();
        let err = node_allocatable(&node).unwrap_err();
        assert_eq!(err.field, "status.allocatable[memory]");
    }
}

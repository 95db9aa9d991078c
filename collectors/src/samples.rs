//! The stored signals and the intermediate form every source maps its data into.

use std::collections::HashSet;

use crate::error::CollectError;
use headroom_scheduler::key::Uid;

/// What a series describes: a node, a container, or a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Labels `{node}`.
    Node,
    /// Labels `{container, namespace, node, pod}`.
    Container,
    /// Labels `{namespace, node, pod}`.
    Pod,
}

/// A stored signal. Every source maps into these same names, so consumers do not care
/// which source produced a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// `node_cpu_usage_cores{node}`.
    NodeCpuUsageCores,
    /// `node_memory_working_set_bytes{node}`.
    NodeMemoryWorkingSetBytes,
    /// `node_memory_available_bytes{node}`.
    NodeMemoryAvailableBytes,
    /// `node_fs_available_bytes{node}`.
    NodeFsAvailableBytes,
    /// `node_fs_capacity_bytes{node}`.
    NodeFsCapacityBytes,
    /// `node_imagefs_available_bytes{node}`.
    NodeImagefsAvailableBytes,
    /// `node_imagefs_capacity_bytes{node}`.
    NodeImagefsCapacityBytes,
    /// `container_cpu_usage_cores{namespace,pod,container,node}`.
    ContainerCpuUsageCores,
    /// `container_memory_working_set_bytes{namespace,pod,container,node}`.
    ContainerMemoryWorkingSetBytes,
    /// `pod_ephemeral_storage_used_bytes{namespace,pod,node}`.
    PodEphemeralStorageUsedBytes,
}

impl Signal {
    /// All signals.
    pub const ALL: [Signal; 10] = [
        Signal::NodeCpuUsageCores,
        Signal::NodeMemoryWorkingSetBytes,
        Signal::NodeMemoryAvailableBytes,
        Signal::NodeFsAvailableBytes,
        Signal::NodeFsCapacityBytes,
        Signal::NodeImagefsAvailableBytes,
        Signal::NodeImagefsCapacityBytes,
        Signal::ContainerCpuUsageCores,
        Signal::ContainerMemoryWorkingSetBytes,
        Signal::PodEphemeralStorageUsedBytes,
    ];

    /// The stored metric name.
    pub fn metric(self) -> &'static str {
        match self {
            Signal::NodeCpuUsageCores => "node_cpu_usage_cores",
            Signal::NodeMemoryWorkingSetBytes => "node_memory_working_set_bytes",
            Signal::NodeMemoryAvailableBytes => "node_memory_available_bytes",
            Signal::NodeFsAvailableBytes => "node_fs_available_bytes",
            Signal::NodeFsCapacityBytes => "node_fs_capacity_bytes",
            Signal::NodeImagefsAvailableBytes => "node_imagefs_available_bytes",
            Signal::NodeImagefsCapacityBytes => "node_imagefs_capacity_bytes",
            Signal::ContainerCpuUsageCores => "container_cpu_usage_cores",
            Signal::ContainerMemoryWorkingSetBytes => "container_memory_working_set_bytes",
            Signal::PodEphemeralStorageUsedBytes => "pod_ephemeral_storage_used_bytes",
        }
    }

    /// Which labels the series carries.
    pub fn scope(self) -> Scope {
        match self {
            Signal::ContainerCpuUsageCores | Signal::ContainerMemoryWorkingSetBytes => {
                Scope::Container
            }
            Signal::PodEphemeralStorageUsedBytes => Scope::Pod,
            _ => Scope::Node,
        }
    }
}

/// One value ready for the sink.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub signal: Signal,
    /// Sorted by key, as the sink expects.
    pub labels: Vec<(String, String)>,
    pub ts_ms: i64,
    pub value: f64,
}

impl Sample {
    pub fn node(signal: Signal, node: &str, ts_ms: i64, value: f64) -> Self {
        Self {
            signal,
            labels: vec![("node".into(), node.into())],
            ts_ms,
            value,
        }
    }

    pub fn container(
        signal: Signal,
        namespace: &str,
        pod: &str,
        container: &str,
        node: &str,
        ts_ms: i64,
        value: f64,
    ) -> Self {
        Self {
            signal,
            labels: vec![
                ("container".into(), container.into()),
                ("namespace".into(), namespace.into()),
                ("node".into(), node.into()),
                ("pod".into(), pod.into()),
            ],
            ts_ms,
            value,
        }
    }

    pub fn pod(
        signal: Signal,
        namespace: &str,
        pod: &str,
        node: &str,
        ts_ms: i64,
        value: f64,
    ) -> Self {
        Self {
            signal,
            labels: vec![
                ("namespace".into(), namespace.into()),
                ("node".into(), node.into()),
                ("pod".into(), pod.into()),
            ],
            ts_ms,
            value,
        }
    }
}

/// A pod seen in one cycle, with its whole-pod usage at that time.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSeen {
    /// Pod UID, or `namespace/name` when the source does not report UIDs (a stand-in that
    /// still tells this pod's runs apart from others').
    pub uid: Uid,
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Node it runs on.
    pub node: String,
    /// When the usage was observed.
    pub ts_ms: i64,
    /// CPU in cores (sum of containers), if reported.
    pub cpu_cores: Option<f64>,
    /// Memory working set in bytes (sum of containers), if reported.
    pub memory_bytes: Option<f64>,
}

/// Which nodes a cycle's pod list covers completely.
#[derive(Debug, Clone, PartialEq)]
pub enum Coverage {
    /// Every node (a Prometheus query over the whole cluster succeeded).
    All,
    /// Only these nodes were polled successfully; pods on other nodes are unknown.
    Nodes(HashSet<String>),
}

impl Coverage {
    /// Whether pods on `node` were all listed.
    pub fn covers(&self, node: &str) -> bool {
        match self {
            Coverage::All => true,
            Coverage::Nodes(nodes) => nodes.contains(node),
        }
    }
}

/// Pods seen in one cycle.
#[derive(Debug, Clone, PartialEq)]
pub struct PodView {
    /// The pods.
    pub pods: Vec<PodSeen>,
    /// What the list covers.
    pub coverage: Coverage,
}

/// Result of one collection cycle of one source, before it is written.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub samples: Vec<Sample>,
    /// `None` when the pod list is unknown this cycle (its query failed).
    pub pods: Option<PodView>,
    /// Failures with the subject they concern (a node, a signal, a URL), for log de-duplication.
    pub errors: Vec<(String, CollectError)>,
    /// Requests made (nodes polled, queries run, targets scraped).
    pub requests: usize,
}

impl Batch {
    /// Adds a sample if its value is finite; counts it as skipped otherwise.
    pub fn push_checked(&mut self, sample: Sample, non_finite: &mut usize) {
        if sample.value.is_finite() {
            self.samples.push(sample);
        } else {
            *non_finite += 1;
        }
    }
}

/// Sums optional values, `None` only if all are `None`.
pub(crate) fn sum_opt(acc: Option<f64>, v: Option<f64>) -> Option<f64> {
    match (acc, v) {
        (Some(a), Some(b)) => Some(a + b),
        (None, x) | (x, None) => x,
    }
}

/// Milliseconds since the Unix epoch now.
pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

//! Serde types of the kubelet summary API (`/stats/summary`, `stats/v1alpha1`).
//!
//! Every field the kubelet may omit is optional: old kubelets (2017) have no `time` on
//! filesystem stats and no pod-level cpu/memory, Windows nodes lack many container fields, and
//! a stat block is simply absent while cAdvisor has no data yet. Numbers are `u64` as in the Go
//! types, so `inodesFree: 18446744073709551615` is read exactly. Unknown fields are ignored:
//! newer kubelets add fields, and that must not break collection.

use serde::{Deserialize, Deserializer, Serialize};

/// Treats JSON `null` like an absent field (Go marshals nil slices as `null`).
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The whole summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Node-level stats.
    pub node: NodeStats,
    /// Pods on the node.
    #[serde(default, deserialize_with = "null_default")]
    pub pods: Vec<PodStats>,
}

/// Node-level stats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    /// The node's name.
    #[serde(default)]
    pub node_name: String,
    /// System containers (kubelet, runtime, pods, misc).
    #[serde(default, deserialize_with = "null_default")]
    pub system_containers: Vec<ContainerStats>,
    /// When the node started (RFC 3339).
    #[serde(default)]
    pub start_time: Option<String>,
    /// CPU.
    #[serde(default)]
    pub cpu: Option<CpuStats>,
    /// Memory.
    #[serde(default)]
    pub memory: Option<MemoryStats>,
    /// Network.
    #[serde(default)]
    pub network: Option<NetworkStats>,
    /// The filesystem holding the kubelet root dir (pods' ephemeral storage, logs).
    #[serde(default)]
    pub fs: Option<FsStats>,
    /// Container runtime filesystems.
    #[serde(default)]
    pub runtime: Option<RuntimeStats>,
    /// Process limits.
    #[serde(default)]
    pub rlimit: Option<RlimitStats>,
}

/// CPU stats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    /// When observed (RFC 3339).
    #[serde(default)]
    pub time: Option<String>,
    /// Average usage over the sampling window, in nanocores (1e9 = one core).
    #[serde(default)]
    pub usage_nano_cores: Option<u64>,
    /// Cumulative usage, in core-nanoseconds.
    #[serde(default)]
    pub usage_core_nano_seconds: Option<u64>,
}

/// Memory stats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    /// When observed (RFC 3339).
    #[serde(default)]
    pub time: Option<String>,
    /// Available memory (node: allocatable-ish free memory for eviction).
    #[serde(default)]
    pub available_bytes: Option<u64>,
    /// Total usage, cache included.
    #[serde(default)]
    pub usage_bytes: Option<u64>,
    /// Working set: what the kubelet evicts on and what the scheduler should count.
    #[serde(default)]
    pub working_set_bytes: Option<u64>,
    /// Resident set size.
    #[serde(default)]
    pub rss_bytes: Option<u64>,
    /// Page faults.
    #[serde(default)]
    pub page_faults: Option<u64>,
    /// Major page faults.
    #[serde(default)]
    pub major_page_faults: Option<u64>,
}

/// Filesystem stats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    /// When observed (RFC 3339); absent on old kubelets.
    #[serde(default)]
    pub time: Option<String>,
    /// Bytes available to non-root users.
    #[serde(default)]
    pub available_bytes: Option<u64>,
    /// Total size.
    #[serde(default)]
    pub capacity_bytes: Option<u64>,
    /// Bytes used (for a pod: its ephemeral storage).
    #[serde(default)]
    pub used_bytes: Option<u64>,
    /// Free inodes.
    #[serde(default)]
    pub inodes_free: Option<u64>,
    /// Total inodes.
    #[serde(default)]
    pub inodes: Option<u64>,
    /// Inodes used.
    #[serde(default)]
    pub inodes_used: Option<u64>,
}

/// Container runtime filesystems.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    /// The filesystem holding images.
    #[serde(default)]
    pub image_fs: Option<FsStats>,
    /// The filesystem holding container writable layers (when split from images).
    #[serde(default)]
    pub container_fs: Option<FsStats>,
}

/// Process limits of the node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RlimitStats {
    /// When observed.
    #[serde(default)]
    pub time: Option<String>,
    /// Max PIDs.
    #[serde(default)]
    pub maxpid: Option<u64>,
    /// Current PIDs.
    #[serde(default)]
    pub curproc: Option<u64>,
}

/// Network stats (kept for completeness; not stored).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStats {
    /// When observed.
    #[serde(default)]
    pub time: Option<String>,
    /// Default interface name.
    #[serde(default)]
    pub name: Option<String>,
    /// Bytes received.
    #[serde(default)]
    pub rx_bytes: Option<u64>,
    /// Bytes sent.
    #[serde(default)]
    pub tx_bytes: Option<u64>,
}

/// Identity of a pod.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReference {
    /// Pod name.
    #[serde(default)]
    pub name: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// UID.
    #[serde(default)]
    pub uid: String,
}

/// Stats of one pod.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    /// Which pod.
    pub pod_ref: PodReference,
    /// When the pod started.
    #[serde(default)]
    pub start_time: Option<String>,
    /// Containers (running ones; init containers appear while they exist).
    #[serde(default, deserialize_with = "null_default")]
    pub containers: Vec<ContainerStats>,
    /// Pod-level CPU (absent on old kubelets).
    #[serde(default)]
    pub cpu: Option<CpuStats>,
    /// Pod-level memory (absent on old kubelets).
    #[serde(default)]
    pub memory: Option<MemoryStats>,
    /// Network.
    #[serde(default)]
    pub network: Option<NetworkStats>,
    /// Volumes.
    #[serde(default, rename = "volume", deserialize_with = "null_default")]
    pub volumes: Vec<VolumeStats>,
    /// Ephemeral storage used by the pod (rootfs + logs + emptyDir on the node fs).
    #[serde(default, rename = "ephemeral-storage")]
    pub ephemeral_storage: Option<FsStats>,
}

/// Stats of one container.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    /// Container name.
    #[serde(default)]
    pub name: String,
    /// When it started.
    #[serde(default)]
    pub start_time: Option<String>,
    /// CPU.
    #[serde(default)]
    pub cpu: Option<CpuStats>,
    /// Memory.
    #[serde(default)]
    pub memory: Option<MemoryStats>,
    /// Writable layer.
    #[serde(default)]
    pub rootfs: Option<FsStats>,
    /// Logs.
    #[serde(default)]
    pub logs: Option<FsStats>,
}

/// Stats of one pod volume.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStats {
    /// Volume name.
    #[serde(default)]
    pub name: String,
    /// When observed.
    #[serde(default)]
    pub time: Option<String>,
    /// Bytes used.
    #[serde(default)]
    pub used_bytes: Option<u64>,
    /// Bytes available.
    #[serde(default)]
    pub available_bytes: Option<u64>,
    /// Capacity.
    #[serde(default)]
    pub capacity_bytes: Option<u64>,
}

/// Parses an RFC 3339 time to milliseconds since the epoch.
pub fn parse_time_ms(time: Option<&str>) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(time?)
        .ok()
        .map(|t| t.timestamp_millis())
}

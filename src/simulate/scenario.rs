//! The scenario file of `headroom simulate`: nodes, workloads, reservations and events.
//!
//! ```yaml
//! duration: 6h                 # simulated time
//! step: 15s                    # sample interval and scheduling tick
//! seed: 7                      # default seed (--seed overrides)
//! nodes:
//!   - count: 12                # a generator; or `node: {...}` with a whole Node object
//!     namePrefix: build-
//!     cpu: "16"
//!     memory: 64Gi
//!     disk: 500Gi              # root filesystem (disk metrics and RealDiskFit)
//!     labels: {node-role/build: "true"}
//!     taints: []               # Kubernetes Taint objects
//!     systemCpu: 500m          # real usage of system daemons
//!     systemMemory: 2Gi
//! workloads:
//!   - name: builders
//!     kind: builder            # CI builds: arrivals, finite runs
//!     namespace: ci
//!     builders: 30             # distinct builders (bkci.dispatch.kubenetes/core label)
//!     arrivalsPerHour: 90      # Poisson arrivals over all builders
//!     duration: 20m            # mean run time (each builder's own mean is within ±50 %)
//!     warmSpeedup: 0.4         # a run on a node the builder used before is 40 % shorter
//!     requests: {cpu: "4", memory: 8Gi}
//!     usage: {cpu: [0.2, 1.2], memory: [0.2, 1.6]}  # real / requested, per builder
//!     noise: 0.15              # per-sample variation
//!   - name: mysql
//!     kind: database           # long-running, with disk (headroom.io/disk-request)
//!     count: 4
//!     requests: {cpu: "2", memory: 8Gi}
//!     disk: 200Gi
//!     labels: {headroom.io/service: mysql}
//!   - name: web
//!     kind: service            # long-running
//!     count: 6
//!     requests: {cpu: "1", memory: 2Gi}
//! reservations: []             # as in the usage file (src/usage/file.rs)
//! events:
//!   - {at: 2h, cordon: build-3}
//!   - {at: 3h, uncordon: build-3}
//!   - {at: 3h, addNodes: {count: 2, namePrefix: extra-, cpu: "16", memory: 64Gi}}
//!   - {at: 4h, removeNode: build-1}
//!   - {at: 4h, burst: {workload: builders, count: 40}}
//! overcommit:                  # what real overcommit costs; all on by default
//!   oomKill: true              # kernel OOM killer: builds fail and run again
//!   eviction: true             # kubelet eviction below evictionThreshold available
//!   evictionThreshold: 100Mi
//!   cpuContention: true        # CPU demand above capacity slows builds down
//! ```
//!
//! A builder workload may also set `dailyCycle: {amplitude: 0.5, period: 24h, peakAt:
//! 10h}`: its arrival rate then swings around `arrivalsPerHour`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::usage::file::{Amount, ReservationEntry};

/// Why a scenario could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Unreadable file.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The YAML does not fit the schema, or a value is invalid.
    #[error("{path}: at {field}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// Field path.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// A node generator (or one explicit Node object).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct NodeSpec {
    /// An explicit Node object (then the generator fields are ignored except `system*`).
    pub node: Option<serde_json::Value>,
    /// How many nodes. Default 1.
    pub count: usize,
    /// Name prefix; nodes are `<prefix><n>` from 1. Default `node-`.
    pub name_prefix: String,
    /// CPU capacity. Default `8`.
    pub cpu: Amount,
    /// Memory capacity. Default `32Gi`.
    pub memory: Amount,
    /// Root filesystem size. Default `200Gi`.
    pub disk: Amount,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Taints (Kubernetes Taint objects).
    pub taints: Vec<serde_json::Value>,
    /// Real CPU of system daemons. Default `250m`.
    pub system_cpu: Amount,
    /// Real memory of system daemons. Default `1Gi`.
    pub system_memory: Amount,
}

impl Default for NodeSpec {
    fn default() -> Self {
        NodeSpec {
            node: None,
            count: 1,
            name_prefix: "node-".into(),
            cpu: Amount::Text("8".into()),
            memory: Amount::Text("32Gi".into()),
            disk: Amount::Text("200Gi".into()),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            system_cpu: Amount::Text("250m".into()),
            system_memory: Amount::Text("1Gi".into()),
        }
    }
}

/// The kind of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Kind {
    /// CI builds: Poisson arrivals, finite runs, warm caches.
    #[default]
    Builder,
    /// Long-running pods with a disk need.
    Database,
    /// Long-running pods.
    Service,
}

/// Requests of a workload's pods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requests {
    /// CPU.
    pub cpu: Amount,
    /// Memory.
    pub memory: Amount,
}

/// Real use relative to the requests: each builder (or pod) draws its own factor uniformly
/// from `[min, max]`; above 1 it uses more than it asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsageSpec {
    /// CPU factor range. Default `[0.3, 0.8]`.
    pub cpu: [f64; 2],
    /// Memory factor range. Default `[0.5, 0.9]`.
    pub memory: [f64; 2],
}

impl Default for UsageSpec {
    fn default() -> Self {
        UsageSpec {
            cpu: [0.3, 0.8],
            memory: [0.5, 0.9],
        }
    }
}

/// One workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Workload {
    /// Name (pods are `<name>-<n>`; builders `<name>-b<k>`).
    pub name: String,
    /// Kind. Default `builder`.
    #[serde(default)]
    pub kind: Kind,
    /// Namespace. Default `default`.
    #[serde(default = "default_ns")]
    pub namespace: String,
    /// Builders: distinct builders. Default 10.
    #[serde(default = "ten")]
    pub builders: usize,
    /// Builders: arrivals per hour over all builders. Default 60.
    #[serde(default = "sixty")]
    pub arrivals_per_hour: f64,
    /// Builders: mean run time. Default `15m`.
    #[serde(default = "fifteen_min", with = "humantime_serde")]
    pub duration: Duration,
    /// Builders: run-time reduction on a node the builder used before. Default `0.3`.
    #[serde(default = "speedup")]
    pub warm_speedup: f64,
    /// Services and databases: how many pods. Default 1.
    #[serde(default = "one")]
    pub count: usize,
    /// Requests.
    pub requests: Requests,
    /// Databases: disk each pod needs (headroom.io/disk-request).
    #[serde(default)]
    pub disk: Option<Amount>,
    /// Real use relative to requests.
    #[serde(default)]
    pub usage: UsageSpec,
    /// Per-sample variation of usage (± fraction). Default `0.1`.
    #[serde(default = "noise")]
    pub noise: f64,
    /// Extra pod labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Pod nodeSelector.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Pod tolerations (Kubernetes Toleration objects).
    #[serde(default)]
    pub tolerations: Vec<serde_json::Value>,
    /// Builders: the arrival rate follows a cycle (a working day) instead of staying flat.
    #[serde(default)]
    pub daily_cycle: Option<DailyCycle>,
}

/// A cyclic arrival rate: `arrivalsPerHour × (1 + amplitude × cos(2π (t − peakAt) /
/// period))`, so `arrivalsPerHour` stays the mean over a whole period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DailyCycle {
    /// Relative swing around the mean, in [0, 1]. Default `0.5`.
    #[serde(default = "half")]
    pub amplitude: f64,
    /// Length of one cycle. Default `24h`.
    #[serde(default = "day", with = "humantime_serde")]
    pub period: Duration,
    /// When the rate peaks, from the start. Default `0s`.
    #[serde(default, with = "humantime_serde")]
    pub peak_at: Duration,
}

fn half() -> f64 {
    0.5
}
fn day() -> Duration {
    Duration::from_secs(24 * 3600)
}

/// What happens when real usage exceeds a node's capacity (the kernel and the kubelet;
/// request-based placement pays here). Everything is on by default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct Overcommit {
    /// The kernel's OOM killer: when a node's real memory exceeds its capacity, pods are
    /// killed, highest OOM score first (memory use plus the Burstable score adjustment),
    /// until it fits; a killed build fails and is submitted again from scratch, a service
    /// or database restarts in place. Default `true`.
    pub oom_kill: bool,
    /// The kubelet's eviction: when a node's available memory drops below
    /// `evictionThreshold`, one pod per step is evicted (pods using more than they
    /// requested first, the most above its request first) and submitted again. Default
    /// `true`.
    pub eviction: bool,
    /// The kubelet's `evictionHard` `memory.available`. Default `100Mi`.
    pub eviction_threshold: Amount,
    /// CPU contention: when a node's CPU demand exceeds its capacity, every pod gets its
    /// share and builds take proportionally longer. Default `true`.
    pub cpu_contention: bool,
}

impl Default for Overcommit {
    fn default() -> Self {
        Overcommit {
            oom_kill: true,
            eviction: true,
            eviction_threshold: Amount::Text("100Mi".into()),
            cpu_contention: true,
        }
    }
}

fn default_ns() -> String {
    "default".into()
}
fn ten() -> usize {
    10
}
fn one() -> usize {
    1
}
fn sixty() -> f64 {
    60.0
}
fn fifteen_min() -> Duration {
    Duration::from_secs(900)
}
fn speedup() -> f64 {
    0.3
}
fn noise() -> f64 {
    0.1
}

/// Nodes to add by an event.
pub type AddNodes = NodeSpec;

/// A burst of builder arrivals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Burst {
    /// The builder workload.
    pub workload: String,
    /// How many runs arrive at once.
    pub count: usize,
}

/// Something that happens at a time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Event {
    /// When, from the start.
    #[serde(with = "humantime_serde")]
    pub at: Duration,
    /// Cordon a node.
    #[serde(default)]
    pub cordon: Option<String>,
    /// Uncordon a node.
    #[serde(default)]
    pub uncordon: Option<String>,
    /// Remove a node (its pods are lost and resubmitted, as a controller would).
    #[serde(default)]
    pub remove_node: Option<String>,
    /// Add nodes.
    #[serde(default)]
    pub add_nodes: Option<AddNodes>,
    /// A burst of builder runs.
    #[serde(default)]
    pub burst: Option<Burst>,
}

/// The whole scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Scenario {
    /// Simulated time. Default `1h`.
    #[serde(default = "hour", with = "humantime_serde")]
    pub duration: Duration,
    /// Tick: sample interval and scheduling step. Default `15s`.
    #[serde(default = "fifteen_s", with = "humantime_serde")]
    pub step: Duration,
    /// Default seed. Default 1.
    #[serde(default = "seed")]
    pub seed: u64,
    /// Nodes.
    pub nodes: Vec<NodeSpec>,
    /// Workloads.
    #[serde(default)]
    pub workloads: Vec<Workload>,
    /// Reservations (as in the usage file; `ttl` counts from the start).
    #[serde(default)]
    pub reservations: Vec<ReservationEntry>,
    /// Events.
    #[serde(default)]
    pub events: Vec<Event>,
    /// What real overcommit costs (OOM kills, eviction, CPU contention). Default: all on.
    #[serde(default)]
    pub overcommit: Overcommit,
}

fn hour() -> Duration {
    Duration::from_secs(3600)
}
fn fifteen_s() -> Duration {
    Duration::from_secs(15)
}
fn seed() -> u64 {
    1
}

impl Scenario {
    /// Reads a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, Error> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: origin.clone(),
            source,
        })?;
        Scenario::parse(&text, &origin)
    }

    /// Parses scenario YAML; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Scenario, Error> {
        let invalid = |field: String, message: String| Error::Invalid {
            path: origin.to_string(),
            field,
            message,
        };
        let de = serde_norway::Deserializer::from_str(text);
        let s: Scenario = serde_path_to_error::deserialize(de)
            .map_err(|e| invalid(e.path().to_string(), e.into_inner().to_string()))?;
        if s.step.is_zero() || s.step > s.duration {
            return Err(invalid(
                "step".into(),
                "must be positive and at most the duration".into(),
            ));
        }
        if s.nodes.is_empty() {
            return Err(invalid(
                "nodes".into(),
                "at least one node is required".into(),
            ));
        }
        for (i, w) in s.workloads.iter().enumerate() {
            let f = |k: &str| format!("workloads[{i}].{k}");
            if w.name.is_empty() {
                return Err(invalid(f("name"), "must not be empty".into()));
            }
            for (k, r) in [("usage.cpu", w.usage.cpu), ("usage.memory", w.usage.memory)] {
                if !(r[0] >= 0.0 && r[0] <= r[1] && r[1].is_finite()) {
                    return Err(invalid(
                        f(k),
                        format!("{r:?} is not a range [min, max] with 0 ≤ min ≤ max"),
                    ));
                }
            }
            if !(0.0..1.0).contains(&w.warm_speedup) {
                return Err(invalid(f("warmSpeedup"), "must be in [0, 1)".into()));
            }
            if !(0.0..1.0).contains(&w.noise) {
                return Err(invalid(f("noise"), "must be in [0, 1)".into()));
            }
            if let Some(c) = &w.daily_cycle
                && (!(0.0..=1.0).contains(&c.amplitude) || c.period.is_zero())
            {
                return Err(invalid(
                    f("dailyCycle"),
                    "amplitude must be in [0, 1] and period positive".into(),
                ));
            }
            if w.kind == Kind::Builder && (w.builders == 0 || w.duration.is_zero()) {
                return Err(invalid(
                    f("builders"),
                    "builders and duration must be positive".into(),
                ));
            }
        }
        for (i, e) in s.events.iter().enumerate() {
            let n = [
                e.cordon.is_some(),
                e.uncordon.is_some(),
                e.remove_node.is_some(),
                e.add_nodes.is_some(),
                e.burst.is_some(),
            ]
            .iter()
            .filter(|x| **x)
            .count();
            if n != 1 {
                return Err(invalid(
                    format!("events[{i}]"),
                    "give exactly one of cordon, uncordon, removeNode, addNodes, burst".into(),
                ));
            }
            if let Some(b) = &e.burst
                && !s
                    .workloads
                    .iter()
                    .any(|w| w.name == b.workload && w.kind == Kind::Builder)
            {
                return Err(invalid(
                    format!("events[{i}].burst.workload"),
                    format!("no builder workload named {:?}", b.workload),
                ));
            }
        }
        Ok(s)
    }
}

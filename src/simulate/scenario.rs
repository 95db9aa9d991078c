//! The scenario file of `headroom simulate`: nodes, workloads, reservations and events.
//!
//! ```yaml
//! duration: 6h                 # simulated time
//! step: 15s                    # sample interval and scheduling tick
//! drain: 30m                   # after the duration: no arrivals, the queue may empty
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
//!     statsInterval: 10s       # node usage sampled this often (default: every step)
//! workloads:
//!   - name: builders
//!     kind: builder            # CI builds: arrivals, finite runs
//!     namespace: ci
//!     builders: 30             # distinct builders (bkci.dispatch.kubenetes/core label)
//!     arrivalsPerHour: 90      # Poisson arrivals over all builders
//!     duration: 20m            # mean run time (each builder's own mean is within ±50 %)
//!     warmSpeedup: 0.4         # a run on a node the builder used before is 40 % shorter
//!     memoryRamp: 2m           # memory grows from a tenth of the working set to all of it
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
//!     priority: 100            # spec.priority: may preempt lower-priority pods
//! reservations: []             # as in the usage file (scheduler/src/usage/file.rs)
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
//! 10h}`: its arrival rate then swings around `arrivalsPerHour`. Or, instead, a measured
//! `loadCurve` (what `headroom sweep --write-farms` writes for a family with
//! `builders.loadCurve`): the arrival rate at `t` is `arrivalsPerHour` × the curve at `t`
//! (linear between points), and with `usageFollows` the builds' usage intensity follows it
//! too:
//!
//! ```yaml
//!     loadCurve:
//!       source: alibaba-2018-load.csv from 1d 6h   # where the points came from (a note)
//!       step: 5m                   # time between points
//!       points: [0.81, 0.93, 1.2, 1.35, 1.1]    # must cover the duration
//!       usageFollows: 0.2          # usage factors × (1 + 0.2 × (curve at arrival − 1))
//! ```

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use headroom_scheduler::field::{self, Error as FieldError, ErrorList, Path};
use headroom_scheduler::usage::file::{Amount, MAX_BYTES, MAX_CORES, ReservationEntry, UsageFile};

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
    /// The YAML does not fit the schema, or values are invalid: every error, each line
    /// naming the file and the field.
    #[error("{0}")]
    Fields(ErrorList),
    /// One invalid value found while running (a scenario built in code rather than read).
    #[error("{path}: {field}: {message}")]
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
    /// How often the node's own usage is sampled. A kubelet reads its node's root cgroup
    /// on its housekeeping, about every 10 s, and its pods' containers when asked: in one
    /// `/stats/summary` the pods' figures are fresh and the node's up to that old (the
    /// kit's: containers 0.2–0.5 s, the node 4 s). Each node samples at its own phase.
    /// Default: every step, at the pods' instant.
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub stats_interval: Option<Duration>,
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
            stats_interval: None,
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
    /// How long a pod's memory takes to grow from a tenth of its working set to all of it
    /// (a build's compilers and caches filling up; a service warming). Default `2m`; a
    /// scenario that compresses time (`examples/real-nodes.yaml`) compresses this too.
    #[serde(
        default = "two_min",
        with = "humantime_serde",
        skip_serializing_if = "is_two_min"
    )]
    pub memory_ramp: Duration,
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
    /// Builders: the arrival rate (and, with `usageFollows`, the usage intensity) follows a
    /// measured load curve instead of staying flat; not with `dailyCycle`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_curve: Option<LoadCurve>,
    /// The pods' `spec.schedulerName`: which profile of the configuration decides them.
    /// Default: the first profile's. A name no profile has is an error when the
    /// simulation starts (the pods would never be scheduled).
    #[serde(default)]
    pub scheduler_name: Option<String>,
    /// The pods' `spec.priority` (what a PriorityClass would give them). A pod that fits
    /// no node may preempt pods of lower priority (DefaultPreemption): the victims leave
    /// their node and their controllers make them again. Default: none (0). User
    /// priorities go up to 1,000,000,000, as the API server allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
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

/// A builder arrival rate that varies over time, relative to `arrivalsPerHour`: the sine
/// [`DailyCycle`] or a measured [`LoadCurve`]. The simulator draws arrivals at the peak
/// rate and keeps each with the rate's share of the peak at its time; the family
/// generator sizes rates by the curve's mean and peak over the farm's duration.
pub trait RateCurve {
    /// The factor on `arrivalsPerHour` at `t_ms` milliseconds from the start.
    fn at_ms(&self, t_ms: f64) -> f64;
    /// The highest factor [`RateCurve::at_ms`] gives.
    fn peak(&self) -> f64;
}

impl RateCurve for DailyCycle {
    fn at_ms(&self, t_ms: f64) -> f64 {
        let phase = (t_ms - self.peak_at.as_millis() as f64) / self.period.as_millis() as f64
            * std::f64::consts::TAU;
        1.0 + self.amplitude * phase.cos()
    }
    fn peak(&self) -> f64 {
        1.0 + self.amplitude
    }
}

/// A measured load curve (e.g. a real datacenter's CPU load over time, see
/// `examples/families/alibaba-2018-load.csv`): the arrival rate at `t` is
/// `arrivalsPerHour × curve(t)`, `curve` linear between `points` placed `step` apart
/// from the start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LoadCurve {
    /// Where the points came from (a note for readers, e.g. the trace file and the
    /// window's offset in it; not used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Time between points. Default `5m`.
    #[serde(default = "five_min", with = "humantime_serde")]
    pub step: Duration,
    /// The relative load at `0, step, 2 × step, …`: at least two points, each finite and
    /// in `[0, 1000]`, not all zero, spanning at least the scenario's duration.
    pub points: Vec<f64>,
    /// How much of the curve the builds' usage intensity follows, in `[0, 1]`: a build
    /// arriving at `t` uses its builder's real CPU and memory factors × `max(0, 1 +
    /// usageFollows × (curve(t) − 1))` (a point of 1 is the builder's usual intensity).
    /// Default `0` (only the arrival rate follows the curve).
    #[serde(default)]
    pub usage_follows: f64,
    /// The relative memory in use at the same instants, where the trace has a memory
    /// series (as many points as `points`, each finite and in `[0, 1000]`): a build's
    /// memory factor then follows it instead, `max(0, 1 + usageFollows × (memory(t) −
    /// 1))`, while its CPU factor follows `points`. Default: none (both follow `points`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Vec<f64>>,
}

fn five_min() -> Duration {
    Duration::from_secs(300)
}

/// The most points of a [`LoadCurve`].
pub const MAX_CURVE_POINTS: usize = 100_000;
/// The highest point of a [`LoadCurve`].
pub const MAX_CURVE_LOAD: f64 = 1000.0;

impl LoadCurve {
    /// The time the points span.
    pub fn span(&self) -> Duration {
        self.step
            .saturating_mul(u32::try_from(self.points.len().saturating_sub(1)).unwrap_or(u32::MAX))
    }

    /// The factor a build arriving at `t_ms` scales its CPU usage factor by.
    pub fn usage_at_ms(&self, t_ms: f64) -> f64 {
        (1.0 + self.usage_follows * (self.at_ms(t_ms) - 1.0)).max(0.0)
    }

    /// The factor a build arriving at `t_ms` scales its memory usage factor by: by the
    /// memory series where there is one, else as the CPU factor.
    pub fn memory_usage_at_ms(&self, t_ms: f64) -> f64 {
        let Some(memory) = &self.memory else {
            return self.usage_at_ms(t_ms);
        };
        (1.0 + self.usage_follows * (interpolate(memory, self.step, t_ms) - 1.0)).max(0.0)
    }
}

/// `points` (one every `step`) at `t_ms`, linear between points, the last one after them.
fn interpolate(points: &[f64], step: Duration, t_ms: f64) -> f64 {
    let Some(&last) = points.last() else {
        return 1.0;
    };
    let x = t_ms.max(0.0) / (step.as_millis() as f64).max(1.0);
    let i = x.floor() as usize;
    if i + 1 >= points.len() {
        return last;
    }
    let f = x - i as f64;
    points[i] * (1.0 - f) + points[i + 1] * f
}

impl RateCurve for LoadCurve {
    fn at_ms(&self, t_ms: f64) -> f64 {
        interpolate(&self.points, self.step, t_ms)
    }
    fn peak(&self) -> f64 {
        self.points.iter().copied().fold(0.0, f64::max)
    }
}

impl Workload {
    /// How the arrival rate varies: the load curve, or a daily cycle that swings
    /// (amplitude above 0); `None`: flat.
    pub fn rate_curve(&self) -> Option<&dyn RateCurve> {
        if let Some(c) = &self.load_curve {
            return Some(c);
        }
        self.daily_cycle
            .as_ref()
            .filter(|c| c.amplitude > 0.0)
            .map(|c| c as &dyn RateCurve)
    }
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
/// A workload's `memoryRamp` when the scenario gives none.
pub const DEFAULT_MEMORY_RAMP: Duration = Duration::from_secs(120);

fn two_min() -> Duration {
    DEFAULT_MEMORY_RAMP
}
fn is_two_min(d: &Duration) -> bool {
    *d == DEFAULT_MEMORY_RAMP
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
    /// Cordon a node: one of `nodes` or of an `addNodes` event before this one in the list,
    /// not removed by a `removeNode` since (so for `uncordon` and `removeNode`); events are
    /// taken in list order.
    #[serde(default)]
    pub cordon: Option<String>,
    /// Uncordon a node.
    #[serde(default)]
    pub uncordon: Option<String>,
    /// Remove a node (its pods are lost and resubmitted, as a controller would).
    #[serde(default)]
    pub remove_node: Option<String>,
    /// Add nodes, named from 1 under their `namePrefix`: names the farm has at that point
    /// are refused (give the event its own prefix).
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
    /// After `duration`: how long the scheduler may go on placing the pods still pending,
    /// with nothing arriving, before the run stops (sooner once none is left). It decides
    /// `pendingAfterDrain` only; every other measurement stops at `duration`. A pod that
    /// arrived a step before the end is not one a policy failed to place: the drain tells
    /// those from the pods it could not place. `0s`: none. Default `30m`.
    #[serde(default = "thirty_min", with = "humantime_serde")]
    pub drain: Duration,
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
fn thirty_min() -> Duration {
    Duration::from_secs(1800)
}
fn seed() -> u64 {
    1
}

/// The longest `statsInterval` of a node.
pub const MAX_STATS_INTERVAL: Duration = Duration::from_secs(3600);
/// The shortest step: one simulated second.
pub const MIN_STEP: Duration = Duration::from_secs(1);
/// The most steps (`duration / step`) a scenario may take.
pub const MAX_TICKS: u128 = 10_000_000;
/// The highest priority a user's PriorityClass may have (upstream's
/// `HighestUserDefinablePriority`).
const MAX_USER_PRIORITY: i32 = 1_000_000_000;
/// The longest simulated time (and the longest mean run time of a builder): 10 years.
pub const MAX_DURATION: Duration = Duration::from_secs(3660 * 24 * 3600);
/// The most nodes, over every generator and `addNodes` event.
pub const MAX_NODES: u128 = 100_000;
/// The most pods, over every workload: service and database counts, the expected builder
/// arrivals (`arrivalsPerHour` × hours) and every burst.
pub const MAX_PODS: u128 = 1_000_000;
/// The most distinct builders of one workload.
pub const MAX_BUILDERS: usize = 100_000;
/// The highest arrival rate of one workload.
pub const MAX_ARRIVALS_PER_HOUR: f64 = 1_000_000.0;
/// The highest real-usage factor (real / requested).
pub const MAX_USAGE_FACTOR: f64 = 100.0;
/// The longest workload name: its pods' builder label `<name>-b<k>` must stay a valid
/// label value (63 characters).
pub const MAX_WORKLOAD_NAME: usize = 50;

/// Checks a node generator (also `addNodes`): count, names, amounts, labels, taints, or
/// an explicit Node object. Returns the node names it makes (from `start + 1` for
/// generators), for the duplicate check.
fn check_nodes(spec: &NodeSpec, at: &Path, start: usize, errors: &mut ErrorList) -> Vec<String> {
    for (k, a, max) in [
        ("systemCpu", &spec.system_cpu, MAX_CORES),
        ("systemMemory", &spec.system_memory, MAX_BYTES),
    ] {
        if let Err(e) = a.value_at(&at.child(k), max) {
            errors.push(e);
        }
    }
    if let Some(d) = spec.stats_interval
        && (d < MIN_STEP || d > MAX_STATS_INTERVAL || !d.subsec_nanos().is_multiple_of(1_000_000))
    {
        errors.push(FieldError::out_of_range(
            at.child("statsInterval"),
            humantime_serde::re::humantime::format_duration(d).to_string(),
            "at least 1s and at most 1h, in whole milliseconds",
        ));
    }
    if let Some(obj) = &spec.node {
        let node: k8s_openapi::api::core::v1::Node = match serde_path_to_error::deserialize(obj) {
            Ok(n) => n,
            Err(e) => {
                let fe = FieldError::from_serde(e.path(), &e.inner().to_string());
                errors.push(fe.under(&at.child("node")));
                return Vec::new();
            }
        };
        let before = errors.len();
        errors.extend(
            headroom_scheduler::objects::check_node(&node)
                .into_iter()
                .map(|e| e.under(&at.child("node"))),
        );
        if errors.len() > before {
            return Vec::new();
        }
        let info = headroom_scheduler::snapshot::NodeInfo::new(std::sync::Arc::new(node));
        if let Some(e) = &info.error {
            errors.push(FieldError::invalid(at.child("node"), "", e.clone()));
        }
        return vec![info.name.to_string()];
    }
    if spec.count as u128 > MAX_NODES {
        errors.push(FieldError::out_of_range(
            at.child("count"),
            spec.count,
            format!("at most {MAX_NODES}"),
        ));
        return Vec::new();
    }
    for (k, a, max) in [
        ("cpu", &spec.cpu, MAX_CORES),
        ("memory", &spec.memory, MAX_BYTES),
        ("disk", &spec.disk, MAX_BYTES),
    ] {
        if let Err(e) = a.value_at(&at.child(k), max) {
            errors.push(e);
        }
    }
    check_labels(&spec.labels, &at.child("labels"), errors);
    for (j, t) in spec.taints.iter().enumerate() {
        let tp = at.child("taints").index(j);
        match serde_path_to_error::deserialize::<_, k8s_openapi::api::core::v1::Taint>(t) {
            Ok(t) => {
                errors.extend(field::label_key(&tp.child("key"), &t.key));
                errors.extend(field::label_value(
                    &tp.child("value"),
                    t.value.as_deref().unwrap_or(""),
                ));
                if !TAINT_EFFECTS.contains(&t.effect.as_str()) {
                    errors.push(FieldError::not_supported(
                        tp.child("effect"),
                        &t.effect,
                        &TAINT_EFFECTS,
                    ));
                }
            }
            Err(e) => {
                let fe = FieldError::from_serde(e.path(), &e.inner().to_string());
                errors.push(fe.under(&tp));
            }
        }
    }
    if spec.count == 0 {
        return Vec::new();
    }
    // Generated names are also the `kubernetes.io/hostname` label: a DNS-1123 subdomain
    // of at most 63 characters. The longest is the last.
    let last = format!("{}{}", spec.name_prefix, start + spec.count);
    let name_path = at.child("namePrefix");
    if field::dns1123_subdomain(&name_path, &last).is_some() || last.len() > 63 {
        errors.push(FieldError::invalid(
            name_path,
            field::quoted(&spec.name_prefix),
            format!(
                "must make node names (\"{}\" is the last) that are DNS-1123 subdomains of at most 63 characters, as they are also the kubernetes.io/hostname label",
                field::shown(&last)
            ),
        ));
        return Vec::new();
    }
    (0..spec.count)
        .map(|i| format!("{}{}", spec.name_prefix, start + i + 1))
        .collect()
}

/// The taint effects Kubernetes knows.
const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

fn check_labels(labels: &BTreeMap<String, String>, at: &Path, errors: &mut ErrorList) {
    for (k, v) in labels {
        let p = at.key(k.clone());
        errors.extend(field::label_key(&p, k));
        errors.extend(field::label_value(&p, v));
    }
}

fn check_range(
    v: f64,
    path: Path,
    min: f64,
    max: f64,
    max_open: bool,
    errors: &mut ErrorList,
) -> bool {
    let ok = v.is_finite() && v >= min && if max_open { v < max } else { v <= max };
    if !ok {
        let range = if max_open {
            format!("in [{min}, {max})")
        } else {
            format!("in [{min}, {max}]")
        };
        errors.push(FieldError::out_of_range(path, format!("{v:?}"), range));
    }
    ok
}

/// A workload's name: a DNS-1123 label of at most [`MAX_WORKLOAD_NAME`] characters (its
/// pods' names add a builder and a sequence number). Also what a farm family checks of
/// its builder kinds' names, which become workload names.
pub fn check_workload_name(path: &Path, name: &str) -> Option<FieldError> {
    match field::dns1123_label(path, name) {
        Some(e) => Some(e),
        None if name.len() > MAX_WORKLOAD_NAME => Some(FieldError::too_long(
            path.clone(),
            MAX_WORKLOAD_NAME,
            name.len(),
        )),
        None => None,
    }
}

fn check_workload(w: &Workload, at: &Path, errors: &mut ErrorList) {
    errors.extend(check_workload_name(&at.child("name"), &w.name));
    errors.extend(field::dns1123_label(&at.child("namespace"), &w.namespace));
    if w.kind == Kind::Builder {
        if w.builders == 0 || w.builders > MAX_BUILDERS {
            errors.push(FieldError::out_of_range(
                at.child("builders"),
                w.builders,
                format!("between 1 and {MAX_BUILDERS}"),
            ));
        }
        if w.duration.is_zero() || w.duration > MAX_DURATION {
            errors.push(FieldError::out_of_range(
                at.child("duration"),
                humantime_serde::re::humantime::format_duration(w.duration),
                "positive and at most 3660 days",
            ));
        }
    }
    if w.memory_ramp > MAX_DURATION {
        errors.push(FieldError::out_of_range(
            at.child("memoryRamp"),
            humantime_serde::re::humantime::format_duration(w.memory_ramp),
            "at most 3660 days",
        ));
    }
    let rate = w.arrivals_per_hour;
    if !(rate.is_finite() && (0.0..=MAX_ARRIVALS_PER_HOUR).contains(&rate)) {
        errors.push(FieldError::out_of_range(
            at.child("arrivalsPerHour"),
            format!("{rate:?}"),
            format!("finite and at most {MAX_ARRIVALS_PER_HOUR}"),
        ));
    }
    check_range(
        w.warm_speedup,
        at.child("warmSpeedup"),
        0.0,
        1.0,
        true,
        errors,
    );
    check_range(w.noise, at.child("noise"), 0.0, 1.0, false, errors);
    if let Some(pri) = w.priority
        && pri > MAX_USER_PRIORITY
    {
        errors.push(FieldError::out_of_range(
            at.child("priority"),
            pri.to_string(),
            format!("at most {MAX_USER_PRIORITY} (higher values are for system classes)"),
        ));
    }
    if let Some(c) = &w.daily_cycle {
        let p = at.child("dailyCycle");
        check_range(c.amplitude, p.child("amplitude"), 0.0, 1.0, false, errors);
        if c.period.is_zero() || c.period > MAX_DURATION {
            errors.push(FieldError::out_of_range(
                p.child("period"),
                humantime_serde::re::humantime::format_duration(c.period),
                "positive and at most 3660 days",
            ));
        }
        if c.peak_at > MAX_DURATION {
            errors.push(FieldError::out_of_range(
                p.child("peakAt"),
                humantime_serde::re::humantime::format_duration(c.peak_at),
                "at most 3660 days",
            ));
        }
    }
    if let Some(c) = &w.load_curve {
        let p = at.child("loadCurve");
        if w.daily_cycle.is_some() {
            errors.push(FieldError::invalid(
                p.clone(),
                "",
                "set either dailyCycle or loadCurve, not both",
            ));
        }
        check_load_curve(c, &p, errors);
    }
    for (k, a, max) in [
        ("cpu", &w.requests.cpu, MAX_CORES),
        ("memory", &w.requests.memory, MAX_BYTES),
    ] {
        if let Err(e) = a.value_at(&at.child("requests").child(k), max) {
            errors.push(e);
        }
    }
    if let Some(d) = &w.disk
        && let Err(e) = d.value_at(&at.child("disk"), MAX_BYTES)
    {
        errors.push(e);
    }
    for (k, r) in [("cpu", w.usage.cpu), ("memory", w.usage.memory)] {
        let p = at.child("usage").child(k);
        let ok = check_range(r[0], p.index(0), 0.0, MAX_USAGE_FACTOR, false, errors)
            & check_range(r[1], p.index(1), 0.0, MAX_USAGE_FACTOR, false, errors);
        if ok && r[0] > r[1] {
            errors.push(FieldError::invalid(
                p,
                format!("{r:?}"),
                "must be a range [min, max] with min ≤ max",
            ));
        }
    }
    check_labels(&w.labels, &at.child("labels"), errors);
    check_labels(&w.node_selector, &at.child("nodeSelector"), errors);
    const OPERATORS: [&str; 2] = ["Exists", "Equal"];
    for (j, t) in w.tolerations.iter().enumerate() {
        let tp = at.child("tolerations").index(j);
        match serde_path_to_error::deserialize::<_, k8s_openapi::api::core::v1::Toleration>(t) {
            Ok(t) => {
                if let Some(op) = t.operator.as_deref().filter(|o| !o.is_empty())
                    && !OPERATORS.contains(&op)
                {
                    errors.push(FieldError::not_supported(
                        tp.child("operator"),
                        op,
                        &OPERATORS,
                    ));
                }
                if let Some(e) = t.effect.as_deref().filter(|e| !e.is_empty())
                    && !TAINT_EFFECTS.contains(&e)
                {
                    errors.push(FieldError::not_supported(
                        tp.child("effect"),
                        e,
                        &TAINT_EFFECTS,
                    ));
                }
                if let Some(k) = t.key.as_deref().filter(|k| !k.is_empty()) {
                    errors.extend(field::label_key(&tp.child("key"), k));
                }
            }
            Err(e) => {
                let fe = FieldError::from_serde(e.path(), &e.inner().to_string());
                errors.push(fe.under(&tp));
            }
        }
    }
}

/// A load curve's own values (its span against the duration is checked with the
/// scenario's workloads).
fn check_load_curve(c: &LoadCurve, at: &Path, errors: &mut ErrorList) {
    let shown = |d: Duration| humantime_serde::re::humantime::format_duration(d).to_string();
    if c.step < MIN_STEP
        || c.step > MAX_DURATION
        || !c.step.subsec_nanos().is_multiple_of(1_000_000)
    {
        errors.push(FieldError::out_of_range(
            at.child("step"),
            shown(c.step),
            "at least 1s and at most 3660 days, in whole milliseconds",
        ));
    }
    let points = at.child("points");
    if c.points.len() < 2 || c.points.len() > MAX_CURVE_POINTS {
        errors.push(FieldError::out_of_range(
            points.clone(),
            format!("{} points", c.points.len()),
            format!("between 2 and {MAX_CURVE_POINTS} points"),
        ));
    }
    let mut ok = true;
    for (i, &v) in c.points.iter().enumerate() {
        ok &= check_range(v, points.index(i), 0.0, MAX_CURVE_LOAD, false, errors);
        if !ok {
            break;
        }
    }
    if let Some(memory) = &c.memory {
        let at = at.child("memory");
        if memory.len() != c.points.len() {
            errors.push(FieldError::invalid(
                at.clone(),
                format!("{} points", memory.len()),
                format!("must have as many points as `points` ({})", c.points.len()),
            ));
        }
        for (i, &v) in memory.iter().enumerate() {
            if !check_range(v, at.index(i), 0.0, MAX_CURVE_LOAD, false, errors) {
                break;
            }
        }
    }
    if ok && !c.points.is_empty() && c.points.iter().all(|&v| v == 0.0) {
        errors.push(FieldError::invalid(
            points,
            "",
            "must not all be zero (no arrivals would ever come)",
        ));
    }
    check_range(
        c.usage_follows,
        at.child("usageFollows"),
        0.0,
        1.0,
        false,
        errors,
    );
}

impl Scenario {
    /// Reads a scenario file.
    pub fn load(path: &std::path::Path) -> Result<Scenario, Error> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: origin.clone(),
            source,
        })?;
        Scenario::parse(&text, &origin)
    }

    /// Parses scenario YAML and checks every value (see [`Scenario::validate`]); `origin`
    /// names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Scenario, Error> {
        let de = serde_norway::Deserializer::from_str(text);
        let s: Scenario = serde_path_to_error::deserialize(de).map_err(|e| {
            let fe = FieldError::from_serde(e.path(), &e.inner().to_string());
            Error::Fields(ErrorList::from(fe).with_origin(origin))
        })?;
        let errors = s.validate();
        if !errors.is_empty() {
            return Err(Error::Fields(errors.with_origin(origin)));
        }
        Ok(s)
    }

    /// Every problem of the scenario, so that a simulation of it cannot fail on its values:
    /// step at least [`MIN_STEP`] in whole milliseconds and at most the duration, at most
    /// [`MAX_TICKS`] steps, [`MAX_NODES`] nodes and [`MAX_PODS`] pods, rates, factors and
    /// amounts finite and within their limits, node names, labels, taints and tolerations
    /// as Kubernetes accepts them, events within the duration, reservations as in the
    /// usage file.
    pub fn validate(&self) -> ErrorList {
        let mut errors = ErrorList::new();
        self.validate_timing(&mut errors);
        // The nodes the farm has, by name, with where each was made: `nodes` first, then
        // as the run takes the events, in list order (a node exists from the event that
        // adds it until one that removes it).
        let mut present = BTreeMap::new();
        let mut tally = Tally {
            nodes: self.validate_nodes(&mut errors, &mut present),
            pods: 0.0,
            counts_ok: true,
        };
        self.validate_workloads(&mut errors, &mut tally);
        for (i, e) in self.events.iter().enumerate() {
            let at = Path::new("events").index(i);
            check_event_nodes(&at, e, &present, &mut errors);
            if let Some(name) = &e.remove_node {
                present.remove(name);
            }
            let added = self.validate_event(at.clone(), e, &mut errors, &mut tally);
            add_names(&at.child("addNodes"), added, &mut present, &mut errors);
        }
        if tally.nodes > MAX_NODES {
            errors.push(FieldError::out_of_range(
                Path::new("nodes"),
                format!("{} nodes", tally.nodes),
                format!("at most {MAX_NODES} nodes in total, with the addNodes events"),
            ));
        }
        let rates_ok = self.workloads.iter().all(|w| {
            w.arrivals_per_hour.is_finite() && w.arrivals_per_hour <= MAX_ARRIVALS_PER_HOUR
        });
        // The total is reported only when no single count is already out of range.
        if tally.counts_ok && rates_ok && tally.pods > MAX_PODS as f64 {
            errors.push(FieldError::out_of_range(
                Path::new("workloads"),
                format!("about {} pods", tally.pods),
                format!(
                    "at most {MAX_PODS} pods in total (service and database counts, expected builder arrivals, bursts)"
                ),
            ));
        }
        if let Err(e) = self.overcommit.eviction_threshold.value_at(
            &Path::new("overcommit").child("evictionThreshold"),
            MAX_BYTES,
        ) {
            errors.push(e);
        }
        let reservations = UsageFile {
            reservations: self.reservations.clone(),
            ..UsageFile::default()
        };
        if let Err(list) = reservations.resolve_all(super::EPOCH_MS) {
            errors.extend(list.errors().iter().cloned());
        }
        errors
    }

    /// `duration`, `drain` and `step`.
    fn validate_timing(&self, errors: &mut ErrorList) {
        let s = self;
        for (field, d) in [("duration", s.duration), ("drain", s.drain)] {
            if d > MAX_DURATION {
                errors.push(FieldError::out_of_range(
                    Path::new(field),
                    humantime_serde::re::humantime::format_duration(d),
                    "at most 3660 days",
                ));
            }
        }
        let step = Path::new("step");
        let shown = |d: Duration| humantime_serde::re::humantime::format_duration(d).to_string();
        if s.step < MIN_STEP || !s.step.subsec_nanos().is_multiple_of(1_000_000) {
            errors.push(FieldError::out_of_range(
                step,
                shown(s.step),
                "at least 1s, in whole milliseconds",
            ));
        } else if s.step > s.duration {
            errors.push(FieldError::out_of_range(
                step,
                shown(s.step),
                format!("at most the duration ({})", shown(s.duration)),
            ));
        } else if s.duration.as_millis() / s.step.as_millis() > MAX_TICKS {
            errors.push(FieldError::out_of_range(
                step,
                shown(s.step),
                format!(
                    "at least duration / {MAX_TICKS} ({} steps of {} in {})",
                    s.duration.as_millis() / s.step.as_millis(),
                    shown(s.step),
                    shown(s.duration)
                ),
            ));
        } else if s.drain.as_millis() / s.step.as_millis() > MAX_TICKS {
            errors.push(FieldError::out_of_range(
                Path::new("drain"),
                shown(s.drain),
                format!("at most {MAX_TICKS} steps of {}", shown(s.step)),
            ));
        }
    }

    /// `nodes`: each spec and the names it makes (into `present`, with the spec that made
    /// them; a name made twice is an error); returns how many nodes they make.
    fn validate_nodes(&self, errors: &mut ErrorList, present: &mut BTreeMap<String, Path>) -> u128 {
        let s = self;
        if s.nodes.is_empty() {
            errors.push(FieldError::required(
                Path::new("nodes"),
                "at least one node is required",
            ));
        }
        let mut total_nodes: u128 = 0;
        for (i, spec) in s.nodes.iter().enumerate() {
            let at = Path::new("nodes").index(i);
            let made = check_nodes(
                spec,
                &at,
                total_nodes.min(usize::MAX as u128) as usize,
                errors,
            );
            total_nodes = total_nodes.saturating_add(if spec.node.is_some() {
                1
            } else {
                spec.count as u128
            });
            add_names(&at, made, present, errors);
        }
        total_nodes
    }

    /// `workloads`: each workload, and the pods they make into `tally`.
    fn validate_workloads(&self, errors: &mut ErrorList, tally: &mut Tally) {
        let s = self;
        let mut workloads: BTreeMap<&str, usize> = BTreeMap::new();
        let hours = s.duration.as_secs_f64() / 3600.0;
        let shown = |d: Duration| humantime_serde::re::humantime::format_duration(d).to_string();
        for (i, w) in s.workloads.iter().enumerate() {
            let at = Path::new("workloads").index(i);
            check_workload(w, &at, errors);
            if let Some(first) = workloads.insert(&w.name, i) {
                errors.push(FieldError::duplicate(
                    at.child("name"),
                    format!("workloads[{first}]"),
                ));
            }
            let mut mean_load = 1.0;
            if let Some(c) = &w.load_curve {
                if c.points.len() >= 2 && c.span() < s.duration {
                    errors.push(FieldError::out_of_range(
                        at.child("loadCurve").child("points"),
                        format!(
                            "{} points {} apart, spanning {}",
                            c.points.len(),
                            shown(c.step),
                            shown(c.span())
                        ),
                        format!("at least as long as the duration ({})", shown(s.duration)),
                    ));
                }
                mean_load = c.points.iter().sum::<f64>() / c.points.len().max(1) as f64;
            }
            tally.pods += match w.kind {
                Kind::Builder => (w.arrivals_per_hour * hours * mean_load).ceil().max(0.0),
                Kind::Database | Kind::Service => {
                    if w.count as u128 > MAX_PODS {
                        errors.push(FieldError::out_of_range(
                            at.child("count"),
                            w.count,
                            format!("at most {MAX_PODS}"),
                        ));
                        tally.counts_ok = false;
                    }
                    w.count as f64
                }
            };
        }
    }

    /// One event: exactly one action, names as Kubernetes accepts them, within the
    /// duration; its nodes and pods into `tally`. Returns the names of the nodes an
    /// `addNodes` event makes.
    fn validate_event(
        &self,
        at: Path,
        e: &Event,
        errors: &mut ErrorList,
        tally: &mut Tally,
    ) -> Vec<String> {
        let shown = |d: Duration| humantime_serde::re::humantime::format_duration(d).to_string();
        let s = self;
        if e.at > s.duration {
            errors.push(FieldError::out_of_range(
                at.child("at"),
                shown(e.at),
                format!("at most the duration ({})", shown(s.duration)),
            ));
        }
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
            errors.push(FieldError::required(
                at,
                "give exactly one of cordon, uncordon, removeNode, addNodes, burst",
            ));
            return Vec::new();
        }
        for (k, v) in [
            ("cordon", &e.cordon),
            ("uncordon", &e.uncordon),
            ("removeNode", &e.remove_node),
        ] {
            if let Some(v) = v {
                errors.extend(field::dns1123_subdomain(&at.child(k), v));
            }
        }
        let mut added = Vec::new();
        if let Some(spec) = &e.add_nodes {
            // Named from 1, as the run names them.
            added = check_nodes(spec, &at.child("addNodes"), 0, errors);
            tally.nodes = tally.nodes.saturating_add(spec.count as u128);
        }
        if let Some(b) = &e.burst {
            if !s
                .workloads
                .iter()
                .any(|w| w.name == b.workload && w.kind == Kind::Builder)
            {
                errors.push(FieldError::invalid(
                    at.child("burst").child("workload"),
                    field::quoted(&b.workload),
                    "no builder workload has this name",
                ));
            }
            if b.count as u128 > MAX_PODS {
                errors.push(FieldError::out_of_range(
                    at.child("burst").child("count"),
                    b.count,
                    format!("at most {MAX_PODS}"),
                ));
                tally.counts_ok = false;
            }
            tally.pods += b.count as f64;
        }
        added
    }
}

/// A node an event names (cordon, uncordon, removeNode) is one the farm has by then:
/// `present` holds those of `nodes` and of the `addNodes` events before it in the list (the
/// order the run takes them in), less those a `removeNode` before it took away. A misspelt
/// name would otherwise change nothing, silently.
fn check_event_nodes(
    at: &Path,
    e: &Event,
    present: &BTreeMap<String, Path>,
    errors: &mut ErrorList,
) {
    for (k, v) in [
        ("cordon", &e.cordon),
        ("uncordon", &e.uncordon),
        ("removeNode", &e.remove_node),
    ] {
        if let Some(v) = v.as_ref().filter(|v| !present.contains_key(*v)) {
            errors.push(FieldError::invalid(
                at.child(k),
                field::quoted(v),
                "no node of the farm has this name by then (nodes, or an addNodes event before it, and no removeNode since)",
            ));
        }
    }
}

/// The names a node spec at `at` makes join `present`; one the farm already has is an
/// error naming where it was made (reported once per spec: one that repeats a name usually
/// repeats them all). The run would keep the first node and drop the new one, silently —
/// an `addNodes` named as `nodes` are (both number from 1 under the default prefix) would
/// add nothing.
fn add_names(
    at: &Path,
    made: Vec<String>,
    present: &mut BTreeMap<String, Path>,
    errors: &mut ErrorList,
) {
    let mut reported = false;
    for n in made {
        match present.entry(n) {
            Entry::Occupied(first) if !reported => {
                reported = true;
                errors.push(FieldError::duplicate(
                    at.clone(),
                    format!("{} (node {:?})", first.get(), first.key()),
                ));
            }
            Entry::Occupied(_) => {}
            Entry::Vacant(v) => {
                v.insert(at.clone());
            }
        }
    }
}

/// What the nodes, workloads and events add up to, checked against the totals' limits.
struct Tally {
    nodes: u128,
    pods: f64,
    counts_ok: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "duration: 10m\nnodes: [{count: 2}]\n";

    fn errors(text: &str) -> String {
        match Scenario::parse(text, "x.yaml") {
            Err(Error::Fields(list)) => list.to_string(),
            Err(e) => panic!("{text}: not a field error: {e}"),
            Ok(_) => panic!("{text}: accepted"),
        }
    }

    fn workload(extra: &str) -> String {
        format!("{BASE}workloads: [{{name: b, requests: {{cpu: '1', memory: 1Gi}}{extra}}}]\n")
    }

    #[test]
    fn examples_are_valid() {
        for f in [
            "ci-farm.yaml",
            "ci-farm-small.yaml",
            "databases.yaml",
            "reservations.yaml",
        ] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("examples")
                .join(f);
            Scenario::load(&path).unwrap_or_else(|e| panic!("{f}: {e}"));
        }
    }

    #[test]
    fn events_name_nodes_the_farm_has() {
        // From `nodes` (node-1, node-2) and from an addNodes event before it (numbered from
        // 1 too, as the run names them); a node removed may be added again.
        let ok = format!(
            "{BASE}events: [{{at: 2m, addNodes: {{count: 1, namePrefix: extra-}}}}, {{at: 2m, removeNode: extra-1}}, {{at: 3m, cordon: node-2}}, {{at: 4m, uncordon: node-2}}, {{at: 5m, addNodes: {{count: 2, namePrefix: extra-}}}}]\n"
        );
        Scenario::parse(&ok, "x.yaml").unwrap();
        // A misspelt name, a node before it is added or after it is removed changed
        // nothing, silently, before; so did an addNodes named as the farm's nodes are (the
        // run kept the old node and added nothing).
        let e = errors(&format!(
            "{BASE}events: [{{at: 1m, cordon: node-0}}, {{at: 2m, uncordon: node-1}}, {{at: 3m, removeNode: extra-1}}, {{at: 4m, addNodes: {{count: 1, namePrefix: extra-}}}}, {{at: 5m, removeNode: node-1}}, {{at: 6m, cordon: node-1}}, {{at: 7m, addNodes: {{count: 3}}}}]\n"
        ));
        assert!(
            e.contains(
                "x.yaml: events[0].cordon: no node of the farm has this name by then (nodes, or an addNodes event before it, and no removeNode since), got \"node-0\""
            ),
            "{e}"
        );
        assert!(
            e.contains("events[2].removeNode: no node of the farm"),
            "{e}"
        );
        assert!(e.contains("events[5].cordon: no node of the farm"), "{e}");
        // node-1 was removed, so the first name it repeats is node-2, reported once.
        assert!(
            e.contains("x.yaml: events[6].addNodes: duplicate of nodes[0] (node \"node-2\")"),
            "{e}"
        );
        assert_eq!(e.matches("duplicate").count(), 1, "{e}");
        for ok in ["events[1]", "events[3]", "events[4]"] {
            assert!(!e.contains(ok), "{ok}: {e}");
        }
    }

    #[test]
    fn unchecked_values_are_rejected_at_load() {
        // Regression (issue #15, 2): each of these panicked, aborted or ran out of memory
        // in `headroom simulate`, or surfaced as a store error.
        let cases: Vec<(String, &str)> = vec![
            (
                format!("{BASE}step: 500us\n"),
                "x.yaml: step: must be at least 1s, in whole milliseconds, got 500us",
            ),
            (
                format!("{BASE}step: 1s 500us\n"),
                "x.yaml: step: must be at least 1s, in whole milliseconds",
            ),
            (
                "duration: 1000d\nstep: 1s\nnodes: [{count: 1}]\n".to_string(),
                "x.yaml: step: must be at least duration / 10000000",
            ),
            (
                workload(", tolerations: [{operator: 7}]"),
                "x.yaml: workloads[0].tolerations[0].operator: ",
            ),
            (
                workload(", tolerations: [{operator: Sometimes}]"),
                "x.yaml: workloads[0].tolerations[0].operator: unsupported value \"Sometimes\"; expected one of Exists, Equal",
            ),
            (
                format!(
                    "{}events: [{{at: 1m, burst: {{workload: b, count: 18446744073709551615}}}}]\n",
                    workload("")
                ),
                "x.yaml: events[0].burst.count: must be at most 1000000, got 18446744073709551615",
            ),
            (
                workload(", arrivalsPerHour: .inf"),
                "x.yaml: workloads[0].arrivalsPerHour: must be finite and at most 1000000, got inf",
            ),
            (
                workload(", arrivalsPerHour: 1e300"),
                "x.yaml: workloads[0].arrivalsPerHour: must be finite and at most 1000000, got 1e300",
            ),
            (
                "nodes: [{count: 18446744073709551615}]\n".to_string(),
                "x.yaml: nodes[0].count: must be at most 100000, got 18446744073709551615",
            ),
            (
                format!("{BASE}workloads: [{{name: web, kind: service, count: 10000000000, requests: {{cpu: '1', memory: 1Gi}}}}]\n"),
                "x.yaml: workloads[0].count: must be at most 1000000, got 10000000000",
            ),
            (
                "duration: 10h\nnodes: [{count: 1}]\nworkloads: [{name: b, requests: {cpu: '1', memory: 1Gi}, arrivalsPerHour: 200000}]\n".to_string(),
                "x.yaml: workloads: must be at most 1000000 pods in total (service and database counts, expected builder arrivals, bursts), got about 2000000 pods",
            ),
            (
                format!("nodes: [{{count: 1, namePrefix: {}}}]\n", "a".repeat(70_000)),
                "x.yaml: nodes[0].namePrefix: must make node names (\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa… (70001 bytes)\" is the last) that are DNS-1123 subdomains of at most 63 characters",
            ),
            (
                "nodes: [{count: 1, statsInterval: 500ms}]\n".to_string(),
                "x.yaml: nodes[0].statsInterval: must be at least 1s and at most 1h, in whole milliseconds, got 500ms",
            ),
            (
                "nodes: [{count: 1, statsInterval: 2h}]\n".to_string(),
                "x.yaml: nodes[0].statsInterval: must be at least 1s and at most 1h, in whole milliseconds, got 2h",
            ),
            (
                "nodes: [{count: 1, labels: {zone: 'a b'}}]\n".to_string(),
                "x.yaml: nodes[0].labels.zone: must be a valid label value",
            ),
            (
                "nodes: [{count: 1, taints: [{key: k, effect: Sometimes}]}]\n".to_string(),
                "x.yaml: nodes[0].taints[0].effect: unsupported value \"Sometimes\"",
            ),
            (
                "nodes: [{count: 1, taints: [{effect: NoSchedule}]}]\n".to_string(),
                "x.yaml: nodes[0].taints[0].key: must not be empty",
            ),
            (
                workload(", usage: {memory: [0.5, 1e300]}"),
                "x.yaml: workloads[0].usage.memory[1]: must be in [0, 100], got 1e300",
            ),
            (
                workload(", usage: {cpu: [.nan, 1]}"),
                "x.yaml: workloads[0].usage.cpu[0]: must be in [0, 100], got NaN",
            ),
            (
                workload(", noise: 1.5"),
                "x.yaml: workloads[0].noise: must be in [0, 1], got 1.5",
            ),
            (
                workload(", warmSpeedup: 1"),
                "x.yaml: workloads[0].warmSpeedup: must be in [0, 1), got 1",
            ),
            (
                format!("{BASE}workloads: [{{name: b, requests: {{cpu: 1e300, memory: 1Gi}}}}]\n"),
                "x.yaml: workloads[0].requests.cpu: must be a non-negative amount of at most 1000000",
            ),
            (
                workload(", nodeSelector: {'a b': x}"),
                "x.yaml: workloads[0].nodeSelector[a b]: must be a qualified name",
            ),
            (
                format!("{BASE}events: [{{at: 1000000000d, cordon: node-1}}]\n"),
                "x.yaml: events[0].at: must be at most the duration (10m)",
            ),
            (
                "nodes: [{count: 2}, {node: {metadata: {name: node-2}}}]\n".to_string(),
                "x.yaml: nodes[1]: duplicate of nodes[0] (node \"node-2\")",
            ),
            (
                "nodes: [{node: {metadata: {name: ''}}}]\n".to_string(),
                "x.yaml: nodes[0].node.metadata.name: must not be empty",
            ),
            (
                "nodes: [{count: 1}]\nreservations: [{name: r, pod: p, node: n, ttl: 100000000h}]\n".to_string(),
                "x.yaml: reservations[0].ttl: must be at most 3660 days",
            ),
            (
                "nodes: [{count: 1, cpu: [1]}]\n".to_string(),
                "x.yaml: nodes[0].cpu: invalid type: sequence, expected a quantity",
            ),
        ];
        assert_rejected(&cases);
    }

    #[test]
    fn load_curve_values_are_rejected_at_load() {
        let cases: Vec<(String, &str)> = vec![
            (
                workload(", loadCurve: {points: []}"),
                "x.yaml: workloads[0].loadCurve.points: must be between 2 and 100000 points, got 0 points",
            ),
            (
                workload(", loadCurve: {points: [1, -0.5, 1]}"),
                "x.yaml: workloads[0].loadCurve.points[1]: must be in [0, 1000], got -0.5",
            ),
            (
                workload(", loadCurve: {points: [1, lots, 1]}"),
                "x.yaml: workloads[0].loadCurve.points[1]: invalid type: string \"lots\", expected f64",
            ),
            (
                workload(", loadCurve: {points: [1, 1], bogus: 1}"),
                "x.yaml: workloads[0].loadCurve.bogus: unknown field",
            ),
            (
                workload(", loadCurve: {points: [0, 0, 0]}"),
                "x.yaml: workloads[0].loadCurve.points: must not all be zero",
            ),
            (
                workload(", loadCurve: {step: 1m, points: [1, 2, 1]}"),
                "x.yaml: workloads[0].loadCurve.points: must be at least as long as the duration (10m), got 3 points 1m apart, spanning 2m",
            ),
            (
                workload(", loadCurve: {points: [1, 2, 1], usageFollows: 1.5}"),
                "x.yaml: workloads[0].loadCurve.usageFollows: must be in [0, 1], got 1.5",
            ),
            (
                workload(", loadCurve: {step: 0s, points: [1, 2, 1]}"),
                "x.yaml: workloads[0].loadCurve.step: must be at least 1s and at most 3660 days",
            ),
            (
                workload(", dailyCycle: {}, loadCurve: {points: [1, 2, 1]}"),
                "x.yaml: workloads[0].loadCurve: set either dailyCycle or loadCurve, not both",
            ),
        ];
        assert_rejected(&cases);
    }

    /// Each text fails to load with an error starting with its wanted line, and a short one.
    fn assert_rejected(cases: &[(String, &str)]) {
        for (text, want) in cases {
            let e = errors(text);
            assert!(
                e.starts_with(want),
                "{}\n  got: {e}\n want: {want}",
                field::shown(text)
            );
            assert!(e.len() < 600, "{e}");
        }
    }

    #[test]
    fn every_error_is_listed() {
        let text = format!(
            "{BASE}step: 0s\nworkloads: [{{name: b, requests: {{cpu: '1', memory: 1Gi}}, noise: 2, arrivalsPerHour: -1}}]\n"
        );
        let e = errors(&text);
        let fields: Vec<&str> = e
            .lines()
            .map(|l| l.split(": ").nth(1).unwrap_or(""))
            .collect();
        assert_eq!(
            fields,
            ["step", "workloads[0].arrivalsPerHour", "workloads[0].noise"],
            "{e}"
        );
    }
}

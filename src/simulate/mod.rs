//! `headroom simulate`: the real pipeline over a simulated cluster.
//!
//! A simulated clock (tokio's paused clock, advanced one `step` at a time) drives
//! everything: pods arrive per the scenario's workloads and go through the real
//! [`SchedulingQueue`](headroom_scheduler::queue::SchedulingQueue) and [`Scheduler`](headroom_scheduler::scheduler::Scheduler) (binding is instant); running pods use CPU and
//! memory drawn from their builder's real-usage factors; every step the simulator writes
//! node samples into a real store, finished builds become run records and placements, and
//! the analytics refresh computes the usage view from the store on simulated time (polars
//! on the blocking pool). The run is deterministic for a given seed: arrivals and usage
//! draws do not depend on the policy, so policies are compared on the same arrivals.
//!
//! Policies: `headroom` (the configuration as given) and `requests` (the same with every
//! headroom plugin disabled: kube-scheduler's request-based default, the baseline).

pub mod families;
pub mod replay;
pub mod report;
mod run;
pub mod scenario;
pub mod sweep;
pub mod tune;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::analytics;
use crate::config::{Config, ConfigError, PluginSetting, SchedulerConfig};
use crate::engine::{Engine, EngineError};
use headroom_scheduler::clock::Clock;
use headroom_scheduler::key::PodKey;
use headroom_scheduler::plugins::KNOWN_PLUGINS;
use headroom_scheduler::snapshot::PodInfo;
use headroom_storage::{Store, UsageSummary};

pub use report::{PolicyReport, Report};
pub use scenario::{Kind, Scenario};

/// Errors of a simulation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The scenario is invalid.
    #[error(transparent)]
    Scenario(#[from] scenario::Error),
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] headroom_storage::Error),
    /// The analytics failed.
    #[error("analytics: {0}")]
    Analytics(#[from] analytics::Error),
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The tuned peers' file could not be used.
    #[error(transparent)]
    Tuned(#[from] tune::TuneError),
    /// A `…@tuned` policy without tuned args for its peer (`--tuned FILE`).
    #[error("{policy}: no tuned args for it (--tuned FILE, written by `sweep --tune-peers`)")]
    NotTuned {
        /// The policy.
        policy: &'static str,
    },
    /// `sweep --only` named a farm the family does not have.
    #[error("--only: the family has no farm {name:?}; its farms: {known}")]
    UnknownFarm {
        /// The name asked for.
        name: String,
        /// The family's farm names, comma-separated.
        known: String,
    },
}

/// Which scheduling policy a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// The configuration as given (headroom's real-usage plugins on).
    Headroom,
    /// Request-based only: every headroom plugin disabled (kube-scheduler's default).
    Requests,
    /// Trimaran's TargetLoadPacking as scheduler-plugins' `manifests/trimaran/
    /// scheduler-config.yaml` (commit 903da7df82cb) runs it: kube-scheduler's plugins
    /// without NodeResourcesBalancedAllocation, plus TargetLoadPacking (weight 1) with the
    /// manifest's args (`defaultRequestsMultiplier: "1"`, `targetUtilization: 40`). The
    /// manifest also disables `NodeResourcesLeastAllocated`, a plugin that no longer
    /// exists (its score is NodeResourcesFit's since v1beta2): NodeResourcesFit's score
    /// stays, at weight 1, as it does where the manifest loads.
    TrimaranTlp,
    /// Trimaran's LoadVariationRiskBalancing as its README's example profile runs it
    /// (`pkg/trimaran/loadvariationriskbalancing/README.md`): kube-scheduler's plugins,
    /// BalancedAllocation included, plus LoadVariationRiskBalancing (weight 1) with the
    /// recommended `safeVarianceMargin: 1`, `safeVarianceSensitivity: 2`.
    TrimaranLvrb,
    /// Koordinator's LoadAwareScheduling next to kube-scheduler's plugins, weight 1, with
    /// the args of koordinator's Helm chart v1.8.0 (`koord-scheduler-config.yaml`: what an
    /// install runs): `filterExpiredNodeMetrics: false`, `nodeMetricExpirationSeconds:
    /// 300`, `usageThresholds` 65 / 95, `estimatedScalingFactors` 85 / 70.
    Koordinator,
    /// crane's Dynamic next to kube-scheduler's plugins, weight 3 (crane's
    /// `deploy/manifests/dynamic/scheduler-config.yaml`).
    Crane,
    /// `trimaran-tlp` with the args `--tuned FILE` gives it ([`tune`]).
    #[value(name = "trimaran-tlp@tuned")]
    #[serde(rename = "trimaran-tlp@tuned")]
    TrimaranTlpTuned,
    /// `trimaran-lvrb` with the args `--tuned FILE` gives it.
    #[value(name = "trimaran-lvrb@tuned")]
    #[serde(rename = "trimaran-lvrb@tuned")]
    TrimaranLvrbTuned,
    /// `koordinator` with the args `--tuned FILE` gives it.
    #[value(name = "koordinator@tuned")]
    #[serde(rename = "koordinator@tuned")]
    KoordinatorTuned,
    /// `crane` with the args `--tuned FILE` gives it.
    #[value(name = "crane@tuned")]
    #[serde(rename = "crane@tuned")]
    CraneTuned,
}

impl Policy {
    /// Every policy, in the order reports list them.
    pub const ALL: [Policy; 6] = [
        Policy::Headroom,
        Policy::Requests,
        Policy::TrimaranTlp,
        Policy::TrimaranLvrb,
        Policy::Koordinator,
        Policy::Crane,
    ];

    /// The four peers tuned, in the order reports list them (after [`Policy::ALL`]).
    pub const TUNED: [Policy; 4] = [
        Policy::TrimaranTlpTuned,
        Policy::TrimaranLvrbTuned,
        Policy::KoordinatorTuned,
        Policy::CraneTuned,
    ];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Headroom => "headroom",
            Policy::Requests => "requests",
            Policy::TrimaranTlp => "trimaran-tlp",
            Policy::TrimaranLvrb => "trimaran-lvrb",
            Policy::Koordinator => "koordinator",
            Policy::Crane => "crane",
            Policy::TrimaranTlpTuned => "trimaran-tlp@tuned",
            Policy::TrimaranLvrbTuned => "trimaran-lvrb@tuned",
            Policy::KoordinatorTuned => "koordinator@tuned",
            Policy::CraneTuned => "crane@tuned",
        }
    }

    /// The peer at its defaults for a tuned one; itself otherwise.
    pub fn untuned(self) -> Policy {
        match self {
            Policy::TrimaranTlpTuned => Policy::TrimaranTlp,
            Policy::TrimaranLvrbTuned => Policy::TrimaranLvrb,
            Policy::KoordinatorTuned => Policy::Koordinator,
            Policy::CraneTuned => Policy::Crane,
            p => p,
        }
    }

    /// The tuned variant of a peer (`None` for headroom and requests): the inverse of
    /// [`Policy::untuned`].
    pub fn tuned(self) -> Option<Policy> {
        let peer = self.untuned();
        Policy::TUNED.into_iter().find(|t| t.untuned() == peer)
    }

    /// Whether this is a tuned peer (its args come from `--tuned FILE`).
    pub fn is_tuned(self) -> bool {
        self.untuned() != self
    }

    /// Whether this is one of the peers (it switches a peer's plugin on).
    pub fn is_peer(self) -> bool {
        !self.peer().0.is_empty()
    }

    /// The peer plugins this policy switches on (none for `headroom` and `requests`), and
    /// the upstream ones it switches off.
    fn peer(self) -> (&'static [&'static str], &'static [&'static str]) {
        use headroom_scheduler::plugins::{balanced_allocation, crane_dynamic, load_aware};
        use headroom_scheduler::plugins::{trimaran_lvrb, trimaran_tlp};
        match self.untuned() {
            Policy::Headroom | Policy::Requests => (&[], &[]),
            Policy::TrimaranTlp => (&[trimaran_tlp::NAME], &[balanced_allocation::NAME]),
            Policy::TrimaranLvrb => (&[trimaran_lvrb::NAME], &[]),
            Policy::Koordinator => (&[load_aware::NAME], &[]),
            Policy::Crane => (&[crane_dynamic::NAME], &[]),
            _ => unreachable!("untuned"),
        }
    }

    /// The args a peer runs with as its users install it (see each variant), under their
    /// `pluginArgs` key.
    fn peer_args(self) -> Option<(&'static str, serde_json::Value)> {
        use serde_json::json;
        match self.untuned() {
            Policy::TrimaranTlp => Some((
                "targetLoadPacking",
                json!({"defaultRequestsMultiplier": "1", "targetUtilization": 40}),
            )),
            Policy::TrimaranLvrb => Some((
                "loadVariationRiskBalancing",
                json!({"safeVarianceMargin": 1.0, "safeVarianceSensitivity": 2.0}),
            )),
            Policy::Koordinator => {
                Some(("loadAwareScheduling", tune::koordinator_helm_args(65, 95)))
            }
            _ => None,
        }
    }

    /// The configuration this policy runs with: `headroom` the configuration as given;
    /// every other one with headroom's own plugins off, and a peer's plugin on (with the
    /// configuration's `pluginArgs` for it, else the args its users install it with, else
    /// its defaults); a tuned peer with `tuned`'s args for it over those.
    pub fn config_tuned(self, base: &Config, tuned: &tune::TunedPeers) -> Config {
        let mut c = self.config(base);
        if let Some(args) = tuned.args(self) {
            for p in &mut c.profiles {
                for (k, v) in args {
                    p.plugin_args.insert(k.clone(), v.clone());
                }
            }
        }
        c
    }

    /// [`Policy::config_tuned`] without tuned args.
    pub fn config(self, base: &Config) -> Config {
        let mut c = base.clone();
        if self == Policy::Headroom {
            return c;
        }
        let (on, off) = self.peer();
        // Only `enabled` changes: a weight the configuration gives a peer is kept.
        let set = |p: &mut crate::config::ProfileConfig, name: &str, enabled: bool| {
            p.plugins
                .entry(name.to_string())
                .or_insert(PluginSetting {
                    enabled: None,
                    weight: None,
                })
                .enabled = Some(enabled);
        };
        for p in &mut c.profiles {
            for k in KNOWN_PLUGINS.iter().filter(|k| !k.upstream) {
                set(p, k.name, false);
            }
            for name in off.iter().chain(on) {
                set(p, name, on.contains(name));
            }
            if let Some((key, args)) = self.peer_args() {
                p.plugin_args.entry(key.to_string()).or_insert(args);
            }
        }
        // crane runs on kube-scheduler v1.23, whose unschedulable pods were retried after
        // 60 s at the latest (`unschedulableQTimeInterval`), not 5 minutes.
        if self.untuned() == Policy::Crane
            && c.scheduler.pod_max_in_unschedulable_pods_seconds
                == SchedulerConfig::default().pod_max_in_unschedulable_pods_seconds
        {
            c.scheduler.pod_max_in_unschedulable_pods_seconds = 60;
        }
        c
    }
}

/// Options of one simulation.
#[derive(Debug, Clone)]
pub struct Options {
    /// Seed (default: the scenario's).
    pub seed: Option<u64>,
    /// Policies to run, each on the same arrivals.
    pub policies: Vec<Policy>,
    /// Store directory for the first policy (default: a temporary store per policy).
    pub data_dir: Option<PathBuf>,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
    /// Act on the engine's descheduling advice every advice interval: the suggested pods
    /// are evicted (builds run again from scratch) and the scheduler places them anew.
    pub act_on_advice: bool,
    /// The tuned peers' args (`--tuned FILE`), for the `…@tuned` policies.
    pub tuned: tune::TunedPeers,
}

/// The inspection API attached to a simulation (the first policy's run): served on its own
/// runtime (`handle`), on the wall clock, while the simulation runs on a paused one — HTTP
/// timeouts must not see simulated time jump.
pub struct ApiHook {
    /// Where to serve.
    pub listener: std::net::TcpListener,
    /// The runtime serving it.
    pub handle: tokio::runtime::Handle,
    /// Notified to stop serving.
    pub stop: Arc<tokio::sync::Notify>,
}

/// Simulated time starts here (2026-01-01T00:00:00Z), so samples have real-looking times.
pub const EPOCH_MS: i64 = 1_767_225_600_000;

/// When a run on `store` starts: [`EPOCH_MS`], or, on a store an earlier run (or anything
/// else) wrote to, the first whole day after its newest sample — a second simulation on
/// the same `--data-dir` appends a later run instead of failing on out-of-order samples,
/// and keeps the same time of day (arrivals and a daily cycle line up). The run is the
/// same run: every time is relative to its start.
fn start_after(store: &Store) -> Result<i64, Error> {
    const DAY_MS: i64 = 24 * 3_600_000;
    let mut newest = i64::MIN;
    for info in store.select(&[])? {
        if let Some(last) = info.last {
            newest = newest.max(last.ts_ms);
        }
    }
    if newest < EPOCH_MS {
        return Ok(EPOCH_MS);
    }
    let days = (newest - EPOCH_MS) / DAY_MS + 1;
    Ok(EPOCH_MS + days * DAY_MS)
}

/// A build's Job gives up after this many failed pods (Kubernetes' default
/// `backoffLimit`).
const BACKOFF_LIMIT: u32 = 6;
/// The Job controller's first retry delay; it doubles per failure up to
/// [`MAX_RETRY_DELAY_MS`].
const RETRY_DELAY_MS: i64 = 10_000;
/// The Job controller's longest retry delay (6 minutes).
const MAX_RETRY_DELAY_MS: i64 = 360_000;
/// How long a database takes to fill its disk need.
const DISK_FILL_MS: f64 = 1_800_000.0;

/// One pod to be, decided before any policy runs.
#[derive(Debug, Clone)]
struct Arrival {
    at_ms: i64,
    workload: usize,
    builder: Option<usize>,
    /// Run time before any warm-cache speed-up (builders only).
    base_ms: Option<i64>,
    cpu_factor: f64,
    mem_factor: f64,
    seq: usize,
    /// Times this build was restarted (its Job's failed pods so far).
    restarts: u32,
}

impl Arrival {
    /// Its pod's name, `<workload>-<n>` (what `simulate` and a replay call it).
    fn pod_name(&self, s: &Scenario) -> String {
        format!("{}-{}", s.workloads[self.workload].name, self.seq)
    }

    /// Its builder, `<workload>-b<k>`: its pods' builder label and its runs' name.
    fn builder_name(&self, s: &Scenario) -> Option<String> {
        self.builder
            .map(|b| format!("{}-b{b}", s.workloads[self.workload].name))
    }

    /// Its pods' labels: the workload's, `app`, and the builder label for a build.
    fn labels(&self, s: &Scenario) -> BTreeMap<String, String> {
        let w = &s.workloads[self.workload];
        let mut labels = w.labels.clone();
        labels.insert("app".into(), w.name.clone());
        if let Some(b) = self.builder_name(s) {
            labels.insert(BUILDER_LABEL.into(), b);
        }
        labels
    }
}

/// A build's run time, ms: its `base` run time, shorter by `speedup` on a warm node.
fn run_time_ms(base: i64, speedup: f64, warm: bool) -> f64 {
    let speed = if warm { 1.0 - speedup } else { 1.0 };
    base as f64 * speed
}

/// Per-workload resolved numbers.
#[derive(Debug, Clone)]
struct WorkloadNums {
    req_cpu: f64,
    req_mem: f64,
    disk: f64,
    /// Its pods fit no node the farm ever has by their requests (CPU, memory, disk on one
    /// node): pending under every policy, counted apart from the pods a policy left
    /// pending.
    infeasible: bool,
}

#[derive(Clone)]
struct NodeState {
    name: String,
    cpu: f64,
    mem: f64,
    disk: f64,
    sys_cpu: f64,
    sys_mem: f64,
    /// When its own usage is sampled ([`scenario::NodeSpec::stats_interval`]): a path
    /// refreshing each node at its own phase; `None`: every step.
    stats: Option<headroom_scheduler::usage_context::MetricPath>,
    object: Node,
}

struct Running {
    arrival: Arrival,
    name: String,
    node: String,
    /// The pod as bound (what the cluster state holds).
    pod: Arc<Pod>,
    start_ms: i64,
    end_ms: Option<i64>,
    warm: bool,
    /// When the warm wait first held this build, if it did.
    held_ms: Option<i64>,
    rng: SmallRng,
    cpu: Vec<f64>,
    mem: Vec<f64>,
    /// This step's demand: CPU cores, memory and disk bytes.
    now_cpu: f64,
    now_mem: f64,
    now_disk: f64,
    /// Its container's CPU and memory series in the store (made at its first sample).
    series: Option<[headroom_storage::SeriesId; 2]>,
}

/// Why a pod was taken off its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    /// The kernel's OOM killer.
    Oom,
    /// The kubelet's eviction under memory pressure.
    Evicted,
    /// Evicted because the descheduling advice suggested moving it (`--act-on-advice`).
    Moved,
    /// A victim of a higher-priority pod's preemption.
    Preempted,
}

/// A scenario amount, parsed by the usage file's rule (quantity or number, non-negative).
fn amount(a: &headroom_scheduler::usage::file::Amount, field: &str) -> Result<f64, Error> {
    a.value(field).map_err(|(field, message)| {
        Error::Scenario(scenario::Error::Invalid {
            path: "scenario".into(),
            field,
            message,
        })
    })
}

fn make_nodes(
    spec: &scenario::NodeSpec,
    field: &str,
    start: usize,
) -> Result<Vec<NodeState>, Error> {
    let sys_cpu = amount(&spec.system_cpu, &format!("{field}.systemCpu"))?;
    let sys_mem = amount(&spec.system_memory, &format!("{field}.systemMemory"))?;
    let stats = spec.stats_interval.map(|d| {
        use headroom_scheduler::usage_context::{MetricPath, held::Phase};
        MetricPath::every(d, Phase::PerNode)
    });
    let bad = |m: String| {
        Error::Scenario(scenario::Error::Invalid {
            path: "scenario".into(),
            field: field.into(),
            message: m,
        })
    };
    if let Some(obj) = &spec.node {
        let node: Node =
            serde_json::from_value(obj.clone()).map_err(|e| bad(format!("not a Node: {e}")))?;
        let info = headroom_scheduler::snapshot::NodeInfo::new(Arc::new(node.clone()));
        if let Some(e) = &info.error {
            return Err(bad(e.clone()));
        }
        return Ok(vec![NodeState {
            name: info.name.to_string(),
            cpu: info.capacity.0 as f64 / 1000.0,
            mem: info.capacity.1 as f64,
            disk: info.allocatable.ephemeral_storage as f64,
            sys_cpu,
            sys_mem,
            stats,
            object: node,
        }]);
    }
    let cpu = amount(&spec.cpu, &format!("{field}.cpu"))?;
    let mem = amount(&spec.memory, &format!("{field}.memory"))?;
    let disk = amount(&spec.disk, &format!("{field}.disk"))?;
    (0..spec.count)
        .map(|i| {
            let name = format!("{}{}", spec.name_prefix, start + i + 1);
            let mut labels = spec.labels.clone();
            labels.insert("kubernetes.io/hostname".into(), name.clone());
            let q = |v: f64| format!("{}m", (v * 1000.0).round() as i64);
            let obj = json!({
                "metadata": {"name": name, "labels": labels},
                "spec": {"taints": spec.taints},
                "status": {
                    "capacity": {"cpu": q(cpu), "memory": format!("{}", mem as i64), "ephemeral-storage": format!("{}", disk as i64), "pods": "110"},
                    "allocatable": {"cpu": q(cpu), "memory": format!("{}", mem as i64), "ephemeral-storage": format!("{}", disk as i64), "pods": "110"}
                }
            });
            let object: Node = serde_json::from_value(obj).map_err(|e| bad(e.to_string()))?;
            Ok(NodeState {
                name,
                cpu,
                mem,
                disk,
                sys_cpu,
                sys_mem,
                stats,
                object,
            })
        })
        .collect()
}

/// Everything decided from the scenario and the seed, shared by all policies.
struct Plan {
    nodes: Vec<NodeState>,
    workloads: Vec<WorkloadNums>,
    arrivals: Vec<Arrival>,
}

fn plan(s: &Scenario, seed: u64) -> Result<Plan, Error> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut nodes = Vec::new();
    for (i, spec) in s.nodes.iter().enumerate() {
        let start = nodes.len();
        nodes.extend(make_nodes(spec, &format!("nodes[{i}]"), start)?);
    }
    // Every node the farm has or gains (events' addNodes), as (CPU, memory, disk).
    let mut shapes: Vec<(f64, f64, f64)> = nodes.iter().map(|n| (n.cpu, n.mem, n.disk)).collect();
    for (i, e) in s.events.iter().enumerate() {
        if let Some(spec) = &e.add_nodes {
            let added = make_nodes(spec, &format!("events[{i}].addNodes"), nodes.len())?;
            shapes.extend(added.iter().map(|n| (n.cpu, n.mem, n.disk)));
        }
    }
    let mut workloads = Vec::new();
    let mut arrivals = Vec::new();
    let end_ms = s.duration.as_millis() as i64;
    for (wi, w) in s.workloads.iter().enumerate() {
        let f = |k: &str| format!("workloads[{wi}].{k}");
        let (req_cpu, req_mem) = (
            amount(&w.requests.cpu, &f("requests.cpu"))?,
            amount(&w.requests.memory, &f("requests.memory"))?,
        );
        let disk = w
            .disk
            .as_ref()
            .map(|d| amount(d, &f("disk")))
            .transpose()?
            .unwrap_or(0.0);
        workloads.push(WorkloadNums {
            req_cpu,
            req_mem,
            disk,
            infeasible: !shapes
                .iter()
                .any(|&(c, m, d)| req_cpu <= c && req_mem <= m && disk <= d),
        });
        let draw = |r: [f64; 2], rng: &mut SmallRng| r[0] + (r[1] - r[0]) * rng.random::<f64>();
        match w.kind {
            Kind::Builder => {
                // Each builder: its own usage factors and mean run time.
                let builders: Vec<(f64, f64, f64)> = (0..w.builders)
                    .map(|_| {
                        (
                            draw(w.usage.cpu, &mut rng),
                            draw(w.usage.memory, &mut rng),
                            w.duration.as_millis() as f64 * (0.5 + rng.random::<f64>()),
                        )
                    })
                    .collect();
                let rate_per_ms = w.arrivals_per_hour / 3_600_000.0;
                let mut t = 0.0f64;
                let mut times = Vec::new();
                // A varying rate (daily cycle or load curve) by thinning: draw at the peak
                // rate, keep each arrival with the rate's share of the peak then (no extra
                // draws without a curve, so flat scenarios keep their arrivals).
                let curve = w.rate_curve();
                let peak = rate_per_ms * curve.map_or(1.0, |c| c.peak());
                if peak > 0.0 {
                    loop {
                        t += -(1.0 - rng.random::<f64>()).ln() / peak;
                        if t >= end_ms as f64 {
                            break;
                        }
                        if let Some(c) = curve {
                            let keep = c.at_ms(t) / c.peak();
                            if rng.random::<f64>() >= keep {
                                continue;
                            }
                        }
                        times.push(t as i64);
                    }
                }
                for e in s
                    .events
                    .iter()
                    .filter_map(|e| e.burst.as_ref().map(|b| (e.at, b)))
                {
                    if e.1.workload == w.name {
                        times.extend(std::iter::repeat_n(e.0.as_millis() as i64, e.1.count));
                    }
                }
                times.sort_unstable();
                for at in times {
                    let b = rng.random_range(0..w.builders);
                    let (c, m, mean) = builders[b];
                    // With a load curve's `usageFollows`, the build's intensity at arrival
                    // (its memory by the trace's memory series where it has one).
                    let (u, um) = w.load_curve.as_ref().map_or((1.0, 1.0), |l| {
                        (l.usage_at_ms(at as f64), l.memory_usage_at_ms(at as f64))
                    });
                    arrivals.push(Arrival {
                        at_ms: at,
                        workload: wi,
                        builder: Some(b),
                        base_ms: Some((mean * (0.8 + 0.4 * rng.random::<f64>())) as i64),
                        cpu_factor: c * u,
                        mem_factor: m * um,
                        seq: 0,
                        restarts: 0,
                    });
                }
            }
            Kind::Database | Kind::Service => {
                for _ in 0..w.count {
                    arrivals.push(Arrival {
                        at_ms: 0,
                        workload: wi,
                        builder: None,
                        base_ms: None,
                        cpu_factor: draw(w.usage.cpu, &mut rng),
                        mem_factor: draw(w.usage.memory, &mut rng),
                        seq: 0,
                        restarts: 0,
                    });
                }
            }
        }
    }
    arrivals.sort_by_key(|a| a.at_ms);
    for (i, a) in arrivals.iter_mut().enumerate() {
        a.seq = i;
    }
    Ok(Plan {
        nodes,
        workloads,
        arrivals,
    })
}

/// The builder identity label (bk-ci's), which the scheduler's identity rule reads.
const BUILDER_LABEL: &str = "bkci.dispatch.kubenetes/core";

fn pod_of(
    s: &Scenario,
    p: &Plan,
    a: &Arrival,
    name: &str,
    scheduler_name: &str,
) -> Result<Pod, Error> {
    let w = &s.workloads[a.workload];
    let n = &p.workloads[a.workload];
    let labels = a.labels(s);
    let mut annotations = BTreeMap::new();
    if n.disk > 0.0 {
        annotations.insert(
            "headroom.io/disk-request".to_string(),
            format!("{}", n.disk as i64),
        );
    }
    let obj = json!({
        "metadata": {"name": name, "namespace": w.namespace, "uid": format!("sim-{name}"), "labels": labels, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler_name,
            "priority": w.priority,
            "nodeSelector": w.node_selector,
            "tolerations": w.tolerations,
            "containers": [{"name": "main", "image": format!("sim/{}", w.name), "resources": {"requests": {
                "cpu": format!("{}m", (n.req_cpu * 1000.0).round() as i64),
                "memory": format!("{}", n.req_mem as i64)
            }}}]
        }
    });
    // `Scenario::parse` checked labels, selectors and tolerations, so this holds.
    serde_json::from_value(obj).map_err(|e| {
        Error::Scenario(scenario::Error::Invalid {
            path: "scenario".into(),
            field: format!("workloads[{}]", a.workload),
            message: e.to_string(),
        })
    })
}

fn summary(v: &[f64]) -> UsageSummary {
    if v.is_empty() {
        return UsageSummary {
            mean: 0.0,
            p95: 0.0,
            max: 0.0,
        };
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let p95 = s[((s.len() - 1) as f64 * 0.95).round() as usize];
    UsageSummary {
        mean: s.iter().sum::<f64>() / s.len() as f64,
        p95,
        max: s[s.len() - 1],
    }
}

/// Runs a scenario under every policy of `options`, on the same arrivals.
pub async fn run(scenario: &Scenario, config: &Config, options: &Options) -> Result<Report, Error> {
    run_with_api(scenario, config, options, None).await
}

/// [`run`], serving the inspection API over the first policy's run when `api` is given
/// (it keeps serving after the run, until `api.stop` is notified).
pub async fn run_with_api(
    scenario: &Scenario,
    config: &Config,
    options: &Options,
    mut api: Option<ApiHook>,
) -> Result<Report, Error> {
    let seed = options.seed.unwrap_or(scenario.seed);
    let mut report = Report::new(scenario, seed);
    for (i, policy) in options.policies.iter().enumerate() {
        let dir = if i == 0 {
            options.data_dir.clone()
        } else {
            None
        };
        let hook = if i == 0 { api.take() } else { None };
        let r = run::run_policy(scenario, config, *policy, seed, dir, options, hook).await?;
        report.policies.push(r);
    }
    Ok(report)
}

/// What the simulator feeds the API while it runs: the engine's own API state, on the
/// API's wall-clock runtime.
struct Attached {
    state: crate::api::ApiState,
}

fn attach(hook: ApiHook, engine: &Engine) -> Result<Attached, Error> {
    let state = engine.api_state();
    let _guard = hook.handle.enter();
    hook.listener
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpListener::from_std(hook.listener))
        .map(|listener| {
            let stop = hook.stop.clone();
            hook.handle
                .spawn(crate::api::serve(listener, state.clone(), async move {
                    stop.notified().await
                }));
        })
        .map_err(|e| {
            Error::Scenario(scenario::Error::Io {
                path: "--serve".into(),
                source: e,
            })
        })?;
    state.set_ready(true);
    Ok(Attached { state })
}

/// The simulator's binder: binding is instant, and the bound pod is applied to the
/// engine's cluster state at once, as the API server's watch would show it under `serve`
/// (which confirms the assumed pod). Remembers every binding for the step's bookkeeping.
struct SimBinder {
    cluster: Arc<crate::cluster::ClusterState>,
    clock: Clock,
    bound: std::sync::Mutex<Vec<(PodKey, String, Arc<Pod>)>>,
}

impl SimBinder {
    /// `(pod, node, the bound pod object)` of every binding since the last call.
    fn take(&self) -> Vec<(PodKey, String, Arc<Pod>)> {
        std::mem::take(&mut *self.bound.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl headroom_scheduler::framework::Plugin for SimBinder {
    fn name(&self) -> &'static str {
        "SimulatedBinder"
    }
}

impl headroom_scheduler::framework::BindPlugin for SimBinder {
    fn bind<'a>(
        &'a self,
        pod: &'a PodInfo,
        node: &'a str,
        _annotations: &'a headroom_scheduler::framework::BindAnnotations,
    ) -> headroom_scheduler::framework::BoxFuture<'a, headroom_scheduler::framework::BindOutcome>
    {
        Box::pin(async move {
            // The kubelet starts it at once: the pod as the watch shows it, running.
            let mut bound = (*pod.pod).clone();
            bound.status.get_or_insert_with(Default::default).start_time =
                k8s_openapi::jiff::Timestamp::from_millisecond(self.clock.now_ms())
                    .ok()
                    .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time);
            self.cluster.apply_pod(bound);
            self.bound.lock().unwrap_or_else(|e| e.into_inner()).push((
                pod.key(),
                node.to_string(),
                pod.pod.clone(),
            ));
            headroom_scheduler::framework::BindOutcome::Bound
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each policy's profile: headroom's own plugins off except under `headroom`, the
    /// peer's plugin on (its weight kept from the configuration), Trimaran without
    /// BalancedAllocation.
    #[test]
    fn peer_policies_switch_their_plugin_on_and_headrooms_off() {
        // Fragmentation (off by default) on: every policy but `headroom` turns it off.
        let base = Config::from_yaml(
            "profiles: [{plugins: {Dynamic: {weight: 5}, Fragmentation: {enabled: true}}}]",
            "t",
        )
        .unwrap();
        let names = |p: Policy| -> Vec<&'static str> {
            let c = p.config(&base);
            headroom_scheduler::plugins::build_framework(&c.profiles[0])
                .unwrap()
                .plugins()
                .iter()
                .map(|r| r.name)
                .collect()
        };
        let peers: Vec<&str> = headroom_scheduler::plugins::KNOWN_PLUGINS
            .iter()
            .filter(|k| k.peer_windows)
            .map(|k| k.name)
            .collect();
        for (p, on) in [
            (Policy::TrimaranTlp, "TargetLoadPacking"),
            (Policy::TrimaranLvrb, "LoadVariationRiskBalancing"),
            (Policy::Koordinator, "LoadAwareScheduling"),
            (Policy::Crane, "Dynamic"),
        ] {
            let n = names(p);
            assert!(n.contains(&on), "{p:?}: {n:?}");
            assert!(
                !n.contains(&"RealMemoryFit")
                    && !n.contains(&"History")
                    && !n.contains(&headroom_scheduler::plugins::fragmentation::NAME),
                "{p:?}"
            );
            assert_eq!(n.iter().filter(|x| peers.contains(x)).count(), 1, "{p:?}");
            // Only TargetLoadPacking's manifest drops BalancedAllocation.
            assert_eq!(
                n.contains(&"NodeResourcesBalancedAllocation"),
                p != Policy::TrimaranTlp,
                "{p:?}"
            );
            assert!(headroom_scheduler::plugins::registry::needs_peer_windows(
                &p.config(&base).core()
            ));
        }
        assert!(names(Policy::Headroom).contains(&"RealHeadroom"));
        assert!(
            names(Policy::Headroom).contains(&headroom_scheduler::plugins::fragmentation::NAME)
        );
        assert!(
            !names(Policy::Requests).contains(&headroom_scheduler::plugins::fragmentation::NAME)
        );
        assert!(!headroom_scheduler::plugins::registry::needs_peer_windows(
            &Policy::Requests.config(&base).core()
        ));
        let c = Policy::Crane.config(&base);
        assert_eq!(c.profiles[0].plugins["Dynamic"].weight, Some(5));
        // The peers' args as their users install them, unless the configuration gives
        // its own.
        let args = |p: Policy, key: &str| p.config(&base).profiles[0].plugin_args[key].clone();
        assert_eq!(
            args(Policy::TrimaranTlp, "targetLoadPacking")["defaultRequestsMultiplier"],
            "1"
        );
        assert_eq!(
            args(Policy::TrimaranLvrb, "loadVariationRiskBalancing")["safeVarianceSensitivity"],
            2.0
        );
        assert_eq!(
            args(Policy::Koordinator, "loadAwareScheduling")["nodeMetricExpirationSeconds"],
            300
        );
        let mut own = base.clone();
        own.profiles[0].plugin_args.insert(
            "targetLoadPacking".into(),
            serde_json::json!({"targetUtilization": 70}),
        );
        let c = Policy::TrimaranTlp.config(&own);
        assert_eq!(
            c.profiles[0].plugin_args["targetLoadPacking"],
            serde_json::json!({"targetUtilization": 70})
        );
        for p in Policy::ALL {
            let parsed = <Policy as clap::ValueEnum>::from_str(p.as_str(), false).unwrap();
            assert_eq!(parsed, p);
        }
    }

    /// A farm of the shipped trace family: summed over seeds, its builds arrive per hour
    /// as the base rates × the curve's mean over that hour, so the busiest hour of the
    /// window gets more arrivals than the quietest by the curve's ratio between them.
    #[test]
    fn arrivals_follow_the_load_curve() {
        use scenario::RateCurve;
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/families/alibaba-trace.yaml");
        let family = families::Family::load(&path).unwrap();
        // The farm whose window swings most (hour by hour), for a clear test.
        let expected_per_hour = |s: &Scenario| -> Vec<f64> {
            let hours = (s.duration.as_secs() / 3600) as usize;
            (0..hours)
                .map(|h| {
                    s.workloads
                        .iter()
                        .filter(|w| w.kind == Kind::Builder)
                        .map(|w| {
                            let c = w.load_curve.as_ref().unwrap();
                            let mean = (0..60)
                                .map(|m| c.at_ms(((h * 60 + m) as f64 + 0.5) * 60_000.0))
                                .sum::<f64>()
                                / 60.0;
                            w.arrivals_per_hour * mean
                        })
                        .sum()
                })
                .collect()
        };
        let ratio = |v: &[f64]| {
            let hi = v.iter().copied().fold(0.0, f64::max);
            let lo = v.iter().copied().fold(f64::MAX, f64::min);
            (
                hi / lo,
                v.iter().position(|&x| x == hi),
                v.iter().position(|&x| x == lo),
            )
        };
        let mut s = (0..6)
            .map(|i| family.generate(i).unwrap())
            .max_by(|a, b| {
                ratio(&expected_per_hour(a))
                    .0
                    .total_cmp(&ratio(&expected_per_hour(b)).0)
            })
            .unwrap();
        s.events.clear();
        let expected = expected_per_hour(&s);
        let (want, hi, lo) = ratio(&expected);
        assert!(want > 1.2, "{expected:?}");
        let seeds = 40;
        let mut counted = vec![0.0; expected.len()];
        for seed in 1..=seeds {
            let p = plan(&s, seed).unwrap();
            for a in p.arrivals.iter().filter(|a| a.builder.is_some()) {
                if let Some(c) = counted.get_mut((a.at_ms / 3_600_000) as usize) {
                    *c += 1.0 / seeds as f64;
                }
            }
        }
        let (hi, lo) = (hi.unwrap(), lo.unwrap());
        let got = counted[hi] / counted[lo];
        assert!(
            (got / want - 1.0).abs() < 0.15,
            "busiest/quietest hour: {got:.2} arrivals, curve {want:.2}: {counted:?} vs {expected:?}"
        );
        let (total, want_total) = (counted.iter().sum::<f64>(), expected.iter().sum::<f64>());
        assert!(
            (total / want_total - 1.0).abs() < 0.05,
            "{total} vs {want_total}"
        );
    }

    #[test]
    fn memory_ramps_over_the_workloads_own_ramp() {
        use std::time::Duration;
        let ramp = Duration::from_secs(15);
        assert_eq!(run::ramp_share(0.0, ramp), 0.1);
        assert_eq!(run::ramp_share(7_500.0, ramp), 0.5);
        assert_eq!(run::ramp_share(60_000.0, ramp), 1.0);
        assert_eq!(run::ramp_share(0.0, Duration::ZERO), 1.0);
        // The scenario's default is the two minutes the simulator always used.
        let s = Scenario::parse(
            "nodes: [{count: 1}]\nworkloads: [{name: w, requests: {cpu: 1, memory: 1Gi}}]\n",
            "x.yaml",
        )
        .unwrap();
        assert_eq!(s.workloads[0].memory_ramp, Duration::from_secs(120));
    }

    /// `usageFollows`: a build's usage factors are its builder's × `1 + usageFollows ×
    /// (curve − 1)` at its arrival.
    #[test]
    fn usage_follows_the_load_curve() {
        let text = "duration: 2h\nnodes: [{count: 1}]\nworkloads: [{name: b, builders: 1, arrivalsPerHour: 200, requests: {cpu: '1', memory: 1Gi}, usage: {cpu: [1, 1], memory: [2, 2]}, loadCurve: {step: 1h, points: [0.5, 0.5, 1.5], usageFollows: 0.5}}]\n";
        let s = Scenario::parse(text, "t").unwrap();
        let p = plan(&s, 3).unwrap();
        assert!(p.arrivals.len() > 100, "{}", p.arrivals.len());
        for a in &p.arrivals {
            let curve = if a.at_ms < 3_600_000 {
                0.5
            } else {
                0.5 + (a.at_ms - 3_600_000) as f64 / 3_600_000.0
            };
            let u = 1.0 + 0.5 * (curve - 1.0);
            assert!(
                (a.cpu_factor - u).abs() < 1e-9,
                "{} {}",
                a.at_ms,
                a.cpu_factor
            );
            assert!((a.mem_factor - 2.0 * u).abs() < 1e-9, "{}", a.mem_factor);
        }
        // The second hour's rate climbs from 0.5 to 1.5 of the base: about twice the
        // first's arrivals.
        let first = p.arrivals.iter().filter(|a| a.at_ms < 3_600_000).count() as f64;
        let second = p.arrivals.len() as f64 - first;
        assert!((1.6..2.5).contains(&(second / first)), "{first} {second}");
        // With a memory series, the memory factor follows it and the CPU factor the load.
        let text = text.replace(
            "usageFollows: 0.5}",
            "usageFollows: 0.5, memory: [2, 1, 1]}",
        );
        let s = Scenario::parse(&text, "t").unwrap();
        let p = plan(&s, 3).unwrap();
        for a in &p.arrivals {
            let t = a.at_ms as f64 / 3_600_000.0;
            let load = if t < 1.0 { 0.5 } else { 0.5 + (t - 1.0) };
            let memory = if t < 1.0 { 2.0 - t } else { 1.0 };
            assert!((a.cpu_factor - (1.0 + 0.5 * (load - 1.0))).abs() < 1e-9);
            let want = 2.0 * (1.0 + 0.5 * (memory - 1.0));
            assert!(
                (a.mem_factor - want).abs() < 1e-9,
                "{} {}",
                a.at_ms,
                a.mem_factor
            );
        }
        let bad = text.replace("memory: [2, 1, 1]", "memory: [2, 1]");
        let e = Scenario::parse(&bad, "t").unwrap_err().to_string();
        assert!(e.contains("workloads[0].loadCurve.memory"), "{e}");
    }
}

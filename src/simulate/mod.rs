//! `headroom simulate`: the real pipeline over a simulated cluster.
//!
//! A simulated clock (tokio's paused clock, advanced one `step` at a time) drives
//! everything: pods arrive per the scenario's workloads and go through the real
//! [`SchedulingQueue`] and [`Scheduler`] (binding is instant); running pods use CPU and
//! memory drawn from their builder's real-usage factors; every step the simulator writes
//! node samples into a real store, finished builds become run records and placements, and
//! the analytics refresh computes the usage view from the store on simulated time (polars
//! on the blocking pool). The run is deterministic for a given seed: arrivals and usage
//! draws do not depend on the policy, so policies are compared on the same arrivals.
//!
//! Policies: `headroom` (the configuration as given) and `requests` (the same with every
//! headroom plugin disabled: kube-scheduler's request-based default, the baseline).

pub mod families;
pub mod report;
pub mod scenario;
pub mod sweep;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::analytics;
use crate::clock::Clock;
use crate::config::{Config, ConfigError, PluginSetting};
use crate::engine::{Drive, Engine, EngineError, Parts};
use crate::plugins::KNOWN_PLUGINS;
use crate::reservation::InMemoryReservations;
use crate::snapshot::PodInfo;
use crate::usage::file::UsageFile;
use headroom_storage::{Labels, RunRecord, Store, UsageSummary};

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
    /// scheduler-config.yaml` runs it: kube-scheduler's plugins without
    /// NodeResourcesBalancedAllocation, plus TargetLoadPacking (weight 1). headroom cannot
    /// switch off NodeResourcesFit's score alone (its filter is needed), so its
    /// LeastAllocated score stays, at weight 1, where Trimaran's manifest disables it.
    TrimaranTlp,
    /// Trimaran's LoadVariationRiskBalancing, in the same profile as `trimaran-tlp`.
    TrimaranLvrb,
    /// Koordinator's LoadAwareScheduling next to kube-scheduler's plugins, weight 1 (as
    /// koordinator's `config/manager/scheduler-config.yaml` enables it).
    Koordinator,
    /// crane's Dynamic next to kube-scheduler's plugins, weight 3 (crane's
    /// `deploy/manifests/dynamic/scheduler-config.yaml`).
    Crane,
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

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Headroom => "headroom",
            Policy::Requests => "requests",
            Policy::TrimaranTlp => "trimaran-tlp",
            Policy::TrimaranLvrb => "trimaran-lvrb",
            Policy::Koordinator => "koordinator",
            Policy::Crane => "crane",
        }
    }

    /// The peer plugins this policy switches on (none for `headroom` and `requests`), and
    /// the upstream ones it switches off.
    fn peer(self) -> (&'static [&'static str], &'static [&'static str]) {
        use crate::plugins::{balanced_allocation, crane_dynamic, load_aware};
        use crate::plugins::{trimaran_lvrb, trimaran_tlp};
        match self {
            Policy::Headroom | Policy::Requests => (&[], &[]),
            Policy::TrimaranTlp => (&[trimaran_tlp::NAME], &[balanced_allocation::NAME]),
            Policy::TrimaranLvrb => (&[trimaran_lvrb::NAME], &[balanced_allocation::NAME]),
            Policy::Koordinator => (&[load_aware::NAME], &[]),
            Policy::Crane => (&[crane_dynamic::NAME], &[]),
        }
    }

    /// The configuration this policy runs with: `headroom` the configuration as given;
    /// every other one with headroom's own plugins off, and a peer's plugin on (with the
    /// configuration's `pluginArgs` for it, its defaults otherwise).
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

/// How long a pod's memory takes to reach its working set.
const RAMP_MS: f64 = 120_000.0;
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
    rng: SmallRng,
    cpu: Vec<f64>,
    mem: Vec<f64>,
    /// This step's demand: CPU cores, memory and disk bytes.
    now_cpu: f64,
    now_mem: f64,
    now_disk: f64,
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
}

/// A scenario amount, parsed by the usage file's rule (quantity or number, non-negative).
fn amount(a: &crate::usage::file::Amount, field: &str) -> Result<f64, Error> {
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
        let info = crate::snapshot::NodeInfo::new(Arc::new(node.clone()));
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
                // A cyclic rate by thinning: draw at the peak rate, keep each arrival with
                // the rate's share of the peak then (no extra draws without a cycle, so
                // flat scenarios keep their arrivals).
                let cycle = w.daily_cycle.as_ref().filter(|c| c.amplitude > 0.0);
                let peak = rate_per_ms * (1.0 + cycle.map_or(0.0, |c| c.amplitude));
                if rate_per_ms > 0.0 {
                    loop {
                        t += -(1.0 - rng.random::<f64>()).ln() / peak;
                        if t >= end_ms as f64 {
                            break;
                        }
                        if let Some(c) = cycle {
                            let phase = (t - c.peak_at.as_millis() as f64)
                                / c.period.as_millis() as f64
                                * std::f64::consts::TAU;
                            let keep = (1.0 + c.amplitude * phase.cos()) / (1.0 + c.amplitude);
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
                    arrivals.push(Arrival {
                        at_ms: at,
                        workload: wi,
                        builder: Some(b),
                        base_ms: Some((mean * (0.8 + 0.4 * rng.random::<f64>())) as i64),
                        cpu_factor: c,
                        mem_factor: m,
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
    let mut labels = w.labels.clone();
    labels.insert("app".into(), w.name.clone());
    let mut annotations = BTreeMap::new();
    if let Some(b) = a.builder {
        labels.insert(BUILDER_LABEL.into(), format!("{}-b{b}", w.name));
    }
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
        let r = run_policy(scenario, config, *policy, seed, dir, options, hook).await?;
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
    bound: std::sync::Mutex<Vec<(String, String, Arc<Pod>)>>,
}

impl SimBinder {
    /// `(namespace/name, node, the bound pod)` of every binding since the last call.
    fn take(&self) -> Vec<(String, String, Arc<Pod>)> {
        std::mem::take(&mut *self.bound.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl crate::framework::Plugin for SimBinder {
    fn name(&self) -> &'static str {
        "SimulatedBinder"
    }
}

impl crate::framework::BindPlugin for SimBinder {
    fn bind<'a>(
        &'a self,
        pod: &'a PodInfo,
        node: &'a str,
        _annotations: &'a crate::framework::BindAnnotations,
    ) -> crate::framework::BoxFuture<'a, crate::framework::Status> {
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
            crate::framework::Status::success()
        })
    }
}

/// Runs one policy on the [`Engine`], driven by hand on simulated time: per step, the
/// cluster changes go through the engine's cluster state (as watch events would), node
/// samples go into its store, and the engine's refresh, maintenance, queue flushes and
/// housekeeping run at the simulated instants their timers would fire under `serve`;
/// then the real scheduling loop runs until the queue settles. Runs on a paused tokio
/// clock if the caller's runtime is paused (the CLI builds one), so the queue's backoffs
/// follow simulated time.
async fn run_policy(
    s: &Scenario,
    base: &Config,
    policy: Policy,
    seed: u64,
    data_dir: Option<PathBuf>,
    options: &Options,
    hook: Option<ApiHook>,
) -> Result<PolicyReport, Error> {
    let progress = options.progress;
    let mut config = policy.config(base);
    // Ties between equally scored nodes are broken by the simulation's seed too, or two
    // runs of one seed would differ.
    config.scheduler.seed = config.scheduler.seed.or(Some(seed));
    let first_profile = config
        .profiles
        .first()
        .map(|p| p.scheduler_name.clone())
        .unwrap_or_default();
    // Each workload's pods name their profile; a name no profile has would leave them
    // pending forever, as `serve` would (they are not ours).
    let mut scheduler_names = Vec::with_capacity(s.workloads.len());
    for (i, w) in s.workloads.iter().enumerate() {
        let name = w
            .scheduler_name
            .clone()
            .unwrap_or_else(|| first_profile.clone());
        if !config.profiles.iter().any(|p| p.scheduler_name == name) {
            let known: Vec<&str> = config
                .profiles
                .iter()
                .map(|p| p.scheduler_name.as_str())
                .collect();
            return Err(Error::Scenario(scenario::Error::Invalid {
                path: "scenario".into(),
                field: format!("workloads[{i}].schedulerName"),
                message: format!(
                    "no profile named {name:?} in the configuration (profiles: {})",
                    known.join(", ")
                ),
            }));
        }
        scheduler_names.push(name);
    }
    let plan = plan(s, seed)?;
    let store = match &data_dir {
        Some(d) => Store::open(d, config.storage.clone())?,
        None => Store::open_temporary(config.storage.clone())?,
    };
    let epoch = start_after(&store)?;
    let reservations = UsageFile {
        reservations: s.reservations.clone(),
        ..UsageFile::default()
    }
    .resolve(epoch)
    .map_err(|(field, message)| scenario::Error::Invalid {
        path: "scenario".into(),
        field,
        message,
    })?
    .reservations;
    let (clock, time) = Clock::manual(epoch);
    let mut parts = Parts::new(clock, store.clone());
    parts.reservations = Some(Arc::new(InMemoryReservations::new(reservations)));
    parts.explain = hook.is_some();
    let refresh_ms = config.analytics.refresh_interval.as_millis().max(1) as i64;
    let config_node_window_ms = config.analytics.node_window.as_millis() as i64;
    let maintenance_ms = config.storage.maintenance_interval.as_millis().max(1) as i64;
    let engine = Engine::new(config, parts)?;
    let running = engine.start(Drive::Manual, None)?;
    let cluster = engine.cluster().clone();
    let binder = Arc::new(SimBinder {
        cluster: cluster.clone(),
        clock: engine.clock().clone(),
        bound: std::sync::Mutex::new(Vec::new()),
    });
    let lp = engine.scheduling_loop(binder.clone(), false, None);

    let mut nodes: Vec<NodeState> = plan.nodes.clone();
    for n in &nodes {
        cluster.apply_node(n.object.clone());
    }
    let mut node_series: HashMap<String, [headroom_storage::SeriesId; 4]> = HashMap::new();

    let step_ms = s.step.as_millis() as i64;
    let eviction_threshold = amount(
        &s.overcommit.eviction_threshold,
        "overcommit.evictionThreshold",
    )?;
    let ticks = (s.duration.as_millis() as i64 / step_ms) as usize;
    let mut next_refresh = 0i64;
    let mut next_maintenance = maintenance_ms;
    let mut r = PolicyReport::new(policy);
    let mut next_arrival = 0usize;
    // Ordered, so float sums (and so the report) are identical run to run.
    let mut running_pods: BTreeMap<String, Running> = BTreeMap::new();
    let mut arrived_at: HashMap<String, (i64, Arrival)> = HashMap::new();
    let mut history: HashMap<(usize, usize), HashSet<String>> = HashMap::new();
    let mut events: Vec<&scenario::Event> = s.events.iter().filter(|e| e.burst.is_none()).collect();
    events.sort_by_key(|e| e.at);
    let mut next_event = 0usize;
    let mut resubmits = 0usize;
    let act_on_advice = options.act_on_advice;
    let cooldown_ms = config_node_window_ms + refresh_ms;
    let mut cooldown: HashMap<String, i64> = HashMap::new();
    // Pods to submit again at an instant: (due ms, arrival, name of the pod it replaces).
    let mut retries: Vec<(i64, Arrival, String)> = Vec::new();
    let mut sched_wall = Duration::ZERO;
    let attached = hook.map(|h| attach(h, &engine)).transpose()?;
    let bar = progress.then(|| {
        let b = indicatif::ProgressBar::new(ticks as u64);
        b.set_message(policy.as_str());
        b
    });
    let submit = |a: &Arrival, name: &str| -> Result<(), Error> {
        cluster.apply_pod(pod_of(s, &plan, a, name, &scheduler_names[a.workload])?);
        Ok(())
    };

    for tick in 0..=ticks {
        let rel = tick as i64 * step_ms;
        let now = epoch + rel;
        time.set(now);
        engine.housekeeping();
        // Takes pod `$k` off its node for `$kill`: a service or database OOM-killed
        // restarts in place; anything else leaves (a build fails and its pipeline runs it
        // again from scratch; an evicted or moved pod's controller makes a new one) and is
        // submitted again for the scheduler to place anew.
        macro_rules! take_off {
            ($k:expr, $kill:expr) => {{
                let (k, kill): (String, Kill) = ($k, $kill);
                if let Some(mut p) = running_pods.remove(&k) {
                    match kill {
                        Kill::Oom => r.oom_kills += 1,
                        Kill::Evicted => r.evictions += 1,
                        Kill::Moved => r.advice_moves += 1,
                    }
                    if kill == Kill::Oom && p.arrival.builder.is_none() {
                        // restartPolicy Always: its memory builds up again from nothing.
                        p.start_ms = now;
                        p.now_mem = 0.0;
                        running_pods.insert(k, p);
                    } else {
                        cluster.delete_pod(&p.pod);
                        r.lost_and_resubmitted += 1;
                        if let Some(b) = p.arrival.builder {
                            r.build_ms_lost += (now - p.start_ms) as f64;
                            // The collectors saw the run until it ended: its samples are a
                            // run record like any other (profiles learn from failed runs).
                            if !p.mem.is_empty() {
                                let run = RunRecord {
                                    pod_uid: format!("sim-{}", p.name),
                                    node: p.node.clone(),
                                    start_ms: p.start_ms,
                                    end_ms: now,
                                    cpu: summary(&p.cpu),
                                    memory: summary(&p.mem),
                                };
                                store.put_run(
                                    &format!("{}-b{b}", s.workloads[p.arrival.workload].name),
                                    &run,
                                )?;
                            }
                        }
                        let mut again = p.arrival.clone();
                        if again.builder.is_some() {
                            // Its Job makes a new pod after a backoff, until backoffLimit.
                            again.restarts += 1;
                            if again.restarts > BACKOFF_LIMIT {
                                r.builds_failed += 1;
                            } else {
                                let delay = (RETRY_DELAY_MS << (again.restarts - 1).min(16))
                                    .min(MAX_RETRY_DELAY_MS);
                                retries.push((now + delay, again, p.name.clone()));
                            }
                        } else {
                            // A ReplicaSet replaces its pod at once.
                            retries.push((now, again, p.name.clone()));
                        }
                    }
                }
            }};
        }
        // Events.
        while next_event < events.len() && events[next_event].at.as_millis() as i64 <= rel {
            let e = events[next_event];
            next_event += 1;
            if let Some(name) = e.cordon.as_ref().or(e.uncordon.as_ref()) {
                if let Some(n) = nodes.iter_mut().find(|n| &n.name == name) {
                    n.object
                        .spec
                        .get_or_insert_with(Default::default)
                        .unschedulable = Some(e.cordon.is_some());
                    cluster.apply_node(n.object.clone());
                }
            } else if let Some(spec) = &e.add_nodes {
                let added = make_nodes(spec, "events.addNodes", 0)?;
                for n in added {
                    if nodes.iter().any(|x| x.name == n.name) {
                        continue;
                    }
                    cluster.apply_node(n.object.clone());
                    nodes.push(n);
                }
            } else if let Some(name) = &e.remove_node {
                nodes.retain(|n| &n.name != name);
                // Its pods are lost; their controllers make new ones.
                let lost: Vec<String> = running_pods
                    .iter()
                    .filter(|(_, p)| &p.node == name)
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in lost {
                    if let Some(p) = running_pods.remove(&k) {
                        cluster.delete_pod(&p.pod);
                        resubmits += 1;
                        let pname = format!("{}-r{resubmits}", p.name);
                        let key = format!("{}/{pname}", s.workloads[p.arrival.workload].namespace);
                        arrived_at.insert(key, (now, p.arrival.clone()));
                        r.arrived += 1;
                        r.lost_and_resubmitted += 1;
                        r.resubmitted += 1;
                        submit(&p.arrival, &pname)?;
                    }
                }
                cluster.delete_node(name);
            }
        }
        // Pods their controllers make again (Job retries after their backoff).
        retries.sort_by_key(|(due, a, _)| (*due, a.seq));
        while retries.first().is_some_and(|(due, _, _)| *due <= now) {
            let (_, a, old) = retries.remove(0);
            resubmits += 1;
            let pname = format!("{old}-r{resubmits}");
            let key = format!("{}/{pname}", s.workloads[a.workload].namespace);
            arrived_at.insert(key, (now, a.clone()));
            r.arrived += 1;
            r.resubmitted += 1;
            submit(&a, &pname)?;
        }
        // Arrivals up to now.
        while next_arrival < plan.arrivals.len() && plan.arrivals[next_arrival].at_ms <= rel {
            let a = plan.arrivals[next_arrival].clone();
            next_arrival += 1;
            let w = &s.workloads[a.workload];
            let name = format!("{}-{}", w.name, a.seq);
            arrived_at.insert(
                format!("{}/{name}", w.namespace),
                (epoch + a.at_ms, a.clone()),
            );
            r.arrived += 1;
            submit(&a, &name)?;
        }
        // Completions: the pod leaves the cluster; its run is recorded as the collectors'
        // run detection would record it.
        let done: Vec<String> = running_pods
            .iter()
            .filter(|(_, p)| p.end_ms.is_some_and(|e| e <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &done {
            let Some(p) = running_pods.remove(k) else {
                continue;
            };
            let w = &s.workloads[p.arrival.workload];
            cluster.delete_pod(&p.pod);
            r.completed += 1;
            if let Some(b) = p.arrival.builder {
                let builder = format!("{}-b{b}", w.name);
                let run = RunRecord {
                    pod_uid: format!("sim-{}", p.name),
                    node: p.node.clone(),
                    start_ms: p.start_ms,
                    end_ms: now,
                    cpu: summary(&p.cpu),
                    memory: summary(&p.mem),
                };
                store.put_run(&builder, &run)?;
                store.record_placement(&builder, &p.node)?;
            }
        }
        // Usage: what each pod demands this step (its rng draws do not depend on what
        // happens to other pods, so policies stay comparable).
        let mut demand: HashMap<&str, (f64, f64)> = nodes
            .iter()
            .map(|n| (n.name.as_str(), (0.0, 0.0)))
            .collect();
        for p in running_pods.values_mut() {
            let w = &s.workloads[p.arrival.workload];
            let n = &plan.workloads[p.arrival.workload];
            let age = (now - p.start_ms) as f64;
            let jitter = |rng: &mut SmallRng| 1.0 + w.noise * (2.0 * rng.random::<f64>() - 1.0);
            p.now_cpu = n.req_cpu * p.arrival.cpu_factor * jitter(&mut p.rng);
            p.now_mem = n.req_mem
                * p.arrival.mem_factor
                * (age / RAMP_MS).clamp(0.1, 1.0)
                * (1.0 + (jitter(&mut p.rng) - 1.0) * 0.3);
            p.now_disk = n.disk * (age / DISK_FILL_MS).clamp(0.05, 1.0);
            if let Some(u) = demand.get_mut(p.node.as_str()) {
                u.0 += p.now_cpu;
                u.1 += p.now_mem;
            }
        }
        // What overcommit costs: the CPU share each node can give, and the pods the kernel
        // (OOM) and the kubelet (eviction) take out.
        let oc = &s.overcommit;
        let mut share: HashMap<&str, f64> = HashMap::new();
        let mut victims: Vec<(String, Kill)> = Vec::new();
        for n in &nodes {
            let (cpu, mem) = demand[n.name.as_str()];
            let avail = (n.cpu - n.sys_cpu).max(0.0);
            if oc.cpu_contention && cpu > avail && cpu > 0.0 {
                share.insert(n.name.as_str(), avail / cpu);
            }
            let mut total = n.sys_mem + mem;
            let over = oc.oom_kill && total > n.mem;
            let pressure = oc.eviction && n.mem - total < eviction_threshold;
            if !over && !pressure {
                continue;
            }
            // (key, memory, request) of the pods on the node.
            let mut on: Vec<(&String, f64, f64)> = running_pods
                .iter()
                .filter(|(_, p)| p.node == n.name)
                .map(|(k, p)| (k, p.now_mem, plan.workloads[p.arrival.workload].req_mem))
                .collect();
            if over {
                // The kernel: highest oom_score first — memory in thousandths of the node
                // plus the Burstable adjustment 1000 − 1000 × request / capacity.
                let score = |m: f64, req: f64| {
                    1000.0 * m / n.mem + (1000.0 - 1000.0 * req / n.mem).clamp(2.0, 999.0)
                };
                on.sort_by(|a, b| {
                    score(b.1, b.2)
                        .total_cmp(&score(a.1, a.2))
                        .then(a.0.cmp(b.0))
                });
                while total > n.mem && !on.is_empty() {
                    let (k, m, _) = on.remove(0);
                    total -= m;
                    victims.push((k.clone(), Kill::Oom));
                }
            }
            if oc.eviction && n.mem - total < eviction_threshold && !on.is_empty() {
                // The kubelet: one pod per pass, pods above their requests first, the
                // most above first.
                on.sort_by(|a, b| {
                    let above = |x: &(&String, f64, f64)| x.1 > x.2;
                    above(b)
                        .cmp(&above(a))
                        .then((b.1 - b.2).total_cmp(&(a.1 - a.2)))
                        .then(a.0.cmp(b.0))
                });
                victims.push((on[0].0.clone(), Kill::Evicted));
            }
        }
        for (k, kill) in victims {
            take_off!(k, kill);
        }
        // Usage samples: what each node really uses this step, after the kills and
        // within the CPU each pod could get; contention stretches the builds' run time.
        let mut node_use: HashMap<&str, (f64, f64, f64)> = nodes
            .iter()
            .map(|n| (n.name.as_str(), (n.sys_cpu, n.sys_mem, 0.0)))
            .collect();
        for p in running_pods.values_mut() {
            let f = share.get(p.node.as_str()).copied().unwrap_or(1.0);
            let cpu = p.now_cpu * f;
            p.cpu.push(cpu);
            p.mem.push(p.now_mem);
            if let Some(u) = node_use.get_mut(p.node.as_str()) {
                u.0 += cpu;
                u.1 += p.now_mem;
                u.2 += p.now_disk;
            }
            if f < 1.0
                && let Some(end) = p.end_ms
            {
                // Over the next step the build does `f` steps' worth of work.
                let left = (end - now) as f64;
                let work = step_ms as f64 * f;
                let new_end = if left <= work {
                    now + (left / f) as i64
                } else {
                    end + (step_ms as f64 * (1.0 - f)) as i64
                };
                r.build_ms_slowed += (new_end - end) as f64;
                p.end_ms = Some(new_end);
            }
        }
        let mut busy_nodes: HashSet<&str> = HashSet::new();
        for p in running_pods.values() {
            busy_nodes.insert(p.node.as_str());
        }
        let mut mem_utils = Vec::with_capacity(nodes.len());
        for n in &nodes {
            let (cpu, mem, disk) = node_use[n.name.as_str()];
            let cpu = cpu.min(n.cpu);
            let ids = match node_series.get(&n.name) {
                Some(ids) => *ids,
                None => {
                    let l = Labels::new([("node", n.name.as_str())])?;
                    let ids = [
                        store.series_id("node_cpu_usage_cores", &l)?,
                        store.series_id("node_memory_working_set_bytes", &l)?,
                        store.series_id("node_fs_available_bytes", &l)?,
                        store.series_id("node_fs_capacity_bytes", &l)?,
                    ];
                    node_series.insert(n.name.clone(), ids);
                    ids
                }
            };
            store.append_many(&[
                (ids[0], now, cpu),
                (ids[1], now, mem),
                (ids[2], now, (n.disk - disk).max(0.0)),
                (ids[3], now, n.disk),
            ])?;
            let (cu, mu) = (cpu / n.cpu.max(1e-9), mem / n.mem.max(1e-9));
            r.observe_node(cu, mu, step_ms, busy_nodes.contains(n.name.as_str()));
            mem_utils.push(mu);
        }
        r.observe_spread(&mut mem_utils);
        // The engine's timed work, at the simulated instants its timers would fire.
        if rel >= next_maintenance {
            engine.maintain_store().await?;
            next_maintenance = rel + maintenance_ms;
        }
        if rel >= next_refresh {
            engine.refresh_usage().await?;
            next_refresh = rel + refresh_ms;
            // The descheduling advice on the fresh view, as `/advice` would serve it now;
            // acted on if asked. A node acted on is left alone until its windowed usage
            // no longer shows the pods that left (the advice cannot know they left).
            let advice = engine.advice();
            r.advice_hot_node_ms += advice.hot_nodes.len() as f64 * refresh_ms as f64;
            if act_on_advice {
                for hot in &advice.hot_nodes {
                    if cooldown.get(&hot.node).is_some_and(|t| *t > now) || hot.moves.is_empty() {
                        continue;
                    }
                    for m in &hot.moves {
                        take_off!(m.pod.clone(), Kill::Moved);
                    }
                    cooldown.insert(hot.node.clone(), now + cooldown_ms);
                }
            }
        }
        engine.flush_queue();
        // Schedule everything that is due.
        let stats = lp.run_until_settled().await;
        r.attempts += stats.attempts as usize;
        r.unschedulable_attempts += stats.unschedulable as usize;
        sched_wall += stats.cycle_time;
        for (key, node, pod) in binder.take() {
            let Some((at, a)) = arrived_at.remove(&key) else {
                continue;
            };
            r.placed += 1;
            r.latencies_s.push((now - at) as f64 / 1000.0);
            let mut warm = false;
            if let Some(b) = a.builder {
                let seen = history.entry((a.workload, b)).or_default();
                if !seen.is_empty() {
                    r.repeat_placements += 1;
                    warm = seen.contains(&node);
                    if warm {
                        r.warm_placements += 1;
                    }
                }
                seen.insert(node.clone());
            }
            let end_ms = a.base_ms.map(|base| {
                let speed = if warm {
                    1.0 - s.workloads[a.workload].warm_speedup
                } else {
                    1.0
                };
                if warm {
                    r.build_ms_saved += base as f64 * s.workloads[a.workload].warm_speedup;
                }
                r.build_ms_planned += base as f64 * speed;
                now + (base as f64 * speed) as i64
            });
            let name = pod.metadata.name.clone().unwrap_or_default();
            running_pods.insert(
                key,
                Running {
                    rng: SmallRng::seed_from_u64(
                        seed ^ (a.seq as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    ),
                    arrival: a,
                    name,
                    node,
                    pod,
                    start_ms: now,
                    end_ms,
                    warm,
                    cpu: Vec::new(),
                    mem: Vec::new(),
                    now_cpu: 0.0,
                    now_mem: 0.0,
                    now_disk: 0.0,
                },
            );
        }
        let pending = engine.queue().len().total();
        let mem = r.tick_mean_mem();
        r.series.push((rel as f64 / 3_600_000.0, mem, pending));
        if let Some(b) = &bar {
            b.inc(1);
        }
        tokio::time::advance(s.step).await;
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    engine.flush_store().await?;
    r.running_end = running_pods.len();
    r.retries_pending_end = retries.len();
    // Pods that fit no node by requests wait under every policy: not the policy's doing.
    r.infeasible_end = arrived_at
        .values()
        .filter(|(_, a)| plan.workloads[a.workload].infeasible)
        .count();
    r.pending_end = engine
        .queue()
        .len()
        .total()
        .saturating_sub(r.infeasible_end);
    r.warm_running = running_pods.values().filter(|p| p.warm).count();
    r.decision_wall_s = sched_wall.as_secs_f64();
    if let Some(a) = attached {
        a.state.metrics().set_queue_lengths(&engine.queue().len());
    }
    // The decision sink drains; the store's last flush.
    running.stop().await;
    r.fallback_placements = engine.metrics().fallback_placements();
    r.finish();
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each policy's profile: headroom's own plugins off except under `headroom`, the
    /// peer's plugin on (its weight kept from the configuration), Trimaran without
    /// BalancedAllocation.
    #[test]
    fn peer_policies_switch_their_plugin_on_and_headrooms_off() {
        let base = Config::from_yaml("profiles: [{plugins: {Dynamic: {weight: 5}}}]", "t").unwrap();
        let names = |p: Policy| -> Vec<&'static str> {
            let c = p.config(&base);
            crate::plugins::build_framework(&c.profiles[0])
                .unwrap()
                .plugins()
                .iter()
                .map(|r| r.name)
                .collect()
        };
        let peers = crate::plugins::peers::PLUGINS;
        for (p, on) in [
            (Policy::TrimaranTlp, "TargetLoadPacking"),
            (Policy::TrimaranLvrb, "LoadVariationRiskBalancing"),
            (Policy::Koordinator, "LoadAwareScheduling"),
            (Policy::Crane, "Dynamic"),
        ] {
            let n = names(p);
            assert!(n.contains(&on), "{p:?}: {n:?}");
            assert!(
                !n.contains(&"RealMemoryFit") && !n.contains(&"History"),
                "{p:?}"
            );
            assert_eq!(n.iter().filter(|x| peers.contains(x)).count(), 1, "{p:?}");
            assert_eq!(
                n.contains(&"NodeResourcesBalancedAllocation"),
                !p.as_str().starts_with("trimaran"),
                "{p:?}"
            );
            assert!(crate::plugins::peers::enabled_in(&p.config(&base)));
        }
        assert!(names(Policy::Headroom).contains(&"RealHeadroom"));
        assert!(!crate::plugins::peers::enabled_in(
            &Policy::Requests.config(&base)
        ));
        let c = Policy::Crane.config(&base);
        assert_eq!(c.profiles[0].plugins["Dynamic"].weight, Some(5));
        for p in Policy::ALL {
            let parsed = <Policy as clap::ValueEnum>::from_str(p.as_str(), false).unwrap();
            assert_eq!(parsed, p);
        }
    }
}

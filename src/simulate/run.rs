//! One policy's run on the [`Engine`], driven by hand on simulated time: [`run_policy`] sets
//! the engine up and [`Sim`] plays the ticks, one method per step of a tick, in the order
//! they happen — events, Job retries, arrivals, completions, demand, what overcommit costs,
//! usage samples, the engine's timers, scheduling.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{
    ApiHook, Arrival, BACKOFF_LIMIT, DISK_FILL_MS, Error, Kill, MAX_RETRY_DELAY_MS, NodeState,
    Options, Plan, Policy, PolicyReport, RETRY_DELAY_MS, Running, Scenario, SimBinder, amount,
    attach, make_nodes, plan, pod_of, run_time_ms, scenario, start_after, summary,
};
use crate::cluster::ClusterState;
use crate::config::Config;
use crate::decisions::{DecisionLog, OutcomeHandler, Settled};
use crate::engine::{Drive, Engine, Parts};
use crate::scheduling_loop::SchedulingLoop;
use headroom_scheduler::clock::{Clock, ManualTime};
use headroom_scheduler::framework::Nomination;
use headroom_scheduler::key::PodKey;
use headroom_scheduler::reservation::InMemoryReservations;
use headroom_scheduler::usage::file::UsageFile;
use headroom_storage::{Labels, RunRecord, SeriesId, Store};

/// Runs one policy on the [`Engine`], driven by hand on simulated time: per step, the
/// cluster changes go through the engine's cluster state (as watch events would), node
/// samples go into its store, and the engine's refresh, maintenance, queue flushes and
/// housekeeping run at the simulated instants their timers would fire under `serve`;
/// then the real scheduling loop runs until the queue settles. Runs on a paused tokio
/// clock if the caller's runtime is paused (the CLI builds one), so the queue's backoffs
/// follow simulated time.
pub(super) async fn run_policy(
    s: &Scenario,
    base: &Config,
    policy: Policy,
    seed: u64,
    data_dir: Option<PathBuf>,
    options: &Options,
    hook: Option<ApiHook>,
) -> Result<PolicyReport, Error> {
    if policy.is_tuned() && options.tuned.args(policy).is_none() {
        return Err(Error::NotTuned {
            policy: policy.as_str(),
        });
    }
    let mut config = policy.config_tuned(base, &options.tuned);
    // Ties between equally scored nodes are broken by the simulation's seed too, or two
    // runs of one seed would differ.
    config.scheduler.seed = config.scheduler.seed.or(Some(seed));
    let scheduler_names = scheduler_names(s, &config)?;
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
    let timers = Timers {
        refresh_ms,
        maintenance_ms: config.storage.maintenance_interval.as_millis().max(1) as i64,
        cooldown_ms: config.analytics.node_window.as_millis() as i64 + refresh_ms,
    };
    let engine = Engine::new(config, parts)?;
    let outcomes = Arc::new(Preemptions::default());
    let running = engine.start(Drive::Manual, Some(outcomes.clone()))?;
    let attached = hook.map(|h| attach(h, &engine)).transpose()?;
    let fixed = Fixed {
        policy,
        seed,
        epoch,
        scheduler_names,
        timers,
        act_on_advice: options.act_on_advice,
    };
    let mut sim = Sim::new(s, plan, store, engine.clone(), fixed, outcomes)?;
    let ticks = (s.duration.as_millis() as i64 / sim.step_ms) as usize;
    let bar = options.progress.then(|| {
        let b = indicatif::ProgressBar::new(ticks as u64);
        b.set_message(policy.as_str());
        b
    });
    for tick in 0..=ticks {
        let rel = tick as i64 * sim.step_ms;
        sim.tick(&time, rel).await?;
        if let Some(b) = &bar {
            b.inc(1);
        }
        tokio::time::advance(s.step).await;
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let mut r = sim.at_end();
    r.fallback_placements = engine.metrics().fallback_placements();
    r.warm_holds = engine.metrics().warm_holds();
    let from = (ticks as i64 + 1) * sim.step_ms;
    sim.drain(&time, from, s.drain, &mut r).await?;
    sim.end().await?;
    if let Some(a) = attached {
        a.state.metrics().set_queue_lengths(&engine.queue().len());
    }
    // The decision sink drains; the store's last flush.
    running.stop().await;
    r.finish();
    Ok(r)
}

/// Each workload's profile: its `schedulerName`, else the first profile's. A name no
/// profile has would leave its pods pending forever, as `serve` would (they are not ours):
/// an error naming the field.
fn scheduler_names(s: &Scenario, config: &Config) -> Result<Vec<String>, Error> {
    let first_profile = config
        .profiles
        .first()
        .map(|p| p.scheduler_name.clone())
        .unwrap_or_default();
    let mut names = Vec::with_capacity(s.workloads.len());
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
        names.push(name);
    }
    Ok(names)
}

/// The simulator's [`OutcomeHandler`]: keeps the preemptions the step's decisions asked
/// for, acted on once the step's decisions are settled ([`Sim::preempt`]). (Placements
/// need nothing here: the binder started them, and the engine's sink wrote the placement
/// history.)
#[derive(Default)]
struct Preemptions(std::sync::Mutex<Vec<Nomination>>);

impl OutcomeHandler for Preemptions {
    fn settled(&self, s: Settled) {
        if let Some(n) = s.nomination {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).push(n);
        }
    }
}

/// The engine's timed work, in milliseconds of simulated time.
struct Timers {
    /// The analytics refresh (and the advice on its view).
    refresh_ms: i64,
    /// The store's maintenance.
    maintenance_ms: i64,
    /// How long a node acted on by the advice is left alone: until its windowed usage no
    /// longer shows the pods that left.
    cooldown_ms: i64,
}

/// What the run is, besides the scenario, its plan, store and engine.
struct Fixed {
    policy: Policy,
    /// The simulation's seed (the pods' usage draws).
    seed: u64,
    /// The run's first instant, ms since the Unix epoch.
    epoch: i64,
    /// Each workload's profile.
    scheduler_names: Vec<String>,
    timers: Timers,
    /// `--act-on-advice`.
    act_on_advice: bool,
}

/// One policy's simulation: what is fixed for the run, and what each tick changes.
struct Sim<'a> {
    s: &'a Scenario,
    plan: Plan,
    store: Store,
    engine: Arc<Engine>,
    cluster: Arc<ClusterState>,
    binder: Arc<SimBinder>,
    lp: SchedulingLoop,
    preemptions: Arc<Preemptions>,
    fixed: Fixed,
    step_ms: i64,
    eviction_threshold: f64,
    /// The scenario's events other than bursts (planned as arrivals), by time.
    events: Vec<&'a scenario::Event>,
    next_event: usize,
    next_arrival: usize,
    next_refresh: i64,
    next_maintenance: i64,
    r: PolicyReport,
    nodes: Vec<NodeState>,
    node_series: HashMap<String, [SeriesId; 4]>,
    /// Ordered, so float sums (and so the report) are identical run to run.
    running_pods: BTreeMap<PodKey, Running>,
    /// Pods submitted and not placed yet: when they arrived, and what they are.
    arrived_at: HashMap<PodKey, (i64, Arrival)>,
    /// Builds waiting to be placed that the warm wait held: when it first held them.
    held_at: HashMap<PodKey, i64>,
    /// The nodes each builder ran on.
    history: HashMap<(usize, usize), HashSet<String>>,
    resubmits: usize,
    /// Nodes the advice acted on, left alone until then.
    cooldown: HashMap<String, i64>,
    /// Pods to submit again at an instant: (due ms, arrival, name of the pod it replaces).
    retries: Vec<(i64, Arrival, String)>,
    sched_wall: Duration,
    /// In the drain after the scenario's duration ([`Sim::drain`]): nothing arrives.
    draining: bool,
}

impl<'a> Sim<'a> {
    fn new(
        s: &'a Scenario,
        plan: Plan,
        store: Store,
        engine: Arc<Engine>,
        fixed: Fixed,
        preemptions: Arc<Preemptions>,
    ) -> Result<Sim<'a>, Error> {
        let cluster = engine.cluster().clone();
        let binder = Arc::new(SimBinder {
            cluster: cluster.clone(),
            clock: engine.clock().clone(),
            bound: std::sync::Mutex::new(Vec::new()),
        });
        let lp = engine.scheduling_loop(binder.clone(), false, None);
        let nodes = plan.nodes.clone();
        for n in &nodes {
            cluster.apply_node(n.object.clone());
        }
        let mut events: Vec<&scenario::Event> =
            s.events.iter().filter(|e| e.burst.is_none()).collect();
        events.sort_by_key(|e| e.at);
        Ok(Sim {
            eviction_threshold: amount(
                &s.overcommit.eviction_threshold,
                "overcommit.evictionThreshold",
            )?,
            step_ms: s.step.as_millis() as i64,
            next_maintenance: fixed.timers.maintenance_ms,
            r: PolicyReport::new(fixed.policy),
            s,
            plan,
            store,
            engine,
            cluster,
            binder,
            lp,
            preemptions,
            fixed,
            events,
            next_event: 0,
            next_arrival: 0,
            next_refresh: 0,
            nodes,
            node_series: HashMap::new(),
            running_pods: BTreeMap::new(),
            arrived_at: HashMap::new(),
            held_at: HashMap::new(),
            history: HashMap::new(),
            resubmits: 0,
            cooldown: HashMap::new(),
            retries: Vec::new(),
            sched_wall: Duration::ZERO,
            draining: false,
        })
    }

    /// One tick at `rel` ms into the run.
    async fn tick(&mut self, time: &ManualTime, rel: i64) -> Result<(), Error> {
        let now = self.fixed.epoch + rel;
        time.set(now);
        self.engine.housekeeping();
        if !self.draining {
            self.apply_events(rel, now)?;
            self.resubmit_due(now)?;
            self.arrive(rel)?;
        }
        self.complete(now)?;
        let demand = self.demand(now);
        let (share, victims) = self.overcommit(&demand);
        for (k, kill) in victims {
            self.take_off(k, kill, now)?;
        }
        self.sample(now, &share)?;
        self.timers(rel, now).await?;
        self.engine.flush_queue();
        self.schedule(now).await;
        self.preempt(now)?;
        let pending = self.engine.queue().len().total();
        let mem = self.r.tick_mean_mem();
        self.r.series.push((rel as f64 / 3_600_000.0, mem, pending));
        Ok(())
    }

    /// Submits `a`'s pod as `name`, with its profile.
    fn submit(&self, a: &Arrival, name: &str) -> Result<(), Error> {
        self.cluster.apply_pod(pod_of(
            self.s,
            &self.plan,
            a,
            name,
            &self.fixed.scheduler_names[a.workload],
        )?);
        Ok(())
    }

    /// Submits a pod again (a controller's new pod for a lost one), as `{old}-r{n}`.
    fn resubmit(&mut self, a: Arrival, old: &str, now: i64) -> Result<(), Error> {
        self.resubmits += 1;
        let pname = format!("{old}-r{}", self.resubmits);
        let key = PodKey::new(
            self.s.workloads[a.workload].namespace.as_str(),
            pname.as_str(),
        );
        self.arrived_at.insert(key, (now, a.clone()));
        self.r.arrived += 1;
        self.r.resubmitted += 1;
        self.submit(&a, &pname)
    }

    /// Takes pod `k` off its node for `kill`: a service or database OOM-killed restarts in
    /// place; anything else leaves (a build fails and its pipeline runs it again from
    /// scratch; an evicted or moved pod's controller makes a new one) and is submitted
    /// again for the scheduler to place anew.
    fn take_off(&mut self, k: PodKey, kill: Kill, now: i64) -> Result<(), Error> {
        let Some(mut p) = self.running_pods.remove(&k) else {
            return Ok(());
        };
        match kill {
            Kill::Oom => self.r.oom_kills += 1,
            Kill::Evicted => self.r.evictions += 1,
            Kill::Moved => self.r.advice_moves += 1,
            Kill::Preempted => self.r.preemptions += 1,
        }
        if kill == Kill::Oom && p.arrival.builder.is_none() {
            // restartPolicy Always: its memory builds up again from nothing.
            p.start_ms = now;
            p.now_mem = 0.0;
            self.running_pods.insert(k, p);
            return Ok(());
        }
        self.cluster.delete_pod(&p.pod);
        self.r.lost_and_resubmitted += 1;
        if let Some(builder) = p.arrival.builder_name(self.s) {
            self.r.build_ms_lost += (now - p.start_ms) as f64;
            // The collectors saw the run until it ended: its samples are a run record like
            // any other (profiles learn from failed runs).
            if !p.mem.is_empty() {
                self.store.put_run(&builder, &run_record(&p, now))?;
            }
        }
        let mut again = p.arrival.clone();
        if again.builder.is_some() {
            // Its Job makes a new pod after a backoff, until backoffLimit.
            again.restarts += 1;
            if again.restarts > BACKOFF_LIMIT {
                self.r.builds_failed += 1;
            } else {
                let delay =
                    (RETRY_DELAY_MS << (again.restarts - 1).min(16)).min(MAX_RETRY_DELAY_MS);
                self.retries.push((now + delay, again, p.name.clone()));
            }
        } else {
            // A ReplicaSet replaces its pod at once.
            self.retries.push((now, again, p.name.clone()));
        }
        Ok(())
    }

    /// The scenario's events due by `rel`: cordons, nodes added and removed (a removed
    /// node's pods are lost; their controllers make new ones).
    fn apply_events(&mut self, rel: i64, now: i64) -> Result<(), Error> {
        while self.next_event < self.events.len()
            && self.events[self.next_event].at.as_millis() as i64 <= rel
        {
            let e = self.events[self.next_event];
            self.next_event += 1;
            if let Some(name) = e.cordon.as_ref().or(e.uncordon.as_ref()) {
                if let Some(n) = self.nodes.iter_mut().find(|n| &n.name == name) {
                    n.object
                        .spec
                        .get_or_insert_with(Default::default)
                        .unschedulable = Some(e.cordon.is_some());
                    self.cluster.apply_node(n.object.clone());
                }
            } else if let Some(spec) = &e.add_nodes {
                for n in make_nodes(spec, "events.addNodes", 0)? {
                    if self.nodes.iter().any(|x| x.name == n.name) {
                        continue;
                    }
                    self.cluster.apply_node(n.object.clone());
                    self.nodes.push(n);
                }
            } else if let Some(name) = &e.remove_node {
                self.nodes.retain(|n| &n.name != name);
                let lost: Vec<PodKey> = self
                    .running_pods
                    .iter()
                    .filter(|(_, p)| &p.node == name)
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in lost {
                    if let Some(p) = self.running_pods.remove(&k) {
                        self.cluster.delete_pod(&p.pod);
                        self.r.lost_and_resubmitted += 1;
                        self.resubmit(p.arrival, &p.name, now)?;
                    }
                }
                self.cluster.delete_node(name);
            }
        }
        Ok(())
    }

    /// Pods their controllers make again (Job retries after their backoff).
    fn resubmit_due(&mut self, now: i64) -> Result<(), Error> {
        self.retries.sort_by_key(|(due, a, _)| (*due, a.seq));
        while self.retries.first().is_some_and(|(due, _, _)| *due <= now) {
            let (_, a, old) = self.retries.remove(0);
            self.resubmit(a, &old, now)?;
        }
        Ok(())
    }

    /// The planned arrivals up to `rel`.
    fn arrive(&mut self, rel: i64) -> Result<(), Error> {
        while self.next_arrival < self.plan.arrivals.len()
            && self.plan.arrivals[self.next_arrival].at_ms <= rel
        {
            let a = self.plan.arrivals[self.next_arrival].clone();
            self.next_arrival += 1;
            let w = &self.s.workloads[a.workload];
            let name = a.pod_name(self.s);
            self.arrived_at.insert(
                PodKey::new(w.namespace.as_str(), name.as_str()),
                (self.fixed.epoch + a.at_ms, a.clone()),
            );
            self.r.arrived += 1;
            self.submit(&a, &name)?;
        }
        Ok(())
    }

    /// Completions: the pod leaves the cluster; its run is recorded as the collectors' run
    /// detection would record it.
    fn complete(&mut self, now: i64) -> Result<(), Error> {
        let done: Vec<PodKey> = self
            .running_pods
            .iter()
            .filter(|(_, p)| p.end_ms.is_some_and(|e| e <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &done {
            let Some(p) = self.running_pods.remove(k) else {
                continue;
            };
            self.cluster.delete_pod(&p.pod);
            self.r.completed += 1;
            if let Some(builder) = p.arrival.builder_name(self.s) {
                self.store.put_run(&builder, &run_record(&p, now))?;
                // From its first arrival (its Job's retries included) to now.
                let arrived = self.fixed.epoch + p.arrival.at_ms;
                let got = (now - arrived) as f64 / 1000.0;
                self.r.turnarounds_s.push(got);
                if let (Some(h), Some(base)) = (p.held_ms, p.arrival.base_ms) {
                    let cold = (h + base - arrived) as f64 / 1000.0;
                    self.r.held_s.push((got, cold));
                }
            }
        }
        Ok(())
    }

    /// What each pod demands this step (its rng draws do not depend on what happens to
    /// other pods, so policies stay comparable), summed per node: (CPU, memory).
    fn demand(&mut self, now: i64) -> HashMap<String, (f64, f64)> {
        let mut demand: HashMap<String, (f64, f64)> = self
            .nodes
            .iter()
            .map(|n| (n.name.clone(), (0.0, 0.0)))
            .collect();
        for p in self.running_pods.values_mut() {
            let w = &self.s.workloads[p.arrival.workload];
            let n = &self.plan.workloads[p.arrival.workload];
            let age = (now - p.start_ms) as f64;
            let jitter = |rng: &mut SmallRng| 1.0 + w.noise * (2.0 * rng.random::<f64>() - 1.0);
            p.now_cpu = n.req_cpu * p.arrival.cpu_factor * jitter(&mut p.rng);
            p.now_mem = n.req_mem
                * p.arrival.mem_factor
                * ramp_share(age, w.memory_ramp)
                * (1.0 + (jitter(&mut p.rng) - 1.0) * 0.3);
            p.now_disk = n.disk * (age / DISK_FILL_MS).clamp(0.05, 1.0);
            if let Some(u) = demand.get_mut(p.node.as_str()) {
                u.0 += p.now_cpu;
                u.1 += p.now_mem;
            }
        }
        demand
    }

    /// What overcommit costs: the CPU share each node can give, and the pods the kernel
    /// (OOM) and the kubelet (eviction) take out.
    fn overcommit(
        &self,
        demand: &HashMap<String, (f64, f64)>,
    ) -> (HashMap<String, f64>, Vec<(PodKey, Kill)>) {
        let oc = &self.s.overcommit;
        let mut share = HashMap::new();
        let mut victims = Vec::new();
        for n in &self.nodes {
            let (cpu, mem) = demand[n.name.as_str()];
            let avail = (n.cpu - n.sys_cpu).max(0.0);
            if oc.cpu_contention && cpu > avail && cpu > 0.0 {
                share.insert(n.name.clone(), avail / cpu);
            }
            let mut total = n.sys_mem + mem;
            let over = oc.oom_kill && total > n.mem;
            let pressure = oc.eviction && n.mem - total < self.eviction_threshold;
            if !over && !pressure {
                continue;
            }
            // (key, memory, request) of the pods on the node.
            let mut on: Vec<(&PodKey, f64, f64)> = self
                .running_pods
                .iter()
                .filter(|(_, p)| p.node == n.name)
                .map(|(k, p)| {
                    (
                        k,
                        p.now_mem,
                        self.plan.workloads[p.arrival.workload].req_mem,
                    )
                })
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
            if oc.eviction && n.mem - total < self.eviction_threshold && !on.is_empty() {
                // The kubelet: one pod per pass, pods above their requests first, the most
                // above first.
                on.sort_by(|a, b| {
                    let above = |x: &(&PodKey, f64, f64)| x.1 > x.2;
                    above(b)
                        .cmp(&above(a))
                        .then((b.1 - b.2).total_cmp(&(a.1 - a.2)))
                        .then(a.0.cmp(b.0))
                });
                victims.push((on[0].0.clone(), Kill::Evicted));
            }
        }
        (share, victims)
    }

    /// Usage samples: what each node really uses this step, after the kills and within the
    /// CPU each pod could get, into the store and the report; contention stretches the
    /// builds' run time.
    fn sample(&mut self, now: i64, share: &HashMap<String, f64>) -> Result<(), Error> {
        let step_ms = self.step_ms;
        // (CPU, memory, disk, the largest pod's memory) in use on each node.
        let mut node_use: HashMap<&str, (f64, f64, f64, f64)> = self
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), (n.sys_cpu, n.sys_mem, 0.0, 0.0)))
            .collect();
        // Each build's container as a kubelet reports it: the scheduler's measure of how
        // much of a just-placed pod's prediction its node already shows.
        let mut pod_samples = Vec::with_capacity(2 * self.running_pods.len());
        for (key, p) in self.running_pods.iter_mut() {
            let f = share.get(p.node.as_str()).copied().unwrap_or(1.0);
            let cpu = p.now_cpu * f;
            p.cpu.push(cpu);
            p.mem.push(p.now_mem);
            let ids = match p.series {
                Some(ids) => ids,
                None => {
                    let l = Labels::new([
                        ("container", "build"),
                        ("namespace", &*key.namespace),
                        ("node", p.node.as_str()),
                        ("pod", &*key.name),
                    ])?;
                    let ids = [
                        self.store.series_id("container_cpu_usage_cores", &l)?,
                        self.store
                            .series_id("container_memory_working_set_bytes", &l)?,
                    ];
                    p.series = Some(ids);
                    ids
                }
            };
            pod_samples.push((ids[0], now, cpu));
            pod_samples.push((ids[1], now, p.now_mem));
            if let Some(u) = node_use.get_mut(p.node.as_str()) {
                u.0 += cpu;
                u.1 += p.now_mem;
                u.2 += p.now_disk;
                u.3 = u.3.max(p.now_mem);
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
                self.r.build_ms_slowed += (new_end - end) as f64;
                p.end_ms = Some(new_end);
            }
        }
        let busy_nodes: HashSet<&str> = self
            .running_pods
            .values()
            .map(|p| p.node.as_str())
            .collect();
        let mut mem_utils = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            let (cpu, mem, disk, largest) = node_use[n.name.as_str()];
            let cpu = cpu.min(n.cpu);
            let (cu, mu) = (cpu / n.cpu.max(1e-9), mem / n.mem.max(1e-9));
            let one_pod = (n.sys_mem + largest) / n.mem.max(1e-9);
            self.r.observe_node(
                cu,
                mu,
                one_pod,
                step_ms,
                busy_nodes.contains(n.name.as_str()),
            );
            mem_utils.push(mu);
            // The kubelet's housekeeping read the node's cgroup within this step, or the
            // node's newest sample stays the last one read (its pods' are this step's).
            if n.stats
                .is_some_and(|p| p.last_refresh(&n.name, now) <= now - step_ms)
            {
                continue;
            }
            let ids = match self.node_series.get(&n.name) {
                Some(ids) => *ids,
                None => {
                    let l = Labels::new([("node", n.name.as_str())])?;
                    let ids = [
                        self.store.series_id("node_cpu_usage_cores", &l)?,
                        self.store.series_id("node_memory_working_set_bytes", &l)?,
                        self.store.series_id("node_fs_available_bytes", &l)?,
                        self.store.series_id("node_fs_capacity_bytes", &l)?,
                    ];
                    self.node_series.insert(n.name.clone(), ids);
                    ids
                }
            };
            self.store.append_many(&[
                (ids[0], now, cpu),
                (ids[1], now, mem),
                (ids[2], now, (n.disk - disk).max(0.0)),
                (ids[3], now, n.disk),
            ])?;
        }
        self.r.observe_spread(&mut mem_utils);
        self.store.append_many(&pod_samples)?;
        Ok(())
    }

    /// The engine's timed work, at the simulated instants its timers would fire; the
    /// descheduling advice on each fresh view, as `/advice` would serve it, acted on if
    /// asked. A node acted on is left alone until its windowed usage no longer shows the
    /// pods that left (the advice cannot know they left).
    async fn timers(&mut self, rel: i64, now: i64) -> Result<(), Error> {
        if rel >= self.next_maintenance {
            self.engine.maintain_store().await?;
            self.next_maintenance = rel + self.fixed.timers.maintenance_ms;
        }
        if rel < self.next_refresh {
            return Ok(());
        }
        self.engine.refresh_usage().await?;
        self.next_refresh = rel + self.fixed.timers.refresh_ms;
        let advice = self.engine.advice();
        self.r.advice_hot_node_ms +=
            advice.hot_nodes.len() as f64 * self.fixed.timers.refresh_ms as f64;
        if !self.fixed.act_on_advice {
            return Ok(());
        }
        for hot in &advice.hot_nodes {
            if self.cooldown.get(&hot.node).is_some_and(|t| *t > now) || hot.moves.is_empty() {
                continue;
            }
            for m in &hot.moves {
                self.take_off(m.pod.clone(), Kill::Moved, now)?;
            }
            self.cooldown
                .insert(hot.node.clone(), now + self.fixed.timers.cooldown_ms);
        }
        Ok(())
    }

    /// Schedules everything that is due, then starts the pods bound: time to schedule,
    /// warm-cache placements (a builder back on a node it ran on) and their speed-up.
    async fn schedule(&mut self, now: i64) {
        let stats = self.lp.run_until_settled().await;
        // The step's placements reach the store's placement history (the engine's sink
        // writes it, as under `serve`) before simulated time moves on.
        self.engine.settle_decisions().await;
        self.r.attempts += stats.attempts as usize;
        self.r.unschedulable_attempts += stats.unschedulable as usize;
        self.sched_wall += stats.cycle_time;
        let bound = self.binder.take();
        // Room by requests on each schedulable node, the step's placements taken off as they
        // are counted: whether a cold placement had a warm node with room
        // (`coldWithWarmRoom`).
        let mut free = if bound.is_empty() {
            HashMap::new()
        } else {
            self.free_by_requests()
        };
        for (key, node, pod) in bound {
            let Some((at, a)) = self.arrived_at.remove(&key) else {
                continue;
            };
            let key_held = key.clone();
            self.r.placed += 1;
            self.r.latencies_s.push((now - at) as f64 / 1000.0);
            let w = &self.plan.workloads[a.workload];
            let mut warm = false;
            if let Some(b) = a.builder {
                let seen = self.history.entry((a.workload, b)).or_default();
                if !seen.is_empty() {
                    self.r.repeat_placements += 1;
                    warm = seen.contains(&node);
                    if warm {
                        self.r.warm_placements += 1;
                    } else {
                        if has_room(&free, seen, (w.req_cpu, w.req_mem)) {
                            self.r.cold_with_warm_room += 1;
                        }
                        match warm_choice(self.engine.decision_log(), &key, seen) {
                            WarmChoice::Filtered => {}
                            WarmChoice::Unscored => self.r.cold_warm_feasible += 1,
                            WarmChoice::Outscored => {
                                self.r.cold_warm_feasible += 1;
                                self.r.cold_warm_outscored += 1;
                            }
                        }
                    }
                }
                seen.insert(node.clone());
            }
            if let Some(room) = free.get_mut(&node) {
                room.0 -= w.req_cpu;
                room.1 -= w.req_mem;
            }
            let speedup = self.s.workloads[a.workload].warm_speedup;
            let end_ms = a.base_ms.map(|base| {
                if warm {
                    self.r.build_ms_saved += base as f64 * speedup;
                }
                let run = run_time_ms(base, speedup, warm);
                self.r.build_ms_planned += run;
                now + run as i64
            });
            let name = pod.metadata.name.clone().unwrap_or_default();
            let rng = SmallRng::seed_from_u64(
                self.fixed.seed ^ (a.seq as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            );
            self.running_pods.insert(
                key,
                Running {
                    rng,
                    arrival: a,
                    name,
                    node,
                    pod,
                    start_ms: now,
                    end_ms,
                    warm,
                    held_ms: self.held_at.remove(&key_held),
                    cpu: Vec::new(),
                    mem: Vec::new(),
                    now_cpu: 0.0,
                    now_mem: 0.0,
                    now_disk: 0.0,
                    series: None,
                },
            );
        }
        self.note_holds();
    }

    /// Notes when the warm wait first held each build still waiting (its latest decision
    /// in the log is a hold), for the turnaround a hold bought (`heldBuilds`).
    fn note_holds(&mut self) {
        let log = self.engine.decision_log();
        for (key, (_, a)) in &self.arrived_at {
            if a.builder.is_none() || self.held_at.contains_key(key) {
                continue;
            }
            if let Some(l) = log.by_pod(key)
                && l.decision.warm_hold.is_some()
            {
                self.held_at.insert(key.clone(), l.decided_at_ms);
            }
        }
    }

    /// CPU (cores) and memory (bytes) left by requests on each node the scheduler may use
    /// (not cordoned): its allocatable, as the scheduler reads it from the Node object
    /// (`systemCpu`/`systemMemory` are the daemons' real use, not a reservation), less the
    /// requests of the pods running there.
    fn free_by_requests(&self) -> HashMap<String, (f64, f64)> {
        let mut out: HashMap<String, (f64, f64)> = self
            .nodes
            .iter()
            .filter(|n| {
                !n.object
                    .spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false)
            })
            .filter_map(|n| {
                let a = headroom_scheduler::resources::node_allocatable(&n.object).ok()?;
                Some((
                    n.name.clone(),
                    (a.milli_cpu as f64 / 1000.0, a.memory as f64),
                ))
            })
            .collect();
        for p in self.running_pods.values() {
            let w = &self.plan.workloads[p.arrival.workload];
            if let Some(room) = out.get_mut(&p.node) {
                room.0 -= w.req_cpu;
                room.1 -= w.req_mem;
            }
        }
        out
    }

    /// Preemption, as `serve`'s reporter acts on it: each nominated node's victims leave
    /// (their controllers make them again); the preemptor, already nominated there in the
    /// scheduler's snapshot, is retried when the deletions reach the queue.
    fn preempt(&mut self, now: i64) -> Result<(), Error> {
        let nominations =
            std::mem::take(&mut *self.preemptions.0.lock().unwrap_or_else(|e| e.into_inner()));
        for n in nominations {
            for v in &n.victims {
                self.take_off(v.key(), Kill::Preempted, now)?;
            }
        }
        Ok(())
    }

    /// The report at the end of the scenario's duration, with what is left then.
    fn at_end(&self) -> PolicyReport {
        let mut r = self.r.clone();
        r.running_end = self.running_pods.len();
        r.retries_pending_end = self.retries.len();
        r.infeasible_end = self.infeasible_pending();
        r.pending_end = self.pending();
        r.warm_running = self.running_pods.values().filter(|p| p.warm).count();
        r.decision_wall_s = self.sched_wall.as_secs_f64();
        r
    }

    /// Pending pods that fit no node by requests: they wait under every policy, not the
    /// policy's doing.
    fn infeasible_pending(&self) -> usize {
        self.arrived_at
            .values()
            .filter(|(_, a)| self.plan.workloads[a.workload].infeasible)
            .count()
    }

    /// Pending pods some node could hold by requests.
    fn pending(&self) -> usize {
        self.engine
            .queue()
            .len()
            .total()
            .saturating_sub(self.infeasible_pending())
    }

    /// The drain: from `from` ms into the run, ticks with nothing arriving (no planned
    /// arrivals, events or controllers' retries: pods made after the end are not the
    /// run's) for at most `drain`, until no pending pod is left; into `r` (the report at
    /// the end, which keeps every other measurement) what it placed and what it left. The
    /// farm's usage, kills and completions go on as in any tick, so pods waiting for room
    /// see it come, but nothing of them reaches `r`.
    async fn drain(
        &mut self,
        time: &ManualTime,
        from: i64,
        drain: Duration,
        r: &mut PolicyReport,
    ) -> Result<(), Error> {
        self.draining = true;
        let (placed, waits) = (self.r.placed, self.r.latencies_s.len());
        let until = from + drain.as_millis() as i64 - self.step_ms;
        let mut rel = from;
        while rel <= until && self.pending() > 0 {
            self.tick(time, rel).await?;
            tokio::time::advance(Duration::from_millis(self.step_ms as u64)).await;
            rel += self.step_ms;
        }
        r.pending_after_drain = self.pending();
        r.drain_placed = self.r.placed - placed;
        r.drain_wait_max_s = self.r.latencies_s[waits..]
            .iter()
            .copied()
            .fold(0.0, f64::max);
        Ok(())
    }

    /// The store's last flush.
    async fn end(self) -> Result<(), Error> {
        self.engine.flush_store().await?;
        Ok(())
    }
}

/// How the cycle that placed a repeat build cold treated the nodes the builder ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WarmChoice {
    /// Every warm node was filtered out (or the cycle is not in the log).
    Filtered,
    /// Some warm node was feasible, and History gave none of them points: its band judged
    /// them too hot, they were further back than the history it keeps, or it did not score
    /// (the request baseline, a fallback cycle).
    Unscored,
    /// History gave a feasible warm node points and the other scores outweighed them.
    Outscored,
}

/// [`WarmChoice`] of `key`'s cycle, from the engine's decision log (what `/explain` reads):
/// its feasible nodes and History's raw score of each.
fn warm_choice(log: &DecisionLog, key: &PodKey, warm: &HashSet<String>) -> WarmChoice {
    let Some(logged) = log.by_pod(key) else {
        return WarmChoice::Filtered;
    };
    let d = &logged.decision;
    let history = d
        .scores
        .iter()
        .find(|c| c.plugin == headroom_scheduler::plugins::history::NAME);
    let mut feasible = false;
    for (pos, &i) in d.feasible.iter().enumerate() {
        if !d
            .node_names
            .get(i as usize)
            .is_some_and(|n| warm.contains(&**n))
        {
            continue;
        }
        feasible = true;
        if history.is_some_and(|c| c.raw_score(pos) > 0) {
            return WarmChoice::Outscored;
        }
    }
    if feasible {
        WarmChoice::Unscored
    } else {
        WarmChoice::Filtered
    }
}

/// Whether one of the `warm` nodes has room by requests (`free`, as
/// `Sim::free_by_requests` gives it) for a pod of `need` (cores, bytes).
fn has_room(free: &HashMap<String, (f64, f64)>, warm: &HashSet<String>, need: (f64, f64)) -> bool {
    // A hair of tolerance: requests summed in floating point must not turn a fit away.
    const EPS: f64 = 1e-6;
    warm.iter().any(|n| {
        free.get(n)
            .is_some_and(|(cpu, mem)| cpu + EPS >= need.0 && mem + EPS >= need.1)
    })
}

/// The share of its working set a pod holds `age_ms` into its run: from a tenth at the start
/// to all of it after `ramp`.
pub(super) fn ramp_share(age_ms: f64, ramp: std::time::Duration) -> f64 {
    let ramp_ms = ramp.as_millis() as f64;
    if ramp_ms <= 0.0 {
        return 1.0;
    }
    (age_ms / ramp_ms).clamp(0.1, 1.0)
}

/// A pod's run as the collectors' run detection records it, ended at `end_ms`.
fn run_record(p: &Running, end_ms: i64) -> RunRecord {
    RunRecord {
        pod_uid: format!("sim-{}", p.name),
        node: p.node.clone(),
        start_ms: p.start_ms,
        end_ms,
        cpu: summary(&p.cpu),
        memory: summary(&p.mem),
    }
}

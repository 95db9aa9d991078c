//! The scheduler core: profiles, the snapshot, and the assume-before-bind cache.
//!
//! `schedule_one` runs a cycle for one pod; when a node is chosen the pod is *assumed* there at
//! once (added to the snapshot), so the next cycle already counts it, before the asynchronous
//! bind completes. A bind that fails is `forget`-ten (the pod leaves the node and goes back to
//! the queue); a successful one is `confirm`-ed. An assumed pod that is neither confirmed nor
//! forgotten within `assume_ttl` after its bind finished expires, so a lost watch event cannot
//! leak capacity forever.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::analytics::UsageView;
use crate::config::{Config, ConfigError};
use crate::framework::{CycleState, Decision, Fallback, Framework, Outcome, Status};
use crate::key::PodKey;
use crate::plugins::volume_binding::{self, Reserved};
use crate::plugins::{PluginDeps, build_framework_with};
use crate::snapshot::volumes::claim_key;
use crate::snapshot::{PodInfo, Snapshot};
use crate::usage::wait::{Wait, relaxable_rejections, waiting_message};
use crate::usage::{PodUsage, RecentPlacement, release_cycle_usage};

/// What happened to a pod in one `schedule_one` call.
#[derive(Debug)]
pub struct Attempt {
    /// The decision record.
    pub decision: Decision,
    /// The pod as assumed on its node (with `spec.nodeName` set), when placed.
    pub assumed: Option<Arc<PodInfo>>,
    /// Set when the pod could not enter scheduling (gates) — not a failed attempt.
    pub gated: Option<Status>,
    /// When placed: the pod's builder identity and predicted usage, as recorded for
    /// compensation and history (callers persist the placement in the store with it).
    pub placement: Option<RecentPlacementOf>,
    /// When placed and some PreBind plugin has work for the pod (VolumeBinding writing
    /// PV claimRefs): what the binding task runs before the bind.
    pub pre_bind: Option<PreBind>,
}

/// The binding cycle's PreBind for one placed pod: the profile's framework and the cycle
/// state Reserve left (upstream hands the binding cycle the same state).
pub struct PreBind {
    frameworks: Arc<[Framework]>,
    idx: usize,
    state: CycleState,
}

impl std::fmt::Debug for PreBind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PreBind({})", self.frameworks[self.idx].profile())
    }
}

impl PreBind {
    /// Runs the PreBind plugins (outside the cycle; may wait, bounded, on the API).
    pub async fn run(&self, pod: &PodInfo, node: &str) -> Status {
        self.frameworks[self.idx]
            .pre_bind(&self.state, pod, node)
            .await
    }

    /// Runs Unreserve after a failed PreBind (the scheduler's `forget` restores what was
    /// assumed in the snapshot).
    pub fn unreserve(&mut self, pod: &PodInfo, node: &str) {
        self.frameworks[self.idx].unreserve(&mut self.state, pod, node);
    }
}

/// A placement as the scheduler recorded it in the usage context.
#[derive(Debug, Clone, PartialEq)]
pub struct RecentPlacementOf {
    /// Builder identity (the collectors' rule).
    pub builder: headroom_collectors::BuilderId,
    /// Node.
    pub node: String,
    /// What was recorded.
    pub recent: RecentPlacement,
}

/// What assuming a pod produced: the pod on its node, its recorded placement, and the PVs
/// chosen for its claims (`namespace/claim` → PV).
type Assumption = (Arc<PodInfo>, RecentPlacementOf, BTreeMap<String, String>);

struct Assumed {
    node: String,
    uid: String,
    /// PVs assumed bound to the pod's claims (restored when the pod is forgotten).
    volumes: Vec<String>,
    /// Set once binding finished; the entry expires at this instant unless confirmed.
    deadline: Option<Instant>,
}

/// How long a placement counts as "recent" at most when the node's metrics never catch up
/// (10 minutes: far beyond any scrape interval, short enough not to hoard capacity).
pub const RECENT_MAX_AGE_MS: i64 = 10 * 60 * 1000;

/// Profiles, snapshot and assumed pods.
pub struct Scheduler {
    /// Shared with the queue's PreEnqueue check (frameworks are immutable once built).
    frameworks: Arc<[Framework]>,
    snapshot: Arc<Snapshot>,
    rng: SmallRng,
    assumed: HashMap<PodKey, Assumed>,
    assume_ttl: Duration,
    deps: PluginDeps,
    /// Changes that had to copy the whole snapshot because a reader still held it
    /// (`headroom_scheduler_snapshot_copies_total`): each costs O(nodes + pods).
    snapshot_copies: prometheus_client::metrics::counter::Counter,
}

/// A copy of the scheduler's snapshot for readers outside the scheduling cycle that must
/// not hold the scheduler's lock (the extender's requests), refreshed only when the
/// snapshot changed since and the copy is older than its budget allows.
///
/// Why a copy: a reader holding the scheduler's own `Arc<Snapshot>` makes the next change
/// (a watch event, an assumed pod) copy the whole snapshot under the lock, O(nodes + pods),
/// whenever the two overlap. Here the copying is explicit and bounded: a refresh is due
/// once the copy is older than `COPY_BUDGET` times what the last copy took (3 ms at 5,000
/// nodes: at most every 60 ms), and never sooner than `min_age` — so copies cost at most
/// about 1/`COPY_BUDGET` of a core whatever the cluster's size, and a request never waits
/// for a cycle. The price is staleness of up to that age.
pub struct ReadCopy {
    scheduler: Arc<std::sync::Mutex<Scheduler>>,
    min_age: Duration,
    slot: std::sync::Mutex<Option<Copied>>,
}

/// The copy a [`ReadCopy`] hands out, and what it cost.
struct Copied {
    snapshot: Arc<Snapshot>,
    generation: u64,
    taken: Instant,
    took: Duration,
}

/// How many times its own cost a copy must age before the next ([`ReadCopy`]).
const COPY_BUDGET: u32 = 20;

impl ReadCopy {
    /// Copies of `scheduler`'s snapshot, each kept at least `min_age`.
    pub fn new(scheduler: Arc<std::sync::Mutex<Scheduler>>, min_age: Duration) -> ReadCopy {
        ReadCopy {
            scheduler,
            min_age,
            slot: std::sync::Mutex::new(None),
        }
    }

    /// The copy, refreshed first when it is due and the scheduler's snapshot has changed.
    pub fn current(&self) -> Arc<Snapshot> {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = &*slot
            && c.taken.elapsed() < self.min_age.max(c.took * COPY_BUDGET)
        {
            return c.snapshot.clone();
        }
        let s = self.scheduler.lock().unwrap_or_else(|e| e.into_inner());
        let generation = s.snapshot.generation();
        if let Some(c) = &mut *slot
            && c.generation == generation
        {
            c.taken = Instant::now();
            return c.snapshot.clone();
        }
        // A deep copy: the scheduler's own Arc stays unshared, so its changes stay cheap.
        let started = Instant::now();
        let snapshot = Arc::new(Snapshot::clone(&s.snapshot));
        drop(s);
        *slot = Some(Copied {
            snapshot: snapshot.clone(),
            generation,
            taken: Instant::now(),
            took: started.elapsed(),
        });
        snapshot
    }
}

/// `Arc::make_mut`, counting the copies it makes.
fn make_mut<'a>(
    snapshot: &'a mut Arc<Snapshot>,
    copies: &prometheus_client::metrics::counter::Counter,
) -> &'a mut Snapshot {
    if Arc::strong_count(snapshot) > 1 {
        copies.inc();
    }
    Arc::make_mut(snapshot)
}

impl Scheduler {
    /// Builds the scheduler from a configuration, with default plugin dependencies (no
    /// reservations).
    pub fn new(config: &Config) -> Result<Scheduler, ConfigError> {
        Scheduler::with_deps(config, &PluginDeps::from_config(config))
    }

    /// Builds the scheduler from a configuration and the handles plugins hold.
    pub fn with_deps(config: &Config, deps: &PluginDeps) -> Result<Scheduler, ConfigError> {
        let frameworks = config
            .profiles
            .iter()
            .map(|p| build_framework_with(p, deps))
            .collect::<Result<Arc<[_]>, _>>()?;
        let rng = match config.scheduler.seed {
            Some(s) => SmallRng::seed_from_u64(s),
            None => SmallRng::from_os_rng(),
        };
        Ok(Scheduler {
            frameworks,
            snapshot: Arc::new(Snapshot::new()),
            rng,
            assumed: HashMap::new(),
            assume_ttl: Duration::from_secs(30),
            deps: deps.clone(),
            snapshot_copies: Default::default(),
        })
    }

    /// Sets how long an assumed pod may stay unconfirmed after its bind finished.
    pub fn set_assume_ttl(&mut self, ttl: Duration) {
        self.assume_ttl = ttl;
    }

    /// The current snapshot (cheap to clone; share it with readers).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.clone()
    }

    /// Mutable access for cluster events (node/pod add, update, delete). Copies the whole
    /// snapshot when a reader still holds it (counted in [`Scheduler::snapshot_copies`]):
    /// readers outside the cycle should hold it briefly, or not at all.
    pub fn snapshot_mut(&mut self) -> &mut Snapshot {
        make_mut(&mut self.snapshot, &self.snapshot_copies)
    }

    /// The counter of whole-snapshot copies (a handle: register it on the metrics).
    pub fn snapshot_copies(&self) -> prometheus_client::metrics::counter::Counter {
        self.snapshot_copies.clone()
    }

    /// Replaces the snapshot wholesale (e.g. after a re-list).
    pub fn set_snapshot(&mut self, snapshot: Snapshot) {
        self.snapshot = Arc::new(snapshot);
        self.assumed.clear();
    }

    /// Publishes a new usage view to the following cycles (from the analytics refresh),
    /// and recalibrates the prediction of pods without a profile on it.
    pub fn set_usage_view(&mut self, view: Arc<UsageView>) {
        let warmup_ms = self.deps.policy.warmup_ms();
        let usage = self.snapshot_mut().usage_mut();
        usage.view = view;
        usage.prune(warmup_ms, RECENT_MAX_AGE_MS);
        // What profiled pods use against their requests, for pods without a profile.
        let calibration =
            crate::usage::calibrate(&self.snapshot, &self.deps.policy, &self.deps.identity);
        self.snapshot_mut().usage_mut().calibration = calibration;
    }

    /// Sets the scheduler's clock, ms since the epoch: staleness of usage, reservation
    /// expiry and recent placements are judged against it. The simulator sets simulated
    /// time; `serve` sets wall-clock time before each cycle.
    pub fn set_now_ms(&mut self, now_ms: i64) {
        if self.snapshot.usage().now_ms != now_ms {
            self.snapshot_mut().usage_mut().now_ms = now_ms;
        }
    }

    /// The usage policy the real-usage plugins judge by (staleness, headroom).
    pub fn usage_policy(&self) -> &crate::usage::UsagePolicy {
        &self.deps.policy
    }

    /// The profile names.
    pub fn profiles(&self) -> Vec<&str> {
        self.frameworks.iter().map(|f| f.profile()).collect()
    }

    /// The queue's PreEnqueue check: the PreEnqueue plugins (SchedulingGates) of the profile
    /// the pod asks for by `spec.schedulerName` (the first profile when it names none), so
    /// a profile without the plugin does not gate, exactly as its cycle would not.
    pub fn pre_enqueue_fn(&self) -> crate::queue::PreEnqueueFn {
        let frameworks = self.frameworks.clone();
        Arc::new(move |pod: &PodInfo| {
            let name = pod
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.scheduler_name.as_deref());
            let fw = match name {
                None => frameworks.first(),
                Some(n) => frameworks.iter().find(|f| f.profile() == n),
            }?;
            fw.pre_enqueue(pod)
        })
    }

    /// Which events may undo each plugin's rejections, from every profile's plugins'
    /// declarations ([`Plugin::events_to_register`](crate::framework::Plugin::events_to_register)):
    /// what the queue needs to move only the pods an event may help.
    pub fn queueing_hints(&self) -> crate::framework::QueueingHints {
        let mut hints = crate::framework::QueueingHints::default();
        for fw in self.frameworks.iter() {
            for r in fw.plugins() {
                if let Some(events) = r.events_to_register() {
                    hints.insert(r.name, events);
                }
            }
        }
        hints
    }

    /// The framework of a profile (`None` picks the first).
    pub fn framework(&self, profile: Option<&str>) -> Option<&Framework> {
        match profile {
            None => self.frameworks.first(),
            Some(p) => self.frameworks.iter().find(|f| f.profile() == p),
        }
    }

    /// Runs one scheduling cycle for `pod` under `profile` (the first profile when `None`),
    /// and assumes the pod on the chosen node. The pod counts as not having waited (see
    /// [`schedule_one_waited`](Self::schedule_one_waited)).
    pub fn schedule_one(&mut self, pod: &PodInfo, profile: Option<&str>, explain: bool) -> Attempt {
        self.schedule_one_waited(pod, profile, explain, Duration::ZERO)
    }

    /// [`schedule_one`](Self::schedule_one) for a pod that has waited `waited` since its
    /// first scheduling attempt. When real usage alone keeps it off every node (a relaxable
    /// real filter rejected some node and no node fits), it is either told how long it may
    /// still wait (the FailedScheduling message says so) or, once `waited` reaches
    /// `usage.maxWait`, scheduled again with the usage fallback (see [`crate::usage::wait`]):
    /// the record of that second cycle, with [`Decision::fallback`] set, is the decision.
    pub fn schedule_one_waited(
        &mut self,
        pod: &PodInfo,
        profile: Option<&str>,
        explain: bool,
        waited: Duration,
    ) -> Attempt {
        let idx = match profile {
            None => Some(0),
            Some(p) => self.frameworks.iter().position(|f| f.profile() == p),
        };
        let Some(idx) = idx.filter(|i| *i < self.frameworks.len()) else {
            let mut d = Decision::new(
                &pod.namespace,
                &pod.name,
                &pod.uid,
                profile.unwrap_or(""),
                self.snapshot.generation(),
                self.snapshot.names(),
            );
            d.outcome = Outcome::Error {
                message: format!("no profile named {:?}", profile.unwrap_or("")),
            };
            return Attempt {
                decision: d,
                assumed: None,
                gated: None,
                placement: None,
                pre_bind: None,
            };
        };
        let fw = &self.frameworks[idx];
        if let Some(s) = fw.pre_enqueue(pod) {
            let mut d = Decision::new(
                &pod.namespace,
                &pod.name,
                &pod.uid,
                fw.profile(),
                self.snapshot.generation(),
                self.snapshot.names(),
            );
            d.outcome = Outcome::Error {
                message: format!("pod is not schedulable yet: {}", s.message()),
            };
            d.pre_filter.push(s.clone());
            return Attempt {
                decision: d,
                assumed: None,
                gated: Some(s),
                placement: None,
                pre_bind: None,
            };
        }
        let cycle_state = |fallback: bool| {
            let mut state = CycleState::new(explain);
            state.write_input(Wait { waited, fallback });
            state
        };
        let (mut decision, mut state) =
            fw.schedule_in(pod, &self.snapshot, &mut self.rng, cycle_state(false));
        if matches!(decision.outcome, Outcome::Unschedulable { .. }) {
            let relaxable = relaxable_rejections(fw, &decision);
            let max_wait = self.deps.policy.max_wait;
            if !relaxable.is_empty() {
                if waited >= max_wait {
                    let (mut d, st) =
                        fw.schedule_in(pod, &self.snapshot, &mut self.rng, cycle_state(true));
                    if d.node().is_some() {
                        d.fallback = Some(Fallback {
                            waited_seconds: waited.as_secs_f64(),
                            max_wait_seconds: max_wait.as_secs_f64(),
                            relaxed: relaxable.iter().map(|p| p.to_string()).collect(),
                        });
                    } else {
                        d.notes.push(format!(
                            "usage fallback: waited past usage.maxWait, but no node fits even with {} relaxed",
                            relaxable.join(", ")
                        ));
                    }
                    decision = d;
                    state = st;
                } else if let Outcome::Unschedulable { message } = &mut decision.outcome {
                    message.push_str(&waiting_message(max_wait));
                }
            }
        }
        // Upstream's nominator: a pod preemption nominated counts on its node for pods of
        // lower or equal priority until it is placed (or deleted).
        if let Some(n) = &mut decision.nomination {
            let node = n.node.to_string();
            n.cleared = self
                .snapshot_mut()
                .policy_mut()
                .nominate(Arc::new(pod.clone()), &node);
        } else if decision.node().is_some() && self.snapshot.policy().is_nominated(&pod.key()) {
            self.snapshot_mut().policy_mut().unnominate(&pod.key());
        }
        let Some(node) = decision.node().map(str::to_string) else {
            return Attempt {
                decision,
                assumed: None,
                gated: None,
                placement: None,
                pre_bind: None,
            };
        };
        match self.reserve_and_assume(idx, &mut state, pod, &node) {
            Ok((assumed, placement, volume_bindings)) => {
                decision.volume_bindings = volume_bindings;
                let fw = &self.frameworks[idx];
                let pre_bind = fw.pre_bind_needed(&state, pod, &node).then(|| PreBind {
                    frameworks: self.frameworks.clone(),
                    idx,
                    state,
                });
                Attempt {
                    decision,
                    assumed: Some(assumed),
                    gated: None,
                    placement: Some(placement),
                    pre_bind,
                }
            }
            Err(s) => {
                decision.outcome = Outcome::Error {
                    message: format!("{} on node {node}: {}", s.plugin, s.message()),
                };
                Attempt {
                    decision,
                    assumed: None,
                    gated: None,
                    placement: None,
                    pre_bind: None,
                }
            }
        }
    }

    fn reserve_and_assume(
        &mut self,
        idx: usize,
        state: &mut CycleState,
        pod: &PodInfo,
        node: &str,
    ) -> Result<Assumption, Status> {
        let fw = &self.frameworks[idx];
        let s = fw.reserve(state, pod, node);
        if !s.is_success() {
            return Err(s);
        }
        let s = fw.permit(state, pod, node);
        if !s.is_success() {
            fw.unreserve(state, pod, node);
            return Err(s);
        }
        // VolumeBinding's choice is assumed with the pod (upstream's AssumePodVolumes):
        // the next cycle sees the PVs taken.
        let (volumes, volume_bindings) = match state.read::<Reserved>() {
            Some(Reserved(v)) if !v.static_bindings.is_empty() => {
                let bindings = v
                    .static_bindings
                    .iter()
                    .map(|b| (claim_key(&b.namespace, &b.claim), b.pv.clone()))
                    .collect();
                match make_mut(&mut self.snapshot, &self.snapshot_copies)
                    .volumes_mut()
                    .assume(&v.static_bindings)
                {
                    Ok(changed) => (changed, bindings),
                    Err(e) => {
                        fw.unreserve(state, pod, node);
                        return Err(Status::error(e).with_plugin(volume_binding::NAME));
                    }
                }
            }
            _ => (Vec::new(), BTreeMap::new()),
        };
        let mut bound = (*pod.pod).clone();
        bound.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
        let info = Arc::new(PodInfo::new(Arc::new(bound)));
        // The pod's predicted usage counts on the node until its metrics show it
        // (compensation), and the node joins the builder's history at once.
        // Taken out of the cycle state, not read: the state would otherwise keep the
        // snapshot's usage context shared, and recording the placement below would copy it
        // (the peer plugins keep the same context for their per-node calls).
        drop(state.take::<crate::plugins::peers::Ctx>());
        let usage = release_cycle_usage(state).map_or_else(
            || PodUsage::of(pod, &self.snapshot, &self.deps.policy, &self.deps.identity),
            |u| match Arc::try_unwrap(u) {
                Ok(u) => u.pod,
                Err(u) => u.pod.clone(),
            },
        );
        let recent = RecentPlacement {
            pod: pod.key(),
            at_ms: self.snapshot.usage().now_ms,
            cpu_cores: usage.prediction.cpu_cores,
            memory_bytes: usage.prediction.memory_bytes,
            disk_bytes: usage.disk_bytes as f64,
            memory_dist: usage.prediction.memory_dist,
        };
        // A bare pod's identity is its own name: remembering a history for it would only
        // grow the map.
        let builder = (!usage.builder.is_pod()).then_some(usage.builder.as_str());
        let snapshot = self.snapshot_mut();
        snapshot.add_pod(info.clone(), node);
        snapshot.record_placement(builder, node, recent.clone());
        let placement = RecentPlacementOf {
            builder: usage.builder.clone(),
            node: node.to_string(),
            recent,
        };
        self.assumed.insert(
            pod.key(),
            Assumed {
                node: node.to_string(),
                uid: pod.uid.clone(),
                volumes,
                deadline: None,
            },
        );
        Ok((info, placement, volume_bindings))
    }

    /// Marks the bind of an assumed pod as finished: from `now`, it expires after the TTL
    /// unless the API confirms it.
    pub fn finish_binding(&mut self, pod: &PodKey, now: Instant) {
        if let Some(a) = self.assumed.get_mut(pod) {
            a.deadline = Some(now + self.assume_ttl);
        }
    }

    /// The API shows the pod bound: it is no longer merely assumed.
    pub fn confirm(&mut self, pod: &PodKey) {
        self.assumed.remove(pod);
    }

    /// The bind failed: the pod leaves its node. Returns the node it had been assumed on.
    pub fn forget(&mut self, pod: &PodInfo) -> Option<String> {
        let key = pod.key();
        let a = self.assumed.remove(&key)?;
        let snapshot = self.snapshot_mut();
        if !a.volumes.is_empty() {
            snapshot.volumes_mut().restore(&a.volumes);
        }
        snapshot.remove_pod(&key, &pod.uid);
        snapshot.forget_placement(&a.node, &key);
        Some(a.node)
    }

    /// Drops assumed pods whose deadline passed; returns their keys.
    pub fn expire_assumed(&mut self, now: Instant) -> Vec<PodKey> {
        let expired: Vec<PodKey> = self
            .assumed
            .iter()
            .filter(|(_, a)| a.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &expired {
            if let Some(a) = self.assumed.remove(k) {
                let snapshot = self.snapshot_mut();
                if !a.volumes.is_empty() {
                    snapshot.volumes_mut().restore(&a.volumes);
                }
                snapshot.remove_pod(k, &a.uid);
                snapshot.forget_placement(&a.node, k);
            }
        }
        expired
    }

    /// Number of assumed, unconfirmed pods.
    pub fn assumed_count(&self) -> usize {
        self.assumed.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::*;
    use serde_json::json;

    /// The extender's copy never shares the scheduler's own snapshot, so changes after it
    /// copy nothing; within `max_age` readers get the same copy, and after a change past
    /// it a fresh one.
    #[test]
    fn read_copies_leave_the_schedulers_snapshot_unshared() {
        let mut s = Scheduler::new(&Config::default()).unwrap();
        *s.snapshot_mut() = Snapshot::build([node("n1", json!({}))], []);
        let copies = s.snapshot_copies();
        let sched = Arc::new(std::sync::Mutex::new(s));
        let long = ReadCopy::new(sched.clone(), Duration::from_secs(3600));
        let first = long.current();
        assert!(
            Arc::ptr_eq(&first, &long.current()),
            "within max_age: the same copy"
        );
        let mut s = sched.lock().unwrap();
        s.schedule_one(&cpu_pod("a", "1"), None, false);
        assert_eq!(copies.get(), 0, "the reader's copy is its own");
        // A reader of the scheduler's own Arc does make the next change copy (counted).
        let held = s.snapshot();
        s.snapshot_mut()
            .upsert_node(Arc::new(node("n2", json!({}))));
        assert_eq!(copies.get(), 1);
        drop((held, s));
        let fresh = ReadCopy::new(sched.clone(), Duration::ZERO);
        let c1 = fresh.current();
        assert_eq!(c1.len(), 2);
        assert_eq!(
            c1.get("n1").unwrap().pods.len(),
            1,
            "the assumed pod is in the copy"
        );
        assert!(
            Arc::ptr_eq(&c1, &fresh.current()),
            "unchanged: the copy is kept"
        );
        sched.lock().unwrap().snapshot_mut().remove_node("n2");
        // Past the copy's budget (20 times what copying two nodes took: microseconds).
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(fresh.current().len(), 1, "changed: copied again");
        assert!(
            Arc::ptr_eq(&first, &long.current()),
            "still within its max_age"
        );
        assert!(
            first.get("n1").unwrap().pods.is_empty(),
            "taken before the pod"
        );
    }

    fn cpu_pod(name: &str, cpu: &str) -> PodInfo {
        info(pod(
            name,
            json!({"spec": {"containers": [
            {"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}),
        ))
    }

    /// One cycle in ten times each plugin (upstream's `pluginMetricsSamplePercent`): the
    /// sampled cycle names every Filter and Score plugin of the default profile that ran,
    /// the others carry no times; no placement changes.
    #[test]
    fn one_cycle_in_ten_times_each_plugin() {
        let mut s = Scheduler::new(&Config::default()).unwrap();
        *s.snapshot_mut() = Snapshot::build(
            [
                node("n1", json!({})),
                node("n2", json!({})),
                node("n3", json!({})),
            ],
            [],
        );
        let mut sampled = Vec::new();
        for i in 0..20 {
            let r = s.schedule_one(&cpu_pod(&format!("p{i}"), "10m"), None, false);
            assert!(r.decision.node().is_some());
            if !r.decision.plugin_times.is_empty() {
                sampled.push((i, r.decision.plugin_times.clone()));
            }
        }
        assert_eq!(
            sampled.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            [0, 10],
            "cycles 1 and 11 sampled"
        );
        let times = &sampled[0].1;
        let at = |point: &str| -> Vec<&str> {
            times
                .iter()
                .filter(|t| t.point == point)
                .map(|t| t.plugin)
                .collect()
        };
        for plugin in ["NodeResourcesFit", "TaintToleration", "NodeUnschedulable"] {
            assert!(at("Filter").contains(&plugin), "{plugin}: {times:?}");
        }
        for plugin in ["NodeResourcesBalancedAllocation", "ImageLocality"] {
            assert!(at("Score").contains(&plugin), "{plugin}: {times:?}");
        }
        assert!(at("PreFilter").contains(&"NodeResourcesFit"), "{times:?}");
        assert!(
            times.iter().all(
                |t| t.status == "Success" || (t.status == "Skip" && t.point.starts_with("Pre"))
            ),
            "every plugin passed or skipped at PreFilter/PreScore (as upstream labels it): {times:?}"
        );
    }

    #[test]
    fn assume_forget_expire() {
        let mut config = Config::default();
        config.scheduler.seed = Some(7);
        let mut s = Scheduler::new(&config).unwrap();
        *s.snapshot_mut() = Snapshot::build([node("only", json!({}))], []);

        let a = s.schedule_one(&cpu_pod("a", "3"), None, false);
        assert_eq!(a.decision.node(), Some("only"));
        // The assumed pod counts immediately: a second 3-CPU pod no longer fits.
        let b = s.schedule_one(&cpu_pod("b", "3"), None, false);
        assert!(b.decision.node().is_none());
        assert!(
            matches!(&b.decision.outcome, Outcome::Unschedulable { message } if message == "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")
        );

        // A failed bind forgets the pod and frees the node.
        assert_eq!(s.forget(&cpu_pod("a", "3")).as_deref(), Some("only"));
        let b = s.schedule_one(&cpu_pod("b", "3"), None, false);
        assert_eq!(b.decision.node(), Some("only"));

        // An unconfirmed bind expires after the TTL; a confirmed one stays.
        let t0 = Instant::now();
        s.set_assume_ttl(Duration::from_secs(30));
        s.finish_binding(&PodKey::new("default", "b"), t0);
        assert!(s.expire_assumed(t0 + Duration::from_secs(29)).is_empty());
        assert_eq!(
            s.expire_assumed(t0 + Duration::from_secs(31)),
            vec![PodKey::new("default", "b")]
        );
        assert_eq!(s.snapshot().get("only").unwrap().requested.milli_cpu, 0);

        let c = s.schedule_one(&cpu_pod("c", "1"), None, false);
        assert!(c.assumed.is_some());
        s.finish_binding(&PodKey::new("default", "c"), t0);
        s.confirm(&PodKey::new("default", "c"));
        assert!(s.expire_assumed(t0 + Duration::from_secs(60)).is_empty());
        assert_eq!(s.assumed_count(), 0);
        assert_eq!(s.snapshot().get("only").unwrap().requested.milli_cpu, 1000);
    }

    /// The waiting policy: a pod real memory keeps off every node waits, told so, until
    /// `usage.maxWait`; then it goes to the least-hot node that fits by requests and can
    /// hold its expected use, History out of the way, with the fallback on the record.
    /// Requests alone never fall back.
    #[test]
    fn usage_fallback_after_max_wait() {
        let mut config = Config::default();
        config.scheduler.seed = Some(7);
        config.usage.max_wait = Duration::from_secs(60);
        let mut s = Scheduler::new(&config).unwrap();
        // 8 GiB nodes, 10 % reserve (0.8 GiB): a 2 GiB pod fits none. Under the fallback
        // "over" (7 + 2 > 8 GiB) still rejects it while others can hold it.
        *s.snapshot_mut() = with_usage(
            Snapshot::build(
                [
                    node("hot", json!({})),
                    node("warm", json!({})),
                    node("over", json!({})),
                ],
                [],
            ),
            vec![
                usage("hot", 0.5, 6.0 * GI, 10, None),
                usage("warm", 0.5, 5.5 * GI, 10, None),
                usage("over", 0.5, 7.0 * GI, 10, None),
            ],
            vec![],
        );
        // The builder ran on "hot" before: History would pull it there.
        s.snapshot_mut()
            .usage_mut()
            .history
            .insert("b-1".into(), ["hot".to_string()].into());
        let build = |name: &str, mem: &str| {
            info(pod(
                name,
                json!({"metadata": {"labels": {"bkci.dispatch.kubenetes/core": "b-1"}},
                       "spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": mem}}}]}}),
            ))
        };
        let p = build("p", "2Gi");
        let a = s.schedule_one_waited(&p, None, true, Duration::from_secs(30));
        assert!(a.decision.node().is_none() && a.decision.fallback.is_none());
        let Outcome::Unschedulable { message } = &a.decision.outcome else {
            panic!("{:?}", a.decision.outcome)
        };
        assert!(
            message.starts_with(
                "0/3 nodes are available: 3 node(s) didn't have enough real free memory."
            ) && message.contains("after usage.maxWait (1m)"),
            "{message}"
        );
        let a = s.schedule_one_waited(&p, None, true, Duration::from_secs(61));
        assert_eq!(a.decision.node(), Some("warm"), "the least-hot node");
        let f = a.decision.fallback.clone().expect("fallback recorded");
        assert_eq!(f.relaxed, ["RealMemoryFit"]);
        assert_eq!((f.waited_seconds, f.max_wait_seconds), (61.0, 60.0));
        assert!(a.decision.skipped_scores.contains(&"History"));
        let e = a.decision.explain();
        assert!(
            e.to_text()
                .contains("usage fallback: waited 1m 1s ≥ usage.maxWait 1m")
        );
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["fallback"]["relaxed"][0], "RealMemoryFit");
        let chosen = e.nodes.iter().find(|n| n.chosen).unwrap();
        assert!(chosen.feasible);
        let over = e.nodes.iter().find(|n| n.name == "over").unwrap();
        assert!(!over.feasible);
        assert!(
            e.to_text()
                .contains("usage fallback: expected demand 9Gi passes the node's memory 8Gi"),
            "{}",
            e.to_text()
        );
        // Requests alone keep a 9 GiB pod off: nothing to relax, no waiting sentence.
        let big = build("big", "9Gi");
        let a = s.schedule_one_waited(&big, None, false, Duration::from_secs(600));
        assert!(a.decision.node().is_none() && a.decision.fallback.is_none());
        let Outcome::Unschedulable { message } = &a.decision.outcome else {
            panic!()
        };
        assert!(!message.contains("maxWait"), "{message}");
    }

    /// `usage.coldStart: calibrated`: with a new view, the scheduler learns what profiled
    /// pods use against their requests, and predicts a pod without a profile by it.
    #[test]
    fn cold_start_calibrated_by_profiled_pods() {
        let build = |name: &str, builder: &str, node: Option<&str>| {
            let mut spec = json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]});
            if let Some(n) = node {
                spec["nodeName"] = json!(n);
            }
            pod(
                name,
                json!({"metadata": {"labels": {"bkci.dispatch.kubenetes/core": builder}}, "spec": spec}),
            )
        };
        let running: Vec<_> = (0..5)
            .map(|i| build(&format!("r{i}"), "heavy", Some("n")))
            .collect();
        let predict = |cold: crate::usage::ColdStart, pods: usize| {
            let mut config = Config::default();
            config.usage.cold_start = cold;
            let mut s = Scheduler::new(&config).unwrap();
            *s.snapshot_mut() = Snapshot::build([node("n", json!({}))], running[..pods].to_vec());
            let view = with_usage(
                Snapshot::new(),
                vec![],
                vec![profile("heavy", 0.5, 2.5 * GI)],
            )
            .usage()
            .view
            .clone();
            s.set_usage_view(view);
            let snap = s.snapshot();
            let u = PodUsage::of(
                &info(build("new", "fresh", None)),
                &snap,
                &config.usage,
                &Default::default(),
            );
            (u.prediction, snap.usage().calibration)
        };
        use crate::usage::{ColdStart, Source};
        let (p, c) = predict(ColdStart::Calibrated, 5);
        let c = c.expect("five profiled pods");
        assert_eq!((c.memory_ratio, c.cpu_ratio, c.pods), (2.5, 0.5, 5));
        assert_eq!(p.memory_bytes, 2.5 * GI);
        assert_eq!(p.cpu_cores, 0.5);
        assert!(matches!(p.source, Source::Calibrated { pods: 5, .. }));
        assert!(
            p.describe().contains("requests × 2.50 memory"),
            "{}",
            p.describe()
        );
        // Too few profiled pods, or `requests`: the requests.
        let (p, c) = predict(ColdStart::Calibrated, 4);
        assert!(c.is_none());
        assert_eq!((p.memory_bytes, p.source), (GI, Source::Requests));
        let (p, _) = predict(ColdStart::Requests, 5);
        assert_eq!((p.memory_bytes, p.source), (GI, Source::Requests));
    }

    #[test]
    fn gated_and_unknown_profile() {
        let mut s = Scheduler::new(&Config::default()).unwrap();
        *s.snapshot_mut() = Snapshot::build([node("n", json!({}))], []);
        let gated = info(pod(
            "g",
            json!({"spec": {"schedulingGates": [{"name": "wait"}]}}),
        ));
        let a = s.schedule_one(&gated, None, false);
        assert!(a.gated.is_some());
        assert!(a.decision.node().is_none());
        let a = s.schedule_one(&cpu_pod("x", "1"), Some("nope"), false);
        assert!(matches!(a.decision.outcome, Outcome::Error { .. }));
    }
}

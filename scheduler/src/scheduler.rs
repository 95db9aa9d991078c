//! The scheduler core: profiles and the scheduling cycle.
//!
//! `schedule_one` runs a cycle for one pod on the snapshot the [`Cache`] lends it, then
//! settles the lease: when a node was chosen the pod is *assumed* there at once (added to
//! the snapshot), so the next cycle already counts it, before the asynchronous bind
//! completes. What happens to an assumed pod afterwards (bound, forgotten, expired) is
//! the cache's ([`crate::cache`]). The scheduler itself holds only what no cycle changes
//! (the profiles and their plugins) and the cycle's tie-breaking random numbers, so it is
//! shared by `&`: no lock spans a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::cache::{Cache, CacheState};
use crate::config::{ConfigError, CoreConfig};
use crate::framework::{
    Code, CycleState, Decision, Framework, Outcome, ReservedVolumes, Status, Wait, WarmHold,
};
use crate::plugins::{PluginDeps, build_framework_with};
use crate::snapshot::volumes::claim_key;
use crate::snapshot::{PodInfo, Snapshot};
use crate::usage::{PodUsage, release_cycle_usage};
use crate::usage_context::{MetricPath, RecentPlacement};
use crate::view::UsageView;

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

impl Attempt {
    fn unplaced(decision: Decision, gated: Option<Status>) -> Attempt {
        Attempt {
            decision,
            assumed: None,
            gated,
            placement: None,
            pre_bind: None,
        }
    }
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

    /// Runs Unreserve after a failed PreBind (the cache's `forget` restores what was
    /// assumed in the snapshot).
    pub fn unreserve(&mut self, pod: &PodInfo, node: &str) {
        self.frameworks[self.idx].unreserve(&mut self.state, pod, node);
    }
}

/// A placement as the scheduler recorded it in the usage context.
#[derive(Debug, Clone, PartialEq)]
pub struct RecentPlacementOf {
    /// Builder identity (the collectors' rule).
    pub builder: crate::identity::BuilderId,
    /// Node.
    pub node: String,
    /// What was recorded.
    pub recent: RecentPlacement,
}

/// How long a placement counts as "recent" at most when the node's metrics never catch up
/// (10 minutes: far beyond any scrape interval, short enough not to hoard capacity).
pub const RECENT_MAX_AGE_MS: i64 = 10 * 60 * 1000;

/// A cycle's verdict on the leased snapshot, before the cache takes it.
struct Verdict {
    decision: Decision,
    /// The cycle chose a node (Reserve may still have failed): a nomination the pod held
    /// is cleared.
    chose_node: bool,
    gated: Option<Status>,
    /// A node was chosen and Reserve and Permit passed: what assuming the pod writes.
    chosen: Option<Chosen>,
}

/// What assuming a placed pod writes into the cache.
struct Chosen {
    /// The profile's index.
    idx: usize,
    /// The cycle state Reserve left (PreBind and Unreserve read it).
    state: CycleState,
    node: String,
    /// The pod with `spec.nodeName` set.
    info: Arc<PodInfo>,
    placement: RecentPlacementOf,
}

/// The profiles and the cycle. Shared by `&` (`Arc<Scheduler>`): the profiles never
/// change, the cluster state is the [`Cache`]'s, and only the tie-breaking random numbers
/// are the cycle's own.
pub struct Scheduler {
    /// Shared with the queue's PreEnqueue check (frameworks are immutable once built).
    frameworks: Arc<[Framework]>,
    cache: Arc<Cache>,
    /// Only a cycle takes it (one at a time under the loop), for its tie-breaks.
    rng: Mutex<SmallRng>,
    deps: PluginDeps,
    /// Whether some profile (or the extender's) runs Fragmentation: only then does a new
    /// view count the running builds' shapes.
    counts_shapes: bool,
    /// The peer metric pipelines some plugin reads ([`crate::usage_context::held`]): the
    /// profiles' and, once `serve` builds it, the extender's. Read once per view.
    metric_paths: Mutex<BTreeSet<MetricPath>>,
}

impl Scheduler {
    /// Builds the scheduler from a configuration, with default plugin dependencies (no
    /// reservations).
    pub fn new(config: &CoreConfig) -> Result<Scheduler, ConfigError> {
        Scheduler::with_deps(config, &PluginDeps::from_config(config))
    }

    /// Builds the scheduler from a configuration and the handles plugins hold, over an
    /// empty cache whose assumed pods expire after `serve.assumeTtl`.
    pub fn with_deps(config: &CoreConfig, deps: &PluginDeps) -> Result<Scheduler, ConfigError> {
        let frameworks = config
            .profiles
            .iter()
            .map(|p| build_framework_with(p, deps))
            .collect::<Result<Arc<[_]>, _>>()?;
        let rng = match config.scheduler.seed {
            Some(s) => SmallRng::seed_from_u64(s),
            None => SmallRng::from_os_rng(),
        };
        let counts_shapes = crate::plugins::registry::needs_shapes(config);
        let paths = frameworks
            .iter()
            .flat_map(|f| f.plugins().iter().flat_map(|r| r.metric_paths()))
            .collect();
        Ok(Scheduler {
            counts_shapes,
            metric_paths: Mutex::new(paths),
            frameworks,
            cache: Arc::new(Cache::new(config.assume_ttl)),
            rng: Mutex::new(rng),
            deps: deps.clone(),
        })
    }

    /// The cache the cycles read and the feed writes.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// The cache's current snapshot (to read outside a cycle; see [`Cache::snapshot`]).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.cache.snapshot()
    }

    /// Publishes a new usage view to the following cycles (from the analytics refresh),
    /// recalibrates the prediction of pods without a profile on it and, when a profile runs
    /// Fragmentation, counts the running builds' shapes. Written like any cluster change: after the cycle in
    /// flight, if any. Both read every pod, in one walk, so they are computed first, on the snapshot as written so far, without the cache's
    /// lock: neither the cycles nor the informers wait for it (a pod written meanwhile
    /// counts from the next view; a write meanwhile copies the snapshot once). CPU work:
    /// async callers run this through `spawn_blocking`.
    ///
    /// Returns whether a peer's held figures changed ([`crate::usage_context::held`]): the
    /// caller then retries the pods the peers kept off
    /// ([`ClusterEvent::PeerMetricsRefreshed`](crate::framework::ClusterEvent::PeerMetricsRefreshed)).
    pub fn set_usage_view(&self, view: Arc<UsageView>) -> bool {
        let snapshot = self.cache.snapshot();
        let derived = crate::usage::derive(
            &snapshot,
            &view,
            &self.deps.policy,
            &self.deps.identity,
            self.counts_shapes,
        );
        let paths: Vec<MetricPath> = self
            .metric_paths
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect();
        let (held, changed) = snapshot.usage().held.advance(&view, &paths);
        let held = Arc::new(held);
        let policy = self.deps.policy.clone();
        self.cache
            .write(move |c| set_usage_view(c, view, derived, held, &policy));
        changed
    }

    /// Adds the peer metric pipelines of a framework built outside the profiles (the
    /// extender's), so that the next views hold figures for it.
    pub fn hold_metric_paths(&self, framework: &Framework) {
        let mut paths = self.metric_paths.lock().unwrap_or_else(|e| e.into_inner());
        paths.extend(framework.plugins().iter().flat_map(|r| r.metric_paths()));
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
    pub fn schedule_one(&self, pod: &PodInfo, profile: Option<&str>, explain: bool) -> Attempt {
        self.schedule_one_waited(pod, profile, explain, Duration::ZERO)
    }

    /// [`schedule_one`](Self::schedule_one) for a pod that has waited `waited` since its
    /// first scheduling attempt. When real usage alone keeps it off every node (a relaxable
    /// real filter rejected some node and no node fits), it is either told how long it may
    /// still wait (the FailedScheduling message says so) or, once `waited` reaches
    /// `usage.maxWait`, scheduled again with the usage fallback (see [`crate::usage::wait`]):
    /// the record of that second cycle, with [`Decision::fallback`] set, is the decision.
    pub fn schedule_one_waited(
        &self,
        pod: &PodInfo,
        profile: Option<&str>,
        explain: bool,
        waited: Duration,
    ) -> Attempt {
        let wait = Wait {
            waited,
            ..Wait::default()
        };
        self.schedule_then(pod, profile, explain, wait, |_, _| ()).0
    }

    /// [`schedule_one_waited`](Self::schedule_one_waited), then `then` on the attempt and the
    /// snapshot with the pod assumed, before any change written during the cycle (what the
    /// loop records beside a decision: the node's headroom with the pod counted). `wait`
    /// carries the pod's wait and the queue's tail (the warm wait, [`crate::usage::warm`]);
    /// its `fallback` is the scheduler's to set.
    pub fn schedule_then<R>(
        &self,
        pod: &PodInfo,
        profile: Option<&str>,
        explain: bool,
        wait: Wait,
        then: impl FnOnce(&Attempt, &Snapshot) -> R,
    ) -> (Attempt, R) {
        let lease = self.cache.lease();
        let verdict = self.decide(&lease, pod, profile, explain, wait);
        self.cache.settle(lease, |c| {
            let attempt = self.assume(c, pod, verdict);
            let r = then(&attempt, c.snapshot());
            (attempt, r)
        })
    }

    /// The cycle proper, on the leased snapshot: filters, scores, the warm wait, the usage
    /// fallback, Reserve and Permit. Changes nothing in the cache.
    fn decide(
        &self,
        snapshot: &Snapshot,
        pod: &PodInfo,
        profile: Option<&str>,
        explain: bool,
        wait: Wait,
    ) -> Verdict {
        let idx = match profile {
            None => Some(0),
            Some(p) => self.frameworks.iter().position(|f| f.profile() == p),
        };
        let error = |profile: &str, message: String| {
            let mut d = Decision::new(
                &pod.namespace,
                &pod.name,
                pod.uid.clone(),
                profile,
                snapshot.generation(),
                snapshot.names(),
            );
            d.outcome = Outcome::Error { message };
            d
        };
        let Some(idx) = idx.filter(|i| *i < self.frameworks.len()) else {
            let p = profile.unwrap_or("");
            let decision = error(p, format!("no profile named {p:?}"));
            return Verdict {
                decision,
                chose_node: false,
                gated: None,
                chosen: None,
            };
        };
        let fw = &self.frameworks[idx];
        if let Some(s) = fw.pre_enqueue(pod) {
            let mut decision = error(
                fw.profile(),
                format!("pod is not schedulable yet: {}", s.message()),
            );
            decision.pre_filter.push(s.clone());
            return Verdict {
                decision,
                chose_node: false,
                gated: Some(s),
                chosen: None,
            };
        }
        let (mut decision, mut state) = {
            let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
            fw.schedule_passes(pod, snapshot, &mut *rng, explain, wait)
        };
        let mut chose_node = decision.node().is_some();
        let chosen = decision.node().map(str::to_string).and_then(|node| {
            match self.reserve(idx, &mut state, snapshot, pod, &node) {
                Ok(placement) => {
                    let mut bound = (*pod.pod).clone();
                    bound.spec.get_or_insert_with(Default::default).node_name = Some(node.clone());
                    Some(Chosen {
                        idx,
                        state,
                        node,
                        info: Arc::new(PodInfo::new(Arc::new(bound))),
                        placement,
                    })
                }
                Err(s) if s.code == Code::Wait => {
                    // A Permit asked the pod to wait: it is not placed this cycle (nor
                    // counted as placed), and the hold its plugin described is on record.
                    chose_node = false;
                    decision.chosen = None;
                    decision.warm_hold = state.take::<WarmHold>();
                    if let Some(hold) = &decision.warm_hold {
                        decision.notes.push(hold.describe());
                    }
                    decision.outcome = Outcome::Unschedulable {
                        message: s.message(),
                    };
                    None
                }
                Err(s) => {
                    decision.outcome = Outcome::Error {
                        message: format!("{} on node {node}: {}", s.plugin, s.message()),
                    };
                    None
                }
            }
        });
        Verdict {
            decision,
            chose_node,
            gated: None,
            chosen,
        }
    }

    /// Reserve and Permit for the chosen node, and the placement the pod will be recorded
    /// with: its builder and predicted usage, counted on the node until its metrics show
    /// it (compensation).
    fn reserve(
        &self,
        idx: usize,
        state: &mut CycleState,
        snapshot: &Snapshot,
        pod: &PodInfo,
        node: &str,
    ) -> Result<RecentPlacementOf, Status> {
        let fw = &self.frameworks[idx];
        let s = fw.reserve(state, pod, node);
        if !s.is_success() {
            return Err(s);
        }
        // The timeout of a wait needs no keeping here: the held pod goes back to the
        // queue, and the loop ends its hold by the hold's own tail (`count_wait`).
        let (s, _timeout) = fw.permit(state, pod, snapshot, node);
        if !s.is_success() {
            fw.unreserve(state, pod, node);
            return Err(s);
        }
        // Released, not kept: the state would otherwise keep the snapshot's usage context
        // shared (the peer plugins keep it for their per-node calls), and recording the
        // placement when the lease settles would copy it.
        state.release_snapshot_shares();
        let usage = release_cycle_usage(state).map_or_else(
            || PodUsage::of(pod, snapshot, &self.deps.policy, &self.deps.identity),
            |u| match Arc::try_unwrap(u) {
                Ok(u) => u.pod,
                Err(u) => u.pod.clone(),
            },
        );
        Ok(RecentPlacementOf {
            builder: usage.builder.clone(),
            node: node.to_string(),
            recent: RecentPlacement {
                pod: pod.key(),
                at_ms: snapshot.usage().now_ms,
                cpu_cores: usage.prediction.cpu_cores,
                memory_bytes: usage.prediction.memory_bytes,
                disk_bytes: usage.disk_bytes as f64,
                memory_dist: usage.prediction.memory_dist,
            },
        })
    }

    /// Applies a verdict to the cache as the lease settles: the nomination, and for a
    /// placed pod the assumption — its PVs (VolumeBinding's choice, upstream's
    /// AssumePodVolumes), the pod on its node, its placement in the usage context.
    fn assume(&self, c: &mut CacheState, pod: &PodInfo, verdict: Verdict) -> Attempt {
        let Verdict {
            mut decision,
            chose_node,
            gated,
            chosen,
        } = verdict;
        // Upstream's nominator: a pod preemption nominated counts on its node for pods of
        // lower or equal priority until it is placed (or deleted).
        if let Some(n) = &mut decision.nomination {
            let node = n.node.to_string();
            n.cleared = c
                .snapshot_mut()
                .policy_mut()
                .nominate(Arc::new(pod.clone()), &node);
        } else if chose_node && c.snapshot().policy().is_nominated(&pod.key()) {
            c.snapshot_mut().policy_mut().unnominate(&pod.key());
        }
        let Some(Chosen {
            idx,
            mut state,
            node,
            info,
            placement,
        }) = chosen
        else {
            return Attempt::unplaced(decision, gated);
        };
        let fw = &self.frameworks[idx];
        let volumes = match state.read::<ReservedVolumes>() {
            Some(ReservedVolumes { plugin, volumes: v }) if !v.static_bindings.is_empty() => {
                let plugin: &'static str = plugin;
                match c.snapshot_mut().volumes_mut().assume(&v.static_bindings) {
                    Ok(changed) => {
                        decision.volume_bindings = v
                            .static_bindings
                            .iter()
                            .map(|b| (claim_key(&b.namespace, &b.claim), b.pv.clone()))
                            .collect::<BTreeMap<_, _>>();
                        changed
                    }
                    Err(e) => {
                        fw.unreserve(&mut state, pod, &node);
                        let s = Status::error(e).with_plugin(plugin);
                        decision.outcome = Outcome::Error {
                            message: format!("{} on node {node}: {}", s.plugin, s.message()),
                        };
                        return Attempt::unplaced(decision, None);
                    }
                }
            }
            _ => Vec::new(),
        };
        // A bare pod's identity is its own name: remembering a history for it would only
        // grow the map.
        let builder = (!placement.builder.is_pod()).then_some(placement.builder.as_str());
        let snapshot = c.snapshot_mut();
        snapshot.add_pod(info.clone(), &node);
        snapshot.record_placement(builder, &node, placement.recent.clone());
        c.assume(pod, &node, volumes);
        let pre_bind = fw.pre_bind_needed(&state, pod, &node).then(|| PreBind {
            frameworks: self.frameworks.clone(),
            idx,
            state,
        });
        Attempt {
            decision,
            assumed: Some(info),
            gated: None,
            placement: Some(placement),
            pre_bind,
        }
    }
}

/// A new usage view in the cache's snapshot, with what was derived on it (the calibration
/// of pods without a profile, the running builds' shapes) and recent placements the view
/// has caught up with pruned.
fn set_usage_view(
    c: &mut CacheState,
    view: Arc<UsageView>,
    derived: crate::usage::Derived,
    held: Arc<crate::usage_context::Held>,
    policy: &crate::usage::UsagePolicy,
) {
    let usage = c.snapshot_mut().usage_mut();
    usage.view = view;
    usage.held = held;
    usage.prune(policy.warmup_ms(), RECENT_MAX_AGE_MS);
    usage.calibration = derived.calibration;
    usage.shapes = derived.shapes;
    usage.whole = derived.whole;
    usage.warm_ratio = derived.warm_ratio;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::PodKey;
    use crate::plugins::testutil::*;
    use serde_json::json;
    use std::time::Instant;

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
        let s = Scheduler::new(&CoreConfig::default()).unwrap();
        s.cache().update(|c| {
            c.replace(Snapshot::build(
                [
                    node("n1", json!({})),
                    node("n2", json!({})),
                    node("n3", json!({})),
                ],
                [],
            ))
        });
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
        let mut config = CoreConfig::default();
        config.scheduler.seed = Some(7);
        let s = Scheduler::new(&config).unwrap();
        s.cache()
            .update(|c| c.replace(Snapshot::build([node("only", json!({}))], [])));

        let a = s.schedule_one(&cpu_pod("a", "3"), None, false);
        assert_eq!(a.decision.node(), Some("only"));
        // The assumed pod counts immediately: a second 3-CPU pod no longer fits.
        let b = s.schedule_one(&cpu_pod("b", "3"), None, false);
        assert!(b.decision.node().is_none());
        assert!(
            matches!(&b.decision.outcome, Outcome::Unschedulable { message } if message == "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")
        );

        // A failed bind forgets the pod and frees the node.
        assert_eq!(
            s.cache()
                .update(|c| c.forget(&cpu_pod("a", "3")))
                .as_deref(),
            Some("only")
        );
        let b = s.schedule_one(&cpu_pod("b", "3"), None, false);
        assert_eq!(b.decision.node(), Some("only"));

        // An unconfirmed bind expires after the TTL; a confirmed one stays.
        let t0 = Instant::now();
        s.cache()
            .update(|c| c.finish_binding(&PodKey::new("default", "b"), t0));
        assert!(
            s.cache()
                .update(|c| c.expire_assumed(t0 + Duration::from_secs(29)))
                .is_empty()
        );
        assert_eq!(
            s.cache()
                .update(|c| c.expire_assumed(t0 + Duration::from_secs(31))),
            vec![PodKey::new("default", "b")]
        );
        assert_eq!(s.snapshot().get("only").unwrap().requested.milli_cpu, 0);

        let c = s.schedule_one(&cpu_pod("c", "1"), None, false);
        assert!(c.assumed.is_some());
        s.cache()
            .update(|c| c.finish_binding(&PodKey::new("default", "c"), t0));
        s.cache()
            .update(|c| c.confirm(&PodKey::new("default", "c")));
        assert!(
            s.cache()
                .update(|c| c.expire_assumed(t0 + Duration::from_secs(60)))
                .is_empty()
        );
        assert_eq!(s.cache().read(|c| c.assumed_count()), 0);
        assert_eq!(s.snapshot().get("only").unwrap().requested.milli_cpu, 1000);
    }

    /// The waiting policy: a pod real memory keeps off every node waits, told so, until
    /// `usage.maxWait`; then it goes to the least-hot node that fits by requests and can
    /// hold its expected use, History out of the way, with the fallback on the record.
    /// Requests alone never fall back.
    #[test]
    fn usage_fallback_after_max_wait() {
        let mut config = CoreConfig::default();
        config.scheduler.seed = Some(7);
        config.usage.max_wait = Duration::from_secs(60);
        let s = Scheduler::new(&config).unwrap();
        // 8 GiB nodes, 10 % reserve (0.8 GiB): a 2 GiB pod fits none. Under the fallback
        // "over" (7 + 2 > 8 GiB) still rejects it while others can hold it.
        s.cache().update(|c| {
            c.replace(with_usage(
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
            ))
        });
        // The builder ran on "hot" before: History would pull it there.
        s.cache().update(|c| {
            c.snapshot_mut()
                .usage_mut()
                .history
                .insert("b-1".into(), ["hot".to_string()].into())
        });
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

    /// The warm wait is History's Permit returning Wait: a returning build whose only
    /// feasible node is cold (scoring skipped, so Permit runs History's PreScore itself)
    /// waits for its warm node, unplaced, with the hold on record and nothing assumed; the
    /// queue retries it on the events History declares. Without a tail to wait in, or with
    /// the warm wait off, it goes to the cold node.
    #[test]
    fn the_warm_wait_is_a_permit_that_waits() {
        use crate::framework::ClusterEvent;
        use crate::plugins::testutil::NOW_MS;
        let build = |waited_s: u64, tail_s: u64, enabled: bool| {
            let mut config = CoreConfig::default();
            config.usage.warm_wait.enabled = enabled;
            let s = Scheduler::new(&config).unwrap();
            // node-a (warm for builder b) runs r of builder c, 3 of its 4 CPUs, started
            // 250 s ago (c's runs take 300 s): it frees in 50 s, and b's warm cache saves
            // 300 s (cold 600 s, warm 300 s).
            let start = k8s_openapi::jiff::Timestamp::from_millisecond(NOW_MS - 250_000).unwrap();
            let r = pod(
                "r",
                json!({"metadata": {"labels": {"bkci.dispatch.kubenetes/core": "c"}},
                       "spec": {"nodeName": "node-a", "containers": [{"name": "c",
                                "resources": {"requests": {"cpu": "3"}}}]},
                       "status": {"startTime": start.to_string()}}),
            );
            let mut b = profile("b", 1.0, 1e9);
            (b.cold_run_s, b.warm_run_s) = (Some(600.0), Some(300.0));
            let mut c = profile("c", 1.0, 1e9);
            c.warm_run_s = Some(300.0);
            s.cache().update(|cs| {
                cs.replace(with_usage(
                    Snapshot::build([node("node-a", json!({})), node("node-b", json!({}))], [r]),
                    vec![],
                    vec![b, c],
                ));
                cs.snapshot_mut()
                    .usage_mut()
                    .history
                    .insert("b".into(), ["node-a".to_string()].into());
            });
            let p = info(pod(
                "p",
                json!({"metadata": {"labels": {"bkci.dispatch.kubenetes/core": "b"}},
                       "spec": {"containers": [{"name": "c",
                                "resources": {"requests": {"cpu": "2"}}}]}}),
            ));
            let wait = Wait {
                waited: Duration::from_secs(waited_s),
                tail: Duration::from_secs(tail_s),
                ..Wait::default()
            };
            let (a, ()) = s.schedule_then(&p, None, true, wait, |_, _| ());
            (s, a)
        };
        let (s, a) = build(0, 60, true);
        assert_eq!(a.decision.node(), None, "{:?}", a.decision.outcome);
        let hold = a.decision.warm_hold.clone().expect("held");
        assert_eq!((&*hold.node, hold.plugin), ("node-a", "History"));
        assert_eq!(hold.expected_free_seconds, 50.0);
        assert_eq!(
            a.decision.outcome,
            Outcome::Unschedulable {
                message: crate::usage::warm::HELD_MESSAGE.to_string()
            }
        );
        assert!(a.decision.notes.iter().any(|n| *n == hold.describe()));
        assert!(a.assumed.is_none() && a.placement.is_none());
        assert!(
            s.snapshot().get("node-b").unwrap().pods.is_empty(),
            "nothing assumed on the cold node"
        );
        // Retried on the events History declares (a pod ending on the warm node).
        let history = s.queueing_hints().get("History").expect("History's events");
        assert!(history.contains(ClusterEvent::PodDeleted));
        // Past the tail, with no tail, or with the warm wait off: placed on the cold node.
        for (waited, tail, enabled) in [(61, 60, true), (0, 0, true), (0, 60, false)] {
            let (_, a) = build(waited, tail, enabled);
            assert_eq!(
                a.decision.node(),
                Some("node-b"),
                "{waited} {tail} {enabled}"
            );
            assert!(a.decision.warm_hold.is_none());
        }
        let (s, _) = build(0, 60, false);
        assert!(
            s.queueing_hints().get("History").is_none(),
            "no Permit, no events"
        );
    }

    /// `usage.coldStart: calibrated`: with a new view, the scheduler learns what profiled
    /// pods use against their requests, and predicts a pod without a profile by it;
    /// `image` by the profiled pods that run the same container images, when some do.
    #[test]
    fn cold_start_calibrated_by_profiled_pods() {
        let build = |name: &str, builder: &str, image: &str, node: Option<&str>| {
            let mut spec = json!({"containers": [{"name": "c", "image": image,
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]});
            if let Some(n) = node {
                spec["nodeName"] = json!(n);
            }
            pod(
                name,
                json!({"metadata": {"labels": {"bkci.dispatch.kubenetes/core": builder}}, "spec": spec}),
            )
        };
        // Five heavy builds (2.5× their memory requests) and, with `light`, one JVM build
        // that uses a fifth of its requests.
        let mut running: Vec<_> = (0..5)
            .map(|i| build(&format!("r{i}"), "heavy", "rust:1", Some("n")))
            .collect();
        running.push(build("j", "light", "jvm:1", Some("n")));
        let predict = |cold: crate::usage::ColdStart, pods: usize, light: bool, image: &str| {
            let mut config = CoreConfig::default();
            config.usage.cold_start = cold;
            let s = Scheduler::new(&config).unwrap();
            let mut on_node = running[..pods].to_vec();
            if light {
                on_node.push(running[5].clone());
            }
            s.cache()
                .update(|c| c.replace(Snapshot::build([node("n", json!({}))], on_node)));
            let view = with_usage(
                Snapshot::new(),
                vec![],
                vec![
                    profile("heavy", 0.5, 2.5 * GI),
                    profile("light", 2.0, 0.2 * GI),
                ],
            )
            .usage()
            .view
            .clone();
            s.set_usage_view(view);
            let snap = s.snapshot();
            let u = PodUsage::of(
                &info(build("new", "fresh", image, None)),
                &snap,
                &config.usage,
                &Default::default(),
            );
            (u.prediction, snap.usage().calibration.clone())
        };
        use crate::usage::{ColdStart, Source};
        let (p, c) = predict(ColdStart::Calibrated, 5, false, "jvm:1");
        let c = c.expect("five profiled pods");
        assert_eq!(
            (c.all.memory_ratio, c.all.cpu_ratio, c.all.pods),
            (2.5, 0.5, 5)
        );
        assert!(c.by_image.is_empty(), "{c:?}");
        assert_eq!(p.memory_bytes, 2.5 * GI);
        assert_eq!(p.cpu_cores, 0.5);
        assert!(matches!(
            p.source,
            Source::Calibrated {
                pods: 5,
                image: None,
                ..
            }
        ));
        assert!(
            p.describe().contains("requests × 2.50 memory"),
            "{}",
            p.describe()
        );
        // `image`: a JVM build is judged by the JVM build, whatever the Rust builds use.
        let (p, c) = predict(ColdStart::Image, 5, true, "jvm:1");
        let c = c.expect("six profiled pods");
        assert_eq!(c.all.pods, 6);
        assert_eq!(c.by_image["rust:1"].pods, 5);
        assert_eq!(p.memory_bytes, 0.2 * GI);
        assert_eq!(p.cpu_cores, 2.0);
        assert!(
            p.describe().contains(
                "requests × 0.20 memory, × 2.00 CPU, p90 of 1 profiled pods with image jvm:1"
            ),
            "{}",
            p.describe()
        );
        // An image no profiled pod runs: every profiled pod's p90.
        let (p, _) = predict(ColdStart::Image, 5, true, "go:1");
        assert_eq!(p.memory_bytes, 2.5 * GI);
        assert!(matches!(p.source, Source::Calibrated { image: None, .. }));
        // Images alone do not make a calibration: five profiled pods are still needed.
        let (p, c) = predict(ColdStart::Image, 3, true, "jvm:1");
        assert!(c.is_none());
        assert_eq!((p.memory_bytes, p.source), (GI, Source::Requests));
        // Too few profiled pods, or `requests`: the requests.
        let (p, c) = predict(ColdStart::Calibrated, 4, false, "jvm:1");
        assert!(c.is_none());
        assert_eq!((p.memory_bytes, p.source), (GI, Source::Requests));
        let (p, _) = predict(ColdStart::Requests, 5, true, "jvm:1");
        assert_eq!((p.memory_bytes, p.source), (GI, Source::Requests));
    }

    /// With a new view and Fragmentation on, the scheduler counts the running builds'
    /// request shapes; a bare pod that runs until removed (a service) is not one.
    #[test]
    fn running_builds_shapes_come_with_a_view() {
        let build = |name: &str, cpu: &str| {
            pod(
                name,
                json!({"metadata": {"labels": {"bkci.dispatch.kubenetes/core": "b"}},
                    "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "x",
                    "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}),
            )
        };
        // The shapes a scheduler configured by `yaml` counts among `pods` at a new view
        // (none before it).
        let shapes = |config: CoreConfig, pods: Vec<k8s_openapi::api::core::v1::Pod>| {
            let s = Scheduler::new(&config).unwrap();
            s.cache()
                .update(|c| c.replace(Snapshot::build([node("n", json!({}))], pods)));
            assert!(s.snapshot().usage().shapes.is_empty());
            s.set_usage_view(Arc::new(UsageView::default()));
            s.snapshot().usage().shapes.clone()
        };
        let service = pod(
            "svc",
            json!({"spec": {"nodeName": "n", "containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}}]}}),
        );
        let pods = vec![build("a", "2"), build("b", "2"), build("c", "1"), service];
        let on = || {
            let setting = crate::config::PluginSetting {
                enabled: Some(true),
                weight: None,
            };
            [("Fragmentation".to_string(), setting)]
                .into_iter()
                .collect()
        };
        let mut config = CoreConfig::default();
        config.profiles[0].plugins = on();
        let mix = shapes(config, pods);
        let got: Vec<_> = mix.shapes.iter().map(|x| (x.milli_cpu, x.weight)).collect();
        assert_eq!(got, vec![(2000, 2.0), (1000, 1.0)]);
        assert_eq!(mix.total, 3.0);
        // Fragmentation in the extender's profile counts them too; in none (the default),
        // nothing is counted.
        let extender = CoreConfig {
            extender_plugins: on(),
            ..CoreConfig::default()
        };
        assert_eq!(shapes(extender, vec![build("a", "2")]).total, 1.0);
        assert!(shapes(CoreConfig::default(), vec![build("a", "2")]).is_empty());
    }

    #[test]
    fn gated_and_unknown_profile() {
        let s = Scheduler::new(&CoreConfig::default()).unwrap();
        s.cache()
            .update(|c| c.replace(Snapshot::build([node("n", json!({}))], [])));
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

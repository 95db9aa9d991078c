//! The usage-side inputs of one scheduling cycle, as the snapshot holds them: the published
//! [`UsageView`], the clock, the placements the scheduler made since the view was computed
//! ([`UsageContext`]), and what the snapshot derives from them per view and node layout
//! ([`UsageRows`]: the view by node index; [`RecentTable`]: the recent placements folded
//! by node index).
//!
//! A [`UsageContext`] is immutable during a cycle: it lives in the [`Snapshot`] behind an
//! `Arc`, and the scheduler replaces or updates it between cycles (a new view from the
//! refresh loop, the clock, each assumed pod). This module holds the data and what the
//! snapshot keeps current; [`crate::usage`], above the snapshot and the framework, holds
//! what a cycle reads from it (a node's real state and free room, a pod's prediction, the
//! usage fallback). The split keeps the snapshot from importing the cycle-side readers,
//! which import the snapshot.
//!
//! [`Snapshot`]: crate::snapshot::Snapshot

pub mod calibration;
pub mod held;
pub mod recent;
pub mod risk;
pub mod rows;
pub mod shapes;
pub mod whole;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::key::PodKey;
use crate::view::UsageView;

pub use calibration::{Calibration, Ratios};
pub use held::{Held, MetricPath};
pub use recent::{RecentSums, RecentTable};
pub use risk::MemoryDist;
pub use rows::{UsageRow, UsageRows};
pub use whole::WholeNeed;

/// How many of its own recent nodes per builder the scheduler remembers between views.
pub const HISTORY_DEPTH: usize = 8;

/// Placement times remembered per node (NodeStartRate's windows are far shorter).
const MAX_STARTS: usize = 256;

/// A pod the scheduler placed, counted with its predicted usage until the node's metrics
/// include it (crane's "hot value": usage lags placement by a scrape interval or more).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecentPlacement {
    /// The pod.
    pub pod: PodKey,
    /// When it was assumed, ms since the epoch.
    pub at_ms: i64,
    /// Predicted CPU, cores.
    pub cpu_cores: f64,
    /// Predicted memory, bytes.
    pub memory_bytes: f64,
    /// Disk it asked for, bytes.
    pub disk_bytes: f64,
    /// Predicted memory as a distribution (the risk-based fit, [`risk`]).
    pub memory_dist: MemoryDist,
}

/// A pod that left its node (it ended or was deleted): while its last sample is still in
/// the usage view (the node window), what it used comes off the node's windowed usage
/// ([`UsageContext::record_departure`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Departure {
    /// The pod.
    pub pod: PodKey,
    /// When the scheduler learned it left, ms since the epoch.
    pub at_ms: i64,
    /// Its newest sample in the view then.
    pub last_sample_ms: i64,
}

/// How far past a departure a sample may be and still be the departed pod's: `serve`'s
/// usage clock advances once a second (the housekeeping tick) and kubelets stamp samples
/// by their own clocks. A pod recreated under the same name needs the old one deleted, its
/// replacement created, scheduled, its sandbox and container started and a first poll of
/// its kubelet: longer than this.
pub const DEPARTURE_SLACK_MS: i64 = 2_000;

impl Departure {
    /// Whether the departure still describes the pod whose newest sample is at
    /// `newest_ms`: a sample taken after the pod left (later than both when the scheduler
    /// learned it and the newest sample it had then, by more than [`DEPARTURE_SLACK_MS`])
    /// is another pod of the same name, running. Samples up to the departure are the
    /// pod's own: the view the scheduler held when the pod ended was refreshed before its
    /// last samples (on the kit, a view up to 15 s old at every end), and judging by the
    /// newest sample of that view dropped almost every departure once the next view
    /// arrived.
    pub fn counts(&self, newest_ms: i64) -> bool {
        newest_ms <= self.at_ms.max(self.last_sample_ms) + DEPARTURE_SLACK_MS
    }
}

/// The usage-side inputs of one scheduling cycle.
#[derive(Debug, Clone, Default)]
pub struct UsageContext {
    /// Measured usage and builder profiles (empty until the first refresh).
    pub view: Arc<UsageView>,
    /// The scheduler's clock, ms since the epoch (simulated time in the simulator).
    pub now_ms: i64,
    /// Per node, pods placed recently enough that the node's usage may not show them yet
    /// (private: every change must move [`UsageContext::recent_version`], which
    /// [`recent::RecentTable`] follows).
    recent: HashMap<String, Vec<RecentPlacement>>,
    /// Per node, pods that left it whose samples may still be in the node window
    /// (private, as `recent`: changes move the version).
    departures: HashMap<String, Vec<Departure>>,
    /// Increments on every change to `recent` or `departures`.
    recent_version: u64,
    /// Per node, when the scheduler placed pods there (newest last), for NodeStartRate.
    pub starts: HashMap<String, VecDeque<i64>>,
    /// Per builder, the nodes the scheduler placed it on itself, newest first (merged
    /// before the store's placement history from the view).
    pub history: HashMap<String, VecDeque<String>>,
    /// What profiled pods really use against their requests (`usage.coldStart:
    /// calibrated`, per container images under `image`), computed with each new view;
    /// `None` with too few profiled pods.
    pub calibration: Option<Calibration>,
    /// The running builds' shapes, derived with each new view (the Fragmentation score).
    pub shapes: Arc<shapes::ShapeMix>,
    /// How many nodes the running big builds need kept whole (RealHeadroom's
    /// `keepWhole`), derived with each new view.
    pub whole: WholeNeed,
    /// The median over the view's builders of warm run length over cold, derived with
    /// each new view (the warm wait's expectation for a builder with no warm run yet;
    /// `None` with the warm wait off).
    pub warm_ratio: Option<f64>,
    /// What the peers' own metric pipelines have delivered ([`held`]), advanced with each
    /// new view; empty without a peer plugin.
    pub held: Arc<Held>,
}

impl UsageContext {
    /// Records a placement: for compensation on `node` and in the builder's history.
    pub fn record_placement(&mut self, builder: Option<&str>, node: &str, p: RecentPlacement) {
        if let Some(b) = builder {
            let h = self.history.entry(b.to_string()).or_default();
            h.retain(|n| n != node);
            h.push_front(node.to_string());
            h.truncate(HISTORY_DEPTH);
        }
        let starts = self.starts.entry(node.to_string()).or_default();
        starts.push_back(p.at_ms);
        if starts.len() > MAX_STARTS {
            starts.pop_front();
        }
        let list = self.recent.entry(node.to_string()).or_default();
        list.retain(|r| r.pod != p.pod);
        list.push(p);
        self.recent_version += 1;
    }

    /// The recent placements on `node` (oldest recorded first).
    pub fn recent_on(&self, node: &str) -> &[RecentPlacement] {
        self.recent.get(node).map_or(&[], Vec::as_slice)
    }

    /// Every node with recent placements, with them.
    pub fn recent_nodes(&self) -> impl Iterator<Item = (&str, &[RecentPlacement])> {
        self.recent.iter().map(|(n, l)| (n.as_str(), l.as_slice()))
    }

    /// Increments on every recorded, forgotten or pruned placement or departure.
    pub fn recent_version(&self) -> u64 {
        self.recent_version
    }

    /// Records that `pod` left `node` at `at_ms` (it ended or was deleted). A node's
    /// windowed statistic (the p95 over `analytics.nodeWindow`) keeps a pod that left on
    /// the node's books for most of the window: the node looks full after its builds end,
    /// and builds fall back. While the pod's samples stay in the view, each of the node's
    /// samples is taken less what the pod used at that moment, and the node's usage is
    /// the statistic of what is left ([`crate::view::NodeWindow::without`],
    /// [`recent::NodeRecent`], `NodeReal`): the mirror of counting a placement before the
    /// samples show it. What the pods still running did within the window (their swings)
    /// stays.
    ///
    /// Nothing is recorded for a pod the view has no sample of (nothing to take off).
    pub fn record_departure(&mut self, node: &str, pod: PodKey, at_ms: i64) {
        let Some(last_sample_ms) = self.view.pod(&pod).map(|m| m.newest_ms) else {
            return;
        };
        let list = self.departures.entry(node.to_string()).or_default();
        list.retain(|d| d.pod != pod);
        list.push(Departure {
            pod,
            at_ms,
            last_sample_ms,
        });
        self.recent_version += 1;
    }

    /// Whether [`UsageContext::record_departure`] would record `pod`: the view has a
    /// sample of it.
    pub fn is_measured(&self, pod: &PodKey) -> bool {
        self.view.pods.contains_key(pod)
    }

    /// The pods that left `node` (oldest recorded first).
    pub fn departures_on(&self, node: &str) -> &[Departure] {
        self.departures.get(node).map_or(&[], Vec::as_slice)
    }

    /// Every node with recent placements or departures.
    pub fn nodes_with_recent(&self) -> impl Iterator<Item = &str> {
        self.recent.keys().map(String::as_str).chain(
            self.departures
                .keys()
                .filter(|n| !self.recent.contains_key(*n))
                .map(String::as_str),
        )
    }

    /// Forgets a placement (its bind failed or the pod left).
    pub fn forget_placement(&mut self, node: &str, pod: &PodKey) {
        if let Some(list) = self.recent.get_mut(node) {
            list.retain(|r| r.pod != *pod);
            self.recent_version += 1;
        }
    }

    /// Drops recent placements the node's usage already includes (placed before its newest
    /// sample, in the view and in every peer's [`held`] figures) once they are older than
    /// `warmup_ms` as well, and all those older than
    /// `max_age_ms` (a node whose metrics stopped must not accumulate forever).
    pub fn prune(&mut self, warmup_ms: i64, max_age_ms: i64) {
        let now = self.now_ms;
        let view = &self.view;
        let held = &self.held;
        self.recent_version += 1;
        self.recent.retain(|node, list| {
            // A peer's figures may be older than the view's: a placement stays while any
            // of them may miss it.
            let newest =
                recent::newest_of(view, node).min(held.oldest_newest(node).unwrap_or(i64::MAX));
            list.retain(|r| {
                (r.at_ms > newest || now - r.at_ms < warmup_ms) && now - r.at_ms <= max_age_ms
            });
            !list.is_empty()
        });
        // A departure counts while its pod's last sample is in the view.
        self.departures.retain(|_, list| {
            list.retain(|d| view.pods.contains_key(&d.pod) && now - d.at_ms <= max_age_ms);
            !list.is_empty()
        });
        self.starts.retain(|_, s| {
            while s.front().is_some_and(|t| now - t > max_age_ms) {
                s.pop_front();
            }
            !s.is_empty()
        });
    }

    /// Placements on `node` from `from_ms` to `to_ms`, both included.
    pub fn starts_between(&self, node: &str, from_ms: i64, to_ms: i64) -> usize {
        self.starts.get(node).map_or(0, |s| {
            s.iter().filter(|t| (from_ms..=to_ms).contains(*t)).count()
        })
    }

    /// Placements on `node` at or after `since_ms`.
    pub fn starts_since(&self, node: &str, since_ms: i64) -> usize {
        self.starts.get(node).map_or(0, |s| {
            s.iter().rev().take_while(|t| **t >= since_ms).count()
        })
    }

    /// The recent placements on `node` whose usage its samples do not fully show yet, each
    /// with what it still adds ([`Counted`]):
    /// - all of its prediction while no sample of the node includes it;
    /// - once sampled, a share decaying linearly from 1 at placement to nothing
    ///   `warmup_ms` after it (a new pod's usage ramps up over its first minutes; the
    ///   measured part grows as the counted part shrinks) of what it adds: its whole
    ///   prediction, or, when its own containers were measured (the view's
    ///   [`PodUsage`]), the part of it they do not use yet, `max(0, predicted − measured)`
    ///   per resource: the node's samples already hold the measured part.
    ///
    /// Counting the decayed whole prediction on top of a pod the node already shows counted
    /// a short build twice for minutes (issue #72): nodes running them looked full and
    /// placements fell back to requests.
    ///
    /// [`PodUsage`]: crate::view::PodUsage
    pub fn uncounted<'a>(
        &'a self,
        node: &str,
        warmup_ms: i64,
    ) -> impl Iterator<Item = (&'a RecentPlacement, Counted)> + 'a {
        let newest = recent::newest_of(&self.view, node);
        let now = self.now_ms;
        let view = &self.view;
        self.recent_on(node).iter().filter_map(move |r| {
            if r.at_ms > newest {
                return Some((r, r.whole()));
            }
            let age = now - r.at_ms;
            if warmup_ms <= 0 || age >= warmup_ms {
                return None;
            }
            let share = (1.0 - age as f64 / warmup_ms as f64).min(1.0);
            let adds =
                recent::measured(view, newest, r).map_or_else(|| r.whole(), |m| r.remainder(&m));
            Some((r, adds.map(|x| x * share)))
        })
    }
}

/// What a recent placement adds on its node, in [`RecentPlacement::whole`]'s order: CPU
/// (cores), memory, disk (bytes), memory mean and variance ([`MemoryDist`]).
pub type Counted = [f64; 5];

impl RecentPlacement {
    /// Its whole prediction, as [`Counted`].
    pub fn whole(&self) -> Counted {
        [
            self.cpu_cores,
            self.memory_bytes,
            self.disk_bytes,
            self.memory_dist.mean,
            self.memory_dist.var,
        ]
    }

    /// The part of its prediction its measured usage `m` does not cover yet: per resource
    /// `max(0, predicted − measured)` (a resource not reported counts as nothing used);
    /// the memory variance in the share of the memory still to come (an upper bound, as
    /// for a decaying share).
    pub fn remainder(&self, m: &crate::view::PodUsage) -> Counted {
        let left = |p: f64, used: Option<f64>| (p - used.unwrap_or(0.0)).max(0.0);
        let memory = left(self.memory_bytes, m.memory_bytes);
        let share = if self.memory_bytes > 0.0 {
            memory / self.memory_bytes
        } else {
            0.0
        };
        [
            left(self.cpu_cores, m.cpu_cores),
            memory,
            left(self.disk_bytes, m.disk_bytes),
            left(self.memory_dist.mean, m.memory_bytes),
            self.memory_dist.var * share,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::UsageView;

    /// A view of one node `n` whose newest sample is at `newest_ms`.
    fn view_of_node_n(newest_ms: i64) -> UsageView {
        let mut view = UsageView::default();
        let mut n = crate::plugins::testutil::usage("n", 0.0, 0.0, 0, None);
        n.newest_ms = newest_ms;
        view.nodes.insert("n".into(), n);
        view
    }

    #[test]
    fn recent_placements_count_until_sampled_then_decay_over_warmup() {
        let mut ctx = UsageContext {
            now_ms: 100_000,
            ..Default::default()
        };
        ctx.view = Arc::new(view_of_node_n(60_000));
        let placed = |pod: &str, at_ms: i64| RecentPlacement {
            pod: PodKey::new("ns", pod),
            at_ms,
            cpu_cores: 1.0,
            memory_bytes: 100.0,
            disk_bytes: 0.0,
            memory_dist: MemoryDist::default(),
        };
        ctx.record_placement(None, "n", placed("new", 90_000)); // after the newest sample
        ctx.record_placement(None, "n", placed("mid", 40_000)); // sampled, 60 s old
        ctx.record_placement(None, "n", placed("old", -300_000)); // sampled, 400 s old
        let shares = |warmup: i64| -> Vec<(String, f64)> {
            ctx.uncounted("n", warmup)
                .map(|(r, c)| (r.pod.name.to_string(), (c[1]).round() / 100.0))
                .collect()
        };
        // Warmup 5 min: the sampled 60 s-old pod still counts 80 %; the old one not at all.
        assert_eq!(shares(300_000), [("new".into(), 1.0), ("mid".into(), 0.8)]);
        // Warmup 0: only what no sample includes.
        assert_eq!(shares(0), [("new".to_string(), 1.0)]);
        // Pruning keeps what still counts.
        ctx.prune(300_000, 600_000);
        assert_eq!(ctx.recent_on("n").len(), 2);
        ctx.prune(0, 600_000);
        assert_eq!(ctx.recent_on("n").len(), 1);
    }

    /// A sampled placement whose own containers were measured adds a decayed share of what
    /// they do not use yet, not of its whole prediction; a pod measured before it was
    /// placed (a name reused) is not this placement's usage.
    #[test]
    fn measured_placements_add_what_their_pod_does_not_use_yet() {
        let mut ctx = UsageContext {
            now_ms: 100_000,
            ..Default::default()
        };
        let mut view = view_of_node_n(90_000);
        let measured = |mem: f64, at: i64| crate::view::PodUsage {
            cpu_cores: Some(0.25),
            memory_bytes: Some(mem),
            disk_bytes: None,
            newest_ms: at,
        };
        view.pods
            .insert(PodKey::new("ns", "ramping"), measured(30.0, 90_000));
        view.pods
            .insert(PodKey::new("ns", "peaked"), measured(150.0, 90_000));
        view.pods
            .insert(PodKey::new("ns", "reused"), measured(150.0, 10_000));
        ctx.view = Arc::new(view);
        for pod in ["ramping", "peaked", "reused"] {
            ctx.record_placement(
                None,
                "n",
                RecentPlacement {
                    pod: PodKey::new("ns", pod),
                    at_ms: 40_000,
                    cpu_cores: 1.0,
                    memory_bytes: 100.0,
                    disk_bytes: 10.0,
                    memory_dist: MemoryDist {
                        mean: 80.0,
                        var: 50.0,
                    },
                },
            );
        }
        let got: HashMap<String, Counted> = ctx
            .uncounted("n", 300_000)
            .map(|(r, c)| (r.pod.name.to_string(), c.map(|x| (x * 1e6).round() / 1e6)))
            .collect();
        // 60 s of a 300 s warm-up: 80 % of what each adds.
        assert_eq!(got["ramping"], [0.6, 56.0, 8.0, 40.0, 28.0]);
        assert_eq!(got["peaked"], [0.6, 0.0, 8.0, 0.0, 0.0]);
        // Not measured since its placement: its whole prediction.
        assert_eq!(got["reused"][1], 80.0);
        // Past the warm-up the node's samples are the truth for all of them.
        assert_eq!(ctx.uncounted("n", 60_000).count(), 0);
    }

    /// A pod sampled after its node counts by what it used when the node was sampled: the
    /// node's memory sample at 80 s holds the 30 it used then, not the 90 of its newest
    /// sample (a kubelet reads containers on demand, its root cgroup every ten seconds or
    /// so); a pod with no sample by then is not in the node's usage at all; the folded
    /// table agrees.
    #[test]
    fn a_pod_counts_by_what_it_used_when_its_node_was_sampled() {
        use crate::view::{NodeWindow, PodUsage, PodWindow};
        let mut ctx = UsageContext {
            now_ms: 100_000,
            ..Default::default()
        };
        let mut view = view_of_node_n(95_000);
        let node = view.nodes.get_mut("n").unwrap();
        node.window = Some(Arc::new(NodeWindow {
            quantile: 0.95,
            cpu: vec![(80_000, 0.5)],
            memory: vec![(60_000, 10.0), (80_000, 40.0)],
        }));
        for (pod, samples) in [
            ("ramping", vec![(70_000, 30.0), (90_000, 90.0)]),
            ("late", vec![(90_000, 50.0)]),
        ] {
            let key = PodKey::new("ns", pod);
            view.pods.insert(
                key.clone(),
                PodUsage {
                    cpu_cores: None,
                    memory_bytes: Some(samples.last().unwrap().1),
                    disk_bytes: None,
                    newest_ms: 90_000,
                },
            );
            view.pod_windows.insert(
                key,
                PodWindow {
                    cpu: vec![],
                    memory: vec![samples],
                },
            );
            ctx.record_placement(
                None,
                "n",
                RecentPlacement {
                    pod: PodKey::new("ns", pod),
                    at_ms: 65_000,
                    cpu_cores: 0.0,
                    memory_bytes: 100.0,
                    disk_bytes: 0.0,
                    memory_dist: MemoryDist::default(),
                },
            );
        }
        ctx.view = Arc::new(view);
        assert_eq!(recent::newest_of(&ctx.view, "n"), 80_000);
        let got: HashMap<String, f64> = ctx
            .uncounted("n", i64::MAX)
            .map(|(r, c)| (r.pod.name.to_string(), c[1].round()))
            .collect();
        // A warm-up that never ends: the prediction less what the node's sample holds of
        // the pod.
        assert_eq!(got["ramping"], 70.0);
        assert_eq!(got["late"], 100.0);
        let sums = RecentSums::of(&ctx, "n", i64::MAX);
        assert!((sums.memory - 170.0).abs() < 1e-6, "{sums:?}");
    }
}

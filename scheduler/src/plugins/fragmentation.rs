//! Fragmentation: a node scores by how much of its unrequested room the placement leaves
//! unusable for the builds the cluster runs, so that small pods fill the gaps big ones
//! cannot use and leave whole the room big ones need.
//!
//! Fragmentation gradient descent (Weng et al., *Beware of Fragmentation: Scheduling
//! GPU-Sharing Workloads with Fragmentation Gradient Descent*, USENIX ATC '23, from
//! Alibaba's GPU clusters), on CPU and memory requests. A node's fragmentation for a pod
//! shape is its free room when that shape no longer fits there (all of it is lost to that
//! shape), else nothing; the node's fragmentation `F` is its expectation over the shapes
//! the cluster's builds now run ([`crate::usage_context::shapes`], counted with each usage view;
//! this pod's own shape added once). The free room is the node's unrequested allocatable,
//! the mean of its CPU and memory as fractions of the largest node's; a shape fits where
//! its requests fit (NodeResourcesFit's test). The score is the change the placement
//! makes: `50 − 250 × ΔF`, clamped to 0..=100. A placement that leaves every shape fitting
//! where it fitted scores 50; one that takes a node below the room a common shape needs
//! scores less; one that fills a gap no common shape could use scores more (a fifth of
//! the largest node made unusable for every shape, or taken from such a gap, reaches 0 or
//! 100).
//!
//! Requests, not real usage: room whole by requests is what a big build needs to be
//! placed at all, and real memory stays RealMemoryFit's and RealHeadroom's to judge.
//! Measured with the shapes' predicted memory too, the score packed real memory and gave
//! hot node-hours and OOM kills on farms of small nodes (docs/placement.md, *Keeping room whole*).
//!
//! Without a shape mix (no usage view yet, or no build running), with no fresh usage on any
//! feasible node, and in a cycle of the usage fallback, PreScore skips the plugin: the
//! other scores decide, and with no usage data at all headroom decides as kube-scheduler.
//! The plugin's weight (7, RealHeadroom's) is its one knob. Off by default: on the farm
//! families it shortens waits where CPU requests bind, and costs elsewhere (docs/placement.md,
//! *Keeping room whole*).

use std::sync::Arc;

use crate::framework::{
    CycleState, Plugin, PreScorePlugin, Registered, ScorePlugin, Status, WrittenIn,
};
use crate::snapshot::table::res;
use crate::snapshot::{NodeIdx, NodeInfo, PodInfo, Snapshot};
use crate::usage::{UsagePolicy, pod_usage};
use crate::usage_context::shapes::{Shape, ShapeMix};

use super::PluginDeps;

/// Plugin name.
pub const NAME: &str = "Fragmentation";

/// Score points per unit of ΔF (the expected free room lost, in largest-node fractions):
/// a placement that makes a fifth of the largest node unusable for every shape scores 0.
const POINTS_PER_FRAGMENT: f64 = 250.0;

/// A node's unrequested room, CPU in millicores and memory in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Room {
    cpu: f64,
    memory: f64,
}

impl Room {
    fn fits(&self, s: &Shape) -> bool {
        s.milli_cpu as f64 <= self.cpu && s.memory as f64 <= self.memory
    }
}

/// What one cycle's scores read, computed once in PreScore.
struct Cycle {
    shapes: Arc<ShapeMix>,
    /// The pod's own shape, when it is a build.
    own: Option<Shape>,
    /// The pod's requests (CPU millicores, memory bytes).
    pod: Room,
    /// The largest node's allocatable (CPU millicores, memory bytes).
    largest: Room,
    /// The shapes' weights, the pod's own included.
    total: f64,
}

impl Cycle {
    fn all_shapes(&self) -> impl Iterator<Item = &Shape> {
        self.shapes.shapes.iter().chain(self.own.as_ref())
    }

    /// The weight of the shapes whose requests fit `room`.
    fn fitting(&self, room: &Room) -> f64 {
        self.all_shapes()
            .filter(|s| room.fits(s))
            .map(|s| s.weight)
            .sum()
    }

    /// The node's expected fragmentation over the shapes, in largest-node fractions.
    fn fragmentation(&self, room: &Room) -> f64 {
        if self.total <= 0.0 {
            return 0.0;
        }
        let lost = self.total - self.fitting(room);
        let size = 0.5
            * (room.cpu.max(0.0) / self.largest.cpu + room.memory.max(0.0) / self.largest.memory);
        size * lost / self.total
    }

    /// The room of a node with `allocatable` and `requested` before and after the pod.
    fn rooms(&self, allocatable: (i64, i64), requested: (i64, i64)) -> (Room, Room) {
        let before = Room {
            cpu: (allocatable.0 - requested.0) as f64,
            memory: (allocatable.1 - requested.1) as f64,
        };
        let after = Room {
            cpu: before.cpu - self.pod.cpu,
            memory: before.memory - self.pod.memory,
        };
        (before, after)
    }

    /// ΔF and the score.
    fn score(&self, allocatable: (i64, i64), requested: (i64, i64)) -> (f64, i64) {
        let (before, after) = self.rooms(allocatable, requested);
        let d = self.fragmentation(&after) - self.fragmentation(&before);
        let s = (50.0 - POINTS_PER_FRAGMENT * d).round().clamp(0.0, 100.0) as i64;
        (d, s)
    }
}

/// The node's allocatable and requested CPU and memory.
fn node_resources(node: &NodeInfo) -> ((i64, i64), (i64, i64)) {
    let (a, r) = (&node.allocatable, &node.requested);
    ((a.milli_cpu, a.memory), (r.milli_cpu, r.memory))
}

/// The Fragmentation plugin.
#[derive(Debug)]
pub struct Fragmentation {
    identity: crate::identity::IdentityConfig,
    policy: Arc<UsagePolicy>,
}

impl Fragmentation {
    /// Creates the plugin.
    pub fn new(deps: &PluginDeps) -> Self {
        Fragmentation {
            identity: deps.identity.clone(),
            policy: deps.policy.clone(),
        }
    }

    /// Registers its extension points (PreScore, Score).
    pub fn register(self) -> Registered {
        let me = Arc::new(self);
        Registered {
            pre_score: Some(me.clone()),
            score: Some(me),
            ..Registered::new(NAME)
        }
    }
}

impl Plugin for Fragmentation {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl PreScorePlugin for Fragmentation {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        feasible: &[NodeIdx],
    ) -> Status {
        let shapes = snapshot.usage().shapes.clone();
        if shapes.is_empty() || crate::usage::fallback_active(state) {
            return Status::skip();
        }
        let u = pod_usage(state, pod, snapshot, &self.policy, &self.identity);
        if !feasible.iter().any(|&i| u.is_fresh(i, &self.policy)) {
            return Status::skip();
        }
        let r = &pod.requests.requests;
        let own = (!u.pod.long_running).then_some(Shape {
            milli_cpu: r.milli_cpu,
            memory: r.memory,
            weight: 1.0,
        });
        let largest = snapshot.table().allocatable.iter().fold(
            Room {
                cpu: 1.0,
                memory: 1.0,
            },
            |l, a| Room {
                cpu: l.cpu.max(a[res::CPU] as f64),
                memory: l.memory.max(a[res::MEMORY] as f64),
            },
        );
        state.write(Cycle {
            total: shapes.total + own.map_or(0.0, |s| s.weight),
            shapes,
            own,
            pod: Room {
                cpu: r.milli_cpu as f64,
                memory: r.memory as f64,
            },
            largest,
        });
        Status::success()
    }
}

impl ScorePlugin for Fragmentation {
    fn normalizes(&self) -> bool {
        // No NormalizeScore: 50 means "changes nothing" on every node alike.
        false
    }

    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let c = state.written_by::<Cycle>(NAME, WrittenIn::PreScore)?;
        let (a, r) = node_resources(node);
        Ok(c.score(a, r).1)
    }

    fn score_batch(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[NodeIdx],
        scores: &mut Vec<i64>,
    ) -> Result<(), (usize, Status)> {
        let table = snapshot.table();
        state.score_each::<Cycle>(NAME, nodes, scores, |c, idx| {
            let (a, r) = (
                &table.allocatable[idx as usize],
                &table.requested[idx as usize],
            );
            c.score((a[res::CPU], a[res::MEMORY]), (r[res::CPU], r[res::MEMORY]))
                .1
        })
    }

    fn explain_score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let c = state.read::<Cycle>()?;
        let (a, r) = node_resources(node);
        let (before, after) = c.rooms(a, r);
        let (d, s) = c.score(a, r);
        Some(format!(
            "running builds whose requests fit the room left: {:.0} → {:.0} of {:.0} (this pod's shape included); fragmentation {:.3} → {:.3} of the largest node (Δ {:+.3}) → {s}",
            c.fitting(&before),
            c.fitting(&after),
            c.total,
            c.fragmentation(&before),
            c.fragmentation(&after),
            d
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: i64 = 1 << 30;

    /// 4-CPU nodes (3.5 allocatable) of 16 GiB running 2-CPU and 1-CPU builds, as
    /// mixed-shapes-04, and a pod of `pod_cpu` millicores and 512 MiB.
    fn cycle(pod_cpu: i64) -> Cycle {
        Cycle {
            shapes: Arc::new(ShapeMix {
                shapes: vec![
                    Shape {
                        milli_cpu: 2000,
                        memory: 2 * GIB,
                        weight: 6.0,
                    },
                    Shape {
                        milli_cpu: 1000,
                        memory: 2 * GIB,
                        weight: 4.0,
                    },
                ],
                total: 10.0,
            }),
            own: None,
            pod: Room {
                cpu: pod_cpu as f64,
                memory: (GIB / 2) as f64,
            },
            largest: Room {
                cpu: 3500.0,
                memory: (14 * GIB) as f64,
            },
            total: 10.0,
        }
    }

    const ALLOC: (i64, i64) = (3500, 14 * GIB);

    #[test]
    fn a_small_pod_fills_the_gap_beside_a_big_build_before_an_empty_node() {
        let c = cycle(500);
        // Empty node: 3.5 CPU left → 3, every build still fits: ΔF 0 → 50.
        let (d_empty, s_empty) = c.score(ALLOC, (0, 0));
        assert_eq!(d_empty, 0.0);
        assert_eq!(s_empty, 50);
        // Beside a 2-CPU build: 1.5 CPU, where no 2-CPU build fits, → 1: the gap shrinks.
        let (d_gap, s_gap) = c.score(ALLOC, (2000, 2 * GIB));
        assert!(d_gap < 0.0, "{d_gap}");
        assert!(s_gap > s_empty, "{s_gap}");
        // Beside 1.5 CPU of builds: 2 → 1.5 CPU, a 2-CPU build no longer fits there.
        let (d_break, s_break) = c.score(ALLOC, (1500, 2 * GIB));
        assert!(d_break > 0.0, "{d_break}");
        assert!(s_break < s_empty, "{s_break}");
        // A 1.5-CPU pod there leaves room for no build at all: it costs more still.
        let c = cycle(1500);
        let (d_both, _) = c.score(ALLOC, (1500, 2 * GIB));
        assert!(d_both > d_break, "{d_both} vs {d_break}");
    }

    #[test]
    fn no_shape_or_only_fitting_shapes_change_nothing() {
        let mut c = cycle(1000);
        c.shapes = Arc::new(ShapeMix::default());
        c.total = 0.0;
        assert_eq!(c.score(ALLOC, (0, 0)), (0.0, 50));
        // A node with room for every shape before and after.
        let c = cycle(100);
        assert_eq!(c.score((64_000, 256 * GIB), (0, 0)), (0.0, 50));
    }
}

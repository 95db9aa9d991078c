//! Recent placements by node index, kept as sums a cycle reads in constant time per node.
//!
//! A placement counts on its node until the node's samples include it, then decays over
//! `usage.warmup`: its whole prediction, or, once its own pod was measured, the part of the
//! prediction the pod does not use yet ([`UsageContext::uncounted`]). Summing every node's
//! placements afresh in each cycle walked every placement of the last ten minutes per
//! decision: on the kit at 15,000 nodes that was a third of `serve`'s CPU (issue #22).
//! Here each node's placements are folded once, when they change (a placement recorded or
//! forgotten, a new view, a new node layout), into:
//! - the sum of those placed after the node's newest sample (counted whole), and
//! - those the samples include, oldest first, each with what it adds before its decay `x`,
//!   and suffix sums of `x` and of `x · (newest − placed)`: with
//!   `d = newest − placed` and share `1 − (now − placed) / warmup`, the placements still
//!   warming up sum to `Σx · (1 − (now − newest) / warmup) − Σ(x·d) / warmup`, one binary
//!   search for the first still warming up and one multiply-add per resource.
//!
//! The result equals the per-placement walk up to floating-point rounding (a test checks
//! it against [`UsageContext::uncounted`]).

use std::sync::Arc;

use crate::key::NodeIdx;
use crate::view::{PodUsage, PodWindow, Signal, UsageView};

use super::risk::MemoryDist;

/// Values folded per placement: CPU, memory, disk, memory mean, memory variance.
const N: usize = 5;
use super::{Departure, RecentPlacement, UsageContext};

/// What recent placements add on a node: how many, and their (decayed) predicted usage.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RecentSums {
    /// Placements counted.
    pub count: usize,
    /// CPU, cores.
    pub cpu: f64,
    /// Memory, bytes.
    pub memory: f64,
    /// Disk, bytes.
    pub disk: f64,
    /// Memory as a distribution ([`super::risk`]): the means and variances of the
    /// placements, each in the share still counted (a variance scaled by the share, not
    /// its square: an upper bound, so a fading pod's spread is never underrated).
    pub memory_dist: MemoryDist,
    /// The node's measured CPU (cores) and memory (bytes) had the pods that left it never
    /// run: its samples, each less what those pods used at that moment
    /// ([`crate::view::NodeWindow::without`], [`UsageContext::record_departure`]). `None`:
    /// no pod that left has samples in the view.
    pub without_departed: Option<[f64; 2]>,
}

impl RecentSums {
    /// The sums of the placements on `node` that its usage does not show yet.
    /// Folded as a cycle folds them (this module), so both give the same numbers.
    pub fn of(ctx: &UsageContext, node: &str, warmup_ms: i64) -> RecentSums {
        NodeRecent::build(ctx, node).sums(ctx.now_ms, warmup_ms)
    }
}

/// One placement the node's samples already include, with the sums from it to the newest.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sampled {
    at_ms: i64,
    /// Its own CPU (cores), memory and disk (bytes), memory mean and variance: the exact
    /// walk's inputs.
    x: [f64; N],
    /// Σ x over this placement and every later one.
    sum_x: [f64; N],
    /// Σ x · (newest − placed) over this placement and every later one.
    sum_xd: [f64; N],
}

/// One node's recent placements, folded for [`NodeRecent::sums`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeRecent {
    /// The node's newest sample when folded (`i64::MIN`: none).
    newest_ms: i64,
    /// Placements after the newest sample, counted whole.
    unsampled: RecentSums,
    /// Placements at or before the newest sample, oldest first, `x` what each still adds
    /// before its decay: its whole prediction, or what its measured pod does not use yet
    /// ([`RecentPlacement::remainder`]).
    sampled: Vec<Sampled>,
    /// The node's usage without the pods that left it ([`RecentSums::without_departed`]).
    without_departed: Option<[f64; 2]>,
}

impl NodeRecent {
    /// Folds the placements and departures of `node` in `ctx`, given its view (the node's
    /// newest sample and the pods' measured usage).
    pub fn build(ctx: &UsageContext, node: &str) -> NodeRecent {
        let view = &*ctx.view;
        let list = ctx.recent_on(node);
        let newest_ms = newest_of(view, node);
        let mut out = NodeRecent {
            newest_ms,
            without_departed: without_departed(view, node, ctx.departures_on(node)),
            ..NodeRecent::default()
        };
        for r in list {
            if r.at_ms > newest_ms {
                out.unsampled.count += 1;
                out.unsampled.cpu += r.cpu_cores;
                out.unsampled.memory += r.memory_bytes;
                out.unsampled.disk += r.disk_bytes;
                out.unsampled.memory_dist = out.unsampled.memory_dist.plus(r.memory_dist);
                continue;
            }
            out.sampled.push(Sampled {
                at_ms: r.at_ms,
                x: measured(view, newest_ms, r).map_or_else(|| r.whole(), |m| r.remainder(&m)),
                sum_x: [0.0; N],
                sum_xd: [0.0; N],
            });
        }
        out.sampled.sort_by_key(|s| s.at_ms);
        let (mut sx, mut sxd) = ([0.0; N], [0.0; N]);
        for s in out.sampled.iter_mut().rev() {
            let d = (newest_ms - s.at_ms) as f64;
            for k in 0..N {
                sx[k] += s.x[k];
                sxd[k] += s.x[k] * d;
            }
            s.sum_x = sx;
            s.sum_xd = sxd;
        }
        out
    }

    /// Whether no placement nor departure counts on the node.
    pub fn is_empty(&self) -> bool {
        self.unsampled.count == 0 && self.sampled.is_empty() && self.without_departed.is_none()
    }

    /// What the placements add at `now_ms` with warm-up `warmup_ms`
    /// ([`UsageContext::uncounted`]'s shares, summed).
    #[inline]
    pub fn sums(&self, now_ms: i64, warmup_ms: i64) -> RecentSums {
        let mut s = self.unsampled;
        s.without_departed = self.without_departed;
        if warmup_ms <= 0 || self.sampled.is_empty() {
            return s;
        }
        // Still warming up: `now − placed < warmup`.
        let cutoff = now_ms.saturating_sub(warmup_ms);
        let first = self.sampled.partition_point(|e| e.at_ms <= cutoff);
        let Some(head) = self.sampled.get(first) else {
            return s;
        };
        let w = warmup_ms as f64;
        s.count += self.sampled.len() - first;
        if now_ms >= self.newest_ms {
            // Every share is at most 1 (placed ≤ newest ≤ now): the closed form holds.
            let f = 1.0 - (now_ms - self.newest_ms) as f64 / w;
            s.cpu += head.sum_x[0] * f - head.sum_xd[0] / w;
            s.memory += head.sum_x[1] * f - head.sum_xd[1] / w;
            s.disk += head.sum_x[2] * f - head.sum_xd[2] / w;
            s.memory_dist.mean += head.sum_x[3] * f - head.sum_xd[3] / w;
            s.memory_dist.var += head.sum_x[4] * f - head.sum_xd[4] / w;
        } else {
            // A sample newer than the clock (a simulator's tick): shares cap at 1.
            for e in &self.sampled[first..] {
                let share = (1.0 - (now_ms - e.at_ms) as f64 / w).min(1.0);
                s.cpu += e.x[0] * share;
                s.memory += e.x[1] * share;
                s.disk += e.x[2] * share;
                s.memory_dist.mean += e.x[3] * share;
                s.memory_dist.var += e.x[4] * share;
            }
        }
        s
    }
}

/// Every node's [`NodeRecent`] by index, for one usage view, node layout and version of
/// the recent placements ([`UsageContext::recent_version`]). Sparse: only the nodes with
/// placements or departures have an entry. A cycle asks for every node's sums, a node
/// without an entry answers from a 4-byte slot, and a full table of 5,000 mostly empty
/// entries (128 bytes each) left the cycle waiting on memory (`perf`, benches/README.md).
#[derive(Debug, Clone)]
pub struct RecentTable {
    view: Arc<UsageView>,
    layout: u64,
    version: u64,
    /// Each node's entry in `entries`, by index ([`NO_ENTRY`]: none).
    slot: Vec<u32>,
    entries: Vec<NodeRecent>,
}

/// [`RecentTable`]'s slot of a node without an entry.
const NO_ENTRY: u32 = u32::MAX;

impl RecentTable {
    /// Folds every node's placements in `ctx` for the nodes `names` (by index) of node
    /// layout `layout`; `index_of` finds a node's index by name.
    pub fn build(
        ctx: &UsageContext,
        len: usize,
        layout: u64,
        index_of: impl Fn(&str) -> Option<NodeIdx>,
    ) -> RecentTable {
        let mut t = RecentTable {
            view: ctx.view.clone(),
            layout,
            version: ctx.recent_version(),
            slot: vec![NO_ENTRY; len],
            entries: Vec::new(),
        };
        for name in ctx.nodes_with_recent() {
            if let Some(idx) = index_of(name) {
                t.set(idx, NodeRecent::build(ctx, name));
            }
        }
        t
    }

    /// Node `idx`'s entry, made or replaced.
    fn set(&mut self, idx: NodeIdx, n: NodeRecent) {
        let Some(slot) = self.slot.get_mut(idx as usize) else {
            return;
        };
        match self.entries.get_mut(*slot as usize) {
            Some(e) => *e = n,
            None => {
                *slot = self.entries.len() as u32;
                self.entries.push(n);
            }
        }
    }

    /// Whether the table folds `ctx`'s placements as they are, for node layout `layout`.
    pub fn is_for(&self, ctx: &UsageContext, layout: u64) -> bool {
        self.layout == layout
            && self.version == ctx.recent_version()
            && Arc::ptr_eq(&self.view, &ctx.view)
    }

    /// Folds node `name` (at `idx`; `None`: not in the layout) again from `ctx` after its
    /// placements changed, and takes `ctx`'s version. The table must have been current
    /// just before the change.
    pub fn refold(&mut self, ctx: &UsageContext, idx: Option<NodeIdx>, name: &str) {
        if let Some(i) = idx {
            self.set(i, NodeRecent::build(ctx, name));
        }
        self.version = ctx.recent_version();
    }

    /// What recent placements add on node `idx` at `now_ms` with warm-up `warmup_ms`.
    #[inline]
    pub fn sums(&self, idx: NodeIdx, now_ms: i64, warmup_ms: i64) -> RecentSums {
        self.slot
            .get(idx as usize)
            .and_then(|&s| self.entries.get(s as usize))
            .map_or_else(RecentSums::default, |n| n.sums(now_ms, warmup_ms))
    }
}

/// What the node's usage in `view`, sampled at `node_ms` ([`newest_of`]), shows of `r`'s
/// pod, if the pod's memory was sampled since `r` placed it (an older sample is another
/// pod of the same name): its newest sample, or, where that is newer than the node's, what
/// it used at the node's sample ([`PodWindow::at`]; nothing where it has no sample then).
/// A kubelet reads a pod's containers on demand and its node's root cgroup every ten
/// seconds or so: a ramping build's newest sample can be hundreds of MiB above what the
/// node's sample holds of it, and taking that off its prediction counted it nowhere (on
/// the kit, builds placed onto nodes already full, OOM kills).
pub fn measured(view: &UsageView, node_ms: i64, r: &RecentPlacement) -> Option<PodUsage> {
    let m = *view
        .pod(&r.pod)
        .filter(|m| m.memory_bytes.is_some() && m.newest_ms >= r.at_ms)?;
    match view.pod_windows.get(&r.pod) {
        Some(w) if m.newest_ms > node_ms => Some(PodUsage {
            cpu_cores: m.cpu_cores.map(|_| w.at(Signal::Cpu, node_ms)),
            memory_bytes: Some(w.at(Signal::Memory, node_ms)),
            ..m
        }),
        _ => Some(m),
    }
}

/// The CPU and memory of `node` in `view` without the pods that left it
/// ([`NodeWindow::without`](crate::view::NodeWindow::without)), over the departures whose
/// samples are in the view. A departure counts only while its pod's newest sample is no
/// newer than when the scheduler learned it left ([`Departure::counts`]). `None`: none
/// counts, or the node has no samples.
fn without_departed(view: &UsageView, node: &str, departures: &[Departure]) -> Option<[f64; 2]> {
    let left: Vec<&PodWindow> = counting(view, departures)
        .filter_map(|d| view.pod_windows.get(&d.pod))
        .collect();
    if left.is_empty() {
        return None;
    }
    let w = view.node(node)?.window.as_deref()?;
    Some([
        w.without(Signal::Cpu, &left)?,
        w.without(Signal::Memory, &left)?,
    ])
}

/// The departures that come off their node's window in `view`: their pod's samples are
/// in it, and none newer than the departure ([`Departure::counts`]).
pub fn counting<'a>(
    view: &'a UsageView,
    departures: &'a [Departure],
) -> impl Iterator<Item = &'a Departure> + 'a {
    departures
        .iter()
        .filter(|d| view.pod(&d.pod).is_some_and(|m| d.counts(m.newest_ms)))
}

/// When the node's usage in `view` was sampled: its newest memory sample, or where the
/// view keeps no samples its newest of any metric (`i64::MIN`: none). A placement after it
/// is not in the node's usage yet; one before it is, by what its pod used then
/// ([`measured`]). (A kubelet's summary stamps the node's memory when its root cgroup was
/// last read, seconds before the summary was fetched.)
pub fn newest_of(view: &UsageView, node: &str) -> i64 {
    view.node(node).map_or(i64::MIN, |u| {
        u.window
            .as_deref()
            .and_then(|w| w.memory.last())
            .map_or(u.newest_ms, |(t, _)| *t)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::PodKey;

    fn placed(pod: &str, at_ms: i64, x: f64) -> RecentPlacement {
        RecentPlacement {
            pod: PodKey::new("ns", pod),
            at_ms,
            cpu_cores: x,
            memory_bytes: x * 1e9,
            disk_bytes: x * 1e8,
            memory_dist: MemoryDist {
                mean: x * 5e8,
                var: x * 1e16,
            },
        }
    }

    /// The folded sums equal the per-placement walk, whatever the clock, warm-up and mix of
    /// sampled and unsampled placements (placement times deliberately out of order).
    #[test]
    fn folded_sums_equal_the_walk() {
        let mut ctx = UsageContext::default();
        let mut view = UsageView::default();
        let mut n = crate::plugins::testutil::usage("n", 0.0, 0.0, 0, None);
        n.newest_ms = 1_700_000_060_000;
        view.nodes.insert("n".into(), n);
        // Every third pod measured, some past their prediction and some short of it.
        for i in (0..40i64).step_by(3) {
            view.pods.insert(
                PodKey::new("ns", format!("p{i}")),
                crate::view::PodUsage {
                    cpu_cores: Some(0.3 * i as f64),
                    memory_bytes: Some(1e9 * (i % 5) as f64),
                    disk_bytes: (i % 2 == 0).then_some(1e7),
                    newest_ms: 1_700_000_060_000,
                },
            );
        }
        ctx.view = Arc::new(view);
        let base = 1_700_000_000_000i64;
        for i in 0..40i64 {
            let at = base + ((i * 7919) % 97) * 1_300 - 20_000;
            ctx.record_placement(None, "n", placed(&format!("p{i}"), at, 0.1 + i as f64));
        }
        let folded = NodeRecent::build(&ctx, "n");
        assert!(folded.unsampled.count > 0 && !folded.sampled.is_empty());
        for warmup in [0, 1, 30_000, 60_000, 300_000, i64::MAX] {
            for now in [
                base,
                base + 59_000,
                base + 60_000,
                base + 90_000,
                base + 400_000,
            ] {
                ctx.now_ms = now;
                let mut want = RecentSums::default();
                for (_, c) in ctx.uncounted("n", warmup) {
                    want.count += 1;
                    want.cpu += c[0];
                    want.memory += c[1];
                    want.disk += c[2];
                    want.memory_dist.mean += c[3];
                    want.memory_dist.var += c[4];
                }
                let got = folded.sums(now, warmup);
                assert_eq!(got.count, want.count, "now {now} warmup {warmup}");
                for (g, w) in [
                    (got.cpu, want.cpu),
                    (got.memory, want.memory),
                    (got.disk, want.disk),
                    (got.memory_dist.mean, want.memory_dist.mean),
                    (got.memory_dist.var, want.memory_dist.var),
                ] {
                    assert!(
                        (g - w).abs() <= 1e-9 * w.abs().max(1.0),
                        "now {now} warmup {warmup}: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn table_follows_the_context_version_view_and_layout() {
        let mut ctx = UsageContext::default();
        ctx.record_placement(None, "a", placed("p", 10, 1.0));
        let index = |n: &str| match n {
            "a" => Some(0),
            "b" => Some(1),
            _ => None,
        };
        let mut t = RecentTable::build(&ctx, 2, 7, index);
        assert!(t.is_for(&ctx, 7) && !t.is_for(&ctx, 8));
        assert_eq!(t.sums(0, 20, 0).count, 1);
        assert_eq!(t.sums(1, 20, 0).count, 0);
        ctx.record_placement(None, "b", placed("q", 11, 2.0));
        assert!(!t.is_for(&ctx, 7), "a recorded placement makes it stale");
        t.refold(&ctx, Some(1), "b");
        assert!(t.is_for(&ctx, 7));
        assert_eq!(t.sums(1, 20, 0).cpu, 2.0);
        ctx.view = Arc::new(UsageView::default());
        assert!(!t.is_for(&ctx, 7), "a new view makes it stale");
    }

    /// Placements recorded and forgotten through the snapshot refold their node in the
    /// table the cycles read (the same table, not a rebuilt one), and the result is what a
    /// fresh fold gives; a change made behind the snapshot's back rebuilds it.
    #[test]
    fn snapshot_refolds_changed_nodes_in_place() {
        use crate::plugins::testutil::node;
        use crate::snapshot::Snapshot;
        let mut snap = Snapshot::build(["a", "b", "c"].map(|n| node(n, serde_json::json!({}))), []);
        let mut view = UsageView::default();
        let mut u = crate::plugins::testutil::usage("b", 0.0, 0.0, 0, None);
        u.newest_ms = 50;
        view.nodes.insert("b".into(), u);
        snap.usage_mut().view = Arc::new(view);
        snap.usage_mut().now_ms = 100;
        let first = Arc::as_ptr(&snap.recent_table());
        snap.record_placement(None, "a", placed("p", 60, 1.0));
        snap.record_placement(None, "b", placed("q", 40, 2.0));
        snap.record_placement(None, "b", placed("r", 70, 4.0));
        snap.record_placement(None, "gone", placed("s", 70, 8.0));
        snap.forget_placement("a", &PodKey::new("ns", "p"));
        let kept = snap.recent_table();
        assert_eq!(Arc::as_ptr(&kept), first, "refolded in place");
        let fresh = RecentTable::build(snap.usage(), snap.len(), kept.layout, |n| snap.index_of(n));
        for idx in 0..snap.len() as NodeIdx {
            for (now, warmup) in [(100, 0), (100, 120), (55, 30), (1_000, 10)] {
                assert_eq!(
                    kept.sums(idx, now, warmup),
                    fresh.sums(idx, now, warmup),
                    "node {idx} at {now} with warm-up {warmup}"
                );
            }
        }
        let b = snap.index_of("b").unwrap();
        assert_eq!(
            kept.sums(b, 100, 0).cpu,
            4.0,
            "the sampled one needs a warm-up"
        );
        assert_eq!(kept.sums(b, 100, 120).count, 2);
        drop(kept);
        snap.usage_mut()
            .record_placement(None, "c", placed("ns/t", 90, 1.0));
        let rebuilt = snap.recent_table();
        assert_ne!(
            Arc::as_ptr(&rebuilt),
            first,
            "a change behind its back rebuilds it"
        );
        assert_eq!(rebuilt.sums(snap.index_of("c").unwrap(), 100, 0).count, 1);
    }

    /// A pod that left its node comes off every sample of the node's window it was in,
    /// by what it used then, while its samples are in the view: through the snapshot (the
    /// table the cycles read) and [`crate::usage::NodeReal`]. A running pod's own swing in
    /// the window stays; a pod the view never measured is not recorded; a newer sample of
    /// the name (another pod, running) stops it counting; pruning drops it once its
    /// samples left the view.
    #[test]
    fn a_pod_that_left_comes_off_the_samples_it_was_in() {
        use crate::plugins::testutil::node;
        use crate::snapshot::Snapshot;
        use crate::usage::{NodeReal, UsagePolicy};
        use crate::view::{NodeWindow, PodUsage, PodWindow, Stat};
        const GI: f64 = (1u64 << 30) as f64;
        let times: Vec<i64> = (0..=10).map(|i| i * 100).collect();
        // A pod still running uses 3 GiB, 4 GiB once (t = 200); a build of 3 GiB ran
        // until t = 600 and ended.
        let running = |t: i64| if t == 200 { 4.0 * GI } else { 3.0 * GI };
        let build_ran = |t: i64| t <= 600;
        let node_at = |t: i64| running(t) + if build_ran(t) { 3.0 * GI } else { 0.0 };
        let mut snap = Snapshot::build([node("a", serde_json::json!({}))], []);
        let mut view = UsageView::default();
        let mut u = crate::plugins::testutil::usage("a", 1.0, 0.0, 0, None);
        // p95 of [3 GiB × 4, 6 GiB × 6, 7 GiB] (linear): 6.5 GiB; 3 GiB now.
        u.memory_working_set_bytes = Stat {
            current: 3.0 * GI,
            windowed: 6.5 * GI,
        };
        u.newest_ms = 1_000;
        u.window = Some(Arc::new(NodeWindow {
            quantile: 0.95,
            cpu: times.iter().map(|t| (*t, 1.0)).collect(),
            memory: times.iter().map(|t| (*t, node_at(*t))).collect(),
        }));
        view.nodes.insert("a".into(), u);
        let build = PodKey::new("ns", "build");
        let measured = |at: i64| PodUsage {
            cpu_cores: Some(0.0),
            memory_bytes: Some(3.0 * GI),
            disk_bytes: None,
            newest_ms: at,
        };
        view.pods.insert(build.clone(), measured(600));
        view.pod_windows.insert(
            build.clone(),
            PodWindow {
                cpu: vec![],
                memory: vec![
                    times
                        .iter()
                        .filter(|t| build_ran(**t))
                        .map(|t| (*t, 3.0 * GI))
                        .collect(),
                ],
            },
        );
        snap.usage_mut().view = Arc::new(view.clone());
        snap.usage_mut().now_ms = 1_100;
        let policy = UsagePolicy::default();
        let used = |snap: &Snapshot| {
            let n = snap.get("a").unwrap();
            NodeReal::of(n, snap.usage(), &policy).memory_used / GI
        };
        assert_eq!(used(&snap), 6.5);
        snap.pod_left("a", &PodKey::new("ns", "never-measured"));
        assert!(snap.usage().departures_on("a").is_empty());
        // The scheduler learns the build left (t = 1 100) from a view refreshed before its
        // last samples (its newest then at 400); the next view has them all, up to its end.
        let mut stale = view.clone();
        stale.pods.insert(build.clone(), measured(400));
        snap.usage_mut().view = Arc::new(stale);
        snap.pod_left("a", &build);
        snap.usage_mut().view = Arc::new(view.clone());
        let idx = snap.index_of("a").unwrap();
        let sums = snap.recent_table().sums(idx, 1_100, 0);
        assert_eq!(
            sums.without_departed.map(|[c, m]| (c, m / GI)),
            Some((1.0, 3.5))
        );
        assert_eq!(
            used(&snap),
            3.5,
            "p95 of [3 GiB × 10, 4 GiB]: the build is off, the running pod's swing stays"
        );
        // A sample a second after the departure is still the build's (the usage clock
        // moves once a second)...
        let mut late = view.clone();
        late.pods.insert(build.clone(), measured(2_100));
        snap.usage_mut().view = Arc::new(late);
        assert_eq!(used(&snap), 3.5);
        // ...but another pod of the name, sampled well after the build left, runs, and
        // counts on the node again.
        let mut again = view.clone();
        again.pods.insert(
            build.clone(),
            measured(1_101 + super::super::DEPARTURE_SLACK_MS),
        );
        snap.usage_mut().view = Arc::new(again);
        assert_eq!(used(&snap), 6.5);
        // Its samples left the window: pruning drops the departure.
        let mut later = view.clone();
        later.pods.clear();
        later.pod_windows.clear();
        snap.usage_mut().view = Arc::new(later);
        snap.usage_mut().prune(0, i64::MAX);
        assert!(snap.usage().departures_on("a").is_empty());
    }
}

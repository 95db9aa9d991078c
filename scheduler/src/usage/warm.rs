//! The warm wait (`usage.warmWait`): a returning builder whose cycle chose a node none of
//! its runs used (a cold build cache) waits, unscheduled, for one of its warm nodes when
//! that is expected to cost less than the cold cache would, and the wait stays within the
//! queue's own tail.
//!
//! Three conditions, each measured, no constant fitted to a farm:
//! 1. **It pays.** The builder's profile holds the median length of its runs on a node new
//!    to it and on one an earlier run used (`cold_run_s`, `warm_run_s`, from its own runs);
//!    their difference is what a warm cache saves. A builder whose runs have all been on
//!    nodes new to it (a cold length, no warm one yet) is expected to keep of its cold
//!    length what the cluster's builders with both keep (the median of their warm over
//!    cold length). A build running on a warm node is expected to end after its builder's
//!    median run length less the time it has run. The pod waits while `waited + earliest
//!    expected end < cold − warm`.
//! 2. **It stays in the queue's tail.** The scheduling loop keeps the time to schedule of
//!    the pods it placed without a hold over `tailWindow` ([`QueueTail`]); the pod waits
//!    only while `waited + earliest expected end < p99 − p50` of it, and only while the
//!    pods held in the window fit in the tail's room above its p99: no more than the pods
//!    that waited less 1 % of all placed (held ones counted). A farm whose queue places
//!    every pod at once (spread 0) holds nothing; one whose pods already wait gives a held
//!    build no more than the spread it has, to no more builds than its p99 can take
//!    without moving (a tail that only just reaches 1 % has no room: the holds would carry
//!    the p99). A held build placed after a wait at or below the window's p99 gives its
//!    room back (a wait there cannot raise the p99); one that overran stays counted.
//! 3. **One held build per node it waits for.** The build expected to end on a warm node
//!    frees room for one build: a node another held build already waits for (until that
//!    hold would end, [`QueueTail::awaited_by_others`]) is not waited for again. Without
//!    it, after a burst up to six builds were held for the same node at once, each
//!    re-held at every retry while the build there ran past its median ("expected to free
//!    in 0s"); the others waited out their tail, and 23 of 57 held builds went cold anyway
//!    (big-nodes-13, seed 2).
//!
//! Measured on the farm families (docs/placement.md, *The warm wait, built*, *One held
//! build per node it waits for* and *The room given back, and builders with no warm run
//! yet*). The judgement is pure over the snapshot; the loop
//! measures the tail and the wait and hands them over in the cycle's [`Wait`].

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Wait;
use crate::framework::{ClusterEvent, ClusterEvents, WarmHold};
use crate::key::PodId;
use crate::snapshot::{NodeIdx, PodInfo, Snapshot};

/// The `usage.warmWait` configuration section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct WarmWait {
    /// Whether a returning builder whose cycle chose a cold node may wait for a warm one
    /// (see the module docs: only when its own runs say a warm cache saves more than the
    /// wait costs, only within the queue's tail, and only as many builds as the tail's
    /// p99 has room for). Needs History in the profile (its warm nodes). Default `true`.
    pub enabled: bool,
    /// How far back the queue's tail (p99 − p50 of the time to schedule of pods placed
    /// without a hold) is measured. Default `48h`: long enough that a quiet hour does not
    /// reset it, short enough to follow a farm that changes.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("x-duration" = true))]
    pub tail_window: Duration,
}

impl Default for WarmWait {
    fn default() -> Self {
        WarmWait {
            enabled: true,
            tail_window: Duration::from_secs(48 * 3600),
        }
    }
}

impl WarmWait {
    /// `tailWindow` must be positive.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.tail_window.is_zero() {
            return Err((
                "usage.warmWait.tailWindow".into(),
                "must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// The events that may end a hold, declared for the plugin a hold is blamed on (History):
/// a warm node frees when a pod on it ends (`PodDeleted`); a new usage view changes the
/// run lengths; and since a hold also ends with time (`waited` reaching the tail, which no
/// event announces), any change to nodes and pods retries it: a needless retry costs one
/// cycle, a missed one keeps the pod until the unschedulable timeout.
pub const RETRY_ON: ClusterEvents = ClusterEvents::OBJECTS.with(ClusterEvent::UsageRefreshed);

/// The FailedScheduling message of a held pod: constant, so repeated holds fold into one
/// event series (the numbers are in `/explain`).
pub const HELD_MESSAGE: &str = "waiting for a node with its build cache (usage.warmWait): a build there is expected to end sooner than a cold cache would cost; see /explain";

/// Whether the pod waits for a warm node, and why: `None` places it on `chosen` as the
/// cycle decided. `warm` are the nodes History found in the builder's history; `plugin`
/// is the plugin the hold is blamed on (the queue retries the pod on its events).
pub fn judge(
    snapshot: &Snapshot,
    pod: &PodInfo,
    warm: &[NodeIdx],
    chosen: NodeIdx,
    wait: &Wait,
    identity: &crate::identity::IdentityConfig,
    plugin: &'static str,
) -> Option<WarmHold> {
    if wait.waited >= wait.tail || warm.is_empty() || warm.contains(&chosen) {
        return None;
    }
    let usage = snapshot.usage();
    let builder = crate::identity::builder_identity(&pod.pod.metadata, identity);
    let profile = usage.view.builder(builder.as_str())?;
    let cold = profile.cold_run_s?;
    let warm_run = match profile.warm_run_s {
        Some(w) => w,
        None => cold * usage.warm_ratio?,
    };
    let saves = cold - warm_run;
    if saves.is_nan() || saves <= 0.0 {
        return None;
    }
    let (node, free_in) = warm
        .iter()
        .filter_map(|&n| {
            let info = snapshot.node(n);
            if wait.awaited.contains(&info.name) {
                return None;
            }
            let end = info
                .pods
                .iter()
                .filter_map(|p| expected_end_s(p, snapshot, identity))
                .min_by(f64::total_cmp)?;
            Some((info.name.clone(), end))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    let waited = wait.waited.as_secs_f64();
    // Both bounds on the wait the pod is expected to have once the warm node frees: what
    // the cache saves, and the queue's tail.
    let bound = saves.min(wait.tail.as_secs_f64());
    (waited + free_in < bound).then_some(WarmHold {
        node,
        expected_free_seconds: free_in,
        saves_seconds: saves,
        waited_seconds: waited,
        tail_seconds: wait.tail.as_secs_f64(),
        plugin,
    })
}

/// The median, over the builders whose runs include both, of their warm run length over
/// their cold one: what a warm cache leaves of a run on this cluster, for a builder whose
/// runs have all been on nodes new to it (it has a cold length and no warm one yet).
/// `None` while no builder has both. Computed once per usage view, with the calibration
/// ([`super::derive`]), and kept in the snapshot's usage context: a held pod is judged
/// again at every retry against the same view.
pub fn cluster_warm_ratio(view: &crate::view::UsageView) -> Option<f64> {
    let mut ratios: Vec<f64> = view
        .builders
        .values()
        .filter_map(|b| Some(b.warm_run_s? / b.cold_run_s?))
        .filter(|r| r.is_finite() && *r >= 0.0)
        .collect();
    if ratios.is_empty() {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    Some(ratios[ratios.len() / 2])
}

/// Seconds until `p` is expected to end: its builder's median run length (warm, else
/// cold) less the time it has run since it started; 0 for one past it. `None` for a pod
/// without a start time or a builder profile with run lengths (a service, a new builder).
fn expected_end_s(
    p: &PodInfo,
    snapshot: &Snapshot,
    identity: &crate::identity::IdentityConfig,
) -> Option<f64> {
    let usage = snapshot.usage();
    let start = p.pod.status.as_ref()?.start_time.as_ref()?;
    let builder = crate::identity::builder_identity(&p.pod.metadata, identity);
    let profile = usage.view.builder(builder.as_str())?;
    let length = profile.warm_run_s.or(profile.cold_run_s)?;
    let ran = (usage.now_ms - start.0.as_millisecond()).max(0) as f64 / 1000.0;
    Some((length - ran).max(0.0))
}

/// Buckets of the tail's histogram: one below a second, then eight a doubling up to
/// 2^20 s (12 days). Adjacent buckets differ by 9 %: the spread's precision.
const BUCKETS: usize = 1 + 8 * 20;
/// Slots the window is cut into: the window slides by a 48th of itself.
const SLOTS: i64 = 48;

/// The time to schedule of the pods placed without a hold, over a sliding window: what
/// the warm wait may add to (its p99 − p50). A histogram per slot of the window (bounded
/// memory: 48 slots of 161 counts, whatever the pod rate; O(1) to record, O(buckets) to
/// read), and the pods held in the window (no more than the tail's room), so that their
/// placement does not count and the room stays spent unless they were placed within the
/// p99, with the node each still waits for.
#[derive(Debug)]
pub struct QueueTail {
    slot_ms: i64,
    slots: VecDeque<(i64, Box<[u32; BUCKETS]>)>,
    totals: Box<[u64; BUCKETS]>,
    held: HashMap<PodId, Held>,
    /// The newest time seen, ms: the window ends there.
    now_ms: i64,
}

/// A pod held in the window.
#[derive(Debug)]
struct Held {
    /// When it was first held, ms.
    at_ms: i64,
    /// The node it waits for and until when (ms: when its hold would end, its wait
    /// reaching the tail) while it is not placed. The end bounds a claim whose pod was
    /// deleted while held, which no placement clears.
    awaits: Option<(Arc<str>, i64)>,
}

impl QueueTail {
    /// An empty tail over `window`.
    pub fn new(window: Duration) -> QueueTail {
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        QueueTail {
            slot_ms: (window_ms / SLOTS).max(1000),
            slots: VecDeque::new(),
            totals: Box::new([0; BUCKETS]),
            held: HashMap::new(),
            now_ms: i64::MIN,
        }
    }

    /// The pod `id` was held at `at_ms` for `node` until `until_ms` (when its wait would
    /// reach its tail): its placement will not count, and no other pod is held for `node`
    /// meanwhile.
    pub fn held(&mut self, id: &PodId, at_ms: i64, node: Arc<str>, until_ms: i64) {
        self.advance(at_ms);
        let h = self.held.entry(id.clone()).or_insert(Held {
            at_ms,
            awaits: None,
        });
        h.awaits = Some((node, until_ms));
    }

    /// The nodes held pods other than `id` wait for, as the window's newest time sees
    /// them (sorted, each once).
    pub fn awaited_by_others(&self, id: &PodId) -> Arc<[Arc<str>]> {
        let mut nodes: Vec<Arc<str>> = self
            .held
            .iter()
            .filter(|(other, _)| *other != id)
            .filter_map(|(_, h)| h.awaits.as_ref())
            .filter(|(_, until)| *until > self.now_ms)
            .map(|(node, _)| node.clone())
            .collect();
        nodes.sort();
        nodes.dedup();
        nodes.into()
    }

    /// The pod `id` was placed at `at_ms` after waiting `waited`: counted unless it was
    /// held. A held pod no longer awaits its node; it gives its room back when its wait
    /// ended at or below the window's p99 (a wait there cannot raise the p99), else stays
    /// counted against the room until the window passes it.
    pub fn placed(&mut self, id: &PodId, at_ms: i64, waited: Duration) {
        self.advance(at_ms);
        if self.held.contains_key(id) {
            if waited.as_secs_f64() <= self.quantile(0.99) {
                self.held.remove(id);
            } else if let Some(h) = self.held.get_mut(id) {
                h.awaits = None;
            }
            return;
        }
        let b = bucket(waited.as_secs_f64());
        let slot = at_ms.max(self.now_ms).div_euclid(self.slot_ms);
        match self.slots.back_mut() {
            Some((s, counts)) if *s == slot => counts[b] += 1,
            _ => {
                let mut counts = Box::new([0; BUCKETS]);
                counts[b] = 1;
                self.slots.push_back((slot, counts));
            }
        }
        self.totals[b] += 1;
    }

    /// The tail pod `id` may wait in: [`spread`](Self::spread) for a pod already held,
    /// or while the pods held in the window stay within the tail's room above the p99
    /// (the pods that waited beyond 1 % of those placed, held ones counted as placed);
    /// else zero.
    pub fn tail_for(&self, id: &PodId) -> Duration {
        let spread = self.spread();
        if spread.is_zero() || self.held.contains_key(id) {
            return spread;
        }
        let n: u64 = self.totals.iter().sum();
        let waited: u64 = self.totals[1..].iter().sum();
        let held = self.held.len() as f64 + 1.0;
        if held <= waited as f64 - 0.01 * (n as f64 + held) {
            spread
        } else {
            Duration::ZERO
        }
    }

    /// p99 − p50 of the waits counted in the window ending at the newest time seen; zero
    /// with none.
    pub fn spread(&self) -> Duration {
        Duration::from_secs_f64((self.quantile(0.99) - self.quantile(0.50)).max(0.0))
    }

    /// The `q` quantile of the waits counted in the window, seconds (its bucket's value);
    /// zero with none.
    fn quantile(&self, q: f64) -> f64 {
        let n: u64 = self.totals.iter().sum();
        if n == 0 {
            return 0.0;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (b, c) in self.totals.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return value(b);
            }
        }
        value(BUCKETS - 1)
    }

    /// Moves the window's end to `at_ms` (never back) and drops the slots and held pods
    /// that fell out of it.
    fn advance(&mut self, at_ms: i64) {
        if at_ms <= self.now_ms {
            return;
        }
        self.now_ms = at_ms;
        let oldest = at_ms.div_euclid(self.slot_ms) - SLOTS;
        let mut dropped = false;
        while self.slots.front().is_some_and(|(s, _)| *s <= oldest) {
            if let Some((_, counts)) = self.slots.pop_front() {
                for (t, c) in self.totals.iter_mut().zip(counts.iter()) {
                    *t -= u64::from(*c);
                }
                dropped = true;
            }
        }
        if dropped {
            // A held pod deleted before it was placed would stay forever otherwise.
            let since = oldest.saturating_mul(self.slot_ms);
            self.held.retain(|_, h| h.at_ms > since);
        }
    }
}

impl Default for QueueTail {
    /// An empty tail over the default `tailWindow`.
    fn default() -> Self {
        QueueTail::new(WarmWait::default().tail_window)
    }
}

/// The bucket of a wait of `s` seconds.
fn bucket(s: f64) -> usize {
    if s.is_nan() || s < 1.0 {
        return 0;
    }
    (1 + (8.0 * s.log2()).floor() as usize).min(BUCKETS - 1)
}

/// The value a bucket stands for: 0 below a second, else its geometric middle.
fn value(b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        ((b as f64 - 0.5) / 8.0).exp2()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::PodKey;

    /// A pod by name, with no uid (as a pod from a client that sets none): the pods of
    /// these tests differ only by name, so a tail keyed by uid would take them for one.
    fn id(name: impl AsRef<str>) -> PodId {
        PodId::new(PodKey::new("ci", name.as_ref()), "")
    }

    #[test]
    fn spread_is_p99_minus_p50_within_a_bucket() {
        let mut t = QueueTail::new(Duration::from_secs(48 * 3600));
        assert_eq!(t.spread(), Duration::ZERO);
        for i in 0..99 {
            t.placed(&id(format!("u{i}")), 1_000, Duration::ZERO);
        }
        // A queue that places every pod at once has no tail.
        assert_eq!(t.spread(), Duration::ZERO);
        for i in 0..2 {
            t.placed(&id(format!("v{i}")), 2_000, Duration::from_secs(300));
        }
        let s = t.spread().as_secs_f64();
        assert!((s - 300.0).abs() / 300.0 < 0.05, "{s}");
    }

    #[test]
    fn held_pods_do_not_count_and_old_slots_leave() {
        let hour = 3_600_000;
        let mut t = QueueTail::new(Duration::from_secs(48 * 3600));
        for i in 0..50 {
            t.placed(&id(format!("a{i}")), hour, Duration::from_secs(100));
        }
        t.held(&id("h"), hour, "n".into(), hour);
        t.placed(&id("h"), hour + 1, Duration::from_secs(10_000));
        for i in 0..50 {
            t.placed(&id(format!("b{i}")), 2 * hour, Duration::ZERO);
        }
        let s = t.spread().as_secs_f64();
        assert!(
            (s - 100.0).abs() / 100.0 < 0.05,
            "the held pod's wait counted: {s}"
        );
        // 48 h later the first hour's waits have left the window.
        t.placed(&id("c"), 50 * hour + 1, Duration::ZERO);
        assert_eq!(t.spread(), Duration::ZERO);
        // And so has a held pod never placed.
        t.held(&id("gone"), 50 * hour + 2, "n".into(), 50 * hour + 2);
        t.placed(&id("x"), 100 * hour, Duration::ZERO);
        assert!(t.held.is_empty());
    }

    #[test]
    fn holds_stay_within_the_room_above_the_p99() {
        let mut t = QueueTail::default();
        // 96 pods placed at once, 4 after 60 s: p99 − p50 is 60 s, and the waiting pods are
        // 4 % of those placed: room for two held (4 less 1 % of the pods, held ones
        // counted).
        for i in 0..96 {
            t.placed(&id(format!("a{i}")), 1_000, Duration::ZERO);
        }
        for i in 0..4 {
            t.placed(&id(format!("w{i}")), 1_000, Duration::from_secs(60));
        }
        assert!(t.tail_for(&id("h1")).as_secs() >= 55);
        t.held(&id("h1"), 2_000, "n1".into(), 60_000);
        assert!(t.tail_for(&id("h2")).as_secs() >= 55);
        t.held(&id("h2"), 2_000, "n2".into(), 60_000);
        assert_eq!(t.tail_for(&id("h3")), Duration::ZERO, "no room left");
        // A pod already held keeps its tail.
        assert!(t.tail_for(&id("h1")).as_secs() >= 55);
        // h2 overran the p99 (100 s against 60 s): it stays counted against the room.
        t.placed(&id("h2"), 3_000, Duration::from_secs(100));
        assert_eq!(
            t.tail_for(&id("h3")),
            Duration::ZERO,
            "a held pod placed past the p99 still counts"
        );
        // h1 was placed within the p99 (30 s): a wait there cannot raise it, so its room
        // comes back and h3 may be held.
        t.placed(&id("h1"), 3_000, Duration::from_secs(30));
        assert!(
            t.tail_for(&id("h3")).as_secs() >= 55,
            "h1's room not given back"
        );
        // Neither held pod's wait was counted as a placement: the spread is as before.
        assert!((t.spread().as_secs_f64() - 60.0).abs() < 5.0);
    }

    #[test]
    fn buckets_are_monotone_and_bounded() {
        let mut last = 0;
        for s in [0.0, 0.5, 1.0, 1.5, 2.0, 60.0, 3600.0, 1e9, f64::NAN, -1.0] {
            let b = bucket(s);
            assert!(b < BUCKETS);
            if s.is_finite() && s >= 0.0 {
                assert!(b >= last, "{s}");
                last = b;
            }
        }
        assert!(((value(bucket(300.0)) - 300.0) / 300.0).abs() < 0.05);
    }

    /// node-a (warm) runs `r` of builder c (300 s runs) started `ran_s` ago; the pod of
    /// builder b (cold 600 s, warm 300 s) was sent to node-b.
    fn judged(ran_s: i64, waited_s: u64, tail_s: u64, chosen: &str) -> Option<WarmHold> {
        judged_awaiting(ran_s, waited_s, tail_s, chosen, &[])
    }

    /// [`judged`], with `awaited` the nodes other held pods wait for.
    fn judged_awaiting(
        ran_s: i64,
        waited_s: u64,
        tail_s: u64,
        chosen: &str,
        awaited: &[&str],
    ) -> Option<WarmHold> {
        judge_in(ran_s, waited_s, tail_s, chosen, awaited, None)
    }

    /// [`judged`] with a tail of 60 s and these builder profiles instead of b's (`r`'s
    /// builder c, with a warm run length only, is added).
    fn judged_with(ran_s: i64, profiles: Vec<crate::view::BuilderProfile>) -> Option<WarmHold> {
        judge_in(ran_s, 0, 60, "node-b", &[], Some(profiles))
    }

    fn judge_in(
        ran_s: i64,
        waited_s: u64,
        tail_s: u64,
        chosen: &str,
        awaited: &[&str],
        profiles: Option<Vec<crate::view::BuilderProfile>>,
    ) -> Option<WarmHold> {
        use crate::plugins::testutil::{NOW_MS, info, node, pod, profile, with_usage};
        use serde_json::json;
        let annotated = |name: &str, builder: &str, extra: serde_json::Value| {
            let mut v = json!({"metadata": {"annotations": {"headroom.io/builder": builder}}});
            crate::plugins::testutil::merge(&mut v, extra);
            pod(name, v)
        };
        let start = k8s_openapi::jiff::Timestamp::from_millisecond(NOW_MS - ran_s * 1000).unwrap();
        let r = annotated(
            "r",
            "c",
            json!({"spec": {"nodeName": "node-a"}, "status": {"startTime": start.to_string()}}),
        );
        let snap = Snapshot::build([node("node-a", json!({})), node("node-b", json!({}))], [r]);
        let profiles = profiles.unwrap_or_else(|| {
            let mut b = profile("b", 1.0, 1e9);
            (b.cold_run_s, b.warm_run_s) = (Some(600.0), Some(300.0));
            vec![b]
        });
        let mut c = profile("c", 1.0, 1e9);
        c.warm_run_s = Some(300.0);
        let snap = with_usage(snap, vec![], profiles.into_iter().chain([c]).collect());
        let p = info(annotated("p", "b", json!({})));
        let wait = Wait {
            waited: Duration::from_secs(waited_s),
            tail: Duration::from_secs(tail_s),
            awaited: awaited.iter().map(|&n| Arc::from(n)).collect(),
            ..Wait::default()
        };
        let warm = [snap.index_of("node-a").unwrap()];
        let chosen = snap.index_of(chosen).unwrap();
        let identity = crate::identity::IdentityConfig::default();
        judge(&snap, &p, &warm, chosen, &wait, &identity, "History")
    }

    #[test]
    fn holds_only_when_the_warm_node_frees_before_the_cache_pays_and_within_the_tail() {
        // r ends in 50 s; the warm cache saves 300 s: held.
        let h = judged(250, 0, 60, "node-b").expect("held");
        assert_eq!(&*h.node, "node-a");
        assert_eq!((h.expected_free_seconds, h.saves_seconds), (50.0, 300.0));
        assert!(
            h.describe().contains("expected to free in 50s"),
            "{}",
            h.describe()
        );
        // Waited 260 s already: 260 + 50 ≥ 300, the cold node now.
        assert!(judged(250, 260, 600, "node-b").is_none());
        // r just started (300 s to go ≥ 300 s saved): not worth it.
        assert!(judged(0, 0, 600, "node-b").is_none());
        // No tail (a queue that places everything at once), waited past it, or the warm
        // node frees after it.
        assert!(judged(250, 0, 0, "node-b").is_none());
        assert!(judged(250, 0, 40, "node-b").is_none());
        assert!(judged(250, 61, 60, "node-b").is_none());
        // The cycle chose the warm node itself.
        assert!(judged(250, 0, 60, "node-a").is_none());
        // Another held pod already waits for node-a: its build frees room for one.
        assert!(judged_awaiting(250, 0, 60, "node-b", &["node-a"]).is_none());
        assert!(judged_awaiting(250, 0, 60, "node-b", &["node-c"]).is_some());
    }

    #[test]
    fn a_builder_with_no_warm_run_yet_is_judged_by_the_clusters_warm_ratio() {
        use crate::plugins::testutil::profile;
        // b has run only on nodes new to it (cold 600 s); o0's warm runs take half its
        // cold ones, o1's a quarter, o2's three quarters (c, with no cold length, does
        // not count): the median ratio is 1/2, so b's warm cache is expected to save
        // 300 s.
        let with = |cold: Option<f64>, warm: Option<f64>, others: &[(f64, f64)]| {
            let mut b = profile("b", 1.0, 1e9);
            (b.cold_run_s, b.warm_run_s) = (cold, warm);
            let mut v = vec![b];
            for (i, &(c, w)) in others.iter().enumerate() {
                let mut o = profile(&format!("o{i}"), 1.0, 1e9);
                (o.cold_run_s, o.warm_run_s) = (Some(c), Some(w));
                v.push(o);
            }
            v
        };
        let three = [(400.0, 200.0), (400.0, 100.0), (400.0, 300.0)];
        let h = judged_with(250, with(Some(600.0), None, &three)).expect("held");
        assert_eq!(h.saves_seconds, 300.0);
        // Its own warm runs, once it has them, take over (here they save 100 s: r's
        // 50 s left is still worth waiting for).
        let own = judged_with(250, with(Some(600.0), Some(500.0), &three)).expect("held");
        assert_eq!(own.saves_seconds, 100.0);
        // No builder has both lengths yet, or b has no cold run: nothing to go by.
        assert!(judged_with(250, with(Some(600.0), None, &[])).is_none());
        assert!(judged_with(250, with(None, None, &three)).is_none());
    }

    #[test]
    fn a_node_is_awaited_by_one_held_pod_until_it_is_placed_or_its_hold_ends() {
        let mut t = QueueTail::default();
        t.held(&id("h1"), 1_000, "node-a".into(), 61_000);
        // h1 does not keep itself from its own node; others do not wait for it.
        assert!(t.awaited_by_others(&id("h1")).is_empty());
        assert_eq!(&*t.awaited_by_others(&id("p"))[0], "node-a");
        // Held again (retried), now for node-b: node-a is free to wait for.
        t.held(&id("h1"), 16_000, "node-b".into(), 61_000);
        assert_eq!(
            t.awaited_by_others(&id("p"))
                .iter()
                .map(|n| &**n)
                .collect::<Vec<_>>(),
            ["node-b"]
        );
        // Placed: node-b is no longer awaited, and the room stays spent.
        t.placed(&id("h1"), 20_000, Duration::from_secs(19));
        assert!(t.awaited_by_others(&id("p")).is_empty());
        assert!(t.held.contains_key(&id("h1")));
        // A held pod deleted before it was placed waits no longer than its hold would.
        t.held(&id("h2"), 30_000, "node-c".into(), 90_000);
        assert_eq!(t.awaited_by_others(&id("p")).len(), 1);
        t.placed(&id("x"), 90_000, Duration::ZERO);
        assert!(t.awaited_by_others(&id("p")).is_empty());
    }

    #[test]
    fn a_zero_window_is_refused_by_name() {
        let w = WarmWait {
            tail_window: Duration::ZERO,
            ..WarmWait::default()
        };
        assert_eq!(w.validate().unwrap_err().0, "usage.warmWait.tailWindow");
        assert!(WarmWait::default().validate().is_ok());
    }
}

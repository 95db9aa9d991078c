//! The decision log behind `/explain`: the latest decision per pod, in memory and bounded,
//! with the store (optional) as the record of older ones.
//!
//! Memory holds the compact [`Decision`] (indices and numbers) and renders the
//! [`Explanation`] only when asked, so an entry costs a fraction of its JSON. It is bounded
//! both by entries and by an estimate of their bytes: on a large cluster one decision
//! carries a verdict per node, so a count alone would not bound memory.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::analytics::{BuilderProfile, NodeUsage};
use headroom_scheduler::framework::Decision;
use headroom_scheduler::framework::decision::Explanation;
use headroom_scheduler::key::{PodKey, Uid};
use headroom_scheduler::usage::Headroom;

/// Bounds of the in-memory log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimits {
    /// At most this many pods' decisions. Default 10,000.
    pub max_entries: usize,
    /// At most about this many bytes of decisions. Default 32 MiB: at 15,000 nodes about
    /// 75 full records of the default profile (~450 KB each; score columns are a byte per
    /// node and plugin, feasible nodes and totals 4 and 8 bytes).
    pub max_bytes: usize,
}

impl Default for LogLimits {
    fn default() -> Self {
        LogLimits {
            max_entries: 10_000,
            max_bytes: 32 << 20,
        }
    }
}

/// The inputs behind a decision that the decision record itself does not carry, captured
/// by the scheduling loop right after the cycle, from the snapshot the cycle read
/// ([`DecisionInputs::at_decision`]): the pod's builder and its profile, the age of the
/// usage view, and the chosen node's measured usage. The decision sink only adds
/// `warm_cache` (from the store).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionInputs {
    /// The pod's builder identity, when known.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub builder: Option<String>,
    /// The builder's usage profile the scheduler had, if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub profile: Option<BuilderProfile>,
    /// Whether the chosen node is in the builder's placement history (warm caches); absent
    /// when unknown.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub warm_cache: Option<bool>,
    /// Age of the usage view at decision time, seconds; absent when no view was computed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub usage_view_age_seconds: Option<f64>,
    /// The chosen node's measured usage at decision time.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub chosen_node: Option<NodeInputs>,
}

impl DecisionInputs {
    /// The inputs of `decision` as its cycle saw them: computed under the scheduler's lock
    /// from the snapshot the cycle read (with the pod already assumed on its node), so
    /// nobody reads the snapshot again after the cycle. `builder` is the placed pod's
    /// builder identity as the scheduler recorded the placement; `policy` judges
    /// staleness and headroom as the scheduler does.
    pub fn at_decision(
        decision: &Decision,
        builder: Option<String>,
        snapshot: &headroom_scheduler::snapshot::Snapshot,
        policy: &headroom_scheduler::usage::UsagePolicy,
    ) -> DecisionInputs {
        let usage = snapshot.usage();
        let view = &usage.view;
        let now = usage.now_ms;
        let stale_ms = i64::try_from(policy.stale_after.as_millis()).unwrap_or(i64::MAX);
        let chosen_node = decision.node().and_then(|node| {
            let u = view.node(node)?;
            let n = snapshot.get(node)?;
            let age_ms = now.saturating_sub(u.newest_ms).max(0);
            Some(NodeInputs {
                usage: u.clone(),
                headroom: Headroom::of(n, usage, policy),
                age_seconds: age_ms as f64 / 1000.0,
                stale: age_ms > stale_ms,
                recent: RecentInput::on(usage, node, policy.warmup_ms()),
                without_departed: snapshot.index_of(node).and_then(|i| {
                    snapshot
                        .recent_table()
                        .sums(i, now, policy.warmup_ms())
                        .without_departed
                }),
                departed: DepartedInput::on(usage, node),
            })
        });
        DecisionInputs {
            profile: builder.as_deref().and_then(|b| view.builder(b).cloned()),
            builder,
            warm_cache: None,
            usage_view_age_seconds: (view.generated_ms > 0)
                .then(|| now.saturating_sub(view.generated_ms).max(0) as f64 / 1000.0),
            chosen_node,
        }
    }
}

/// A node's measured usage as a decision saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeInputs {
    /// Measured usage (current and windowed).
    pub usage: NodeUsage,
    /// The node's headroom when the decision was logged, by the scheduler's own
    /// definition ([`Headroom`]), with the pod already counted among its recent placements.
    pub headroom: Headroom,
    /// Age of the node's newest sample, seconds.
    pub age_seconds: f64,
    /// Older than the stale threshold.
    pub stale: bool,
    /// The recent placements counted on top of the node's samples (the decided pod among
    /// them), newest first, at most [`RecentInput::MAX_SHOWN`]: what each still adds.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub recent: Vec<RecentInput>,
    /// The node's measured CPU (cores) and memory (bytes) had the pods that left it and
    /// are still in its window never run (`RecentSums::without_departed`): where lower
    /// than `usage`'s figures, what the decision took instead. Absent when no pod that
    /// left counts.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub without_departed: Option<[f64; 2]>,
    /// Those pods, the latest to leave first, at most [`RecentInput::MAX_SHOWN`].
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub departed: Vec<DepartedInput>,
}

/// A pod that left the chosen node and still comes off its window: what it used is taken
/// off each of the node's samples it was in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DepartedInput {
    /// The pod.
    pub pod: PodKey,
    /// Seconds from the scheduler learning it left to the decision.
    pub left_seconds_ago: f64,
}

impl DepartedInput {
    /// The departures `usage` takes off `node`'s window, the latest first.
    fn on(usage: &headroom_scheduler::usage_context::UsageContext, node: &str) -> Vec<Self> {
        use headroom_scheduler::usage_context::recent;
        let mut out: Vec<DepartedInput> = recent::counting(&usage.view, usage.departures_on(node))
            .map(|d| DepartedInput {
                pod: d.pod.clone(),
                left_seconds_ago: usage.now_ms.saturating_sub(d.at_ms).max(0) as f64 / 1000.0,
            })
            .collect();
        out.sort_by(|a, b| a.left_seconds_ago.total_cmp(&b.left_seconds_ago));
        out.truncate(RecentInput::MAX_SHOWN);
        out
    }
}

/// One recent placement as a decision counted it on the chosen node: its prediction, what
/// its own pod was measured using, and what it still added (`usage.warmup`'s decayed share
/// of the prediction, or of the part of it the pod does not use yet; the whole prediction
/// while the node's samples predate it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecentInput {
    /// The placed pod.
    pub pod: PodKey,
    /// Seconds from its placement to the decision.
    pub placed_seconds_ago: f64,
    /// Predicted CPU, cores.
    pub predicted_cpu_cores: f64,
    /// Predicted memory, bytes.
    pub predicted_memory_bytes: f64,
    /// What the node's usage shows of its pod's CPU, cores: the pod's usage when the node
    /// was sampled (its newest sample where that is not newer than the node's); absent
    /// while its pod has no sample.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub measured_cpu_cores: Option<f64>,
    /// The same of its memory working set, bytes.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub measured_memory_bytes: Option<f64>,
    /// CPU it added to the node's measured usage, cores.
    pub counted_cpu_cores: f64,
    /// Memory it added to the node's measured usage, bytes.
    pub counted_memory_bytes: f64,
}

impl RecentInput {
    /// At most this many are kept per decision (a node may hold hundreds of placements of
    /// the last minutes; the newest explain the number).
    pub const MAX_SHOWN: usize = 16;

    /// The placements `usage` counts on `node` ([`UsageContext::uncounted`]), newest first.
    ///
    /// [`UsageContext::uncounted`]: headroom_scheduler::usage_context::UsageContext::uncounted
    fn on(
        usage: &headroom_scheduler::usage_context::UsageContext,
        node: &str,
        warmup_ms: i64,
    ) -> Vec<RecentInput> {
        use headroom_scheduler::usage_context::recent;
        let sampled_ms = recent::newest_of(&usage.view, node);
        let mut out: Vec<RecentInput> = usage
            .uncounted(node, warmup_ms)
            .map(|(r, counted)| {
                let measured = recent::measured(&usage.view, sampled_ms, r);
                RecentInput {
                    pod: r.pod.clone(),
                    placed_seconds_ago: usage.now_ms.saturating_sub(r.at_ms).max(0) as f64 / 1000.0,
                    predicted_cpu_cores: r.cpu_cores,
                    predicted_memory_bytes: r.memory_bytes,
                    measured_cpu_cores: measured.and_then(|m| m.cpu_cores),
                    measured_memory_bytes: measured.and_then(|m| m.memory_bytes),
                    counted_cpu_cores: counted[0],
                    counted_memory_bytes: counted[1],
                }
            })
            .collect();
        // Recorded oldest first: reversed, a stable sort keeps the later of two placed in
        // the same millisecond first.
        out.reverse();
        out.sort_by(|a, b| a.placed_seconds_ago.total_cmp(&b.placed_seconds_ago));
        out.truncate(Self::MAX_SHOWN);
        out
    }
}

/// What `/explain` serves: the decision's [`Explanation`] with when it was made, what the
/// cycle cost, and the inputs behind it. The store keeps this JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExplainResponse {
    /// When the decision was made, ms since the epoch (the scheduler's clock).
    pub decided_at_ms: i64,
    /// Wall time of the scheduling cycle, seconds.
    pub cycle_seconds: f64,
    /// Inputs behind the decision not in the per-node details.
    pub inputs: DecisionInputs,
    /// The decision: every node's verdict and scores.
    #[serde(flatten)]
    pub explanation: Explanation,
}

impl ExplainResponse {
    /// The human-readable table: the explanation's, after a header with time and inputs.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let at = chrono::DateTime::from_timestamp_millis(self.decided_at_ms).map_or_else(
            || format!("{} ms", self.decided_at_ms),
            |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        );
        let _ = write!(
            out,
            "decided at {at}, cycle {:.3} ms",
            self.cycle_seconds * 1000.0
        );
        if let Some(age) = self.inputs.usage_view_age_seconds {
            let _ = write!(out, ", usage view {age:.0} s old");
        }
        out.push('\n');
        if let Some(b) = &self.inputs.builder {
            let _ = write!(out, "builder {b}");
            match &self.inputs.profile {
                Some(p) => {
                    let _ = write!(
                        out,
                        ": profile of {} run(s), cpu p95 {:.3} cores, memory p95 {:.0} bytes",
                        p.runs, p.cpu.p95, p.memory.p95
                    );
                }
                None => out.push_str(": no profile"),
            }
            match self.inputs.warm_cache {
                Some(true) => out.push_str(", chosen node in its placement history"),
                Some(false) => out.push_str(", chosen node new to it"),
                None => {}
            }
            out.push('\n');
        }
        if let (Some(n), Some(node)) = (&self.inputs.chosen_node, &self.explanation.node) {
            let _ = writeln!(
                out,
                "{node}: cpu {:.3} cores used (windowed {:.3}), headroom {:.3}; memory {:.0} bytes used (windowed {:.0}), headroom {:.0}; sample {:.0} s old{}",
                n.usage.cpu_cores.current,
                n.usage.cpu_cores.windowed,
                n.headroom.cpu_free(),
                n.usage.memory_working_set_bytes.current,
                n.usage.memory_working_set_bytes.windowed,
                n.headroom.memory_free(),
                n.age_seconds,
                if n.stale { " (stale)" } else { "" }
            );
            if let Some([_, memory]) = n.without_departed {
                let _ = writeln!(
                    out,
                    "  without the pods that left it: memory {memory:.0} bytes"
                );
            }
            for d in &n.departed {
                let _ = writeln!(out, "  left {:.0} s ago: {}", d.left_seconds_ago, d.pod);
            }
            for r in &n.recent {
                let measured = r.measured_memory_bytes.map_or_else(
                    || "not measured yet".to_string(),
                    |m| format!("measured {m:.0}"),
                );
                let _ = writeln!(
                    out,
                    "  placed {:.0} s ago: {}, memory predicted {:.0} bytes, {measured}, counted {:.0}; cpu counted {:.3} cores",
                    r.placed_seconds_ago,
                    r.pod,
                    r.predicted_memory_bytes,
                    r.counted_memory_bytes,
                    r.counted_cpu_cores
                );
            }
        }
        out.push_str(&self.explanation.to_text());
        out
    }
}

/// A decision as the log holds it.
#[derive(Debug, Clone)]
pub struct LoggedDecision {
    /// The record.
    pub decision: Arc<Decision>,
    /// When it was made, ms since the epoch.
    pub decided_at_ms: i64,
    /// Inputs captured when it was logged.
    pub inputs: DecisionInputs,
}

impl LoggedDecision {
    /// Renders it for `/explain`.
    pub fn render(&self) -> ExplainResponse {
        self.render_at_most(usize::MAX)
    }

    /// Renders it with at most `max` node verdicts ([`Decision::explain_at_most`]).
    pub fn render_at_most(&self, max: usize) -> ExplainResponse {
        ExplainResponse {
            decided_at_ms: self.decided_at_ms,
            cycle_seconds: self.decision.cycle_duration.as_secs_f64(),
            inputs: self.inputs.clone(),
            explanation: self.decision.explain_at_most(max),
        }
    }
}

/// An estimate of the heap bytes a decision holds (what the byte bound counts).
pub fn approx_bytes(d: &Decision) -> usize {
    let status = |s: &headroom_scheduler::framework::Status| {
        64 + s.detail.as_ref().map_or(0, String::len)
            + s.reasons
                .iter()
                .map(|r| match r {
                    std::borrow::Cow::Borrowed(_) => 0,
                    std::borrow::Cow::Owned(o) => o.len(),
                })
                .sum::<usize>()
    };
    let mut n = 512 + d.namespace.len() + d.name.len() + d.uid.len() + d.profile.len();
    n += d.pre_filter.iter().map(status).sum::<usize>();
    n += d.rejected.iter().map(|(_, s)| 8 + status(s)).sum::<usize>();
    n += d.absent.as_ref().map_or(0, status);
    n += d.feasible.len() * 4 + d.totals.len() * 8;
    for c in &d.scores {
        n += 64 + c.raw.as_ref().map_or(0, Vec::len) * 8 + c.normalized.len();
        if let Some(details) = &c.details {
            n += details
                .iter()
                .map(|x| 24 + x.as_ref().map_or(0, String::len))
                .sum::<usize>();
        }
    }
    n += d.notes.iter().map(|s| 24 + s.len()).sum::<usize>();
    n
}

struct Entry {
    seq: u64,
    bytes: usize,
    record: Arc<LoggedDecision>,
}

#[derive(Default)]
struct Inner {
    by_pod: HashMap<PodKey, Entry>,
    /// Uid → the key of its pod's entry.
    by_uid: HashMap<Uid, PodKey>,
    /// Insertion order, oldest first; an item whose `seq` no longer matches its pod's entry
    /// was superseded and is skipped.
    order: VecDeque<(u64, PodKey)>,
    bytes: usize,
    seq: u64,
}

/// The latest decision per pod ([`PodKey`]) and per uid, in memory.
pub struct DecisionLog {
    limits: LogLimits,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for DecisionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (entries, bytes) = self.size();
        f.debug_struct("DecisionLog")
            .field("limits", &self.limits)
            .field("entries", &entries)
            .field("bytes", &bytes)
            .finish()
    }
}

impl Default for DecisionLog {
    fn default() -> Self {
        DecisionLog::new(LogLimits::default())
    }
}

impl DecisionLog {
    /// An empty log.
    pub fn new(limits: LogLimits) -> DecisionLog {
        DecisionLog {
            limits,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves at worst a stale entry; refusing
        // every later lookup would be worse.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a decision as its pod's latest (and its uid's), evicting the oldest entries
    /// beyond the limits. A decision older than the one held for the pod is ignored.
    pub fn insert(&self, record: LoggedDecision) {
        let key = record.decision.key();
        let bytes = approx_bytes(&record.decision);
        let uid = record.decision.uid.clone();
        let mut inner = self.lock();
        if let Some(cur) = inner.by_pod.get(&key)
            && cur.record.decided_at_ms > record.decided_at_ms
        {
            return;
        }
        inner.seq += 1;
        let seq = inner.seq;
        if let Some(old) = inner.by_pod.insert(
            key.clone(),
            Entry {
                seq,
                bytes,
                record: Arc::new(record),
            },
        ) {
            inner.bytes -= old.bytes;
            if old.record.decision.uid != uid {
                inner.by_uid.remove(&old.record.decision.uid);
            }
        }
        inner.bytes += bytes;
        if !uid.is_empty() {
            inner.by_uid.insert(uid, key.clone());
        }
        inner.order.push_back((seq, key));
        // Keep at least the newest entry, however large.
        while inner.by_pod.len() > self.limits.max_entries.max(1)
            || (inner.bytes > self.limits.max_bytes && inner.by_pod.len() > 1)
        {
            let Some((seq, key)) = inner.order.pop_front() else {
                break;
            };
            if inner.by_pod.get(&key).is_some_and(|e| e.seq == seq)
                && let Some(e) = inner.by_pod.remove(&key)
            {
                inner.bytes -= e.bytes;
                if inner.by_uid.get(&e.record.decision.uid) == Some(&key) {
                    inner.by_uid.remove(&e.record.decision.uid);
                }
            }
        }
        // Superseded order items of pods still present would otherwise pile up.
        if inner.order.len() > 2 * inner.by_pod.len() + 64 {
            let Inner { order, by_pod, .. } = &mut *inner;
            order.retain(|(seq, key)| by_pod.get(key).is_some_and(|e| e.seq == *seq));
        }
    }

    /// The latest decision of pod `pod` held in memory.
    pub fn by_pod(&self, pod: &PodKey) -> Option<Arc<LoggedDecision>> {
        self.lock().by_pod.get(pod).map(|e| e.record.clone())
    }

    /// The latest decision of the pod with this uid held in memory.
    pub fn by_uid(&self, uid: &str) -> Option<Arc<LoggedDecision>> {
        let inner = self.lock();
        let key = inner.by_uid.get(uid)?;
        inner.by_pod.get(key).map(|e| e.record.clone())
    }

    /// The latest decisions held in memory, most recently logged first, at most `max` (what
    /// `/ui/pods` lists).
    pub fn recent(&self, max: usize) -> Vec<Arc<LoggedDecision>> {
        let inner = self.lock();
        inner
            .order
            .iter()
            .rev()
            .filter_map(|(seq, key)| inner.by_pod.get(key).filter(|e| e.seq == *seq))
            .take(max)
            .map(|e| e.record.clone())
            .collect()
    }

    /// Entries held and their estimated bytes.
    pub fn size(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.by_pod.len(), inner.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_scheduler::framework::{Outcome, Status};

    fn logged(name: &str, uid: &str, at: i64, detail: usize) -> LoggedDecision {
        let names = Arc::new(vec![Arc::from("n1"), Arc::from("n2")]);
        let mut d = Decision::new("ns", name, uid.into(), "headroom", 1, names);
        d.rejected = vec![(
            0,
            Status::unschedulable("Insufficient cpu")
                .with_plugin("NodeResourcesFit")
                .with_detail("x".repeat(detail)),
        )];
        d.feasible = vec![1];
        d.outcome = Outcome::Placed { node: "n2".into() };
        LoggedDecision {
            decision: Arc::new(d),
            decided_at_ms: at,
            inputs: DecisionInputs::default(),
        }
    }

    #[test]
    fn latest_per_pod_and_uid() {
        let log = DecisionLog::default();
        log.insert(logged("a", "u1", 10, 0));
        log.insert(logged("a", "u2", 20, 0));
        // An older decision arriving late does not replace the newer one.
        log.insert(logged("a", "u0", 5, 0));
        assert_eq!(
            log.by_pod(&PodKey::new("ns", "a")).unwrap().decided_at_ms,
            20
        );
        assert_eq!(log.by_uid("u2").unwrap().decided_at_ms, 20);
        // The recreated pod's old uid no longer finds the pod's newer decision.
        assert!(log.by_uid("u1").is_none());
        assert!(log.by_pod(&PodKey::new("ns", "b")).is_none());
        assert!(log.by_pod(&PodKey::new("other", "a")).is_none());
        assert_eq!(log.size().0, 1);
        log.insert(logged("b", "u3", 30, 0));
        log.insert(logged("c", "u4", 40, 0));
        log.insert(logged("b", "u3", 50, 0));
        // Newest first, each pod once (b's superseded entry is skipped), bounded.
        let recent: Vec<_> = log.recent(10).iter().map(|d| d.decided_at_ms).collect();
        assert_eq!(recent, [50, 40, 20]);
        assert_eq!(log.recent(2).len(), 2);
    }

    #[test]
    fn bounded_by_entries_and_bytes() {
        let log = DecisionLog::new(LogLimits {
            max_entries: 3,
            max_bytes: usize::MAX,
        });
        for i in 0..5 {
            log.insert(logged(&format!("p{i}"), &format!("u{i}"), i, 0));
        }
        assert_eq!(log.size().0, 3);
        assert!(log.by_pod(&PodKey::new("ns", "p1")).is_none());
        assert!(log.by_uid("u1").is_none());
        assert!(log.by_pod(&PodKey::new("ns", "p4")).is_some());

        let one = approx_bytes(&logged("x", "x", 0, 10_000).decision);
        let log = DecisionLog::new(LogLimits {
            max_entries: 100,
            max_bytes: one * 2 + one / 2,
        });
        for i in 0..4 {
            log.insert(logged(&format!("p{i}"), &format!("u{i}"), i, 10_000));
        }
        let (entries, bytes) = log.size();
        assert_eq!(entries, 2);
        assert!(bytes <= one * 2 + one / 2);
        assert!(log.by_pod(&PodKey::new("ns", "p3")).is_some());
        // A single entry over the byte limit is still kept: the newest decision matters most.
        let tiny = DecisionLog::new(LogLimits {
            max_entries: 10,
            max_bytes: 1,
        });
        tiny.insert(logged("big", "ub", 1, 10_000));
        assert!(tiny.by_pod(&PodKey::new("ns", "big")).is_some());
    }

    #[test]
    fn superseded_order_items_do_not_pile_up() {
        let log = DecisionLog::default();
        for i in 0..10_000 {
            log.insert(logged("same", "u", i, 0));
        }
        assert!(log.lock().order.len() <= 2 + 64);
    }

    #[test]
    fn render_round_trips_through_json() {
        let r = logged("a", "u1", 10, 3).render();
        assert_eq!(r.explanation.node.as_deref(), Some("n2"));
        let json = serde_json::to_value(&r).unwrap();
        // The explanation's fields sit at the top level next to the decision's time.
        assert_eq!(json["pod"], "ns/a");
        assert_eq!(json["decidedAtMs"], 10);
        let back: ExplainResponse = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
        let text = r.to_text();
        assert!(
            text.starts_with("decided at 1970-01-01T00:00:00.010Z, cycle 0.000 ms\n"),
            "{text}"
        );
        assert!(text.contains("placed on n2"), "{text}");
        assert!(
            text.contains("NodeResourcesFit: Insufficient cpu"),
            "{text}"
        );
    }
}

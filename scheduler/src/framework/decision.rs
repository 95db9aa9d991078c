//! Decision records: what one scheduling cycle saw and decided, cheap to build (indices and
//! numbers, no strings for nodes nobody asked about) and rendered on demand into the
//! [`Explanation`] that `headroom place` prints and `/explain` serves.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::status::{Code, Status};
use crate::key::{PodKey, Uid};
use crate::snapshot::{NameRanks, NodeIdx};

/// Upstream's `NoNodeAvailableMsg` prefix.
pub const NO_NODE_AVAILABLE: &str = "nodes are available";

/// How a cycle ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A node was chosen.
    Placed {
        /// The node.
        node: Arc<str>,
    },
    /// No node fits; `message` is the FailedScheduling message.
    Unschedulable {
        /// Upstream-format message (`0/5 nodes are available: ...`).
        message: String,
    },
    /// The pod cannot be considered (unreadable spec, gates, a plugin error).
    Error {
        /// What went wrong.
        message: String,
    },
}

/// A placement the usage fallback made (`usage.maxWait`): real usage had kept the pod off
/// every node that fits by requests for at least `maxWait`, so the real filters named in
/// `relaxed` let it through this cycle and the least-hot node that fits by requests won.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fallback {
    /// How long the pod had waited since its first scheduling attempt, seconds.
    pub waited_seconds: f64,
    /// The `usage.maxWait` it reached, seconds.
    pub max_wait_seconds: f64,
    /// The filters that let it through (RealMemoryFit, RealCpuFit).
    pub relaxed: Vec<String>,
}

impl Fallback {
    /// `waited 2m 15s ≥ usage.maxWait 30s: RealMemoryFit let it through (least-hot node
    /// that fits by requests)`.
    pub fn describe(&self) -> String {
        let d = whole_seconds;
        format!(
            "usage fallback: waited {} ≥ usage.maxWait {}: {} let it through (least-hot node that fits by requests)",
            d(self.waited_seconds),
            d(self.max_wait_seconds),
            self.relaxed.join(", ")
        )
    }
}

/// `s` seconds as `2m 15s`, whole seconds (a negative `s` as 0).
fn whole_seconds(s: f64) -> humantime_serde::re::humantime::FormattedDuration {
    humantime_serde::re::humantime::format_duration(Duration::from_secs(s.max(0.0) as u64))
}

/// A pod the warm wait (`usage.warmWait`) kept unscheduled: its cycle chose a node none
/// of its builder's runs used, and one of its warm nodes is expected to free before the
/// cold cache would cost more than the wait (see [`crate::usage::warm`]).
#[derive(Debug, Clone, PartialEq)]
pub struct WarmHold {
    /// The warm node expected to free first.
    pub node: Arc<str>,
    /// Seconds until a build there is expected to end (its builder's median run length
    /// less the time it has run).
    pub expected_free_seconds: f64,
    /// What a warm cache saves the builder, seconds: the median length of its cold runs
    /// less that of its warm ones.
    pub saves_seconds: f64,
    /// How long the pod had waited since its first attempt, seconds.
    pub waited_seconds: f64,
    /// The queue's tail the wait stays within (p99 − p50 of the time to schedule), seconds.
    pub tail_seconds: f64,
    /// The plugin the hold is blamed on (History, whose warm nodes it waits for): the
    /// queue retries the pod on the events it was declared with.
    pub plugin: &'static str,
}

impl WarmHold {
    /// `warm wait: node n1 expected to free in 40s; a warm cache saves 2m; waited 10s of
    /// the queue's tail 5m`.
    pub fn describe(&self) -> String {
        let d = whole_seconds;
        format!(
            "warm wait (usage.warmWait): held for its build cache: node {} expected to free in {}; a warm cache saves {} a run; waited {} of the queue's tail {} (p99 − p50 of time to schedule)",
            self.node,
            d(self.expected_free_seconds),
            d(self.saves_seconds),
            d(self.waited_seconds),
            d(self.tail_seconds)
        )
    }
}

/// What a PostFilter plugin (DefaultPreemption) decided when no node fitted: the node the pod
/// is nominated to (upstream's `status.nominatedNodeName`) and the pods to evict from it so
/// that the pod fits there.
#[derive(Debug, Clone)]
pub struct Nomination {
    /// The nominated node.
    pub node: Arc<str>,
    /// The victims, most important first (higher priority, then earlier start).
    pub victims: Vec<Arc<crate::snapshot::PodInfo>>,
    /// How many victims violate a PodDisruptionBudget.
    pub pdb_violations: usize,
    /// Lower-priority pods that were nominated to the same node and lose that nomination
    /// (filled by the scheduler after the cycle; `serve` clears their
    /// `status.nominatedNodeName`).
    pub cleared: Vec<Arc<crate::snapshot::PodInfo>>,
}

impl Nomination {
    /// The victims as `namespace/name`, sorted (what `place` prints and the oracle lists).
    pub fn victim_keys(&self) -> Vec<String> {
        let mut v: Vec<String> = self.victims.iter().map(|p| p.key().to_string()).collect();
        v.sort();
        v
    }
}

/// One score plugin's column over the feasible nodes.
#[derive(Debug, Clone)]
pub struct ScoreColumn {
    /// Plugin name.
    pub plugin: &'static str,
    /// Weight from the profile.
    pub weight: i64,
    /// Raw scores, in feasible-node order; `None` when they are the normalised ones (the
    /// plugin does not normalise, [`crate::framework::ScorePlugin::normalizes`]). Read
    /// them with [`ScoreColumn::raw_score`].
    pub raw: Option<Vec<i64>>,
    /// Normalised scores (0..=100, checked by the framework), in feasible-node order. A
    /// byte each: a record keeps a column per plugin for every feasible node, and the
    /// decision queue and log are bounded by bytes, so at 15,000 nodes `i64`s were eight
    /// times the memory for the same records.
    pub normalized: Vec<u8>,
    /// The numbers behind each raw score, when the cycle explained itself.
    pub details: Option<Vec<Option<String>>>,
}

impl ScoreColumn {
    /// The raw score of the `i`th feasible node.
    pub fn raw_score(&self, i: usize) -> i64 {
        match &self.raw {
            Some(raw) => raw[i],
            None => i64::from(self.normalized[i]),
        }
    }

    /// The normalised score of the `i`th feasible node.
    pub fn normalized_score(&self, i: usize) -> i64 {
        i64::from(self.normalized[i])
    }
}

/// The record of one scheduling cycle.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Pod namespace (shared with the pod's [`PodKey`]).
    pub namespace: Arc<str>,
    /// Pod name (shared with the pod's [`PodKey`]).
    pub name: Arc<str>,
    /// Pod uid.
    pub uid: Uid,
    /// Profile (scheduler name) that decided.
    pub profile: String,
    /// Snapshot generation the cycle read.
    pub generation: u64,
    /// Node names of that snapshot, by index.
    pub node_names: Arc<Vec<Arc<str>>>,
    /// The ranks of those names in sort order (set by the framework, from the same
    /// snapshot): ties by name then compare integers. Without them, names are compared.
    pub name_ranks: Option<Arc<NameRanks>>,
    /// The chosen node's index, when [`Decision::place`] set the outcome.
    pub chosen: Option<NodeIdx>,
    /// PreFilter statuses that were not plain success (skips, rejections).
    pub pre_filter: Vec<Status>,
    /// Nodes rejected by a filter, with the status of the first failing filter.
    pub rejected: Vec<(NodeIdx, Status)>,
    /// The status of nodes that were not evaluated (PreFilter rejected the pod, or restricted
    /// the nodes); applies to every node that is neither rejected nor feasible.
    pub absent: Option<Status>,
    /// Nodes that passed every filter.
    pub feasible: Vec<NodeIdx>,
    /// Score plugins whose PreScore said Skip.
    pub skipped_scores: Vec<&'static str>,
    /// Score columns of the plugins that ran.
    pub scores: Vec<ScoreColumn>,
    /// Weighted totals, in feasible-node order (empty when scoring was not needed).
    pub totals: Vec<i64>,
    /// The result.
    pub outcome: Outcome,
    /// Extra notes plugins left for the explanation (degraded data, ignored annotations...).
    pub notes: Vec<String>,
    /// Set when the usage fallback (`usage.maxWait`) placed the pod.
    pub fallback: Option<Fallback>,
    /// Set when the warm wait (`usage.warmWait`) kept the pod unscheduled.
    pub warm_hold: Option<WarmHold>,
    /// The PVs VolumeBinding chose for the pod's unbound WaitForFirstConsumer claims
    /// (`namespace/claim` → PV), set once they are assumed with the pod.
    pub volume_bindings: std::collections::BTreeMap<String, String>,
    /// Wall-clock time the cycle took (zero unless the caller measured it; the scheduling
    /// loop does). Real time even under a simulated clock: it is what the cycle cost.
    pub cycle_duration: Duration,
    /// The scheduler's clock when the cycle ran, ms since the epoch (simulated time in the
    /// simulator); 0 when the caller did not set it.
    pub decided_at_ms: i64,
    /// The number of feasible nodes when `feasible` holds only some of them (a
    /// [`Decision::summary_only`] copy); `None` in a full record.
    pub feasible_total: Option<usize>,
    /// Set when no node fitted and a PostFilter plugin (preemption) nominated a node; the
    /// outcome stays `Unschedulable` (the pod waits for its victims to go).
    pub nomination: Option<Nomination>,
    /// PostFilter (preemption) ran in this cycle: upstream's `scheduler_preemption_attempts_total`.
    pub post_filter_ran: bool,
    /// The extension points the cycle ran, with their status and wall time (upstream's
    /// `scheduler_framework_extension_point_duration_seconds`; Filter has none upstream).
    pub extension_points: Vec<ExtensionPointTime>,
    /// Each plugin's time at each extension point, in the cycles sampled for upstream's
    /// `scheduler_plugin_execution_duration_seconds` (one in ten, see
    /// [`PLUGIN_METRICS_SAMPLE_EVERY`](super::runtime::PLUGIN_METRICS_SAMPLE_EVERY)); empty
    /// in the others.
    pub plugin_times: Vec<PluginTime>,
}

/// One plugin's run at one extension point in a sampled cycle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PluginTime {
    /// The plugin's name.
    pub plugin: &'static str,
    /// `PreFilter`, `Filter`, `PostFilter`, `PreScore` or `Score` (upstream's label values).
    pub point: &'static str,
    /// Its status code, as upstream writes it.
    pub status: &'static str,
    /// Wall time of one call. Filter and Score run each plugin over blocks of nodes, not
    /// node by node as upstream: their time is the plugin's time over the cycle divided by
    /// the nodes it examined (upstream observes each node's call).
    pub duration: Duration,
}

/// One extension point's run in a cycle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExtensionPointTime {
    /// `PreFilter`, `PostFilter`, `PreScore` or `Score` (upstream's label values).
    pub point: &'static str,
    /// Its status code, as upstream writes it (`Success`, `Unschedulable`, …).
    pub status: &'static str,
    /// Wall time.
    pub duration: Duration,
}

impl Decision {
    /// Records that extension point `point` ran since `started` and ended with `code`.
    pub fn time_extension_point(
        &mut self,
        point: &'static str,
        code: crate::framework::Code,
        started: std::time::Instant,
    ) {
        self.extension_points.push(ExtensionPointTime {
            point,
            status: code.upstream_name(),
            duration: started.elapsed(),
        });
    }

    /// Records one plugin's call at `point` (a sampled cycle).
    pub fn time_plugin(
        &mut self,
        plugin: &'static str,
        point: &'static str,
        code: crate::framework::Code,
        duration: Duration,
    ) {
        self.plugin_times.push(PluginTime {
            plugin,
            point,
            status: code.upstream_name(),
            duration,
        });
    }

    /// The decided pod's key (shares the record's strings: allocates nothing).
    pub fn key(&self) -> PodKey {
        PodKey {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// An empty record for a pod.
    pub fn new(
        namespace: &str,
        name: &str,
        uid: Uid,
        profile: &str,
        generation: u64,
        node_names: Arc<Vec<Arc<str>>>,
    ) -> Decision {
        Decision {
            namespace: namespace.into(),
            name: name.into(),
            uid,
            profile: profile.to_string(),
            generation,
            node_names,
            name_ranks: None,
            chosen: None,
            pre_filter: Vec::new(),
            rejected: Vec::new(),
            absent: None,
            feasible: Vec::new(),
            skipped_scores: Vec::new(),
            scores: Vec::new(),
            totals: Vec::new(),
            outcome: Outcome::Error {
                message: "not scheduled yet".to_string(),
            },
            notes: Vec::new(),
            fallback: None,
            warm_hold: None,
            volume_bindings: Default::default(),
            cycle_duration: Duration::ZERO,
            decided_at_ms: 0,
            feasible_total: None,
            nomination: None,
            post_filter_ran: false,
            extension_points: Vec::new(),
            plugin_times: Vec::new(),
        }
    }

    /// How many nodes passed every filter (also in a [`Decision::summary_only`] copy).
    pub fn feasible_count(&self) -> usize {
        self.feasible_total.unwrap_or(self.feasible.len())
    }

    /// A copy with what the cluster reporter reads — identity, outcome, notes, fallback,
    /// warm hold,
    /// the three best feasible nodes with their totals and the feasible count — without
    /// the per-node columns. At 15,000 nodes a full record holds megabytes of scores, and
    /// thousands of records can wait for the reporter's API writes: full copies took the
    /// process to 19 GB on the kit; the full record stays in the decision log.
    pub fn summary_only(&self) -> Decision {
        let best = self.best_nodes(3);
        Decision {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            profile: self.profile.clone(),
            generation: self.generation,
            node_names: self.node_names.clone(),
            name_ranks: self.name_ranks.clone(),
            chosen: self.chosen,
            pre_filter: Vec::new(),
            rejected: Vec::new(),
            absent: None,
            feasible: best.iter().map(|b| b.1).collect(),
            skipped_scores: Vec::new(),
            scores: Vec::new(),
            totals: best.iter().map(|b| b.0).collect(),
            outcome: self.outcome.clone(),
            notes: self.notes.clone(),
            fallback: self.fallback.clone(),
            warm_hold: self.warm_hold.clone(),
            volume_bindings: self.volume_bindings.clone(),
            cycle_duration: self.cycle_duration,
            decided_at_ms: self.decided_at_ms,
            feasible_total: Some(self.feasible_count()),
            nomination: self.nomination.clone(),
            post_filter_ran: self.post_filter_ran,
            extension_points: self.extension_points.clone(),
            plugin_times: self.plugin_times.clone(),
        }
    }

    /// The `k` feasible nodes with the highest totals, best first (ties by name), as
    /// `(total, node)`. One pass keeping the best `k`: at 15,000 nodes sorting every total
    /// for the three the summaries show cost more than the cycle.
    pub fn best_nodes(&self, k: usize) -> Vec<(i64, NodeIdx)> {
        match self
            .name_ranks
            .as_deref()
            .filter(|r| r.len() == self.node_names.len())
        {
            Some(r) => self.best_by(k, |a, b| r.of(a).cmp(&r.of(b))),
            None => self.best_by(k, |a, b| {
                self.node_names[a as usize].cmp(&self.node_names[b as usize])
            }),
        }
    }

    /// [`Decision::best_nodes`] with ties ordered by `by_name`.
    fn best_by(
        &self,
        k: usize,
        by_name: impl Fn(NodeIdx, NodeIdx) -> std::cmp::Ordering,
    ) -> Vec<(i64, NodeIdx)> {
        let better =
            |a: &(i64, NodeIdx), b: &(i64, NodeIdx)| b.0.cmp(&a.0).then_with(|| by_name(a.1, b.1));
        let mut best: Vec<(i64, NodeIdx)> = Vec::with_capacity(k + 1);
        for (idx, t) in self.feasible.iter().zip(self.totals.iter()) {
            let candidate = (*t, *idx);
            if best.len() == k
                && best
                    .last()
                    .is_none_or(|worst| better(&candidate, worst).is_ge())
            {
                continue;
            }
            let at = best.partition_point(|b| better(b, &candidate).is_lt());
            best.insert(at, candidate);
            best.truncate(k);
        }
        best
    }

    /// Sets the node-name ranks ([`Decision::name_ranks`]).
    pub fn with_name_ranks(mut self, ranks: Arc<NameRanks>) -> Decision {
        self.name_ranks = Some(ranks);
        self
    }

    /// Places the pod on node `idx` (the outcome, and the index beside it).
    pub fn place(&mut self, idx: NodeIdx) {
        self.outcome = Outcome::Placed {
            node: self.node_names[idx as usize].clone(),
        };
        self.chosen = Some(idx);
    }

    /// The chosen node's index, if any: from [`Decision::place`], else found by name.
    pub fn chosen_idx(&self) -> Option<NodeIdx> {
        let name = self.node()?;
        self.chosen
            .filter(|i| {
                self.node_names
                    .get(*i as usize)
                    .is_some_and(|n| **n == *name)
            })
            .or_else(|| {
                let i = self.node_names.iter().position(|n| **n == *name)?;
                NodeIdx::try_from(i).ok()
            })
    }

    /// The chosen node, if any.
    pub fn node(&self) -> Option<&str> {
        match &self.outcome {
            Outcome::Placed { node } => Some(node),
            _ => None,
        }
    }

    /// Number of nodes in the snapshot.
    pub fn num_nodes(&self) -> usize {
        self.node_names.len()
    }

    /// Upstream's `FitError.Error()`: `0/N nodes are available: <counts>.`, reasons counted
    /// over nodes, each `"<count> <reason>"` string sorted lexicographically. When a PreFilter
    /// rejected the pod, its message stands alone (the per-node copies are not counted twice).
    pub fn fit_error_message(&self) -> String {
        let n = self.num_nodes();
        let mut msg = format!("0/{n} {NO_NODE_AVAILABLE}:");
        if let Some(pf) = self.pre_filter.iter().find(|s| s.is_rejected()) {
            msg.push_str(&format!(" {}.", pf.message()));
            return msg;
        }
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, s) in &self.rejected {
            for r in &s.reasons {
                *counts.entry(r.as_ref()).or_insert(0) += 1;
            }
        }
        let explicit = self.rejected.len() + self.feasible.len();
        if let Some(absent) = &self.absent
            && explicit < n
        {
            for r in &absent.reasons {
                *counts.entry(r.as_ref()).or_insert(0) += n - explicit;
            }
        }
        let mut parts: Vec<String> = counts.iter().map(|(r, c)| format!("{c} {r}")).collect();
        parts.sort();
        if !parts.is_empty() {
            msg.push_str(&format!(" {}.", parts.join(", ")));
        }
        msg
    }

    /// Renders the record for people and JSON consumers: every node's verdict.
    pub fn explain(&self) -> Explanation {
        self.explain_at_most(usize::MAX)
    }

    /// Renders the record with at most `max` node verdicts, listed in snapshot order: the
    /// chosen node, then the feasible nodes by total score (best first), then rejected ones
    /// in snapshot order; the rest are counted in `omitted_nodes`.
    /// Only the kept verdicts are built: the store keeps ~100 nodes of each decision, and
    /// building all 15,000 verdicts (a string per plugin score) to drop all but 100 cost
    /// the decision sink more than the scheduling cycle itself on large clusters.
    pub fn explain_at_most(&self, max: usize) -> Explanation {
        /// Where a node's verdict comes from.
        #[derive(Clone, Copy)]
        enum Slot {
            /// Position in `feasible`.
            Feasible(usize),
            /// Position in `rejected`.
            Rejected(usize),
            /// Neither: `absent` applies.
            Absent,
        }
        let n = self.num_nodes();
        let mut slots = vec![Slot::Absent; n];
        for (j, (idx, _)) in self.rejected.iter().enumerate() {
            slots[*idx as usize] = Slot::Rejected(j);
        }
        for (i, idx) in self.feasible.iter().enumerate() {
            slots[*idx as usize] = Slot::Feasible(i);
        }
        let chosen_idx = self.chosen_idx().map(|i| i as usize);
        let kept: Vec<usize> = if max >= n {
            (0..n).collect()
        } else {
            // (chosen first, feasible before the rest, higher total first, snapshot order)
            let mut keys: Vec<(bool, bool, std::cmp::Reverse<Option<i64>>, usize)> = slots
                .iter()
                .enumerate()
                .map(|(idx, slot)| match slot {
                    Slot::Feasible(i) => (
                        chosen_idx != Some(idx),
                        false,
                        std::cmp::Reverse(self.totals.get(*i).copied()),
                        idx,
                    ),
                    _ => (true, true, std::cmp::Reverse(None), idx),
                })
                .collect();
            if max > 0 {
                keys.select_nth_unstable(max - 1);
            }
            let mut kept: Vec<usize> = keys[..max].iter().map(|k| k.3).collect();
            kept.sort_unstable();
            kept
        };
        let nodes: Vec<NodeVerdict> = kept
            .iter()
            .map(|&idx| {
                let name = &self.node_names[idx];
                match slots[idx] {
                    Slot::Feasible(i) => NodeVerdict {
                        name: name.to_string(),
                        feasible: true,
                        chosen: chosen_idx == Some(idx),
                        plugin: None,
                        code: None,
                        reasons: Vec::new(),
                        detail: None,
                        total: self.totals.get(i).copied(),
                        scores: self
                            .scores
                            .iter()
                            .map(|c| PluginScore {
                                plugin: c.plugin.to_string(),
                                raw: c.raw_score(i),
                                normalized: c.normalized_score(i),
                                weight: c.weight,
                                weighted: c.normalized_score(i) * c.weight,
                                detail: c
                                    .details
                                    .as_ref()
                                    .and_then(|d| d.get(i).cloned().flatten()),
                            })
                            .collect(),
                    },
                    Slot::Rejected(j) => NodeVerdict::rejected(name, &self.rejected[j].1),
                    Slot::Absent => match &self.absent {
                        Some(s) => NodeVerdict::rejected(name, s),
                        None => {
                            NodeVerdict::rejected(name, &Status::new(Code::Error, "not evaluated"))
                        }
                    },
                }
            })
            .collect();
        let omitted_nodes = n - nodes.len();
        let (placed, message) = match &self.outcome {
            Outcome::Placed { .. } => (true, None),
            Outcome::Unschedulable { message } | Outcome::Error { message } => {
                (false, Some(message.clone()))
            }
        };
        Explanation {
            pod: self.key().to_string(),
            uid: self.uid.to_string(),
            profile: self.profile.clone(),
            snapshot_generation: self.generation,
            placed,
            node: self.node().map(str::to_string),
            message,
            feasible_nodes: self.feasible_count(),
            pre_filter: self
                .pre_filter
                .iter()
                .map(|s| PluginStatus {
                    plugin: s.plugin.to_string(),
                    code: s.code,
                    message: s.message(),
                    detail: s.detail.clone(),
                })
                .collect(),
            skipped_scores: self.skipped_scores.iter().map(|s| s.to_string()).collect(),
            notes: self.notes.clone(),
            fallback: self.fallback.clone(),
            volume_bindings: self.volume_bindings.clone(),
            nominated_node: self.nomination.as_ref().map(|n| n.node.to_string()),
            victims: self
                .nomination
                .as_ref()
                .map(Nomination::victim_keys)
                .unwrap_or_default(),
            nodes,
            omitted_nodes,
        }
    }
}

/// A plugin status in an explanation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PluginStatus {
    /// Plugin name.
    pub plugin: String,
    /// Status code.
    pub code: Code,
    /// Reasons joined.
    pub message: String,
    /// Numbers behind it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub detail: Option<String>,
}

/// One score plugin's contribution on one node.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PluginScore {
    /// Plugin name.
    pub plugin: String,
    /// Raw score.
    pub raw: i64,
    /// After normalisation (0..=100).
    pub normalized: i64,
    /// Profile weight.
    pub weight: i64,
    /// `normalized × weight`.
    pub weighted: i64,
    /// The numbers behind the raw score.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub detail: Option<String>,
}

/// One node's verdict in an explanation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodeVerdict {
    /// Node name.
    pub name: String,
    /// Passed every filter.
    pub feasible: bool,
    /// The node chosen.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub chosen: bool,
    /// The rejecting plugin.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub plugin: Option<String>,
    /// The rejecting status code.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub code: Option<Code>,
    /// Rejection reasons (upstream strings).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub reasons: Vec<String>,
    /// Numbers behind the rejection.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub detail: Option<String>,
    /// Weighted total score (feasible nodes, when scoring ran).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub total: Option<i64>,
    /// Per-plugin scores.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub scores: Vec<PluginScore>,
}

impl NodeVerdict {
    fn rejected(name: &str, s: &Status) -> NodeVerdict {
        NodeVerdict {
            name: name.to_string(),
            feasible: false,
            chosen: false,
            plugin: (!s.plugin.is_empty()).then(|| s.plugin.to_string()),
            code: Some(s.code),
            reasons: s.reasons.iter().map(|r| r.to_string()).collect(),
            detail: s.detail.clone(),
            total: None,
            scores: Vec::new(),
        }
    }
}

/// `name` followed by spaces up to `width` characters (no padding past it).
fn padded(name: &str, width: usize) -> std::borrow::Cow<'_, str> {
    let n = name.chars().count();
    if n >= width {
        std::borrow::Cow::Borrowed(name)
    } else {
        std::borrow::Cow::Owned(format!("{name}{}", " ".repeat(width - n)))
    }
}

/// A decision rendered for output: what `place --output json` prints and `/explain` serves.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `namespace/name`.
    pub pod: String,
    /// Pod uid.
    pub uid: String,
    /// Profile that decided.
    pub profile: String,
    /// Snapshot generation read.
    pub snapshot_generation: u64,
    /// Whether a node was chosen.
    pub placed: bool,
    /// The chosen node.
    pub node: Option<String>,
    /// The FailedScheduling message (or error) when not placed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message: Option<String>,
    /// How many nodes passed the filters.
    pub feasible_nodes: usize,
    /// PreFilter statuses other than success.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub pre_filter: Vec<PluginStatus>,
    /// Score plugins that skipped this pod.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub skipped_scores: Vec<String>,
    /// Notes from plugins.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub notes: Vec<String>,
    /// Set when the usage fallback (`usage.maxWait`) placed the pod.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub fallback: Option<Fallback>,
    /// The PVs chosen for the pod's unbound WaitForFirstConsumer claims
    /// (`namespace/claim` → PV).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty", default)]
    pub volume_bindings: std::collections::BTreeMap<String, String>,
    /// The node preemption nominated for the pod (upstream's `status.nominatedNodeName`),
    /// null when none.
    #[serde(default)]
    pub nominated_node: Option<String>,
    /// The pods preemption evicts for it, `namespace/name`, sorted; empty when none.
    #[serde(default)]
    pub victims: Vec<String>,
    /// Every node's verdict, in snapshot order (see `omitted_nodes`).
    pub nodes: Vec<NodeVerdict>,
    /// Nodes left out of `nodes` by [`Decision::explain_at_most`] (stored explanations of
    /// large clusters); 0 when every node is there.
    #[serde(skip_serializing_if = "is_zero", default)]
    pub omitted_nodes: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Explanation {
    /// A human-readable table.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "pod {} (profile {})", self.pod, self.profile);
        match (&self.node, &self.message) {
            (Some(n), _) => {
                let _ = writeln!(
                    out,
                    "  placed on {n} ({} feasible node(s))",
                    self.feasible_nodes
                );
            }
            (None, Some(m)) => {
                let _ = writeln!(out, "  not placed: {m}");
            }
            (None, None) => {
                let _ = writeln!(out, "  not placed");
            }
        }
        let skipped: Vec<&str> = self
            .pre_filter
            .iter()
            .filter(|s| s.code == Code::Skip)
            .map(|s| s.plugin.as_str())
            .collect();
        if !skipped.is_empty() {
            let _ = writeln!(out, "  filter plugins skipped: {}", skipped.join(", "));
        }
        for s in self.pre_filter.iter().filter(|s| s.code != Code::Skip) {
            let _ = write!(out, "  prefilter {}: {:?} {}", s.plugin, s.code, s.message);
            if let Some(d) = &s.detail {
                let _ = write!(out, " ({d})");
            }
            out.push('\n');
        }
        if !self.skipped_scores.is_empty() {
            let _ = writeln!(
                out,
                "  score plugins skipped: {}",
                self.skipped_scores.join(", ")
            );
        }
        if let Some(f) = &self.fallback {
            let _ = writeln!(out, "  {}", f.describe());
        }
        for (claim, pv) in &self.volume_bindings {
            let _ = writeln!(out, "  volume binding: claim {claim} → PV {pv}");
        }
        if let Some(n) = &self.nominated_node {
            let _ = writeln!(
                out,
                "  preemption: nominated node {n}, victims: {}",
                if self.victims.is_empty() {
                    "none".to_string()
                } else {
                    self.victims.join(", ")
                }
            );
        }
        for n in &self.notes {
            let _ = writeln!(out, "  note: {n}");
        }
        // Names are padded to align the columns, up to MAX_NAME_COLUMN characters: a longer
        // name overflows its column rather than padding every line (and `{:width$}` takes
        // at most u16::MAX, so a 65,536-character name would panic the formatter).
        const MAX_NAME_COLUMN: usize = 64;
        let width = self
            .nodes
            .iter()
            .map(|n| n.name.chars().count())
            .max()
            .unwrap_or(4)
            .clamp(4, MAX_NAME_COLUMN);
        for n in &self.nodes {
            let mark = if n.chosen { "*" } else { " " };
            if n.feasible {
                let total = n.total.map_or("-".to_string(), |t| t.to_string());
                let _ = write!(
                    out,
                    "  {mark} {}  feasible  total {total}",
                    padded(&n.name, width)
                );
                for s in &n.scores {
                    let _ = write!(out, "  {}={}", s.plugin, s.weighted);
                }
                out.push('\n');
                for s in n.scores.iter().filter(|s| s.detail.is_some()) {
                    let _ = writeln!(
                        out,
                        "      {}: raw {} → {} × {}: {}",
                        s.plugin,
                        s.raw,
                        s.normalized,
                        s.weight,
                        s.detail.as_deref().unwrap_or("")
                    );
                }
            } else {
                let _ = write!(
                    out,
                    "  {mark} {}  rejected  {}: {}",
                    padded(&n.name, width),
                    n.plugin.as_deref().unwrap_or("-"),
                    n.reasons.join(", ")
                );
                if let Some(d) = &n.detail {
                    let _ = write!(out, " ({d})");
                }
                out.push('\n');
            }
        }
        if self.omitted_nodes > 0 {
            let _ = writeln!(
                out,
                "  ({} more nodes not kept in the stored explanation)",
                self.omitted_nodes
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten nodes: even ones feasible with total = index (n0 chosen), odd ones rejected.
    fn ten_nodes() -> Decision {
        let names: Vec<Arc<str>> = (0..10).map(|i| Arc::from(format!("n{i}"))).collect();
        let mut d = Decision::new("default", "p", "u".into(), "headroom", 1, Arc::new(names));
        d.feasible = (0..10).step_by(2).collect();
        d.totals = d.feasible.iter().map(|&i| i64::from(i)).collect();
        d.scores = vec![ScoreColumn {
            plugin: "P",
            weight: 1,
            raw: None,
            normalized: d.totals.iter().map(|t| *t as u8).collect(),
            details: None,
        }];
        d.rejected = (1..10)
            .step_by(2)
            .map(|i| (i, Status::unschedulable("r").with_plugin("Q")))
            .collect();
        d.outcome = Outcome::Placed { node: "n0".into() };
        d
    }

    /// `best_nodes` is the head of the full sort (total descending, then name), whatever
    /// the order the totals come in, with ties.
    #[test]
    fn best_nodes_is_the_head_of_the_full_sort() {
        let mut d = ten_nodes();
        d.feasible = (0..10).collect();
        for seed in 0..50u64 {
            d.totals = (0..10u64)
                .map(|i| ((i * 7 + seed * 13) % 5) as i64)
                .collect();
            let mut all: Vec<(i64, NodeIdx)> = d
                .totals
                .iter()
                .copied()
                .zip(d.feasible.iter().copied())
                .collect();
            all.sort_by(|a, b| {
                b.0.cmp(&a.0)
                    .then_with(|| d.node_names[a.1 as usize].cmp(&d.node_names[b.1 as usize]))
            });
            for k in [0, 1, 3, 10, 12] {
                assert_eq!(
                    d.best_nodes(k),
                    all[..k.min(10)].to_vec(),
                    "seed {seed} k {k}"
                );
            }
        }
    }

    /// With the snapshot's name ranks, ties break exactly as by comparing names (names in
    /// an order unlike their indices, so a rank equal to the index would fail), and the
    /// chosen index set by `place` is what the name search finds.
    #[test]
    fn best_nodes_by_rank_equals_by_name() {
        let names: Vec<Arc<str>> = ["k", "b", "x", "a", "m", "c", "z", "d", "q", "e"]
            .into_iter()
            .map(Arc::from)
            .collect();
        let mut by_name = Decision::new("default", "p", "u".into(), "headroom", 1, Arc::new(names));
        by_name.feasible = (0..10).collect();
        let ranks = Arc::new(NameRanks::build(&by_name.node_names, 0));
        assert_eq!((ranks.of(3), ranks.of(6)), (0, 9));
        for seed in 0..50u64 {
            by_name.totals = (0..10u64)
                .map(|i| ((i * 7 + seed * 13) % 3) as i64)
                .collect();
            let by_rank = by_name.clone().with_name_ranks(ranks.clone());
            for k in [1, 3, 10] {
                assert_eq!(
                    by_rank.best_nodes(k),
                    by_name.best_nodes(k),
                    "seed {seed} k {k}"
                );
            }
        }
        let mut d = by_name.clone();
        d.place(6);
        assert_eq!((d.node(), d.chosen_idx()), (Some("z"), Some(6)));
        d.chosen = None;
        assert_eq!(d.chosen_idx(), Some(6), "found by name without the index");
    }

    /// A stored explanation keeps the chosen node, the best feasible ones, then rejected
    /// ones, in snapshot order, counts the rest, and each kept verdict is the one the
    /// full explanation has.
    #[test]
    fn explain_at_most_keeps_the_chosen_and_best_and_counts_the_rest() {
        let d = ten_nodes();
        let all = d.explain();
        assert_eq!((all.nodes.len(), all.omitted_nodes), (10, 0));
        assert_eq!(d.explain_at_most(10).nodes, all.nodes);
        let e = d.explain_at_most(4);
        let names: Vec<&str> = e.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["n0", "n4", "n6", "n8"]);
        for v in &e.nodes {
            assert_eq!(Some(v), all.nodes.iter().find(|a| a.name == v.name));
        }
        assert_eq!(e.omitted_nodes, 6);
        assert!(e.to_text().contains("6 more nodes not kept"));
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["omittedNodes"], 6);
        assert!(
            serde_json::to_value(&all)
                .unwrap()
                .get("omittedNodes")
                .is_none()
        );
        // Past the feasible nodes, rejected ones in snapshot order.
        let names: Vec<String> = d
            .explain_at_most(7)
            .nodes
            .into_iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(names, ["n0", "n1", "n2", "n3", "n4", "n6", "n8"]);
        assert!(d.explain_at_most(0).nodes.is_empty());
    }

    #[test]
    fn text_renders_any_node_name_length() {
        // Regression (issue #15, 5): `{:width$}` with a 65,536-character node name panicked
        // `place`'s text output.
        let long = "n".repeat(70_000);
        let e: Explanation = serde_json::from_value(serde_json::json!({
            "pod": "default/p", "uid": "u", "profile": "headroom", "snapshotGeneration": 1,
            "placed": true, "node": long, "feasibleNodes": 1,
            "nodes": [
                {"name": long, "feasible": true, "chosen": true, "total": 100,
                 "scores": [{"plugin": "X", "raw": 1, "normalized": 100, "weight": 1, "weighted": 100}]},
                {"name": "short", "feasible": false, "plugin": "NodeName", "reasons": ["no"]},
                {"name": "ünïcödé", "feasible": false, "plugin": "NodeName", "reasons": ["no"]}
            ]
        }))
        .unwrap();
        let text = e.to_text();
        let lines: Vec<&str> = text.lines().collect();
        let row = |name: &str| {
            *lines
                .iter()
                .find(|l| {
                    l.contains(name) && (l.contains("  feasible  ") || l.contains("  rejected  "))
                })
                .unwrap()
        };
        assert!(
            row(&long).ends_with("  feasible  total 100  X=100"),
            "{}",
            row(&long).replace(&long, "<long>")
        );
        // The column is capped at 64 characters: short names are not padded to 70,000.
        assert_eq!(
            row("short"),
            format!("    {}  rejected  NodeName: no", padded("short", 64))
        );
        assert_eq!(row("ünïcödé").chars().count(), row("short").chars().count());
    }
}

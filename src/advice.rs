//! Descheduling advice: the nodes running hot by real usage, and the pods whose move would
//! help most — what no request-based scheduler can tell, because requests do not show a
//! node running out of real memory. Nothing is evicted: the advice is served at
//! `GET /advice`, printed by `headroom advice`, counted in the `headroom_advice_*` metrics,
//! and acted on only by `headroom simulate --act-on-advice`.
//!
//! A node is hot when its real memory use — the scheduler's own [`Headroom`] (measured
//! usage, the larger of current and windowed, plus the pods placed since the newest
//! sample) — is above `advice.hotMemoryPercent` of its capacity. Nodes whose usage is stale
//! or missing are not judged. For each hot node, from the hottest, the advice picks pods
//! until their predicted memory (their builder's profile, as the scheduler predicts it)
//! would bring the node back to `advice.targetMemoryPercent`, at most
//! `advice.maxMovesPerNode`. A move costs the work the pod loses when restarted (its run
//! time so far; pods of a ReplicaSet lose none), so pods are taken by memory freed per
//! minute lost, biggest gain first. Each move names a node it could go to: one that is not
//! cordoned, fits the pod by requests and stays at or below the target by real memory
//! after it (the emptiest such node); the scheduler decides for real once the pod is
//! recreated. Pods of a DaemonSet, static (mirror) pods and pods whose class keeps local
//! disk (RealDiskFit, e.g. databases) are never suggested.
//!
//! The computation is a pure function of the snapshot (nodes, pods, usage context) and
//! the configuration: [`advise`].

use serde::{Deserialize, Serialize};

use headroom_scheduler::key::{PodKey, Uid};
use headroom_scheduler::snapshot::{NodeInfo, PodInfo, Snapshot};
use headroom_scheduler::usage::{Headroom, PodUsage, UsagePolicy};

/// The `advice` configuration section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct AdviceConfig {
    /// A node is hot above this share of its memory in real use, percent. Default `90`
    /// (the default memory reserve keeps the scheduler's own placements below it).
    pub hot_memory_percent: f64,
    /// Moves aim to bring a hot node back to this, percent; a destination must stay at or
    /// below it. Default `80`.
    pub target_memory_percent: f64,
    /// At most this many moves suggested per hot node. Default `3`.
    pub max_moves_per_node: usize,
}

impl Default for AdviceConfig {
    fn default() -> Self {
        AdviceConfig {
            hot_memory_percent: 90.0,
            target_memory_percent: 80.0,
            max_moves_per_node: 3,
        }
    }
}

impl AdviceConfig {
    /// Checks the thresholds: `0 ≤ target ≤ hot ≤ 100`. The error names the field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let (h, t) = (self.hot_memory_percent, self.target_memory_percent);
        if !(0.0..=100.0).contains(&h) {
            return Err((
                "advice.hotMemoryPercent".into(),
                format!("{h} is not a percentage in [0, 100]"),
            ));
        }
        if !(0.0..=h).contains(&t) {
            return Err((
                "advice.targetMemoryPercent".into(),
                format!("{t} is not a percentage in [0, hotMemoryPercent ({h})]"),
            ));
        }
        Ok(())
    }
}

/// One suggested move.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Move {
    /// The pod (`namespace/name` in JSON).
    pub pod: PodKey,
    /// Its uid.
    pub uid: Uid,
    /// Its builder identity.
    pub builder: String,
    /// The memory the move frees, bytes: the pod's predicted usage.
    pub predicted_memory_bytes: f64,
    /// Where the prediction comes from (`profile p95 of 12 runs`, `requests`).
    pub prediction: String,
    /// How long it has run, seconds (from `status.startTime`), when known.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub running_seconds: Option<f64>,
    /// The work a restart throws away, minutes (0 for ReplicaSet pods).
    pub cost_minutes: f64,
    /// A node it could go to.
    pub to: String,
    /// That node's real memory use after the move, percent.
    pub to_memory_percent_after: f64,
}

/// A hot node and its suggested moves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HotNode {
    /// The node.
    pub node: String,
    /// Memory capacity, bytes.
    pub memory_total_bytes: f64,
    /// Memory in real use (the scheduler's headroom basis), bytes.
    pub memory_used_bytes: f64,
    /// That, percent of capacity.
    pub memory_percent: f64,
    /// Memory above the target, bytes: what the moves should free.
    pub excess_bytes: f64,
    /// Pods on the node.
    pub pods: usize,
    /// The moves, best first.
    pub moves: Vec<Move>,
    /// Excess the moves do not free (no more movable pods, or nowhere to go), bytes.
    pub uncovered_bytes: f64,
}

/// The advice at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Advice {
    /// The scheduler's clock when computed, ms since the epoch.
    pub now_ms: i64,
    /// When the usage view behind it was computed (0: never).
    pub usage_generated_ms: i64,
    /// The thresholds used, percent.
    pub hot_memory_percent: f64,
    /// The target, percent.
    pub target_memory_percent: f64,
    /// Nodes with fresh usage (the others are not judged).
    pub nodes_judged: usize,
    /// Nodes without fresh usage.
    pub stale_nodes: usize,
    /// The hot nodes, hottest first.
    pub hot_nodes: Vec<HotNode>,
    /// Moves suggested over all hot nodes.
    pub moves: usize,
    /// Memory above the target over all hot nodes, bytes.
    pub excess_bytes: f64,
}

impl Advice {
    /// A text table: one line per hot node, one per move.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let gi = |b: f64| b / (1u64 << 30) as f64;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} hot node(s) above {:.0} % real memory of {} judged ({} without fresh usage); {} move(s) suggested toward {:.0} %",
            self.hot_nodes.len(),
            self.hot_memory_percent,
            self.nodes_judged,
            self.stale_nodes,
            self.moves,
            self.target_memory_percent
        );
        for n in &self.hot_nodes {
            let _ = writeln!(
                out,
                "  {}  {:.1} % ({:.1} of {:.1} GiB), {:.1} GiB above target, {} pod(s)",
                n.node,
                n.memory_percent,
                gi(n.memory_used_bytes),
                gi(n.memory_total_bytes),
                gi(n.excess_bytes),
                n.pods
            );
            for m in &n.moves {
                let _ = writeln!(
                    out,
                    "    move {} ({}): frees {:.1} GiB ({}), loses {:.0} min → {} ({:.1} % after)",
                    m.pod,
                    m.builder,
                    gi(m.predicted_memory_bytes),
                    m.prediction,
                    m.cost_minutes,
                    m.to,
                    m.to_memory_percent_after
                );
            }
            if n.uncovered_bytes > 0.0 {
                let _ = writeln!(
                    out,
                    "    {:.1} GiB not covered (no more movable pods, or nowhere to go)",
                    gi(n.uncovered_bytes)
                );
            }
        }
        out
    }
}

/// Whether the advice may suggest moving `pod`.
fn movable(pod: &PodInfo, usage: &PodUsage) -> bool {
    let meta = &pod.pod.metadata;
    let daemon = meta
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet");
    let mirror = meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    !daemon && !mirror && !usage.class.real_disk_fit
}

/// Whether a restart of `pod` loses no work: its controller replaces it (ReplicaSet).
fn replaceable(pod: &PodInfo) -> bool {
    pod.pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "ReplicaSet")
}

/// Whether `node` carries every label of the pod's `nodeSelector`.
fn selects(pod: &PodInfo, node: &NodeInfo) -> bool {
    let Some(sel) = pod.pod.spec.as_ref().and_then(|s| s.node_selector.as_ref()) else {
        return true;
    };
    let labels = node.node.metadata.labels.as_ref();
    sel.iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// A destination being planned: its real memory and requests as moves land on it.
struct Dest<'a> {
    node: &'a NodeInfo,
    used: f64,
    total: f64,
    milli_cpu: i64,
    memory: i64,
    pods: i64,
}

/// The advice for the snapshot's nodes and pods, judged by its usage context.
pub fn advise(
    snapshot: &Snapshot,
    policy: &UsagePolicy,
    identity: &headroom_collectors::IdentityConfig,
    config: &AdviceConfig,
) -> Advice {
    let ctx = snapshot.usage();
    let now = ctx.now_ms;
    let hot = config.hot_memory_percent / 100.0;
    let target = config.target_memory_percent / 100.0;
    let mut judged = Vec::new();
    let mut stale = 0usize;
    for n in snapshot.nodes() {
        if n.error.is_some() {
            continue;
        }
        let h = Headroom::of(n, ctx, policy);
        if h.basis != headroom_scheduler::usage::Basis::Measured || h.memory_total <= 0.0 {
            stale += 1;
            continue;
        }
        judged.push((n.as_ref(), h));
    }
    let mut dests: Vec<Dest> = judged
        .iter()
        .filter(|(n, h)| !n.unschedulable && h.memory_used / h.memory_total <= target)
        .map(|(n, h)| Dest {
            node: n,
            used: h.memory_used,
            total: h.memory_total,
            milli_cpu: n.requested.milli_cpu,
            memory: n.requested.memory,
            pods: i64::try_from(n.pods.len()).unwrap_or(i64::MAX),
        })
        .collect();
    let mut hot_nodes: Vec<(&NodeInfo, Headroom)> = judged
        .iter()
        .filter(|(_, h)| h.memory_used / h.memory_total > hot)
        .map(|(n, h)| (*n, *h))
        .collect();
    hot_nodes.sort_by(|a, b| {
        let u = |h: &Headroom| h.memory_used / h.memory_total;
        u(&b.1).total_cmp(&u(&a.1)).then(a.0.name.cmp(&b.0.name))
    });
    let mut out = Vec::new();
    for (node, h) in hot_nodes {
        let excess = h.memory_used - target * h.memory_total;
        let mut candidates: Vec<(f64, &PodInfo, PodUsage, Option<f64>, f64)> = node
            .pods
            .iter()
            .filter_map(|p| {
                let u = PodUsage::of(p, snapshot, policy, identity);
                if !movable(p, &u) || u.prediction.memory_bytes <= 0.0 {
                    return None;
                }
                let running = p
                    .pod
                    .status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .map(|t| ((now - t.0.as_millisecond()).max(0)) as f64 / 1000.0);
                let cost = if replaceable(p) {
                    0.0
                } else {
                    running.unwrap_or(0.0) / 60.0
                };
                // Memory freed per minute of work lost (plus five minutes for the restart
                // itself), biggest gain first.
                let gain = u.prediction.memory_bytes / (cost + 5.0);
                Some((gain, &**p, u, running, cost))
            })
            .collect();
        candidates.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then(a.1.namespace.cmp(&b.1.namespace))
                .then(a.1.name.cmp(&b.1.name))
        });
        let mut left = excess;
        let mut moves = Vec::new();
        for (_, p, u, running, cost) in candidates {
            if left <= 0.0 || moves.len() >= config.max_moves_per_node {
                break;
            }
            let mem = u.prediction.memory_bytes;
            let r = &p.requests.requests;
            let dest = dests
                .iter_mut()
                .filter(|d| {
                    *d.node.name != *node.name
                        && selects(p, d.node)
                        && (d.used + mem) / d.total <= target
                        && d.milli_cpu + r.milli_cpu <= d.node.allocatable.milli_cpu
                        && d.memory + r.memory <= d.node.allocatable.memory
                        && d.pods < d.node.allocatable.pods
                })
                .max_by(|a, b| {
                    let free = |d: &Dest| (d.total - d.used) / d.total;
                    free(a)
                        .total_cmp(&free(b))
                        .then(b.node.name.cmp(&a.node.name))
                });
            let Some(d) = dest else { continue };
            d.used += mem;
            d.milli_cpu += r.milli_cpu;
            d.memory += r.memory;
            d.pods += 1;
            left -= mem;
            moves.push(Move {
                pod: p.key(),
                uid: p.uid.clone(),
                builder: u.builder.to_string(),
                predicted_memory_bytes: mem,
                prediction: u.prediction.describe(),
                running_seconds: running,
                cost_minutes: cost,
                to: d.node.name.to_string(),
                to_memory_percent_after: d.used / d.total * 100.0,
            });
        }
        out.push(HotNode {
            node: node.name.to_string(),
            memory_total_bytes: h.memory_total,
            memory_used_bytes: h.memory_used,
            memory_percent: h.memory_used / h.memory_total * 100.0,
            excess_bytes: excess.max(0.0),
            pods: node.pods.len(),
            moves,
            uncovered_bytes: left.max(0.0),
        });
    }
    Advice {
        now_ms: now,
        usage_generated_ms: ctx.view.generated_ms,
        hot_memory_percent: config.hot_memory_percent,
        target_memory_percent: config.target_memory_percent,
        nodes_judged: judged.len(),
        stale_nodes: stale,
        moves: out.iter().map(|n| n.moves.len()).sum(),
        excess_bytes: out.iter().fold(0.0, |a, n| a + n.excess_bytes),
        hot_nodes: out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_scheduler::plugins::testutil::*;
    use serde_json::json;

    /// A pod of builder `b` bound to `node`, started `minutes` ago, requesting `mem`.
    fn running(
        name: &str,
        b: &str,
        node: &str,
        minutes: i64,
        mem: &str,
    ) -> k8s_openapi::api::core::v1::Pod {
        let started = k8s_openapi::jiff::Timestamp::from_millisecond(NOW_MS - minutes * 60_000)
            .unwrap()
            .to_string();
        pod(
            name,
            json!({"metadata": {"labels": {"bkci.dispatch.kubenetes/core": b}},
                   "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": mem}}}]},
                   "status": {"startTime": started}}),
        )
    }

    #[test]
    fn hot_nodes_and_the_moves_that_help_most() {
        // 8 GiB nodes. "hot" is at 7.6 GiB (95 %): 1.2 GiB above the 80 % target. On it:
        // a big build that just started (cheap to move), a big one 40 min in, a small one,
        // a DaemonSet pod and a database.
        // Both would free the most memory for the least work lost, if they were movable.
        let big = json!([{"name": "c", "resources": {"requests": {"memory": "3Gi"}}}]);
        let ds = pod(
            "agent",
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "d", "controller": true}]},
                   "spec": {"nodeName": "hot", "containers": big}}),
        );
        let db = pod(
            "db",
            json!({"metadata": {"labels": {"headroom.io/service": "mysql"}},
                   "spec": {"nodeName": "hot", "containers": big}}),
        );
        let snap = with_usage(
            Snapshot::build(
                [
                    node("hot", json!({})),
                    node("cool", json!({})),
                    node("busy", json!({})),
                    node("cordoned", json!({"spec": {"unschedulable": true}})),
                    node("dark", json!({})),
                ],
                [
                    running("fresh-big", "big", "hot", 2, "1Gi"),
                    running("old-big", "big", "hot", 40, "1Gi"),
                    running("small", "small", "hot", 1, "1Gi"),
                    ds,
                    db,
                ],
            ),
            vec![
                usage("hot", 1.0, 7.6 * GI, 10, None),
                usage("cool", 1.0, 2.0 * GI, 10, None),
                usage("busy", 1.0, 6.0 * GI, 10, None),
                usage("cordoned", 1.0, 0.0, 10, None),
            ],
            vec![
                profile("big", 1.0, 1.0 * GI),
                profile("small", 0.5, 0.25 * GI),
            ],
        );
        let a = advise(
            &snap,
            &UsagePolicy::default(),
            &headroom_collectors::IdentityConfig::default(),
            &AdviceConfig::default(),
        );
        assert_eq!((a.nodes_judged, a.stale_nodes), (4, 1), "dark has no usage");
        assert_eq!(a.hot_nodes.len(), 1);
        let h = &a.hot_nodes[0];
        assert_eq!(h.node, "hot");
        assert!((h.memory_percent - 95.0).abs() < 1e-9);
        assert!((h.excess_bytes - 1.2 * GI).abs() < 1.0);
        let moved: Vec<String> = h.moves.iter().map(|m| m.pod.to_string()).collect();
        // The cheap big build first, then the small one (a little memory, little lost)
        // before the big one 40 minutes in; never the DaemonSet pod or the database.
        assert_eq!(moved, ["default/fresh-big", "default/small"]);
        let m = &h.moves[0];
        assert_eq!(m.builder, "big");
        assert!(
            m.prediction.contains("profile p95 of 5 runs"),
            "{}",
            m.prediction
        );
        assert_eq!(m.running_seconds, Some(120.0));
        // Destination: the emptiest node that stays at or below 80 %; never the
        // cordoned one, even though it is emptier.
        assert_eq!(m.to, "cool");
        assert!((m.to_memory_percent_after - 37.5).abs() < 1e-9);
        assert!(h.uncovered_bytes < 1e-6, "{}", h.uncovered_bytes);
        assert_eq!(a.moves, 2);
        assert!(
            a.to_text()
                .contains("move default/fresh-big (big): frees 1.0 GiB")
        );

        // Nothing is hot under a 96 % threshold; a target above hot is refused.
        let lax = AdviceConfig {
            hot_memory_percent: 96.0,
            ..AdviceConfig::default()
        };
        let a = advise(&snap, &UsagePolicy::default(), &Default::default(), &lax);
        assert!(a.hot_nodes.is_empty() && a.moves == 0);
        let bad = AdviceConfig {
            target_memory_percent: 95.0,
            ..AdviceConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().0, "advice.targetMemoryPercent");
        assert!(AdviceConfig::default().validate().is_ok());
    }

    #[test]
    fn no_destination_no_move() {
        // Both nodes hot: the excess stays uncovered.
        let snap = with_usage(
            Snapshot::build(
                [node("a", json!({})), node("b", json!({}))],
                [running("p", "big", "a", 1, "1Gi")],
            ),
            vec![
                usage("a", 1.0, 7.8 * GI, 10, None),
                usage("b", 1.0, 7.5 * GI, 10, None),
            ],
            vec![profile("big", 1.0, 1.0 * GI)],
        );
        let a = advise(
            &snap,
            &UsagePolicy::default(),
            &Default::default(),
            &AdviceConfig::default(),
        );
        assert_eq!(a.hot_nodes.len(), 2);
        assert_eq!(a.moves, 0);
        assert!(a.hot_nodes[0].uncovered_bytes > 0.0);
        assert_eq!(a.hot_nodes[0].node, "a", "hottest first");
    }
}

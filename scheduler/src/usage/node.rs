//! What a node really has free: measured usage plus the pods placed since its newest
//! sample (compensation), against its capacity; disk from metrics or node annotations.

use std::sync::Arc;

use super::CycleUsage;
use super::policy::{StalePolicy, UsagePolicy};
use crate::framework::{CycleState, Status};
use crate::quantity::format_bytes;
use crate::snapshot::table::{NodeTable, real_capacity, res};
use crate::snapshot::{NodeIdx, NodeInfo, PodInfo};
use crate::usage_context::{MemoryDist, RecentSums, UsageContext, UsageRow};

// The disk annotations are read with the rest of the node ([`NodeInfo`]); named here too,
// where the usage view falls back on them.
pub use crate::snapshot::{DISK_FREE_ANNOTATION, DISK_TOTAL_ANNOTATION};

/// Where a node's disk numbers came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskSource {
    /// Collected metrics.
    Metrics,
    /// The `headroom.io/disk-*` node annotations.
    Annotations,
}

/// A node's disk, bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Disk {
    /// Size.
    pub total: f64,
    /// Free now (after recent placements' needs).
    pub free: f64,
    /// Source.
    pub source: DiskSource,
}

/// Freshness of a node's usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Newest sample within `staleAfter`.
    Fresh {
        /// Its age, ms.
        age_ms: i64,
    },
    /// Older.
    Stale {
        /// Its age, ms.
        age_ms: i64,
    },
    /// No usage for the node at all.
    Missing,
}

impl Freshness {
    /// `fresh (12s old)`, `stale (5m 3s old)`, `no usage metrics`.
    pub fn describe(&self) -> String {
        let age = |ms: i64| {
            humantime_serde::re::humantime::format_duration(std::time::Duration::from_secs(
                (ms.max(0) / 1000) as u64,
            ))
        };
        match self {
            Freshness::Fresh { age_ms } => format!("fresh ({} old)", age(*age_ms)),
            Freshness::Stale { age_ms } => format!("stale ({} old)", age(*age_ms)),
            Freshness::Missing => "no usage metrics".to_string(),
        }
    }

    /// Whether decisions may use the numbers.
    pub fn is_fresh(&self) -> bool {
        matches!(self, Freshness::Fresh { .. })
    }
}

/// A node's real state for one cycle.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeReal {
    /// Freshness of the measured part.
    pub freshness: Freshness,
    /// CPU capacity, cores.
    pub cpu_total: f64,
    /// CPU in use (measured, conservative statistic) plus recent placements, cores.
    pub cpu_used: f64,
    /// Memory capacity, bytes.
    pub memory_total: f64,
    /// Memory in use (measured) plus recent placements, bytes.
    pub memory_used: f64,
    /// Pods counted by compensation (placed after the newest sample).
    pub recent: usize,
    /// Their predicted CPU, cores.
    pub recent_cpu: f64,
    /// Their predicted memory, bytes.
    pub recent_memory: f64,
    /// Their memory as a distribution (the risk-based fit).
    pub recent_memory_dist: MemoryDist,
    /// Disk, when known.
    pub disk: Option<Disk>,
}

/// CPU (cores) and memory (bytes) in use on a node, as [`NodeReal`] counts them: its
/// measured usage (`row`; none without one) less what the pods that left it used
/// ([`RecentSums::without_departed`]), plus its recent placements. One function for
/// [`NodeReal::from_parts`] and [`RealUse::at`], so the two cannot disagree.
#[inline(always)]
fn real_used(row: Option<&UsageRow>, recent: &RecentSums) -> [f64; 2] {
    let [cpu, memory] = row.map_or([0.0, 0.0], |u| {
        recent
            .without_departed
            .map_or([u.cpu, u.memory], |[c, m]| [c.min(u.cpu), m.min(u.memory)])
    });
    [cpu + recent.cpu, memory + recent.memory]
}

/// Node `idx`'s capacity and real use (with the recent placements), the same numbers
/// [`CycleUsage::node_real_at`] gives, without building the rest of its real state (disk,
/// the recent placements' count and spread): the real filters' quick pass over every node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RealUse {
    /// [`NodeReal::cpu_total`].
    pub cpu_total: f64,
    /// [`NodeReal::cpu_used`].
    pub cpu_used: f64,
    /// [`NodeReal::memory_total`].
    pub memory_total: f64,
    /// [`NodeReal::memory_used`].
    pub memory_used: f64,
}

impl RealUse {
    /// Node `idx`'s [`RealUse`]; `None` without a usage row.
    #[inline]
    pub fn at(u: &CycleUsage, table: &NodeTable, idx: NodeIdx) -> Option<RealUse> {
        let row = u.rows.row(idx)?;
        let [cpu_used, memory_used] = real_used(Some(row), &u.recent_at(idx));
        let [cpu_total, memory_total] = table.capacity[idx as usize];
        Some(RealUse {
            cpu_total,
            cpu_used,
            memory_total,
            memory_used,
        })
    }
}

impl NodeReal {
    /// The real state of `node` in `ctx`. Measured usage is the larger of the current value
    /// and the windowed statistic (a quiet last scrape must not hide a busy window, nor a
    /// windowed p95 hide a spike happening now); free disk the smaller.
    ///
    /// Inside a cycle, [`CycleUsage::node_real`] gives the same numbers from rows resolved
    /// once per view.
    pub fn of(node: &NodeInfo, ctx: &UsageContext, policy: &UsagePolicy) -> NodeReal {
        let entry = ctx.view.node(&node.name);
        let row = entry.map(UsageRow::of);
        let recent = RecentSums::of(ctx, &node.name, policy.warmup_ms());
        NodeReal::from_parts(
            real_capacity(node.capacity),
            node.disk_annotations,
            row.as_ref(),
            entry.and_then(UsageRow::fs_of),
            ctx.now_ms,
            recent,
            policy,
        )
    }

    /// The real state of a node from its capacity (cores, bytes: [`real_capacity`]), its disk
    /// annotations ([`NodeInfo::disk_annotations`]), its usage row, its root filesystem
    /// ([`UsageRow::fs_of`]) and its recent placements at `now_ms`.
    #[inline]
    pub fn from_parts(
        capacity: [f64; 2],
        disk_annotations: (Option<f64>, Option<f64>),
        row: Option<&UsageRow>,
        fs: Option<(f64, f64)>,
        now_ms: i64,
        recent: RecentSums,
        policy: &UsagePolicy,
    ) -> NodeReal {
        let freshness = match row {
            None => Freshness::Missing,
            Some(u) => {
                let age_ms = now_ms.saturating_sub(u.newest_ms);
                if age_ms <= policy.stale_after.as_millis() as i64 {
                    Freshness::Fresh { age_ms }
                } else {
                    Freshness::Stale { age_ms }
                }
            }
        };
        // Pods that left the node come off its samples, each by what it used at each one
        // ([`crate::usage_context::UsageContext::record_departure`]).
        let [cpu_used, memory_used] = real_used(row, &recent);
        // Disk from metrics only while they are fresh; the annotations (synced by a script,
        // seed 003) stand in otherwise.
        let metrics_disk = fs
            .filter(|_| freshness.is_fresh())
            .map(|(total, free)| Disk {
                total,
                free: free - recent.disk,
                source: DiskSource::Metrics,
            });
        let disk = metrics_disk.or_else(|| {
            let (total, free) = disk_annotations;
            Some(Disk {
                total: total?,
                free: free? - recent.disk,
                source: DiskSource::Annotations,
            })
        });
        NodeReal {
            freshness,
            cpu_total: capacity[0],
            cpu_used,
            memory_total: capacity[1],
            memory_used,
            recent: recent.count,
            recent_cpu: recent.cpu,
            recent_memory: recent.memory,
            recent_memory_dist: recent.memory_dist,
            disk,
        }
    }

    /// The node's memory demand with a pod of demand `pod` placed: its measured usage
    /// (known), the recent placements its samples do not show yet and the pod, as one
    /// distribution ([`crate::usage_context::risk`]).
    pub fn memory_demand(&self, pod: MemoryDist) -> MemoryDist {
        MemoryDist::exact(self.memory_used - self.recent_memory)
            .plus(self.recent_memory_dist)
            .plus(pod)
    }

    /// `real used 5.0 GiB (incl. 2 recent pods 1.0 GiB) of 16.0 GiB, fresh (10s old)`.
    pub fn describe_memory(&self) -> String {
        let mut s = format!(
            "real used {} of {}",
            format_bytes(self.memory_used as i64),
            format_bytes(self.memory_total as i64)
        );
        if self.recent > 0 {
            s.push_str(&format!(
                " (incl. {} recent pod(s) {})",
                self.recent,
                format_bytes(self.recent_memory as i64)
            ));
        }
        s
    }
}

/// What a node's free resources are judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Basis {
    /// Fresh measured usage plus the pods placed since the newest sample.
    Measured,
    /// Stale usage: the pods' requests, with the last measurement as a floor (a node whose
    /// metrics stopped must not look empty and attract every pod).
    StaleFloor,
    /// No usage at all: the pods' requests, as kube-scheduler judges.
    Requests,
}

/// What a node really has free now, before any new pod: **the** headroom. RealMemoryFit,
/// RealHeadroom and History decide on it (through [`FreeAfter`], which adds the pod), and
/// `/nodes`, `/explain`, the `headroom_node_*{kind="headroom"}` metrics and the dashboards
/// show it, so users see the number the scheduler decides on.
///
/// Where the node's usage is fresh: capacity minus its real usage (the larger of the
/// current and windowed measurement) and the pods placed since its newest sample. Where it
/// is stale or missing, requests stand in (see [`Basis`]).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Headroom {
    /// What the numbers are judged by.
    pub basis: Basis,
    /// CPU capacity, cores.
    pub cpu_total: f64,
    /// CPU counted as used, cores.
    pub cpu_used: f64,
    /// Memory capacity, bytes.
    pub memory_total: f64,
    /// Memory counted as used, bytes.
    pub memory_used: f64,
    /// Pods counted by compensation (placed after the newest sample, or still warming up).
    pub recent_pods: usize,
    /// Free disk, bytes, when known (metrics or node annotations, after recent placements).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub disk_free_bytes: Option<f64>,
}

impl Headroom {
    /// The headroom of `node` in the usage context `ctx`.
    pub fn of(node: &NodeInfo, ctx: &UsageContext, policy: &UsagePolicy) -> Headroom {
        Headroom::from_real(&NodeReal::of(node, ctx, policy), node)
    }

    /// The headroom given the node's already computed real state.
    pub fn from_real(real: &NodeReal, node: &NodeInfo) -> Headroom {
        Headroom::from_requested(real, (node.requested.milli_cpu, node.requested.memory))
    }

    /// The headroom given the node's real state and its requested CPU (millicores) and
    /// memory (bytes), as the node table holds them.
    #[inline]
    pub fn from_requested(real: &NodeReal, requested: (i64, i64)) -> Headroom {
        // Only where the usage is not fresh: a division per node the fresh ones (nearly
        // all, every cycle) do not need.
        let requests = || (requested.0 as f64 / 1000.0, requested.1 as f64);
        let (basis, cpu_used, memory_used) = match real.freshness {
            Freshness::Fresh { .. } => (Basis::Measured, real.cpu_used, real.memory_used),
            Freshness::Stale { .. } => {
                let (cpu, memory) = requests();
                (
                    Basis::StaleFloor,
                    cpu.max(real.cpu_used),
                    memory.max(real.memory_used),
                )
            }
            Freshness::Missing => {
                let (cpu, memory) = requests();
                (Basis::Requests, cpu, memory)
            }
        };
        Headroom {
            basis,
            cpu_total: real.cpu_total,
            cpu_used,
            memory_total: real.memory_total,
            memory_used,
            recent_pods: real.recent,
            disk_free_bytes: real.disk.map(|d| d.free),
        }
    }

    /// Free CPU, cores (negative when the node is over-committed in reality).
    pub fn cpu_free(&self) -> f64 {
        self.cpu_total - self.cpu_used
    }

    /// Free memory, bytes (negative when over-committed).
    pub fn memory_free(&self) -> f64 {
        self.memory_total - self.memory_used
    }
}

/// What would really be free on a node after placing the pod: the numbers RealHeadroom
/// scores and History's headroom band compares — the node's [`Headroom`] minus the pod's
/// predicted usage where the node's usage is fresh, minus its requests where requests
/// stand in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FreeAfter {
    /// Whether the node's usage is fresh (else requests stood in).
    pub fresh: bool,
    /// CPU capacity, cores.
    pub cpu_total: f64,
    /// CPU in use before the pod, cores.
    pub cpu_used: f64,
    /// The pod's CPU, cores.
    pub cpu_pod: f64,
    /// Memory capacity, bytes.
    pub memory_total: f64,
    /// Memory in use before the pod, bytes.
    pub memory_used: f64,
    /// The pod's memory, bytes.
    pub memory_pod: f64,
    /// Under the risk-based memory fit (`usage.memoryRiskPercent`): what the node's demand
    /// at the risk target (mean + z·sd of its pods' memory, this one's included) adds to
    /// `memory_used + memory_pod`, bytes — negative where the point predictions are
    /// already above it. 0 otherwise. Free memory is judged after it, so warm caches and
    /// free room are scored against the same risk the fit keeps.
    pub memory_margin: f64,
}

impl FreeAfter {
    /// The numbers for `pod` on `node` in the cycle `u`; `risk_z`: the risk target's
    /// normal quantile ([`UsagePolicy::memory_risk_z`], computed once by the caller).
    pub fn of(
        u: &CycleUsage,
        pod: &PodInfo,
        node: &NodeInfo,
        policy: &UsagePolicy,
        risk_z: Option<f64>,
    ) -> FreeAfter {
        let real = u.node_real(node, policy);
        let requested = (node.requested.milli_cpu, node.requested.memory);
        FreeAfter::from_real(u, pod, &real, requested, risk_z)
    }

    /// [`FreeAfter::of`] for node `idx` of the cycle's snapshot, from its node table.
    // Hot: once per node per cycle in History's PreScore and RealHeadroom's Score. Left to
    // `#[inline]`, it stayed out of line for both after the crate split; forced (with
    // `CycleUsage::node_real_at`), `cycle usage 5000 200 1` runs 5.21 M → 4.99 M
    // instructions a decision under callgrind (benches/README).
    #[inline(always)]
    pub fn at(
        u: &CycleUsage,
        pod: &PodInfo,
        table: &NodeTable,
        idx: NodeIdx,
        policy: &UsagePolicy,
        risk_z: Option<f64>,
    ) -> FreeAfter {
        // A fresh node without a risk target (nearly every node of nearly every cycle)
        // needs only its [`RealUse`]: not its disk, its requests (read only where usage is
        // not fresh) nor its recent placements' spread; the same numbers as below.
        if risk_z.is_none()
            && u.is_fresh(idx, policy)
            && let Some(r) = RealUse::at(u, table, idx)
        {
            return FreeAfter {
                fresh: true,
                cpu_total: r.cpu_total,
                cpu_used: r.cpu_used,
                cpu_pod: u.pod.prediction.cpu_cores,
                memory_total: r.memory_total,
                memory_used: r.memory_used,
                memory_pod: u.pod.prediction.memory_bytes,
                memory_margin: 0.0,
            };
        }
        let real = u.node_real_at(table, idx, policy);
        let r = &table.requested[idx as usize];
        FreeAfter::from_real(u, pod, &real, (r[res::CPU], r[res::MEMORY]), risk_z)
    }

    /// The numbers from the node's real state and its requested CPU (millicores) and
    /// memory (bytes): its [`Headroom`] plus the pod.
    #[inline]
    fn from_real(
        u: &CycleUsage,
        pod: &PodInfo,
        real: &NodeReal,
        requested: (i64, i64),
        risk_z: Option<f64>,
    ) -> FreeAfter {
        let h = Headroom::from_requested(real, requested);
        let fresh = h.basis == Basis::Measured;
        let (cpu_pod, memory_pod) = if fresh {
            (u.pod.prediction.cpu_cores, u.pod.prediction.memory_bytes)
        } else {
            (
                pod.requests.non_zero_milli_cpu as f64 / 1000.0,
                pod.requests.non_zero_memory as f64,
            )
        };
        let memory_margin = match risk_z {
            Some(z) if fresh => {
                let demand = real.memory_demand(u.pod.prediction.memory_dist);
                demand.mean + z * demand.sd() - (h.memory_used + memory_pod)
            }
            _ => 0.0,
        };
        FreeAfter {
            fresh,
            cpu_total: h.cpu_total,
            cpu_used: h.cpu_used,
            cpu_pod,
            memory_total: h.memory_total,
            memory_used: h.memory_used,
            memory_pod,
            memory_margin,
        }
    }

    /// Free CPU after the pod, a fraction of capacity in 0..=1.
    pub fn cpu(&self) -> f64 {
        fraction(self.cpu_total, self.cpu_used + self.cpu_pod)
    }

    /// Free memory after the pod (at the risk target under the risk-based fit), a fraction
    /// of capacity in 0..=1.
    pub fn memory(&self) -> f64 {
        fraction(
            self.memory_total,
            self.memory_used + self.memory_pod + self.memory_margin,
        )
    }
}

/// What the cycle's scorers read of a node's [`FreeAfter`]: the free fractions after the
/// pod, and whether they are measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FreeFractions {
    /// [`FreeAfter::fresh`].
    pub fresh: bool,
    /// [`FreeAfter::cpu`].
    pub cpu: f64,
    /// [`FreeAfter::memory`].
    pub memory: f64,
}

impl FreeFractions {
    /// The fractions of `f`.
    #[inline]
    pub fn of(f: &FreeAfter) -> FreeFractions {
        FreeFractions {
            fresh: f.fresh,
            cpu: f.cpu(),
            memory: f.memory(),
        }
    }
}

/// The cycle's [`FreeFractions`] for each feasible node, computed once at PreScore by the
/// first plugin that asks ([`free_after_column`]) and read by the others: History's band,
/// RealHeadroom's keep-whole choice and its Score judge the same numbers, which each of
/// them used to compute for every feasible node (a usage decision at 5,000 nodes took 377
/// µs then, 304 µs with the column: benches/README). Only the fractions are kept (24 bytes
/// a node, not `FreeAfter`'s 64): the passes over every node are bound by memory, not
/// arithmetic.
#[derive(Debug, Clone, Default)]
pub struct FreeColumn {
    /// Position in `free` by node index (`u32::MAX`: not computed).
    at: Vec<u32>,
    /// The numbers, in the order of the feasible list they were computed for.
    free: Vec<FreeFractions>,
}

impl FreeColumn {
    /// The numbers for node `idx`, when it was feasible.
    #[inline]
    pub fn get(&self, idx: NodeIdx) -> Option<&FreeFractions> {
        let &pos = self.at.get(idx as usize)?;
        self.free.get(pos as usize)
    }

    /// Whether every node of `feasible` has its numbers here.
    fn covers(&self, feasible: &[NodeIdx]) -> bool {
        feasible.iter().all(|&i| self.get(i).is_some())
    }
}

struct ColumnSlot(Arc<FreeColumn>);

/// The cycle's [`FreeColumn`] over `feasible`: the one already computed when it covers
/// them (a second pass of the cycle under the usage fallback may have more feasible nodes:
/// then it is computed again), else computed now and kept in the state. The numbers depend
/// only on the pod, the snapshot and the cycle's usage, all fixed for the cycle.
pub fn free_after_column(
    state: &mut CycleState,
    u: &CycleUsage,
    pod: &PodInfo,
    table: &NodeTable,
    feasible: &[NodeIdx],
    policy: &UsagePolicy,
    risk_z: Option<f64>,
) -> Arc<FreeColumn> {
    if let Some(ColumnSlot(c)) = state.read::<ColumnSlot>()
        && c.covers(feasible)
    {
        return c.clone();
    }
    let mut at = vec![u32::MAX; table.len()];
    let mut free = Vec::with_capacity(feasible.len());
    for (pos, &i) in feasible.iter().enumerate() {
        at[i as usize] = pos as u32;
        free.push(FreeFractions::of(&FreeAfter::at(
            u, pod, table, i, policy, risk_z,
        )));
    }
    let c = Arc::new(FreeColumn { at, free });
    state.write(ColumnSlot(c.clone()));
    c
}

/// The cycle's [`FreeColumn`], when a PreScore computed it.
pub fn free_column(state: &CycleState) -> Option<&FreeColumn> {
    state.read::<ColumnSlot>().map(|c| &*c.0)
}

fn fraction(total: f64, used: f64) -> f64 {
    if total <= 0.0 {
        0.0
    } else {
        ((total - used) / total).clamp(0.0, 1.0)
    }
}

/// The reason real filters give for a node whose usage is stale or missing under
/// `onStale: reject`.
pub const STALE_REASON: &str = "node(s) had stale usage metrics";

/// What a real filter says about a node it cannot judge (`what` names the missing data,
/// built only when explaining): under `fallback` the node passes (requests decide, as
/// kube-scheduler would); under `reject` it is rejected. Either way the detail says why
/// when explaining.
pub fn degraded_status(
    policy: &UsagePolicy,
    what: impl FnOnce() -> String,
    explain: bool,
) -> Status {
    let s = match policy.on_stale {
        StalePolicy::Fallback => Status::success(),
        StalePolicy::Reject => Status::unschedulable(STALE_REASON),
    };
    if explain {
        let verdict = match policy.on_stale {
            StalePolicy::Fallback => "passed on requests",
            StalePolicy::Reject => "rejected (onStale: reject)",
        };
        s.with_detail(format!("{}: {verdict}", what()))
    } else {
        s
    }
}

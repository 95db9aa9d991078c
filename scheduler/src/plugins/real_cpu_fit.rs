//! RealCpuFit (off by default): real CPU utilisation after placing the pod stays at or
//! below the class's `cpuThresholdPercent` (default 90 %).
//!
//! `(real_used + recently_assigned + pod_predicted) / capacity ≤ threshold`. Off by
//! default because CPU is compressible: an over-busy node slows pods down but kills none,
//! and RealHeadroom already steers pods away from it. Turn it on where latency matters.

use crate::framework::{Registered, Status};
use crate::snapshot::table::NodeTable;
use crate::snapshot::{NodeIdx, NodeInfo};
use crate::usage::node::{RealUse, degraded_status};
use crate::usage::policy::Class;
use crate::usage::{CycleUsage, NodeReal};

use super::{PluginDeps, real_fit};

/// Plugin name.
pub const NAME: &str = "RealCpuFit";
/// The reason counted in FailedScheduling messages.
pub const REASON: &str = "node(s) had too high real CPU utilisation";

/// The RealCpuFit plugin; the threshold comes from the pod's class.
#[derive(Debug)]
pub struct RealCpuFit {
    deps: real_fit::FitDeps,
}

impl RealCpuFit {
    /// Creates the plugin.
    pub fn new(deps: &PluginDeps) -> Self {
        RealCpuFit {
            deps: real_fit::FitDeps::of(deps),
        }
    }

    /// Registers its extension points (PreFilter, Filter).
    pub fn register(self) -> Registered {
        real_fit::register(self)
    }
}

impl real_fit::RealFit for RealCpuFit {
    const NAME: &'static str = NAME;
    const RELAXED_BY_FALLBACK: bool = true;
    const BATCH_FROM_TABLE: bool = true;

    fn fit_deps(&self) -> &real_fit::FitDeps {
        &self.deps
    }

    fn enabled(class: &Class) -> bool {
        class.real_cpu_fit
    }

    /// The verdict from the node's CPU alone.
    #[inline]
    fn surely_passes(&self, u: &CycleUsage, table: &NodeTable, idx: NodeIdx) -> bool {
        RealUse::at(u, table, idx).is_some_and(|r| !over(u, r.cpu_total, r.cpu_used))
    }

    /// The verdict on a node's real state.
    #[inline]
    fn check(&self, u: &CycleUsage, real: &NodeReal, _node: &NodeInfo, explain: bool) -> Status {
        if !real.freshness.is_fresh() {
            return degraded_status(
                &self.deps.policy,
                || format!("CPU usage {}", real.freshness.describe()),
                explain,
            );
        }
        if over(u, real.cpu_total, real.cpu_used) {
            let predicted = u.pod.prediction.cpu_cores;
            let after = real.cpu_used + predicted;
            let s = Status::unschedulable(REASON);
            if explain {
                return s.with_detail(format!(
                    "real CPU {:.2} (incl. {} recent pod(s) {:.2}) + predicted {:.2} = {:.2} > {:.0} % of {:.2} cores (class {})",
                    real.cpu_used,
                    real.recent,
                    real.recent_cpu,
                    predicted,
                    after,
                    u.pod.class.cpu_threshold * 100.0,
                    real.cpu_total,
                    u.pod.class.name,
                ));
            }
            return s;
        }
        Status::success()
    }
}

/// The verdict: whether the pod's prediction takes a node of `total` cores with `used` in
/// use (real, with the recent placements) past the class's threshold. One function for
/// [`RealFit::check`](real_fit::RealFit::check) and the quick pass, so the two cannot
/// disagree.
#[inline(always)]
fn over(u: &CycleUsage, total: f64, used: f64) -> bool {
    used + u.pod.prediction.cpu_cores > total * u.pod.class.cpu_threshold
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::testutil::*;
    use crate::snapshot::Snapshot;
    use serde_json::json;

    #[test]
    fn table() {
        // 4-core nodes; 90 % = 3.6 cores.
        let snap = with_usage(
            Snapshot::build(
                [
                    node("idle", json!({})),
                    node("edge", json!({})),
                    node("hot", json!({})),
                    node("old", json!({})),
                ],
                [],
            ),
            vec![
                usage("idle", 0.5, 0.0, 5, None),
                usage("edge", 2.5, 0.0, 5, None),
                usage("hot", 2.7, 0.0, 5, None),
                usage("old", 3.9, 0.0, 3600, None),
            ],
            vec![],
        );
        let p = info(pod(
            "p",
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}),
        ));
        let reg = RealCpuFit::new(&PluginDeps::default()).register();
        let got = filter_all(&reg, &snap, &p);
        let codes: Vec<Code> = got.iter().map(|(_, s)| s.code).collect();
        assert_eq!(
            codes,
            [
                Code::Success,
                Code::Success,
                Code::Unschedulable,
                Code::Success
            ]
        );
        assert!(
            got[2]
                .1
                .detail
                .as_deref()
                .unwrap()
                .contains("= 3.70 > 90 % of 4.00 cores")
        );
    }
}

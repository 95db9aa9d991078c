//! RealDiskFit: disk for databases, seed 003 exactly.
//!
//! `hold = max(total × diskHoldPercent, diskHoldMin)` (default `max(10 %, 250Gi)`); a node
//! is rejected when `requested_disk_on_node + pod_disk > total − hold` (what is promised
//! would eat into the hold) or `free − pod_disk < hold` (what is really free would). A pod's
//! disk is its `headroom.io/disk-request` annotation, else its ephemeral-storage request;
//! the node's total and free come from metrics while they are fresh, else from the node
//! annotations `headroom.io/disk-total` / `headroom.io/disk-free`; with neither the node
//! follows `usage.onStale`. Only pods whose class enables it are checked (default: pods
//! with `headroom.io/service` = mysql or pika).

use crate::framework::{Registered, Status};
use crate::quantity::format_bytes;
use crate::snapshot::NodeInfo;
use crate::usage::node::degraded_status;
use crate::usage::policy::Class;
use crate::usage::predict::disk_of;
use crate::usage::{CycleUsage, DiskSource, NodeReal};

use super::{PluginDeps, real_fit};

/// Plugin name.
pub const NAME: &str = "RealDiskFit";
/// Reason when requests would eat into the hold.
pub const REASON_REQUESTED: &str = "node(s) didn't have enough disk after the hold";
/// Reason when real free disk would fall below the hold.
pub const REASON_FREE: &str = "node(s) didn't have enough real free disk";

/// The RealDiskFit plugin; hold settings come from the pod's class.
#[derive(Debug)]
pub struct RealDiskFit {
    deps: real_fit::FitDeps,
}

impl RealDiskFit {
    /// Creates the plugin.
    pub fn new(deps: &PluginDeps) -> Self {
        RealDiskFit {
            deps: real_fit::FitDeps::of(deps),
        }
    }

    /// Registers its extension points (PreFilter, Filter).
    pub fn register(self) -> Registered {
        real_fit::register(self)
    }
}

impl real_fit::RealFit for RealDiskFit {
    const NAME: &'static str = NAME;
    // The hold is a promise to other pods: never relaxed.
    const RELAXED_BY_FALLBACK: bool = false;
    const BATCH_FROM_TABLE: bool = false;

    fn fit_deps(&self) -> &real_fit::FitDeps {
        &self.deps
    }

    fn enabled(class: &Class) -> bool {
        class.real_disk_fit
    }

    /// The verdict on a node's disk: from metrics while fresh, else from its annotations
    /// (degraded with neither), against the requests on it and the hold.
    fn check(&self, u: &CycleUsage, real: &NodeReal, node: &NodeInfo, explain: bool) -> Status {
        let Some(disk) = real.disk else {
            return degraded_status(
                &self.deps.policy,
                || "no disk metrics and no headroom.io/disk-total/disk-free annotations".into(),
                explain,
            );
        };
        let class = &u.pod.class;
        let pod_disk = u.pod.disk_bytes as f64;
        let hold = (disk.total * class.disk_hold).max(class.disk_hold_min_bytes as f64);
        let requested: f64 = node.pods.iter().map(|p| disk_of(p) as f64).sum();
        let source = match disk.source {
            DiskSource::Metrics => "metrics",
            DiskSource::Annotations => "node annotations",
        };
        let b = |v: f64| format_bytes(v as i64);
        if requested + pod_disk > disk.total - hold {
            let s = Status::unschedulable(REASON_REQUESTED);
            if explain {
                return s.with_detail(format!(
                    "requested disk {} + pod {} > total {} − hold {} (max({:.0} %, {}), class {}; {source})",
                    b(requested),
                    b(pod_disk),
                    b(disk.total),
                    b(hold),
                    class.disk_hold * 100.0,
                    b(class.disk_hold_min_bytes as f64),
                    class.name,
                ));
            }
            return s;
        }
        if disk.free - pod_disk < hold {
            let s = Status::unschedulable(REASON_FREE);
            if explain {
                return s.with_detail(format!(
                    "free disk {} − pod {} < hold {} (max({:.0} %, {}), class {}; {source})",
                    b(disk.free),
                    b(pod_disk),
                    b(hold),
                    class.disk_hold * 100.0,
                    b(class.disk_hold_min_bytes as f64),
                    class.name,
                ));
            }
            return s;
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::testutil::*;
    use crate::snapshot::{PodInfo, Snapshot};
    use crate::usage::UsagePolicy;
    use serde_json::json;
    use std::sync::Arc;

    fn plugin(policy: UsagePolicy) -> Registered {
        let deps = PluginDeps {
            policy: Arc::new(policy),
            ..PluginDeps::default()
        };
        RealDiskFit::new(&deps).register()
    }

    fn db(disk: &str) -> PodInfo {
        info(pod(
            "db",
            json!({"metadata": {"labels": {"headroom.io/service": "mysql"},
                   "annotations": {"headroom.io/disk-request": disk}}}),
        ))
    }

    fn annotated(name: &str, total: &str, free: &str) -> k8s_openapi::api::core::v1::Node {
        node(
            name,
            json!({"metadata": {"annotations": {"headroom.io/disk-total": total, "headroom.io/disk-free": free}}}),
        )
    }

    const TI: f64 = 1024.0 * GI;

    /// Seed 003 at its boundaries. Hold on a 1 TiB disk: max(102.4 GiB, 250 GiB) = 250 GiB;
    /// on a 4 TiB disk: max(409.6 GiB, 250 GiB) = 409.6 GiB.
    #[test]
    fn seed_003_boundaries() {
        // requested side: 1 TiB total, 250 GiB hold → at most 774 GiB promised.
        let on_node = |name: &str, disk: &str| {
            let mut p = pod(
                name,
                json!({"metadata": {"annotations": {"headroom.io/disk-request": disk}}}),
            );
            p.spec.as_mut().unwrap().node_name = Some("a".into());
            p
        };
        type Case = (
            &'static str,
            Vec<k8s_openapi::api::core::v1::Pod>,
            &'static str,
            &'static str,
            &'static str,
            Code,
        );
        let cases: Vec<Case> = vec![
            // (what, pods on node "a", total, free, pod disk, expected)
            (
                "empty node, pod fills to the hold",
                vec![],
                "1Ti",
                "1Ti",
                "774Gi",
                Code::Success,
            ),
            (
                "one byte past the hold",
                vec![],
                "1Ti",
                "1Ti",
                "831076171777",
                Code::Unschedulable,
            ),
            (
                "requests eat the hold",
                vec![on_node("x", "500Gi")],
                "1Ti",
                "1Ti",
                "275Gi",
                Code::Unschedulable,
            ),
            (
                "requests exactly at the hold",
                vec![on_node("x", "500Gi")],
                "1Ti",
                "1Ti",
                "274Gi",
                Code::Success,
            ),
            (
                "free exactly at the hold",
                vec![],
                "1Ti",
                "350Gi",
                "100Gi",
                Code::Success,
            ),
            (
                "free one GiB below the hold",
                vec![],
                "1Ti",
                "350Gi",
                "101Gi",
                Code::Unschedulable,
            ),
        ];
        for (what, pods, total, free, pod_disk, want) in cases {
            let snap = Snapshot::build([annotated("a", total, free)], pods);
            let got = filter_all(&plugin(UsagePolicy::default()), &snap, &db(pod_disk));
            assert_eq!(got[0].1.code, want, "{what}: {:?}", got[0].1);
        }
        // 4 TiB: hold 409.6 GiB → 3686.4 GiB may be promised: 3686 GiB fits.
        let snap = Snapshot::build([annotated("a", "4Ti", "4Ti")], []);
        let got = filter_all(&plugin(UsagePolicy::default()), &snap, &db("3686Gi"));
        assert_eq!(got[0].1.code, Code::Success);
        let got = filter_all(&plugin(UsagePolicy::default()), &snap, &db("3687Gi"));
        assert_eq!(got[0].1.code, Code::Unschedulable);
        assert!(
            got[0].1.detail.as_deref().unwrap().contains("hold 409.6Gi"),
            "{:?}",
            got[0].1
        );
    }

    #[test]
    fn sources_classes_and_stale() {
        // Fresh metrics win over annotations; stale metrics fall back to them.
        let metrics = |age: i64| {
            with_usage(
                Snapshot::build([annotated("a", "1Ti", "1Ti")], []),
                vec![usage("a", 0.0, 0.0, age, Some((TI, 300.0 * GI)))],
                vec![],
            )
        };
        let got = filter_all(&plugin(UsagePolicy::default()), &metrics(10), &db("100Gi"));
        assert_eq!(got[0].1.reasons[0], REASON_FREE);
        assert!(got[0].1.detail.as_deref().unwrap().ends_with("metrics)"));
        let got = filter_all(&plugin(UsagePolicy::default()), &metrics(600), &db("100Gi"));
        assert_eq!(got[0].1.code, Code::Success);

        // No data at all: fallback passes, reject rejects.
        let bare = Snapshot::build([node("a", json!({}))], []);
        assert_eq!(
            filter_all(&plugin(UsagePolicy::default()), &bare, &db("1Gi"))[0]
                .1
                .code,
            Code::Success
        );
        let reject: UsagePolicy = serde_norway::from_str("onStale: reject").unwrap();
        assert_eq!(
            filter_all(&plugin(reject), &bare, &db("1Gi"))[0].1.code,
            Code::Unschedulable
        );

        // Not a database: skipped. A malformed disk annotation on the node is no data.
        let web = info(pod("web", json!({})));
        assert_eq!(
            filter_all(&plugin(UsagePolicy::default()), &bare, &web)[0]
                .1
                .code,
            Code::Skip
        );
        let garbage = Snapshot::build([annotated("a", "lots", "1Ti")], []);
        assert_eq!(
            filter_all(&plugin(UsagePolicy::default()), &garbage, &db("1Gi"))[0]
                .1
                .code,
            Code::Success
        );
    }
}

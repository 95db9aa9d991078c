//! NodeUnschedulable: cordoned nodes (`spec.unschedulable`) take no pods, unless the pod
//! tolerates the `node.kubernetes.io/unschedulable:NoSchedule` taint.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Taint;

use super::taint_toleration::tolerations_tolerate;
use crate::framework::{CycleState, FilterPlugin, NodeBatch, Plugin, Registered, Status};
use crate::snapshot::table::flag;
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

/// Plugin name.
pub const NAME: &str = "NodeUnschedulable";
/// Upstream's reason.
pub const ERR_REASON: &str = "node(s) were unschedulable";
/// The taint a cordoned node implicitly carries.
pub const TAINT_NODE_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// The NodeUnschedulable plugin (no args).
#[derive(Debug, Default)]
pub struct NodeUnschedulable;

impl NodeUnschedulable {
    /// Creates the plugin.
    pub fn new() -> Self {
        NodeUnschedulable
    }

    /// Registers its extension points (Filter).
    pub fn register(self) -> Registered {
        Registered {
            filter: Some(Arc::new(self)),
            ..Registered::new(NAME)
        }
    }
}

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Only the node's cordon decides: a node joining or changing (uncordon).
    fn events_to_register(&self) -> crate::framework::ClusterEvents {
        crate::framework::ClusterEvents::NODE_ONLY
    }
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !node.unschedulable {
            return Status::success();
        }
        let taint = Taint {
            key: TAINT_NODE_UNSCHEDULABLE.to_string(),
            effect: "NoSchedule".to_string(),
            ..Default::default()
        };
        if tolerations_tolerate(pod.tolerations(), &taint) {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON)
        }
    }

    fn filter_batch(
        &self,
        _state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        batch: &mut NodeBatch,
    ) {
        let tolerated = pod.tolerations().iter().any(|t| {
            super::taint_toleration::tolerates_parts(t, TAINT_NODE_UNSCHEDULABLE, "", "NoSchedule")
        });
        if tolerated {
            return;
        }
        let table = snapshot.table();
        batch.reject_if(&Status::unresolvable(ERR_REASON), |idx| {
            table.has(idx, flag::UNSCHEDULABLE)
        });
    }
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
        let snap = Snapshot::build(
            [
                node("open", json!({})),
                node("cordoned", json!({"spec": {"unschedulable": true}})),
            ],
            [],
        );
        let tolerating = json!({"spec": {"tolerations": [
            {"key": TAINT_NODE_UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"}]}});
        let wrong_effect = json!({"spec": {"tolerations": [
            {"key": TAINT_NODE_UNSCHEDULABLE, "operator": "Exists", "effect": "NoExecute"}]}});
        let cases = [
            (
                json!({}),
                [Code::Success, Code::UnschedulableAndUnresolvable],
            ),
            (tolerating, [Code::Success, Code::Success]),
            (
                wrong_effect,
                [Code::Success, Code::UnschedulableAndUnresolvable],
            ),
            (
                json!({"spec": {"tolerations": [{"operator": "Exists"}]}}),
                [Code::Success, Code::Success],
            ),
        ];
        for (extra, want) in cases {
            let got = filter_all(
                &NodeUnschedulable::new().register(),
                &snap,
                &info(pod("p", extra.clone())),
            );
            let codes: Vec<Code> = got.iter().map(|(_, s)| s.code).collect();
            assert_eq!(codes, want, "{extra}");
            if want[1] != Code::Success {
                assert_eq!(got[1].1.message(), ERR_REASON);
            }
        }
    }
}

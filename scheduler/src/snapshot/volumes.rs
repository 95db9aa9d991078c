//! Volumes as the scheduling cycle sees them: PersistentVolumes, PersistentVolumeClaims,
//! StorageClasses and CSINodes, held in the [`Snapshot`](super::Snapshot) next to the nodes
//! and pods, and the volume helpers of upstream's `component-helpers/storage/volume`
//! (claim and volume classes, PV node affinity, `FindMatchingVolume`).
//!
//! PersistentVolumes are kept as upstream's volume binder keeps them in its assume cache:
//! the object the cluster feed last reported, and an *assumed* version — the PV with the
//! `claimRef` the scheduler chose in Reserve, before PreBind wrote it — that later cycles
//! read instead, so a second pod does not take a PV already promised to the first. A newer
//! version from the feed replaces the assumed one; a failed bind restores the feed's.
//!
//! The snapshot also counts, per claim (`namespace/name`), the assigned pods that use it
//! (upstream's `StorageInfos().IsPVCUsedByPods`, read by VolumeRestrictions for
//! ReadWriteOncePod claims).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod, Volume,
};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

use crate::quantity::Quantity;
use crate::selector::{Labels, NodeSelector};

/// The claim side of a completed bind (`pv.kubernetes.io/bind-completed`).
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on a PV the binder bound (`pv.kubernetes.io/bound-by-controller`).
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The node chosen for a claim to be provisioned (`volume.kubernetes.io/selected-node`).
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The beta storage class annotation, which wins over `storageClassName`.
pub const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";
/// The provisioner of classes that cannot provision (local volumes).
pub const NOT_SUPPORTED_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// A volume object as a cluster feed reports it.
// Transient: each object is moved into an `Arc` in the store as soon as it arrives, so the
// size of the PV variant is not worth a box per object.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum VolumeObject {
    /// A PersistentVolume.
    Pv(PersistentVolume),
    /// A PersistentVolumeClaim.
    Pvc(PersistentVolumeClaim),
    /// A StorageClass.
    Class(StorageClass),
    /// A CSINode.
    CsiNode(CSINode),
}

/// The kinds of [`VolumeObject`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VolumeKind {
    /// PersistentVolumes.
    Pv,
    /// PersistentVolumeClaims.
    Pvc,
    /// StorageClasses.
    Class,
    /// CSINodes.
    CsiNode,
}

impl VolumeObject {
    /// Its kind.
    pub fn kind(&self) -> VolumeKind {
        match self {
            VolumeObject::Pv(_) => VolumeKind::Pv,
            VolumeObject::Pvc(_) => VolumeKind::Pvc,
            VolumeObject::Class(_) => VolumeKind::Class,
            VolumeObject::CsiNode(_) => VolumeKind::CsiNode,
        }
    }

    /// Its key: `namespace/name` for claims, the name otherwise.
    pub fn key(&self) -> String {
        let meta = match self {
            VolumeObject::Pv(o) => &o.metadata,
            VolumeObject::Pvc(o) => &o.metadata,
            VolumeObject::Class(o) => &o.metadata,
            VolumeObject::CsiNode(o) => &o.metadata,
        };
        let name = meta.name.clone().unwrap_or_default();
        match self {
            VolumeObject::Pvc(_) => {
                claim_key(meta.namespace.as_deref().unwrap_or("default"), &name)
            }
            _ => name,
        }
    }
}

fn typed<T: serde::de::DeserializeOwned>(
    v: serde_json::Value,
    object: &str,
) -> Result<T, crate::field::Error> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        crate::field::Error::from_serde(e.path(), &e.inner().to_string()).in_object(object)
    })
}

/// Reads a PersistentVolume, PersistentVolumeClaim, StorageClass or CSINode from a file's
/// object (`kind` names which) as the API server would accept it: a valid name (claims get
/// the `default` namespace when they name none, as kubectl gives them). `object` names the
/// object in errors (`items[3]: PersistentVolume "pv-1"`).
pub fn read_object(
    kind: &str,
    v: serde_json::Value,
    object: &str,
) -> Result<VolumeObject, crate::field::Error> {
    use crate::field::{Error, Path};
    let o = match kind {
        "PersistentVolume" => VolumeObject::Pv(typed(v, object)?),
        "PersistentVolumeClaim" => {
            let mut c: PersistentVolumeClaim = typed(v, object)?;
            c.metadata.namespace.get_or_insert_with(|| "default".into());
            VolumeObject::Pvc(c)
        }
        "StorageClass" => VolumeObject::Class(typed(v, object)?),
        _ => VolumeObject::CsiNode(typed(v, object)?),
    };
    let meta = match &o {
        VolumeObject::Pv(x) => &x.metadata,
        VolumeObject::Pvc(x) => &x.metadata,
        VolumeObject::Class(x) => &x.metadata,
        VolumeObject::CsiNode(x) => &x.metadata,
    };
    let name = Path::new("metadata").child("name");
    match meta.name.as_deref() {
        None | Some("") => Err(Error::required(name, "must not be empty").in_object(object)),
        Some(n) => match crate::field::dns1123_subdomain(&name, n) {
            Some(e) => Err(e.in_object(object)),
            None => Ok(o),
        },
    }
}

/// `namespace/name`, the key of a claim.
pub fn claim_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// One static binding: a claim and the PV chosen for it.
#[derive(Debug, Clone, PartialEq)]
pub struct StaticBinding {
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub claim: String,
    /// The PV.
    pub pv: String,
    /// The PV with the claim's `claimRef` (what Reserve assumes and PreBind writes).
    pub bound: Arc<PersistentVolume>,
}

/// What the volume binder decided for a pod on its node (upstream's `PodVolumes`): the PVs
/// to bind to its unbound WaitForFirstConsumer claims, and the claims to provision there.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodVolumes {
    /// Claims matched to existing PVs.
    pub static_bindings: Vec<StaticBinding>,
    /// Claims (`namespace/name`) to be provisioned on the node.
    pub provisions: Vec<String>,
}

impl PodVolumes {
    /// Nothing to bind or provision.
    pub fn is_empty(&self) -> bool {
        self.static_bindings.is_empty() && self.provisions.is_empty()
    }
}

#[derive(Debug, Clone)]
struct PvEntry {
    /// What the feed last reported.
    api: Arc<PersistentVolume>,
    /// The scheduler's assumed version (claimRef set in Reserve), until the feed reports a
    /// newer one or the bind fails.
    assumed: Option<Arc<PersistentVolume>>,
}

/// The volume objects of a snapshot.
#[derive(Debug, Clone, Default)]
pub struct Volumes {
    /// By name, so that candidates are examined in a stable order.
    pvs: BTreeMap<String, PvEntry>,
    pvcs: HashMap<String, Arc<PersistentVolumeClaim>>,
    classes: HashMap<String, Arc<StorageClass>>,
    csi_nodes: HashMap<String, Arc<CSINode>>,
    /// Claim key → assigned pods that use it.
    pvc_refs: HashMap<String, u32>,
}

fn resource_version(pv: &PersistentVolume) -> Option<u64> {
    pv.metadata.resource_version.as_deref()?.parse().ok()
}

impl Volumes {
    /// Adds or replaces an object. Returns whether scheduling could see a change.
    pub fn apply(&mut self, obj: VolumeObject) -> bool {
        let key = obj.key();
        match obj {
            VolumeObject::Pv(pv) => {
                let pv = Arc::new(pv);
                match self.pvs.get_mut(&key) {
                    Some(e) => {
                        // The assume cache's rule: a version at least as new as the assumed
                        // one replaces it (an unreadable version always does).
                        let newer = match (resource_version(&pv), e.assumed.as_deref()) {
                            (_, None) => true,
                            (Some(new), Some(a)) => resource_version(a).is_none_or(|old| new > old),
                            (None, Some(_)) => true,
                        };
                        if newer {
                            e.assumed = None;
                        }
                        e.api = pv;
                    }
                    None => {
                        self.pvs.insert(
                            key,
                            PvEntry {
                                api: pv,
                                assumed: None,
                            },
                        );
                    }
                }
            }
            VolumeObject::Pvc(pvc) => {
                self.pvcs.insert(key, Arc::new(pvc));
            }
            VolumeObject::Class(c) => {
                self.classes.insert(key, Arc::new(c));
            }
            VolumeObject::CsiNode(c) => {
                self.csi_nodes.insert(key, Arc::new(c));
            }
        }
        true
    }

    /// Removes an object by kind and key (`namespace/name` for claims).
    pub fn delete(&mut self, kind: VolumeKind, key: &str) -> bool {
        match kind {
            VolumeKind::Pv => self.pvs.remove(key).is_some(),
            VolumeKind::Pvc => self.pvcs.remove(key).is_some(),
            VolumeKind::Class => self.classes.remove(key).is_some(),
            VolumeKind::CsiNode => self.csi_nodes.remove(key).is_some(),
        }
    }

    /// A complete list of one kind: objects absent from it are removed, the rest applied.
    pub fn replace(&mut self, kind: VolumeKind, objects: Vec<VolumeObject>) {
        let keys: std::collections::HashSet<String> = objects
            .iter()
            .filter(|o| o.kind() == kind)
            .map(VolumeObject::key)
            .collect();
        let stale: Vec<String> = match kind {
            VolumeKind::Pv => self
                .pvs
                .keys()
                .filter(|k| !keys.contains(*k))
                .cloned()
                .collect(),
            VolumeKind::Pvc => self
                .pvcs
                .keys()
                .filter(|k| !keys.contains(*k))
                .cloned()
                .collect(),
            VolumeKind::Class => self
                .classes
                .keys()
                .filter(|k| !keys.contains(*k))
                .cloned()
                .collect(),
            VolumeKind::CsiNode => self
                .csi_nodes
                .keys()
                .filter(|k| !keys.contains(*k))
                .cloned()
                .collect(),
        };
        for k in stale {
            self.delete(kind, &k);
        }
        for o in objects.into_iter().filter(|o| o.kind() == kind) {
            self.apply(o);
        }
    }

    /// True when no volume object is known (the common case of a cluster without volumes).
    pub fn is_empty(&self) -> bool {
        self.pvs.is_empty()
            && self.pvcs.is_empty()
            && self.classes.is_empty()
            && self.csi_nodes.is_empty()
    }

    /// A PV as the scheduler sees it: the assumed version, else the feed's.
    pub fn pv(&self, name: &str) -> Option<&Arc<PersistentVolume>> {
        self.pvs
            .get(name)
            .map(|e| e.assumed.as_ref().unwrap_or(&e.api))
    }

    /// A PV as the feed last reported it (upstream's `GetAPIObj`).
    pub fn pv_api(&self, name: &str) -> Option<&Arc<PersistentVolume>> {
        self.pvs.get(name).map(|e| &e.api)
    }

    /// Whether the scheduler holds an assumed version of the PV.
    pub fn is_assumed(&self, name: &str) -> bool {
        self.pvs.get(name).is_some_and(|e| e.assumed.is_some())
    }

    /// Every PV as the scheduler sees it, by name.
    pub fn pvs(&self) -> impl Iterator<Item = &Arc<PersistentVolume>> {
        self.pvs
            .values()
            .map(|e| e.assumed.as_ref().unwrap_or(&e.api))
    }

    /// The PVs of a storage class (by [`pv_class`]), by name.
    pub fn pvs_of_class<'a>(
        &'a self,
        class: &'a str,
    ) -> impl Iterator<Item = &'a Arc<PersistentVolume>> + 'a {
        self.pvs().filter(move |pv| pv_class(pv) == class)
    }

    /// A claim.
    pub fn pvc(&self, namespace: &str, name: &str) -> Option<&Arc<PersistentVolumeClaim>> {
        self.pvcs.get(&claim_key(namespace, name))
    }

    /// A storage class.
    pub fn class(&self, name: &str) -> Option<&Arc<StorageClass>> {
        self.classes.get(name)
    }

    /// A node's CSINode.
    pub fn csi_node(&self, name: &str) -> Option<&Arc<CSINode>> {
        self.csi_nodes.get(name)
    }

    /// Whether some assigned pod uses the claim `namespace/name`.
    pub fn is_pvc_used_by_pods(&self, key: &str) -> bool {
        self.pvc_refs.get(key).is_some_and(|n| *n > 0)
    }

    /// Counts (`add`) or uncounts an assigned pod's claims.
    pub(crate) fn count_pod(&mut self, pod: &Pod, add: bool) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        for v in pod_volumes(pod) {
            let Some(claim) = claim_name(pod, v) else {
                continue;
            };
            let key = claim_key(ns, &claim);
            if add {
                *self.pvc_refs.entry(key).or_insert(0) += 1;
            } else if let Some(n) = self.pvc_refs.get_mut(&key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.pvc_refs.remove(&key);
                }
            }
        }
    }

    /// Assumes the static bindings: each PV is read as [`StaticBinding::bound`] (its claim's
    /// `claimRef` set) until the feed reports a newer version or [`Volumes::restore`].
    /// Returns the PVs it assumed; an unknown PV is an error and nothing stays assumed.
    pub fn assume(&mut self, bindings: &[StaticBinding]) -> Result<Vec<String>, String> {
        let mut changed = Vec::new();
        for b in bindings {
            let Some(e) = self.pvs.get_mut(&b.pv) else {
                self.restore(&changed);
                return Err(format!("persistentvolume \"{}\" not found", b.pv));
            };
            e.assumed = Some(b.bound.clone());
            changed.push(b.pv.clone());
        }
        Ok(changed)
    }

    /// Drops the assumed versions of these PVs (the feed's version is read again).
    pub fn restore(&mut self, pvs: &[String]) {
        for name in pvs {
            if let Some(e) = self.pvs.get_mut(name) {
                e.assumed = None;
            }
        }
    }
}

/// The claim a pod volume names: `persistentVolumeClaim.claimName`, or for a generic
/// ephemeral volume `<pod>-<volume>` (upstream's `ephemeral.VolumeClaimName`).
pub fn claim_name(pod: &Pod, v: &Volume) -> Option<String> {
    if let Some(c) = &v.persistent_volume_claim {
        return Some(c.claim_name.clone());
    }
    v.ephemeral
        .as_ref()
        .map(|_| format!("{}-{}", pod.metadata.name.as_deref().unwrap_or(""), v.name))
}

/// The pod's volumes (`spec.volumes`; none when absent).
pub fn pod_volumes(pod: &Pod) -> &[k8s_openapi::api::core::v1::Volume] {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or(&[])
}

/// Whether the pod has any volume backed by a claim (the volume plugins skip pods without).
pub fn has_claims(pod: &Pod) -> bool {
    pod_volumes(pod)
        .iter()
        .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
}

/// A claim's class: the beta annotation, else `spec.storageClassName`, else "".
pub fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    if let Some(c) = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BETA_STORAGE_CLASS_ANNOTATION))
    {
        return c;
    }
    claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

/// A PV's class: the beta annotation, else `spec.storageClassName`, else "".
pub fn pv_class(pv: &PersistentVolume) -> &str {
    if let Some(c) = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BETA_STORAGE_CLASS_ANNOTATION))
    {
        return c;
    }
    pv.spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

/// The node chosen for the claim to be provisioned on (its [`ANN_SELECTED_NODE`]
/// annotation), if any.
pub fn selected_node(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_SELECTED_NODE))
        .map(String::as_str)
}

/// A claim is fully bound: `volumeName` set and the bind-completed annotation present.
pub fn is_claim_fully_bound(claim: &PersistentVolumeClaim) -> bool {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty())
        && claim
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ANN_BIND_COMPLETED))
}

/// The claim's `spec.volumeName`, "" when unset.
pub fn claim_volume_name(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

/// Whether the claim carries this access mode.
pub fn claim_has_access_mode(claim: &PersistentVolumeClaim, mode: &str) -> bool {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or(&[])
        .iter()
        .any(|m| m == mode)
}

/// Upstream's `CheckNodeAffinity`: the PV's required node affinity against node labels
/// (matched as upstream matches it: a node with these labels and no name).
pub fn pv_node_affinity_matches(pv: &PersistentVolume, node_labels: &Labels) -> bool {
    let Some(required) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return true;
    };
    NodeSelector::new(&required.node_selector_terms, "spec.nodeAffinity.required")
        .matches(node_labels, "")
}

fn storage_request(claim: &PersistentVolumeClaim) -> i128 {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| Quantity::parse(&q.0).ok())
        .map_or(0, |q| q.nano_value())
}

/// The claim's storage request, exactly (nano units), for ordering claims by size.
pub fn claim_size(claim: &PersistentVolumeClaim) -> i128 {
    storage_request(claim)
}

fn pv_capacity(pv: &PersistentVolume) -> i128 {
    pv.spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| Quantity::parse(&q.0).ok())
        .map_or(0, |q| q.nano_value())
}

/// Upstream's `IsVolumeBoundToClaim`.
pub fn is_volume_bound_to_claim(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    if r.name.as_deref() != claim.metadata.name.as_deref()
        || r.namespace.as_deref().unwrap_or("") != claim.metadata.namespace.as_deref().unwrap_or("")
    {
        return false;
    }
    match r.uid.as_deref() {
        Some(uid) if !uid.is_empty() => claim.metadata.uid.as_deref() == Some(uid),
        _ => true,
    }
}

/// Upstream's `GetBindVolumeToClaim`: the PV with the claim's reference and the
/// bound-by-controller annotation, and whether anything changed.
pub fn bind_volume_to_claim(
    pv: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> (PersistentVolume, bool) {
    let mut dirty = false;
    let set_bound_by_controller = !is_volume_bound_to_claim(pv, claim);
    let mut new = pv.clone();
    let current = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    let same = current.is_some_and(|r| {
        r.name.as_deref() == claim.metadata.name.as_deref()
            && r.namespace.as_deref() == claim.metadata.namespace.as_deref()
            && r.uid.as_deref() == claim.metadata.uid.as_deref()
    });
    if !same {
        new.spec.get_or_insert_with(Default::default).claim_ref = Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            name: claim.metadata.name.clone(),
            namespace: claim.metadata.namespace.clone(),
            uid: claim.metadata.uid.clone(),
            resource_version: claim.metadata.resource_version.clone(),
            field_path: None,
        });
        dirty = true;
    }
    let annotations = new
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    if set_bound_by_controller && !annotations.contains_key(ANN_BOUND_BY_CONTROLLER) {
        annotations.insert(ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
        dirty = true;
    }
    if new
        .metadata
        .annotations
        .as_ref()
        .is_some_and(BTreeMap::is_empty)
    {
        new.metadata.annotations = None;
    }
    (new, dirty)
}

fn volume_mode(mode: Option<&String>) -> &str {
    mode.map_or("Filesystem", String::as_str)
}

/// Upstream's `FindMatchingVolume` for a node (delayed binding, VolumeAttributesClass on):
/// the PV already bound to the claim if its node affinity matches the node (else none), or
/// the smallest `Available` PV of the claim's class that fits the request, volume mode,
/// attributes class, selector, node affinity and access modes, not in `excluded`. Ties
/// keep the first by name.
pub fn find_matching_volume<'a>(
    claim: &PersistentVolumeClaim,
    pvs: impl IntoIterator<Item = &'a Arc<PersistentVolume>>,
    node_labels: &Labels,
    excluded: &[&str],
) -> Option<&'a Arc<PersistentVolume>> {
    let spec = claim.spec.as_ref();
    let requested = storage_request(claim);
    let class = claim_class(claim);
    let selector = spec.and_then(|s| s.selector.as_ref()).map(|s| {
        crate::selector::Selector::from_label_selector(Some(s), "spec.selector")
            .unwrap_or_else(|_| crate::selector::Selector::nothing())
    });
    let claim_mode = volume_mode(spec.and_then(|s| s.volume_mode.as_ref()));
    let claim_vac = spec
        .and_then(|s| s.volume_attributes_class_name.as_deref())
        .unwrap_or("");
    let claim_modes = spec.and_then(|s| s.access_modes.as_deref()).unwrap_or(&[]);
    let mut smallest: Option<(&'a Arc<PersistentVolume>, i128)> = None;
    for pv in pvs {
        let name = pv.metadata.name.as_deref().unwrap_or("");
        if excluded.contains(&name) {
            continue;
        }
        let pspec = pv.spec.as_ref();
        let bound_here = is_volume_bound_to_claim(pv, claim);
        if pspec.and_then(|s| s.claim_ref.as_ref()).is_some() && !bound_here {
            continue;
        }
        let capacity = pv_capacity(pv);
        if capacity < requested {
            continue;
        }
        if volume_mode(pspec.and_then(|s| s.volume_mode.as_ref())) != claim_mode {
            continue;
        }
        if pspec
            .and_then(|s| s.volume_attributes_class_name.as_deref())
            .unwrap_or("")
            != claim_vac
        {
            continue;
        }
        if pv.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let affinity = pv_node_affinity_matches(pv, node_labels);
        if bound_here {
            return affinity.then_some(pv);
        }
        if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Available") {
            continue;
        }
        if let Some(sel) = &selector
            && !sel.matches(&pv.metadata.labels.clone().unwrap_or_default())
        {
            continue;
        }
        if pv_class(pv) != class || !affinity {
            continue;
        }
        let pv_modes = pspec.and_then(|s| s.access_modes.as_deref()).unwrap_or(&[]);
        if !claim_modes.iter().all(|m| pv_modes.contains(m)) {
            continue;
        }
        if smallest.is_none_or(|(_, q)| q > capacity) {
            smallest = Some((pv, capacity));
        }
    }
    smallest.map(|(pv, _)| pv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(name: &str, size: &str, extra: serde_json::Value) -> Arc<PersistentVolume> {
        let mut v = json!({
            "metadata": {"name": name, "resourceVersion": "10"},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": "local", "volumeMode": "Filesystem"},
            "status": {"phase": "Available"}
        });
        crate::plugins::testutil::merge(&mut v, extra);
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn pvc(name: &str, size: &str) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                     "resources": {"requests": {"storage": size}}}
        }))
        .unwrap()
    }

    #[test]
    fn smallest_fitting_available_volume_wins() {
        let labels: Labels = [("zone".to_string(), "a".to_string())].into();
        let affinity = |z: &str| {
            json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": [z]}]}]}}}})
        };
        let pvs = [
            pv("big", "10Gi", json!({})),
            pv("small", "1Gi", json!({})),
            pv("fits", "5Gi", json!({})),
            pv("fits-too", "5Gi", json!({})),
            pv("elsewhere", "2Gi", affinity("b")),
            pv("here", "3Gi", affinity("a")),
            pv("bound", "2Gi", json!({"status": {"phase": "Bound"}})),
            pv(
                "rwx",
                "2Gi",
                json!({"spec": {"accessModes": ["ReadWriteMany"]}}),
            ),
            pv("block", "2Gi", json!({"spec": {"volumeMode": "Block"}})),
            pv(
                "other-class",
                "2Gi",
                json!({"spec": {"storageClassName": "x"}}),
            ),
        ];
        let claim = pvc("c", "2Gi");
        let pick = |excluded: &[&str]| {
            find_matching_volume(&claim, &pvs, &labels, excluded)
                .and_then(|p| p.metadata.name.clone())
        };
        assert_eq!(pick(&[]).as_deref(), Some("here"));
        assert_eq!(
            pick(&["here"]).as_deref(),
            Some("fits"),
            "first of a tie by name"
        );
        assert_eq!(pick(&["here", "fits", "fits-too"]).as_deref(), Some("big"));
        assert_eq!(pick(&["here", "fits", "fits-too", "big"]), None);
        // A PV pre-bound to the claim is its only candidate, if the node suits it.
        let mut claimed = (*pv("pre", "5Gi", affinity("b"))).clone();
        claimed.spec.as_mut().unwrap().claim_ref = Some(ObjectReference {
            name: Some("c".into()),
            namespace: Some("default".into()),
            ..Default::default()
        });
        let all: Vec<_> = pvs.iter().cloned().chain([Arc::new(claimed)]).collect();
        assert_eq!(find_matching_volume(&claim, &all, &labels, &[]), None);
    }

    #[test]
    fn assume_restore_and_newer_versions() {
        let mut v = Volumes::default();
        v.apply(VolumeObject::Pv((*pv("p", "1Gi", json!({}))).clone()));
        let claim = pvc("c", "1Gi");
        let (bound, dirty) = bind_volume_to_claim(v.pv("p").unwrap(), &claim);
        assert!(dirty);
        let b = StaticBinding {
            namespace: "default".into(),
            claim: "c".into(),
            pv: "p".into(),
            bound: Arc::new(bound),
        };
        assert_eq!(v.assume(std::slice::from_ref(&b)).unwrap(), ["p"]);
        let r = v
            .pv("p")
            .unwrap()
            .spec
            .as_ref()
            .unwrap()
            .claim_ref
            .clone()
            .unwrap();
        assert_eq!(
            (r.name.as_deref(), r.uid.as_deref()),
            (Some("c"), Some("uid-c"))
        );
        assert!(
            v.pv_api("p")
                .unwrap()
                .spec
                .as_ref()
                .unwrap()
                .claim_ref
                .is_none()
        );
        // The same version again (a resync) keeps the assumption; a newer one replaces it.
        v.apply(VolumeObject::Pv((*pv("p", "1Gi", json!({}))).clone()));
        assert!(v.is_assumed("p"));
        v.apply(VolumeObject::Pv(
            (*pv("p", "1Gi", json!({"metadata": {"resourceVersion": "11"}}))).clone(),
        ));
        assert!(!v.is_assumed("p"));
        v.assume(std::slice::from_ref(&b)).unwrap();
        v.restore(&["p".to_string()]);
        assert!(!v.is_assumed("p"));
        let missing = StaticBinding {
            pv: "nope".into(),
            ..b
        };
        assert!(v.assume(&[missing]).is_err());
    }

    #[test]
    fn files_name_the_bad_field() {
        let list = r#"{"kind": "List", "items": [
            {"kind": "PersistentVolume", "metadata": {"name": "pv-1"}, "spec": {"capacity": {"storage": "1Gi"}}},
            {"kind": "PersistentVolumeClaim", "metadata": {"name": "c"}, "spec": {"accessModes": "ReadWriteOnce"}},
            {"kind": "StorageClass", "metadata": {"name": "Bad_Name"}, "provisioner": "x"},
            {"kind": "CSINode", "metadata": {"name": "n"}, "spec": {"drivers": []}}]}"#;
        let e = crate::objects::Objects::parse(list, "cluster.yaml")
            .unwrap_err()
            .to_string();
        let lines: Vec<&str> = e.lines().collect();
        assert_eq!(lines.len(), 2, "{e}");
        assert!(
            lines[0].starts_with(
                "cluster.yaml: items[1]: PersistentVolumeClaim \"c\": spec.accessModes"
            ),
            "{e}"
        );
        assert!(
            lines[1]
                .starts_with("cluster.yaml: items[2]: StorageClass \"Bad_Name\": metadata.name"),
            "{e}"
        );
        let ok = list
            .replace(
                "\"accessModes\": \"ReadWriteOnce\"",
                "\"accessModes\": [\"ReadWriteOnce\"]",
            )
            .replace("Bad_Name", "fast");
        let o = crate::objects::Objects::parse(&ok, "cluster.yaml").unwrap();
        let kinds: Vec<VolumeKind> = o.volumes.iter().map(VolumeObject::kind).collect();
        assert_eq!(
            kinds,
            [
                VolumeKind::Pv,
                VolumeKind::Pvc,
                VolumeKind::Class,
                VolumeKind::CsiNode
            ]
        );
        // A claim without a namespace is in `default`, as kubectl puts it.
        assert_eq!(o.volumes[1].key(), "default/c");
    }

    #[test]
    fn volume_events_retry_only_volume_rejections() {
        use crate::queue::ClusterEvent;
        let h = crate::scheduler::Scheduler::new(&crate::config::CoreConfig::default())
            .unwrap()
            .queueing_hints();
        for p in [
            "VolumeBinding",
            "VolumeRestrictions",
            "VolumeZone",
            "NodeVolumeLimits",
        ] {
            assert!(h.may_help(ClusterEvent::VolumeChanged, [p]), "{p}");
        }
        assert!(!h.may_help(
            ClusterEvent::VolumeChanged,
            ["NodeResourcesFit", "TaintToleration"]
        ));
    }
}

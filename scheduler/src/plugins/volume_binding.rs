//! VolumeBinding: upstream's volume binder (`volumebinding/volume_binding.go`, `binder.go`)
//! over the snapshot's volumes.
//!
//! - **PreFilter** skips pods without claim-backed volumes (nothing to do, no cost). A
//!   missing claim (`persistentvolumeclaim "data-0" not found`), a lost or deleting claim,
//!   or an unbound claim whose class binds Immediately (`pod has unbound immediate
//!   PersistentVolumeClaims`) rejects the pod outright. Otherwise it sorts the claims into
//!   bound ones and unbound WaitForFirstConsumer ones, with the candidate PVs of each
//!   class.
//! - **Filter** (upstream's `FindPodVolumes`): a bound claim's PV must exist (`node(s)
//!   unavailable due to one or more pvc(s) bound to non-existent pv(s)`) and its node
//!   affinity must match the node (`node(s) didn't match PersistentVolume's node
//!   affinity`). Each unbound WaitForFirstConsumer claim, smallest request first, takes the
//!   smallest `Available` PV of its class that fits its size, access modes, volume mode,
//!   selector and the node, not already chosen for another claim of the pod; a claim with
//!   no such PV must be provisionable there (a class with a real provisioner whose
//!   `allowedTopologies` admit the node), else `node(s) didn't find available persistent
//!   volumes to bind`. A claim already given a node (`volume.kubernetes.io/selected-node`)
//!   fits only that node.
//! - **Reserve** writes the chosen [`PodVolumes`] for the node to the cycle state
//!   ([`ReservedVolumes`], a framework type: the scheduler names no plugin); the
//!   scheduler assumes them in the snapshot with the pod (the PVs carry their new
//!   `claimRef`), so the next pod does not take the same PV, and restores them when the
//!   bind fails.
//! - **PreBind** (in the binding task, outside the cycle) hands the bindings to the
//!   [`VolumeBinder`] `serve` installs: it writes each PV's `claimRef` (and each
//!   provisioned claim's selected node) and waits, bounded, until the claims are bound,
//!   as upstream's `BindPodVolumes`. `place` and `simulate` have no binder: the assumed
//!   bindings are the answer (`place` prints them).
//!
//! No Score: upstream scores only with the `StorageCapacityScoring` feature gate, which
//! v1.36 leaves off (alpha).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

use crate::framework::{
    BoxFuture, CycleState, FilterPlugin, NodeNames, Plugin, PreBindPlugin, PreFilterPlugin,
    Registered, ReservePlugin, ReservedVolumes, Status,
};
use crate::selector::Labels;
use crate::snapshot::volumes::{
    NOT_SUPPORTED_PROVISIONER, PodVolumes, StaticBinding, Volumes, bind_volume_to_claim,
    claim_class, claim_key, claim_name, claim_size, claim_volume_name, find_matching_volume,
    is_claim_fully_bound, pv_node_affinity_matches, selected_node,
};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

/// Plugin name.
pub const NAME: &str = "VolumeBinding";
/// Upstream's `ErrReasonBindConflict`.
pub const ERR_REASON_BIND_CONFLICT: &str =
    "node(s) didn't find available persistent volumes to bind";
/// Upstream's `ErrReasonNodeConflict`.
pub const ERR_REASON_NODE_CONFLICT: &str = "node(s) didn't match PersistentVolume's node affinity";
/// Upstream's `ErrReasonNotEnoughSpace`.
pub const ERR_REASON_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
/// Upstream's `ErrReasonPVNotExist`.
pub const ERR_REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// Upstream's PreFilter reason for unbound Immediate claims.
pub const ERR_REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

/// Makes a pod's volume bindings real against the API server (PreBind under `serve`):
/// writes the PVs' `claimRef`s and the provisioned claims' selected node, then waits,
/// bounded, until the claims are bound. Errors are the message of the failed step.
pub trait VolumeBinder: Send + Sync {
    /// Binds `volumes` for `pod` on `node`.
    fn bind_pod_volumes<'a>(
        &'a self,
        pod: &'a PodInfo,
        node: &'a str,
        volumes: &'a PodVolumes,
    ) -> BoxFuture<'a, Result<(), String>>;
}

/// Where `serve` installs its [`VolumeBinder`] once it has a client (the framework is
/// built before). Empty under `place` and `simulate`: PreBind then has nothing to write.
#[derive(Default)]
pub struct VolumeBinderSlot(OnceLock<Arc<dyn VolumeBinder>>);

impl VolumeBinderSlot {
    /// Installs the binder (the first one wins).
    pub fn set(&self, binder: Arc<dyn VolumeBinder>) {
        let _ = self.0.set(binder);
    }

    /// The installed binder.
    pub fn get(&self) -> Option<&Arc<dyn VolumeBinder>> {
        self.0.get()
    }
}

impl std::fmt::Debug for VolumeBinderSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VolumeBinderSlot({})", self.0.get().is_some())
    }
}

/// The VolumeBinding plugin.
#[derive(Debug)]
pub struct VolumeBinding {
    binder: Arc<VolumeBinderSlot>,
}

/// What PreFilter found, and Filter's choices per node (upstream's `stateData`).
struct State {
    store: Arc<Volumes>,
    bound: Vec<Arc<PersistentVolumeClaim>>,
    /// Unbound WaitForFirstConsumer claims, smallest request first.
    unbound: Vec<Arc<PersistentVolumeClaim>>,
    /// Candidate PVs per class of the unbound claims.
    candidates: HashMap<String, Vec<Arc<PersistentVolume>>>,
    /// Filter's choice per feasible node name (Filter may run on several threads).
    by_node: Mutex<HashMap<String, PodVolumes>>,
}

impl VolumeBinding {
    /// Creates the plugin; PreBind uses the binder `slot` holds, if any.
    pub fn new(slot: Arc<VolumeBinderSlot>) -> Self {
        VolumeBinding { binder: slot }
    }

    /// Registers its extension points (PreFilter, Filter, Reserve, PreBind).
    pub fn register(self) -> Registered {
        let me = Arc::new(self);
        Registered {
            pre_filter: Some(me.clone()),
            filter: Some(me.clone()),
            reserve: Some(me.clone()),
            pre_bind: Some(me),
            ..Registered::new(NAME)
        }
    }
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Reads volumes, claims, classes and CSINodes: their changes may cure it.
    fn events_to_register(&self) -> crate::framework::ClusterEvents {
        crate::framework::ClusterEvents::OBJECTS.with(crate::framework::ClusterEvent::VolumeChanged)
    }
}

/// Upstream's `MatchTopologySelectorTerms` (no terms: everything).
fn topology_matches(
    terms: Option<&[k8s_openapi::api::core::v1::TopologySelectorTerm]>,
    labels: &Labels,
) -> bool {
    let Some(terms) = terms.filter(|t| !t.is_empty()) else {
        return true;
    };
    terms.iter().any(|t| {
        t.match_label_expressions.iter().flatten().all(|r| {
            labels
                .get(&r.key)
                .is_some_and(|v| r.values.iter().any(|x| x == v))
        })
    })
}

/// Why a claim fits no node at all (PreFilter), or `None`.
fn unusable(store: &Volumes, pod: &PodInfo, name: &str, ephemeral: bool) -> Option<String> {
    let Some(claim) = store.pvc(&pod.namespace, name) else {
        return Some(if ephemeral {
            format!(
                "waiting for ephemeral volume controller to create the persistentvolumeclaim {name:?}"
            )
        } else {
            format!("persistentvolumeclaim {name:?} not found")
        });
    };
    if claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
        return Some(format!(
            "persistentvolumeclaim {name:?} bound to non-existent persistentvolume {:?}",
            claim_volume_name(claim)
        ));
    }
    if claim.metadata.deletion_timestamp.is_some() {
        return Some(format!("persistentvolumeclaim {name:?} is being deleted"));
    }
    if ephemeral {
        let owned =
            claim.metadata.owner_references.iter().flatten().any(|o| {
                o.controller == Some(true) && Some(&o.uid) == pod.pod.metadata.uid.as_ref()
            });
        if !owned {
            return Some(format!(
                "PVC {}/{name} was not created for pod {}/{} (pod is not owner)",
                pod.namespace, pod.namespace, pod.name
            ));
        }
    }
    None
}

impl PreFilterPlugin for VolumeBinding {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Status, Option<NodeNames>) {
        let vols = crate::snapshot::volumes::pod_volumes(&pod.pod);
        let store = snapshot.volumes();
        let mut names = Vec::new();
        for v in vols {
            let Some(name) = claim_name(&pod.pod, v) else {
                continue;
            };
            if let Some(reason) = unusable(store, pod, &name, v.ephemeral.is_some()) {
                return (Status::unresolvable(reason), None);
            }
            names.push(name);
        }
        if names.is_empty() {
            return (Status::skip(), None);
        }
        // Upstream's GetPodVolumeClaims.
        let mut bound = Vec::new();
        let mut unbound = Vec::new();
        let mut immediate = false;
        for name in &names {
            let Some(claim) = store.pvc(&pod.namespace, name) else {
                continue;
            };
            if is_claim_fully_bound(claim) {
                bound.push(claim.clone());
                continue;
            }
            let class_name = claim_class(claim);
            let delay = match store.class(class_name).filter(|_| !class_name.is_empty()) {
                None => false,
                Some(c) => match c.volume_binding_mode.as_deref() {
                    None => {
                        return (
                            Status::error(format!(
                                "VolumeBindingMode not set for StorageClass {class_name:?}"
                            )),
                            None,
                        );
                    }
                    Some(m) => m == "WaitForFirstConsumer",
                },
            };
            if delay && claim_volume_name(claim).is_empty() {
                unbound.push(claim.clone());
            } else {
                immediate = true;
            }
        }
        if immediate {
            return (Status::unresolvable(ERR_REASON_UNBOUND_IMMEDIATE), None);
        }
        // `byPVCSize`: a stable sort, smallest request first.
        unbound.sort_by_key(|c| claim_size(c));
        let mut candidates: HashMap<String, Vec<Arc<PersistentVolume>>> = HashMap::new();
        for c in &unbound {
            let class = claim_class(c).to_string();
            if let std::collections::hash_map::Entry::Vacant(e) = candidates.entry(class) {
                let pvs = store.pvs_of_class(e.key()).cloned().collect();
                e.insert(pvs);
            }
        }
        state.write(State {
            store: store.clone(),
            bound,
            unbound,
            candidates,
            by_node: Mutex::new(HashMap::new()),
        });
        (Status::success(), None)
    }
}

/// Upstream's `FindPodVolumes` for one node: the bindings, or the reasons it fails.
fn find_pod_volumes(st: &State, node: &NodeInfo) -> Result<PodVolumes, Status> {
    let labels = node.labels();
    let mut bound_satisfied = true;
    let mut pvs_found = true;
    let mut unbound_satisfied = true;
    let mut out = PodVolumes::default();
    // Bound claims: the PV must exist and suit the node.
    for claim in &st.bound {
        match st.store.pv(claim_volume_name(claim)) {
            None => {
                pvs_found = false;
                break;
            }
            Some(pv) if !pv_node_affinity_matches(pv, labels) => {
                bound_satisfied = false;
                break;
            }
            Some(_) => {}
        }
    }
    'unbound: {
        if st.unbound.is_empty() {
            break 'unbound;
        }
        let mut to_match = Vec::new();
        let mut to_provision = Vec::new();
        for claim in &st.unbound {
            match selected_node(claim) {
                Some(n) if n != &*node.name => {
                    unbound_satisfied = false;
                    break 'unbound;
                }
                Some(_) => to_provision.push(claim),
                None => to_match.push(claim),
            }
        }
        let mut chosen: Vec<&str> = Vec::new();
        for claim in to_match {
            let pvs = st
                .candidates
                .get(claim_class(claim))
                .map_or(&[][..], Vec::as_slice);
            match find_matching_volume(claim, pvs, labels, &chosen) {
                Some(pv) => {
                    let name = pv.metadata.name.as_deref().unwrap_or("");
                    chosen.push(name);
                    let (new, _) = bind_volume_to_claim(pv, claim);
                    out.static_bindings.push(StaticBinding {
                        namespace: claim.metadata.namespace.clone().unwrap_or_default(),
                        claim: claim.metadata.name.clone().unwrap_or_default(),
                        pv: name.to_string(),
                        bound: Arc::new(new),
                    });
                }
                None => {
                    unbound_satisfied = false;
                    to_provision.push(claim);
                }
            }
        }
        // Upstream's checkVolumeProvisions, which decides for the claims left over.
        if !to_provision.is_empty() {
            unbound_satisfied = true;
            for claim in to_provision {
                let key = claim_key(
                    claim.metadata.namespace.as_deref().unwrap_or(""),
                    claim.metadata.name.as_deref().unwrap_or(""),
                );
                let class_name = claim_class(claim);
                if class_name.is_empty() {
                    return Err(Status::error(format!("no class for claim {key:?}")));
                }
                let Some(class) = st.store.class(class_name) else {
                    return Err(Status::error(format!(
                        "failed to find storage class {class_name:?}"
                    )));
                };
                if class.provisioner.is_empty()
                    || class.provisioner == NOT_SUPPORTED_PROVISIONER
                    || !topology_matches(class.allowed_topologies.as_deref(), labels)
                {
                    unbound_satisfied = false;
                    out.provisions.clear();
                    break;
                }
                // Storage capacity (CSIStorageCapacity) is not tracked: as upstream
                // without a CSIDriver that asks for capacity checks, there is room.
                out.provisions.push(key);
            }
        }
    }
    let mut reasons: Vec<&'static str> = Vec::new();
    if !bound_satisfied {
        reasons.push(ERR_REASON_NODE_CONFLICT);
    }
    if !unbound_satisfied {
        reasons.push(ERR_REASON_BIND_CONFLICT);
    }
    if !pvs_found {
        reasons.push(ERR_REASON_PV_NOT_EXIST);
    }
    if reasons.is_empty() {
        return Ok(out);
    }
    let mut s = Status::unresolvable(reasons[0]);
    for r in &reasons[1..] {
        s.reasons.push((*r).into());
    }
    Err(s)
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.read::<State>() else {
            return Status::error(format!("cannot read {NAME:?} PreFilter state"));
        };
        match find_pod_volumes(st, node) {
            Ok(v) => {
                st.by_node
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(node.name.to_string(), v);
                Status::success()
            }
            Err(s) => {
                if state.explain && s.is_rejected() {
                    let claims: Vec<String> = st
                        .bound
                        .iter()
                        .chain(&st.unbound)
                        .filter_map(|c| c.metadata.name.clone())
                        .collect();
                    s.with_detail(format!("claims: {}", claims.join(", ")))
                } else {
                    s
                }
            }
        }
    }
}

impl ReservePlugin for VolumeBinding {
    fn reserve(&self, state: &mut CycleState, _pod: &PodInfo, node: &str) -> Status {
        let Some(st) = state.read::<State>() else {
            // PreFilter skipped: the pod has no claims.
            return Status::success();
        };
        let volumes = st
            .by_node
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .cloned()
            .unwrap_or_default();
        // The cycle state goes on to the binding task (PreBind may wait minutes): it must
        // not keep the cycle's volumes alive, or every volume change meanwhile would copy
        // them.
        if let Some(st) = state.read_mut::<State>() {
            st.store = Arc::default();
            st.candidates.clear();
            st.by_node.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
        state.write(ReservedVolumes {
            plugin: NAME,
            volumes,
        });
        Status::success()
    }

    fn unreserve(&self, state: &mut CycleState, _pod: &PodInfo, _node: &str) {
        // The scheduler restores the assumed PVs when it forgets the pod; nothing is left
        // to bind.
        state.write(ReservedVolumes::default());
    }
}

impl PreBindPlugin for VolumeBinding {
    fn pre_bind_pre_flight(&self, state: &CycleState, _pod: &PodInfo, _node: &str) -> Status {
        match state.read::<ReservedVolumes>() {
            Some(r) if !r.volumes.is_empty() => Status::success(),
            _ => Status::skip(),
        }
    }

    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a PodInfo,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            let Some(ReservedVolumes { volumes, .. }) = state.read::<ReservedVolumes>() else {
                return Status::success();
            };
            let Some(binder) = self.binder.get() else {
                // place, simulate: the assumed bindings are the answer.
                return Status::success();
            };
            match binder.bind_pod_volumes(pod, node, volumes).await {
                Ok(()) => Status::success(),
                Err(e) => Status::error(e),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::testutil::volumes::*;
    use crate::plugins::testutil::*;
    use serde_json::json;

    /// Each node's (code, message).
    type Verdicts = Vec<(Code, String)>;

    fn plugin() -> Registered {
        VolumeBinding::new(Arc::new(VolumeBinderSlot::default())).register()
    }

    #[test]
    fn table() {
        let snap = cluster();
        let reg = plugin();
        let ok = (Code::Success, String::new());
        let un = |r: &str| (Code::UnschedulableAndUnresolvable, r.to_string());
        let cases: Vec<(&[&str], Verdicts)> = vec![
            (&[], vec![(Code::Skip, String::new()); 3]),
            (
                &["b1"],
                vec![
                    un(ERR_REASON_NODE_CONFLICT),
                    un(ERR_REASON_NODE_CONFLICT),
                    ok.clone(),
                ],
            ),
            (&["ghost"], vec![un(ERR_REASON_PV_NOT_EXIST); 3]),
            (
                &["small"],
                vec![ok.clone(), ok.clone(), un(ERR_REASON_BIND_CONFLICT)],
            ),
            (
                &["big"],
                vec![ok.clone(), ok.clone(), un(ERR_REASON_BIND_CONFLICT)],
            ),
            // Two claims cannot take the same PV: n2 has only one.
            (
                &["small", "big"],
                vec![
                    ok.clone(),
                    un(ERR_REASON_BIND_CONFLICT),
                    un(ERR_REASON_BIND_CONFLICT),
                ],
            ),
            (&["huge"], vec![un(ERR_REASON_BIND_CONFLICT); 3]),
            // Bound and unbound at once: both reasons.
            (
                &["b1", "huge"],
                vec![
                    (
                        Code::UnschedulableAndUnresolvable,
                        format!("{ERR_REASON_NODE_CONFLICT}, {ERR_REASON_BIND_CONFLICT}"),
                    ),
                    (
                        Code::UnschedulableAndUnresolvable,
                        format!("{ERR_REASON_NODE_CONFLICT}, {ERR_REASON_BIND_CONFLICT}"),
                    ),
                    un(ERR_REASON_BIND_CONFLICT),
                ],
            ),
            // Dynamic provisioning where the class's topology allows.
            (
                &["dyn"],
                vec![un(ERR_REASON_BIND_CONFLICT), ok.clone(), ok.clone()],
            ),
            (
                &["picked"],
                vec![
                    un(ERR_REASON_BIND_CONFLICT),
                    un(ERR_REASON_BIND_CONFLICT),
                    ok.clone(),
                ],
            ),
            (&["imm"], vec![un(ERR_REASON_UNBOUND_IMMEDIATE); 3]),
            (
                &["nope"],
                vec![un("persistentvolumeclaim \"nope\" not found"); 3],
            ),
        ];
        for (claims, want) in cases {
            let got: Vec<_> = filter_all(&reg, &snap, &with_claims(claims))
                .into_iter()
                .map(|(_, s)| (s.code, s.message()))
                .collect();
            assert_eq!(got, want, "{claims:?}");
        }
    }

    /// Reserve hands the chosen PVs on; the smallest PV that fits wins; the scheduler's
    /// assumption keeps the next pod off the same PV.
    #[test]
    fn reserve_picks_smallest_and_assumption_blocks_the_next_pod() {
        let mut snap = cluster();
        let reg = plugin();
        let p = with_claims(&["small"]);
        let mut state = CycleState::new(false);
        let pf = reg.pre_filter.as_ref().unwrap();
        assert!(pf.pre_filter(&mut state, &p, &snap).0.is_success());
        let f = reg.filter.as_ref().unwrap();
        assert!(f.filter(&state, &p, snap.get("n1").unwrap()).is_success());
        assert_eq!(Arc::strong_count(snap.volumes()), 2, "the cycle reads them");
        reg.reserve.as_ref().unwrap().reserve(&mut state, &p, "n1");
        assert_eq!(
            Arc::strong_count(snap.volumes()),
            1,
            "the state handed to PreBind does not keep the cycle's volumes"
        );
        let v = state.read::<ReservedVolumes>().unwrap().volumes.clone();
        assert_eq!(v.static_bindings.len(), 1);
        assert_eq!(v.static_bindings[0].pv, "pv-n1-small");
        let r = v.static_bindings[0]
            .bound
            .spec
            .as_ref()
            .unwrap()
            .claim_ref
            .clone()
            .unwrap();
        assert_eq!(r.uid.as_deref(), Some("uid-small"));
        assert!(
            reg.pre_bind
                .as_ref()
                .unwrap()
                .pre_bind_pre_flight(&state, &p, "n1")
                .is_success()
        );
        snap.volumes_mut().assume(&v.static_bindings).unwrap();
        // Another claim of 1Gi now gets the 10Gi PV on n1.
        let mut state = CycleState::new(false);
        let q = info(pod(
            "q",
            json!({"spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "big"}}]}}),
        ));
        pf.pre_filter(&mut state, &q, &snap);
        assert!(f.filter(&state, &q, snap.get("n1").unwrap()).is_success());
        reg.reserve.as_ref().unwrap().reserve(&mut state, &q, "n1");
        assert_eq!(
            state
                .read::<ReservedVolumes>()
                .unwrap()
                .volumes
                .static_bindings[0]
                .pv,
            "pv-n1-big"
        );
        // A pod whose claims are all bound has nothing to PreBind.
        let mut state = CycleState::new(false);
        let b = with_claims(&["b1"]);
        pf.pre_filter(&mut state, &b, &snap);
        f.filter(&state, &b, snap.get("n3").unwrap());
        reg.reserve.as_ref().unwrap().reserve(&mut state, &b, "n3");
        assert!(
            reg.pre_bind
                .as_ref()
                .unwrap()
                .pre_bind_pre_flight(&state, &b, "n3")
                .is_skip()
        );
    }

    /// Through the scheduler: the first pod's PV is assumed with it, so a second pod
    /// whose claim could only use the same PV finds none; forgetting the first (a failed
    /// bind) gives the PV back.
    #[test]
    fn scheduler_assumes_the_chosen_pv_and_forget_restores_it() {
        let mut config = crate::config::CoreConfig::default();
        config.scheduler.seed = Some(1);
        let s = crate::scheduler::Scheduler::new(&config).unwrap();
        // Only pv-n2 (5Gi) fits a 4Gi claim besides pv-n1-big; take pv-n1-big away.
        s.cache().update(|c| {
            c.replace(cluster());
            c.snapshot_mut()
                .volumes_mut()
                .delete(crate::snapshot::volumes::VolumeKind::Pv, "pv-n1-big")
        });
        let first = with_claims(&["big"]);
        let a = s.schedule_one(&first, None, true);
        assert_eq!(a.decision.node(), Some("n2"));
        assert_eq!(
            a.decision
                .volume_bindings
                .get("default/big")
                .map(String::as_str),
            Some("pv-n2")
        );
        assert!(a.pre_bind.is_some(), "PreBind has a PV to write");
        assert!(s.snapshot().volumes().is_assumed("pv-n2"));
        s.cache().update(|c| {
            c.snapshot_mut()
                .volumes_mut()
                .apply(pvc("big2", "4Gi", "local-wffc", json!({})))
        });
        let second = info(pod(
            "q",
            json!({"spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "big2"}}]}}),
        ));
        let b = s.schedule_one(&second, None, false);
        let crate::framework::Outcome::Unschedulable { message } = &b.decision.outcome else {
            panic!("{:?}", b.decision.outcome)
        };
        assert_eq!(
            message,
            &format!(
                "0/3 nodes are available: 3 {ERR_REASON_BIND_CONFLICT}. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
            )
        );
        assert_eq!(
            s.cache().update(|c| c.forget(&first)).as_deref(),
            Some("n2")
        );
        assert!(!s.snapshot().volumes().is_assumed("pv-n2"));
        let b = s.schedule_one(&second, None, false);
        assert_eq!(b.decision.node(), Some("n2"));
    }
}

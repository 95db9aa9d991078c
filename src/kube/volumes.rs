//! Volumes under `serve`: the watches of PersistentVolumes, PersistentVolumeClaims,
//! StorageClasses and CSINodes into the engine's cluster state, and VolumeBinding's PreBind
//! writer ([`KubeVolumeBinder`]), as upstream's volume binder does it:
//!
//! 1. each chosen PV is updated with its claim's `claimRef` (a `PUT` with the assumed
//!    object's resourceVersion, so a PV that changed meanwhile is a conflict, not a double
//!    bind); each claim to provision gets `volume.kubernetes.io/selected-node`;
//! 2. then it waits — outside the scheduling cycle, polling the watched state every
//!    second, at most `bind_timeout` (upstream's `bindTimeoutSeconds`, 600 s) — until the
//!    PV controller has bound each claim (`spec.volumeName` and
//!    `pv.kubernetes.io/bind-completed`). A PV whose `claimRef` was reset, a claim
//!    provisioned for another node, or a pod deleted meanwhile fails at once.
//!
//! A failure is logged, counted (`headroom_volume_binding_total{result}`) and returned;
//! the scheduling loop then unreserves, forgets the pod with its assumed PVs and retries
//! it with backoff.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::Client;
use kube::api::{Api, PostParams};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::watch::{Reporting, WatchItem, pump};
use crate::cluster::{ClusterState, Kind};
use headroom_scheduler::cache::Cache;
use headroom_scheduler::framework::BoxFuture;
use headroom_scheduler::plugins::volume_binding::VolumeBinder;
use headroom_scheduler::snapshot::volumes::{
    ANN_SELECTED_NODE, PodVolumes, VolumeKind, VolumeObject, claim_key, is_claim_fully_bound,
    pv_node_affinity_matches, selected_node,
};
use headroom_scheduler::snapshot::{PodInfo, Snapshot};

/// Upstream's default `bindTimeoutSeconds`.
pub const DEFAULT_BIND_TIMEOUT: Duration = Duration::from_secs(600);
/// How often the wait re-reads the watched claims (upstream polls every second).
const POLL: Duration = Duration::from_secs(1);

/// Runs the four volume watches until `stop` shows true.
pub(crate) async fn watch(
    client: Client,
    state: Arc<ClusterState>,
    reporting: Reporting,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let shutdown = || {
        let mut rx = stop.clone();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    };
    fn on<K>(
        state: Arc<ClusterState>,
        kind: VolumeKind,
        wrap: fn(K) -> VolumeObject,
    ) -> impl FnMut(WatchItem<K>) {
        move |item| match item {
            WatchItem::List(l) => state.replace_volumes(kind, l.into_iter().map(wrap).collect()),
            WatchItem::Listed(_) => {}
            WatchItem::Apply(o) => state.apply_volume(wrap(o)),
            WatchItem::Delete(o) => state.delete_volume(kind, &wrap(o).key()),
        }
    }
    let stats = reporting;
    // Buffered: a list is applied whole, as a diff (volume objects are few next to pods).
    futures::join!(
        pump::<PersistentVolume, _>(
            Kind::PersistentVolume,
            Api::all(client.clone()),
            stats.clone(),
            true,
            on(state.clone(), VolumeKind::Pv, VolumeObject::Pv),
            shutdown(),
        ),
        pump::<PersistentVolumeClaim, _>(
            Kind::PersistentVolumeClaim,
            Api::all(client.clone()),
            stats.clone(),
            true,
            on(state.clone(), VolumeKind::Pvc, VolumeObject::Pvc),
            shutdown(),
        ),
        pump::<StorageClass, _>(
            Kind::StorageClass,
            Api::all(client.clone()),
            stats.clone(),
            true,
            on(state.clone(), VolumeKind::Class, VolumeObject::Class),
            shutdown(),
        ),
        pump::<CSINode, _>(
            Kind::CSINode,
            Api::all(client),
            stats,
            true,
            on(state, VolumeKind::CsiNode, VolumeObject::CsiNode),
            shutdown(),
        ),
    );
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// VolumeBinding's PreBind under `serve`: writes through the API, waits on the watched
/// state.
pub struct KubeVolumeBinder {
    client: Client,
    cache: Arc<Cache>,
    bind_timeout: Duration,
    results: Family<ResultLabel, Counter>,
}

impl KubeVolumeBinder {
    /// A binder over `client`, reading the watched volumes from `cache`'s snapshot, its
    /// counters registered on `metrics`.
    pub fn new(
        client: Client,
        cache: Arc<Cache>,
        metrics: &crate::metrics::Metrics,
    ) -> KubeVolumeBinder {
        let results = Family::<ResultLabel, Counter>::default();
        for result in ["bound", "api_error", "conflict", "timeout"] {
            let _ = results.get_or_create(&ResultLabel { result });
        }
        metrics.register(
            "headroom_volume_binding",
            "VolumeBinding PreBind outcomes (PV claimRef writes and the wait for the claims to be bound), by result",
            results.clone(),
        );
        KubeVolumeBinder {
            client,
            cache,
            bind_timeout: DEFAULT_BIND_TIMEOUT,
            results,
        }
    }

    /// Sets how long PreBind waits for the claims to be bound (default 600 s).
    pub fn with_bind_timeout(mut self, timeout: Duration) -> KubeVolumeBinder {
        self.bind_timeout = timeout;
        self
    }

    fn count(&self, result: &'static str) {
        self.results.get_or_create(&ResultLabel { result }).inc();
    }

    /// Upstream's `bindAPIUpdate`: the PV and claim writes.
    async fn write(&self, node: &str, volumes: &PodVolumes) -> Result<(), String> {
        let pvs: Api<PersistentVolume> = Api::all(self.client.clone());
        for b in &volumes.static_bindings {
            pvs.replace(&b.pv, &PostParams::default(), &b.bound)
                .await
                .map_err(|e| {
                    format!(
                        "updating PersistentVolume {:?} with claimRef {}/{}: {e}",
                        b.pv, b.namespace, b.claim
                    )
                })?;
            tracing::info!(pv = %b.pv, claim = %claim_key(&b.namespace, &b.claim), "PersistentVolume bound to claim; waiting for the claim");
        }
        for key in &volumes.provisions {
            let (ns, name) = key.split_once('/').unwrap_or(("default", key));
            let claim = self
                .cache
                .read(|c| c.snapshot().volumes().pvc(ns, name).cloned());
            let Some(claim) = claim else {
                return Err(format!("persistentvolumeclaim {name:?} not found"));
            };
            let mut claim = (*claim).clone();
            claim
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(ANN_SELECTED_NODE.into(), node.to_string());
            Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), ns)
                .replace(name, &PostParams::default(), &claim)
                .await
                .map_err(|e| {
                    format!("updating PersistentVolumeClaim {key:?} for provisioning: {e}")
                })?;
        }
        Ok(())
    }

    /// Upstream's `checkBindings`: `Ok(true)` when every claim is bound, `Ok(false)` to
    /// keep waiting, `Err` when it can no longer happen.
    fn check(&self, pod: &PodInfo, node: &str, volumes: &PodVolumes) -> Result<bool, String> {
        // Read under the cache's lock, not from an `Arc` held beside it: holding the
        // snapshot would make the next change copy it.
        self.cache
            .read(|c| check_bindings(c.snapshot(), pod, node, volumes))
    }
}

/// [`KubeVolumeBinder::check`] on one snapshot.
fn check_bindings(
    snapshot: &Snapshot,
    pod: &PodInfo,
    node: &str,
    volumes: &PodVolumes,
) -> Result<bool, String> {
    // The assumed pod leaves the snapshot when the watch reports it deleted.
    if snapshot.node_of_pod(&pod.key(), &pod.uid).is_none() {
        return Err(format!("pod {} does not exist any more", pod.key()));
    }
    let store = snapshot.volumes();
    let labels = snapshot
        .get(node)
        .map(|n| n.labels().clone())
        .ok_or_else(|| format!("failed to get node {node:?}"))?;
    for b in &volumes.static_bindings {
        let pv = store.pv_api(&b.pv).ok_or_else(|| {
            format!(
                "failed to check binding: persistentvolume {:?} not found",
                b.pv
            )
        })?;
        let claim = store.pvc(&b.namespace, &b.claim).ok_or_else(|| {
            format!(
                "failed to check binding: persistentvolumeclaim {:?} not found",
                b.claim
            )
        })?;
        if !pv_node_affinity_matches(pv, &labels) {
            return Err(format!(
                "pv {:?} node affinity doesn't match node {node:?}",
                b.pv
            ));
        }
        let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        if claim_ref.is_none_or(|r| r.uid.as_deref().unwrap_or("").is_empty()) {
            // The watch may not have delivered our own write yet.
            if !store.is_assumed(&b.pv) {
                return Err(format!("ClaimRef got reset for pv {:?}", b.pv));
            }
            return Ok(false);
        }
        if !is_claim_fully_bound(claim) {
            return Ok(false);
        }
    }
    for key in &volumes.provisions {
        let (ns, name) = key.split_once('/').unwrap_or(("default", key));
        let Some(claim) = store.pvc(ns, name) else {
            return Err(format!(
                "failed to check provisioning pvc: persistentvolumeclaim {name:?} not found"
            ));
        };
        match selected_node(claim) {
            None => return Ok(false),
            Some(n) if n != node => {
                return Err(format!("provisioning failed for PVC {name:?}"));
            }
            Some(_) => {}
        }
        if !is_claim_fully_bound(claim) {
            return Ok(false);
        }
    }
    Ok(true)
}

impl VolumeBinder for KubeVolumeBinder {
    fn bind_pod_volumes<'a>(
        &'a self,
        pod: &'a PodInfo,
        node: &'a str,
        volumes: &'a PodVolumes,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            if let Err(e) = self.write(node, volumes).await {
                let result =
                    if e.contains("409") || e.contains("Conflict") || e.contains("modified") {
                        "conflict"
                    } else {
                        "api_error"
                    };
                self.count(result);
                tracing::warn!(pod = %pod.key(), node, error = %e, "binding volumes failed");
                return Err(e);
            }
            let deadline = tokio::time::Instant::now() + self.bind_timeout;
            loop {
                match self.check(pod, node, volumes) {
                    Ok(true) => {
                        self.count("bound");
                        return Ok(());
                    }
                    Ok(false) => {}
                    Err(e) => {
                        self.count("api_error");
                        tracing::warn!(pod = %pod.key(), node, error = %e, "binding volumes failed");
                        return Err(format!("binding volumes: {e}"));
                    }
                }
                if tokio::time::Instant::now() >= deadline {
                    self.count("timeout");
                    let e = format!(
                        "binding volumes: context deadline exceeded (claims not bound within {}s)",
                        self.bind_timeout.as_secs()
                    );
                    tracing::warn!(pod = %pod.key(), node, error = %e, "binding volumes timed out");
                    return Err(e);
                }
                tokio::time::sleep(POLL).await;
            }
        })
    }
}

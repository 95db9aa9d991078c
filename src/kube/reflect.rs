//! Watches (kube-rs `watcher`s) for Nodes, Pods, Namespaces, PodDisruptionBudgets,
//! PriorityClasses, Reservations and the volume objects ([`super::volumes`]): the API
//! server's cluster feed. Nodes, pods, namespaces and the policy objects preemption reads
//! go to the engine's
//! [`ClusterState`](crate::cluster::ClusterState), which applies them to the snapshot and
//! the queue exactly as it applies a simulated cluster; reservations go to
//! [`KubeReservations`](super::crd::KubeReservations).
//!
//! A watch that fails is retried with backoff (counted in
//! `headroom_cluster_watch_errors_total`); when the API server answers `410 Gone`
//! (resourceVersion too old) the watcher re-lists, and the re-list is applied as a diff.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Client;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::crd::{KubeReservations, ReservationResource};
use crate::cluster::{ClusterState, FeedStats, Kind};
use crate::queue::PodKey;

/// Namespace, name and uid of a listed object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Uid.
    pub uid: String,
}

impl ObjectKey {
    fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> ObjectKey {
        ObjectKey {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
        }
    }
}

/// Feeds one watch's events to `apply` until `shutdown`, buffering a (re-)list until it
/// is complete. Errors are logged and counted; the stream backs off and recovers itself.
/// Feeds one watch's events to `on` until `shutdown`. A (re-)list arrives page by page
/// (the watcher lists in pages of 500): each listed object is applied as it arrives, so
/// the snapshot is built while the rest of the list is still on the wire, and the end of
/// the list reports every key it held ([`WatchItem::Listed`]) so objects absent from it
/// are removed. With `buffered`, the list is instead handed over whole
/// ([`WatchItem::List`]). Errors are logged and counted; the stream backs off and recovers
/// itself.
pub(crate) async fn pump<K, F>(
    kind: Kind,
    api: Api<K>,
    stats: FeedStats,
    buffered: bool,
    mut on: F,
    shutdown: impl std::future::Future<Output = ()>,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: FnMut(WatchItem<K>),
{
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    tokio::pin!(stream);
    tokio::pin!(shutdown);
    let mut buffer: Vec<K> = Vec::new();
    let mut listed: HashSet<ObjectKey> = HashSet::new();
    loop {
        let ev = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { break };
        match ev {
            Ok(Event::Init) => {
                buffer.clear();
                listed.clear();
            }
            Ok(Event::InitApply(o)) if buffered => buffer.push(o),
            Ok(Event::InitApply(o)) => {
                listed.insert(ObjectKey::of(o.meta()));
                on(WatchItem::Apply(o));
            }
            Ok(Event::InitDone) if buffered => on(WatchItem::List(std::mem::take(&mut buffer))),
            Ok(Event::InitDone) => on(WatchItem::Listed(std::mem::take(&mut listed))),
            Ok(Event::Apply(o)) => on(WatchItem::Apply(o)),
            Ok(Event::Delete(o)) => on(WatchItem::Delete(o)),
            Err(e) => {
                stats.watch_error(kind);
                tracing::warn!(kind = kind.as_str(), error = %e, "watch failed; retrying with backoff");
            }
        }
    }
}

/// One watch event.
pub enum WatchItem<K> {
    /// A complete list, whole (buffered watches).
    List(Vec<K>),
    /// A complete list ended: these objects were in it (their items came as `Apply`).
    Listed(HashSet<ObjectKey>),
    /// Added or modified (also each item of a list, unbuffered).
    Apply(K),
    /// Deleted.
    Delete(K),
}

/// Runs the watches until `stop` shows true: nodes, pods, namespaces, and reservations
/// when `reservations` is given.
pub async fn run(
    client: Client,
    state: Arc<ClusterState>,
    reservations: Option<Arc<KubeReservations>>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let shutdown = || {
        let mut rx = stop.clone();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    };
    let s = state.clone();
    let nodes = pump::<Node, _>(
        Kind::Node,
        Api::all(client.clone()),
        state.stats.clone(),
        false,
        move |item| match item {
            WatchItem::List(l) => s.replace_nodes(l),
            WatchItem::Listed(keys) => s.nodes_listed(&keys.into_iter().map(|k| k.name).collect()),
            WatchItem::Apply(n) => s.apply_node(n),
            WatchItem::Delete(n) => s.delete_node(n.metadata.name.as_deref().unwrap_or("")),
        },
        shutdown(),
    );
    let s = state.clone();
    let pods = pump::<Pod, _>(
        Kind::Pod,
        Api::all(client.clone()),
        state.stats.clone(),
        false,
        move |item| match item {
            WatchItem::List(l) => s.replace_pods(l),
            WatchItem::Listed(keys) => s.pods_listed(
                &keys
                    .into_iter()
                    .map(|k| PodKey::new(k.namespace, k.name, k.uid))
                    .collect(),
            ),
            WatchItem::Apply(p) => s.apply_pod(p),
            WatchItem::Delete(p) => s.delete_pod(&p),
        },
        shutdown(),
    );
    let s = state.clone();
    let namespaces = pump::<Namespace, _>(
        Kind::Namespace,
        Api::all(client.clone()),
        state.stats.clone(),
        false,
        move |item| match item {
            WatchItem::List(l) => s.replace_namespaces(l),
            WatchItem::Listed(_) => s.namespaces_listed(),
            WatchItem::Apply(n) => s.apply_namespace(&n),
            // Labels of a deleted namespace no longer matter: no pod can be in it.
            WatchItem::Delete(_) => {}
        },
        shutdown(),
    );
    let reservations = {
        let r = reservations;
        let stats = state.stats.clone();
        let client = client.clone();
        let shutdown = shutdown();
        async move {
            let Some(r) = r else { return };
            pump::<ReservationResource, _>(
                Kind::Reservation,
                Api::all(client),
                stats,
                // The cache replaces its list wholesale; reservations are few.
                true,
                move |item| match item {
                    WatchItem::List(l) => r.replace_all(l.into_iter().map(Arc::new).collect()),
                    WatchItem::Listed(_) => {}
                    WatchItem::Apply(o) => r.apply(Arc::new(o)),
                    WatchItem::Delete(o) => r.delete(
                        o.metadata.namespace.as_deref().unwrap_or(""),
                        o.metadata.name.as_deref().unwrap_or(""),
                    ),
                },
                shutdown,
            )
            .await
        }
    };
    let s = state.clone();
    let pdbs = pump::<PodDisruptionBudget, _>(
        Kind::PodDisruptionBudget,
        Api::all(client.clone()),
        state.stats.clone(),
        // Few objects, replaced wholesale on a (re-)list.
        true,
        move |item| match item {
            WatchItem::List(l) => s.replace_pdbs(l),
            WatchItem::Listed(_) => {}
            WatchItem::Apply(o) => s.apply_pdb(&o),
            WatchItem::Delete(o) => s.delete_pdb(
                o.metadata.namespace.as_deref().unwrap_or(""),
                o.metadata.name.as_deref().unwrap_or(""),
            ),
        },
        shutdown(),
    );
    let s = state.clone();
    let priority_classes = pump::<PriorityClass, _>(
        Kind::PriorityClass,
        Api::all(client.clone()),
        state.stats.clone(),
        true,
        move |item| match item {
            WatchItem::List(l) => s.replace_priority_classes(l),
            WatchItem::Listed(_) => {}
            WatchItem::Apply(o) => s.apply_priority_class(&o),
            WatchItem::Delete(o) => {
                s.delete_priority_class(o.metadata.name.as_deref().unwrap_or(""))
            }
        },
        shutdown(),
    );
    let volumes = super::volumes::watch(client.clone(), state.clone(), stop.clone());
    let workloads = super::workloads::run(client.clone(), state.clone(), shutdown);
    futures::join!(
        nodes,
        pods,
        namespaces,
        reservations,
        pdbs,
        priority_classes,
        workloads,
        volumes
    );
}

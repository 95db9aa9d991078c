//! Watches (kube-rs `watcher`s) for Nodes, Pods, Namespaces, PodDisruptionBudgets,
//! PriorityClasses, Reservations and the volume objects ([`super::volumes`]): the API
//! server's cluster feed. Nodes, pods, namespaces and the policy objects preemption reads
//! go to the engine's
//! [`ClusterState`], which applies them to the snapshot and
//! the queue exactly as it applies a simulated cluster; reservations go to
//! [`KubeReservations`].
//!
//! A watch that fails is retried with backoff (counted in
//! `headroom_cluster_watch_errors_total`, logged through the shared [`ApiHealth`] when the
//! server is unreachable); when the API server answers `410 Gone`
//! (resourceVersion too old) the watcher re-lists, and the re-list is applied as a diff.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Client;
use kube::api::Api;

use super::crd::{KubeReservations, ReservationResource};
use super::health::ApiHealth;
use super::lean::Lean;
use super::watch::{ObjectKey, Reporting, WatchItem, pump};
use crate::cluster::{ClusterState, Kind};

/// Runs the watches until `stop` shows true: nodes, pods, namespaces, and reservations
/// when `reservations` is given.
pub async fn run(
    client: Client,
    state: Arc<ClusterState>,
    reservations: Option<Arc<KubeReservations>>,
    health: Arc<ApiHealth>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let reporting = Reporting {
        stats: state.stats.clone(),
        health,
    };
    let shutdown = || {
        let mut rx = stop.clone();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    };
    let s = state.clone();
    // Pods and nodes are decoded without their managedFields ([`Lean`]): the bulk of the
    // initial lists, which the first bind waits for.
    let nodes = pump::<Lean<Node>, _>(
        Kind::Node,
        Api::all(client.clone()),
        reporting.clone(),
        false,
        move |item| match item {
            WatchItem::List(l) => s.replace_nodes(l.into_iter().map(|n| n.0).collect()),
            WatchItem::Listed(keys) => s.nodes_listed(keys.into_iter().map(|k| k.name).collect()),
            WatchItem::Apply(n) => s.apply_node(n.0),
            WatchItem::Delete(n) => s.delete_node(n.0.metadata.name.as_deref().unwrap_or("")),
        },
        shutdown(),
    );
    let s = state.clone();
    let pods = pump::<Lean<Pod>, _>(
        Kind::Pod,
        Api::all(client.clone()),
        reporting.clone(),
        false,
        move |item| match item {
            WatchItem::List(l) => s.replace_pods(l.into_iter().map(|p| p.0).collect()),
            WatchItem::Listed(keys) => {
                s.pods_listed(keys.into_iter().map(ObjectKey::into_pod_id).collect())
            }
            WatchItem::Apply(p) => s.apply_pod(p.0),
            WatchItem::Delete(p) => s.delete_pod(&p.0),
        },
        shutdown(),
    );
    let s = state.clone();
    let namespaces = pump::<Namespace, _>(
        Kind::Namespace,
        Api::all(client.clone()),
        reporting.clone(),
        false,
        move |item| match item {
            WatchItem::List(l) => s.replace_namespaces(l),
            WatchItem::Listed(_) => s.namespaces_listed(),
            WatchItem::Apply(n) => s.apply_namespace(n),
            // Labels of a deleted namespace no longer matter: no pod can be in it.
            WatchItem::Delete(_) => {}
        },
        shutdown(),
    );
    let reservations = {
        let r = reservations;
        let stats = reporting.clone();
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
        reporting.clone(),
        // Few objects, replaced wholesale on a (re-)list.
        true,
        move |item| match item {
            WatchItem::List(l) => s.replace_pdbs(l),
            WatchItem::Listed(_) => {}
            WatchItem::Apply(o) => s.apply_pdb(o),
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
        reporting.clone(),
        true,
        move |item| match item {
            WatchItem::List(l) => s.replace_priority_classes(l),
            WatchItem::Listed(_) => {}
            WatchItem::Apply(o) => s.apply_priority_class(o),
            WatchItem::Delete(o) => {
                s.delete_priority_class(o.metadata.name.as_deref().unwrap_or(""))
            }
        },
        shutdown(),
    );
    let volumes = super::volumes::watch(
        client.clone(),
        state.clone(),
        reporting.clone(),
        stop.clone(),
    );
    let workloads = super::workloads::run(client.clone(), state.clone(), reporting, shutdown);
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

//! Watches of the workload objects default topology spreading reads: Services,
//! ReplicationControllers, ReplicaSets and StatefulSets ([`headroom_scheduler::snapshot::workloads`]).
//! Each is a list/watch like the other kinds ([`super::reflect`]), with its (re-)lists
//! handed over whole, reduced to the objects' selectors before they reach the snapshot.

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ReplicationController, Service};
use kube::Client;
use kube::api::Api;

use super::watch::{Reporting, WatchItem, pump};
use crate::cluster::{ClusterState, Kind};
use headroom_scheduler::snapshot::workloads::{Workload, WorkloadKind};

/// Feeds one workload kind's watch to `state` until `shutdown`.
async fn watch<K>(
    kind: WorkloadKind,
    api: Api<K>,
    state: Arc<ClusterState>,
    reporting: Reporting,
    reduce: fn(&K) -> Workload,
    shutdown: impl Future<Output = ()>,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let stats = reporting;
    pump::<K, _>(
        Kind::Workload(kind),
        api,
        stats,
        // Lists are applied whole (`replace`), which drops objects absent from a re-list.
        true,
        move |item| match item {
            WatchItem::List(l) => state.replace_workloads(kind, l.iter().map(reduce).collect()),
            WatchItem::Listed(_) => {}
            WatchItem::Apply(o) => state.apply_workload(reduce(&o)),
            WatchItem::Delete(o) => {
                let w = reduce(&o);
                state.delete_workload(kind, &w.namespace, &w.name);
            }
        },
        shutdown,
    )
    .await
}

/// Runs the four workload watches until `shutdown()`'s futures complete.
pub(crate) async fn run<S, F>(
    client: Client,
    state: Arc<ClusterState>,
    reporting: Reporting,
    shutdown: S,
) where
    S: Fn() -> F,
    F: Future<Output = ()>,
{
    futures::join!(
        watch::<Service>(
            WorkloadKind::Service,
            Api::all(client.clone()),
            state.clone(),
            reporting.clone(),
            Workload::service,
            shutdown(),
        ),
        watch::<ReplicationController>(
            WorkloadKind::ReplicationController,
            Api::all(client.clone()),
            state.clone(),
            reporting.clone(),
            Workload::replication_controller,
            shutdown(),
        ),
        watch::<ReplicaSet>(
            WorkloadKind::ReplicaSet,
            Api::all(client.clone()),
            state.clone(),
            reporting.clone(),
            Workload::replica_set,
            shutdown(),
        ),
        watch::<StatefulSet>(
            WorkloadKind::StatefulSet,
            Api::all(client),
            state,
            reporting.clone(),
            Workload::stateful_set,
            shutdown(),
        ),
    );
}

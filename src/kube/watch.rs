//! One watch (a kube-rs `watcher`) turned into [`WatchItem`]s for whoever keeps the
//! objects: the cluster feed ([`super::reflect`]), the volume objects ([`super::volumes`])
//! and the workload objects ([`super::workloads`]).

use std::collections::HashSet;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use crate::cluster::{FeedStats, Kind};
use crate::key::{PodId, PodKey};

/// Namespace, name and uid of a listed object, of any kind (nodes, pods, namespaces,
/// volume and workload objects all come through `pump`); a pod's becomes a [`PodId`]
/// with [`ObjectKey::into_pod_id`].
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

    /// The key of a listed pod as the rest of the crate identifies pods. The parts are kept
    /// as listed (a pod always has a namespace, so none is defaulted here).
    pub fn into_pod_id(self) -> PodId {
        PodId::new(PodKey::new(self.namespace, self.name), self.uid)
    }
}

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
            Ok(Event::InitApply(o)) if buffered => buffer.push(trim(o)),
            Ok(Event::InitApply(o)) => {
                listed.insert(ObjectKey::of(o.meta()));
                on(WatchItem::Apply(trim(o)));
            }
            Ok(Event::InitDone) if buffered => on(WatchItem::List(std::mem::take(&mut buffer))),
            Ok(Event::InitDone) => on(WatchItem::Listed(std::mem::take(&mut listed))),
            Ok(Event::Apply(o)) => on(WatchItem::Apply(trim(o))),
            Ok(Event::Delete(o)) => on(WatchItem::Delete(trim(o))),
            Err(e) => {
                stats.watch_error(kind);
                tracing::warn!(kind = kind.as_str(), error = %e, "watch failed; retrying with backoff");
            }
        }
    }
}

/// Drops `metadata.managedFields` from a watched object before anything keeps it, as
/// kube-scheduler's informers do (kubernetes#119556, #137473): server-side apply's field
/// ownership is often the largest part of a pod's metadata, and nothing here reads it.
/// Writes stay right: patches never carry it, and an update without it (VolumeBinding's
/// PV and claim updates) leaves the live object's field ownership as it was.
fn trim<K: kube::Resource>(mut o: K) -> K {
    o.meta_mut().managed_fields = None;
    o
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};

    /// Watched pods and nodes lose their managedFields and nothing else.
    #[test]
    fn watched_objects_lose_their_managed_fields() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply",
                    "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"containers": [{"name": "c"}]}
        }))
        .unwrap();
        assert!(pod.metadata.managed_fields.is_some());
        let mut expected = pod.clone();
        expected.metadata.managed_fields = None;
        assert_eq!(trim(pod), expected);
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "managedFields": [{"manager": "kubelet"}]}
        }))
        .unwrap();
        let node = trim(node);
        assert!(node.metadata.managed_fields.is_none());
        assert_eq!(node.metadata.name.as_deref(), Some("n"));
    }
}

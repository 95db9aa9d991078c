//! One watch (a kube-rs `watcher`) turned into [`WatchItem`]s for whoever keeps the
//! objects: the cluster feed ([`super::reflect`]), the volume objects ([`super::volumes`])
//! and the workload objects ([`super::workloads`]).

use std::collections::HashSet;
use std::sync::Arc;

use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};

use super::health::ApiHealth;
use crate::cluster::{FeedStats, Kind};
use crate::logging::{Trouble, error_chain, now};
use headroom_scheduler::key::{PodId, PodKey, Uid};

/// What every watch reports to: the cluster feed's counters and the API server's health.
#[derive(Debug, Clone)]
pub(crate) struct Reporting {
    /// `headroom_cluster_watch_errors_total` and the other feed counters.
    pub stats: FeedStats,
    /// Shared by every caller of the API server.
    pub health: Arc<ApiHealth>,
}

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
    pub uid: Uid,
}

impl ObjectKey {
    fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> ObjectKey {
        ObjectKey {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: Uid::of(meta),
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
/// ([`WatchItem::List`]). Errors are counted; the stream backs off and recovers itself, as
/// client-go's reflector does (800 ms doubling up to 30 s, reset after 2 minutes of
/// quiet). The server being unreachable is logged by the shared [`ApiHealth`]; any other
/// error (the server refusing this watch: RBAC, a missing resource) by this watch's own
/// [`Trouble`], summarised while it lasts.
pub(crate) async fn pump<K, F>(
    kind: Kind,
    api: Api<K>,
    reporting: Reporting,
    buffered: bool,
    mut on: F,
    shutdown: impl std::future::Future<Output = ()>,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: FnMut(WatchItem<K>),
{
    // No `default_backoff()`: kube's resets its delay on every item, and the watcher
    // yields `Init` before each list attempt, so a list that keeps failing would be retried
    // every 800 ms for ever. The delay is kept here, reset only by an answer.
    let stream = watcher::watcher(api, watcher::Config::default());
    let mut backoff = Backoff::default();
    let op = format!("watch of {}", kind.as_str());
    let refused = Trouble::new(format!("the {op}"), "watching again");
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
        // `Init` is the watcher starting a (re-)list, before any request: not an answer.
        if matches!(&ev, Ok(e) if !matches!(e, Event::Init)) {
            reporting.health.answered();
            refused.ok(now());
            backoff.reset();
        }
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
            // 410 Gone: the resourceVersion expired (an API server restarted, or the watch
            // fell behind). The watcher lists again at once, as a reflector does; nothing
            // failed (kube-scheduler logs it at -v 4).
            Err(watcher::Error::WatchError(s)) if s.code == 410 => {
                reporting.health.answered();
                tracing::debug!(kind = kind.as_str(), reason = %s.message, "watch expired; listing again");
            }
            Err(e) => {
                reporting.stats.watch_error(kind);
                if !reporting.health.watch_failed(&op, &e) {
                    refused.failed(now(), &op, &error_chain(&e));
                }
                tokio::select! {
                    biased;
                    _ = &mut shutdown => break,
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                }
            }
        }
    }
}

/// The delay before a failed watch or list is tried again, as client-go's reflector
/// (`NewExponentialBackoffManager(800ms, 30s, 2m, 2.0, 1.0)`): 800 ms, doubling, with up
/// to as much again of jitter, at most 30 s; back to 800 ms once the server answers.
#[derive(Debug)]
pub(crate) struct Backoff {
    base: Duration,
}

impl Backoff {
    const INITIAL: Duration = Duration::from_millis(800);
    /// kube-scheduler's reflectors' ceiling.
    pub(crate) const MAX: Duration = Duration::from_secs(30);

    /// The next delay (and doubles the one after).
    pub(crate) fn next_delay(&mut self) -> Duration {
        let jitter = rand::random::<f64>();
        let d = self.base.mul_f64(1.0 + jitter).min(Self::MAX);
        self.base = (self.base * 2).min(Self::MAX);
        d
    }

    /// The server answered: start again from 800 ms.
    pub(crate) fn reset(&mut self) {
        self.base = Self::INITIAL;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Self::INITIAL,
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

    /// The retry delay grows as kube-scheduler's reflectors' does, to 30 s, and an answer
    /// starts it over.
    #[test]
    fn watch_retries_back_off_to_thirty_seconds() {
        let mut b = Backoff::default();
        let delays: Vec<Duration> = (0..10).map(|_| b.next_delay()).collect();
        assert!(
            delays[0] >= Duration::from_millis(800) && delays[0] <= Duration::from_millis(1600)
        );
        assert!(delays[3] >= Duration::from_millis(6400), "{delays:?}");
        assert!(delays.iter().all(|d| *d <= Backoff::MAX), "{delays:?}");
        assert_eq!(delays[9], Backoff::MAX);
        // Ten failures take at least 80 s: a dozen watches against a dead server make
        // about one attempt each per 30 s, not one per second.
        assert!(delays.iter().sum::<Duration>() >= Duration::from_secs(80));
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(1600));
    }

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

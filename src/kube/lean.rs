//! Watched pods and nodes decoded without `metadata.managedFields`: [`Lean`].
//!
//! kube-scheduler's informers drop managedFields once an object is decoded
//! (kubernetes#119556); [`super::watch`] did the same, after the fact. In k8s-openapi each
//! entry's `fieldsV1` is a `serde_json::Value`, so every listed pod's field ownership was
//! built as a tree of maps and strings and then freed: at 5,000 nodes and 11,000 pods that
//! was the largest user-space cost of the initial lists, which stand between `serve`'s
//! start and its first bind (benches/README). Here the decoder skips the key instead: the
//! object is read as upstream's type with a metadata that has no such field, so the parser
//! steps over its value without building anything.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

/// A watched object `K` (a [`Pod`] or a [`Node`]) whose `metadata.managedFields` was never
/// decoded: the rest is exactly what `K`'s own decoder gives.
#[derive(Debug, Clone)]
pub struct Lean<K>(pub K);

/// An object made of metadata, a spec and a status, as pods and nodes are.
pub trait Parts: Resource<DynamicType = ()> + Sized {
    /// Its spec.
    type Spec: DeserializeOwned;
    /// Its status.
    type Status: DeserializeOwned;
    /// The object from its parts.
    fn assemble(
        metadata: ObjectMeta,
        spec: Option<Self::Spec>,
        status: Option<Self::Status>,
    ) -> Self;
}

/// [`Parts`] for a type whose fields are exactly `metadata`, `spec` and `status`.
macro_rules! parts {
    ($k:ty, $spec:ty, $status:ty) => {
        impl Parts for $k {
            type Spec = $spec;
            type Status = $status;
            fn assemble(metadata: ObjectMeta, spec: Option<$spec>, status: Option<$status>) -> $k {
                Self {
                    metadata,
                    spec,
                    status,
                }
            }
        }
    };
}

parts!(Pod, PodSpec, PodStatus);
parts!(Node, NodeSpec, NodeStatus);

/// The wire form; `apiVersion` and `kind`, when given, must be `K`'s, as `K`'s decoder
/// requires.
#[derive(Deserialize)]
#[serde(bound(deserialize = "S: DeserializeOwned, T: DeserializeOwned"))]
struct Wire<S, T> {
    #[serde(default, rename = "apiVersion")]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default, deserialize_with = "lean_meta")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<S>,
    #[serde(default)]
    status: Option<T>,
}

/// `ObjectMeta` without `managedFields`: an unknown key to this decoder, skipped unread.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Meta {
    annotations: Option<std::collections::BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<std::collections::BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

fn lean_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = Option::<Meta>::deserialize(d)?.unwrap_or_default();
    Ok(ObjectMeta {
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        generate_name: m.generate_name,
        generation: m.generation,
        labels: m.labels,
        managed_fields: None,
        name: m.name,
        namespace: m.namespace,
        owner_references: m.owner_references,
        resource_version: m.resource_version,
        self_link: m.self_link,
        uid: m.uid,
    })
}

impl<'de, K: Parts> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, Unexpected};
        let w = Wire::<K::Spec, K::Status>::deserialize(d)?;
        for (given, own) in [
            (&w.api_version, K::api_version(&())),
            (&w.kind, K::kind(&())),
        ] {
            if let Some(given) = given
                && *given != own
            {
                return Err(D::Error::invalid_value(Unexpected::Str(given), &&*own));
            }
        }
        Ok(Lean(K::assemble(w.metadata, w.spec, w.status)))
    }
}

impl<K: Parts> Resource for Lean<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn api_version(dt: &()) -> Cow<'_, str> {
        K::api_version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod and a node decode as their own types decode them, managedFields aside, from
    /// a real API server's pod (every metadata field set) and from sparse objects.
    #[test]
    fn lean_objects_equal_the_full_decode_without_managed_fields() {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "generateName": "p-",
                "resourceVersion": "7", "generation": 2, "selfLink": "/x",
                "creationTimestamp": "2026-12-07T01:00:00Z",
                "deletionTimestamp": "2026-12-07T01:05:00Z", "deletionGracePeriodSeconds": 30,
                "labels": {"a": "b"}, "annotations": {"c": "d"}, "finalizers": ["f"],
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                    "uid": "ju", "controller": true}],
                "managedFields": [{"manager": "kubectl", "operation": "Apply",
                    "apiVersion": "v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}}}}}}]},
            "spec": {"containers": [{"name": "c", "image": "i"}], "nodeName": "n"},
            "status": {"phase": "Running"}
        });
        let full: Pod = serde_json::from_value(pod.clone()).unwrap();
        assert!(full.metadata.managed_fields.is_some());
        let mut expected = full;
        expected.metadata.managed_fields = None;
        let lean: Lean<Pod> = serde_json::from_value(pod).unwrap();
        assert_eq!(lean.0, expected);

        for sparse in [
            serde_json::json!({"metadata": {"name": "n"}}),
            serde_json::json!({"metadata": null, "spec": null, "status": null}),
            serde_json::json!({}),
            serde_json::json!({"metadata": {"name": "n", "labels": null,
                "managedFields": [{"manager": "kubelet"}]},
                "status": {"allocatable": {"cpu": "4"}}}),
        ] {
            let mut full: Node = serde_json::from_value(sparse.clone()).unwrap();
            full.metadata.managed_fields = None;
            let lean: Lean<Node> = serde_json::from_value(sparse).unwrap();
            assert_eq!(lean.0, full);
        }
    }

    /// What the full decoder refuses, this one refuses too (a watch reports it as an
    /// error rather than applying half an object).
    #[test]
    fn lean_objects_refuse_what_the_full_decode_refuses() {
        for bad in [
            serde_json::json!({"metadata": {"name": 3}}),
            serde_json::json!({"metadata": {"creationTimestamp": "yesterday"}}),
            serde_json::json!({"spec": {"containers": "none"}}),
            serde_json::json!({"kind": "Node"}),
            serde_json::json!({"apiVersion": "v2"}),
            serde_json::json!("pod"),
        ] {
            assert!(serde_json::from_value::<Pod>(bad.clone()).is_err(), "{bad}");
            assert!(
                serde_json::from_value::<Lean<Pod>>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    /// A list and a watch event as the API server sends them (the fuzz seeds of
    /// `watch_objects`) decode through kube's wrappers, managedFields left out.
    #[test]
    fn lists_and_watch_events_decode_lean() {
        let seed = |f: &str| {
            let path = format!(
                "{}/fuzz/seeds/watch_objects/{f}",
                env!("CARGO_MANIFEST_DIR")
            );
            std::fs::read(path).unwrap()[1..].to_vec()
        };
        let pods: kube::core::ObjectList<Lean<Pod>> =
            serde_json::from_slice(&seed("pod-list.json")).unwrap();
        assert_eq!(pods.items.len(), 2);
        assert!(
            pods.items
                .iter()
                .all(|p| p.0.metadata.managed_fields.is_none())
        );
        assert_eq!(
            pods.items[1].0.spec.as_ref().unwrap().node_name.as_deref(),
            Some("scheduler-perf-1")
        );
        let full: kube::core::ObjectList<Pod> =
            serde_json::from_slice(&seed("pod-list.json")).unwrap();
        assert!(full.items[0].metadata.managed_fields.is_some());
        let event: kube::core::WatchEvent<Lean<Node>> =
            serde_json::from_slice(&seed("node-event.json")).unwrap();
        let kube::core::WatchEvent::Added(n) = event else {
            panic!("an ADDED event")
        };
        assert_eq!(n.0.metadata.name.as_deref(), Some("scheduler-perf-1"));
        assert!(n.0.metadata.managed_fields.is_none());
    }

    /// The API path is the wrapped type's.
    #[test]
    fn lean_objects_are_listed_where_their_type_is() {
        assert_eq!(
            Lean::<Pod>::url_path(&(), Some("ns")),
            Pod::url_path(&(), Some("ns"))
        );
        assert_eq!(Lean::<Node>::url_path(&(), None), Node::url_path(&(), None));
        assert_eq!(Lean::<Pod>::kind(&()), "Pod");
    }
}

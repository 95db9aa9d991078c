//! A pod's identity: [`PodKey`] (`namespace/name`), and [`PodId`] (one incarnation of a
//! pod: its key and its uid); and [`NodeIdx`], a node's index within one snapshot.
//!
//! Every module that finds, keys or names a pod by namespace and name uses [`PodKey`]; it
//! renders as `namespace/name` wherever a pod is shown (logs, events, JSON, text). It sits
//! below every other module (it imports none of the crate), so anything can use it without
//! an import circle; `PodKey::of` and `PodId::of`, which read a
//! [`PodInfo`](crate::snapshot::PodInfo), are defined next to `PodInfo`.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};

/// Index of a node within one snapshot (re-exported as `snapshot::NodeIdx`). Here, below
/// every module, so that what the snapshot caches by node index (`usage_context`'s rows and
/// recent-placement table) can name it without importing the snapshot.
pub type NodeIdx = u32;

/// A pod by namespace and name: `namespace/name`.
///
/// Both parts are shared strings, so a key taken from a
/// [`PodInfo`](crate::snapshot::PodInfo) (whose namespace and name are the same `Arc`s) or
/// cloned into another map allocates nothing. Keys sort as their rendering `namespace/name`
/// sorts (the order of the string keys they replaced: the simulator sums and picks victims
/// in it).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PodKey {
    /// `metadata.namespace`.
    pub namespace: Arc<str>,
    /// `metadata.name`.
    pub name: Arc<str>,
}

impl PodKey {
    /// A key from its parts.
    pub fn new(namespace: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> PodKey {
        PodKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of a pod object: its namespace (`default` when absent, as the API server
    /// defaults it) and name (empty when absent).
    pub fn of_pod(pod: &Pod) -> PodKey {
        PodKey::new(
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default(),
        )
    }

    /// Whether this is the key of the pod `namespace/name`.
    pub fn is(&self, namespace: &str, name: &str) -> bool {
        *self.namespace == *namespace && *self.name == *name
    }
}

impl Ord for PodKey {
    fn cmp(&self, other: &PodKey) -> Ordering {
        if self.namespace == other.namespace {
            return self.name.cmp(&other.name);
        }
        fn rendered(k: &PodKey) -> impl Iterator<Item = &u8> {
            k.namespace
                .as_bytes()
                .iter()
                .chain(b"/")
                .chain(k.name.as_bytes())
        }
        rendered(self)
            .cmp(rendered(other))
            // Equal renderings of different keys need a `/` in a namespace (invalid).
            .then_with(|| self.namespace.cmp(&other.namespace))
    }
}

impl PartialOrd for PodKey {
    fn partial_cmp(&self, other: &PodKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.width().is_some() || f.precision().is_some() {
            // `{:<40}` and the like pad (or cut) the whole `namespace/name`, as a string.
            return f.pad(&format!("{}/{}", self.namespace, self.name));
        }
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A string that is not `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsePodKeyError;

impl fmt::Display for ParsePodKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not NAMESPACE/NAME")
    }
}

impl std::error::Error for ParsePodKeyError {}

impl FromStr for PodKey {
    type Err = ParsePodKeyError;

    /// Parses `namespace/name` (split at the first `/`; neither part empty).
    fn from_str(s: &str) -> Result<PodKey, ParsePodKeyError> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() => Ok(PodKey::new(ns, name)),
            _ => Err(ParsePodKeyError),
        }
    }
}

/// As the string `namespace/name`.
impl Serialize for PodKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// From the string `namespace/name` (as [`PodKey::from_str`]).
impl<'de> Deserialize<'de> for PodKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PodKey, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(|_| {
            serde::de::Error::invalid_value(serde::de::Unexpected::Str(&s), &"NAMESPACE/NAME")
        })
    }
}

/// A pod's `metadata.uid`: which incarnation of a name a pod is. Empty when the object has
/// none (tests, files for `headroom place`); then the pod is told apart by its key alone.
/// A shared string: cloning it (ids, decisions, the assume cache) copies no bytes. Compares,
/// hashes, sorts and serialises as the string.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uid(Arc<str>);

impl Uid {
    /// A uid from its string.
    pub fn new(uid: impl Into<Arc<str>>) -> Uid {
        Uid(uid.into())
    }

    /// The uid of an object's metadata, empty when absent.
    pub fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Uid {
        Uid::new(meta.uid.as_deref().unwrap_or_default())
    }

    /// The uid as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the object had none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Some(uid)` unless empty (for API objects whose `uid` is optional).
    pub fn non_empty(&self) -> Option<String> {
        (!self.is_empty()).then(|| self.0.to_string())
    }
}

impl Default for Uid {
    fn default() -> Uid {
        Uid(Arc::from(""))
    }
}

impl std::ops::Deref for Uid {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Uid {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl From<&str> for Uid {
    fn from(s: &str) -> Uid {
        Uid::new(s)
    }
}

impl From<String> for Uid {
    fn from(s: String) -> Uid {
        Uid::new(s)
    }
}

impl PartialEq<str> for Uid {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Uid {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl Serialize for Uid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Uid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Uid, D::Error> {
        String::deserialize(d).map(Uid::from)
    }
}

/// One incarnation of a pod: its [`PodKey`] and its uid.
///
/// The uid tells apart a pod deleted and recreated under the same name (a StatefulSet
/// replica, say), so a late delete of the old incarnation does not remove the new one: the
/// scheduling queue and the cluster feed key pods by it. Pods without a uid (tests, files
/// for `headroom place`) have an empty uid and are told apart by their key alone.
///
/// Ids sort by namespace, then name, then uid, each part on its own (the scheduling queue
/// lists and requeues pods in this order).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodId {
    /// Namespace and name.
    pub key: PodKey,
    /// `metadata.uid`, empty when absent.
    pub uid: Uid,
}

impl PodId {
    /// An id from its parts.
    pub fn new(key: PodKey, uid: impl Into<Uid>) -> PodId {
        PodId {
            key,
            uid: uid.into(),
        }
    }

    /// The id of a pod object (its key as [`PodKey::of_pod`], its uid empty when absent).
    pub fn of_pod(pod: &Pod) -> PodId {
        PodId::new(PodKey::of_pod(pod), Uid::of(&pod.metadata))
    }
}

impl Ord for PodId {
    fn cmp(&self, other: &PodId) -> Ordering {
        fn parts(id: &PodId) -> (&str, &str, &str) {
            (&id.key.namespace, &id.key.name, &id.uid)
        }
        parts(self).cmp(&parts(other))
    }
}

impl PartialOrd for PodId {
    fn partial_cmp(&self, other: &PodId) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// As a struct of `namespace`, `name` and `uid` (`/queue` flattens it into each pending
/// pod).
impl Serialize for PodId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("PodId", 3)?;
        st.serialize_field("namespace", &*self.key.namespace)?;
        st.serialize_field("name", &*self.key.name)?;
        st.serialize_field("uid", &self.uid)?;
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A uid serialises, compares and looks up as its string, so the decision log's store
    /// format and maps keyed by uid read as before; empty is the default.
    #[test]
    fn a_uid_is_its_string() {
        let u = Uid::from("8c1e-42");
        assert_eq!(serde_json::to_string(&u).unwrap(), "\"8c1e-42\"");
        assert_eq!(serde_json::from_str::<Uid>("\"8c1e-42\"").unwrap(), u);
        assert_eq!(u, "8c1e-42");
        assert_eq!(format!("{u} {u:?}"), "8c1e-42 \"8c1e-42\"");
        let by_uid: std::collections::HashMap<Uid, u8> = [(u.clone(), 1)].into();
        assert_eq!(by_uid.get("8c1e-42"), Some(&1));
        assert!(Uid::default().is_empty() && Uid::default().non_empty().is_none());
        assert_eq!(u.non_empty().as_deref(), Some("8c1e-42"));
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"}
        }))
        .unwrap();
        assert!(PodId::of_pod(&pod).uid.is_empty());
    }

    #[test]
    fn renders_and_parses_namespace_slash_name() {
        let k = PodKey::new("ns", "web-0");
        assert_eq!(k.to_string(), "ns/web-0");
        assert_eq!("ns/web-0".parse::<PodKey>(), Ok(k.clone()));
        // Split at the first slash, as the API's `?pod=` always has.
        assert_eq!(
            "ns/a/b".parse::<PodKey>().map(|k| k.name),
            Ok(Arc::from("a/b"))
        );
        for bad in ["", "ns", "/name", "ns/"] {
            assert_eq!(bad.parse::<PodKey>(), Err(ParsePodKeyError), "{bad:?}");
        }
        assert!(k.is("ns", "web-0") && !k.is("ns", "web-1"));
        assert_eq!(format!("[{k:<10}]"), "[ns/web-0  ]");
    }

    #[test]
    fn keys_sort_as_rendered_and_ids_part_by_part() {
        // '-' sorts before '/': `a-b/x` before `a/y`, as the strings they render as.
        let mut keys = [
            PodKey::new("a", "y"),
            PodKey::new("a-b", "x"),
            PodKey::new("a", "x"),
        ];
        keys.sort();
        let shown: Vec<String> = keys.iter().map(PodKey::to_string).collect();
        let mut strings = shown.clone();
        strings.sort();
        assert_eq!(shown, strings);
        assert_eq!(shown, ["a-b/x", "a/x", "a/y"]);
        // Ids (the queue's order): namespace first, on its own.
        let id = |ns: &str, name: &str, uid: &str| PodId::new(PodKey::new(ns, name), uid);
        let mut ids = [id("a-b", "x", ""), id("a", "y", "2"), id("a", "y", "1")];
        ids.sort();
        assert_eq!(
            ids,
            [id("a", "y", "1"), id("a", "y", "2"), id("a-b", "x", "")]
        );
    }

    #[test]
    fn keys_of_pod_objects_default_the_namespace() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u1"}
        }))
        .unwrap();
        assert_eq!(PodKey::of_pod(&pod), PodKey::new("default", "p"));
        assert_eq!(PodId::of_pod(&pod).uid, "u1");
        let id = PodId::new(PodKey::new("ns", "p"), "u1");
        assert_eq!(
            serde_json::to_value(&id).unwrap(),
            serde_json::json!({"namespace": "ns", "name": "p", "uid": "u1"})
        );
    }

    #[test]
    fn serde_as_namespace_slash_name() {
        let k = PodKey::new("ns", "p");
        assert_eq!(serde_json::to_value(&k).unwrap(), serde_json::json!("ns/p"));
        assert_eq!(serde_json::from_str::<PodKey>("\"ns/p\"").unwrap(), k);
        assert!(serde_json::from_str::<PodKey>("\"p\"").is_err());
    }
}

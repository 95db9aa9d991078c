//! Pod → builder identity.
//!
//! A *builder* is what repeatedly creates pods with the same usage profile (a CI job's build
//! environment, a Deployment, a CronJob). In order:
//! 1. the configured label (default bk-ci's `bkci.dispatch.kubenetes/core`), its value as is;
//! 2. the annotation `headroom.io/builder`, its value as is;
//! 3. the owning workload, as `<namespace>/<Kind>/<name>`: ReplicaSet → Deployment (the
//!    `pod-template-hash` suffix is stripped), Job → CronJob (a Job named `<cronjob>-<digits>`),
//!    StatefulSet, DaemonSet, or any other controller as itself;
//! 4. the pod itself, as `<namespace>/Pod/<name>`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::{Deserialize, Serialize};

/// How a pod's builder identity is found (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IdentityConfig {
    /// Pod label naming the builder, used when present. Default `bkci.dispatch.kubenetes/core`
    /// (bk-ci's dispatch label). `null` disables it.
    #[serde(default = "default_builder_label")]
    pub label_key: Option<String>,
    /// Pod annotation naming the builder, used next. Default `headroom.io/builder`.
    #[serde(default = "default_builder_annotation")]
    pub annotation_key: Option<String>,
}

fn default_builder_label() -> Option<String> {
    Some("bkci.dispatch.kubenetes/core".into())
}
fn default_builder_annotation() -> Option<String> {
    Some("headroom.io/builder".into())
}

impl Default for IdentityConfig {
    fn default() -> Self {
        Self {
            label_key: default_builder_label(),
            annotation_key: default_builder_annotation(),
        }
    }
}

/// Which rule produced a [`BuilderId`] (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IdentitySource {
    /// The configured label.
    Label,
    /// The configured annotation.
    Annotation,
    /// The owning workload (`<namespace>/<Kind>/<name>`).
    Workload,
    /// No builder: the pod itself (`<namespace>/Pod/<name>`). Such a pod has no history to
    /// learn from, so nothing is remembered under it.
    Pod,
    /// Read back from the store or a file, where the rule is not recorded.
    Stored,
}

/// A builder's identity: the key profiles, runs and placement history are stored under.
///
/// It renders and serialises as its string (`build-env-42`, `ci/Deployment/web`,
/// `ci/Pod/lonely`); the rule that produced it is kept beside it so callers ask
/// [`BuilderId::is_pod`] instead of parsing the string.
#[derive(Debug, Clone, Eq, PartialOrd, Ord)]
pub struct BuilderId {
    id: String,
    source: IdentitySource,
}

impl BuilderId {
    /// An identity read back from the store or a file.
    pub fn stored(id: impl Into<String>) -> BuilderId {
        BuilderId {
            id: id.into(),
            source: IdentitySource::Stored,
        }
    }

    /// The fallback identity of a pod without a builder: `<namespace>/Pod/<name>`.
    pub fn pod(namespace: &str, name: &str) -> BuilderId {
        BuilderId {
            id: format!("{namespace}/Pod/{name}"),
            source: IdentitySource::Pod,
        }
    }

    /// The identity as text (the store's key).
    pub fn as_str(&self) -> &str {
        &self.id
    }

    /// Which rule produced it.
    pub fn source(&self) -> IdentitySource {
        self.source
    }

    /// Whether this is a bare pod's own identity (no label, annotation or owner).
    pub fn is_pod(&self) -> bool {
        self.source == IdentitySource::Pod
    }
}

// Equality and hashing are by the text: the same key is the same builder, whichever rule
// found it (a stored id equals the live one it was written from).
impl PartialEq for BuilderId {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl std::hash::Hash for BuilderId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

impl PartialEq<str> for BuilderId {
    fn eq(&self, other: &str) -> bool {
        self.id == other
    }
}

impl PartialEq<&str> for BuilderId {
    fn eq(&self, other: &&str) -> bool {
        self.id == *other
    }
}

impl std::fmt::Display for BuilderId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.id)
    }
}

impl AsRef<str> for BuilderId {
    fn as_ref(&self) -> &str {
        &self.id
    }
}

impl std::ops::Deref for BuilderId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.id
    }
}

impl serde::Serialize for BuilderId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.id)
    }
}

impl<'de> serde::Deserialize<'de> for BuilderId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(BuilderId::stored)
    }
}

/// The builder identity of a pod with metadata `meta` (see the module docs).
pub fn builder_identity(meta: &ObjectMeta, config: &IdentityConfig) -> BuilderId {
    let non_empty = |m: &Option<std::collections::BTreeMap<String, String>>,
                     key: &Option<String>| {
        let key = key.as_ref()?;
        m.as_ref()?
            .get(key)
            .filter(|v| !v.trim().is_empty())
            .cloned()
    };
    if let Some(v) = non_empty(&meta.labels, &config.label_key) {
        return BuilderId {
            id: v,
            source: IdentitySource::Label,
        };
    }
    if let Some(v) = non_empty(&meta.annotations, &config.annotation_key) {
        return BuilderId {
            id: v,
            source: IdentitySource::Annotation,
        };
    }
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    if let Some(owner) = controller_of(meta) {
        let (kind, name) = workload_of(owner, meta);
        return BuilderId {
            id: format!("{namespace}/{kind}/{name}"),
            source: IdentitySource::Workload,
        };
    }
    BuilderId::pod(namespace, meta.name.as_deref().unwrap_or(""))
}

fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    let owners = meta.owner_references.as_ref()?;
    owners
        .iter()
        .find(|o| o.controller == Some(true))
        .or_else(|| owners.first())
}

/// The workload behind the pod's controlling owner.
fn workload_of<'a>(owner: &'a OwnerReference, meta: &'a ObjectMeta) -> (&'a str, String) {
    match owner.kind.as_str() {
        "ReplicaSet" => {
            // Deployment-made ReplicaSets are `<deployment>-<pod-template-hash>`; the pod
            // carries the same hash as a label. A bare ReplicaSet has no such label.
            let hash = meta
                .labels
                .as_ref()
                .and_then(|l| l.get("pod-template-hash"))
                .filter(|h| !h.is_empty());
            if let Some(hash) = hash
                && let Some(deployment) = owner
                    .name
                    .strip_suffix(hash.as_str())
                    .and_then(|s| s.strip_suffix('-'))
                && !deployment.is_empty()
            {
                return ("Deployment", deployment.to_owned());
            }
            ("ReplicaSet", owner.name.clone())
        }
        "Job" => match cronjob_of_job(&owner.name) {
            Some(cronjob) => ("CronJob", cronjob.to_owned()),
            None => ("Job", owner.name.clone()),
        },
        kind => (kind, owner.name.clone()),
    }
}

/// The CronJob controller names Jobs `<cronjob>-<scheduled time in minutes since the epoch>`:
/// eight or more digits today. Requiring that many keeps `migrate-2` a plain Job.
fn cronjob_of_job(job: &str) -> Option<&str> {
    let (prefix, digits) = job.rsplit_once('-')?;
    (digits.len() >= 8 && digits.bytes().all(|b| b.is_ascii_digit()) && !prefix.is_empty())
        .then_some(prefix)
}

/// What is known of a pod from the lister.
#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn meta(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ci".into()),
            ..Default::default()
        }
    }

    fn owned(mut m: ObjectMeta, kind: &str, owner: &str) -> ObjectMeta {
        m.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: owner.into(),
            uid: "u".into(),
            controller: Some(true),
            block_owner_deletion: None,
        }]);
        m
    }

    fn with_labels(mut m: ObjectMeta, labels: &[(&str, &str)]) -> ObjectMeta {
        m.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        m
    }

    #[test]
    fn label_then_annotation_then_owner_then_pod() {
        let c = IdentityConfig::default();
        let m = with_labels(
            meta("p"),
            &[("bkci.dispatch.kubenetes/core", "build-env-42")],
        );
        assert_eq!(builder_identity(&m, &c), "build-env-42");

        let mut m = meta("p");
        m.annotations = Some([("headroom.io/builder".to_string(), "android".to_string())].into());
        assert_eq!(
            builder_identity(&owned(m, "StatefulSet", "db"), &c),
            "android"
        );

        assert_eq!(
            builder_identity(&owned(meta("db-0"), "StatefulSet", "db"), &c),
            "ci/StatefulSet/db"
        );
        assert_eq!(
            builder_identity(&owned(meta("x"), "DaemonSet", "agent"), &c),
            "ci/DaemonSet/agent"
        );
        assert_eq!(builder_identity(&meta("lonely"), &c), "ci/Pod/lonely");
    }

    #[test]
    fn empty_label_value_falls_through() {
        let c = IdentityConfig::default();
        let m = with_labels(meta("p"), &[("bkci.dispatch.kubenetes/core", " ")]);
        assert_eq!(builder_identity(&m, &c), "ci/Pod/p");
    }

    #[test]
    fn replicaset_to_deployment_via_template_hash() {
        let c = IdentityConfig::default();
        let m = with_labels(
            owned(meta("web-7d4b9c-abcde"), "ReplicaSet", "web-7d4b9c"),
            &[("pod-template-hash", "7d4b9c")],
        );
        assert_eq!(builder_identity(&m, &c), "ci/Deployment/web");
        // A bare ReplicaSet (no hash label) stays a ReplicaSet.
        let m = owned(meta("rs-abcde"), "ReplicaSet", "rs");
        assert_eq!(builder_identity(&m, &c), "ci/ReplicaSet/rs");
        // A hash that does not match the owner's suffix is not stripped.
        let m = with_labels(
            owned(meta("x"), "ReplicaSet", "web-1"),
            &[("pod-template-hash", "zzz")],
        );
        assert_eq!(builder_identity(&m, &c), "ci/ReplicaSet/web-1");
    }

    #[test]
    fn job_to_cronjob() {
        let c = IdentityConfig::default();
        assert_eq!(
            builder_identity(&owned(meta("p"), "Job", "nightly-29012345"), &c),
            "ci/CronJob/nightly"
        );
        assert_eq!(
            builder_identity(&owned(meta("p"), "Job", "migrate-2"), &c),
            "ci/Job/migrate-2"
        );
        assert_eq!(
            builder_identity(&owned(meta("p"), "Job", "-29012345"), &c),
            "ci/Job/-29012345"
        );
    }

    #[test]
    fn disabled_label_key() {
        let c = IdentityConfig {
            label_key: None,
            annotation_key: None,
        };
        let m = with_labels(meta("p"), &[("bkci.dispatch.kubenetes/core", "x")]);
        assert_eq!(builder_identity(&m, &c), "ci/Pod/p");
    }
}

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

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::config::IdentityConfig;

/// Source of pod metadata (labels, owners, phase), e.g. an informer cache in the CLI.
///
/// Sync on purpose: reflector stores are read synchronously, and the collectors call this
/// once per cycle.
pub trait PodLister: Send + Sync {
    /// The pods currently known.
    fn pods(&self) -> Vec<Pod>;
}

/// A fixed list of pods (tests, or a one-off listing).
#[derive(Debug, Clone, Default)]
pub struct StaticPods(pub Vec<Pod>);

impl PodLister for StaticPods {
    fn pods(&self) -> Vec<Pod> {
        self.0.clone()
    }
}

/// The builder identity of a pod with metadata `meta` (see the module docs).
pub fn builder_identity(meta: &ObjectMeta, config: &IdentityConfig) -> String {
    let non_empty = |m: &Option<std::collections::BTreeMap<String, String>>,
                     key: &Option<String>| {
        let key = key.as_ref()?;
        m.as_ref()?
            .get(key)
            .filter(|v| !v.trim().is_empty())
            .cloned()
    };
    if let Some(v) = non_empty(&meta.labels, &config.label_key) {
        return v;
    }
    if let Some(v) = non_empty(&meta.annotations, &config.annotation_key) {
        return v;
    }
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    if let Some(owner) = controller_of(meta) {
        let (kind, name) = workload_of(owner, meta);
        return format!("{namespace}/{kind}/{name}");
    }
    format!("{namespace}/Pod/{}", meta.name.as_deref().unwrap_or(""))
}

/// Fallback identity when no metadata is known for a pod.
pub fn pod_identity(namespace: &str, name: &str) -> String {
    format!("{namespace}/Pod/{name}")
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
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PodInfo {
    pub builder: String,
    /// Phase `Succeeded` or `Failed`: the run is over even if stats still list it.
    pub ended: bool,
}

/// Pod metadata indexed by UID and by `namespace/name`.
#[derive(Debug, Default)]
pub(crate) struct PodIndex {
    by_uid: HashMap<String, PodInfo>,
    by_name: HashMap<String, PodInfo>,
}

impl PodIndex {
    pub fn build(pods: &[Pod], config: &IdentityConfig) -> Self {
        let mut index = PodIndex::default();
        for pod in pods {
            let meta = &pod.metadata;
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            let info = PodInfo {
                builder: builder_identity(meta, config),
                ended: matches!(phase, Some("Succeeded" | "Failed")),
            };
            if let (Some(ns), Some(name)) = (&meta.namespace, &meta.name) {
                index.by_name.insert(format!("{ns}/{name}"), info.clone());
            }
            if let Some(uid) = &meta.uid {
                index.by_uid.insert(uid.clone(), info);
            }
        }
        index
    }

    pub fn get(&self, uid: &str, namespace: &str, name: &str) -> Option<&PodInfo> {
        self.by_uid
            .get(uid)
            .or_else(|| self.by_name.get(&format!("{namespace}/{name}")))
    }
}

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

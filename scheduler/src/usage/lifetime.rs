//! Whether a pod runs until it is removed (a service, a database) or to completion (a
//! build), and whether two pods are replicas of one workload.
//!
//! RealHeadroom places the two kinds differently (`longRunningStrategy`): a build is
//! placed for a while and leaves, a service stays. Packing the services together keeps
//! their permanent load on few nodes and leaves the others whole for builds, whose real
//! memory can come close to a node's and whose caches live on the nodes they ran on.
//!
//! Kubernetes has no field that says "service"; the signals, in order:
//! 1. a builder identity from the configured label or annotation: a build (bk-ci keeps
//!    its builders in pods that restart);
//! 2. `restartPolicy: Never` or `OnFailure`: the pod runs to completion (Jobs, and the bare
//!    agent pods of Jenkins and GitLab runners);
//! 3. a Job as the controlling owner: a build;
//! 4. anything else — a Deployment's, StatefulSet's or DaemonSet's pod, or a bare pod with
//!    the default `restartPolicy: Always` — runs until removed.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::identity::{BuilderId, IdentitySource};

/// Whether `pod`, whose builder identity is `builder`, runs until it is removed (see the
/// module docs for the rule).
pub fn runs_until_removed(pod: &Pod, builder: &BuilderId) -> bool {
    if matches!(
        builder.source(),
        IdentitySource::Label | IdentitySource::Annotation
    ) {
        return false;
    }
    let policy = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref());
    if matches!(policy, Some("Never" | "OnFailure")) {
        return false;
    }
    controller(pod).is_none_or(|o| o.kind != "Job")
}

/// Whether `a` and `b` are replicas of one workload: the same controlling owner (by uid,
/// else by kind and name) in one namespace, or, for two pods without an owner, the same
/// non-empty labels (a StatefulSet's pods differ in their per-pod labels, so the owner is
/// compared first).
pub fn same_workload(a: &Pod, b: &Pod) -> bool {
    if a.metadata.namespace != b.metadata.namespace {
        return false;
    }
    match (controller(a), controller(b)) {
        (Some(x), Some(y)) => {
            if !x.uid.is_empty() && !y.uid.is_empty() {
                x.uid == y.uid
            } else {
                x.kind == y.kind && x.name == y.name
            }
        }
        (None, None) => {
            let labels = &a.metadata.labels;
            labels.as_ref().is_some_and(|l| !l.is_empty()) && *labels == b.metadata.labels
        }
        _ => false,
    }
}

fn controller(pod: &Pod) -> Option<&OwnerReference> {
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::{IdentityConfig, builder_identity};
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn long(p: &Pod) -> bool {
        runs_until_removed(
            p,
            &builder_identity(&p.metadata, &IdentityConfig::default()),
        )
    }

    fn owned(kind: &str, name: &str, uid: &str, labels: serde_json::Value) -> Pod {
        pod(
            json!({"metadata": {"name": format!("{name}-x"), "namespace": "ci", "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": kind, "name": name,
                "uid": uid, "controller": true}]}}),
        )
    }

    #[test]
    fn services_run_until_removed_and_builds_do_not() {
        // A Deployment's pod, a StatefulSet's, a bare pod with the default policy.
        assert!(long(&owned(
            "ReplicaSet",
            "web-6d4f",
            "u1",
            json!({"app": "web"})
        )));
        assert!(long(&owned("StatefulSet", "mysql", "u2", json!({}))));
        assert!(long(&pod(
            json!({"metadata": {"name": "p", "namespace": "ci"}})
        )));
        // bk-ci's builder label, even on a pod that restarts.
        assert!(!long(&pod(
            json!({"metadata": {"name": "b", "namespace": "ci",
            "labels": {"bkci.dispatch.kubenetes/core": "env-1"}},
            "spec": {"restartPolicy": "Always", "containers": []}})
        )));
        // A Job's pod, and bare agents that run to completion.
        assert!(!long(&owned("Job", "build-7", "u3", json!({}))));
        for policy in ["Never", "OnFailure"] {
            assert!(!long(&pod(
                json!({"metadata": {"name": "jenkins-agent", "namespace": "ci"},
                "spec": {"restartPolicy": policy, "containers": []}})
            )));
        }
    }

    #[test]
    fn replicas_share_an_owner_or_their_labels() {
        let a = owned(
            "StatefulSet",
            "mysql",
            "u2",
            json!({"statefulset.kubernetes.io/pod-name": "mysql-0"}),
        );
        let b = owned(
            "StatefulSet",
            "mysql",
            "u2",
            json!({"statefulset.kubernetes.io/pod-name": "mysql-1"}),
        );
        let other = owned("StatefulSet", "pg", "u9", json!({}));
        assert!(same_workload(&a, &b));
        assert!(!same_workload(&a, &other));
        let bare = |name: &str, labels: serde_json::Value| {
            pod(json!({"metadata": {"name": name, "namespace": "ci", "labels": labels}}))
        };
        assert!(same_workload(
            &bare("s-1", json!({"app": "svc"})),
            &bare("s-2", json!({"app": "svc"}))
        ));
        assert!(!same_workload(
            &bare("s-1", json!({"app": "svc"})),
            &bare("d-1", json!({"app": "db"}))
        ));
        // Nothing says two unlabelled bare pods belong together.
        assert!(!same_workload(&bare("x", json!({})), &bare("y", json!({}))));
        // An owned pod and a bare one never are, nor pods of two namespaces.
        assert!(!same_workload(&a, &bare("s-1", json!({}))));
        let mut c = b.clone();
        c.metadata.namespace = Some("prod".into());
        assert!(!same_workload(&a, &c));
    }
}

//! Binding through the `pods/binding` subresource, as kube-scheduler's DefaultBinder does:
//! `POST /api/v1/namespaces/NS/pods/NAME/binding` with a `Binding` whose `metadata.uid` is
//! the pod's uid (a precondition: a pod deleted and recreated under the same name is not
//! bound by mistake) and whose `target` is the node.
//!
//! Failures, as upstream handles them:
//! - `409 Conflict` (the pod is already bound, or the uid precondition failed) and `404`:
//!   the pod is looked up once; if it is bound, gone or replaced it leaves the queue (no
//!   blind retry), the watch brings whatever replaced it;
//! - anything else (timeouts, 5xx): the assumed pod is forgotten and the pod requeued with
//!   backoff by the scheduling loop.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::mpsc;

use super::extender::{ExtenderBinder, ExtenderBindingArgs};
use crate::framework::{BindPlugin, BoxFuture, Plugin, Status};
use crate::queue::{PodKey, SchedulingQueue};
use crate::snapshot::PodInfo;

/// Why a bind failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// 409: the pod is bound already, or its uid is not the one we scheduled.
    #[error("binding rejected: {0}")]
    Conflict(String),
    /// 404: the pod is gone.
    #[error("binding rejected: {0}")]
    NotFound(String),
    /// Any other API error.
    #[error("binding failed: {0}")]
    Api(String),
    /// No answer within the request timeout.
    #[error("binding timed out after {0:?}")]
    Timeout(Duration),
}

impl BindError {
    /// Whether retrying the same bind can never succeed (409/404).
    pub fn is_final(&self) -> bool {
        matches!(self, BindError::Conflict(_) | BindError::NotFound(_))
    }
}

/// The `Binding` object for `namespace/name` (uid as precondition when non-empty) to `node`.
pub fn binding(namespace: &str, name: &str, uid: &str, node: &str) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            uid: (!uid.is_empty()).then(|| uid.to_string()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Node".to_string()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    }
}

/// One `pods/binding` call.
pub async fn bind_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: &str,
    node: &str,
    timeout: Duration,
) -> Result<(), BindError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let body = binding(namespace, name, uid, node);
    let pp = PostParams::default();
    let call = api.create_subresource::<_, serde_json::Value>("binding", name, &pp, &body);
    match tokio::time::timeout(timeout, call).await {
        Err(_) => Err(BindError::Timeout(timeout)),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kube::Error::Api(s))) if s.code == 409 => Err(BindError::Conflict(s.message)),
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => Err(BindError::NotFound(s.message)),
        Ok(Err(e)) => Err(BindError::Api(e.to_string())),
    }
}

/// The result of one bind, for the reporter (events, annotations, history).
#[derive(Debug, Clone)]
pub struct BindOutcome {
    /// The pod (as it was scheduled).
    pub pod: Arc<PodInfo>,
    /// The node.
    pub node: String,
    /// Ok, or why not.
    pub result: Result<(), BindError>,
}

/// The scheduler's binder under `serve`.
pub struct ApiBinder {
    client: Client,
    queue: Option<Arc<SchedulingQueue>>,
    outcomes: Option<mpsc::Sender<BindOutcome>>,
    timeout: Duration,
}

impl ApiBinder {
    /// A binder over `client`. `queue`: where pods that can never bind are dropped from;
    /// `outcomes`: where results go for reporting.
    pub fn new(
        client: Client,
        queue: Option<Arc<SchedulingQueue>>,
        outcomes: Option<mpsc::Sender<BindOutcome>>,
        timeout: Duration,
    ) -> ApiBinder {
        ApiBinder {
            client,
            queue,
            outcomes,
            timeout,
        }
    }

    /// After a 409/404: is the pod bound, gone or replaced? Then it leaves the queue, so
    /// the scheduling loop's requeue drops it.
    async fn settle_final(&self, pod: &PodInfo) {
        let Some(queue) = &self.queue else { return };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let current = tokio::time::timeout(self.timeout, api.get_opt(&pod.name)).await;
        let drop_it = match current {
            Ok(Ok(None)) => true,
            Ok(Ok(Some(p))) => {
                let bound = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some();
                let replaced = p.metadata.uid.as_deref().unwrap_or("") != pod.uid;
                bound || replaced
            }
            // Unknown: leave it to backoff and the watch.
            _ => false,
        };
        if drop_it {
            queue.delete(&PodKey::of(pod));
        }
    }
}

impl Plugin for ApiBinder {
    fn name(&self) -> &'static str {
        "DefaultBinder"
    }
}

impl BindPlugin for ApiBinder {
    fn bind<'a>(&'a self, pod: &'a PodInfo, node: &'a str) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            let result = bind_pod(
                &self.client,
                &pod.namespace,
                &pod.name,
                &pod.uid,
                node,
                self.timeout,
            )
            .await;
            if let Err(e) = &result {
                tracing::info!(pod = %pod.key(), node, error = %e, "bind failed");
                if e.is_final() {
                    self.settle_final(pod).await;
                }
            }
            let status = match &result {
                Ok(()) => Status::success(),
                Err(e) => Status::error(e.to_string()),
            };
            if let Some(tx) = &self.outcomes {
                // The reporter is best effort: a full channel loses an event, not a bind.
                let _ = tx.try_send(BindOutcome {
                    pod: Arc::new(pod.clone()),
                    node: node.to_string(),
                    result,
                });
            }
            status
        })
    }
}

impl ExtenderBinder for ApiBinder {
    fn bind<'a>(&'a self, args: &'a ExtenderBindingArgs) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            bind_pod(
                &self.client,
                &args.pod_namespace,
                &args.pod_name,
                &args.pod_uid,
                &args.node,
                self.timeout,
            )
            .await
            .map_err(|e| e.to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_body_matches_kube_scheduler() {
        // The body of the recorded kube-scheduler binding request.
        let recorded = serde_json::json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": "plain-1", "namespace": "default", "uid": "db9e6ddb-f83e-4861-b336-8e9aca6f5164"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"}
        });
        let mine = serde_json::to_value(binding(
            "default",
            "plain-1",
            "db9e6ddb-f83e-4861-b336-8e9aca6f5164",
            "node-a",
        ))
        .unwrap();
        assert_eq!(mine, recorded);
        let no_uid = serde_json::to_value(binding("default", "missing-pod", "", "node-a")).unwrap();
        assert!(no_uid["metadata"].get("uid").is_none());
        assert!(BindError::Conflict("x".into()).is_final());
        assert!(!BindError::Timeout(Duration::from_secs(1)).is_final());
    }
}

//! Binding through the `pods/binding` subresource, as kube-scheduler's DefaultBinder does:
//! `POST /api/v1/namespaces/NS/pods/NAME/binding` with a `Binding` whose `metadata.uid` is
//! the pod's uid (a precondition: a pod deleted and recreated under the same name is not
//! bound by mistake) and whose `target` is the node.
//!
//! Failures, as upstream handles them:
//! - `409 Conflict` (the pod is already bound, or the uid precondition failed) and `404`:
//!   the pod is looked up once; if it is bound, gone or replaced it leaves the queue (no
//!   blind retry), the watch brings whatever replaced it;
//! - a timeout: the bind may have gone through, so the pod is looked up first: bound to
//!   our node counts as bound; bound elsewhere, gone or replaced leaves the queue; still
//!   pending is retried;
//! - anything else (429, 5xx): the assumed pod is forgotten and the pod requeued with
//!   backoff by the scheduling loop.
//!
//! Every bind goes through the flow controller ([`super::flow`]): a congestion window on
//! binds in flight that shrinks on 429s, 5xx, timeouts and slow answers and grows on fast
//! ones, a `Retry-After` pause, and an optional client-side rate limit.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};

use prometheus_client::metrics::counter::Counter;

use super::extender::{ExtenderBinder, ExtenderBindingArgs};
use super::flow::{BindFlow, Signal};
use super::health::ApiHealth;
use crate::logging::Trouble;
use headroom_scheduler::framework::{BindPlugin, BoxFuture, Plugin, Status};
use headroom_scheduler::key::PodId;
use headroom_scheduler::queue::SchedulingQueue;
use headroom_scheduler::snapshot::PodInfo;

/// Why a bind failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// 409: the pod is bound already, or its uid is not the one we scheduled.
    #[error("binding rejected: {0}")]
    Conflict(String),
    /// 404: the pod is gone.
    #[error("binding rejected: {0}")]
    NotFound(String),
    /// 429: the API server asks clients to slow down (for `retry_after`, when it says).
    #[error("binding throttled by the API server: {message}")]
    Throttled {
        /// The server's message.
        message: String,
        /// Its `retryAfterSeconds`, when given.
        retry_after: Option<Duration>,
    },
    /// 5xx: the API server failed or is overloaded.
    #[error("binding failed: the API server answered {code}: {message}")]
    Unavailable {
        /// The status code.
        code: u16,
        /// The server's message.
        message: String,
    },
    /// Any other API error.
    #[error("binding failed: {0}")]
    Api(String),
    /// The API server could not be reached (the connection failed).
    #[error("binding failed: {0}")]
    Unreachable(String),
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

/// The `Binding` object for `namespace/name` (uid as precondition when non-empty) to `node`,
/// carrying `annotations` for the pod (none: kube-scheduler's exact body).
pub fn binding(
    namespace: &str,
    name: &str,
    uid: &str,
    node: &str,
    annotations: &headroom_scheduler::framework::BindAnnotations,
) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            uid: (!uid.is_empty()).then(|| uid.to_string()),
            annotations: (!annotations.is_empty()).then(|| annotations.clone()),
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
    annotations: &headroom_scheduler::framework::BindAnnotations,
    timeout: Duration,
) -> Result<(), BindError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let body = binding(namespace, name, uid, node, annotations);
    let pp = PostParams::default();
    let call = api.create_subresource::<_, serde_json::Value>("binding", name, &pp, &body);
    match tokio::time::timeout(timeout, call).await {
        Err(_) => Err(BindError::Timeout(timeout)),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kube::Error::Api(s))) => Err(match s.code {
            409 => BindError::Conflict(s.message),
            404 => BindError::NotFound(s.message),
            429 => BindError::Throttled {
                retry_after: s
                    .details
                    .as_ref()
                    .map(|d| d.retry_after_seconds)
                    .filter(|r| *r > 0)
                    .map(|r| Duration::from_secs(u64::from(r))),
                message: s.message,
            },
            code @ 500..=599 => BindError::Unavailable {
                code,
                message: s.message,
            },
            _ => BindError::Api(s.message),
        }),
        Ok(Err(e)) if super::health::unreachable(&e) => {
            Err(BindError::Unreachable(crate::logging::error_chain(&e)))
        }
        Ok(Err(e)) => Err(BindError::Api(crate::logging::error_chain(&e))),
    }
}

impl BindError {
    /// What this outcome tells the flow controller.
    fn signal(&self, latency: Duration) -> Signal {
        match self {
            BindError::Throttled { retry_after, .. } => Signal::Throttled(*retry_after),
            BindError::Unavailable { .. } | BindError::Timeout(_) | BindError::Unreachable(_) => {
                Signal::Overloaded
            }
            BindError::Conflict(_) | BindError::NotFound(_) | BindError::Api(_) => {
                Signal::Answered(latency)
            }
        }
    }
}

/// Counters of the binder (`headroom_bind_*_total` once registered).
#[derive(Debug, Clone, Default)]
pub struct BindStats {
    /// Binds that timed out.
    pub timeouts: Counter,
    /// After a timeout, the pod was found bound to our node: the bind had succeeded.
    pub timeouts_bound: Counter,
    /// `429` answers.
    pub throttled: Counter,
}

impl BindStats {
    /// Registers the counters on `metrics`.
    pub fn register(&self, metrics: &crate::metrics::Metrics) {
        metrics.register(
            "headroom_bind_timeouts",
            "Binds with no answer within serve.requestTimeout (each then looked up)",
            self.timeouts.clone(),
        );
        metrics.register(
            "headroom_bind_timeouts_bound",
            "Timed-out binds that the lookup found done (not retried)",
            self.timeouts_bound.clone(),
        );
        metrics.register(
            "headroom_bind_throttled",
            "Binds the API server answered with 429 Too Many Requests",
            self.throttled.clone(),
        );
    }
}

/// The scheduler's binder under `serve`.
pub struct ApiBinder {
    client: Client,
    queue: Option<Arc<SchedulingQueue>>,
    timeout: Duration,
    flow: Option<Arc<BindFlow>>,
    stats: BindStats,
    /// Where an unreachable API server is reported (shared with the watches and the rest).
    health: Option<Arc<ApiHealth>>,
    /// Binds the server refused or did not answer in time, summarised while they go on
    /// (one line per pod at debug).
    refused: Trouble,
}

/// What a lookup after a timed-out bind found.
enum Lookup {
    /// Bound to the node we asked for: the bind went through.
    BoundHere,
    /// Bound elsewhere, gone, or replaced: never retry.
    Settled,
    /// Still pending (or the lookup failed): retry with backoff.
    Pending,
}

impl ApiBinder {
    /// A binder over `client`. `queue`: where pods that can never bind are dropped from
    /// (the scheduling loop reports every bind's result to the engine's decision sink).
    pub fn new(
        client: Client,
        queue: Option<Arc<SchedulingQueue>>,
        timeout: Duration,
    ) -> ApiBinder {
        ApiBinder {
            client,
            queue,
            timeout,
            flow: None,
            stats: BindStats::default(),
            health: None,
            refused: Trouble::new("binds", "binding again"),
        }
    }

    /// Reports the API server's reachability to `health`.
    pub fn with_health(mut self, health: Arc<ApiHealth>) -> ApiBinder {
        self.health = Some(health);
        self
    }

    /// Logs what a bind came to: a failure summarised (by the shared health when the
    /// server is unreachable, else by the binder's own trouble), and each pod's at debug.
    fn report(&self, pod: &PodInfo, node: &str, result: &Result<(), BindError>) {
        let now = crate::logging::now();
        let unreachable = matches!(
            result,
            Err(BindError::Unreachable(_)
                | BindError::Unavailable {
                    code: 503 | 504,
                    ..
                })
        );
        match (result, &self.health) {
            (Err(e), Some(h)) if unreachable => {
                h.lost("bind", e);
            }
            (Err(e), _) => {
                if let (Some(h), false) = (&self.health, matches!(e, BindError::Timeout(_))) {
                    h.answered();
                }
                // A 409 or 404 is the pod bound, replaced or gone meanwhile: an answer that
                // settles the pod, not a trouble (its line is the debug one below).
                if !e.is_final() {
                    self.refused.failed(now, "bind", e);
                }
            }
            (Ok(()), h) => {
                if let Some(h) = h {
                    h.answered();
                }
                self.refused.ok(now);
            }
        }
        if let Err(e) = result {
            tracing::debug!(pod = %pod.key(), node, error = %e, "bind failed");
        }
    }

    /// Binds through `flow` (the congestion window and rate limit), counting into `stats`.
    pub fn with_flow(mut self, flow: Arc<BindFlow>, stats: BindStats) -> ApiBinder {
        self.flow = Some(flow);
        self.stats = stats;
        self
    }

    /// After a timeout: the bind may have gone through (the server timed out answering,
    /// not binding). Look before retrying, so no pod is bound twice and none is lost.
    async fn lookup(&self, pod: &PodInfo, node: &str) -> Lookup {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        match tokio::time::timeout(self.timeout, api.get_opt(&pod.name)).await {
            Ok(Ok(None)) => Lookup::Settled,
            Ok(Ok(Some(p))) => {
                let replaced = p.metadata.uid.as_deref().unwrap_or("") != pod.uid;
                match p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                    _ if replaced => Lookup::Settled,
                    Some(n) if n == node => Lookup::BoundHere,
                    Some(_) => Lookup::Settled,
                    None => Lookup::Pending,
                }
            }
            _ => Lookup::Pending,
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
            queue.delete(&PodId::of(pod));
        }
    }
}

impl Plugin for ApiBinder {
    fn name(&self) -> &'static str {
        "DefaultBinder"
    }
}

impl BindPlugin for ApiBinder {
    fn bind<'a>(
        &'a self,
        pod: &'a PodInfo,
        node: &'a str,
        annotations: &'a headroom_scheduler::framework::BindAnnotations,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            let permit = match &self.flow {
                Some(f) => Some(f.acquire().await),
                None => None,
            };
            let started = tokio::time::Instant::now();
            let mut result = bind_pod(
                &self.client,
                &pod.namespace,
                &pod.name,
                &pod.uid,
                node,
                annotations,
                self.timeout,
            )
            .await;
            if let Some(p) = permit {
                p.done(match &result {
                    Ok(()) => Signal::Answered(started.elapsed()),
                    Err(e) => e.signal(started.elapsed()),
                });
            }
            match &result {
                Err(BindError::Timeout(_)) => {
                    self.stats.timeouts.inc();
                    match self.lookup(pod, node).await {
                        Lookup::BoundHere => {
                            self.stats.timeouts_bound.inc();
                            result = Ok(());
                        }
                        Lookup::Settled => {
                            if let Some(queue) = &self.queue {
                                queue.delete(&PodId::of(pod));
                            }
                        }
                        Lookup::Pending => {}
                    }
                }
                Err(BindError::Throttled { .. }) => {
                    self.stats.throttled.inc();
                }
                _ => {}
            }
            self.report(pod, node, &result);
            if let Err(e) = &result
                && e.is_final()
            {
                self.settle_final(pod).await;
            }
            match &result {
                Ok(()) => Status::success(),
                Err(e) => Status::error(e.to_string()),
            }
        })
    }
}

impl ExtenderBinder for ApiBinder {
    fn bind<'a>(
        &'a self,
        args: &'a ExtenderBindingArgs,
    ) -> BoxFuture<'a, Result<ObjectMeta, String>> {
        Box::pin(async move {
            // Only a pending pod, the one the caller names by uid: an extender that binds
            // whatever it is asked to is a way around the scheduler.
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &args.pod_namespace);
            let pod = tokio::time::timeout(self.timeout, api.get_opt(&args.pod_name))
                .await
                .map_err(|_| {
                    format!(
                        "looking up pod {}/{} timed out",
                        args.pod_namespace, args.pod_name
                    )
                })?
                .map_err(|e| {
                    format!(
                        "looking up pod {}/{}: {e}",
                        args.pod_namespace, args.pod_name
                    )
                })?
                .ok_or_else(|| {
                    format!(
                        "pod {}/{} does not exist",
                        args.pod_namespace, args.pod_name
                    )
                })?;
            if pod.metadata.uid.as_deref() != Some(args.pod_uid.as_str()) {
                return Err(format!(
                    "pod {}/{} has uid {:?}, not {:?}",
                    args.pod_namespace,
                    args.pod_name,
                    pod.metadata.uid.as_deref().unwrap_or(""),
                    args.pod_uid
                ));
            }
            if let Some(n) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                return Err(format!(
                    "pod {}/{} is already bound to {n}",
                    args.pod_namespace, args.pod_name
                ));
            }
            bind_pod(
                &self.client,
                &args.pod_namespace,
                &args.pod_name,
                &args.pod_uid,
                &args.node,
                &Default::default(),
                self.timeout,
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(pod.metadata)
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
            &Default::default(),
        ))
        .unwrap();
        assert_eq!(mine, recorded);
        let no_uid = serde_json::to_value(binding(
            "default",
            "missing-pod",
            "",
            "node-a",
            &Default::default(),
        ))
        .unwrap();
        assert!(no_uid["metadata"].get("uid").is_none());
        assert!(no_uid["metadata"].get("annotations").is_none());
        let annotated = serde_json::to_value(binding(
            "default",
            "p",
            "",
            "node-a",
            &headroom_scheduler::framework::BindAnnotations::from([(
                "a".to_string(),
                "b".to_string(),
            )]),
        ))
        .unwrap();
        assert_eq!(annotated["metadata"]["annotations"]["a"], "b");
        assert!(BindError::Conflict("x".into()).is_final());
        assert!(!BindError::Timeout(Duration::from_secs(1)).is_final());
    }
}

//! Binding through the `pods/binding` subresource, as kube-scheduler's DefaultBinder does:
//! `POST /api/v1/namespaces/NS/pods/NAME/binding` with a `Binding` whose `metadata.uid` is
//! the pod's uid (a precondition: a pod deleted and recreated under the same name is not
//! bound by mistake) and whose `target` is the node.
//!
//! Failures, as upstream handles them, each a [`BindOutcome`] the scheduling loop acts on
//! (the binder itself touches neither the queue nor the cache):
//! - `409 Conflict` (the pod is already bound, or the uid precondition failed) and `404`:
//!   the pod is looked up once: gone or replaced is [`BindOutcome::Gone`], bound is
//!   [`BindOutcome::Conflict`] (both leave the queue, no blind retry; the watch brings
//!   whatever replaced it); a failed lookup is [`BindOutcome::Retry`];
//! - a timeout: the bind may have gone through, so the pod is looked up first: bound to
//!   our node counts as bound; bound elsewhere is a conflict, gone or replaced gone; still
//!   pending is retried;
//! - anything else (429, 5xx): [`BindOutcome::Retry`], with backoff.
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
use headroom_scheduler::framework::{BindOutcome, BindPlugin, BoxFuture, Plugin};
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
    timeout: Duration,
    flow: Option<Arc<BindFlow>>,
    stats: BindStats,
    /// Where an unreachable API server is reported (shared with the watches and the rest).
    health: Option<Arc<ApiHealth>>,
    /// Binds the server refused or did not answer in time, summarised while they go on
    /// (one line per pod at debug).
    refused: Trouble,
}

/// What a lookup after a failed bind found.
enum Lookup {
    /// Bound to the node we asked for: the bind went through.
    BoundHere,
    /// Bound to another node (`None`: bound, node not asked about).
    BoundElsewhere(String),
    /// Deleted, or replaced by a pod of another uid.
    Gone(&'static str),
    /// Still pending (or the lookup failed): retry with backoff.
    Pending,
}

impl ApiBinder {
    /// A binder over `client`, each call bounded by `timeout`.
    pub fn new(client: Client, timeout: Duration) -> ApiBinder {
        ApiBinder {
            client,
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

    /// After a timeout, a 409 or a 404: where is the pod now? (A timed-out bind may have
    /// gone through: the server timed out answering, not binding.) Looking before retrying
    /// binds no pod twice and loses none.
    async fn lookup(&self, pod: &PodInfo, node: &str) -> Lookup {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        match tokio::time::timeout(self.timeout, api.get_opt(&pod.name)).await {
            Ok(Ok(None)) => Lookup::Gone("deleted"),
            Ok(Ok(Some(p))) => {
                let replaced = p.metadata.uid.as_deref().unwrap_or("") != pod.uid.as_str();
                match p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                    _ if replaced => Lookup::Gone("replaced by a pod of another uid"),
                    Some(n) if n == node => Lookup::BoundHere,
                    Some(n) => Lookup::BoundElsewhere(n.to_string()),
                    None => Lookup::Pending,
                }
            }
            _ => Lookup::Pending,
        }
    }

    /// The outcome of a bind that answered `result`, looking the pod up when the answer
    /// leaves its state open (a timeout, a 409, a 404).
    async fn outcome(
        &self,
        pod: &PodInfo,
        node: &str,
        result: &Result<(), BindError>,
    ) -> BindOutcome {
        let e = match result {
            Ok(()) => return BindOutcome::Bound,
            Err(e) => e,
        };
        let timed_out = matches!(e, BindError::Timeout(_));
        if !timed_out && !e.is_final() {
            return BindOutcome::Retry(e.to_string());
        }
        match self.lookup(pod, node).await {
            // A 409 for a pod bound where we asked: an earlier bind whose answer was lost.
            Lookup::BoundHere if timed_out => {
                self.stats.timeouts_bound.inc();
                BindOutcome::Bound
            }
            Lookup::BoundHere => BindOutcome::Conflict(format!("{e}; the pod is bound to {node}")),
            Lookup::BoundElsewhere(n) => {
                BindOutcome::Conflict(format!("{e}; the pod is bound to {n}"))
            }
            Lookup::Gone(why) => BindOutcome::Gone(format!("{e}; the pod was {why}")),
            Lookup::Pending => BindOutcome::Retry(e.to_string()),
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
    ) -> BoxFuture<'a, BindOutcome> {
        Box::pin(async move {
            let permit = match &self.flow {
                Some(f) => Some(f.acquire().await),
                None => None,
            };
            let started = tokio::time::Instant::now();
            let result = bind_pod(
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
            if let Err(BindError::Timeout(_)) = &result {
                self.stats.timeouts.inc();
            }
            if let Err(BindError::Throttled { .. }) = &result {
                self.stats.throttled.inc();
            }
            let outcome = self.outcome(pod, node, &result).await;
            // A timed-out bind that went through is not a failure to report.
            let result = if outcome.is_bound() { Ok(()) } else { result };
            self.report(pod, node, &result);
            outcome
        })
    }
}

impl ExtenderBinder for ApiBinder {
    fn bind<'a>(
        &'a self,
        args: &'a ExtenderBindingArgs,
    ) -> BoxFuture<'a, Result<(Arc<PodInfo>, BindOutcome), String>> {
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
            let result = bind_pod(
                &self.client,
                &args.pod_namespace,
                &args.pod_name,
                &args.pod_uid,
                &args.node,
                &Default::default(),
                self.timeout,
            )
            .await;
            // The pod as the cycle's records hold it, read once: the outcome's lookups
            // and the settlement share it.
            let info = Arc::new(PodInfo::new(Arc::new(pod)));
            let outcome = self.outcome(&info, &args.node, &result).await;
            Ok((info, outcome))
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

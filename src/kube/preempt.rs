//! Preemption's API calls under `serve` (upstream's `preemption.Executor`): for each victim
//! of a [`Nomination`], the `DisruptionTarget` condition (reason `PreemptionByScheduler`,
//! message `<scheduler>: preempting to accommodate a higher priority pod`) is patched into
//! its `pods/status`, then the pod is deleted, and a `Preempted` event is recorded on it. The
//! preemptor's `status.nominatedNodeName` goes out with its FailedScheduling condition (the
//! reporter, [`super::events`]); lower-priority pods nominated to the same node have theirs
//! cleared first.
//!
//! It runs beside the reporter's task, after the cycle, never inside it: each nomination
//! is acted on in a task of its own (at most [`NOMINATIONS_IN_FLIGHT`] at once), so the
//! reporter's events and conditions never wait for evictions and one preemptor's victims
//! never wait for another's, as upstream's async preemption. Every call is bounded
//! by `serve.requestTimeout`; a victim already gone (`404`) counts as done; other failures
//! are logged and counted (`headroom_preemption_failures_total`) and the next victims are
//! still tried: the preemptor is retried anyway, and preempts again if it still does not fit.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use prometheus_client::metrics::counter::Counter;

use super::recorder::{EventSpec, Recorder};
use crate::preemption::disruption_target_patch;
use headroom_scheduler::framework::Nomination;
use headroom_scheduler::key::{PodId, PodKey};
use headroom_scheduler::snapshot::PodInfo;

/// Counters of preemption's API calls (`headroom_preemption_*_total` once
/// [`registered`](PreemptStats::register)). Cheap to clone: the fields are handles.
#[derive(Debug, Default, Clone)]
pub struct PreemptStats {
    /// Nominations acted on.
    pub nominations: Counter,
    /// Victims deleted (or found already gone).
    pub victims_deleted: Counter,
    /// Failed condition patches or deletions (each also logged).
    pub failures: Counter,
}

impl PreemptStats {
    /// Registers the counters on `metrics`.
    pub fn register(&self, metrics: &crate::metrics::Metrics) {
        for (name, help, c) in [
            (
                "headroom_preemption_nominations",
                "Preemptions acted on (a node nominated, its victims evicted)",
                &self.nominations,
            ),
            (
                "headroom_preemption_victims_deleted",
                "Preemption victims deleted (or already gone)",
                &self.victims_deleted,
            ),
            (
                "headroom_preemption_failures",
                "Preemption API calls (DisruptionTarget patch, delete) that failed",
                &self.failures,
            ),
        ] {
            metrics.register(name, help, c.clone());
        }
    }
}

/// What went wrong with one victim.
#[derive(Debug, thiserror::Error)]
pub enum PreemptError {
    /// The API server refused or failed.
    #[error("{step} of victim {victim}: {source}")]
    Api {
        /// `DisruptionTarget patch`, `delete` or `nominatedNodeName clearing`.
        step: &'static str,
        /// The victim, or the pod whose nomination is cleared.
        victim: PodKey,
        /// The client's error.
        source: kube::Error,
    },
    /// No answer within `serve.requestTimeout`.
    #[error("{step} of victim {victim}: timed out")]
    Timeout {
        /// `DisruptionTarget patch` or `delete`.
        step: &'static str,
        /// The victim.
        victim: PodKey,
    },
}

/// Victims evicted at once for one nomination: upstream's parallelizer runs
/// `preemptPod` over the victims with its default parallelism, 16.
pub const VICTIMS_IN_FLIGHT: usize = 16;

/// Nominations acted on at once by the reporter (upstream's async preemption starts one
/// goroutine per preemptor; this bounds them, and a full set makes the reporter wait for
/// one to finish rather than lose one).
pub const NOMINATIONS_IN_FLIGHT: usize = 32;

/// What acting on a nomination came to.
#[derive(Debug, Default)]
pub struct Actuated {
    /// The failures (already logged and counted).
    pub errors: Vec<PreemptError>,
    /// Victims found gone already (`404`): no deletion event of ours will show them go.
    pub gone: Vec<PodId>,
}

/// Evicts the victims of `nomination` for `preemptor` (scheduled by `scheduler_name`):
/// first the lower-priority nominations to the node are cleared, then the victims are
/// evicted concurrently (at most [`VICTIMS_IN_FLIGHT`]), each patched, deleted and given
/// its event, as upstream's `prepareCandidateAsync` does.
pub async fn actuate(
    client: &Client,
    recorder: &Recorder,
    stats: &PreemptStats,
    timeout: std::time::Duration,
    scheduler_name: &str,
    preemptor: (&PodKey, &str),
    nomination: &Nomination,
) -> Actuated {
    use futures::StreamExt;
    stats.nominations.inc();
    let (preemptor, uid) = preemptor;
    let mut out = Actuated::default();
    for p in &nomination.cleared {
        // Upstream's `clearNominatedNodeName` for lower-priority pods nominated there.
        if let Err(e) = clear_nomination(client, timeout, p).await {
            stats.failures.inc();
            tracing::warn!(pod = %p.key(), error = %e, "clearing nominatedNodeName failed");
            out.errors.push(e);
        }
    }
    let mut waiting = nomination.victims.iter();
    let mut evicting = futures::stream::FuturesUnordered::new();
    loop {
        while evicting.len() < VICTIMS_IN_FLIGHT
            && let Some(v) = waiting.next()
        {
            evicting.push(evict_victim(client, timeout, scheduler_name, v));
        }
        let Some((v, result)) = evicting.next().await else {
            break;
        };
        match result {
            Ok(deleted) => {
                stats.victims_deleted.inc();
                if !deleted {
                    out.gone.push(PodId::of(v));
                }
                recorder.record(preempted_event(v, uid, &nomination.node));
                tracing::info!(%preemptor, victim = %v.key(), node = %nomination.node, "preempted");
            }
            Err(e) => {
                stats.failures.inc();
                tracing::warn!(%preemptor, error = %e, "preemption failed");
                out.errors.push(e);
            }
        }
    }
    out
}

/// Upstream's `Preempted` event on the victim.
pub fn preempted_event(victim: &PodInfo, preemptor_uid: &str, node: &str) -> EventSpec {
    EventSpec {
        regarding: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(victim.namespace.to_string()),
            name: Some(victim.name.to_string()),
            uid: victim.uid.non_empty(),
            ..Default::default()
        },
        type_: "Normal",
        reason: "Preempted",
        action: "Preempting",
        note: format!("Preempted by pod {preemptor_uid} on node {node}"),
    }
}

async fn clear_nomination(
    client: &Client,
    timeout: std::time::Duration,
    p: &PodInfo,
) -> Result<(), PreemptError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &p.namespace);
    let step = "nominatedNodeName clearing";
    let victim = p.key();
    let patch = serde_json::json!({"status": {"nominatedNodeName": null}});
    match tokio::time::timeout(
        timeout,
        api.patch_status(&p.name, &PatchParams::default(), &Patch::Merge(patch)),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => Ok(()),
        Ok(Err(source)) => Err(PreemptError::Api {
            step,
            victim,
            source,
        }),
        Err(_) => Err(PreemptError::Timeout { step, victim }),
    }
}

/// [`evict`], returning the victim with the outcome (for the concurrent evictions).
async fn evict_victim<'a>(
    client: &Client,
    timeout: std::time::Duration,
    scheduler_name: &str,
    v: &'a Arc<PodInfo>,
) -> (&'a Arc<PodInfo>, Result<bool, PreemptError>) {
    (v, evict(client, timeout, scheduler_name, v).await)
}

/// Patches and deletes one victim: `Ok(true)` when this call deleted it, `Ok(false)` when
/// it was gone already.
async fn evict(
    client: &Client,
    timeout: std::time::Duration,
    scheduler_name: &str,
    v: &PodInfo,
) -> Result<bool, PreemptError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &v.namespace);
    let victim = v.key();
    let patch = disruption_target_patch(scheduler_name, &super::rfc3339(super::now_ms()));
    let step = "DisruptionTarget patch";
    match tokio::time::timeout(
        timeout,
        api.patch_status(&v.name, &PatchParams::default(), &Patch::Strategic(patch)),
    )
    .await
    {
        Ok(Ok(_)) => {}
        // Already gone: nothing left to do (upstream returns as well).
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => return Ok(false),
        Ok(Err(source)) => {
            return Err(PreemptError::Api {
                step,
                victim,
                source,
            });
        }
        Err(_) => return Err(PreemptError::Timeout { step, victim }),
    }
    let step = "delete";
    match tokio::time::timeout(timeout, api.delete(&v.name, &DeleteParams::default())).await {
        Ok(Ok(_)) => Ok(true),
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => Ok(false),
        Ok(Err(source)) => Err(PreemptError::Api {
            step,
            victim,
            source,
        }),
        Err(_) => Err(PreemptError::Timeout { step, victim }),
    }
}

//! `GET /nodes` and `GET /nodes/{name}`: each node's allocatable, requested and measured
//! usage, headroom and how fresh the measurement is.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use serde::Serialize;

use super::{ApiError, ApiState};
use crate::analytics::NodeUsage;
use headroom_scheduler::resources::Resources;
use headroom_scheduler::snapshot::NodeInfo;
use headroom_scheduler::usage::{Headroom, UsagePolicy};
use headroom_scheduler::usage_context::UsageContext;

/// CPU, memory, ephemeral storage and pods of a node, in plain units.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceAmounts {
    /// CPU, cores.
    pub cpu_cores: f64,
    /// Memory, bytes.
    pub memory_bytes: i64,
    /// Ephemeral storage, bytes.
    pub ephemeral_storage_bytes: i64,
    /// Pods.
    pub pods: i64,
}

impl From<&Resources> for ResourceAmounts {
    fn from(r: &Resources) -> Self {
        ResourceAmounts {
            cpu_cores: r.milli_cpu as f64 / 1000.0,
            memory_bytes: r.memory,
            ephemeral_storage_bytes: r.ephemeral_storage,
            pods: r.pods,
        }
    }
}

/// One node as `/nodes` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    /// Node name.
    pub name: String,
    /// Cordoned.
    pub unschedulable: bool,
    /// Pods assigned (or assumed) on it.
    pub pods: usize,
    /// `status.allocatable`.
    pub allocatable: ResourceAmounts,
    /// Sum of the pods' requests (the pods count is the number of pods).
    pub requested: ResourceAmounts,
    /// Measured usage; absent when the node has no recent samples.
    pub usage: Option<NodeUsage>,
    /// What the node really has free: the number the scheduler decides on
    /// ([`Headroom`]: measured usage plus recent placements, or requests where usage is
    /// stale or missing; `basis` says which).
    pub headroom: Headroom,
    /// Newest sample, ms since the epoch.
    pub newest_sample_ms: Option<i64>,
    /// Age of the newest sample, seconds.
    pub age_seconds: Option<f64>,
    /// No usage, or the newest sample is older than the stale threshold.
    pub stale: bool,
    /// Why the node accepts no pod (an unreadable status), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /nodes`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeList {
    /// When this was computed, ms since the epoch (the API's clock).
    pub now_ms: i64,
    /// When the usage view was computed (0: never).
    pub usage_generated_ms: i64,
    /// Nodes without fresh usage.
    pub stale_nodes: usize,
    /// Every node, in snapshot order.
    pub nodes: Vec<NodeView>,
}

fn view(n: &NodeInfo, ctx: &UsageContext, policy: &UsagePolicy, now_ms: i64) -> NodeView {
    let u = ctx.view.node(&n.name);
    let age_ms = u.map(|u| now_ms.saturating_sub(u.newest_ms).max(0));
    let stale_ms = i64::try_from(policy.stale_after.as_millis()).unwrap_or(i64::MAX);
    let mut requested = ResourceAmounts::from(&n.requested);
    requested.pods = i64::try_from(n.pods.len()).unwrap_or(i64::MAX);
    NodeView {
        name: n.name.to_string(),
        unschedulable: n.unschedulable,
        pods: n.pods.len(),
        allocatable: ResourceAmounts::from(&n.allocatable),
        requested,
        headroom: Headroom::of(n, ctx, policy),
        newest_sample_ms: u.map(|u| u.newest_ms),
        age_seconds: age_ms.map(|a| a as f64 / 1000.0),
        stale: age_ms.is_none_or(|a| a > stale_ms),
        usage: u.cloned(),
        error: n.error.clone(),
    }
}

/// Every node as `/nodes` shows it, now (also what `/ui/nodes` renders).
pub(super) fn node_list(state: &ApiState) -> NodeList {
    let snapshot = state.snapshot();
    let ctx = snapshot.usage();
    let now = state.now_ms();
    let nodes: Vec<NodeView> = snapshot
        .nodes()
        .iter()
        .map(|n| view(n, ctx, state.policy(), now))
        .collect();
    NodeList {
        now_ms: now,
        usage_generated_ms: ctx.view.generated_ms,
        stale_nodes: nodes.iter().filter(|n| n.stale).count(),
        nodes,
    }
}

/// `GET /nodes`.
pub(super) async fn list(State(state): State<ApiState>) -> Json<NodeList> {
    Json(node_list(&state))
}

/// `GET /nodes/{name}`.
pub(super) async fn one(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<NodeView>, ApiError> {
    let Path(name) = path.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let snapshot = state.snapshot();
    let n = snapshot
        .get(&name)
        .ok_or_else(|| ApiError::NotFound(format!("no node named {name}")))?;
    Ok(Json(view(
        n,
        snapshot.usage(),
        state.policy(),
        state.now_ms(),
    )))
}

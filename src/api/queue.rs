//! `GET /queue`: every pending pod, where it waits (active, backoff, unschedulable, gated,
//! in flight), how many attempts it had and why the last one failed.

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use super::{ApiError, ApiState};
use headroom_scheduler::queue::{PendingPod, QueueLengths};

/// `GET /queue`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueResponse {
    /// Pods per place.
    pub lengths: QueueLengths,
    /// Every pending pod: active in pop order, backoff by expiry, then the others by key.
    pub pods: Vec<PendingPod>,
}

/// The pending pods as `/queue` shows them (also what `/ui/queue` renders); 503 without a
/// queue.
pub(super) fn queue_response(state: &ApiState) -> Result<QueueResponse, ApiError> {
    let q = state.queue.as_ref().ok_or_else(|| {
        ApiError::Unavailable("this server was started without a scheduling queue".into())
    })?;
    Ok(QueueResponse {
        lengths: q.lengths(),
        pods: q.pending(),
    })
}

/// `GET /queue`.
pub(super) async fn pending(
    State(state): State<ApiState>,
) -> Result<Json<QueueResponse>, ApiError> {
    Ok(Json(queue_response(&state)?))
}

//! `GET /metrics`, `GET /healthz`, `GET /readyz`, and the 404 for unknown routes.

use axum::extract::State;
use axum::http::{Method, Uri, header};
use axum::response::{IntoResponse, Response};

use super::{ApiError, ApiState};

/// `GET /metrics`: the gauges are set from the current state, then everything is encoded.
pub(super) async fn metrics(State(state): State<ApiState>) -> Result<Response, ApiError> {
    let body = state.render_metrics().await?;
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], body).into_response())
}

/// `GET /healthz`: the process serves requests.
pub(super) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: 200 once the owner said so (caches synced, simulation loaded).
pub(super) async fn readyz(State(state): State<ApiState>) -> Result<&'static str, ApiError> {
    if state.is_ready() {
        Ok("ok\n")
    } else {
        Err(ApiError::Unavailable("not ready".into()))
    }
}

/// Any other route.
pub(super) async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!(
        "no route {method} {}: see /ui, /explain, /nodes, /builders, /queue, /advice, /metrics, /healthz, /readyz",
        uri.path()
    ))
}

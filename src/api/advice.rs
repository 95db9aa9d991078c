//! `GET /advice`: the descheduling advice — nodes running hot by real usage and the pods
//! whose move would help most (see [`crate::advice`]). JSON; `?format=text` for the table
//! `headroom advice` prints. Nothing is evicted.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{ApiError, ApiState};

/// `?format=` of `/advice`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct AdviceQuery {
    format: Option<String>,
}

/// `GET /advice`.
pub(super) async fn advice(
    State(state): State<ApiState>,
    query: Result<Query<AdviceQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let a = state.advice();
    match q.format.as_deref() {
        None | Some("json") => Ok(Json(a).into_response()),
        Some("text") => Ok((
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            a.to_text(),
        )
            .into_response()),
        Some(other) => Err(ApiError::BadRequest(format!(
            "unknown format {other:?}: use json or text"
        ))),
    }
}

//! `GET /explain/{namespace}/{pod}` and `GET /explain?uid=UID`: a pod's latest decision.
//!
//! Memory first (the [`DecisionLog`](crate::decisions::DecisionLog)), then the store, which keeps
//! decisions the memory bound dropped.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiState};
use crate::decisions::ExplainResponse;
use headroom_scheduler::key::PodKey;

/// `?format=` of `/explain`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ExplainQuery {
    format: Option<String>,
    uid: Option<String>,
    pod: Option<String>,
}

enum Format {
    Json,
    Text,
}

fn format(q: &ExplainQuery) -> Result<Format, ApiError> {
    match q.format.as_deref() {
        None | Some("json") => Ok(Format::Json),
        Some("text") => Ok(Format::Text),
        Some(other) => Err(ApiError::BadRequest(format!(
            "unknown format {other:?}: use json or text"
        ))),
    }
}

/// `/explain`'s answer: the decision and the path of the pod's page on this API.
#[derive(Serialize)]
struct Answer<'a> {
    #[serde(flatten)]
    response: &'a ExplainResponse,
    /// The pod's page (`/ui/pods/{namespace}/{pod}`), a path on this API.
    ui: String,
}

fn respond(r: ExplainResponse, f: Format) -> Response {
    // Always `namespace/name`: the record was rendered from the decision's key.
    let pod = r.explanation.pod.parse().unwrap_or_default();
    let ui = super::ui::pod_page_path(&pod);
    match f {
        Format::Json => Json(Answer { response: &r, ui }).into_response(),
        Format::Text => (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{}page: {ui}\n", r.to_text()),
        )
            .into_response(),
    }
}

/// Which pod's decision to look up.
pub(super) enum Key {
    /// By namespace and name.
    Pod(PodKey),
    /// By uid.
    Uid(String),
}

impl Key {
    fn describe(&self) -> String {
        match self {
            Key::Pod(pod) => format!("pod {pod}"),
            Key::Uid(uid) => format!("uid {uid}"),
        }
    }
}

/// The pod's latest decision: memory first, then the store (also what `/ui/pods/..`
/// renders); 404 when neither has one.
pub(super) async fn lookup(state: &ApiState, key: Key) -> Result<ExplainResponse, ApiError> {
    let held = match &key {
        Key::Pod(pod) => state.decisions().by_pod(pod),
        Key::Uid(uid) => state.decisions().by_uid(uid),
    };
    if let Some(d) = held {
        return Ok(d.render());
    }
    let describe = key.describe();
    let not_found = || ApiError::NotFound(format!("no decision recorded for {describe}"));
    let Some(store) = state.store().cloned() else {
        return Err(not_found());
    };
    let bytes = tokio::task::spawn_blocking(move || match &key {
        Key::Pod(pod) => store.decision_by_pod(&pod.namespace, &pod.name),
        Key::Uid(uid) => store.decision_by_uid(uid),
    })
    .await
    .map_err(|e| ApiError::Internal(format!("store lookup task: {e}")))??;
    let Some(bytes) = bytes else {
        return Err(not_found());
    };
    serde_json::from_slice(&bytes).map_err(|e| {
        state.metrics().count_decision_store_error();
        ApiError::Internal(format!("stored decision of {describe} is unreadable: {e}"))
    })
}

/// `GET /explain/{namespace}/{pod}`.
pub(super) async fn by_pod(
    State(state): State<ApiState>,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<ExplainQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path((namespace, pod)) = path.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let Query(q) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let f = format(&q)?;
    Ok(respond(
        lookup(&state, Key::Pod(PodKey::new(namespace, pod))).await?,
        f,
    ))
}

/// `NAMESPACE/NAME` (`?pod=` of `/explain` and of `/ui/find`), or 400.
pub(super) fn parse_pod(pod: &str) -> Result<PodKey, ApiError> {
    pod.parse()
        .map_err(|_| ApiError::BadRequest(format!("pod must be NAMESPACE/NAME, got {pod:?}")))
}

/// `GET /explain?uid=UID` or `GET /explain?pod=NAMESPACE/NAME`.
pub(super) async fn by_query(
    State(state): State<ApiState>,
    query: Result<Query<ExplainQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let f = format(&q)?;
    let key = match (q.uid, q.pod) {
        (Some(uid), None) if !uid.is_empty() => Key::Uid(uid),
        (None, Some(pod)) => Key::Pod(parse_pod(&pod)?),
        _ => {
            return Err(ApiError::BadRequest(
                "give exactly one of ?uid=UID or ?pod=NAMESPACE/NAME (or use /explain/{namespace}/{pod})"
                    .into(),
            ));
        }
    };
    Ok(respond(lookup(&state, key).await?, f))
}

//! `GET /builders` and `GET /builders/{id}`: builder profiles, their runs and where they
//! ran. Builder ids look like `namespace/Kind/name`, so `{id}` takes the rest of the path.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use headroom_storage::RunRecord;
use serde::Serialize;

use super::{ApiError, ApiState};
use crate::analytics::BuilderProfile;

/// One builder as `/builders/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BuilderView {
    /// Builder identity.
    pub builder: String,
    /// Its profile in the current usage view (percentiles of per-run CPU and memory),
    /// absent when it has no runs in the profile's scope.
    pub profile: Option<BuilderProfile>,
    /// Number of stored runs.
    pub run_count: usize,
    /// Stored runs, oldest first.
    pub runs: Vec<RunRecord>,
    /// Nodes it ran on, most recent first.
    pub placement_history: Vec<String>,
}

/// `GET /builders`: every builder with a profile or stored runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BuilderList {
    /// Builder ids, sorted.
    pub builders: Vec<String>,
}

/// `GET /builders`.
pub(super) async fn list(State(state): State<ApiState>) -> Result<Json<BuilderList>, ApiError> {
    let mut builders: Vec<String> = state.usage_view().builders.keys().cloned().collect();
    if let Some(store) = state.store().cloned() {
        let stored = tokio::task::spawn_blocking(move || store.builders())
            .await
            .map_err(|e| ApiError::Internal(format!("store task: {e}")))??;
        builders.extend(stored);
    }
    builders.sort();
    builders.dedup();
    Ok(Json(BuilderList { builders }))
}

/// `GET /builders/{id}`.
pub(super) async fn one(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<BuilderView>, ApiError> {
    let Path(id) = path.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let profile = state.usage_view().builder(&id).cloned();
    let (runs, placement_history) = match state.store().cloned() {
        Some(store) => {
            let key = id.clone();
            tokio::task::spawn_blocking(move || {
                Ok::<_, headroom_storage::Error>((
                    store.runs(&key)?,
                    store.placement_history(&key)?,
                ))
            })
            .await
            .map_err(|e| ApiError::Internal(format!("store task: {e}")))??
        }
        None => (Vec::new(), Vec::new()),
    };
    if profile.is_none() && runs.is_empty() && placement_history.is_empty() {
        return Err(ApiError::NotFound(format!(
            "no builder {id}: no profile, runs or placement history"
        )));
    }
    Ok(Json(BuilderView {
        builder: id,
        profile,
        run_count: runs.len(),
        runs,
        placement_history,
    }))
}

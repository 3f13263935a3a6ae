//! Leasehold's honesty about leases, over HTTP: `GET /_leasehold/queues/{name}/leases` as
//! JSON (`/metrics` has the same figures for Prometheus: `metrics`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::lease_doc::LeaseReportDoc;
use crate::state::AppState;

pub async fn queue_leases(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> Response {
    let report = state.backend.lease_report(&name).await;
    match report {
        Ok(r) => Json(LeaseReportDoc::of(&name, &r)).into_response(),
        Err(e) => (
            StatusCode::NOT_FOUND,
            Json(json!({"message": e.to_string()})),
        )
            .into_response(),
    }
}

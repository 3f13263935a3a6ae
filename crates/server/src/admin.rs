//! Leasehold's own routes: `/health` and `/ready` for load balancers and orchestrators, and
//! under `/_leasehold` the time-travel clock for tests.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::state::AppState;

#[derive(Deserialize)]
pub struct Advance {
    seconds: f64,
}

/// `POST /_leasehold/clock/advance {"seconds": N}`: jumps the clock forward N seconds.
pub async fn advance_clock(
    State(state): State<Arc<AppState>>,
    body: Result<Json<Advance>, axum::extract::rejection::JsonRejection>,
) -> (StatusCode, Json<Value>) {
    let seconds = match body {
        Ok(Json(Advance { seconds })) if seconds.is_finite() && seconds >= 0.0 => seconds,
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"message": "expected a JSON body {\"seconds\": N} with N >= 0"})),
            )
        }
    };
    // `as` saturates, and anything near u64::MAX is refused by the range check.
    let by_ms = (seconds * 1000.0).round() as u64;
    if state.clock.advance_ms(by_ms).is_err() {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"message": format!(
                "cannot travel {seconds} s: time travel is limited to {} years in all",
                crate::clock::MAX_TRAVEL_MS / (365 * 24 * 3_600_000)
            )})),
        );
    }
    let now_ms = match state.backend.clock_advanced(by_ms).await {
        Ok(now_ms) => now_ms,
        Err(error) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"message": error.to_string()})),
            )
        }
    };
    state.backend.wake_all();
    (StatusCode::OK, Json(json!({ "now_ms": now_ms })))
}

/// `GET /health`: the process is up and answering. JSON, not an SQS error.
pub async fn health() -> Json<Value> {
    Json(json!({"status": "alive"}))
}

/// `GET /ready`: the backend takes writes now (the embedded store has not failed; the
/// PostgreSQL database answers); 503 with the reason when not.
pub async fn ready(State(state): State<Arc<AppState>>) -> (StatusCode, Json<Value>) {
    match state.backend.ready().await {
        Ok(()) => (StatusCode::OK, Json(json!({"status": "ready"}))),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "not ready", "reason": why.to_string()})),
        ),
    }
}

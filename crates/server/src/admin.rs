//! Leasehold's own routes: `/health` and `/ready` for load balancers and orchestrators, and
//! under `/_leasehold` the time-travel clock for tests; and the guard that keeps the admin
//! routes to the admin token when the server checks signatures.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
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
/// PostgreSQL database answers); 503 with the reason when not. While sends are refused for
/// want of memory or disk, still 200, saying so and why.
pub async fn ready(State(state): State<Arc<AppState>>) -> (StatusCode, Json<Value>) {
    match state.backend.ready().await {
        // Refusing sends keeps the server ready: it must stay in service so that consumers
        // can drain what it holds.
        Ok(()) => {
            let refused = state
                .memory
                .reason()
                .or_else(|| state.backend.refusing_sends());
            let body = match refused {
                None => json!({"status": "ready"}),
                Some(why) => json!({"status": "ready", "sends": "refused", "reason": why}),
            };
            (StatusCode::OK, Json(body))
        }
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "not ready", "reason": why.to_string()})),
        ),
    }
}

/// With credentials configured, an admin route answers only a request carrying the admin
/// token (`Authorization: Bearer TOKEN`); without, it is as open as the rest of the server.
pub async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let Some(auth) = &state.config.auth else {
        return next.run(request).await;
    };
    if auth.is_admin(request.headers()) {
        return next.run(request).await;
    }
    let message = if auth.admin_token.is_some() {
        "this route wants the admin token: Authorization: Bearer TOKEN"
    } else {
        "the admin routes are served on the --admin-bind listener, or here with an admin token"
    };
    let mut response = (
        StatusCode::UNAUTHORIZED,
        Json(json!({"status": "unauthorized", "message": message})),
    )
        .into_response();
    response.headers_mut().insert(
        axum::http::header::WWW_AUTHENTICATE,
        axum::http::HeaderValue::from_static("Bearer"),
    );
    response
}

/// On every listener of the admin routes: a page of another site must not move messages or
/// the clock through the browser of someone who has the dashboard open. Only GETs pass from
/// another site (the browser hides their answers from it).
pub async fn same_site(request: Request, next: Next) -> Response {
    if request.method() != axum::http::Method::GET {
        if let Err(refused) = crate::sqs::refuse_browsers_of_other_sites(request.headers()) {
            return (
                StatusCode::FORBIDDEN,
                Json(json!({"status": "forbidden", "message": refused.to_string()})),
            )
                .into_response();
        }
    }
    next.run(request).await
}

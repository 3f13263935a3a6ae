//! The `Host` check on the routes (`hosts.rs` says which names pass and why): the SQS routes
//! of a server without credentials answer another name AWS's AccessDenied in the request's
//! wire format; the admin routes, on every listener and whatever the credentials, 403.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use leasehold_protocol::ProtocolError;
use serde_json::json;

use crate::hosts::refusal;
use crate::state::AppState;

fn host_header(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(header::HOST)
        .map(|v| v.to_str().unwrap_or("(not text)"))
}

/// On the SQS routes of a server without credentials: a request for another name gets AWS's
/// AccessDenied (403) in its wire's format.
pub async fn check_sqs(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    if state.config.auth.is_none() {
        let host = host_header(&request);
        if !state.config.allowed_hosts.allows(host) {
            let error = ProtocolError::AccessDenied(refusal(host.unwrap_or_default()));
            let id = crate::state::request_id();
            return crate::sqs::error_response(request.headers(), &error, &id);
        }
    }
    next.run(request).await
}

/// On the admin routes, on every listener and whatever the credentials: a request for
/// another name gets 403 with a JSON line saying why.
pub async fn check_admin(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let host = host_header(&request);
    if !state.config.allowed_hosts.allows(host) {
        let message = refusal(host.unwrap_or_default());
        return (
            StatusCode::FORBIDDEN,
            Json(json!({"status": "forbidden", "message": message})),
        )
            .into_response();
    }
    next.run(request).await
}

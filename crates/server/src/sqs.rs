//! The SQS endpoint: `POST /` with AWS JSON 1.0, dispatch, long polling and error answers.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use leasehold_protocol::shapes::ReceiveMessageInput;
use leasehold_protocol::{
    execute, json_error_body, query_error_header, queue_name, receive, receive_wait_seconds,
    wire_code, Context, ProtocolError, Request, JSON_CONTENT_TYPE, TARGET_PREFIX,
};
use serde_json::Value;
use tokio::time::Instant;

use crate::state::AppState;

pub async fn handle(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request_id = uuid::Uuid::new_v4().to_string();
    let outcome = match parse(&headers, &body) {
        Ok(request) => {
            let ctx = Context {
                host: host(&headers),
            };
            run(&state, &ctx, request).await
        }
        Err(error) => Err(error),
    };
    match outcome {
        Ok(value) => json_response(StatusCode::OK, &request_id, &value, None),
        Err(error) => error_response(&request_id, &error),
    }
}

fn host(headers: &HeaderMap) -> String {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost")
        .to_string()
}

fn parse(headers: &HeaderMap, body: &[u8]) -> Result<Request, ProtocolError> {
    let target = headers.get("x-amz-target").and_then(|t| t.to_str().ok());
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .unwrap_or("");
    match target {
        Some(target) => {
            let action = target
                .strip_prefix(TARGET_PREFIX)
                .ok_or_else(|| ProtocolError::UnknownOperation(target.to_string()))?;
            Request::from_json(action, body)
        }
        None if content_type.starts_with("application/x-www-form-urlencoded") => {
            Err(ProtocolError::UnsupportedMediaType(
                "the query protocol is not served yet; use AWS JSON 1.0".into(),
            ))
        }
        None => Err(ProtocolError::UnknownOperation(
            "missing X-Amz-Target header".into(),
        )),
    }
}

async fn run(state: &AppState, ctx: &Context, request: Request) -> Result<Value, ProtocolError> {
    if let Request::ReceiveMessage(input) = &request {
        return long_poll(state, input).await;
    }
    let value = execute(&mut state.engine(), ctx, &request)?;
    if request.may_wake_receivers() {
        if let Some(url) = request.queue_url() {
            let name = queue_name(&state.engine(), url);
            if let Ok(name) = name {
                state.wake(&name);
            }
        }
    }
    Ok(value)
}

/// ReceiveMessage with WaitTimeSeconds: returns as soon as a message is receivable, woken by
/// sends and visibility changes, or by the timer of the next delay or lease to end.
async fn long_poll(state: &AppState, input: &ReceiveMessageInput) -> Result<Value, ProtocolError> {
    let (queue, wait_s) = {
        let engine = state.engine();
        let url = input.queue_url.as_deref().unwrap_or_default();
        (
            queue_name(&engine, url),
            receive_wait_seconds(&engine, input),
        )
    };
    // Let the receive itself report a bad request, in AWS's order of checks.
    let (Ok(queue), Ok(wait_s)) = (queue, wait_s) else {
        return receive(&mut state.engine(), input).map(to_value);
    };
    let deadline = Instant::now() + Duration::from_secs(u64::from(wait_s));
    let notify = state.waiter(&queue);
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (output, next_due, now_ms) = {
            let mut engine = state.engine();
            let output = receive(&mut engine, input)?;
            (output, engine.next_due(&queue), engine.now_ms())
        };
        if !output.messages.is_empty() || Instant::now() >= deadline {
            if output.messages.is_empty() {
                state.engine().record_empty_receive(&queue);
            }
            return Ok(to_value(output));
        }
        let wake_at = next_due.map_or(deadline, |due| {
            deadline.min(Instant::now() + Duration::from_millis(due.saturating_sub(now_ms)))
        });
        tokio::select! {
            _ = &mut notified => {}
            _ = tokio::time::sleep_until(wake_at) => {}
        }
    }
}

fn to_value(output: leasehold_protocol::shapes::ReceiveMessageOutput) -> Value {
    serde_json::to_value(output).expect("response shapes always serialise")
}

fn json_response(
    status: StatusCode,
    request_id: &str,
    body: &Value,
    query_error: Option<String>,
) -> Response {
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(JSON_CONTENT_TYPE),
    );
    if let Ok(id) = HeaderValue::from_str(request_id) {
        headers.insert("x-amzn-requestid", id);
    }
    if let Some(Ok(code)) = query_error.map(|q| HeaderValue::from_str(&q)) {
        headers.insert("x-amzn-query-error", code);
    }
    response
}

fn error_response(request_id: &str, error: &ProtocolError) -> Response {
    let status = StatusCode::from_u16(wire_code(error).status).unwrap_or(StatusCode::BAD_REQUEST);
    json_response(
        status,
        request_id,
        &json_error_body(error),
        Some(query_error_header(error)),
    )
}

//! The SQS endpoint: dispatch on the wire protocol (AWS JSON 1.0 when `X-Amz-Target` is
//! present, else the query protocol), long polling, and answers in the matching format.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use leasehold_protocol::shapes::{ReceiveMessageInput, ReceiveMessageOutput};
use leasehold_protocol::{
    execute_prepared, form_params, json_error_body, parse_query, query_error_header, queue_name,
    receive, receive_wait_seconds, take_messages, wire_code, xml_error, xml_response, Context,
    Prepared, ProtocolError, Request, JSON_CONTENT_TYPE, TARGET_PREFIX, XML_CONTENT_TYPE,
};
use serde_json::Value;
use tokio::time::Instant;

use crate::state::AppState;

/// Which protocol a request spoke, so the answer speaks it too.
enum Wire {
    Json,
    Query,
}

pub async fn handle(
    State(state): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request_id = crate::state::request_id();
    let ctx = Context {
        host: host(&headers),
    };
    let target = headers.get("x-amz-target").and_then(|t| t.to_str().ok());
    let (wire, parsed) = match target {
        Some(target) => (Wire::Json, parse_json(target, &body)),
        None => (Wire::Query, parse_form(&ctx, &method, &uri, &body)),
    };
    let outcome = match parsed {
        Ok(request) => run(&state, &ctx, &request)
            .await
            .map(|value| (request.action(), value)),
        Err(error) => Err(error),
    };
    match (wire, outcome) {
        (Wire::Json, Ok((_, answer))) => respond(
            StatusCode::OK,
            &request_id,
            JSON_CONTENT_TYPE,
            answer.json(),
            None,
        ),
        (Wire::Query, Ok((action, answer))) => respond(
            StatusCode::OK,
            &request_id,
            XML_CONTENT_TYPE,
            xml_response(action, &answer.document(), &request_id),
            None,
        ),
        (Wire::Json, Err(error)) => respond(
            status(&error),
            &request_id,
            JSON_CONTENT_TYPE,
            json_error_body(&error).to_string(),
            Some(query_error_header(&error)),
        ),
        (Wire::Query, Err(error)) => respond(
            status(&error),
            &request_id,
            XML_CONTENT_TYPE,
            xml_error(&error, &request_id),
            None,
        ),
    }
}

fn host(headers: &HeaderMap) -> String {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost")
        .to_string()
}

fn parse_json(target: &str, body: &[u8]) -> Result<Request, ProtocolError> {
    let action = target
        .strip_prefix(TARGET_PREFIX)
        .ok_or_else(|| ProtocolError::UnknownOperation(target.to_string()))?;
    Request::from_json(action, body)
}

/// Query parameters come from the URL and, on a POST, the form body. A request sent to a
/// queue's URL names its queue by the path.
fn parse_form(
    ctx: &Context,
    method: &Method,
    uri: &Uri,
    body: &[u8],
) -> Result<Request, ProtocolError> {
    let mut params = form_params(uri.query().unwrap_or_default().as_bytes());
    if method == Method::POST {
        params.extend(form_params(body));
    }
    let path = uri.path();
    let queue_url = (path.trim_matches('/').split('/').count() == 2)
        .then(|| format!("http://{}{}", ctx.host, path));
    parse_query(&params, queue_url)
}

/// A successful answer, before it is put in a wire format. Received messages stay typed so
/// the JSON answer to the most frequent call is written in one pass.
enum Answer {
    Document(Value),
    Received(ReceiveMessageOutput),
}

impl Answer {
    fn json(&self) -> String {
        match self {
            Answer::Document(value) => value.to_string(),
            Answer::Received(output) => {
                serde_json::to_string(output).expect("response shapes always serialise")
            }
        }
    }

    fn document(self) -> Value {
        match self {
            Answer::Document(value) => value,
            Answer::Received(output) => {
                serde_json::to_value(output).expect("response shapes always serialise")
            }
        }
    }
}

async fn run(state: &AppState, ctx: &Context, request: &Request) -> Result<Answer, ProtocolError> {
    if let Request::ReceiveMessage(input) = request {
        return long_poll(state, input).await;
    }
    // A send's conversions and checksums are taken before the lock, not under it.
    let prepared = Prepared::of(request);
    let (value, commit, woken) = {
        let mut engine = state.engine();
        let value = execute_prepared(&mut engine, ctx, request, prepared);
        // Which queue to wake, found under the same lock.
        let woken = request
            .may_wake_receivers()
            .then(|| {
                request
                    .queue_url()
                    .and_then(|url| queue_name(&engine, url).ok())
            })
            .flatten();
        (value, state.persist(&mut engine), woken)
    };
    if let Some(commit) = commit {
        commit
            .await
            .map_err(|e| ProtocolError::Internal(e.to_string()))?;
    }
    let value = value?;
    if let Some(name) = woken {
        state.wake(&name);
    }
    Ok(Answer::Document(value))
}

/// ReceiveMessage with WaitTimeSeconds: returns as soon as a message is receivable, woken by
/// sends and visibility changes, or by the timer of the next delay or lease to end.
async fn long_poll(state: &AppState, input: &ReceiveMessageInput) -> Result<Answer, ProtocolError> {
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
        return receive(&mut state.engine(), input).map(Answer::Received);
    };
    let deadline = Instant::now() + Duration::from_secs(u64::from(wait_s));
    let notify = state.waiter(&queue);
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        // Only the engine's half runs under its lock; the answer is shaped after.
        let (taken, next_due, now_ms, commit) = {
            let mut engine = state.engine();
            let taken = take_messages(&mut engine, input);
            let commit = state.persist(&mut engine);
            (taken, engine.next_due(&queue), engine.now_ms(), commit)
        };
        if let Some(commit) = commit {
            commit
                .await
                .map_err(|e| ProtocolError::Internal(e.to_string()))?;
        }
        let taken = taken?;
        if !taken.is_empty() || Instant::now() >= deadline {
            if taken.is_empty() {
                state.engine().record_empty_receive(&queue);
            }
            return Ok(Answer::Received(taken.shape()));
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

fn status(error: &ProtocolError) -> StatusCode {
    StatusCode::from_u16(wire_code(error).status).unwrap_or(StatusCode::BAD_REQUEST)
}

fn respond(
    status: StatusCode,
    request_id: &str,
    content_type: &'static str,
    body: String,
    query_error: Option<String>,
) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(id) = HeaderValue::from_str(request_id) {
        headers.insert("x-amzn-requestid", id);
    }
    if let Some(Ok(code)) = query_error.map(|q| HeaderValue::from_str(&q)) {
        headers.insert("x-amzn-query-error", code);
    }
    response
}

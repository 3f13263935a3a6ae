//! The SQS endpoint: dispatch on the wire protocol (AWS JSON 1.0 when `X-Amz-Target` is
//! present, else the query protocol), long polling, and answers in the matching format.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use leasehold_engine::{EngineError, MAX_MESSAGE_SIZE};
use leasehold_protocol::shapes::{ReceiveMessageInput, ReceiveMessageOutput};
use leasehold_protocol::{
    execute_prepared, form_params, json_error_body, parse_query, query_error_header,
    query_json_error, query_json_response, queue_name, receive, receive_wait_seconds,
    take_messages, wire_code, xml_error, xml_response, Context, Prepared, ProtocolError, Request,
    JSON_CONTENT_TYPE, TARGET_PREFIX, XML_CONTENT_TYPE,
};
use leasehold_store::StoreError;
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::state::AppState;

/// Which protocol a request spoke, so the answer speaks it too.
#[derive(Clone, Copy)]
pub enum Wire {
    Json,
    Query,
    /// The query protocol from a client that asked for JSON (`Accept: application/json`):
    /// AWS answers with the XML tree written as JSON.
    QueryAsJson,
}

impl Wire {
    /// `X-Amz-Target` means AWS JSON 1.0; anything else is the query protocol.
    pub fn of(headers: &HeaderMap) -> Wire {
        let accepts_json = headers
            .get(header::ACCEPT)
            .and_then(|a| a.to_str().ok())
            .is_some_and(|a| a.contains("application/json"));
        if headers.contains_key("x-amz-target") {
            Wire::Json
        } else if accepts_json {
            Wire::QueryAsJson
        } else {
            Wire::Query
        }
    }
}

/// The largest request body read. A message is at most 1 MiB, but its wire form is larger:
/// JSON writes a two-byte character as a six-byte `\u00e9` and form encoding any byte as
/// `%XX` (3x), a binary attribute's base64 form-encoded is up to 4x. Larger bodies get
/// AWS's error in the wire's format, not a bare 413.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

pub async fn handle(
    State(state): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let request_id = crate::state::request_id();
    let wire = Wire::of(&headers);
    let outcome = answer(&state, &method, &uri, &headers, body).await;
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
        (Wire::QueryAsJson, Ok((action, answer))) => respond(
            StatusCode::OK,
            &request_id,
            PLAIN_JSON_CONTENT_TYPE,
            query_json_response(action, &answer.document(), &request_id).to_string(),
            None,
        ),
        (wire, Err(error)) => error_response(wire, &error, &request_id),
    }
}

/// The content type of the query protocol's JSON answers.
const PLAIN_JSON_CONTENT_TYPE: &str = "application/json";

/// An error in the format of the wire that asked.
pub fn error_response(wire: Wire, error: &ProtocolError, request_id: &str) -> Response {
    match wire {
        Wire::Json => respond(
            status(error),
            request_id,
            JSON_CONTENT_TYPE,
            json_error_body(error).to_string(),
            Some(query_error_header(error)),
        ),
        // A request naming no action gets AWS's bare XML element whatever it accepts.
        Wire::QueryAsJson if *error != ProtocolError::NoAction => respond(
            status(error),
            request_id,
            PLAIN_JSON_CONTENT_TYPE,
            query_json_error(error, request_id).to_string(),
            None,
        ),
        Wire::Query | Wire::QueryAsJson => respond(
            status(error),
            request_id,
            XML_CONTENT_TYPE,
            xml_error(error, request_id),
            None,
        ),
    }
}

async fn answer(
    state: &AppState,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> Result<(&'static str, Answer), ProtocolError> {
    refuse_browsers_of_other_sites(headers)?;
    let slot = state.request_slot().ok_or_else(|| {
        ProtocolError::ServiceUnavailable("The server is busy; try again.".into())
    })?;
    let body = read_body(body, headers, uri).await?;
    let host = host(headers);
    let ctx = Context {
        region: crate::region::of_request(headers, uri, &host),
        host,
    };
    let mut request = match headers.get("x-amz-target").and_then(|t| t.to_str().ok()) {
        Some(target) => parse_json(target, &body)?,
        None => parse_form(&ctx, method, uri, &body)?,
    };
    if let Some(trace) = headers.get("x-amzn-trace-id").and_then(|t| t.to_str().ok()) {
        request.add_trace_header(trace);
    }
    if method == Method::GET && !request.is_read_only() && !is_presigned(uri) {
        return Err(ProtocolError::AccessDenied(format!(
            "{} changes state and cannot be sent by an unsigned GET; send it by POST, or presign the URL.",
            request.action()
        )));
    }
    let answer = run(state, &ctx, &request, slot).await?;
    Ok((request.action(), answer))
}

/// A web page the developer has open must not drive a local server: browsers say where a
/// request comes from (`Origin`, `Sec-Fetch-Site`); AWS's SDKs and the CLI send neither.
fn refuse_browsers_of_other_sites(headers: &HeaderMap) -> Result<(), ProtocolError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let denied = |why: String| Err(ProtocolError::AccessDenied(why));
    if let Some(site) = header("sec-fetch-site") {
        if !matches!(site, "same-origin" | "none") {
            return denied(format!(
                "Requests a browser sends from another site ({site}) are refused."
            ));
        }
    }
    if let Some(origin) = header("origin") {
        let host = header("host").unwrap_or_default();
        let own = ["http://", "https://"]
            .iter()
            .any(|scheme| origin.strip_prefix(scheme) == Some(host));
        if !own {
            return denied(format!(
                "Requests from the web origin {origin} are refused."
            ));
        }
    }
    Ok(())
}

/// A query-string request that carries a SigV4 (or SigV2) presigned signature.
fn is_presigned(uri: &Uri) -> bool {
    let names: Vec<String> = form_params(uri.query().unwrap_or_default().as_bytes())
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let has = |name: &str| names.iter().any(|n| n == name);
    (has("X-Amz-Signature") && has("X-Amz-Credential") && has("X-Amz-Algorithm"))
        || (has("Signature") && has("AWSAccessKeyId"))
}

/// Reads the body up to `MAX_BODY_BYTES`; past it, AWS's error for the action, which comes
/// from the target header, the URL, or the start of a form body.
async fn read_body(body: Body, headers: &HeaderMap, uri: &Uri) -> Result<Vec<u8>, ProtocolError> {
    let mut body = body;
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ProtocolError::Malformed(e.to_string()))?;
        if let Some(data) = frame.data_ref() {
            if bytes.len() + data.len() > MAX_BODY_BYTES {
                return Err(too_large(headers, uri, &bytes, bytes.len() + data.len()));
            }
            bytes.extend_from_slice(data);
        }
    }
    Ok(bytes)
}

fn too_large(headers: &HeaderMap, uri: &Uri, start: &[u8], seen: usize) -> ProtocolError {
    let target = headers.get("x-amz-target").and_then(|t| t.to_str().ok());
    let from_form = |encoded: &[u8]| {
        form_params(encoded)
            .into_iter()
            .find(|(name, _)| name == "Action")
            .map(|(_, action)| action)
    };
    let action = target
        .and_then(|t| t.strip_prefix(TARGET_PREFIX))
        .map(str::to_string)
        .or_else(|| from_form(uri.query().unwrap_or_default().as_bytes()))
        .or_else(|| from_form(&start[..start.len().min(256)]));
    match action.as_deref() {
        Some("SendMessageBatch") => ProtocolError::Engine(EngineError::BatchRequestTooLong(
            MAX_MESSAGE_SIZE as usize,
            seen,
        )),
        Some("SendMessage") => ProtocolError::InvalidParameterValue(format!(
            "One or more parameters are invalid. Reason: Message must be shorter than {MAX_MESSAGE_SIZE} bytes."
        )),
        _ => ProtocolError::InvalidParameterValue(format!(
            "The request body is larger than {MAX_BODY_BYTES} bytes."
        )),
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
    // `/ACCOUNT/NAME`, or `/queue/REGION/ACCOUNT/NAME` for a queue of another region.
    let path = uri.path();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let is_queue_path = matches!(segments.as_slice(), [_, _] | ["queue", _, _, _]);
    let queue_url = is_queue_path.then(|| format!("http://{}{}", ctx.host, path));
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

async fn run(
    state: &AppState,
    ctx: &Context,
    request: &Request,
    slot: OwnedSemaphorePermit,
) -> Result<Answer, ProtocolError> {
    if let Request::ReceiveMessage(input) = request {
        return long_poll(state, ctx, input, slot).await;
    }
    // A send's conversions and checksums are taken before the lock, not under it.
    let prepared = Prepared::of(request);
    let (value, commit, woken, removed) = {
        let mut engine = if request.is_read_only() {
            state.engine_to_read()?
        } else {
            state.engine_to_change()?
        };
        let value = execute_prepared(&mut engine, ctx, request, prepared);
        // Which queue to wake, found under the same lock.
        let woken = request
            .may_wake_receivers()
            .then(|| {
                request
                    .queue_url()
                    .and_then(|url| queue_name(&engine, ctx.region.as_deref(), url).ok())
            })
            .flatten();
        (
            value,
            state.persist(&mut engine),
            woken,
            engine.take_removed(),
        )
    };
    if !removed.is_empty() {
        // A purged or deleted queue of a million messages takes long to free: not here.
        tokio::task::spawn_blocking(move || drop(removed));
    }
    if let Some(commit) = commit {
        committed(state, commit.await).await?;
    }
    let value = value?;
    if let Some(name) = woken {
        state.wake_some(&name, request.receivers_to_wake(&name));
    }
    Ok(Answer::Document(value))
}

/// ReceiveMessage with WaitTimeSeconds: returns as soon as a message is receivable, woken by
/// sends and visibility changes, or by the timer of the next delay or lease to end. While it
/// waits it gives its work slot back and holds a waiting slot instead; at shutdown it returns
/// at once with what it has (nothing).
async fn long_poll(
    state: &AppState,
    ctx: &Context,
    input: &ReceiveMessageInput,
    slot: OwnedSemaphorePermit,
) -> Result<Answer, ProtocolError> {
    let (queue, wait_s) = {
        let engine = state.engine();
        let url = input.queue_url.as_deref().unwrap_or_default();
        (
            queue_name(&engine, ctx.region.as_deref(), url),
            receive_wait_seconds(&engine, ctx, input),
        )
    };
    // Let the receive itself report a bad request, in AWS's order of checks.
    let (Ok(queue), Ok(wait_s)) = (queue, wait_s) else {
        return receive(&mut *state.engine_to_change()?, ctx, input).map(Answer::Received);
    };
    let deadline = Instant::now() + Duration::from_secs(u64::from(wait_s));
    let notify = state.waiter(&queue);
    let mut slot = Slot::working(slot);
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        // Only the engine's half runs under its lock; the answer is shaped after.
        let (taken, more, next_due, now_ms, commit) = {
            let mut engine = state.engine_to_change()?;
            let taken = take_messages(&mut engine, ctx, input);
            let commit = state.persist(&mut engine);
            let more = engine.counts(&queue).is_ok_and(|c| c.visible > 0);
            (
                taken,
                more,
                engine.next_due(&queue),
                engine.now_ms(),
                commit,
            )
        };
        if let Some(commit) = commit {
            committed(state, commit.await).await?;
        }
        let taken = taken?;
        if !taken.is_empty() && more {
            // Sends wake one waiter per message; pass on what this one left behind.
            state.wake_some(&queue, 1);
        }
        if !taken.is_empty() || Instant::now() >= deadline || state.is_shutting_down() {
            if taken.is_empty() {
                // Counted durably, but the answer does not wait for the write.
                let mut engine = state.engine();
                engine.record_empty_receive(&queue);
                state.persist_detached(&mut engine);
            }
            return Ok(Answer::Received(taken.shape()));
        }
        slot = slot.into_waiting(state)?;
        let wake_at = next_due.map_or(deadline, |due| {
            deadline.min(Instant::now() + Duration::from_millis(due.saturating_sub(now_ms)))
        });
        tokio::select! {
            _ = &mut notified => {}
            _ = tokio::time::sleep_until(wake_at) => {}
        }
    }
}

/// A commit's outcome as the request's: a failed write is an internal failure to its client,
/// and puts the server back to what the store holds.
async fn committed(state: &AppState, outcome: Result<(), StoreError>) -> Result<(), ProtocolError> {
    if let Err(error) = &outcome {
        state.store_failed(error).await;
    }
    outcome.map_err(|e| ProtocolError::Internal(e.to_string()))
}

/// What a receive holds: a work slot while it works, a waiting slot once it waits.
struct Slot {
    _permit: OwnedSemaphorePermit,
    waiting: bool,
}

impl Slot {
    fn working(permit: OwnedSemaphorePermit) -> Slot {
        Slot {
            _permit: permit,
            waiting: false,
        }
    }

    /// Gives the work slot back for a waiting one, or sheds the receive when none is free.
    fn into_waiting(self, state: &AppState) -> Result<Slot, ProtocolError> {
        if self.waiting {
            return Ok(self);
        }
        drop(self);
        let permit = state.waiting_slot().ok_or_else(|| {
            ProtocolError::RequestThrottled(
                "Too many receives are waiting for messages; try again.".into(),
            )
        })?;
        Ok(Slot {
            _permit: permit,
            waiting: true,
        })
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

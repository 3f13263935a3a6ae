//! The SQS endpoint over HTTP: reads the request's few HTTP facts into the protocol's
//! `HttpRequest`, which parses it (step one) and renders the answer (step three); in between
//! the request applies itself on the backend (step two), and a receive that finds nothing
//! waits here for the backend's wake-up. Request checks that are about HTTP (browsers of other sites, unsigned
//! state-changing GETs, the body limit) live here.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use leasehold_protocol::{
    Answer, Attempt, Context, HttpRequest, ProtocolError, Rendered, Request, Step,
};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::state::AppState;

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
    let header = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let host = header(header::HOST).unwrap_or("localhost");
    let origin = state.origin(host);
    let http = HttpRequest {
        is_post: method == Method::POST,
        path: uri.path(),
        query: uri.query().unwrap_or_default(),
        host,
        origin: Some(&origin),
        target: header(header::HeaderName::from_static("x-amz-target")),
        accept: header(header::ACCEPT),
        authorization: header(header::AUTHORIZATION),
        trace_id: header(header::HeaderName::from_static("x-amzn-trace-id")),
    };
    let wire = http.wire();
    let started = Instant::now();
    let mut seen = Seen::default();
    let rendered = match answer(&state, (&method, &uri), &http, &headers, body, &mut seen).await {
        // A receive's turn (`AppState::receiving_turn`) ends once its answer is rendered.
        Ok((action, answer, _turn)) => wire.render(action, answer, &request_id),
        Err(error) => wire.render_error(&error, &request_id),
    };
    tracing::debug!(
        action = seen.action.unwrap_or("-"),
        queue = seen.queue.as_deref().unwrap_or("-"),
        status = rendered.status,
        latency_ms = started.elapsed().as_secs_f64() * 1000.0,
        request_id = %request_id,
        "request"
    );
    respond(rendered, &request_id)
}

/// What a request turned out to be, for its log line: known once it parsed.
#[derive(Default)]
struct Seen {
    action: Option<&'static str>,
    queue: Option<String>,
}

/// An error in the format of the wire the headers say.
pub fn error_response(headers: &HeaderMap, error: &ProtocolError, request_id: &str) -> Response {
    let header = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let http = HttpRequest {
        target: header(header::HeaderName::from_static("x-amz-target")),
        accept: header(header::ACCEPT),
        ..HttpRequest::default()
    };
    respond(http.wire().render_error(error, request_id), request_id)
}

async fn answer(
    state: &AppState,
    (method, uri): (&Method, &Uri),
    http: &HttpRequest<'_>,
    headers: &HeaderMap,
    body: Body,
    seen: &mut Seen,
) -> Result<(&'static str, Answer, Option<OwnedSemaphorePermit>), ProtocolError> {
    refuse_browsers_of_other_sites(headers)?;
    check_the_head_early(state, method, uri, headers)?;
    let slot = state.request_slot().ok_or_else(|| {
        ProtocolError::ServiceUnavailable("The server is busy; try again.".into())
    })?;
    // A JSON request names its action in a header: a send refused anyway is not read.
    if let Some(action) = http.target.and_then(|t| t.strip_prefix("AmazonSQS.")) {
        refuse_growth_when_short(state, action)?;
    }
    let body = read_body(body, http).await?;
    let verified = authenticate(state, method, uri, headers, &body)?;
    // Only a presigned URL whose signature was checked may change state by GET: in open mode,
    // or beside a signed header, `X-Amz-*` parameters prove nothing.
    let signed_link = verified.as_ref().is_some_and(|v| v.presigned);
    let (mut ctx, request) = http.parse(&body)?;
    ctx.account = verified.map(|v| v.account);
    seen.action = Some(request.action());
    if tracing::enabled!(tracing::Level::DEBUG) {
        seen.queue = request
            .queue_url()
            .map(|url| url.rsplit('/').next().unwrap_or(url).to_string());
    }
    if !http.is_post && !request.is_read_only() && !signed_link {
        return Err(ProtocolError::AccessDenied(format!(
            "{} changes state and cannot be sent by an unsigned GET; send it by POST, or presign the URL.",
            request.action()
        )));
    }
    let action = request.action();
    if http.target.is_none() {
        // A query request names its action in its body: checked now that it is read.
        refuse_growth_when_short(state, action)?;
    }
    let (answer, turn) = run(state, &ctx, request, slot).await?;
    Ok((action, answer, turn))
}

/// Short of memory or disk, what would grow the server's state (new messages, new queues,
/// tags, attributes, permissions) is refused with `RequestThrottled`, which the AWS SDKs retry
/// with backoff; every other action goes on, so the backlog can drain.
fn refuse_growth_when_short(state: &AppState, action: &str) -> Result<(), ProtocolError> {
    const GROWTH: [&str; 6] = [
        "SendMessage",
        "SendMessageBatch",
        "CreateQueue",
        "TagQueue",
        "SetQueueAttributes",
        "AddPermission",
    ];
    if !GROWTH.contains(&action) {
        return Ok(());
    }
    match state.refusing_sends() {
        Some(why) => Err(ProtocolError::RequestThrottled(why)),
        None => Ok(()),
    }
}

/// With credentials configured, what the request's head can prove is checked before it takes
/// a work slot or has its body read: a signature by a known key, dated in time. The signature
/// itself covers the body, so it is checked after.
fn check_the_head_early(
    state: &AppState,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<(), ProtocolError> {
    let Some(auth) = &state.config.auth else {
        return Ok(());
    };
    let head = crate::auth::Arrived {
        method: method.as_str(),
        path_and_query: uri.path_and_query().map_or("/", |p| p.as_str()),
        headers,
        body: &[],
    };
    auth.check_head(&head, std::time::SystemTime::now())
}

/// With credentials configured, who signed the request and how (else AWS's error); without,
/// None: the server's own account.
fn authenticate(
    state: &AppState,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Option<crate::auth::Verified>, ProtocolError> {
    let Some(auth) = &state.config.auth else {
        return Ok(None);
    };
    let arrived = crate::auth::Arrived {
        method: method.as_str(),
        path_and_query: uri.path_and_query().map_or("/", |p| p.as_str()),
        headers,
        body,
    };
    auth.authenticate(&arrived, std::time::SystemTime::now())
        .map(Some)
}

/// A web page the developer has open must not drive a local server: browsers say where a
/// request comes from (`Origin`, `Sec-Fetch-Site`); AWS's SDKs and the CLI send neither.
pub(crate) fn refuse_browsers_of_other_sites(headers: &HeaderMap) -> Result<(), ProtocolError> {
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

/// Reads the body up to `MAX_BODY_BYTES`; past it, AWS's error for the action.
async fn read_body(body: Body, http: &HttpRequest<'_>) -> Result<Vec<u8>, ProtocolError> {
    let mut body = body;
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ProtocolError::Malformed(e.to_string()))?;
        if let Some(data) = frame.data_ref() {
            let seen = bytes.len() + data.len();
            if seen > MAX_BODY_BYTES {
                return Err(http.too_large(&bytes, seen, MAX_BODY_BYTES));
            }
            bytes.extend_from_slice(data);
        }
    }
    Ok(bytes)
}

/// Step two, and for a receive the waiting: an answer as soon as a message is receivable,
/// woken by the backend (a send, a release, a delete that frees a FIFO group) or by the timer
/// of the next delay or lease to end. While it waits it gives its work slot back and holds a
/// waiting slot instead; at shutdown it returns at once with what it has (nothing). Each
/// attempt takes a receiving turn first, kept with a taken answer until it is rendered.
async fn run(
    state: &AppState,
    ctx: &Context,
    request: Request,
    slot: OwnedSemaphorePermit,
) -> Result<(Answer, Option<OwnedSemaphorePermit>), ProtocolError> {
    let backend = &*state.backend;
    let receive = match request.apply(backend, ctx).await? {
        Step::Answer(answer) => return Ok((answer, None)),
        Step::Receive(receive) => receive,
    };
    let notify = backend.waiter(receive.queue());
    let mut deadline = None;
    let mut slot = Slot::working(slot);
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if deadline.is_some() && state.is_shutting_down() {
            // Woken by the shutdown: answered at once, with no turn to wait for.
            return Ok((receive.nothing(backend).await, None));
        }
        let turn = state.receiving_turn(receive.max_messages()).await;
        let (wait, look_again_in) = match receive.attempt(backend).await? {
            Attempt::Taken(answer) => return Ok((answer, Some(turn))),
            Attempt::Empty {
                wait,
                look_again_in,
            } => (wait, look_again_in),
        };
        drop(turn);
        let deadline = *deadline.get_or_insert_with(|| Instant::now() + wait);
        if Instant::now() >= deadline || state.is_shutting_down() {
            return Ok((receive.nothing(backend).await, None));
        }
        slot = slot.into_waiting(state)?;
        let wake_at = look_again_in.map_or(deadline, |due| deadline.min(Instant::now() + due));
        tokio::select! {
            _ = &mut notified => {}
            _ = tokio::time::sleep_until(wake_at) => {}
        }
    }
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

fn respond(rendered: Rendered, request_id: &str) -> Response {
    let status = StatusCode::from_u16(rendered.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = (status, rendered.body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(rendered.content_type),
    );
    if let Ok(id) = HeaderValue::from_str(request_id) {
        headers.insert("x-amzn-requestid", id);
    }
    if let Some(Ok(code)) = rendered.query_error.map(|q| HeaderValue::from_str(&q)) {
        headers.insert("x-amzn-query-error", code);
    }
    response
}

//! The dashboard: one page the server serves itself (assets embedded in the binary, uPlot
//! vendored), and the JSON it reads: every queue's counts, measurements and trouble; one
//! queue's lease report with the advisor's recommendation; a peek at the oldest messages that
//! changes nothing; and a move task from a dead-letter queue back to its sources. Behind the
//! admin routes' access rule (`admin::guard`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use leasehold_backend::MoveTaskStart;
use leasehold_engine::MessageState;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::lease_doc::LeaseReportDoc;
use crate::state::AppState;

/// Where the page lives.
pub const PATH: &str = "/_leasehold/dashboard/";
/// The most messages one peek shows.
const MAX_PEEK: usize = 100;

/// The dashboard's page, assets and JSON.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route(PATH, get(index))
        .route("/_leasehold/dashboard/{file}", get(asset))
        .route("/_leasehold/api/queues", get(queues))
        .route("/_leasehold/api/queues/{key}", get(queue))
        .route("/_leasehold/api/queues/{key}/messages", get(messages))
        .route("/_leasehold/api/queues/{key}/redrive", post(redrive))
}

/// `GET /`: a browser asking for a page (no query, HTML accepted) is sent to the dashboard;
/// anything else is an SQS request (a query-protocol GET).
pub async fn root(
    state: State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let wants_page = uri.query().is_none_or(str::is_empty)
        && headers
            .get(header::ACCEPT)
            .and_then(|a| a.to_str().ok())
            .is_some_and(|a| a.contains("text/html"));
    if wants_page {
        return Redirect::to(PATH).into_response();
    }
    crate::sqs::handle(state, method, uri, headers, body).await
}

/// The embedded files: (name, content type, bytes).
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/dashboard/app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("../assets/dashboard/app.css"),
    ),
    (
        "uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/dashboard/vendor/uPlot.iife.min.js"),
    ),
    (
        "uPlot.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../assets/dashboard/vendor/uPlot.min.css"),
    ),
];

async fn index() -> Response {
    let page = include_str!("../assets/dashboard/index.html");
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        page,
    )
        .into_response()
}

async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, content_type, bytes)) => (
            [
                (header::CONTENT_TYPE, *content_type),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            *bytes,
        )
            .into_response(),
        None => not_found(format!("no dashboard file {file}")),
    }
}

fn not_found(message: String) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({ "message": message }))).into_response()
}

fn failed(status: StatusCode, message: String) -> Response {
    (status, Json(json!({ "message": message }))).into_response()
}

/// `GET /_leasehold/api/queues`: every queue, with what the table shows.
async fn queues(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let reports = match state.backend.lease_reports("").await {
        Ok(reports) => reports,
        Err(e) => return failed(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    let mut rows = Vec::with_capacity(reports.len());
    let mut dead_letter_targets = BTreeMap::new();
    for (key, report) in &reports {
        let doc = LeaseReportDoc::of(key, report);
        let row = summary(&state, &headers, key, &doc).await;
        if let Some(target) = row["dead_letter_queue"].as_str() {
            dead_letter_targets.insert(key.clone(), target.to_string());
        }
        rows.push(row);
    }
    for row in &mut rows {
        let key = row["key"].as_str().unwrap_or_default().to_string();
        let sources: Vec<&String> = dead_letter_targets
            .iter()
            .filter(|(_, target)| **target == key)
            .map(|(source, _)| source)
            .collect();
        row["sources"] = json!(sources);
    }
    rows.sort_by(|a, b| a["key"].as_str().cmp(&b["key"].as_str()));
    Json(json!({ "queues": rows })).into_response()
}

/// One queue's row: its counts, counters, settings, dead-letter queue and trouble.
async fn summary(state: &AppState, headers: &HeaderMap, key: &str, doc: &LeaseReportDoc) -> Value {
    let naming = state.backend.naming();
    let attributes: BTreeMap<String, String> = state
        .backend
        // "All": a standard queue refuses to be asked for FifoQueue by name, as on AWS.
        .get_attributes(key, vec!["All".into()])
        .await
        .map(|pairs| pairs.into_iter().collect())
        .unwrap_or_default();
    let dead_letter_queue = attributes
        .get("RedrivePolicy")
        .and_then(|p| serde_json::from_str::<Value>(p).ok())
        .and_then(|p| {
            p["deadLetterTargetArn"]
                .as_str()
                .and_then(|a| naming.key_of_arn(a))
        });
    let redelivered: u64 = doc
        .receive_count_histogram
        .iter()
        .filter(|(count, _)| **count > 1)
        .map(|(_, messages)| messages)
        .sum();
    let mut trouble = Vec::new();
    if doc.late_deletes > 0 {
        trouble.push(format!("{} late deletes", doc.late_deletes));
    }
    if redelivered > 0 {
        trouble.push(format!("{redelivered} messages received more than once"));
    }
    if doc.dlq_moves_after_late_delete > 0 {
        trouble.push(format!(
            "DLQ mirage: {} dead-lettered after their work succeeded",
            doc.dlq_moves_after_late_delete
        ));
    }
    let (region, name) = naming.key_parts(key);
    json!({
        "key": key,
        "name": name,
        "region": region,
        "account": naming.key_account(key),
        "url": leasehold_protocol::queue_url(naming, &origin(state, headers), key),
        "fifo": attributes.get("FifoQueue").is_some_and(|v| v == "true"),
        "messages": doc.messages,
        "oldest_message_age_ms": doc.oldest_message_age_ms,
        "sent": doc.sent,
        "received": doc.received,
        "deleted": doc.deleted,
        "late_deletes": doc.late_deletes,
        "deleted_within_lease": doc.deleted_within_lease,
        "expired_leases": doc.expired_leases,
        "redelivered": redelivered,
        "dlq_moves": doc.dlq_moves,
        "dlq_moves_after_late_delete": doc.dlq_moves_after_late_delete,
        "visibility_timeout_s": doc.settings.visibility_timeout_s,
        "max_receive_count": doc.settings.max_receive_count,
        "dead_letter_queue": dead_letter_queue,
        "trouble": trouble,
    })
}

/// What queue URLs start with for this request, as the SQS endpoint would say.
fn origin(state: &AppState, headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    state.origin(host)
}

/// `GET /_leasehold/api/queues/{key}`: the row, the full lease report, the queue's sources
/// and the advisor's recommendation (or why there is none yet).
async fn queue(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Response {
    let report = match state.backend.lease_report(&key).await {
        Ok(report) => report,
        Err(e) => return not_found(e.to_string()),
    };
    let doc = LeaseReportDoc::of(&key, &report);
    let summary = summary(&state, &headers, &key, &doc).await;
    let url = summary["url"].as_str().unwrap_or_default().to_string();
    let sources: Vec<String> = match state
        .backend
        .list_dead_letter_source_queues(&key, leasehold_backend::Page::default())
        .await
    {
        Ok(page) => page.names,
        Err(_) => Vec::new(),
    };
    let advice =
        crate::advice::queue_advice(&doc, &url).unwrap_or_else(|why| json!({ "unavailable": why }));
    Json(json!({
        "summary": summary,
        "report": doc,
        "sources": sources,
        "advice": advice,
    }))
    .into_response()
}

#[derive(Deserialize)]
struct PeekQuery {
    limit: Option<usize>,
    /// Bodies are shown only when asked for.
    bodies: Option<bool>,
}

/// `GET /_leasehold/api/queues/{key}/messages?limit=N&bodies=true`: the oldest messages,
/// read without receiving them.
async fn messages(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
    Query(query): Query<PeekQuery>,
) -> Response {
    let limit = query.limit.unwrap_or(20).clamp(1, MAX_PEEK);
    let peeked = match state.backend.peek(&key, limit).await {
        Ok(peeked) => peeked,
        Err(e) => return not_found(e.to_string()),
    };
    let with_bodies = query.bodies.unwrap_or(false);
    let rows: Vec<Value> = peeked
        .iter()
        .map(|m| {
            json!({
                "message_id": m.message_id,
                "sent_ms": m.sent_ms,
                "receive_count": m.receive_count,
                "state": match m.state {
                    MessageState::Ready => "visible",
                    MessageState::InFlight => "in flight",
                    MessageState::Delayed => "delayed",
                },
                "until_ms": m.until_ms,
                "group_id": m.group_id.as_deref(),
                "body": with_bodies.then(|| m.body.to_string()),
            })
        })
        .collect();
    Json(json!({ "messages": rows, "limit": limit })).into_response()
}

#[derive(Deserialize)]
struct RedriveRequest {
    /// The number the confirmation showed; the move goes ahead whatever it is now, and the
    /// answer says both.
    expected: Option<u64>,
}

/// `POST /_leasehold/api/queues/{key}/redrive`: a message move task from this dead-letter
/// queue back to each message's source, as StartMessageMoveTask starts it.
async fn redrive(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
    body: Option<Json<RedriveRequest>>,
) -> Response {
    let report = match state.backend.lease_report(&key).await {
        Ok(report) => report,
        Err(e) => return not_found(e.to_string()),
    };
    let stored = report.counts.visible + report.counts.not_visible + report.counts.delayed;
    let task = MoveTaskStart {
        source_arn: state.backend.naming().queue_arn(&key),
        destination_arn: None,
        per_second: None,
    };
    match state.backend.start_move_task(task).await {
        Ok(handle) => Json(json!({
            "task_handle": handle,
            "messages": stored,
            "expected": body.and_then(|b| b.expected),
        }))
        .into_response(),
        Err(e) => failed(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

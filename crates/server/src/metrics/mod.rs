//! Prometheus over HTTP: `GET /metrics`, a fixed set of series whatever the number of queues
//! (every queue's figures added up, and the server's own gauges), and `GET /metrics/queues`,
//! a set of series per queue, of the queues whose name starts with `?prefix=` (all without
//! one), as RabbitMQ's aggregated and per-object endpoints. Both in OpenMetrics or the text
//! format 0.0.4, as the scraper asks.

mod families;
mod grows;
mod per_queue;
mod totals;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus_client::registry::Registry;
use serde::Deserialize;

use crate::state::AppState;
use grows::Retired;
use per_queue::QueueReports;
use totals::{Pressure, Totals};

/// What a scrape asks for.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// `/metrics`: the server's totals.
    Totals,
    /// `/metrics/queues`: each queue whose name starts with this.
    Queues(String),
}

/// What scrapes keep: the last answer built, and what the queues counted (`grows`), which
/// the build updates even when the request that asked is gone (timed out, disconnected).
#[derive(Default)]
pub(crate) struct Scrapes {
    last: Option<LastScrape>,
    retired: Arc<Mutex<Retired>>,
}

/// The last answer built: when its build began, what it answers and its text.
struct LastScrape {
    began: Instant,
    scope: Scope,
    format: Format,
    text: Bytes,
}

/// The two exposition formats: OpenMetrics (what the encoder writes, and what Prometheus
/// asks for first) and the older text format 0.0.4 (for everything that does not ask).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    OpenMetrics,
    Text004,
}

impl Format {
    fn of(headers: &HeaderMap) -> Format {
        let accept = headers
            .get(header::ACCEPT)
            .and_then(|a| a.to_str().ok())
            .unwrap_or_default();
        if accept.contains("application/openmetrics-text") {
            Format::OpenMetrics
        } else {
            Format::Text004
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text004 => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// `GET /metrics`.
pub async fn totals(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    scrape(&state, Scope::Totals, Format::of(&headers)).await
}

/// The query of `GET /metrics/queues`.
#[derive(Deserialize)]
pub struct QueueFilter {
    #[serde(default)]
    prefix: String,
}

/// `GET /metrics/queues?prefix=P`.
pub async fn queues(
    State(state): State<Arc<AppState>>,
    Query(filter): Query<QueueFilter>,
    headers: HeaderMap,
) -> Response {
    scrape(&state, Scope::Queues(filter.prefix), Format::of(&headers)).await
}

async fn scrape(state: &AppState, scope: Scope, format: Format) -> Response {
    let arrived = Instant::now();
    // One scrape builds at a time. A scraper that waited for it takes its answer when that
    // build began after the scraper arrived and answers the same question, so the answer is
    // never older than the request.
    let mut scrapes = state.scrapes.lock().await;
    let text = match &scrapes.last {
        Some(l) if l.began >= arrived && l.scope == scope && l.format == format => l.text.clone(),
        _ => {
            let began = Instant::now();
            let prefix = match &scope {
                Scope::Totals => "",
                Scope::Queues(prefix) => prefix.as_str(),
            };
            // A backend that cannot say answers no figures rather than zeros (which
            // Prometheus would take for a restart).
            let Ok(reports) = state.backend.lease_reports(prefix).await else {
                return StatusCode::SERVICE_UNAVAILABLE.into_response();
            };
            let pressure = Pressure::of(state);
            let retired = scrapes.retired.clone();
            let totals = scope == Scope::Totals;
            // Adding up or writing every queue's lines is long work: off the async workers.
            let encoded = tokio::task::spawn_blocking(move || {
                let mut registry = Registry::default();
                if totals {
                    // Usable after a panic (none is expected): at worst the counts of a queue
                    // deleted meanwhile are missed.
                    let mut retired = retired.lock().unwrap_or_else(PoisonError::into_inner);
                    registry.register_collector(Box::new(Totals::of(reports, &mut retired)));
                    registry.register_collector(Box::new(pressure));
                } else {
                    registry.register_collector(Box::new(QueueReports(reports)));
                }
                encode(&registry, format)
            })
            .await;
            let Ok(Ok(text)) = encoded else {
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            };
            let text = Bytes::from(text);
            scrapes.last = Some(LastScrape {
                began,
                scope,
                format,
                text: text.clone(),
            });
            text
        }
    };
    drop(scrapes);
    ([(header::CONTENT_TYPE, format.content_type())], text).into_response()
}

fn encode(registry: &Registry, format: Format) -> Result<String, std::fmt::Error> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry)?;
    Ok(match format {
        Format::OpenMetrics => text,
        Format::Text004 => openmetrics_to_text_004(&text),
    })
}

/// The text format 0.0.4 of an OpenMetrics exposition: a counter family is named by its
/// sample (`x_total`) in HELP and TYPE, and there are no UNIT lines and no `# EOF`.
pub fn openmetrics_to_text_004(text: &str) -> String {
    let counters: std::collections::HashSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

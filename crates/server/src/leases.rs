//! Leasehold's honesty about leases, over HTTP: `GET /_leasehold/queues/{name}/leases` as
//! JSON, and `GET /metrics` in the Prometheus text format.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use leasehold_engine::{Fairness, LeaseReport, NoisyTenant, HOLD_BUCKETS_MS};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
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

/// Every queue's report, taken at scrape time.
#[derive(Debug)]
struct QueueReports(Vec<(String, LeaseReport)>);

/// The server's own pressure gauges, taken at scrape time: memory against its limit, and
/// whether (and why) new messages are refused.
#[derive(Debug, Default)]
struct Pressure {
    resident_bytes: u64,
    limit_bytes: u64,
    refused_for_memory: u64,
    /// The reason sends are refused now: `memory` or `disk`.
    refusing: Option<&'static str>,
}

impl Pressure {
    fn of(state: &AppState) -> Pressure {
        let refusing = if state.memory.reason().is_some() {
            Some("memory")
        } else if state.backend.refusing_sends().is_some() {
            Some("disk")
        } else {
            None
        };
        Pressure {
            resident_bytes: state.memory.resident(),
            limit_bytes: state.memory.limit(),
            refused_for_memory: state.memory.refused(),
            refusing,
        }
    }
}

impl Collector for Pressure {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let plain = |v: f64| vec![(Vec::new(), v)];
        gauge(
            &mut encoder,
            "leasehold_memory_resident_bytes",
            "The server's resident memory, as last measured.",
            &plain(self.resident_bytes as f64),
        )?;
        gauge(
            &mut encoder,
            "leasehold_memory_limit_bytes",
            "The memory limit the server keeps under (cgroup, --memory-limit or a share of RAM).",
            &plain(self.limit_bytes as f64),
        )?;
        let refusing = |reason: &'static str| {
            (
                vec![("reason", reason.to_string())],
                f64::from(u8::from(self.refusing == Some(reason))),
            )
        };
        gauge(
            &mut encoder,
            "leasehold_sends_refused",
            "1 while new messages are refused (RequestThrottled), by reason.",
            &[refusing("memory"), refusing("disk")],
        )?;
        counter(
            &mut encoder,
            "leasehold_sends_refused_for_memory",
            "Send requests refused because memory was near its limit.",
            &[(Vec::new(), self.refused_for_memory)],
        )
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[(Vec<(&str, String)>, f64)],
) -> Result<(), std::fmt::Error> {
    let mut family =
        encoder.encode_descriptor(name, help, None, ConstGauge::new(0.0).metric_type())?;
    for (labels, value) in rows {
        ConstGauge::new(*value).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[(Vec<(&str, String)>, u64)],
) -> Result<(), std::fmt::Error> {
    let mut family =
        encoder.encode_descriptor(name, help, None, ConstCounter::new(0u64).metric_type())?;
    for (labels, value) in rows {
        ConstCounter::new(*value).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

/// Receive-to-delete time since start as a Prometheus histogram: fixed buckets, so the
/// histograms of several servers add up (quantiles do not).
fn hold_histogram(
    encoder: &mut DescriptorEncoder,
    reports: &[(String, LeaseReport)],
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        "leasehold_lease_hold_seconds",
        "Receive-to-delete time since start.",
        None,
        MetricType::Histogram,
    )?;
    for (name, report) in reports {
        let Some(buckets) = &report.hold_buckets else {
            continue;
        };
        let bounds = HOLD_BUCKETS_MS
            .iter()
            .map(|ms| *ms as f64 / 1000.0)
            .chain([f64::MAX]);
        let counted: Vec<(f64, u64)> = bounds.zip(buckets.counts.iter().copied()).collect();
        let total = buckets.counts.iter().sum();
        family
            .encode_family(&vec![("queue", name.clone())])?
            .encode_histogram::<NoLabelSet>(
                buckets.sum_ms as f64 / 1000.0,
                total,
                &counted,
                None,
            )?;
    }
    Ok(())
}

/// The noisy tenants of one queue with series of their own on `/metrics`.
const NOISY_TENANT_SERIES: usize = 20;

/// A label value as the exposition formats write it: prometheus-client writes values as
/// given, and a message group id (any printable ASCII, a sender's choice) may hold a quote or
/// a backslash.
fn escaped_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

impl QueueReports {
    /// AWS's fair-queue metrics for each standard queue, and each noisy tenant's share: of the
    /// `NOISY_TENANT_SERIES` with most in flight per queue, so the series stay few whatever
    /// the senders do (a tenant turns noisy with a tenth of its queue's leases or processing
    /// time, but stays so until its backlog is gone).
    fn encode_fairness(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let fair: Vec<(&String, &Fairness)> = self
            .0
            .iter()
            .filter_map(|(name, r)| Some((name, r.fairness.as_ref()?)))
            .collect();
        let per_queue = |f: &dyn Fn(&Fairness) -> f64| -> Vec<(Vec<(&str, String)>, f64)> {
            fair.iter()
                .map(|(name, fairness)| (vec![("queue", name.to_string())], f(fairness)))
                .collect()
        };
        gauge(
            encoder,
            "sqs_approximate_number_of_noisy_groups",
            "Message groups (tenants) of a fair queue found noisy.",
            &per_queue(&|f| f.noisy_groups as f64),
        )?;
        gauge(
            encoder,
            "sqs_approximate_number_of_messages_visible_in_quiet_groups",
            "Messages available for retrieval from quiet tenants.",
            &per_queue(&|f| f.quiet.visible as f64),
        )?;
        gauge(
            encoder,
            "sqs_approximate_number_of_messages_not_visible_in_quiet_groups",
            "Quiet tenants' messages in flight.",
            &per_queue(&|f| f.quiet.not_visible as f64),
        )?;
        gauge(
            encoder,
            "sqs_approximate_number_of_messages_delayed_in_quiet_groups",
            "Quiet tenants' messages delayed.",
            &per_queue(&|f| f.quiet.delayed as f64),
        )?;
        gauge(
            encoder,
            "sqs_approximate_age_of_oldest_message_in_quiet_groups_seconds",
            "Age of the oldest stored message of a quiet tenant.",
            &per_queue(&|f| f.oldest_quiet_age_ms.unwrap_or(0) as f64 / 1000.0),
        )?;
        let per_tenant = |f: &dyn Fn(&NoisyTenant) -> f64| -> Vec<(Vec<(&str, String)>, f64)> {
            let rows = fair.iter().flat_map(|(name, fairness)| {
                let most_in_flight = fairness.noisy.iter().take(NOISY_TENANT_SERIES);
                most_in_flight.map(move |tenant| {
                    let group = escaped_label(&tenant.group);
                    let labels = vec![("queue", name.to_string()), ("group", group)];
                    (labels, f(tenant))
                })
            });
            rows.collect()
        };
        gauge(
            encoder,
            "leasehold_noisy_tenant_messages_in_flight",
            "A noisy tenant's messages in flight.",
            &per_tenant(&|t| t.counts.in_flight as f64),
        )?;
        gauge(
            encoder,
            "leasehold_noisy_tenant_hold_seconds",
            "A noisy tenant's recent mean receive-to-end time.",
            &per_tenant(&|t| t.mean_hold_ms.unwrap_or(0) as f64 / 1000.0),
        )?;
        gauge(
            encoder,
            "leasehold_noisy_tenant_processing_share",
            "A noisy tenant's share of its queue's recent processing time, 0 to 1.",
            &per_tenant(&|t| f64::from(t.processing_permille) / 1000.0),
        )
    }
}

impl Collector for QueueReports {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let q = |name: &str| vec![("queue", name.to_string())];
        let per_queue_gauge = |f: &dyn Fn(&LeaseReport) -> f64| -> Vec<(Vec<(&str, String)>, f64)> {
            self.0.iter().map(|(n, r)| (q(n), f(r))).collect()
        };
        let per_queue_counter =
            |f: &dyn Fn(&LeaseReport) -> u64| -> Vec<(Vec<(&str, String)>, u64)> {
                self.0.iter().map(|(n, r)| (q(n), f(r))).collect()
            };
        // CloudWatch's SQS metrics, under their own names.
        gauge(
            &mut encoder,
            "sqs_approximate_number_of_messages_visible",
            "Messages available for retrieval.",
            &per_queue_gauge(&|r| r.counts.visible as f64),
        )?;
        gauge(
            &mut encoder,
            "sqs_approximate_number_of_messages_not_visible",
            "Messages in flight.",
            &per_queue_gauge(&|r| r.counts.not_visible as f64),
        )?;
        gauge(
            &mut encoder,
            "sqs_approximate_number_of_messages_delayed",
            "Messages delayed.",
            &per_queue_gauge(&|r| r.counts.delayed as f64),
        )?;
        gauge(
            &mut encoder,
            "sqs_approximate_age_of_oldest_message_seconds",
            "Age of the oldest stored message.",
            &per_queue_gauge(&|r| r.oldest_message_age_ms.unwrap_or(0) as f64 / 1000.0),
        )?;
        self.encode_fairness(&mut encoder)?;
        counter(
            &mut encoder,
            "sqs_number_of_messages_sent",
            "Messages added to the queue.",
            &per_queue_counter(&|r| r.stats.sent),
        )?;
        counter(
            &mut encoder,
            "sqs_number_of_messages_received",
            "Messages returned by ReceiveMessage.",
            &per_queue_counter(&|r| r.stats.received),
        )?;
        counter(
            &mut encoder,
            "sqs_number_of_messages_deleted",
            "Messages deleted.",
            &per_queue_counter(&|r| r.stats.deleted),
        )?;
        counter(
            &mut encoder,
            "sqs_number_of_empty_receives",
            "ReceiveMessage calls that returned nothing.",
            &per_queue_counter(&|r| r.stats.empty_receives),
        )?;
        // What SQS does not tell: first the lease a hold is measured against (the alert on a
        // hold time near its lease compares the two, deploy/prometheus/).
        gauge(
            &mut encoder,
            "leasehold_visibility_timeout_seconds",
            "The queue's visibility timeout: the lease a receive takes unless it asks another.",
            &per_queue_gauge(&|r| f64::from(r.visibility_timeout_s)),
        )?;
        let mut hold = Vec::new();
        let mut hold_max = Vec::new();
        for (name, r) in &self.0 {
            if let Some(s) = r.hold_recent {
                for (quantile, ms) in [
                    ("0.5", s.p50),
                    ("0.9", s.p90),
                    ("0.99", s.p99),
                    ("0.999", s.p999),
                ] {
                    hold.push((
                        vec![("queue", name.clone()), ("quantile", quantile.to_string())],
                        ms as f64 / 1000.0,
                    ));
                }
                hold_max.push((q(name), s.max as f64 / 1000.0));
            }
        }
        gauge(
            &mut encoder,
            "leasehold_lease_hold_recent_seconds",
            "Receive-to-delete time over the last 15 minutes, by quantile.",
            &hold,
        )?;
        gauge(
            &mut encoder,
            "leasehold_lease_hold_recent_max_seconds",
            "The longest receive-to-delete time over the last 15 minutes.",
            &hold_max,
        )?;
        hold_histogram(&mut encoder, &self.0)?;
        counter(
            &mut encoder,
            "leasehold_deleted_within_lease",
            "Deletes that arrived while their lease was live.",
            &per_queue_counter(&|r| r.stats.deleted_within_lease),
        )?;
        counter(
            &mut encoder,
            "leasehold_late_deletes",
            "Deletes that arrived after their lease expired: duplicate work.",
            &per_queue_counter(&|r| r.stats.late_deletes),
        )?;
        counter(
            &mut encoder,
            "leasehold_repeat_deletes",
            "Deletes whose message was already gone: another copy of the work finished first.",
            &per_queue_counter(&|r| r.stats.repeat_deletes),
        )?;
        counter(
            &mut encoder,
            "leasehold_expired_leases",
            "Leases that ran out; the message became receivable again.",
            &per_queue_counter(&|r| r.stats.leases_expired),
        )?;
        counter(
            &mut encoder,
            "leasehold_released_early",
            "Leases given back early: visibility set to 0, or to end sooner (a backoff).",
            &per_queue_counter(&|r| r.stats.released_early),
        )?;
        counter(
            &mut encoder,
            "leasehold_lease_extensions",
            "Heartbeats: visibility extended on a live lease.",
            &per_queue_counter(&|r| r.stats.extensions),
        )?;
        counter(
            &mut encoder,
            "leasehold_dlq_moves",
            "Messages moved to the dead-letter queue.",
            &per_queue_counter(&|r| r.stats.dead_lettered),
        )?;
        counter(
            &mut encoder,
            "leasehold_dlq_moves_after_late_delete",
            "Dead-lettered messages a consumer had finished: the DLQ mirage.",
            &per_queue_counter(&|r| r.stats.dead_lettered_after_late_delete),
        )?;
        let mut by_receives = Vec::new();
        for (name, r) in &self.0 {
            for (count, messages) in &r.receive_count_histogram {
                by_receives.push((
                    vec![
                        ("queue", name.clone()),
                        ("receive_count", count.to_string()),
                    ],
                    *messages as f64,
                ));
            }
        }
        gauge(
            &mut encoder,
            "leasehold_finished_messages_by_receive_count",
            "Deleted or dead-lettered messages by how many times they were delivered.",
            &by_receives,
        )?;
        Ok(())
    }
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

pub async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let arrived = Instant::now();
    let format = Format::of(&headers);
    // One scrape builds at a time. A scraper that waited for it takes its answer when that
    // build began after the scraper arrived, so the answer is never older than the request.
    let mut last = state.last_scrape.lock().await;
    let text = match &*last {
        Some((began, built, text)) if *began >= arrived && *built == format.content_type() => {
            text.clone()
        }
        _ => {
            let began = Instant::now();
            let reports = state.backend.lease_reports().await;
            let pressure = Pressure::of(&state);
            // Encoding every queue's lines is long work: off the async workers.
            let encoded =
                tokio::task::spawn_blocking(move || encode(reports, pressure, format)).await;
            let Ok(Ok(text)) = encoded else {
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            };
            let text = Bytes::from(text);
            *last = Some((began, format.content_type(), text.clone()));
            text
        }
    };
    drop(last);
    ([(header::CONTENT_TYPE, format.content_type())], text).into_response()
}

fn encode(
    reports: Vec<(String, LeaseReport)>,
    pressure: Pressure,
    format: Format,
) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(QueueReports(reports)));
    registry.register_collector(Box::new(pressure));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
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

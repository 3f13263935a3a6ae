//! The advisor on a queue's measurements: the report's hold times as the advisor's
//! distribution, the advice as JSON, and the commands that put it in place. `leasehold advise`
//! and the dashboard both use it.

use leasehold_advisor::{advise, Advice, Distribution, Evaluation, Inputs};
use serde_json::{json, Value};

use crate::lease_doc::LeaseReportDoc;

fn evaluation_json(e: &Evaluation) -> Value {
    json!({
        "visibility_timeout_s": e.visibility_timeout_s,
        "heartbeat_interval_s": e.heartbeat_interval_s,
        "max_receive_count": e.max_receive_count,
        "overrun_fraction": e.overrun_fraction,
        "crash_recovery_s": e.crash_recovery_s,
        "time_to_dlq_s": e.time_to_dlq_s,
        "verdict": e.verdict,
    })
}

pub fn advice_json(d: &Distribution, a: &Advice) -> Value {
    json!({
        "visibility_timeout_s": a.visibility_timeout_s,
        "heartbeat_interval_s": a.heartbeat_interval_s,
        "max_receive_count": a.max_receive_count,
        "time_to_dlq_s": a.time_to_dlq_s,
        "crash_recovery_s": a.crash_recovery_s,
        "shutdown_grace_s": a.shutdown_grace_s,
        "warnings": a.warnings,
        "reasons": a.reasons,
        "measured": {"count": d.count, "p50_s": d.p50, "p90_s": d.p90, "p99_s": d.p99, "p999_s": d.p999, "max_s": d.max},
        "evaluations": a.evaluations.iter().map(evaluation_json).collect::<Vec<_>>(),
        "alternatives": a.alternatives.iter().map(|alt| json!({
            "name": alt.name, "trade_off": alt.trade_off, "evaluation": evaluation_json(&alt.evaluation),
        })).collect::<Vec<_>>(),
    })
}

/// The measured hold times: the last 15 minutes when they hold enough to say something.
pub fn measured(report: &LeaseReportDoc) -> Result<Distribution, String> {
    let summary = if report.lease_hold_ms_last_15m.count >= 100 {
        &report.lease_hold_ms_last_15m
    } else {
        &report.lease_hold_ms
    };
    let s = |ms: Option<u64>| ms.map(|v| v as f64 / 1000.0);
    match (
        s(summary.p50),
        s(summary.p90),
        s(summary.p99),
        s(summary.p999),
        s(summary.max),
    ) {
        (Some(p50), Some(p90), Some(p99), Some(p999), Some(max)) => {
            Ok(Distribution::from_quantiles(p50, p90, p99, p999, max).with_count(summary.count))
        }
        _ => Err(format!(
            "queue {} has no measured deletes yet: run consumers first",
            report.queue
        )),
    }
}

/// The commands that put the advice in place.
pub fn apply_commands(
    advice: &Advice,
    queue_url: Option<&str>,
    has_dlq: Option<bool>,
) -> Vec<String> {
    let url = queue_url.unwrap_or("QUEUE_URL");
    let lease = advice.visibility_timeout_s;
    let mut lines = vec![format!(
        "aws sqs set-queue-attributes --queue-url {url} --attributes VisibilityTimeout={lease:.0}"
    )];
    let receives = advice.max_receive_count;
    lines.push(match has_dlq {
        Some(false) => format!(
            "  (the queue has no dead-letter queue: give it a RedrivePolicy with maxReceiveCount {receives})"
        ),
        _ => format!("  (and maxReceiveCount {receives} in the queue's RedrivePolicy)"),
    });
    let heartbeat = advice
        .heartbeat_interval_s
        .map(|h| format!(" --heartbeat {h:.0}"))
        .unwrap_or_default();
    lines.push(format!(
        "leasehold work --queue-url {url} --lease {lease:.0}{heartbeat} --grace {:.0} -- YOUR_COMMAND",
        advice.shutdown_grace_s
    ));
    lines
}

/// The advice for a queue from its own measurements and settings, as JSON with the commands
/// that apply it (`apply`), or why there is none yet.
pub fn queue_advice(report: &LeaseReportDoc, queue_url: &str) -> Result<Value, String> {
    let distribution = measured(report)?;
    let settings = report.settings;
    let inputs = Inputs {
        current_visibility_s: Some(f64::from(settings.visibility_timeout_s)),
        max_receive_count: settings.max_receive_count,
        retention_s: Some(f64::from(settings.retention_s)),
        ..Inputs::default()
    };
    let advice = advise(&distribution, &inputs);
    let mut value = advice_json(&distribution, &advice);
    value["apply"] = json!(apply_commands(
        &advice,
        Some(queue_url),
        Some(settings.max_receive_count.is_some())
    ));
    Ok(value)
}

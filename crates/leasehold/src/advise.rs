//! `leasehold advise`: sizing advice from a live queue's measurements or from a file of
//! durations.

use std::path::PathBuf;

use anyhow::{bail, Context};
use leasehold_advisor::{advise, Advice, Distribution, Evaluation, Inputs};
use serde_json::{json, Value};

#[derive(clap::Args)]
pub struct AdviseArgs {
    /// A file of processing times: one per line, or CSV with a header (see --column).
    #[arg(long, conflicts_with_all = ["endpoint", "queue"])]
    durations: Option<PathBuf>,
    /// The CSV column that holds the durations (default: the first numeric column).
    #[arg(long, requires = "durations")]
    column: Option<String>,
    /// The unit of the durations in the file: s or ms.
    #[arg(long, default_value = "s", requires = "durations")]
    unit: String,
    /// A Leasehold server whose measurements to read, e.g. http://127.0.0.1:9324.
    #[arg(long, requires = "queue")]
    endpoint: Option<String>,
    /// The queue whose measurements to read.
    #[arg(long, requires = "endpoint")]
    queue: Option<String>,
    /// The queue's maxReceiveCount, to check.
    #[arg(long)]
    max_receive_count: Option<u32>,
    /// The queue's retention period in seconds, to check.
    #[arg(long)]
    retention: Option<f64>,
    /// A Lambda consumer's function timeout in seconds.
    #[arg(long)]
    lambda_timeout: Option<f64>,
    /// The consumer's graceful-shutdown budget in seconds, to check.
    #[arg(long)]
    shutdown_grace: Option<f64>,
    /// The queue's current visibility timeout in seconds, to judge.
    #[arg(long)]
    visibility_timeout: Option<f64>,
    /// Multiplier on p99 for a constant lease.
    #[arg(long, default_value = "2")]
    safety_factor: f64,
    /// Longest acceptable wait, in seconds, before a crashed consumer's messages come back.
    #[arg(long, default_value = "300")]
    max_crash_recovery: f64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Reads durations: plain numbers one per line, or CSV with a header row.
pub fn read_durations(text: &str, column: Option<&str>, unit_ms: bool) -> anyhow::Result<Vec<f64>> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let Some(first) = lines.first() else {
        bail!("the file holds no durations")
    };
    let cells = |line: &str| {
        line.split(',')
            .map(|c| c.trim().trim_matches('"').to_string())
            .collect::<Vec<_>>()
    };
    let header = cells(first);
    let has_header = header.iter().any(|c| c.parse::<f64>().is_err());
    let index = match (has_header, column) {
        (true, Some(name)) => header
            .iter()
            .position(|c| c == name)
            .with_context(|| format!("no column named {name:?} in {header:?}"))?,
        (true, None) => {
            let sample = lines.get(1).map(|l| cells(l)).unwrap_or_default();
            sample
                .iter()
                .position(|c| c.parse::<f64>().is_ok())
                .context("no numeric column")?
        }
        (false, Some(_)) => bail!("--column needs a header row"),
        (false, None) => 0,
    };
    let scale = if unit_ms { 0.001 } else { 1.0 };
    lines
        .iter()
        .skip(usize::from(has_header))
        .enumerate()
        .map(|(n, line)| {
            let cell = cells(line).get(index).cloned().unwrap_or_default();
            cell.parse::<f64>().map(|v| v * scale).with_context(|| {
                format!(
                    "line {}: {cell:?} is not a number",
                    n + 1 + usize::from(has_header)
                )
            })
        })
        .collect()
}

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

fn print_human(d: &Distribution, a: &Advice) {
    println!(
        "Measured {} durations: p50 {:.1} s, p90 {:.1} s, p99 {:.1} s, p99.9 {:.1} s, max {:.1} s",
        d.count, d.p50, d.p90, d.p99, d.p999, d.max
    );
    println!();
    println!("Visibility timeout   {:.0} s", a.visibility_timeout_s);
    match a.heartbeat_interval_s {
        Some(h) => println!(
            "Heartbeat            every {h:.0} s (extend by {:.0} s)",
            a.visibility_timeout_s
        ),
        None => println!("Heartbeat            none needed"),
    }
    println!("maxReceiveCount      {}", a.max_receive_count);
    println!("Time to DLQ          {:.0} s", a.time_to_dlq_s);
    println!("Crash recovery       {:.0} s", a.crash_recovery_s);
    println!("Graceful shutdown    within {:.0} s", a.shutdown_grace_s);
    println!("\nWhy:");
    for r in &a.reasons {
        println!("  - {r}");
    }
    if !a.evaluations.is_empty() {
        println!("\nOther settings:");
        for e in &a.evaluations {
            println!("  - {:.0} s lease: {}", e.visibility_timeout_s, e.verdict);
        }
    }
    println!("\nWhat the seeds suggest instead:");
    for alt in &a.alternatives {
        println!(
            "  - {} ({:.0} s): {}. Trade-off: {}",
            alt.name, alt.evaluation.visibility_timeout_s, alt.evaluation.verdict, alt.trade_off
        );
    }
    println!("\nWarnings:");
    for w in &a.warnings {
        println!("  - {w}");
    }
}

pub async fn run(args: AdviseArgs) -> anyhow::Result<()> {
    let mut inputs = Inputs {
        current_visibility_s: args.visibility_timeout,
        max_receive_count: args.max_receive_count,
        retention_s: args.retention,
        lambda_timeout_s: args.lambda_timeout,
        shutdown_grace_s: args.shutdown_grace,
        safety_factor: args.safety_factor,
        max_crash_recovery_s: args.max_crash_recovery,
    };
    let distribution = match (&args.durations, &args.endpoint, &args.queue) {
        (Some(path), _, _) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let unit_ms = match args.unit.as_str() {
                "s" => false,
                "ms" => true,
                other => bail!("--unit is s or ms, not {other:?}"),
            };
            let durations = read_durations(&text, args.column.as_deref(), unit_ms)?;
            Distribution::from_durations(&durations).context("no usable durations")?
        }
        (None, Some(endpoint), Some(queue)) => {
            let url = format!(
                "{}/_leasehold/queues/{queue}/leases",
                endpoint.trim_end_matches('/')
            );
            let response = reqwest::get(&url)
                .await
                .with_context(|| format!("cannot reach {url}"))?;
            if !response.status().is_success() {
                bail!("{url} answered {}", response.status());
            }
            let report: Value = response
                .json()
                .await
                .context("the leases report is not JSON")?;
            let settings = &report["settings"];
            inputs.current_visibility_s = inputs
                .current_visibility_s
                .or(settings["visibility_timeout_s"].as_f64());
            inputs.max_receive_count = inputs
                .max_receive_count
                .or(settings["max_receive_count"].as_u64().map(|n| n as u32));
            inputs.retention_s = inputs.retention_s.or(settings["retention_s"].as_f64());
            // Prefer the last 15 minutes when they hold enough to say something.
            let recent = &report["lease_hold_ms_last_15m"];
            let summary = if recent["count"].as_u64().unwrap_or(0) >= 100 {
                recent
            } else {
                &report["lease_hold_ms"]
            };
            let ms = |k: &str| summary[k].as_f64().map(|v| v / 1000.0);
            match (ms("p50"), ms("p90"), ms("p99"), ms("p999"), ms("max")) {
                (Some(p50), Some(p90), Some(p99), Some(p999), Some(max)) => {
                    Distribution::from_quantiles(p50, p90, p99, p999, max)
                        .with_count(summary["count"].as_u64().unwrap_or(0))
                }
                _ => bail!("queue {queue} has no measured deletes yet: run consumers first"),
            }
        }
        _ => bail!("give --durations FILE, or --endpoint URL and --queue NAME"),
    };
    let advice = advise(&distribution, &inputs);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&advice_json(&distribution, &advice))?
        );
    } else {
        print_human(&distribution, &advice);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_and_csv_columns_are_read() {
        assert_eq!(
            read_durations("1\n2.5\n\n# note\n3\n", None, false).unwrap(),
            [1.0, 2.5, 3.0]
        );
        let csv = "id,duration_ms,ok\na,1500,true\nb,2500,true\n";
        assert_eq!(
            read_durations(csv, Some("duration_ms"), true).unwrap(),
            [1.5, 2.5]
        );
        assert_eq!(read_durations(csv, None, true).unwrap(), [1.5, 2.5]);
        assert!(read_durations("1\nx\n", None, false).is_err());
        assert!(read_durations(csv, Some("missing"), false).is_err());
    }
}

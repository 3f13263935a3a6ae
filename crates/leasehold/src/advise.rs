//! `leasehold advise`: sizing advice from a live queue's measurements or from a file of
//! durations.

use std::path::PathBuf;

use anyhow::{bail, Context};
use leasehold_advisor::{advise, Advice, Distribution, Inputs};
use leasehold_server::LeaseReportDoc;
use leasehold_worker::idempotency::with_causes;
use serde_json::json;

use crate::consume::usage;

#[derive(clap::Args)]
pub struct AdviseArgs {
    /// A file of processing times: one per line, or CSV with a header (see --column).
    #[arg(long, conflicts_with_all = ["endpoint_url", "queue", "queue_url"])]
    durations: Option<PathBuf>,
    /// The CSV column that holds the durations (default: the one column named like a
    /// duration, or the only numeric one).
    #[arg(long, requires = "durations")]
    column: Option<String>,
    /// The unit of the durations in the file: s or ms.
    #[arg(long, default_value = "s", requires = "durations")]
    unit: String,
    /// A Leasehold server whose measurements to read, e.g. http://127.0.0.1:9324 (else
    /// AWS_ENDPOINT_URL, else the --queue-url's own).
    #[arg(long, alias = "endpoint")]
    endpoint_url: Option<String>,
    /// The queue whose measurements to read, by URL.
    #[arg(long, conflicts_with = "queue")]
    queue_url: Option<String>,
    /// The server's admin token, when it checks signatures (its --admin-token).
    #[arg(long, env = "LEASEHOLD_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// The queue whose measurements to read, by name.
    #[arg(long)]
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
    /// Longest downstream outage, in seconds, to ride out without healthy messages reaching
    /// the DLQ: maxReceiveCount x the lease must outlast it.
    #[arg(long, default_value = "300")]
    max_outage: f64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Durations read from a file, and where they came from.
#[derive(Debug)]
pub struct Durations {
    pub values: Vec<f64>,
    /// The CSV column used, when the file has a header.
    pub column: Option<String>,
}

/// Header names that say a column holds durations.
const DURATION_WORDS: &[&str] = &[
    "duration", "seconds", "secs", "elapsed", "latency", "time", "ms", "took",
];

/// Reads durations: plain numbers one per line, or CSV with a header row. With several
/// numeric columns the column must be named (`--column`) unless exactly one header reads
/// like a duration. A value that is not a number, or is negative, is an error with its line.
pub fn read_durations(
    text: &str,
    column: Option<&str>,
    unit_ms: bool,
) -> anyhow::Result<Durations> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(n, l)| (n + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let Some((_, first)) = lines.first() else {
        bail!("the file holds no durations")
    };
    let cells = |line: &str| {
        line.split(',')
            .map(|c| c.trim().trim_matches('"').to_string())
            .collect::<Vec<_>>()
    };
    let header = cells(first);
    let has_header = header.iter().any(|c| c.parse::<f64>().is_err());
    let index = if has_header {
        Some(pick_column(
            &header,
            lines.get(1).map(|(_, l)| cells(l)),
            column,
        )?)
    } else if column.is_some() {
        bail!("--column needs a header row")
    } else if header.len() > 1 {
        bail!("the file has {} columns and no header: name them in a header row and pick one with --column", header.len())
    } else {
        None
    };
    let scale = if unit_ms { 0.001 } else { 1.0 };
    let values = lines
        .iter()
        .skip(usize::from(has_header))
        .map(|(n, line)| {
            let cell = cells(line)
                .get(index.unwrap_or(0))
                .cloned()
                .unwrap_or_default();
            match cell.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(v * scale),
                Ok(_) => bail!("line {n}: {cell:?} is not a duration (negative or not finite)"),
                Err(_) => bail!("line {n}: {cell:?} is not a number"),
            }
        })
        .collect::<anyhow::Result<Vec<f64>>>()?;
    Ok(Durations {
        values,
        column: index.map(|i| header[i].clone()),
    })
}

/// The column named by `--column`; else the only numeric one; else the only numeric one
/// whose header reads like a duration.
fn pick_column(
    header: &[String],
    sample: Option<Vec<String>>,
    column: Option<&str>,
) -> anyhow::Result<usize> {
    if let Some(name) = column {
        return header
            .iter()
            .position(|c| c == name)
            .with_context(|| format!("no column named {name:?} in {header:?}"));
    }
    let sample = sample.unwrap_or_default();
    let numeric: Vec<usize> = (0..header.len())
        .filter(|&i| sample.get(i).is_some_and(|c| c.parse::<f64>().is_ok()))
        .collect();
    let durations: Vec<usize> = numeric
        .iter()
        .copied()
        .filter(|&i| {
            let name = header[i].to_ascii_lowercase();
            DURATION_WORDS.iter().any(|w| name.contains(w))
        })
        .collect();
    match (numeric.as_slice(), durations.as_slice()) {
        ([], _) => bail!("no numeric column in {header:?}"),
        ([only], _) | (_, [only]) => Ok(*only),
        _ => bail!(
            "several numeric columns ({}): pick the durations with --column",
            numeric
                .iter()
                .map(|&i| header[i].as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
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
        max_outage_s: args.max_outage,
    };
    inputs.check().map_err(usage)?;
    let mut queue_url = None;
    // Whether the queue has a dead-letter queue, when a live queue says.
    let mut has_dlq = None;
    let distribution = match &args.durations {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let unit_ms = match args.unit.as_str() {
                "s" => false,
                "ms" => true,
                other => return Err(usage(format!("--unit is s or ms, not {other:?}"))),
            };
            let durations = read_durations(&text, args.column.as_deref(), unit_ms)
                .map_err(|e| usage(format!("{}: {e:#}", path.display())))?;
            if let Some(column) = &durations.column {
                eprintln!(
                    "leasehold: durations from column {column:?} of {}",
                    path.display()
                );
            }
            let n = durations.values.len();
            if n < 100 {
                eprintln!(
                    "leasehold: only {n} durations: a p99 needs at least 100 to mean anything"
                );
            } else if n < 1_000 {
                eprintln!(
                    "leasehold: {n} durations: the p99.9 needs at least 1,000 to mean anything"
                );
            }
            Distribution::from_durations(&durations.values).context("no usable durations")?
        }
        None => {
            let (endpoint, name) = live_queue(&args)?;
            queue_url = Some(
                args.queue_url
                    .clone()
                    .unwrap_or_else(|| format!("{endpoint}/000000000000/{name}")),
            );
            let report = leases_report(&endpoint, &name, args.admin_token.as_deref()).await?;
            let settings = report.settings;
            inputs.current_visibility_s = inputs
                .current_visibility_s
                .or(Some(f64::from(settings.visibility_timeout_s)));
            inputs.max_receive_count = inputs.max_receive_count.or(settings.max_receive_count);
            inputs.retention_s = inputs.retention_s.or(Some(f64::from(settings.retention_s)));
            has_dlq = Some(settings.max_receive_count.is_some());
            leasehold_server::advice::measured(&report).map_err(|e| anyhow::anyhow!(e))?
        }
    };
    let advice = advise(&distribution, &inputs);
    let apply = leasehold_server::advice::apply_commands(&advice, queue_url.as_deref(), has_dlq);
    if args.json {
        let mut value = leasehold_server::advice::advice_json(&distribution, &advice);
        value["apply"] = json!(apply);
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print_human(&distribution, &advice);
        println!("\nTo apply it:");
        for line in &apply {
            println!("  {line}");
        }
    }
    Ok(())
}

/// The server and queue name to read from: `--queue-url`, or `--queue` with
/// `--endpoint-url` (or `AWS_ENDPOINT_URL`).
fn live_queue(args: &AdviseArgs) -> anyhow::Result<(String, String)> {
    let endpoint = args
        .endpoint_url
        .clone()
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
        .or_else(|| {
            args.queue_url
                .as_deref()
                .and_then(crate::consume::endpoint_of)
        });
    let name = args.queue.clone().or_else(|| {
        args.queue_url
            .as_deref()
            .and_then(|u| u.rsplit('/').next())
            .map(str::to_string)
    });
    match (endpoint, name) {
        (Some(endpoint), Some(name)) => Ok((endpoint.trim_end_matches('/').to_string(), name)),
        _ => Err(usage(
            "give --durations FILE, or --queue-url URL (or --queue NAME with --endpoint-url URL)",
        )),
    }
}

async fn leases_report(
    endpoint: &str,
    name: &str,
    admin_token: Option<&str>,
) -> anyhow::Result<LeaseReportDoc> {
    let url = format!("{endpoint}/_leasehold/queues/{name}/leases");
    let mut request = reqwest::Client::new().get(&url);
    if let Some(token) = admin_token {
        request = request.bearer_auth(token);
    }
    let response = request
        .send()
        .await
        .map_err(|e| usage(format!("cannot reach {endpoint}: {}", with_causes(&e))))?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Err(usage(format!("there is no queue {name:?} on {endpoint}")));
    }
    if response.status() == reqwest::StatusCode::UNAUTHORIZED {
        return Err(usage(format!(
            "{endpoint} wants its admin token for the lease report: give --admin-token (or LEASEHOLD_ADMIN_TOKEN)"
        )));
    }
    if !response.status().is_success() {
        bail!("{url} answered {}", response.status());
    }
    response
        .json()
        .await
        .context("the leases report is not JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_and_csv_columns_are_read() {
        let values = |text, column, ms| read_durations(text, column, ms).map(|d| d.values);
        assert_eq!(
            values("1\n2.5\n\n# note\n3\n", None, false).unwrap(),
            [1.0, 2.5, 3.0]
        );
        let csv = "id,duration_ms,ok\na,1500,true\nb,2500,true\n";
        assert_eq!(values(csv, Some("duration_ms"), true).unwrap(), [1.5, 2.5]);
        assert_eq!(values(csv, None, true).unwrap(), [1.5, 2.5]);
        assert!(values("1\nx\n", None, false).is_err());
        assert!(values(csv, Some("missing"), false).is_err());
    }

    #[test]
    fn several_numeric_columns_need_a_name_unless_one_reads_like_a_duration() {
        let two = "job_id,seconds\n17,2.5\n18,3.5\n";
        let read = read_durations(two, None, false).unwrap();
        assert_eq!(
            (read.values, read.column.as_deref()),
            (vec![2.5, 3.5], Some("seconds"))
        );
        let ambiguous = "job_id,attempts\n17,2\n18,3\n";
        let err = read_durations(ambiguous, None, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--column"), "{err}");
        let err = read_durations("1\n-2\n", None, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2"), "{err}");
        let err = read_durations("seconds\n1\nlots\n", None, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 3"), "{err}");
    }
}

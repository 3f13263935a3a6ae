//! The outputs: a row per time step, a summary, and when the system recovered.

use std::path::Path;

use serde::Serialize;

use crate::scenario::Scenario;
use crate::sim::Tally;
use crate::{Outcome, SimError};

/// One time step.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Row {
    pub t_s: f64,
    pub arrivals: u64,
    pub executions: u64,
    pub duplicate_executions: u64,
    /// Executions per distinct message over the amplification window: how many times each
    /// message ran, not the load on the database (see `load_multiples`).
    pub amplification: f64,
    pub late_deletes: u64,
    pub visible: u64,
    pub in_flight: u64,
    pub db_running: u32,
    /// Mean processing time of the executions started in this step.
    pub db_latency_s: f64,
    pub workers: u32,
    pub dlq_messages: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    pub scenario: String,
    pub seed: u64,
    pub simulated_s: f64,
    pub unique_messages: u64,
    pub executions: u64,
    /// Executions beyond the first of each message.
    pub duplicate_executions: u64,
    /// Share of executed messages that were executed more than once.
    pub duplicate_fraction: f64,
    /// The seeds' "5-8x the load": the largest, over every `load_window_s` (60 s) of the
    /// time series, of the executions started on the database divided by the messages that
    /// arrived (the `load_multiple` column of timeseries.csv); null when no window saw an
    /// arrival.
    pub peak_load_multiple: Option<f64>,
    /// When that window ended, in seconds into the run.
    pub peak_load_multiple_at_s: Option<f64>,
    /// The largest executions per distinct message over `amplification_window_s`: how many
    /// times the messages of a stretch ran, which a collapse of throughput onto a few messages
    /// inflates; not a load.
    pub peak_amplification: f64,
    pub completed: u64,
    pub skipped_duplicates: u64,
    /// Redeliveries put back because the retry budget was spent.
    pub retries_refused: u64,
    pub late_deletes: u64,
    pub lost_leases: u64,
    /// Executions a Lambda function's timeout killed.
    pub function_timeouts: u64,
    pub dlq_messages: u64,
    pub dlq_messages_already_succeeded: u64,
    /// Whether the scenario has a trigger (a blip, a slow database, a crash) to recover from.
    pub had_trigger: bool,
    /// Whether the system was healthy again after the last trigger ended; null without a
    /// trigger, where there is nothing to recover from (see `stable`).
    pub recovered: Option<bool>,
    /// Seconds from the end of the last trigger until the system was healthy again; null when
    /// it did not recover, or had no trigger.
    pub recovery_s: Option<f64>,
    /// The arrival rate in force when the recovery began, in a scenario whose load changes:
    /// below the rate before the trigger, it is hysteresis (the spiral outlived the load that
    /// started it).
    pub arrival_rate_at_recovery: Option<f64>,
    /// Mean amplification over the second half of the run: where the system settled.
    pub steady_amplification: f64,
    /// Without a trigger: whether the second half ran healthy (no duplicate executions, no late
    /// deletes); null with a trigger (see `recovered`).
    pub stable: Option<bool>,
    /// Longest time a crashed worker's message stayed invisible before it was redelivered.
    pub crash_recovery_s: Option<f64>,
    /// Mean time from a poison message's first receive to its arrival in the DLQ.
    pub time_to_dlq_s: Option<f64>,
    /// Worker-seconds the poison messages' executions took; null without a poison trigger.
    pub poison_worker_s: Option<f64>,
    /// Worker-seconds of work a crash or a deploy killed before it finished; null without
    /// either trigger.
    pub lost_work_s: Option<f64>,
    pub peak_db_running: u32,
    pub peak_workers: u32,
    pub mean_latency_s: f64,
    pub peak_backlog: u64,
    pub wall_clock_s: f64,
    /// Each tenant's dwell time (send to first receive), the steady arrivals' under
    /// `scenario::OTHERS`; empty when the scenario has no tenants.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<TenantDwell>,
}

/// One tenant's dwell times: how long its messages waited for their first receive.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TenantDwell {
    pub tenant: String,
    /// Its messages received at least once.
    pub received: u64,
    pub p50_s: f64,
    pub p99_s: f64,
}

impl TenantDwell {
    fn of(tenant: &str, dwell_ms: &[u64]) -> TenantDwell {
        let mut sorted = dwell_ms.to_vec();
        sorted.sort_unstable();
        let at = |q: f64| {
            let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
            sorted.get(i).map_or(0.0, |ms| *ms as f64 / 1000.0)
        };
        TenantDwell {
            tenant: tenant.to_string(),
            received: sorted.len() as u64,
            p50_s: at(0.5),
            p99_s: at(0.99),
        }
    }
}

/// The tenants' dwell times as one line: `flood p50 12 s p99 40 s (900); ...`.
pub fn dwell_line(tenants: &[TenantDwell]) -> String {
    let each = tenants.iter().map(|t| {
        format!(
            "{} p50 {:.1} s, p99 {:.1} s ({} received)",
            t.tenant, t.p50_s, t.p99_s, t.received
        )
    });
    format!(
        "dwell, send to first receive: {}",
        each.collect::<Vec<_>>().join("; ")
    )
}

/// For each row, the executions started in the `window_s` that end with it divided by the
/// messages that arrived in them (a row covers the step that ends at its `t_s`): None for a
/// row less than a window into the run, or whose window saw no arrival.
pub fn load_multiples(rows: &[Row], window_s: f64) -> Vec<Option<f64>> {
    let (mut executions, mut arrivals) = (0u64, 0u64);
    let mut first = 0;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        executions += row.executions;
        arrivals += row.arrivals;
        while rows[first].t_s <= row.t_s - window_s + 1e-9 {
            executions -= rows[first].executions;
            arrivals -= rows[first].arrivals;
            first += 1;
        }
        let full = row.t_s >= window_s - 1e-9;
        out.push((full && arrivals > 0).then(|| executions as f64 / arrivals as f64));
    }
    out
}

/// The largest load multiple and when its window ended.
fn peak_load_multiple(rows: &[Row], window_s: f64) -> Option<(f64, f64)> {
    load_multiples(rows, window_s)
        .into_iter()
        .zip(rows)
        .filter_map(|(m, r)| m.map(|m| (m, r.t_s)))
        .reduce(|best, next| if next.0 > best.0 { next } else { best })
}

/// Healthy: no duplicate executions and no late deletes in a step, and the backlog no longer
/// than before the trouble (or than two steps of the fleet's work). Recovered: healthy for
/// `recovery_hold_s` on end (five minutes by default), or to the end of the run if that is at
/// least two fifths of it.
fn recovery(scenario: &Scenario, rows: &[Row]) -> (bool, Option<f64>) {
    let Some(end) = scenario.triggers_end_s() else {
        return (false, None);
    };
    let start = scenario
        .triggers
        .iter()
        .map(|t| t.start_s)
        .fold(f64::INFINITY, f64::min);
    let before: Vec<&Row> = rows.iter().filter(|r| r.t_s <= start).collect();
    let usual = before.iter().map(|r| r.visible).max().unwrap_or(0) as f64;
    let limit = (2.0 * usual).max(2.0 * scenario.scaling.workers as f64);
    let healthy =
        |r: &Row| r.duplicate_executions == 0 && r.late_deletes == 0 && (r.visible as f64) <= limit;
    let hold = scenario.recovery_hold_s;
    let last = rows.last().map_or(0.0, |r| r.t_s);
    for (i, row) in rows.iter().enumerate().filter(|(_, r)| r.t_s >= end) {
        let span: Vec<&Row> = rows[i..]
            .iter()
            .take_while(|r| r.t_s < row.t_s + hold)
            .collect();
        let long_enough = row.t_s + hold <= last || last - row.t_s >= 0.4 * hold;
        if long_enough && span.iter().all(|r| healthy(r)) {
            return (true, Some((row.t_s - end).max(0.0)));
        }
    }
    (false, None)
}

/// The second half of the run: its mean amplification, and whether every step was healthy.
fn settled(rows: &[Row]) -> (f64, bool) {
    let half = &rows[rows.len() / 2..];
    let executing: Vec<&Row> = half.iter().filter(|r| r.executions > 0).collect();
    let mean = if executing.is_empty() {
        1.0
    } else {
        executing.iter().map(|r| r.amplification).sum::<f64>() / executing.len() as f64
    };
    let healthy = half
        .iter()
        .all(|r| r.duplicate_executions == 0 && r.late_deletes == 0);
    (mean, healthy)
}

/// The one line that says how a run ended: recovered (or not) from its trigger, or, with none,
/// stable (or not) and at what amplification.
pub fn outcome_line(s: &Summary) -> String {
    match (s.had_trigger, s.recovery_s) {
        (true, Some(r)) => match s.arrival_rate_at_recovery {
            Some(rate) => format!(
                "recovered {r:.0} s after the trigger, once arrivals were down to {rate:.2}/s"
            ),
            None => format!("recovered {r:.0} s after the trigger"),
        },
        (true, None) => format!(
            "did not recover after the trigger (settled at {:.2}x)",
            s.steady_amplification
        ),
        (false, _) if s.stable == Some(true) => {
            format!("no trigger: stable at {:.2}x", s.steady_amplification)
        }
        (false, _) => format!(
            "no trigger, and not stable: {:.2}x in its second half",
            s.steady_amplification
        ),
    }
}

/// The summary of a run's tally: the simulator's, or one measured for real by `leasehold lab`.
pub fn summarize(scenario: &Scenario, t: &Tally) -> Summary {
    let had_trigger = scenario.triggers_end_s().is_some();
    let (recovered, recovery_s) = recovery(scenario, &t.rows);
    let (steady_amplification, healthy) = settled(&t.rows);
    let peak_load = peak_load_multiple(&t.rows, scenario.load_window_s);
    let mean =
        |v: &[u64]| (!v.is_empty()).then(|| v.iter().sum::<u64>() as f64 / v.len() as f64 / 1000.0);
    Summary {
        scenario: scenario.name.clone(),
        seed: scenario.seed,
        simulated_s: scenario.duration_s,
        unique_messages: t.arrivals,
        executions: t.executions,
        duplicate_executions: t.duplicate_executions,
        duplicate_fraction: if t.executed_messages == 0 {
            0.0
        } else {
            t.messages_executed_more_than_once as f64 / t.executed_messages as f64
        },
        peak_load_multiple: peak_load.map(|(m, _)| m),
        peak_load_multiple_at_s: peak_load.map(|(_, at)| at),
        peak_amplification: t.rows.iter().map(|r| r.amplification).fold(1.0, f64::max),
        completed: t.completed,
        skipped_duplicates: t.skipped_duplicates,
        retries_refused: t.retries_refused,
        late_deletes: t.rows.iter().map(|r| r.late_deletes).sum(),
        lost_leases: t.lost_leases,
        function_timeouts: t.function_timeouts,
        dlq_messages: t.dlq_messages,
        dlq_messages_already_succeeded: t.dlq_messages_already_succeeded,
        had_trigger,
        recovered: had_trigger.then_some(recovered),
        recovery_s,
        arrival_rate_at_recovery: recovery_s
            .filter(|_| !scenario.arrivals.rate_changes.is_empty())
            .zip(scenario.triggers_end_s())
            .map(|(r, end)| scenario.arrivals.rate_at(end + r)),
        steady_amplification,
        stable: (!had_trigger).then_some(healthy),
        crash_recovery_s: t
            .crash_recoveries_ms
            .iter()
            .max()
            .map(|m| *m as f64 / 1000.0),
        time_to_dlq_s: mean(&t.times_to_dlq_ms),
        poison_worker_s: (scenario.triggers.iter().any(|t| t.kind == "poison"))
            .then_some(t.poison_work_ms as f64 / 1000.0),
        lost_work_s: (scenario.triggers.iter())
            .any(|t| matches!(t.kind.as_str(), "crash" | "deploy"))
            .then_some(t.lost_work_ms as f64 / 1000.0),
        peak_db_running: t.peak_db_running,
        peak_workers: t.peak_workers,
        mean_latency_s: if t.executions == 0 {
            0.0
        } else {
            t.latency_sum_s / t.executions as f64
        },
        peak_backlog: t.rows.iter().map(|r| r.visible).max().unwrap_or(0),
        tenants: t
            .dwell_ms
            .iter()
            .map(|(tenant, dwell)| TenantDwell::of(tenant, dwell))
            .collect(),
        wall_clock_s: 0.0,
    }
}

fn io(e: impl std::fmt::Display) -> SimError {
    SimError::Output(e.to_string())
}

/// The rows as CSV, one line per step, with a header; `load_multiple` over `window_s`.
pub fn rows_csv(rows: &[Row], window_s: f64) -> String {
    let mut csv = String::from("t_s,arrivals,executions,duplicate_executions,amplification,late_deletes,visible,in_flight,db_running,db_latency_s,workers,dlq_messages,load_multiple\n");
    for (r, load) in rows.iter().zip(load_multiples(rows, window_s)) {
        csv.push_str(&format!(
            "{},{},{},{},{:.4},{},{},{},{},{:.3},{},{},{}\n",
            r.t_s,
            r.arrivals,
            r.executions,
            r.duplicate_executions,
            r.amplification,
            r.late_deletes,
            r.visible,
            r.in_flight,
            r.db_running,
            r.db_latency_s,
            r.workers,
            r.dlq_messages,
            load.map(|m| format!("{m:.4}")).unwrap_or_default()
        ));
    }
    csv
}

/// Writes summary.json, timeseries.csv, timeseries.json and the plots (SVG and PNG).
pub fn write_outputs(scenario: &Scenario, outcome: &Outcome, dir: &Path) -> Result<(), SimError> {
    std::fs::create_dir_all(dir).map_err(io)?;
    let summary = serde_json::to_string_pretty(&outcome.summary).map_err(io)?;
    std::fs::write(dir.join("summary.json"), summary + "\n").map_err(io)?;
    std::fs::write(
        dir.join("timeseries.json"),
        serde_json::to_string(&outcome.rows).map_err(io)?,
    )
    .map_err(io)?;
    std::fs::write(
        dir.join("timeseries.csv"),
        rows_csv(&outcome.rows, scenario.load_window_s),
    )
    .map_err(io)?;
    crate::plot::draw(scenario, outcome, dir)
}

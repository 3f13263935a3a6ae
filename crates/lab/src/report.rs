//! The report: what was measured beside what the simulator predicted for the same scenario,
//! how far apart they are, and which of the model's parameters the measurements contradict
//! (the reason for a disagreement, rather than a tuning that hides it).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use aws_sdk_sqs::Client;
use leasehold_sim::{Row, Scenario, Summary, Tally};
use leasehold_worker::WorkerStats;
use serde::Serialize;

use crate::downstream::ExecutionRow;
use crate::measure::Sample;
use crate::spec::LabSpec;
use crate::LabError;

/// What the lab's own tools saw go wrong (never a measure of the system).
#[derive(Default)]
pub struct Counts {
    pub sending: crate::load::Sending,
    pub delete_failures: u64,
    pub execution_failures: u64,
    pub first_execution_error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct LabReport {
    pub scenario: String,
    pub description: String,
    pub time_scale: f64,
    /// The scaling of time, in words.
    pub scaling: String,
    /// `naive` or `runtime`.
    pub consumers: &'static str,
    pub measured: Summary,
    pub predicted: Summary,
    /// How a comparison's tolerance is set (`TOLERANCE`).
    pub tolerance: &'static str,
    pub comparison: Vec<Comparison>,
    pub model_check: Vec<ModelCheck>,
    /// Each disagreement, in a sentence that names the measure or the model parameter.
    pub disagreements: Vec<String>,
    pub redrive: Option<crate::redrive::RedriveComparison>,
    /// What crashes and deploys' grace ends killed, from the downstream table: how many
    /// executions, and how many of their messages ran again within the run.
    pub kills: Option<Kills>,
    pub worker_stats: Option<WorkerStats>,
    /// Arrivals: sends that failed, and the worst delay of a send behind its schedule.
    pub sending: crate::load::Sending,
    pub delete_failures: u64,
    /// Executions the database failed (cancellations at a lost lease or the run's end aside).
    pub execution_failures: u64,
    pub first_execution_error: Option<String>,
    #[serde(skip)]
    pub measured_rows: Vec<Row>,
    #[serde(skip)]
    pub predicted_rows: Vec<Row>,
}

/// What crashes and deploys killed, counted from the downstream table.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Kills {
    pub killed_executions: u64,
    pub messages_ran_again: u64,
}

/// One measure, measured and predicted.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub measure: &'static str,
    pub measured: f64,
    /// The prediction with the scenario's own seed.
    pub predicted: f64,
    /// The least and the most of the predictions on the same arrivals with other work draws
    /// (`PREDICTIONS` of them): the model's own spread.
    pub predicted_min: f64,
    pub predicted_max: f64,
    /// measured - predicted.
    pub difference: f64,
    /// The measure within the predictions' spread, widened by its own small margin.
    pub agree: bool,
}

/// How many predictions give the spread a measurement is held to: the scenario's seed and the
/// next ones, each drawing other processing times for the same arrivals.
pub const PREDICTIONS: u64 = 10;

/// What a comparison's tolerance is, in words, for the report.
pub const TOLERANCE: &str = "a measure agrees when it lies within the least and the most of 10 predictions on the same arrivals (the scenario's seed and the nine after it, each drawing other processing times), widened by the measure's own small margin (a few executions, a tenth of a second, a quarter of the recovery hold)";

/// One parameter of the simulator's model, checked against the executions the downstream
/// recorded.
#[derive(Clone, Debug, Serialize)]
pub struct ModelCheck {
    pub parameter: &'static str,
    /// What is compared.
    pub what: &'static str,
    pub model: f64,
    pub measured: f64,
    /// Executions the measure is taken over.
    pub executions: usize,
    /// Off by more than a fifth, over at least five executions.
    pub off: bool,
}

/// Each measure of a summary, with its small margin: the same list for the measured run and
/// for every prediction.
fn measures(scenario: &Scenario, s: &Summary) -> Vec<(&'static str, f64, f64)> {
    let total = if s.unique_messages == 0 {
        1.0
    } else {
        s.executions as f64 / s.unique_messages as f64
    };
    let recovery = match (s.recovered, s.recovery_s) {
        (Some(true), Some(r)) => r,
        _ => scenario.duration_s,
    };
    let mut list = vec![
        ("peak_amplification", s.peak_amplification, 0.25),
        (
            "peak_load_multiple",
            s.peak_load_multiple.unwrap_or(0.0),
            0.25,
        ),
        ("total_amplification", total, 0.05),
        ("steady_amplification", s.steady_amplification, 0.1),
        ("duplicate_fraction", s.duplicate_fraction, 0.02),
        ("duplicate_executions", s.duplicate_executions as f64, 3.0),
        ("late_deletes", s.late_deletes as f64, 3.0),
        ("peak_db_running", f64::from(s.peak_db_running), 1.0),
        ("mean_latency_s", s.mean_latency_s, 0.1),
    ];
    if scenario.triggers_end_s().is_some() {
        list.push((
            "time_to_recover_s (the run's length if never)",
            recovery,
            scenario.recovery_hold_s * 0.25,
        ));
    }
    // A poison trigger's time to the DLQ and the workers' time it took; a crash's time until
    // the killed messages ran again; the work a crash or a deploy's grace cut short. A time
    // never reached counts as the run's length; margins: a quarter of the lease, a second.
    let lease_s = f64::from(scenario.queue.visibility_timeout_s);
    let has = |kinds: &[&str]| {
        scenario
            .triggers
            .iter()
            .any(|t| kinds.contains(&t.kind.as_str()))
    };
    if has(&["poison"]) {
        let time = "time_to_dlq_s (the run's length if none arrived)";
        list.push((
            time,
            s.time_to_dlq_s.unwrap_or(scenario.duration_s),
            0.25 * lease_s,
        ));
        list.push(("poison_worker_s", s.poison_worker_s.unwrap_or(0.0), 1.0));
    }
    if has(&["crash"]) {
        let time = "crash_recovery_s (the run's length if never)";
        list.push((
            time,
            s.crash_recovery_s.unwrap_or(scenario.duration_s),
            0.25 * lease_s,
        ));
    }
    if has(&["crash", "deploy"]) {
        list.push(("lost_work_s", s.lost_work_s.unwrap_or(0.0), 1.0));
    }
    if scenario.scaling.kind == "lambda" {
        // The fleet the controller grew, and the executions the function's timeout ended.
        list.push(("peak_workers", f64::from(s.peak_workers), 2.0));
        list.push(("function_timeouts", s.function_timeouts as f64, 3.0));
    }
    if scenario.queue.max_receive_count > 0 {
        list.push(("dlq_messages", s.dlq_messages as f64, 3.0));
        list.push((
            "dlq_messages_already_succeeded",
            s.dlq_messages_already_succeeded as f64,
            3.0,
        ));
    }
    list
}

/// The measured run against the predictions: the first is the scenario's own seed's.
fn comparisons(scenario: &Scenario, m: &Summary, predictions: &[Summary]) -> Vec<Comparison> {
    let predicted: Vec<Vec<(&'static str, f64, f64)>> =
        predictions.iter().map(|p| measures(scenario, p)).collect();
    measures(scenario, m)
        .into_iter()
        .enumerate()
        .map(|(i, (measure, measured, margin))| {
            let values: Vec<f64> = predicted.iter().map(|p| p[i].1).collect();
            let own = values.first().copied().unwrap_or(0.0);
            let min = values.iter().copied().fold(f64::INFINITY, f64::min);
            let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            Comparison {
                measure,
                measured,
                predicted: own,
                predicted_min: min,
                predicted_max: max,
                difference: measured - own,
                agree: measured >= min - margin && measured <= max + margin,
            }
        })
        .collect()
}

/// What the database was doing when an execution started, for the model checks.
struct Circumstances {
    /// Measured processing time over the time drawn for it: the slowdown it met.
    slowdown: f64,
    running: u32,
    blip: Option<f64>,
    copies: usize,
}

fn circumstances(
    scenario: &Scenario,
    samples: &[Sample],
    executions: &[ExecutionRow],
) -> Vec<Circumstances> {
    let mut by_message: HashMap<&str, Vec<&ExecutionRow>> = HashMap::new();
    for e in executions {
        by_message.entry(e.message_id.as_str()).or_default().push(e);
    }
    executions
        .iter()
        .filter_map(|e| {
            let end = e.finished_s?;
            let running = samples
                .iter()
                .find(|s| s.t_s >= e.started_s)
                .map_or(0, |s| s.db_running);
            let blip = scenario
                .triggers
                .iter()
                .find(|t| t.kind == "blip" && t.start_s <= e.started_s && e.started_s < t.end_s)
                .map(|t| t.factor);
            // An execution that overlapped a table lock measures the lock, not the model.
            let locked = scenario
                .triggers
                .iter()
                .any(|t| t.kind == "lock" && t.start_s < end && e.started_s < t.end_s);
            let copies = by_message[e.message_id.as_str()]
                .iter()
                .filter(|o| o.started_s < end && o.finished_s.is_none_or(|f| f > e.started_s))
                .count();
            (!locked).then_some(Circumstances {
                slowdown: (end - e.started_s) / e.unloaded_s.max(1e-3),
                running,
                blip,
                copies,
            })
        })
        .collect()
}

fn check(
    parameter: &'static str,
    what: &'static str,
    pairs: impl Iterator<Item = (f64, f64)>,
) -> ModelCheck {
    let pairs: Vec<(f64, f64)> = pairs.collect();
    let n = pairs.len();
    let mean = |f: fn(&(f64, f64)) -> f64| {
        if n == 0 {
            0.0
        } else {
            pairs.iter().map(f).sum::<f64>() / n as f64
        }
    };
    let (model, measured) = (mean(|p| p.0), mean(|p| p.1));
    ModelCheck {
        parameter,
        what,
        model,
        measured,
        executions: n,
        off: n >= 5 && (measured / model.max(1e-9) - 1.0).abs() > 0.2,
    }
}

/// The model's parameters against the executions: each compares the slowdown the model
/// gives an execution (its measured time over the time drawn for it) with the measured one,
/// over the executions whose circumstances isolate that parameter. Running counts are the
/// step's sample at the execution's start, so a load that changed while it ran blurs them.
fn model_checks(
    scenario: &Scenario,
    samples: &[Sample],
    executions: &[ExecutionRow],
) -> Vec<ModelCheck> {
    let db = &scenario.database;
    let all = circumstances(scenario, samples, executions);
    let capacity = db.capacity.max(1);
    let load = |c: &Circumstances| leasehold_sim::load_factor(db, c.running);
    let alone = |c: &&Circumstances| c.blip.is_none() && c.copies == 1;
    vec![
        check(
            "work",
            "slowdown at or under capacity, no trigger, no copy running (the lab's own overhead)",
            all.iter()
                .filter(alone)
                .filter(|c| c.running <= capacity)
                .map(|c| (1.0, c.slowdown)),
        ),
        check(
            "database.load_slope",
            "slowdown past capacity (no trigger, no copy running)",
            all.iter()
                .filter(alone)
                .filter(|c| c.running > capacity)
                .map(|c| (load(c), c.slowdown)),
        ),
        check(
            "triggers.factor",
            "slowdown during the blip (no copy running)",
            all.iter()
                .filter(|c| c.copies == 1)
                .filter_map(|c| c.blip.map(|f| (f * load(c), c.slowdown))),
        ),
        check(
            "database.contention",
            "slowdown of executions with a copy of their message running at once",
            all.iter()
                .filter(|c| c.blip.is_none() && c.copies > 1)
                .map(|c| {
                    (
                        load(c) * leasehold_sim::contention(db, c.copies as f64),
                        c.slowdown,
                    )
                }),
        ),
    ]
}

fn disagreements(comparison: &[Comparison], checks: &[ModelCheck]) -> Vec<String> {
    let mut lines: Vec<String> = checks
        .iter()
        .filter(|c| c.off)
        .map(|c| {
            format!(
                "{}: the model says {:.2}, the database measured {:.2} ({}; {} executions)",
                c.parameter, c.model, c.measured, c.what, c.executions
            )
        })
        .collect();
    lines.extend(comparison.iter().filter(|c| !c.agree).map(|c| {
        format!(
            "{}: measured {:.2}, predicted {:.2} ({:.2} to {:.2} over {PREDICTIONS} predictions)",
            c.measure, c.measured, c.predicted, c.predicted_min, c.predicted_max
        )
    }));
    lines
}

/// What the run measured, for the report.
pub struct Measurement<'a> {
    pub tally: Tally,
    pub executions: &'a [ExecutionRow],
    pub samples: &'a [Sample],
    pub counts: Counts,
    pub stats: Option<WorkerStats>,
}

/// The run's report: the measured tally beside the simulator's prediction.
pub fn compare(
    scenario: &Scenario,
    spec: &LabSpec,
    arrivals: &Path,
    measurement: Measurement<'_>,
) -> Result<LabReport, LabError> {
    let Measurement {
        tally,
        executions,
        samples,
        counts,
        stats,
    } = measurement;
    let on_arrivals = on_arrivals(scenario, arrivals);
    let predicted = leasehold_sim::run(&on_arrivals, &mut |_| {})?;
    let mut predictions = vec![predicted.summary.clone()];
    for k in 1..PREDICTIONS {
        let mut other = on_arrivals.clone();
        other.seed = scenario.seed.wrapping_add(k);
        predictions.push(leasehold_sim::run(&other, &mut |_| {})?.summary);
    }
    let measured = leasehold_sim::summarize(scenario, &tally);
    let comparison = comparisons(scenario, &measured, &predictions);
    let model_check = model_checks(scenario, samples, executions);
    Ok(LabReport {
        scenario: scenario.name.clone(),
        description: scenario.description.clone(),
        time_scale: spec.time_scale,
        scaling: scaling_sentence(scenario, spec),
        consumers: if crate::consumers::uses_runtime(scenario) {
            "runtime"
        } else if scenario.consumers.heartbeat {
            "naive, with a heartbeat that stops at shutdown"
        } else {
            "naive"
        },
        disagreements: disagreements(&comparison, &model_check),
        measured,
        predicted: predicted.summary,
        tolerance: TOLERANCE,
        comparison,
        model_check,
        redrive: None,
        kills: None,
        worker_stats: stats,
        sending: counts.sending,
        delete_failures: counts.delete_failures,
        execution_failures: counts.execution_failures,
        first_execution_error: counts.first_execution_error,
        measured_rows: tally.rows,
        predicted_rows: predicted.rows,
    })
}

/// The scenario as the simulator should predict it: on the arrivals the lab really sent
/// (`arrivals.txt`), so a different random stream is no part of a disagreement.
fn on_arrivals(scenario: &Scenario, arrivals: &Path) -> Scenario {
    let mut predicted = scenario.clone();
    predicted.arrivals.kind = "file".into();
    predicted.arrivals.file = Some(arrivals.display().to_string());
    predicted.arrivals.bursts.clear();
    predicted.arrivals.rate_changes.clear();
    predicted
}

/// Writes one arrival time per line, for the simulator's `arrivals.kind = "file"`.
pub fn write_arrivals(
    sending: &crate::load::Sending,
    dir: &Path,
) -> Result<std::path::PathBuf, LabError> {
    std::fs::create_dir_all(dir).map_err(io)?;
    let path = dir.join("arrivals.txt");
    let lines: String = sending
        .sent_at_s
        .iter()
        .map(|t| format!("{t:.3}\n"))
        .collect();
    std::fs::write(&path, lines).map_err(io)?;
    Ok(path)
}

fn scaling_sentence(scenario: &Scenario, spec: &LabSpec) -> String {
    let k = spec.time_scale;
    let mut s = if k == 1.0 {
        "Time is not scaled: the scenario's times are the story's.".to_string()
    } else {
        format!(
            "Time runs {k}x faster than the story it tells: the {} s lease stands for {}, the {:.0} s run for {}.",
            scenario.queue.visibility_timeout_s,
            story_time(f64::from(scenario.queue.visibility_timeout_s) * k),
            scenario.duration_s,
            story_time(scenario.duration_s * k)
        )
    };
    if !spec.story.is_empty() {
        s.push(' ');
        s.push_str(&spec.story);
    }
    s
}

/// 30 s as "30 s", 1500 s as "25 min".
fn story_time(seconds: f64) -> String {
    if seconds >= 120.0 {
        format!("{:.0} min", seconds / 60.0)
    } else {
        format!("{seconds:.0} s")
    }
}

/// Counts the dead-letter queue's messages and those whose work the downstream had finished:
/// each is received once (hidden while counting), then made visible again.
pub async fn dead_letters(
    client: &Client,
    url: &str,
    executions: &[ExecutionRow],
) -> Result<(u64, u64), LabError> {
    let finished: HashSet<&str> = executions
        .iter()
        .filter(|e| e.finished_s.is_some())
        .map(|e| e.message_id.as_str())
        .collect();
    let keys = crate::redrive::drain_keys(client, url, true).await?;
    let succeeded = keys
        .iter()
        .filter(|k| finished.contains(k.as_str()))
        .count();
    Ok((keys.len() as u64, succeeded as u64))
}

fn io(e: impl std::fmt::Display) -> LabError {
    LabError::Output(e.to_string())
}

fn pretty<T: Serialize + ?Sized>(value: &T) -> Result<String, LabError> {
    serde_json::to_string_pretty(value).map_err(io)
}

/// summary.json, the measured and predicted time series (CSV and JSON), the server's samples,
/// and comparison.svg/.png.
pub fn write(
    scenario: &Scenario,
    report: &LabReport,
    samples: &[Sample],
    dir: &Path,
) -> Result<(), LabError> {
    std::fs::create_dir_all(dir).map_err(io)?;
    std::fs::write(dir.join("summary.json"), pretty(report)? + "\n").map_err(io)?;
    std::fs::write(dir.join("measured.json"), pretty(&report.measured_rows)?).map_err(io)?;
    std::fs::write(dir.join("predicted.json"), pretty(&report.predicted_rows)?).map_err(io)?;
    std::fs::write(dir.join("samples.json"), pretty(samples)?).map_err(io)?;
    std::fs::write(
        dir.join("measured.csv"),
        leasehold_sim::rows_csv(&report.measured_rows, scenario.load_window_s),
    )
    .map_err(io)?;
    std::fs::write(
        dir.join("predicted.csv"),
        leasehold_sim::rows_csv(&report.predicted_rows, scenario.load_window_s),
    )
    .map_err(io)?;
    let title = format!(
        "{}: peak amplification measured {:.2}x, predicted {:.2}x (solid: measured; dashed: simulator)",
        scenario.name, report.measured.peak_amplification, report.predicted.peak_amplification
    );
    leasehold_sim::draw_comparison(
        scenario,
        &title,
        &report.measured_rows,
        &report.predicted_rows,
        dir,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scaling_is_said_in_the_storys_units() {
        let mut lab = Scenario {
            duration_s: 100.0,
            ..Scenario::default()
        };
        lab.queue.visibility_timeout_s = 2;
        let mut spec = LabSpec {
            time_scale: 15.0,
            ..LabSpec::default()
        };
        assert_eq!(
            scaling_sentence(&lab, &spec),
            "Time runs 15x faster than the story it tells: the 2 s lease stands for 30 s, the 100 s run for 25 min."
        );
        spec.time_scale = 1.0;
        assert!(scaling_sentence(&lab, &spec).starts_with("Time is not scaled"));
    }
}

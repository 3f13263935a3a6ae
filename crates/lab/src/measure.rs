//! Measuring the real system: the server's own counts (its lease report, polled each step),
//! the database's running transactions, and afterwards the downstream table's executions,
//! turned into the simulator's rows and tally so both summaries are computed alike.

use std::collections::{HashMap, HashSet};

use leasehold_sim::{Row, Scenario, Tally};
use serde::Serialize;
use serde_json::Value;

use crate::downstream::ExecutionRow;
use crate::LabError;

/// What the server and the database said at the end of one step.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Sample {
    pub t_s: f64,
    /// Cumulative, from the server's lease report of the source queue.
    pub sent: u64,
    pub received: u64,
    pub late_deletes: u64,
    pub dlq_moves: u64,
    pub visible: u64,
    pub in_flight: u64,
    /// Messages in the dead-letter queue (visible or not).
    pub dlq_messages: u64,
    /// Consumer transactions active on the database.
    pub db_running: u32,
    /// Consumers up (a lambda fleet's size changes).
    pub workers: u32,
}

/// Reads a queue's lease report from the server's admin routes.
pub async fn lease_report(
    http: &reqwest::Client,
    endpoint: &str,
    queue: &str,
) -> Result<Value, LabError> {
    let url = format!("{endpoint}/_leasehold/queues/{queue}/leases");
    let response = http
        .get(&url)
        .send()
        .await
        .map_err(|e| LabError::Server(format!("{url}: {e}")))?;
    if !response.status().is_success() {
        return Err(LabError::Server(format!("{url}: {}", response.status())));
    }
    response
        .json()
        .await
        .map_err(|e| LabError::Server(format!("{url}: {e}")))
}

fn count(doc: &Value, path: &[&str]) -> u64 {
    path.iter()
        .fold(doc, |v, key| &v[*key])
        .as_u64()
        .unwrap_or(0)
}

/// The source queue's report (and the DLQ's, if any) as one sample.
pub fn sample(
    t_s: f64,
    (source, dlq): (&Value, Option<&Value>),
    db_running: u32,
    workers: u32,
) -> Sample {
    Sample {
        t_s,
        sent: count(source, &["sent"]),
        received: count(source, &["received"]),
        late_deletes: count(source, &["late_deletes"]),
        dlq_moves: count(source, &["dlq_moves"]),
        visible: count(source, &["messages", "visible"]) + count(source, &["messages", "delayed"]),
        in_flight: count(source, &["messages", "not_visible"]),
        dlq_messages: dlq.map_or(0, |d| {
            count(d, &["messages", "visible"]) + count(d, &["messages", "not_visible"])
        }),
        db_running,
        workers,
    }
}

/// What the consumers and the dead-letter queue add to the table's executions.
#[derive(Default)]
pub struct Extras {
    pub skipped_duplicates: u64,
    pub put_back_in_progress: u64,
    pub lost_leases: u64,
    pub dlq_messages: u64,
    pub dlq_messages_already_succeeded: u64,
}

/// The measured run as the simulator's tally: one row per step from the samples and the
/// executions, counted with the simulator's definitions (an execution counts when it starts;
/// amplification is executions per distinct message over the window).
pub fn tally(
    scenario: &Scenario,
    samples: &[Sample],
    executions: &[ExecutionRow],
    extras: &Extras,
) -> Tally {
    let mut tally = Tally::default();
    let mut seen: HashMap<&str, u32> = HashMap::new();
    let mut duplicate_starts = Vec::new();
    for e in executions {
        let n = seen.entry(e.message_id.as_str()).or_default();
        *n += 1;
        if *n > 1 {
            duplicate_starts.push(e.started_s);
        }
    }
    tally.executions = executions.len() as u64;
    tally.duplicate_executions = duplicate_starts.len() as u64;
    tally.executed_messages = seen.len() as u64;
    tally.messages_executed_more_than_once = seen.values().filter(|n| **n > 1).count() as u64;
    tally.completed = executions
        .iter()
        .filter(|e| e.finished_s.is_some())
        .map(|e| e.message_id.as_str())
        .collect::<HashSet<_>>()
        .len() as u64;
    tally.latency_sum_s = executions.iter().filter_map(duration).sum();
    tally.arrivals = samples.last().map_or(0, |s| s.sent);
    tally.skipped_duplicates = extras.skipped_duplicates;
    tally.put_back_in_progress = extras.put_back_in_progress;
    tally.lost_leases = extras.lost_leases;
    tally.dlq_messages = extras.dlq_messages;
    tally.dlq_messages_already_succeeded = extras.dlq_messages_already_succeeded;
    tally.peak_db_running = samples.iter().map(|s| s.db_running).max().unwrap_or(0);
    tally.peak_workers = samples.iter().map(|s| s.workers).max().unwrap_or(0);
    tally.function_timeouts = executions.iter().filter(|e| e.timed_out).count() as u64;
    tally.rows = rows(scenario, samples, executions, &duplicate_starts);
    // Executions whose latency is known are the finished ones: the mean is over those.
    let finished = executions.iter().filter(|e| e.finished_s.is_some()).count() as f64;
    if finished > 0.0 {
        tally.latency_sum_s *= tally.executions as f64 / finished;
    }
    tally
}

/// What crashes did, from the executions they killed: for each, how long until its message
/// ran again (ms; none if it did not within the run), the work lost (ms run before the kill,
/// all together), and how many executions they killed.
pub fn crashes(executions: &[ExecutionRow]) -> (Vec<u64>, u64, u64) {
    let mut recoveries = Vec::new();
    let (mut lost_s, mut killed_executions) = (0.0, 0);
    for e in executions {
        let Some(killed) = e.killed_s else {
            continue;
        };
        killed_executions += 1;
        lost_s += (killed - e.started_s).max(0.0);
        // Its message's next run: any later start (a cut the runtime gave back may run again
        // before the lab marks it, when the mark is the time it saw the process end).
        let again = executions
            .iter()
            .filter(|x| x.message_id == e.message_id && x.started_s > e.started_s)
            .map(|x| x.started_s)
            .reduce(f64::min);
        if let Some(again) = again {
            recoveries.push(((again - killed).max(0.0) * 1000.0).round() as u64);
        }
    }
    (
        recoveries,
        (lost_s * 1000.0).round() as u64,
        killed_executions,
    )
}

/// Each tenant's dwell times (send to first execution, in ms), the steady arrivals' under
/// `OTHERS`: from when each unit of work went out and the downstream's executions.
pub fn dwell(
    sent_keys: &[(String, f64)],
    executions: &[ExecutionRow],
) -> std::collections::BTreeMap<String, Vec<u64>> {
    let mut first: HashMap<&str, f64> = HashMap::new();
    for e in executions {
        let at = first.entry(e.message_id.as_str()).or_insert(e.started_s);
        *at = at.min(e.started_s);
    }
    let mut dwell = std::collections::BTreeMap::<String, Vec<u64>>::new();
    for (key, sent_s) in sent_keys {
        let Some(started) = first.get(key.as_str()) else {
            continue;
        };
        let tenant = crate::load::tenant_of(key).unwrap_or(leasehold_sim::OTHERS);
        let ms = ((started - sent_s).max(0.0) * 1000.0).round() as u64;
        dwell.entry(tenant.to_string()).or_default().push(ms);
    }
    dwell
}

fn duration(e: &ExecutionRow) -> Option<f64> {
    e.finished_s.map(|f| f - e.started_s)
}

fn rows(
    scenario: &Scenario,
    samples: &[Sample],
    executions: &[ExecutionRow],
    duplicate_starts: &[f64],
) -> Vec<Row> {
    let step = scenario.step_s;
    let window = scenario.amplification_window_s;
    let mut previous = Sample::default();
    samples
        .iter()
        .map(|s| {
            let t = s.t_s;
            let in_step = |start: f64| start > t - step && start <= t;
            let started: Vec<&ExecutionRow> =
                executions.iter().filter(|e| in_step(e.started_s)).collect();
            let in_window: Vec<&ExecutionRow> = executions
                .iter()
                .filter(|e| e.started_s > t - window && e.started_s <= t)
                .collect();
            let distinct = in_window
                .iter()
                .map(|e| e.message_id.as_str())
                .collect::<HashSet<_>>()
                .len();
            let latencies: Vec<f64> = started.iter().filter_map(|e| duration(e)).collect();
            let row = Row {
                t_s: t,
                arrivals: s.sent.saturating_sub(previous.sent),
                executions: started.len() as u64,
                duplicate_executions: duplicate_starts.iter().filter(|d| in_step(**d)).count()
                    as u64,
                amplification: if distinct == 0 {
                    1.0
                } else {
                    in_window.len() as f64 / distinct as f64
                },
                late_deletes: s.late_deletes.saturating_sub(previous.late_deletes),
                visible: s.visible,
                in_flight: s.in_flight,
                db_running: s.db_running,
                db_latency_s: if latencies.is_empty() {
                    0.0
                } else {
                    latencies.iter().sum::<f64>() / latencies.len() as f64
                },
                workers: s.workers,
                dlq_messages: s.dlq_messages,
            };
            previous = s.clone();
            row
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(id: &str, start: f64, end: f64) -> ExecutionRow {
        ExecutionRow {
            message_id: id.into(),
            unloaded_s: 1.0,
            started_s: start,
            finished_s: Some(end),
            failed_s: None,
            killed_s: None,
            timed_out: false,
        }
    }

    fn killed(id: &str, start: f64, killed: f64) -> ExecutionRow {
        ExecutionRow {
            finished_s: None,
            killed_s: Some(killed),
            timed_out: false,
            ..exec(id, start, 0.0)
        }
    }

    #[test]
    fn a_crash_counts_its_kills_their_lost_work_and_when_each_message_ran_again() {
        let executions = [
            killed("m1", 1.0, 2.0),
            killed("m2", 1.5, 2.0),
            // Given back and run again before the cut was marked: back at once.
            exec("m1", 1.95, 3.0),
            killed("m3", 1.75, 2.0),
            exec("m2", 5.0, 6.0),
            exec("m4", 0.5, 1.0),
        ];
        let (recoveries, lost_ms, kills) = crashes(&executions);
        assert_eq!(recoveries, vec![0, 3_000], "m3 never ran again");
        assert_eq!(lost_ms, 1_750);
        assert_eq!(kills, 3);
    }

    #[test]
    fn executions_are_counted_as_the_simulator_counts_them() {
        let scenario = Scenario {
            step_s: 1.0,
            amplification_window_s: 2.0,
            ..Scenario::default()
        };
        let samples: Vec<Sample> = (1..=3)
            .map(|i| Sample {
                t_s: f64::from(i),
                sent: 2 * i as u64,
                ..Sample::default()
            })
            .collect();
        let executions = [
            exec("a", 0.1, 0.9),
            exec("b", 0.5, 1.5),
            exec("a", 1.2, 2.0),
            exec("a", 2.5, 2.9),
        ];
        let t = tally(&scenario, &samples, &executions, &Extras::default());
        assert_eq!(t.executions, 4);
        assert_eq!(t.duplicate_executions, 2);
        assert_eq!(t.messages_executed_more_than_once, 1);
        let amplification: Vec<f64> = t.rows.iter().map(|r| r.amplification).collect();
        // Step 1: a, b (2 / 2); step 2: a, b, a (3 / 2); step 3: window (1, 3]: a, a (2 / 1).
        assert_eq!(amplification, [1.0, 1.5, 2.0]);
        let duplicates: Vec<u64> = t.rows.iter().map(|r| r.duplicate_executions).collect();
        assert_eq!(duplicates, [0, 1, 1]);
        assert_eq!(t.rows[1].arrivals, 2);
    }
}

//! What happens to the system: arrivals sent to the real queue (Poisson at the scenario's
//! rate, its rate changes and bursts), and the triggers injected into the real database.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use aws_sdk_sqs::Client;
use leasehold_sim::Scenario;
use leasehold_worker::{CancellationToken, IDEMPOTENCY_KEY_ATTRIBUTE};

use crate::LabError;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use tokio::time::Instant;

use crate::downstream::Downstream;
use crate::processes::Processes;

fn work_key(seq: u64) -> Option<HashMap<String, MessageAttributeValue>> {
    named_key(&format!("w{seq}"))
}

fn named_key(key: &str) -> Option<HashMap<String, MessageAttributeValue>> {
    let value = MessageAttributeValue::builder()
        .data_type("String")
        .string_value(key)
        .build()
        .ok()?;
    Some(HashMap::from([(
        IDEMPOTENCY_KEY_ATTRIBUTE.to_string(),
        value,
    )]))
}

/// A message's unit of work: its idempotency key attribute, else its MessageId.
pub fn key_of(
    attributes: Option<&HashMap<String, MessageAttributeValue>>,
    message_id: &str,
) -> String {
    attributes
        .and_then(|a| a.get(IDEMPOTENCY_KEY_ATTRIBUTE))
        .and_then(|v| v.string_value.clone())
        .unwrap_or_else(|| message_id.to_string())
}

/// How the arrivals went: sends that failed, and how far behind its schedule a send went out
/// at worst (a busy machine delays arrivals; the report says by how much).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Sending {
    pub failed_sends: u64,
    pub max_lag_s: f64,
    /// When each message went out, in seconds from the start: the simulator's prediction
    /// runs on these same arrivals.
    #[serde(skip)]
    pub sent_at_s: Vec<f64>,
    /// Each message's unit of work and when it went out, tenants' too: for dwell times.
    #[serde(skip)]
    pub sent_keys: Vec<(String, f64)>,
}

/// Sends the scenario's arrivals from `start` until `stop`.
pub async fn produce(
    scenario: Scenario,
    client: Client,
    queue_url: String,
    start: Instant,
    stop: CancellationToken,
) -> Sending {
    let mut rng = StdRng::seed_from_u64(scenario.seed ^ 0x1ab);
    let mut bursts = scenario.arrivals.bursts.clone();
    bursts.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    let mut bursts = bursts.into_iter().peekable();
    let mut sending = Sending::default();
    let mut seq = 0u64;
    // The schedule runs on its own time, not on when the last send returned: a slow send
    // delays the next arrival, never thins the stream.
    let mut t = 0.0;
    loop {
        let rate = scenario.arrivals.rate_at(t);
        let mut next = Exp::new(rate)
            .ok()
            .filter(|_| rate > 0.0)
            .map_or(f64::INFINITY, |d| t + d.sample(&mut rng));
        let mut steady = true;
        if let Some(change) = scenario.arrivals.next_change_after(t) {
            if change < next {
                (next, steady) = (change, false);
            }
        }
        if let Some(b) = bursts.peek() {
            if b.at_s < next {
                (next, steady) = (b.at_s, false);
            }
        }
        if !next.is_finite() {
            // Nothing more to send: wait for the end.
            stop.cancelled().await;
            return sending;
        }
        tokio::select! {
            _ = stop.cancelled() => return sending,
            _ = tokio::time::sleep_until(start + Duration::from_secs_f64(next.max(0.0))) => {}
        }
        t = next;
        sending.max_lag_s = sending.max_lag_s.max(start.elapsed().as_secs_f64() - t);
        let burst = bursts.next_if(|b| b.at_s <= next).map_or(0, |b| b.count);
        let count = burst + u64::from(steady);
        for chunk in (0..count).collect::<Vec<_>>().chunks(10) {
            let entries = chunk.iter().map(|i| {
                seq += 1;
                // The unit of work's name travels as the idempotency key: what the downstream,
                // the runtime's gate and `leasehold redrive` all know a message by, through
                // any redrive (which may give it a new MessageId).
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(format!("work {seq}"))
                    .set_message_attributes(work_key(seq))
                    .build()
            });
            let failed = match send_batch(&client, &queue_url, entries).await {
                Some(failed) => failed.len(),
                None => chunk.len(),
            };
            sending.failed_sends += failed as u64;
            let sent = chunk.len().saturating_sub(failed);
            sending.sent_at_s.extend(std::iter::repeat_n(t, sent));
            let keys = (seq + 1 - chunk.len() as u64..=seq).map(|n| (format!("w{n}"), t));
            sending.sent_keys.extend(keys.take(sent));
        }
    }
}

/// The tenant of a unit of work, from its name (`tenant:w7`); None for the steady arrivals'.
pub fn tenant_of(key: &str) -> Option<&str> {
    key.rsplit_once(':').map(|(tenant, _)| tenant)
}

/// Sends tenant `index`'s arrivals (`Scenario::tenants`) from `start` until `stop`: Poisson
/// at its rate from its `from_s` to its `to_s`, those due together in batches of ten, each
/// carrying the tenant as MessageGroupId when the queue is fair and its name in its unit of
/// work's (`tenant:w7`).
pub async fn produce_tenant(
    scenario: Scenario,
    index: usize,
    client: Client,
    queue_url: String,
    start: Instant,
    stop: CancellationToken,
) -> Sending {
    let tenant = scenario.tenants[index].clone();
    let mut rng = StdRng::seed_from_u64(scenario.seed ^ 0x7e7a ^ index as u64);
    let mut sending = Sending::default();
    let rate = tenant.rate_per_s;
    let gaps = match Exp::new(rate) {
        Ok(gaps) if rate > 0.0 && rate.is_finite() => gaps,
        // No arrivals, as in the simulator.
        _ => return sending,
    };
    let until = tenant
        .to_s
        .unwrap_or(f64::INFINITY)
        .min(scenario.duration_s);
    let (mut t, mut seq) = (tenant.from_s, 0u64);
    while t < until {
        tokio::select! {
            _ = stop.cancelled() => return sending,
            _ = tokio::time::sleep_until(start + Duration::from_secs_f64(t.max(0.0))) => {}
        }
        let now = start.elapsed().as_secs_f64();
        sending.max_lag_s = sending.max_lag_s.max(now - t);
        let mut due = Vec::new();
        while t <= now && t < until && due.len() < 10 {
            seq += 1;
            due.push((format!("{}:w{seq}", tenant.name), t));
            t += gaps.sample(&mut rng);
        }
        let entries = due.iter().enumerate().map(|(i, (key, _))| {
            let entry = SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(format!("work {key}"))
                .set_message_attributes(named_key(key));
            let entry = match scenario.queue.fair {
                true => entry.message_group_id(&tenant.name),
                false => entry,
            };
            entry.build()
        });
        match send_batch(&client, &queue_url, entries).await {
            Some(failed) => {
                sending.failed_sends += failed.len() as u64;
                let sent = due
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| !failed.contains(&i.to_string()));
                sending.sent_keys.extend(sent.map(|(_, key)| key));
            }
            None => sending.failed_sends += due.len() as u64,
        }
    }
    sending
}

/// Sends one batch: the ids of the entries that failed, or None if the request did.
async fn send_batch<E>(
    client: &Client,
    queue_url: &str,
    entries: impl Iterator<Item = Result<SendMessageBatchRequestEntry, E>>,
) -> Option<Vec<String>> {
    let answer = client
        .send_message_batch()
        .queue_url(queue_url)
        .set_entries(Some(entries.filter_map(Result::ok).collect()))
        .send()
        .await
        .ok()?;
    Some(answer.failed.into_iter().map(|f| f.id).collect())
}

/// One thing a trigger does to the database, at a time.
enum Change {
    /// Work takes this many times as long from now on.
    SlowFactor(f64),
    /// The `records` table is locked for this long.
    Lock(Duration),
    /// This many poison messages are sent, numbered from the first.
    Poison { first: u64, count: u64 },
    /// Up to `workers` busy consumer processes are killed, and started again after
    /// `restart_after`.
    Crash {
        workers: u32,
        restart_after: Duration,
    },
    /// These consumer processes start again.
    Restart(Vec<i32>),
    /// A deploy stops this consumer process: it drains (SIGTERM), and is killed if it has
    /// not ended by the scenario's `graceful_shutdown_s`; `restart_after` once it is down,
    /// it starts again.
    DeployStop {
        worker: i32,
        restart_after: Duration,
    },
    /// Waits for a draining consumer's end, looking again every `DRAIN_LOOK_S` until `until`.
    Draining {
        worker: i32,
        until: f64,
        restart_after: Duration,
    },
}

/// The unit of work of the `n`th poison message: the downstream fails every execution of a
/// key so named (`downstream.rs`).
pub fn poison_key(n: u64) -> String {
    format!("poison-{n}")
}

/// Whether a unit of work is a poison message's.
pub fn is_poison(key: &str) -> bool {
    key.starts_with("poison-")
}

/// Sends poison messages `first..first + count`, ten at a time; says how many failed.
async fn send_poison(client: &Client, queue_url: &str, first: u64, count: u64) -> u64 {
    let mut failed = 0;
    let numbers: Vec<u64> = (first..first + count).collect();
    for chunk in numbers.chunks(10) {
        let entries = chunk.iter().enumerate().map(|(i, n)| {
            let key = poison_key(*n);
            SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(format!("work {key}"))
                .set_message_attributes(named_key(&key))
                .build()
        });
        failed += match send_batch(client, queue_url, entries).await {
            Some(refused) => refused.len() as u64,
            None => chunk.len() as u64,
        };
    }
    failed
}

/// How often a draining consumer is looked at, in seconds.
const DRAIN_LOOK_S: f64 = 0.05;

/// How long a deploy lets a consumer drain before it is killed: the scenario's grace; for
/// the runtime, which keeps that grace itself and then gives back what it could not finish,
/// a second more, so that its give-back is not cut short (an orchestrator's grace is set past
/// the application's own).
fn drain_limit_s(scenario: &Scenario) -> f64 {
    let grace = scenario.consumers.graceful_shutdown_s.max(0.0);
    match crate::consumers::uses_runtime(scenario) {
        true => grace + 1.0,
        false => grace,
    }
}

/// A crash: SIGKILLs up to `workers` consumer processes that are running an execution (the
/// first by number, as the simulator takes the first busy workers), marks what they ran as
/// killed, and answers which (to start again, even if marking one failed). A consumer that
/// finished its execution between the look at the table and the kill was idle when it
/// died: the crash takes the next busy one, so `workers` executions die as the simulator's.
async fn crash(
    downstream: &Downstream,
    processes: Option<&tokio::sync::Mutex<Processes>>,
    workers: u32,
) -> (Vec<i32>, Result<(), LabError>) {
    let Some(processes) = processes else {
        return (
            Vec::new(),
            Err(LabError::Setup("a crash needs consumer processes".into())),
        );
    };
    let mut killed = Vec::new();
    let mut executions_killed = 0;
    let mut processes = processes.lock().await;
    while executions_killed < workers {
        let busy = match downstream.busy_workers().await {
            Ok(busy) => busy,
            Err(e) => return (killed, Err(e)),
        };
        // A consumer still down from an earlier crash has nothing running, and a draining
        // one is the deploy's (the simulator's crash takes busy workers only): not taken.
        let Some(worker) = busy
            .into_iter()
            .find(|w| processes.is_running(*w) && !processes.is_draining(*w))
        else {
            break;
        };
        processes.kill(worker).await;
        killed.push(worker);
        match downstream.mark_killed(worker).await {
            Ok(true) => executions_killed += 1,
            Ok(false) => {}
            Err(e) => return (killed, Err(e)),
        }
    }
    (killed, Ok(()))
}

/// Plays the scenario's triggers: a blip makes work `factor` times slower from its start to
/// its end (a slow query on the database; the factor multiplies the load model's); a lock
/// holds the table every execution writes, as a migration would, from its start to its end;
/// a poison trigger sends `count` messages whose every execution fails; a crash kills busy
/// consumer processes and starts them again after its delay; a deploy stops each consumer
/// in turn (drained within the grace, else killed) and starts it again.
pub async fn triggers(
    scenario: Scenario,
    (downstream, processes): (&Downstream, Option<&tokio::sync::Mutex<Processes>>),
    (client, queue_url): (&Client, &str),
    start: Instant,
    stop: CancellationToken,
) {
    let mut changes: Vec<(f64, Change)> = Vec::new();
    let mut poisoned = 0;
    for t in &scenario.triggers {
        match t.kind.as_str() {
            "blip" => {
                changes.push((t.start_s, Change::SlowFactor(t.factor)));
                changes.push((t.end_s, Change::SlowFactor(1.0)));
            }
            "lock" => {
                let length = Duration::from_secs_f64((t.end_s - t.start_s).max(0.0));
                changes.push((t.start_s, Change::Lock(length)));
            }
            "poison" => {
                let (first, count) = (poisoned, t.count);
                poisoned += count;
                changes.push((t.start_s, Change::Poison { first, count }));
            }
            "crash" => {
                let restart_after = Duration::from_secs_f64(t.restart_after_s.max(0.0));
                let workers = t.workers;
                changes.push((
                    t.start_s,
                    Change::Crash {
                        workers,
                        restart_after,
                    },
                ));
            }
            "deploy" => {
                // One consumer every interval_s, as the simulator's rolling restart.
                let restart_after = Duration::from_secs_f64(t.restart_after_s.max(0.0));
                for worker in 0..crate::consumers::Fleet::size(&scenario) as i32 {
                    let at = t.start_s + t.interval_s * f64::from(worker);
                    changes.push((
                        at,
                        Change::DeployStop {
                            worker,
                            restart_after,
                        },
                    ));
                }
            }
            _ => {}
        }
    }
    loop {
        // Earliest first, and at one time in the order declared (a stable sort); a crash
        // adds its restart.
        changes.sort_by(|a, b| a.0.total_cmp(&b.0));
        if changes.is_empty() {
            return;
        }
        let (at, change) = changes.remove(0);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(start + Duration::from_secs_f64(at.max(0.0))) => {}
        }
        let done = match change {
            Change::SlowFactor(factor) => downstream.set_slow_factor(factor).await,
            Change::Lock(length) => downstream.lock_records(length, stop.clone()).await,
            Change::Poison { first, count } => {
                match send_poison(client, queue_url, first, count).await {
                    0 => Ok(()),
                    failed => Err(LabError::Server(format!(
                        "{failed} of {count} poison messages were not sent"
                    ))),
                }
            }
            Change::Crash {
                workers,
                restart_after,
            } => {
                let (killed, done) = crash(downstream, processes, workers).await;
                let back = at + restart_after.as_secs_f64();
                changes.push((back, Change::Restart(killed)));
                done
            }
            Change::DeployStop {
                worker,
                restart_after,
            } => {
                if let Some(processes) = processes {
                    let mut processes = processes.lock().await;
                    // One down or already draining is left alone, as the simulator does.
                    if processes.is_running(worker) && !processes.is_draining(worker) {
                        processes.terminate(worker);
                        let until = at + drain_limit_s(&scenario);
                        let draining = Change::Draining {
                            worker,
                            until,
                            restart_after,
                        };
                        changes.push((at + DRAIN_LOOK_S, draining));
                    }
                }
                Ok(())
            }
            Change::Draining {
                worker,
                until,
                restart_after,
            } => match processes {
                Some(processes) => {
                    let mut processes = processes.lock().await;
                    let mut done = Ok(());
                    if processes.is_running(worker) && at < until {
                        let again = Change::Draining {
                            worker,
                            until,
                            restart_after,
                        };
                        changes.push((at + DRAIN_LOOK_S, again));
                    } else {
                        if processes.is_running(worker) {
                            // The grace is over: killed, as the simulator's drain ends.
                            processes.kill(worker).await;
                        }
                        // What the drain did not finish (cut by the runtime's grace and
                        // given back, or killed) is work lost.
                        done = downstream.mark_cut(worker).await;
                        let back = at + restart_after.as_secs_f64();
                        changes.push((back, Change::Restart(vec![worker])));
                    }
                    done
                }
                None => Ok(()),
            },
            Change::Restart(workers) => match processes {
                Some(processes) => {
                    let mut processes = processes.lock().await;
                    // Each one tried, whatever another's start did.
                    let mut started = Ok(());
                    for worker in workers {
                        if let Err(e) = processes.restart(worker).await {
                            started = Err(e);
                        }
                    }
                    started
                }
                None => Ok(()),
            },
        };
        if let Err(e) = done {
            tracing::warn!("a trigger could not be played: {e}");
        }
    }
}

//! The scenarios: what each client does in a loop until the deadline, and how the results
//! are gathered.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::time::Instant;

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::client::SqsClient;
use crate::{BenchConfig, BenchError, Latency, Report};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// SendMessage, one message a call.
    Send,
    /// SendMessageBatch of 10.
    SendBatch,
    /// ReceiveMessage(10) and DeleteMessageBatch(10) of a preloaded queue.
    ReceiveDelete { preload: u64 },
    /// Half the clients SendMessageBatch(10); the other half ReceiveMessage(10, long poll)
    /// and DeleteMessageBatch(10).
    FullCycle,
    /// The full cycle spread over many queues: each client sends, receives and deletes on
    /// queue after queue.
    ManyQueues { queues: usize },
    /// One long poll waits on an empty queue; a message is sent; the time from the send's
    /// start to the long poll's return is the wake latency. Repeated until the deadline.
    LongPoll,
    /// A probe client's latency while a queue of `preload` messages is purged and another
    /// deleted (`big_ops.rs`).
    BigOps { preload: u64 },
}

impl FromStr for Scenario {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "send" => Scenario::Send,
            "send-batch" => Scenario::SendBatch,
            "receive-delete" => Scenario::ReceiveDelete { preload: 100_000 },
            "full-cycle" => Scenario::FullCycle,
                        "many-queues" => Scenario::ManyQueues { queues: 1000 },
            "long-poll" => Scenario::LongPoll,
            "big-ops" => Scenario::BigOps { preload: 100_000 },
            other => {
                return Err(format!(
                    "unknown scenario {other:?}: send, send-batch, receive-delete, full-cycle, many-queues, long-poll, big-ops"
                ))
            }
        })
    }
}

impl Scenario {
    fn name(&self) -> &'static str {
        match self {
            Scenario::Send => "send",
            Scenario::SendBatch => "send-batch",
            Scenario::ReceiveDelete { .. } => "receive-delete",
            Scenario::FullCycle => "full-cycle",
            Scenario::ManyQueues { .. } => "many-queues",
            Scenario::LongPoll => "long-poll",
            Scenario::BigOps { .. } => "big-ops",
        }
    }
}

/// One client's tally: messages sent and deleted, errors, each action's latency.
#[derive(Default)]
pub struct Tally {
    latency: HashMap<&'static str, Histogram<u64>>,
    pub sent: u64,
    pub deleted: u64,
    pub errors: u64,
}

impl Tally {
    /// One call of `action` that took `micros`.
    pub fn record(&mut self, action: &'static str, micros: u64) {
        self.latency
            .entry(action)
            .or_insert_with(|| Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds"))
            .saturating_record(micros.max(1));
    }

    pub fn merge(&mut self, other: Tally) {
        self.sent += other.sent;
        self.deleted += other.deleted;
        self.errors += other.errors;
        for (action, h) in other.latency {
            match self.latency.get_mut(action) {
                Some(mine) => mine.add(&h).expect("same bounds"),
                None => {
                    self.latency.insert(action, h);
                }
            }
        }
    }

    /// Makes one call and records it; errors are counted, not fatal, under load.
    pub(crate) async fn call(
        &mut self,
        sqs: &SqsClient,
        action: &'static str,
        body: Value,
    ) -> Option<Value> {
        self.call_as(sqs, action, bytes::Bytes::from(body.to_string()))
            .await
    }
}

fn batch(body: &str, n: usize, group: Option<&str>) -> Value {
    let entry = |i: usize| {
        let mut entry = json!({"Id": format!("m{i}"), "MessageBody": body});
        if let Some(group) = group {
            entry["MessageGroupId"] = json!(group);
        }
        entry
    };
    Value::Array((0..n).map(entry).collect())
}

/// Request bodies a client sends again and again, built once.
#[derive(Clone)]
pub(crate) struct Bodies {
    url: String,
    send_batch: bytes::Bytes,
    receive: [bytes::Bytes; 2],
}

impl Bodies {
    /// `group`: the MessageGroupId of every message sent (on a standard queue, one tenant).
    pub(crate) fn new(url: &str, body: &str, group: Option<&str>) -> Bodies {
        let receive = |wait: u32| {
            bytes::Bytes::from(
                json!({"QueueUrl": url, "MaxNumberOfMessages": 10, "WaitTimeSeconds": wait})
                    .to_string(),
            )
        };
        Bodies {
            url: url.to_string(),
            send_batch: bytes::Bytes::from(
                json!({"QueueUrl": url, "Entries": batch(body, 10, group)}).to_string(),
            ),
            receive: [receive(0), receive(1)],
        }
    }
}

#[derive(serde::Deserialize)]
struct Counted {
    #[serde(rename = "Successful", default)]
    successful: Vec<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct Received {
    #[serde(rename = "Messages", default)]
    messages: Vec<Handle>,
}

#[derive(serde::Deserialize)]
struct Handle {
    #[serde(rename = "ReceiptHandle")]
    receipt_handle: String,
}

#[derive(serde::Serialize)]
struct DeleteEntry<'a> {
    #[serde(rename = "Id")]
    id: String,
    #[serde(rename = "ReceiptHandle")]
    receipt_handle: &'a str,
}

#[derive(serde::Serialize)]
struct DeleteBatch<'a> {
    #[serde(rename = "QueueUrl")]
    queue_url: &'a str,
    #[serde(rename = "Entries")]
    entries: Vec<DeleteEntry<'a>>,
}

impl Tally {
    async fn call_as<T: serde::de::DeserializeOwned>(
        &mut self,
        sqs: &SqsClient,
        action: &'static str,
        body: bytes::Bytes,
    ) -> Option<T> {
        match sqs.call_as::<T>(action, body).await {
            Ok((value, micros)) => {
                self.record(action, micros);
                Some(value)
            }
            Err(_) => {
                self.errors += 1;
                None
            }
        }
    }
}

async fn send_batch(t: &mut Tally, sqs: &SqsClient, bodies: &Bodies) {
    if let Some(answer) = t
        .call_as::<Counted>(sqs, "SendMessageBatch", bodies.send_batch.clone())
        .await
    {
        t.sent += answer.successful.len() as u64;
    }
}

/// Receives up to 10 and deletes them; returns how many it deleted.
pub(crate) async fn receive_delete(
    t: &mut Tally,
    sqs: &SqsClient,
    bodies: &Bodies,
    long_poll: bool,
) -> u64 {
    let request = bodies.receive[usize::from(long_poll)].clone();
    let Some(answer) = t.call_as::<Received>(sqs, "ReceiveMessage", request).await else {
        return 0;
    };
    if answer.messages.is_empty() {
        return 0;
    }
    let delete = DeleteBatch {
        queue_url: &bodies.url,
        entries: answer
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| DeleteEntry {
                id: format!("d{i}"),
                receipt_handle: &m.receipt_handle,
            })
            .collect(),
    };
    let body = bytes::Bytes::from(serde_json::to_string(&delete).expect("serialisable"));
    let deleted = t
        .call_as::<Counted>(sqs, "DeleteMessageBatch", body)
        .await
        .map_or(0, |a| a.successful.len() as u64);
    t.deleted += deleted;
    deleted
}

pub(crate) async fn create_queue(sqs: &SqsClient, name: &str) -> Result<String, BenchError> {
    let (answer, _) = sqs.call("CreateQueue", &json!({"QueueName": name})).await?;
    answer["QueueUrl"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| BenchError::Answer {
            action: "CreateQueue".into(),
            reason: "no QueueUrl".into(),
        })
}

pub(crate) async fn preload(sqs: &SqsClient, bodies: &Bodies, messages: u64, clients: usize) {
    let per_client = messages.div_ceil(10).div_ceil(clients as u64);
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (sqs, bodies) = (sqs.clone(), bodies.clone());
            tokio::spawn(async move {
                let mut t = Tally::default();
                for _ in 0..per_client {
                    send_batch(&mut t, &sqs, &bodies).await;
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
}

/// CPU ticks (user + system) of a process, from /proc: a hundred a second.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Peak resident memory of a process, in MiB, from /proc.
pub fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Wake latency of a long poll: from the start of the send that feeds it to its return.
async fn long_poll(sqs: &SqsClient, url: &str, config: &BenchConfig) -> Result<Report, BenchError> {
    let mut t = Tally::default();
    let started = Instant::now();
    let deadline = started + config.duration;
    let wait = bytes::Bytes::from(
        json!({"QueueUrl": url, "MaxNumberOfMessages": 1, "WaitTimeSeconds": 20}).to_string(),
    );
    let send = bytes::Bytes::from(json!({"QueueUrl": url, "MessageBody": "wake"}).to_string());
    while Instant::now() < deadline {
        let (waiter_sqs, waiter_body) = (sqs.clone(), wait.clone());
        let waiter = tokio::spawn(async move {
            let answer = waiter_sqs
                .call_as::<Received>("ReceiveMessage", waiter_body)
                .await;
            (answer, Instant::now())
        });
        // Let the receive arrive and start waiting.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let sent_at = Instant::now();
        let sent = t
            .call_as::<serde::de::IgnoredAny>(sqs, "SendMessage", send.clone())
            .await;
        t.sent += u64::from(sent.is_some());
        match waiter.await {
            Ok((Ok((answer, _)), returned)) if !answer.messages.is_empty() => {
                t.record(
                    "long-poll wake",
                    returned.saturating_duration_since(sent_at).as_micros() as u64,
                );
                t.deleted += 1;
                let delete =
                    json!({"QueueUrl": url, "ReceiptHandle": answer.messages[0].receipt_handle})
                        .to_string();
                let _ = t
                    .call_as::<serde::de::IgnoredAny>(
                        sqs,
                        "DeleteMessage",
                        bytes::Bytes::from(delete),
                    )
                    .await;
            }
            _ => t.errors += 1,
        }
    }
    let _ = sqs.call("DeleteQueue", &json!({"QueueUrl": url})).await;
    let mut report = one_client_report("long-poll", &t, started.elapsed().as_secs_f64());
    report.server_rss_mib = config.server_pid.and_then(peak_rss_mib);
    Ok(report)
}

/// The report of a scenario one client runs: messages are those it deleted.
pub(crate) fn one_client_report(scenario: &str, t: &Tally, seconds: f64) -> Report {
    t.report(scenario, 1, seconds)
}

impl Tally {
    /// A run's report from its tally: messages are those deleted; no server measured.
    pub fn report(&self, scenario: &str, clients: usize, seconds: f64) -> Report {
        Report {
            scenario: scenario.into(),
            clients,
            seconds,
            messages_per_second: self.deleted as f64 / seconds,
            messages: self.deleted,
            sent_per_second: self.sent as f64 / seconds,
            deleted_per_second: self.deleted as f64 / seconds,
            errors: self.errors,
            latency: summarize_latency(self),
            server_cpu_percent: None,
            server_rss_mib: None,
        }
    }
}

pub(crate) fn summarize_latency(t: &Tally) -> BTreeMap<&'static str, Latency> {
    t.latency
        .iter()
        .map(|(action, h)| {
            (
                *action,
                Latency {
                    calls: h.len(),
                    p50_us: h.value_at_quantile(0.5),
                    p99_us: h.value_at_quantile(0.99),
                    p999_us: h.value_at_quantile(0.999),
                    max_us: h.max(),
                },
            )
        })
        .collect()
}

pub async fn run(config: BenchConfig) -> Result<Report, BenchError> {
    let sqs = SqsClient::new(&config.endpoint, config.signer.clone());
    let body = "x".repeat(config.body_bytes);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    if let Scenario::BigOps { preload } = config.scenario {
        return crate::big_ops::run(&sqs, &config, preload, stamp).await;
    }
    let queue_count = match config.scenario {
        Scenario::ManyQueues { queues } => queues,
        _ => 1,
    };
    let mut urls = Vec::with_capacity(queue_count);
    for i in 0..queue_count {
        urls.push(
            create_queue(
                &sqs,
                &format!("bench-{}-{stamp}-{i}", config.scenario.name()),
            )
            .await?,
        );
    }
    if let Scenario::ReceiveDelete { preload: n } = config.scenario {
        let bodies = Bodies::new(&urls[0], &body, config.group_id.as_deref());
        preload(&sqs, &bodies, n, config.clients).await;
    }
    if config.scenario == Scenario::LongPoll {
        return long_poll(&sqs, &urls[0], &config).await;
    }
    let cpu_before = config.server_pid.and_then(cpu_ticks);
    let started = Instant::now();
    let deadline = started + config.duration;
    let tasks: Vec<_> = (0..config.clients)
        .map(|who| {
            let group = config.group_id.as_deref();
            let bodies: Vec<Bodies> = urls.iter().map(|u| Bodies::new(u, &body, group)).collect();
            let mut send = json!({"QueueUrl": urls[0], "MessageBody": body});
            if let Some(group) = group {
                send["MessageGroupId"] = json!(group);
            }
            let (sqs, scenario) = (sqs.clone(), config.scenario);
            // A consumer makes two calls per batch to a producer's one: two thirds consume.
            let producers = config.clients.div_ceil(3);
            tokio::spawn(async move {
                let mut t = Tally::default();
                let mut next_queue = who;
                while Instant::now() < deadline {
                    match scenario {
                        Scenario::Send => {
                            let answer = t.call(&sqs, "SendMessage", send.clone()).await;
                            t.sent += answer.is_some() as u64;
                        }
                        Scenario::SendBatch => send_batch(&mut t, &sqs, &bodies[0]).await,
                        Scenario::ReceiveDelete { .. } => {
                            if receive_delete(&mut t, &sqs, &bodies[0], false).await == 0 {
                                break;
                            }
                        }
                        Scenario::FullCycle if who < producers => {
                            send_batch(&mut t, &sqs, &bodies[0]).await
                        }
                        Scenario::FullCycle => {
                            receive_delete(&mut t, &sqs, &bodies[0], true).await;
                        }
                        // Handled apart, above.
                        Scenario::LongPoll | Scenario::BigOps { .. } => break,
                        Scenario::ManyQueues { .. } => {
                            let b = &bodies[next_queue % bodies.len()];
                            next_queue += 7;
                            send_batch(&mut t, &sqs, b).await;
                            receive_delete(&mut t, &sqs, b, false).await;
                        }
                    }
                }
                t
            })
        })
        .collect();
    let mut total = Tally::default();
    for task in tasks {
        if let Ok(t) = task.await {
            total.merge(t);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let ticks_per_second = 100.0;
    let server_cpu_percent = match (config.server_pid, cpu_before) {
        (Some(pid), Some(before)) => {
            cpu_ticks(pid).map(|after| (after - before) as f64 / ticks_per_second / seconds * 100.0)
        }
        _ => None,
    };
    let server_rss_mib = config.server_pid.and_then(peak_rss_mib);
    for url in &urls {
        let _ = sqs.call("DeleteQueue", &json!({"QueueUrl": url})).await;
    }
    let latency = summarize_latency(&total);
    // Throughput is what made it through the scenario's last step.
    let messages = match config.scenario {
        Scenario::Send | Scenario::SendBatch => total.sent,
        _ => total.deleted,
    };
    Ok(Report {
        scenario: config.scenario.name().to_string(),
        clients: config.clients,
        seconds,
        messages_per_second: messages as f64 / seconds,
        messages,
        sent_per_second: total.sent as f64 / seconds,
        deleted_per_second: total.deleted as f64 / seconds,
        errors: total.errors,
        latency,
        server_cpu_percent,
        server_rss_mib,
    })
}

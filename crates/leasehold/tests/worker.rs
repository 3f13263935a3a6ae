//! The consumer runtime against the real server over loopback, and the real PostgreSQL and
//! Redis of the machine: the seed's race, lost leases, the idempotency gate, a worker killed
//! mid-message, and shutdown under load.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::MessageAttributeValue;
use aws_sdk_sqs::Client;
use common::{stored, Server, POSTGRES_URL, REDIS_URL};
use leasehold_worker::idempotency::connect;
use leasehold_worker::{
    Backoff, CancellationToken, IdempotencyStore, Worker, IDEMPOTENCY_KEY_ATTRIBUTE,
};
use serde_json::Value;

type Executions = Arc<Mutex<HashMap<String, u32>>>;

async fn leases(server: &Server, queue: &str) -> Value {
    reqwest::get(format!(
        "{}/_leasehold/queues/{queue}/leases",
        server.endpoint()
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap()
}

fn count(executions: &Executions, body: &str) -> u32 {
    executions.lock().unwrap().get(body).copied().unwrap_or(0)
}

/// A worker whose handler takes `work` and counts executions per body.
fn worker(
    sqs: &Client,
    url: &str,
    lease: Duration,
    work: Duration,
    executions: &Executions,
    stop: &CancellationToken,
) -> Worker {
    let executions = executions.clone();
    Worker::builder(sqs.clone(), url)
        .lease(lease)
        .concurrency(2)
        .wait_time(1)
        .backoff(Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(2),
        })
        .shutdown(stop.clone())
        .handler(move |m| {
            let executions = executions.clone();
            async move {
                *executions
                    .lock()
                    .unwrap()
                    .entry(m.body.clone())
                    .or_default() += 1;
                tokio::time::sleep(work).await;
                Ok(())
            }
        })
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_race_a_naive_consumer_processes_twice_and_the_runtime_once() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let work = Duration::from_secs(3);

    // Naive: receive, work past the 2 s lease, delete at the end. Two consumers.
    let naive_url = common::create_queue_leased(&sqs, "naive", 2).await;
    sqs.send_message()
        .queue_url(&naive_url)
        .message_body("order-1")
        .send()
        .await
        .unwrap();
    let executions: Executions = Arc::default();
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let (sqs, url, executions) = (sqs.clone(), naive_url.clone(), executions.clone());
            tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(6);
                while Instant::now() < deadline {
                    let out = sqs
                        .receive_message()
                        .queue_url(&url)
                        .wait_time_seconds(1)
                        .send()
                        .await
                        .unwrap();
                    for m in out.messages.unwrap_or_default() {
                        *executions
                            .lock()
                            .unwrap()
                            .entry(m.body.clone().unwrap())
                            .or_default() += 1;
                        tokio::time::sleep(work).await;
                        sqs.delete_message()
                            .queue_url(&url)
                            .receipt_handle(m.receipt_handle.unwrap())
                            .send()
                            .await
                            .unwrap();
                    }
                }
            })
        })
        .collect();
    for c in consumers {
        c.await.unwrap();
    }
    assert!(
        count(&executions, "order-1") >= 2,
        "the naive consumers did the work twice"
    );
    assert!(
        leases(&server, "naive").await["late_deletes"]
            .as_u64()
            .unwrap()
            >= 1
    );

    // The runtime: the same work, the same lease, two workers.
    let url = common::create_queue_leased(&sqs, "runtime", 2).await;
    sqs.send_message()
        .queue_url(&url)
        .message_body("order-1")
        .send()
        .await
        .unwrap();
    let executions: Executions = Arc::default();
    let stop = CancellationToken::new();
    let a = worker(&sqs, &url, Duration::from_secs(2), work, &executions, &stop);
    let b = worker(&sqs, &url, Duration::from_secs(2), work, &executions, &stop);
    let runs = tokio::spawn(async move { tokio::join!(a.run(), b.run()) });
    let deadline = Instant::now() + Duration::from_secs(10);
    while stored(&sqs, &url).await > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.cancel();
    let (sa, sb) = runs.await.unwrap();
    assert_eq!(count(&executions, "order-1"), 1, "processed exactly once");
    assert_eq!(stored(&sqs, &url).await, 0, "and deleted");
    assert_eq!(sa.succeeded + sb.succeeded, 1);
    assert!(
        sa.heartbeats + sb.heartbeats >= 2,
        "the lease was renewed at a third of its length"
    );
    let report = leases(&server, "runtime").await;
    assert_eq!(report["late_deletes"], 0);
    assert_eq!(report["expired_leases"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_outlives_a_lost_lease_is_cancelled() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue_leased(&sqs, "lost", 2).await;
    sqs.send_message()
        .queue_url(&url)
        .message_body("long")
        .send()
        .await
        .unwrap();
    let cancelled_after = Arc::new(Mutex::new(None));
    let started = Arc::new(tokio::sync::Notify::new());
    let stop = CancellationToken::new();
    let worker = {
        let (cancelled_after, started) = (cancelled_after.clone(), started.clone());
        Worker::builder(sqs.clone(), url.clone())
            .lease(Duration::from_secs(2))
            .wait_time(1)
            .shutdown(stop.clone())
            .handler(move |m| {
                let (cancelled_after, started) = (cancelled_after.clone(), started.clone());
                async move {
                    started.notify_one();
                    let begun = Instant::now();
                    tokio::select! {
                        _ = m.cancel.cancelled() => *cancelled_after.lock().unwrap() = Some(begun.elapsed()),
                        _ = tokio::time::sleep(Duration::from_secs(20)) => {}
                    }
                    Ok(())
                }
            })
            .build()
    };
    let run = tokio::spawn(async move { worker.run().await });
    started.notified().await;
    // The message disappears under the worker: its next heartbeat finds the lease gone.
    sqs.purge_queue().queue_url(&url).send().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while cancelled_after.lock().unwrap().is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    let stats = run.await.unwrap();
    let after = cancelled_after
        .lock()
        .unwrap()
        .expect("the handler's token was cancelled");
    assert!(
        after < Duration::from_secs(3),
        "cancelled at the next beat, after {after:?}"
    );
    assert_eq!(stats.lost_leases, 1);
    assert_eq!(
        stats.succeeded, 0,
        "work whose lease was lost is not acknowledged"
    );
}

async fn gate_skips_duplicates(store_url: &str, queue_name: &str) {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue_leased(&sqs, queue_name, 3).await;
    let key = format!("invoice-{:016x}", rand::random::<u64>());
    // The same unit of work delivered twice, as a producer retry would.
    for copy in ["first", "second"] {
        sqs.send_message()
            .queue_url(&url)
            .message_body(copy)
            .message_attributes(
                IDEMPOTENCY_KEY_ATTRIBUTE,
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(&key)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
    }
    let store: Arc<dyn IdempotencyStore> = Arc::from(connect(store_url).await.unwrap());
    let executions: Executions = Arc::default();
    let stop = CancellationToken::new();
    let worker = {
        let executions = executions.clone();
        Worker::builder(sqs.clone(), url.clone())
            .lease(Duration::from_secs(3))
            .concurrency(2)
            .wait_time(1)
            .idempotency(store.clone())
            .backoff(Backoff {
                base: Duration::from_secs(1),
                cap: Duration::from_secs(1),
            })
            .shutdown(stop.clone())
            .handler(move |m| {
                let executions = executions.clone();
                async move {
                    let key = m.message_attributes[IDEMPOTENCY_KEY_ATTRIBUTE]
                        .string_value
                        .clone()
                        .unwrap();
                    *executions.lock().unwrap().entry(key).or_default() += 1;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Ok(())
                }
            })
            .build()
    };
    let run = tokio::spawn(async move { worker.run().await });
    let deadline = Instant::now() + Duration::from_secs(15);
    while stored(&sqs, &url).await > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    let stats = run.await.unwrap();
    assert_eq!(count(&executions, &key), 1, "the work ran once: {stats:?}");
    assert_eq!(stats.duplicates_skipped, 1, "{stats:?}");
    assert_eq!(stored(&sqs, &url).await, 0, "both copies were deleted");
    assert!(store.is_completed(&key).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_gate_runs_a_duplicated_job_once() {
    gate_skips_duplicates(POSTGRES_URL, "gate-pg").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_gate_runs_a_duplicated_job_once() {
    gate_skips_duplicates(REDIS_URL, "gate-redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_under_load_loses_nothing_and_strands_nothing_past_one_lease() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue_leased(&sqs, "drain", 3).await;
    for i in 0..40 {
        sqs.send_message()
            .queue_url(&url)
            .message_body(format!("m{i}"))
            .send()
            .await
            .unwrap();
    }
    let done: Executions = Arc::default();
    let stop = CancellationToken::new();
    let worker = {
        let done = done.clone();
        Worker::builder(sqs.clone(), url.clone())
            .lease(Duration::from_secs(3))
            .concurrency(4)
            .wait_time(1)
            .grace(Duration::from_secs(1))
            .shutdown(stop.clone())
            .handler(move |m| {
                let done = done.clone();
                async move {
                    let n: u64 = m.body[1..].parse().unwrap();
                    tokio::time::sleep(Duration::from_millis(200 + (n * 137) % 2300)).await;
                    *done.lock().unwrap().entry(m.body.clone()).or_default() += 1;
                    Ok(())
                }
            })
            .build()
    };
    let run = tokio::spawn(async move { worker.run().await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let asked = Instant::now();
    stop.cancel();
    let stats = run.await.unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(4),
        "the drain took the 1 s grace, at most 1 s for cancelled handlers, and cleanup: {:?}",
        asked.elapsed()
    );
    let finished = done.lock().unwrap().len() as u64;
    let left = stored(&sqs, &url).await;
    assert_eq!(
        finished + left,
        40,
        "nothing lost: {finished} finished, {left} left, {stats:?}"
    );
    assert!(finished > 0 && left > 0);
    // Within one lease, everything left is receivable again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(
            aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        )
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(
        attrs[&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible],
        "0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_worker_killed_mid_message_runs_the_work_once_more_at_most_once() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue_leased(&sqs, "killed", 2).await;
    sqs.send_message()
        .queue_url(&url)
        .message_body("job")
        .send()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs.log");
    let spawn_worker = |script: &str| {
        common::leasehold_work(&server, &url)
            .args(["--lease", "2", "--backoff", "1", "--max-backoff", "1"])
            .args(["--idempotency", POSTGRES_URL, "--", "sh", "-c", script])
            .env("RUNS_LOG", &log)
            .spawn()
            .unwrap()
    };
    let runs = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let mut first = spawn_worker("echo \"$LEASEHOLD_MESSAGE_ID\" >> \"$RUNS_LOG\"; sleep 30");
    let deadline = Instant::now() + Duration::from_secs(10);
    while runs() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(runs(), 1, "the first worker started the job");
    first.kill().unwrap();
    first.wait().unwrap();

    let mut second = spawn_worker("echo \"$LEASEHOLD_MESSAGE_ID\" >> \"$RUNS_LOG\"");
    let deadline = Instant::now() + Duration::from_secs(20);
    while (stored(&sqs, &url).await > 0 || runs() < 2) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    second.kill().unwrap();
    second.wait().unwrap();
    assert_eq!(
        stored(&sqs, &url).await,
        0,
        "redelivered after the lease and finished"
    );
    assert_eq!(runs(), 2, "the crashed attempt, then exactly one more");
    // One message finished, delivered at least twice: the crashed receive, then (after any
    // put-backs while the dead worker's claim was still live) the one that ran it.
    let report = leases(&server, "killed").await;
    let finished: Vec<(u32, u64)> = report["receive_count_histogram"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.parse().unwrap(), v.as_u64().unwrap()))
        .collect();
    assert_eq!(finished.iter().map(|(_, n)| n).sum::<u64>(), 1, "{report}");
    assert!(finished[0].0 >= 2, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_redrive_moves_only_work_not_recorded_as_done() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let dlq = common::create_queue_leased(&sqs, "redrive-dlq", 30).await;
    let source = common::create_queue_leased(&sqs, "redrive-source", 30).await;
    sqs.set_queue_attributes()
        .queue_url(&source)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy,
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:redrive-dlq","maxReceiveCount":3}"#,
        )
        .send()
        .await
        .unwrap();
    let store = connect(POSTGRES_URL).await.unwrap();
    let keys: Vec<String> = (0..3)
        .map(|i| format!("redrive-{i}-{:016x}", rand::random::<u64>()))
        .collect();
    for key in &keys {
        sqs.send_message()
            .queue_url(&dlq)
            .message_body(format!("body of {key}"))
            .message_attributes(
                IDEMPOTENCY_KEY_ATTRIBUTE,
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(key)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
    }
    // The first job already succeeded before it reached the DLQ: the "DLQ mirage".
    let leasehold_worker::Begin::Started(claim) = store
        .begin(&keys[0], Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!()
    };
    assert!(store
        .complete(&keys[0], &claim, Duration::from_secs(3600))
        .await
        .unwrap());

    let redrive = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args([
                "redrive",
                "--endpoint-url",
                &server.endpoint(),
                "--from",
                &dlq,
                "--to",
                &source,
                "--idempotency",
                POSTGRES_URL,
                "--json",
            ])
            .args(extra)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let dry = redrive(&["--dry-run"]);
    assert_eq!(
        (
            dry["moved"].as_u64(),
            dry["skipped_already_done"].as_u64(),
            dry["failed"].as_u64()
        ),
        (Some(2), Some(1), Some(0))
    );
    assert_eq!(stored(&sqs, &dlq).await, 3, "a dry run moves nothing");
    assert_eq!(stored(&sqs, &source).await, 0);

    let report = redrive(&[]);
    assert_eq!(
        (
            report["moved"].as_u64(),
            report["skipped_already_done"].as_u64(),
            report["failed"].as_u64()
        ),
        (Some(2), Some(1), Some(0))
    );
    assert_eq!(stored(&sqs, &dlq).await, 0);
    let moved = sqs
        .receive_message()
        .queue_url(&source)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap();
    let mut moved_keys: Vec<String> = moved
        .messages
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            m.message_attributes.unwrap()[IDEMPOTENCY_KEY_ATTRIBUTE]
                .string_value
                .clone()
                .unwrap()
        })
        .collect();
    moved_keys.sort();
    let mut expected = keys[1..].to_vec();
    expected.sort();
    assert_eq!(
        moved_keys, expected,
        "redriven messages keep their idempotency key"
    );
}

/// `leasehold_worker_processing_seconds` measures the handler's run, not the wait before it.
#[tokio::test(flavor = "current_thread")]
async fn the_processing_histogram_measures_the_run() {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // A current-thread runtime: every task of the worker records to this thread's recorder.
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue_leased(&sqs, "timed", 10).await;
    sqs.send_message()
        .queue_url(&url)
        .message_body("timed")
        .send()
        .await
        .unwrap();
    let executions: Executions = Arc::default();
    let stop = CancellationToken::new();
    let worker = worker(
        &sqs,
        &url,
        Duration::from_secs(10),
        Duration::from_millis(400),
        &executions,
        &stop,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let run = worker.run();
    tokio::pin!(run);
    loop {
        tokio::select! {
            _ = &mut run => unreachable!("the worker runs until stopped"),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        if stored(&sqs, &url).await == 0 || Instant::now() > deadline {
            break;
        }
    }
    stop.cancel();
    run.await;
    let runs: Vec<f64> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "leasehold_worker_processing_seconds")
        .flat_map(|(.., value)| match value {
            metrics_util::debugging::DebugValue::Histogram(values) => {
                values.into_iter().map(|v| v.into_inner()).collect()
            }
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!((0.4..2.0).contains(&runs[0]), "the 400 ms run: {runs:?}");
}

//! `leasehold work` on a FIFO queue: one group's messages run one at a time, in order, and
//! a failure holds the group's later messages back until it succeeds.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName as A;
use aws_sdk_sqs::Client;
use common::{Running, Server};

async fn fifo_queue(sqs: &Client, name: &str) -> String {
    sqs.create_queue()
        .queue_name(format!("{name}.fifo"))
        .attributes(A::FifoQueue, "true")
        .attributes(A::ContentBasedDeduplication, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap()
}

async fn send(sqs: &Client, url: &str, body: &str) {
    sqs.send_message()
        .queue_url(url)
        .message_body(body)
        .message_group_id(&body[..1])
        .send()
        .await
        .unwrap();
}

/// The worker runs `script` per message with the body in `$B` and the log at `$LOG`.
fn work(server: &Server, url: &str, log: &Path, script: &str) -> Child {
    worker(server, url, log, "10", script).spawn().unwrap()
}

/// The worker of `work`, under a lease of `lease_s` seconds, to be spawned.
fn worker(server: &Server, url: &str, log: &Path, lease_s: &str, script: &str) -> Command {
    let mut command = common::leasehold_work(server, url);
    command
        .args(["--concurrency", "4", "--lease", lease_s])
        .args(["--backoff", "1", "--max-backoff", "1"])
        .args(["--", "sh", "-c", &format!("B=$(cat); {script}")])
        .env("LOG", log);
    command
}

fn lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

async fn until_done(log: &Path, finished: usize) -> Vec<String> {
    let done = || lines(log).iter().filter(|l| l.starts_with("ok ")).count() >= finished;
    common::wait_for("every message finished", Duration::from_secs(30), done).await;
    lines(log)
}

#[tokio::test]
async fn a_groups_messages_run_one_at_a_time_in_order() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = fifo_queue(&sqs, "ordered").await;
    for body in ["a1", "a2", "b1", "a3", "b2", "a4"] {
        send(&sqs, &url, body).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut worker = work(
        &server,
        &url,
        &log,
        r#"echo "start $B" >> "$LOG"; sleep 0.2; echo "ok $B" >> "$LOG""#,
    );
    let log = until_done(&log, 6).await;
    let _ = worker.kill();
    let _ = worker.wait();
    let group_a: Vec<&str> = log
        .iter()
        .map(String::as_str)
        .filter(|l| l.ends_with(|c: char| c.is_ascii_digit()) && l.contains(" a"))
        .collect();
    assert_eq!(
        group_a,
        ["start a1", "ok a1", "start a2", "ok a2", "start a3", "ok a3", "start a4", "ok a4"],
        "{log:?}"
    );
}

#[tokio::test]
async fn a_failed_message_holds_its_group_back_until_it_succeeds() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = fifo_queue(&sqs, "held").await;
    for body in ["g1", "g2", "g3"] {
        send(&sqs, &url, body).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    // g2 fails on its first delivery.
    let script = r#"echo "start $B $LEASEHOLD_RECEIVE_COUNT" >> "$LOG";
        if [ "$B" = g2 ] && [ "$LEASEHOLD_RECEIVE_COUNT" = 1 ]; then exit 1; fi;
        echo "ok $B" >> "$LOG""#;
    let mut worker = work(&server, &url, &log, script);
    let log = until_done(&log, 3).await;
    let _ = worker.kill();
    let _ = worker.wait();
    let at = |line: &str| log.iter().position(|l| l == line).unwrap_or(usize::MAX);
    let first_g3 = log.iter().position(|l| l.starts_with("start g3")).unwrap();
    assert!(at("start g2 1") < at("start g2 2"), "{log:?}");
    assert!(
        first_g3 > at("ok g2"),
        "g3 ran before g2 succeeded: {log:?}"
    );
    let finished: Vec<&String> = log.iter().filter(|l| l.starts_with("ok ")).collect();
    assert_eq!(finished, ["ok g1", "ok g2", "ok g3"]);
}

#[tokio::test]
async fn a_backlog_longer_than_the_lease_waits_its_turn_and_keeps_its_lease() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = fifo_queue(&sqs, "backlog").await;
    // One group's four messages, received together; 1.5 s each under a 3 s lease, so the
    // last waits 4.5 s for its turn, its lease kept all the while.
    for body in ["d1", "d2", "d3", "d4"] {
        send(&sqs, &url, body).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let started = std::time::Instant::now();
    let script = r#"echo "start $B" >> "$LOG"; sleep 1.5; echo "ok $B" >> "$LOG""#;
    let mut command = worker(&server, &url, &log, "3", script);
    let worker = Running::new(command.stderr(Stdio::piped()).spawn().unwrap());
    let lines = until_done(&log, 4).await;
    let took = started.elapsed();
    let logs = worker.terminate();
    let finished: Vec<&String> = lines.iter().filter(|l| l.starts_with("ok ")).collect();
    assert_eq!(finished, ["ok d1", "ok d2", "ok d3", "ok d4"], "{lines:?}");
    assert!(
        took < Duration::from_secs(9),
        "no stall: four 1.5 s runs took {took:?}"
    );
    assert!(logs.contains("lost_leases: 0,"), "no lease lost: {logs}");
    assert!(logs.contains("late_deletes: 0"), "{logs}");
}

//! Two servers contending for the same rows (issue 46, defects 9 to 12): PostgreSQL breaks a
//! cycle of lock waits by failing one transaction after a second's wait, so every deadlock is
//! a stall and an error for someone. Two servers serve a FIFO queue with batches in every
//! order (sends over groups shuffled, receives with 1 s leases, batch deletes and batch
//! releases in reverse order, leases left to run out), while move tasks redrive its
//! dead-letter queue, its attributes change, it is purged, and many queues' lease measurements
//! are flushed from both; content-based deduplication ids collide across batches, receive
//! attempts are retried, and a batch delete may name one message twice. The database's own
//! deadlock counter must stay at 0. In a database of its own, so that no other test's
//! deadlocks count.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_backend::{Backend, BackendError, Messages, MoveTaskStart, QueueAdmin};
use leasehold_engine::{EngineError, NewMessage, ReceiveRequest};
use leasehold_postgres::{Options, Postgres};
use rand::seq::SliceRandom;
use rand::Rng;
use tokio::task::JoinSet;

mod common;
use common::{admin, naming};

/// How long the contention runs; `LEASEHOLD_CONTENTION_SECONDS` makes a longer probe.
fn seconds() -> u64 {
    std::env::var("LEASEHOLD_CONTENTION_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
}
const GROUPS: usize = 8;
const MEASURED_QUEUES: usize = 12;

/// A database of the test's own, dropped at the end.
struct Database(String);

impl Database {
    async fn new() -> Database {
        let name = format!("leasehold_contention_{}", rand::random::<u32>());
        admin(&format!("CREATE DATABASE {name}")).await;
        // Stricter than the backend's statements are written for: it sets its own.
        admin(&format!(
            "ALTER DATABASE {name} SET default_transaction_isolation = 'repeatable read'"
        ))
        .await;
        Database(name)
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:5432/{}", self.0)
    }

    /// Deadlocks PostgreSQL has detected in it (counted when each backend reports its
    /// statistics: at the latest when it exits).
    async fn deadlocks(&self) -> i64 {
        let (client, connection) = tokio_postgres::connect(common::URL, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let row = client
            .query_one(
                "SELECT deadlocks FROM pg_stat_database WHERE datname = $1",
                &[&self.0],
            )
            .await
            .unwrap();
        row.get(0)
    }

    async fn drop(self) {
        admin(&format!("DROP DATABASE {} WITH (FORCE)", self.0)).await;
    }
}

fn attributes(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const ARN: &str = "arn:aws:sqs:us-east-1:000000000000";

async fn queues(server: &Postgres) {
    let fifo = [("FifoQueue", "true"), ("ContentBasedDeduplication", "true")];
    server
        .create_queue("dlq.fifo", attributes(&fifo), vec![])
        .await
        .unwrap();
    let redrive = format!(r#"{{"deadLetterTargetArn":"{ARN}:dlq.fifo","maxReceiveCount":2}}"#);
    let mut source = fifo.to_vec();
    source.push(("RedrivePolicy", &redrive));
    source.push(("VisibilityTimeout", "1"));
    server
        .create_queue("q.fifo", attributes(&source), vec![])
        .await
        .unwrap();
    for n in 0..MEASURED_QUEUES {
        server
            .create_queue(&format!("m{n}"), vec![], vec![])
            .await
            .unwrap();
    }
}

/// Errors the clients saw, by what they were doing.
#[derive(Default)]
struct Failures(std::sync::Mutex<Vec<String>>);

impl Failures {
    fn note<T, E: std::fmt::Debug>(&self, what: &str, result: Result<T, E>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(error) => {
                self.0.lock().unwrap().push(format!("{what}: {error:?}"));
                None
            }
        }
    }
}

struct World {
    servers: [Postgres; 2],
    running: AtomicBool,
    failures: Failures,
    sent: AtomicU64,
}

fn fifo_batch(rng: &mut impl Rng, tag: &str) -> Vec<NewMessage> {
    let mut groups: Vec<usize> = (0..GROUPS).collect();
    groups.shuffle(rng);
    groups
        .into_iter()
        .take(rng.random_range(2..=GROUPS))
        .map(|g| {
            // Bodies from a small set: content-based deduplication ids collide across
            // batches and groups (the queue-wide scope).
            let body = match rng.random_range(0..4) {
                0 => format!("common {}", rng.random_range(0..32)),
                _ => format!("{tag} {}", rng.random::<u64>()),
            };
            let mut message = NewMessage::new(body);
            message.group_id = Some(format!("g{g}"));
            message
        })
        .collect()
}

async fn sender(world: Arc<World>, n: usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(n as u64);
    while world.running.load(Ordering::Relaxed) {
        let batch = fifo_batch(&mut rng, &format!("s{n}"));
        let count = batch.len() as u64;
        let sent = world.servers[n % 2].send_batch("q.fifo", batch).await;
        if world.failures.note("send_batch", sent).is_some() {
            world.sent.fetch_add(count, Ordering::Relaxed);
        }
    }
}

/// Receives and finishes what it got in one of the ways a consumer may: all deleted in
/// reverse order, all released in reverse order, half deleted and the rest left to run out.
async fn consumer(world: Arc<World>, n: usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(100 + n as u64);
    let server = &world.servers[n % 2];
    let mut attempts = 0u64;
    while world.running.load(Ordering::Relaxed) {
        // Now and then a receive with an attempt id, retried at once: the retry replays it.
        let attempt_id = rng.random_bool(0.25).then(|| {
            attempts += 1;
            format!("c{n}-{attempts}")
        });
        let request = ReceiveRequest {
            max_messages: 10,
            visibility_s: Some(1),
            attempt_id: attempt_id.clone(),
        };
        let Some(mut got) = world
            .failures
            .note("receive", server.receive("q.fifo", request.clone()).await)
        else {
            continue;
        };
        if attempt_id.is_some() {
            let Some(again) = world
                .failures
                .note("receive again", server.receive("q.fifo", request).await)
            else {
                continue;
            };
            got = again;
        }
        let mut handles: Vec<String> = got
            .deliveries
            .into_iter()
            .map(|d| d.receipt_handle)
            .collect();
        if handles.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        handles.reverse();
        if rng.random_bool(0.2) {
            // Two handles of one message in a batch.
            handles.push(handles[0].clone());
        }
        match rng.random_range(0..4) {
            0 | 1 => {
                let deleted = server.delete("q.fifo", handles).await;
                world.failures.note("delete batch", deleted);
            }
            2 => {
                let releases = handles.into_iter().map(|h| (h, 0)).collect();
                let released = server.change_visibility("q.fifo", releases).await;
                world.failures.note("release batch", released);
            }
            _ => {
                let half = handles.len().div_ceil(2);
                let deleted = server.delete("q.fifo", handles[..half].to_vec()).await;
                world.failures.note("delete half", deleted);
            }
        }
    }
}

/// Starts move tasks from the dead-letter queue back to its source, runs the servers'
/// ticks (move task rounds, measurement flushes, the retention sweep), and changes the
/// source's attributes now and then.
async fn operator(world: Arc<World>, n: usize) {
    let server = &world.servers[n % 2];
    let mut round = 0u64;
    while world.running.load(Ordering::Relaxed) {
        round += 1;
        if round.is_multiple_of(5) {
            let task = MoveTaskStart {
                source_arn: format!("{ARN}:dlq.fifo"),
                destination_arn: None,
                per_second: None,
            };
            // Refused while another task runs: that is no deadlock.
            let _ = server.start_move_task(task).await;
        }
        if round.is_multiple_of(7) {
            let timeout = if round.is_multiple_of(2) { "1" } else { "2" };
            let changed = server
                .set_attributes("q.fifo", attributes(&[("VisibilityTimeout", timeout)]))
                .await;
            world.failures.note("set_attributes", changed);
        }
        if round.is_multiple_of(11) {
            // Refused within a minute of the last one, as on AWS: that is no deadlock.
            match server.purge("q.fifo").await {
                Err(BackendError::Engine(EngineError::PurgeQueueInProgress(_))) => {}
                other => {
                    world.failures.note("purge", other);
                }
            }
        }
        server.tick().await;
        server.flush().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends, receives and deletes on many queues, in a different order on each server, so that
/// both servers' measurements name the same queues when they are flushed.
async fn measured(world: Arc<World>, n: usize) {
    let server = &world.servers[n % 2];
    let mut order: Vec<usize> = (0..MEASURED_QUEUES).collect();
    if n % 2 == 1 {
        order.reverse();
    }
    while world.running.load(Ordering::Relaxed) {
        for &q in &order {
            let queue = format!("m{q}");
            let sent = server.send(&queue, NewMessage::new("m")).await;
            world.failures.note("send", sent);
            let request = ReceiveRequest {
                max_messages: 10,
                visibility_s: Some(1),
                attempt_id: None,
            };
            if let Some(got) = world
                .failures
                .note("receive", server.receive(&queue, request).await)
            {
                let handles = got.deliveries.into_iter().map(|d| d.receipt_handle);
                let deleted = server.delete(&queue, handles.collect()).await;
                world.failures.note("delete", deleted);
            }
        }
    }
}

use rand::SeedableRng;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_two_servers_contending_for_a_fifo_queue_never_deadlock() {
    let database = Database::new().await;
    let url = database.url();
    let connect = || Postgres::connect(&url, naming(), Options::default());
    let servers = [connect().await.unwrap(), connect().await.unwrap()];
    queues(&servers[0]).await;
    let world = Arc::new(World {
        servers,
        running: AtomicBool::new(true),
        failures: Failures::default(),
        sent: AtomicU64::new(0),
    });
    let mut workers = JoinSet::new();
    for n in 0..4 {
        workers.spawn(sender(world.clone(), n));
        workers.spawn(consumer(world.clone(), n));
    }
    for n in 0..2 {
        workers.spawn(operator(world.clone(), n));
        workers.spawn(measured(world.clone(), n));
    }
    tokio::time::sleep(Duration::from_secs(seconds())).await;
    world.running.store(false, Ordering::Relaxed);
    workers.join_all().await;
    let world = Arc::into_inner(world).expect("the workers are done");
    let failures = world.failures.0.into_inner().unwrap();
    let sent = world.sent.load(Ordering::Relaxed);
    // Closing the servers' connections makes their backends report their statistics.
    drop(world.servers);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let deadlocks = database.deadlocks().await;
    println!(
        "{sent} FIFO messages sent in {} s; {deadlocks} deadlocks; {} failed calls",
        seconds(),
        failures.len()
    );
    assert_eq!(deadlocks, 0, "deadlocks; failed calls: {failures:#?}");
    assert!(failures.is_empty(), "failed calls: {failures:#?}");
    assert!(sent > 100, "too little work to contend: {sent} sent");
    database.drop().await;
}

/// Two FIFO batches of disjoint groups naming the same two deduplication ids in opposite
/// orders (identical bodies under content-based deduplication, the queue-wide scope): each
/// reserved its ids in its own order, and held one id's row while waiting for the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_fifo_batches_naming_deduplication_ids_in_other_orders_never_deadlock() {
    let database = Database::new().await;
    let url = database.url();
    let connect = || Postgres::connect(&url, naming(), Options::default());
    let servers = Arc::new([connect().await.unwrap(), connect().await.unwrap()]);
    let fifo = [("FifoQueue", "true"), ("ContentBasedDeduplication", "true")];
    servers[0]
        .create_queue("d.fifo", attributes(&fifo), vec![])
        .await
        .unwrap();
    let mut senders = JoinSet::new();
    for n in 0..2usize {
        let servers = servers.clone();
        senders.spawn(async move {
            let bodies = if n == 0 { ["x", "y"] } else { ["y", "x"] };
            let mut failed = Vec::new();
            for _ in 0..150 {
                let batch = bodies
                    .iter()
                    .enumerate()
                    .map(|(i, body)| {
                        let mut message = NewMessage::new(*body);
                        message.group_id = Some(format!("g{n}{i}"));
                        message
                    })
                    .collect();
                if let Err(error) = servers[n].send_batch("d.fifo", batch).await {
                    failed.push(format!("{error:?}"));
                }
            }
            failed
        });
    }
    let failed: Vec<String> = senders.join_all().await.into_iter().flatten().collect();
    drop(Arc::into_inner(servers).expect("the senders are done"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let deadlocks = database.deadlocks().await;
    assert_eq!(deadlocks, 0, "deadlocks; failed sends: {failed:#?}");
    assert!(failed.is_empty(), "failed sends: {failed:#?}");
    database.drop().await;
}

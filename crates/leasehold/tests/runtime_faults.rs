//! The consumer runtime (the `leasehold-worker` crate) under faults, against the real server
//! over loopback: the SQS connection delayed, cut and stalled by a proxy; the idempotency
//! store stalled, PostgreSQL restarted for real (`pg_ctlcluster restart`), a Redis of the
//! test's own restarted for real; a handler that panics, one that ignores its cancellation; a
//! shutdown in the middle of a long poll. Every scenario is checked with the handlers' own
//! record of their runs (a run counts as alive from its start until its future is gone,
//! however it ends): no two runs of one message overlap, and with the gate on, every
//! message's effect happens exactly once.

mod common;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use common::proxy::{Fault, Proxy};
use common::{restart_postgres, Server, POSTGRES_URL};
use leasehold_worker::idempotency::connect;
use leasehold_worker::{
    Backoff, CancellationToken, HandlerError, IdempotencyStore, Message, Worker, WorkerStats,
};

type Boxed = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send>>;

/// PostgreSQL is restarted by one scenario: the others that use it wait their turn.
static POSTGRES_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What the handlers did.
#[derive(Default, Debug)]
struct Ledger {
    alive: HashMap<String, u32>,
    runs: HashMap<String, u32>,
    effects: HashMap<String, u32>,
    overlaps: Vec<String>,
}

#[derive(Clone, Default)]
struct Record(Arc<Mutex<Ledger>>);

/// One run of a message, alive until it is dropped (returned, cancelled or dropped itself).
struct Run {
    record: Record,
    key: String,
}

impl Record {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.0.lock().unwrap()
    }

    fn start(&self, key: &str) -> Run {
        let mut ledger = self.ledger();
        let alive = ledger.alive.entry(key.to_string()).or_default();
        *alive += 1;
        if *alive > 1 {
            ledger.overlaps.push(key.to_string());
        }
        *ledger.runs.entry(key.to_string()).or_default() += 1;
        Run {
            record: self.clone(),
            key: key.to_string(),
        }
    }

    fn alive(&self, key: &str) -> u32 {
        self.ledger().alive.get(key).copied().unwrap_or(0)
    }

    /// No overlap, and every one of `keys` had its effect exactly once.
    fn assert_exactly_once(&self, keys: &[String], stats: &[WorkerStats]) {
        let ledger = self.ledger();
        assert!(
            ledger.overlaps.is_empty(),
            "runs overlapped: {ledger:?} {stats:?}"
        );
        for key in keys {
            assert_eq!(
                ledger.effects.get(key),
                Some(&1),
                "{key}'s effect exactly once: {ledger:?} {stats:?}"
            );
        }
    }
}

impl Run {
    fn effect(&self) {
        *self
            .record
            .ledger()
            .effects
            .entry(self.key.clone())
            .or_default() += 1;
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        *self.record.ledger().alive.get_mut(&self.key).unwrap() -= 1;
    }
}

/// A handler that works `work(message)` unless cancelled, then has its effect.
fn cooperative(
    record: &Record,
    work: impl Fn(&Message) -> Duration + Send + Sync + 'static,
) -> impl Fn(Message) -> Boxed + Send + Sync + 'static {
    let record = record.clone();
    let work = Arc::new(work);
    move |m: Message| {
        let (record, work) = (record.clone(), work.clone());
        Box::pin(async move {
            let run = record.start(&m.body);
            tokio::select! {
                _ = tokio::time::sleep(work(&m)) => {}
                _ = m.cancel.cancelled() => return Err("stopped".into()),
            }
            run.effect();
            Ok(())
        })
    }
}

/// Sends `n` messages whose bodies are unique keys; returns them.
async fn send_keys(sqs: &Client, url: &str, n: usize) -> Vec<String> {
    let prefix = format!("{:08x}", rand::random::<u32>());
    let mut keys = Vec::new();
    for i in 0..n {
        let key = format!("{prefix}-{i}");
        common::send(sqs, url, &key).await;
        keys.push(key);
    }
    keys
}

/// A worker on `client` with the scenario's usual settings; the caller adds the rest.
fn builder(
    client: &Client,
    url: &str,
    lease_s: u64,
    stop: &CancellationToken,
) -> leasehold_worker::WorkerBuilder {
    Worker::builder(client.clone(), url)
        .lease(Duration::from_secs(lease_s))
        .wait_time(1)
        .backoff(Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(1),
        })
        .shutdown(stop.clone())
}

/// Waits until the queue holds nothing, within `limit`.
async fn until_drained(sqs: &Client, url: &str, limit: Duration, record: &Record) {
    let deadline = Instant::now() + limit;
    while common::stored(sqs, url).await > 0 {
        assert!(
            Instant::now() < deadline,
            "every message done within {limit:?}: {:?}",
            record.ledger()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn store(url: &str) -> Arc<dyn IdempotencyStore> {
    Arc::from(connect(url).await.unwrap_or_else(|e| panic!("{url}: {e}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_delayed_and_cut_sqs_connection_never_overlaps_runs_and_each_effect_happens_once(
) {
    let _turn = POSTGRES_TURN.lock().await;
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue_leased(&sqs, "flaky", 3).await;
    let keys = send_keys(&sqs, &url, 20).await;
    let proxy = Proxy::start(server.port).await;
    let record = Record::default();
    let stop = CancellationToken::new();
    let gate = store(POSTGRES_URL).await;
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let client = common::client(proxy.port);
            let work = move |m: &Message| {
                Duration::from_millis(200 + (m.body.len() as u64 * 37 + i * 300) % 1000)
            };
            let worker = builder(&client, &url, 3, &stop)
                .concurrency(3)
                .idempotency(gate.clone())
                .handler(cooperative(&record, work))
                .build();
            tokio::spawn(async move { worker.run().await })
        })
        .collect();
    // Five seconds of a slow network whose connections are cut every 700 ms.
    proxy.set(Fault::Delay(Duration::from_millis(100)));
    for _ in 0..7 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        proxy.cut();
    }
    proxy.set(Fault::None);
    until_drained(&sqs, &url, Duration::from_secs(40), &record).await;
    stop.cancel();
    let mut stats = Vec::new();
    for w in workers {
        stats.push(w.await.unwrap());
    }
    record.assert_exactly_once(&keys, &stats);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_ignores_its_cancellation_is_dropped_before_its_stalled_lease_ends() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue_leased(&sqs, "deaf", 3).await;
    let keys = send_keys(&sqs, &url, 1).await;
    let proxy = Proxy::start(server.port).await;
    let record = Record::default();
    let stop = CancellationToken::new();
    let started = Arc::new(tokio::sync::Notify::new());
    let worker = {
        let (record, started) = (record.clone(), started.clone());
        builder(&common::client(proxy.port), &url, 3, &stop)
            .handler(move |m| {
                let (record, started) = (record.clone(), started.clone());
                async move {
                    let _run = record.start(&m.body);
                    started.notify_one();
                    // Deaf to m.cancel: only being dropped stops it.
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Ok(())
                }
            })
            .build()
    };
    let run = tokio::spawn(async move { worker.run().await });
    started.notified().await;
    proxy.set(Fault::Stall);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = sqs
            .receive_message()
            .queue_url(&url)
            .wait_time_seconds(1)
            .visibility_timeout(60)
            .send()
            .await
            .unwrap();
        if !out.messages.unwrap_or_default().is_empty() {
            assert_eq!(record.alive(&keys[0]), 0, "the first run was gone first");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the lease ran out and the message came back"
        );
    }
    proxy.set(Fault::None);
    stop.cancel();
    let stats = run.await.unwrap();
    assert_eq!(stats.lost_leases, 1, "{stats:?}");
    assert_eq!(stats.succeeded, 0, "{stats:?}");
}

/// `n` messages, `work` each, four at a time under a 3 s lease, through the gate on
/// `store_url`, while `fault` strikes a second in; returns the worker's stats once all is done.
async fn through_the_gate_while(
    name: &str,
    (n, work): (usize, Duration),
    store_url: &str,
    fault: impl FnOnce() + Send + 'static,
) -> (Record, Vec<String>, WorkerStats) {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue_leased(&sqs, name, 3).await;
    let keys = send_keys(&sqs, &url, n).await;
    let record = Record::default();
    let stop = CancellationToken::new();
    let worker = builder(&sqs, &url, 3, &stop)
        .concurrency(4)
        .idempotency(store(store_url).await)
        .handler(cooperative(&record, move |_| work))
        .build();
    let run = tokio::spawn(async move { worker.run().await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::task::spawn_blocking(fault).await.unwrap();
    until_drained(&sqs, &url, Duration::from_secs(40), &record).await;
    stop.cancel();
    let stats = run.await.unwrap();
    (record, keys, stats)
}

/// Twenty half-second runs.
const SHORT_RUNS: (usize, Duration) = (20, Duration::from_millis(500));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_mid_run_the_gate_reconnects_and_each_effect_happens_once() {
    let _turn = POSTGRES_TURN.lock().await;
    let (record, keys, stats) =
        through_the_gate_while("pg-restart", SHORT_RUNS, POSTGRES_URL, restart_postgres).await;
    record.assert_exactly_once(&keys, std::slice::from_ref(&stats));
    assert!(stats.succeeded >= 20, "{stats:?}");
}

/// A Redis server of the test's own, its append-only file synced on every write, so that a
/// restart keeps what it acknowledged.
struct OwnRedis {
    dir: tempfile::TempDir,
    port: u16,
    child: std::process::Child,
}

impl OwnRedis {
    fn start() -> OwnRedis {
        let dir = tempfile::tempdir().unwrap();
        let port = common::free_port();
        let child = OwnRedis::spawn(dir.path(), port);
        OwnRedis { dir, port, child }
    }

    fn spawn(dir: &std::path::Path, port: u16) -> std::process::Child {
        let child = std::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server runs (the runtime's tests need it)");
        common::wait_until_listening(port);
        child
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGTERM (Redis flushes and exits), then the same server again on the same files.
    fn restart(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().unwrap();
        self.child = OwnRedis::spawn(self.dir.path(), self.port);
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_mid_run_the_gate_reconnects_and_each_effect_happens_once() {
    let redis = Arc::new(Mutex::new(OwnRedis::start()));
    let url = redis.lock().unwrap().url();
    let restarting = redis.clone();
    let (record, keys, stats) =
        through_the_gate_while("redis-restart", SHORT_RUNS, &url, move || {
            restarting.lock().unwrap().restart()
        })
        .await;
    record.assert_exactly_once(&keys, std::slice::from_ref(&stats));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_stalled_store_stops_runs_before_their_claims_lapse() {
    let _turn = POSTGRES_TURN.lock().await;
    let proxy = Proxy::start(5432).await;
    let url = format!("postgres://postgres@127.0.0.1:{}/test", proxy.port);
    let stalling = Arc::new(proxy);
    let stall = stalling.clone();
    // Runs longer than a claim lasts without renewal: the stall must stop them.
    let long_runs = (8, Duration::from_secs(4));
    let (record, keys, stats) = through_the_gate_while("store-stall", long_runs, &url, move || {
        stall.set(Fault::Stall);
        std::thread::sleep(Duration::from_secs(4));
        stall.set(Fault::None);
        stall.cut();
    })
    .await;
    record.assert_exactly_once(&keys, std::slice::from_ref(&stats));
    assert!(stats.lost_leases > 0, "runs were stopped: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_panics_is_retried_after_its_backoff_not_after_twelve_hours() {
    let server = Server::start(&[]);
    let sqs = server.client();
    // A long lease: a panic that left the lease kept would hold the message past the test.
    let url = common::create_queue_leased(&sqs, "panics", 30).await;
    send_keys(&sqs, &url, 1).await;
    let record = Record::default();
    let stop = CancellationToken::new();
    let worker = builder(&sqs, &url, 30, &stop)
        .handler(|m: Message| async move {
            if m.receive_count == 1 {
                panic!("a bug on the first delivery");
            }
            Ok(())
        })
        .build();
    let run = tokio::spawn(async move { worker.run().await });
    until_drained(&sqs, &url, Duration::from_secs(8), &record).await;
    stop.cancel();
    let stats = run.await.unwrap();
    assert_eq!((stats.failed, stats.succeeded), (1, 1), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_a_long_poll_leaves_no_message_hidden() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue_leased(&sqs, "long-poll", 30).await;
    // A slow network: the answer to the worker's long poll is on its way for 400 ms.
    let proxy = Proxy::start(server.port).await;
    proxy.set(Fault::Delay(Duration::from_millis(400)));
    let stop = CancellationToken::new();
    let worker = builder(&common::client(proxy.port), &url, 30, &stop)
        .wait_time(20)
        .grace(Duration::from_secs(5))
        .handler(|_| async { Ok(()) })
        .build();
    let run = tokio::spawn(async move { worker.run().await });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    // The poll takes the message and answers; shutdown comes while the answer travels.
    common::send(&sqs, &url, "late").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.cancel();
    let stats = run.await.unwrap();
    let out = sqs
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(2)
        .send()
        .await
        .unwrap();
    assert_eq!(
        out.messages.unwrap_or_default().len(),
        1,
        "the message the poll took is receivable again at once, not after its 30 s lease: \
         {stats:?}"
    );
    assert_eq!(stats.released_on_shutdown, 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_fast_puts_work_held_elsewhere_back_for_a_lease_instead_of_spinning() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue_leased(&sqs, "held-elsewhere", 2).await;
    let keys = send_keys(&sqs, &url, 1).await;
    let gate: Arc<dyn IdempotencyStore> =
        Arc::new(leasehold_worker::idempotency::MemoryStore::default());
    // Another worker holds the claim, for longer than this test.
    gate.begin(&keys[0], Duration::from_secs(60)).await.unwrap();
    let stop = CancellationToken::new();
    let worker = builder(&sqs, &url, 2, &stop)
        .fail_fast(true)
        .key(|m| m.body.clone())
        .idempotency(gate)
        .handler(|_| async { Ok(()) })
        .build();
    let run = tokio::spawn(async move { worker.run().await });
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.cancel();
    let stats = run.await.unwrap();
    assert!(
        (1..=2).contains(&stats.put_back_in_progress),
        "put back for a lease each time, not at once: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_that_lands_after_the_lease_is_reported_late() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue_leased(&sqs, "late", 3).await;
    send_keys(&sqs, &url, 1).await;
    let proxy = Arc::new(Proxy::start(server.port).await);
    let stop = CancellationToken::new();
    let finished = Arc::new(tokio::sync::Notify::new());
    let worker = {
        let (proxy, finished) = (proxy.clone(), finished.clone());
        // One message at a time: the worker cannot receive the message again while its
        // first delete is still on its way.
        builder(&common::client(proxy.port), &url, 3, &stop)
            .concurrency(1)
            .handler(move |_| {
                let (proxy, finished) = (proxy.clone(), finished.clone());
                async move {
                    // The work is done; the network stalls before the delete can go out.
                    proxy.set(Fault::Stall);
                    finished.notify_one();
                    Ok(())
                }
            })
            .build()
    };
    let run = tokio::spawn(async move { worker.run().await });
    finished.notified().await;
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    proxy.set(Fault::None);
    let record = Record::default();
    until_drained(&sqs, &url, Duration::from_secs(5), &record).await;
    stop.cancel();
    let stats = run.await.unwrap();
    assert_eq!(stats.late_deletes, 1, "{stats:?}");
    let report: serde_json::Value = reqwest::get(format!(
        "{}/_leasehold/queues/late/leases",
        server.endpoint()
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(
        report["late_deletes"], 1,
        "the server counted it late too: {report}"
    );
}

//! `leasehold bench in-process`: the full cycle on the embedded backend itself, no HTTP. T
//! threads each send a batch of ten, receive up to ten and delete what they received, over Q
//! queues (thread i takes queues i, i + T, ...), in memory or on `--data-dir`. On a machine
//! of few cores, T threads against one is the figure that shows whether the backend's locks
//! let cores work side by side.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use leasehold_backend::{Backend, QueueAdmin};
use leasehold_bench::{Report, Tally};
use leasehold_embedded::{Embedded, EngineSetup};
use leasehold_engine::{LeaseMode, Naming, NewMessage, ReceiveRequest};
use leasehold_server::WallClock;
use leasehold_store::{Durability, SqliteStore};

/// How an in-process run is set up.
pub struct InProcess {
    pub threads: usize,
    pub queues: usize,
    pub duration: Duration,
    pub body_bytes: usize,
    /// Durable (`--fsync always`) in this directory; None: in memory.
    pub data_dir: Option<std::path::PathBuf>,
    /// Stripes of a standard queue; None: as `serve` (one per core).
    pub stripes: Option<usize>,
}

/// Records how long a call that started `at` took, under the action's name.
fn record(tally: &mut Tally, action: &'static str, at: Instant) {
    let micros = u64::try_from(at.elapsed().as_micros()).unwrap_or(u64::MAX);
    tally.record(action, micros);
}

pub fn run(config: &InProcess) -> anyhow::Result<Report> {
    let backend = Arc::new(backend(config)?);
    let names: Vec<String> = (0..config.queues.max(1))
        .map(|i| format!("bench-{i}"))
        .collect();
    let setup = tokio::runtime::Builder::new_current_thread().build()?;
    for name in &names {
        setup
            .block_on(backend.create_queue(name, vec![], vec![]))
            .with_context(|| format!("creating queue {name}"))?;
    }
    let body = "x".repeat(config.body_bytes.max(1));
    let pid = std::process::id();
    let cpu_before = leasehold_bench::cpu_ticks(pid);
    let started = Instant::now();
    let deadline = started + config.duration;
    let workers: Vec<_> = (0..config.threads.max(1))
        .map(|i| {
            let mine: Vec<String> = names
                .iter()
                .skip(i % names.len())
                .step_by(config.threads.max(1))
                .cloned()
                .collect();
            let (backend, body) = (backend.clone(), body.clone());
            std::thread::spawn(move || cycle(&*backend, &mine, &body, deadline))
        })
        .collect();
    let mut tally = Tally::default();
    for worker in workers {
        tally.merge(worker.join().expect("a bench thread panicked")?);
    }
    let seconds = started.elapsed().as_secs_f64();
    // Ticks are hundredths of a second.
    let cpu = cpu_before
        .zip(leasehold_bench::cpu_ticks(pid))
        .map(|(before, after)| (after - before) as f64 / 100.0);
    let mut report = tally.report("in-process", config.threads.max(1), seconds);
    report.server_cpu_percent = cpu.map(|cpu| 100.0 * cpu / seconds);
    report.server_rss_mib = leasehold_bench::peak_rss_mib(pid);
    Ok(report)
}

/// The embedded backend as `serve` builds it, in memory or durable on `data_dir`.
fn backend(config: &InProcess) -> anyhow::Result<Embedded> {
    let naming = Naming {
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
    };
    let clock = Arc::new(WallClock::default());
    let mut setup = EngineSetup::serving(clock, LeaseMode::Aws, naming);
    if let Some(stripes) = config.stripes {
        setup.config.stripes = stripes;
    }
    Ok(match &config.data_dir {
        None => Embedded::in_memory(setup),
        Some(dir) => {
            let store = SqliteStore::open(dir)?;
            Embedded::durable(setup, Box::new(store), Durability::Always)?
        }
    })
}

/// One thread's cycles until the deadline, queue after queue of its own.
fn cycle(
    backend: &dyn Backend,
    queues: &[String],
    body: &str,
    deadline: Instant,
) -> anyhow::Result<Tally> {
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let mut tally = Tally::default();
    let mut next = queues.iter().cycle();
    while Instant::now() < deadline {
        let queue = next.next().context("no queue")?;
        runtime.block_on(async {
            let messages = (0..10).map(|_| NewMessage::new(body)).collect();
            let at = Instant::now();
            match backend.send_batch(queue, messages).await {
                Ok(sent) => tally.sent += sent.iter().filter(|s| s.is_ok()).count() as u64,
                Err(_) => tally.errors += 1,
            }
            record(&mut tally, "SendMessageBatch", at);
            let request = ReceiveRequest {
                max_messages: 10,
                visibility_s: Some(30),
                attempt_id: None,
            };
            let at = Instant::now();
            let handles: Vec<String> = match backend.receive(queue, request).await {
                Ok(received) => received
                    .deliveries
                    .into_iter()
                    .map(|d| d.receipt_handle)
                    .collect(),
                Err(_) => {
                    tally.errors += 1;
                    Vec::new()
                }
            };
            record(&mut tally, "ReceiveMessage", at);
            if handles.is_empty() {
                return;
            }
            let at = Instant::now();
            match backend.delete(queue, handles).await {
                Ok(deleted) => tally.deleted += deleted.iter().filter(|d| d.is_ok()).count() as u64,
                Err(_) => tally.errors += 1,
            }
            record(&mut tally, "DeleteMessageBatch", at);
        });
    }
    Ok(tally)
}

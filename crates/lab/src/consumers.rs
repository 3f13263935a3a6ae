//! The consumer fleets: naive workers (receive one message, work, delete at the end; no
//! idempotency; no heartbeat, or, as seed 000's bug, a hand-rolled one that stops when a
//! shutdown begins), or the runtime (`leasehold-worker`: heartbeat, lost-lease cancellation,
//! the idempotency gate on the downstream's PostgreSQL, a ceiling on executions at once). Both
//! work against the downstream for real; neither's word is used for measures.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;
use aws_sdk_sqs::Client;
use leasehold_sim::{Scenario, WorkModel};
use leasehold_worker::idempotency::PostgresStore;
use leasehold_worker::{Backoff, CancellationToken, Worker, WorkerStats};
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::task::JoinSet;

use crate::downstream::{Downstream, Executor};
use crate::LabError;

/// What kind of fleet a scenario's `[consumers]` describe: the runtime heartbeats to the end
/// of its drain, so a heartbeat that stops on shutdown is a naive consumer's own (the bug).
pub fn uses_runtime(scenario: &Scenario) -> bool {
    let c = &scenario.consumers;
    c.heartbeat && !c.heartbeat_stops_on_shutdown
}

/// A naive consumer's own heartbeat, where the scenario has the bug: every lease/3, the
/// lease again, until its shutdown begins.
#[derive(Clone, Copy)]
struct Heartbeat {
    every: Duration,
    lease_s: i32,
}

impl Heartbeat {
    fn of(scenario: &Scenario) -> Option<Heartbeat> {
        let c = &scenario.consumers;
        let lease_s = scenario.queue.visibility_timeout_s;
        (c.heartbeat && c.heartbeat_stops_on_shutdown).then(|| Heartbeat {
            every: Duration::from_secs_f64(f64::from(lease_s) / 3.0).max(Duration::from_millis(10)),
            lease_s: i32::try_from(lease_s).unwrap_or(i32::MAX),
        })
    }
}

/// Draws processing times as the simulator does, for every consumer of the fleet: afresh for
/// each execution, or, with `work.per_message`, once per message and kept.
#[derive(Clone)]
pub struct WorkDraw {
    model: Arc<WorkModel>,
    rng: Arc<Mutex<StdRng>>,
    kept: Option<Arc<Mutex<HashMap<String, f64>>>>,
    /// In a consumer process, with `work.per_message`: the message's time drawn from a
    /// generator seeded by the scenario's seed and its key, the same in every process.
    keyed: Option<u64>,
    /// Each tenant's `work_scale`, by name (`Scenario::tenants`).
    scales: Arc<HashMap<String, f64>>,
}

impl WorkDraw {
    pub fn new(scenario: &Scenario) -> WorkDraw {
        WorkDraw {
            model: Arc::new(WorkModel::new(&scenario.work)),
            rng: Arc::new(Mutex::new(StdRng::seed_from_u64(scenario.seed))),
            kept: scenario.work.per_message.then(Default::default),
            keyed: None,
            scales: Arc::new(
                scenario
                    .tenants
                    .iter()
                    .map(|t| (t.name.clone(), t.work_scale))
                    .collect(),
            ),
        }
    }

    /// Draws for one consumer process, the `incarnation`th start of `worker`: a generator
    /// of its own, so that processes do not all draw the same times.
    pub fn for_process(scenario: &Scenario, worker: i32, incarnation: u32) -> WorkDraw {
        let mut draw = WorkDraw::new(scenario);
        let own = (u64::from(worker as u32) << 32) | u64::from(incarnation);
        draw.rng = Arc::new(Mutex::new(StdRng::seed_from_u64(
            scenario.seed ^ own.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        )));
        if draw.kept.take().is_some() {
            draw.keyed = Some(scenario.seed);
        }
        draw
    }

    /// The unit of work's processing time: its tenant's `work_scale` times a draw.
    fn draw(&self, key: &str) -> f64 {
        let tenant = crate::load::tenant_of(key);
        let scale = tenant.and_then(|t| self.scales.get(t)).copied();
        self.draw_unscaled(key) * scale.unwrap_or(1.0)
    }

    fn draw_unscaled(&self, key: &str) -> f64 {
        let draw = || {
            let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
            self.model.draw(&mut rng)
        };
        if let Some(seed) = self.keyed {
            let mut hasher = std::hash::DefaultHasher::new();
            std::hash::Hash::hash(&(seed, key), &mut hasher);
            let mut rng = StdRng::seed_from_u64(std::hash::Hasher::finish(&hasher));
            return self.model.draw(&mut rng);
        }
        match &self.kept {
            None => draw(),
            Some(kept) => *kept
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(key.to_string())
                .or_insert_with(draw),
        }
    }
}

/// What a consumer does with a message whose execution failed: the scenario's
/// `consumers.on_failure`, with the runtime's own backoff (`leasehold_worker::Backoff`).
#[derive(Clone, Copy)]
pub enum OnFailure {
    /// Nothing: the lease runs out.
    WaitLease,
    /// Visibility 0: back at once.
    Release,
    Backoff(Backoff),
}

impl OnFailure {
    pub fn of(scenario: &Scenario) -> OnFailure {
        let c = &scenario.consumers;
        match c.on_failure.as_str() {
            "release" => OnFailure::Release,
            "backoff" => OnFailure::Backoff(Backoff {
                base: Duration::from_secs_f64(c.backoff_s.clamp(0.0, 900.0)),
                cap: Duration::from_secs(900),
            }),
            _ => OnFailure::WaitLease,
        }
    }

    /// The visibility timeout that puts the message back after its `receives`-th receive
    /// failed; none to leave it for its lease to run out.
    fn put_back_s(&self, receives: u32) -> Option<i32> {
        match self {
            OnFailure::WaitLease => None,
            OnFailure::Release => Some(0),
            OnFailure::Backoff(b) => {
                Some(i32::try_from(b.delay(receives).as_secs()).unwrap_or(900))
            }
        }
    }
}

/// What went wrong in the lab's own machinery (never a measure of the system): deletes the
/// server refused, executions the database failed (the first one's error kept to show).
#[derive(Default)]
pub struct Failures {
    pub deletes: AtomicU64,
    pub executions: AtomicU64,
    pub first_execution_error: Mutex<Option<String>>,
}

impl Failures {
    pub fn snapshot(&self) -> crate::report::Counts {
        crate::report::Counts {
            sending: crate::load::Sending::default(),
            delete_failures: self.deletes.load(Ordering::Relaxed),
            execution_failures: self.executions.load(Ordering::Relaxed),
            first_execution_error: self
                .first_execution_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }

    /// Counts a failed execution, unless it is a poison message's (which fails by design) or
    /// one a Lambda function's timeout ended (a measure).
    fn execution(&self, error: &LabError) {
        if matches!(error, LabError::Poison | LabError::TimedOut) {
            return;
        }
        if self.executions.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!("an execution failed on the downstream: {error}");
            *self
                .first_execution_error
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(error.to_string());
        }
    }
}

/// A running fleet: stop it, then wait for it.
pub struct Fleet {
    tasks: JoinSet<()>,
    runtime: Option<Arc<Worker>>,
    pub failures: Arc<Failures>,
}

impl Fleet {
    /// The most consumers at once: a lambda fleet's limit, or the fleet within the ceiling
    /// (more would only wait on it, as the simulator's do).
    pub fn size(scenario: &Scenario) -> u32 {
        let ceiling = scenario.consumers.concurrency_ceiling;
        let workers = scenario.scaling.workers;
        if crate::processes::is_lambda(scenario) {
            scenario.lambda_limit()
        } else if ceiling > 0 {
            workers.min(ceiling)
        } else {
            workers
        }
    }

    /// Waits for every consumer to end (after the stop token).
    pub async fn join(mut self) -> Option<WorkerStats> {
        while self.tasks.join_next().await.is_some() {}
        self.runtime.map(|w| w.stats())
    }
}

/// Where a fleet works: the scenario, the queue, the downstream, and the token that stops it.
pub struct Target<'a> {
    pub scenario: &'a Scenario,
    pub client: &'a Client,
    pub queue_url: &'a str,
    pub downstream: &'a Downstream,
    pub stop: &'a CancellationToken,
}

/// Starts the fleet the scenario describes on the target's queue.
pub async fn start(target: &Target<'_>) -> Result<Fleet, LabError> {
    let n = Fleet::size(target.scenario) as usize;
    let mut executors = Vec::with_capacity(n);
    for _ in 0..n {
        executors.push(target.downstream.executor().await?);
    }
    let site = Site {
        scenario: target.scenario,
        client: target.client,
        queue_url: target.queue_url,
        idempotency_url: target.downstream.url(),
        stop: target.stop,
        // A fleet of tasks ends with the run, at once.
        drain: target.stop,
        grace: Duration::ZERO,
    };
    launch(&site, executors, WorkDraw::new(target.scenario)).await
}

/// What consumers need to run: the scenario, the queue, where the idempotency store lives
/// (the downstream's schema), and the tokens that stop them.
pub(crate) struct Site<'a> {
    pub scenario: &'a Scenario,
    pub client: &'a Client,
    pub queue_url: &'a str,
    pub idempotency_url: &'a str,
    /// Stops at once: executions under way are dropped.
    pub stop: &'a CancellationToken,
    /// Stops taking messages: those under way finish (the runtime: within `grace`, then
    /// it gives them back).
    pub drain: &'a CancellationToken,
    pub grace: Duration,
}

/// Starts consumers on `executors`: a naive consumer on each, or one runtime as wide as
/// they are.
pub(crate) async fn launch(
    site: &Site<'_>,
    executors: Vec<Executor>,
    draw: WorkDraw,
) -> Result<Fleet, LabError> {
    let failures = Arc::new(Failures::default());
    let mut tasks = JoinSet::new();
    if !uses_runtime(site.scenario) {
        for executor in executors {
            let naive = Naive {
                client: site.client.clone(),
                queue_url: site.queue_url.to_string(),
                executor,
                draw: draw.clone(),
                stop: site.stop.clone(),
                drain: site.drain.clone(),
                failures: failures.clone(),
                failure: OnFailure::of(site.scenario),
                heartbeat: Heartbeat::of(site.scenario),
            };
            tasks.spawn(naive.run());
        }
        return Ok(Fleet {
            tasks,
            runtime: None,
            failures,
        });
    }
    let worker = Arc::new(runtime(site, executors, draw, failures.clone()).await?);
    tasks.spawn({
        let worker = worker.clone();
        async move {
            worker.run().await;
        }
    });
    Ok(Fleet {
        tasks,
        runtime: Some(worker),
        failures,
    })
}

/// A naive consumer: one message at a time, the queue's lease as it is, delete at the end;
/// a failed execution is left for its lease to run out, or put back as
/// `consumers.on_failure` says. Stopped, it drops its execution (the query is cancelled);
/// draining, it finishes the message it has and takes no other.
struct Naive {
    client: Client,
    queue_url: String,
    executor: Executor,
    draw: WorkDraw,
    stop: CancellationToken,
    drain: CancellationToken,
    failures: Arc<Failures>,
    failure: OnFailure,
    heartbeat: Option<Heartbeat>,
}

impl Naive {
    async fn run(self) {
        while !self.stop.is_cancelled() && !self.drain.is_cancelled() {
            let Some(received) = self.receive().await else {
                break;
            };
            let Ok(received) = received else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            for m in received.messages.unwrap_or_default() {
                if !self.work(m).await {
                    return;
                }
            }
        }
    }

    /// One receive; none once stopped. A receive under way when the drain begins is waited
    /// for (the server may already have leased it a message, which an abandoned answer would
    /// hide for a whole lease) and what it got is given straight back.
    async fn receive(
        &self,
    ) -> Option<Result<aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput, ()>> {
        let receive = (self.client.receive_message())
            .queue_url(&self.queue_url)
            .max_number_of_messages(1)
            .wait_time_seconds(1)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send();
        tokio::pin!(receive);
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => return None,
            r = &mut receive => return Some(r.map_err(|_| ())),
            _ = self.drain.cancelled() => {}
        }
        let late = tokio::select! {
            biased;
            _ = self.stop.cancelled() => return None,
            r = &mut receive => r,
        };
        for m in late.ok().and_then(|out| out.messages).unwrap_or_default() {
            if let Some(handle) = m.receipt_handle {
                self.put_back(handle, 0).await;
            }
        }
        None
    }

    /// Works one message and deletes it (or puts it back as `on_failure` says); false once
    /// stopped.
    async fn work(&self, m: aws_sdk_sqs::types::Message) -> bool {
        let (Some(id), Some(handle)) = (&m.message_id, m.receipt_handle) else {
            return true;
        };
        let key = crate::load::key_of(m.message_attributes.as_ref(), id);
        let work_s = self.draw.draw(&key);
        // Stopped, the execution's future is dropped: its query is cancelled.
        let done = tokio::select! {
            _ = self.stop.cancelled() => return false,
            r = self.executor.execute(&key, work_s) => r,
            () = self.keep_alive(&handle) => {
                // A renewal refused: the lease is lost (the message was deleted, or another
                // consumer holds it). The work is dropped, its query cancelled, and nothing
                // deleted, as the simulator's heartbeat consumer does.
                return true;
            }
        };
        if let Err(e) = &done {
            self.failures.execution(e);
            if matches!(e, LabError::TimedOut) {
                // Lambda deletes nothing of an invocation it ended: the lease runs out.
                return true;
            }
            let receives = (m.attributes.as_ref())
                .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                .and_then(|n| n.parse().ok())
                .unwrap_or(1);
            if let Some(visibility) = self.failure.put_back_s(receives) {
                self.put_back(handle, visibility).await;
            }
            return true;
        }
        let deleted = (self.client.delete_message())
            .queue_url(&self.queue_url)
            .receipt_handle(handle)
            .send()
            .await;
        if deleted.is_err() {
            self.failures.deletes.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// The bug's heartbeat, for as long as the execution runs: the lease renewed every
    /// lease/3 until the drain begins, then nothing. Returns only when a renewal is refused
    /// (the lease is lost); without a heartbeat, never.
    async fn keep_alive(&self, handle: &str) {
        let Some(beat) = self.heartbeat else {
            return std::future::pending().await;
        };
        loop {
            tokio::select! {
                biased;
                _ = self.drain.cancelled() => return std::future::pending().await,
                _ = tokio::time::sleep(beat.every) => {}
            }
            if !self.set_visibility(handle, beat.lease_s).await {
                return;
            }
        }
    }

    async fn put_back(&self, handle: String, visibility: i32) {
        self.set_visibility(&handle, visibility).await;
    }

    /// The message's visibility timeout set to `seconds` from now; whether the server took it.
    async fn set_visibility(&self, handle: &str, seconds: i32) -> bool {
        (self.client.change_message_visibility())
            .queue_url(&self.queue_url)
            .receipt_handle(handle)
            .visibility_timeout(seconds)
            .send()
            .await
            .is_ok()
    }
}

/// The runtime: at most the ceiling's executions at once, each under a heartbeat and, where
/// the scenario says so, the idempotency gate on the downstream's database.
async fn runtime(
    site: &Site<'_>,
    executors: Vec<Executor>,
    draw: WorkDraw,
    failures: Arc<Failures>,
) -> Result<Worker, LabError> {
    let scenario = site.scenario;
    let lease = Duration::from_secs(u64::from(scenario.queue.visibility_timeout_s));
    let pool = Arc::new(Mutex::new(executors));
    let mut builder = Worker::builder(site.client.clone(), site.queue_url)
        .concurrency(pool.lock().map_or(1, |p| p.len()))
        .lease(lease)
        .wait_time(1)
        .shutdown(site.drain.clone())
        .grace(site.grace);
    match OnFailure::of(scenario) {
        OnFailure::Release => builder = builder.fail_fast(true),
        OnFailure::Backoff(backoff) => builder = builder.backoff(backoff),
        // The runtime always puts a failed message back; `LabSpec::of` refuses a poison
        // trigger with this.
        OnFailure::WaitLease => {}
    }
    if scenario.consumers.rate_limit_per_s >= 1.0 {
        builder = builder.rate_limit(scenario.consumers.rate_limit_per_s as u32);
    }
    if scenario.consumers.idempotency {
        let store = PostgresStore::connect(site.idempotency_url)
            .await
            .map_err(|e| LabError::Setup(format!("idempotency store: {e}")))?;
        builder = builder.idempotency(Arc::new(store));
    }
    Ok(builder
        .handler(move |m| {
            let pool = pool.clone();
            let failures = failures.clone();
            let key = crate::load::key_of(Some(&m.message_attributes), &m.message_id);
            let work_s = draw.draw(&key);
            async move {
                let executor = pool
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .pop()
                    .ok_or("no free connection: more executions than the ceiling")?;
                let result = tokio::select! {
                    r = executor.execute(&key, work_s) => r.map_err(|e| {
                        failures.execution(&e);
                        e.to_string().into()
                    }),
                    // Dropping the execution's future cancels its query.
                    _ = m.cancel.cancelled() => Err("lease lost: execution cancelled".into()),
                };
                pool.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(executor);
                result
            }
        })
        .build())
}

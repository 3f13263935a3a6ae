//! The worker: receive within free capacity and the rate limit, run each message under a
//! lease keeper and the idempotency gate, finish with a delete or a backoff, drain on shutdown.

use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName};
use aws_sdk_sqs::Client;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::deleter::Deleter;
use crate::fifo::{Groups, Turn};
use crate::idempotency::{Begin, IdempotencyStore};
use crate::lease::{ClaimRenewal, LeaseKeeper, LeaseSpec};
use crate::stats::{Counters, WorkerStats};
use crate::MAX_TOTAL_LEASE;

/// A message attribute naming the unit of work, set by `leasehold redrive` so a redriven
/// message (which gets a new MessageId) keeps its idempotency key.
pub const IDEMPOTENCY_KEY_ATTRIBUTE: &str = "leasehold-idempotency-key";

/// How long a handler has to return once its token is cancelled, before it is dropped.
const CANCEL_GRACE: Duration = Duration::from_secs(1);

pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;
type BoxFuture = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send>>;
type Handler = Arc<dyn Fn(Message) -> BoxFuture + Send + Sync>;
type KeyFn = Arc<dyn Fn(&Message) -> String + Send + Sync>;

/// One message as a handler sees it.
#[derive(Clone, Debug)]
pub struct Message {
    pub message_id: String,
    pub body: String,
    pub receive_count: u32,
    /// System attributes (SentTimestamp, ApproximateReceiveCount, ...).
    pub attributes: HashMap<String, String>,
    pub message_attributes: HashMap<String, MessageAttributeValue>,
    /// When the receive returned: the lease has been running since.
    pub received_at: Instant,
    /// Cancelled when the lease is lost or the worker shuts down past its grace: stop work.
    pub cancel: CancellationToken,
    /// Cancelled when the lease can be extended no further (12 hours from the receive).
    pub lease_ceiling: CancellationToken,
}

pub struct WorkerBuilder {
    client: Client,
    queue_url: String,
    handler: Option<Handler>,
    concurrency: usize,
    rate_per_second: Option<NonZeroU32>,
    lease: Duration,
    heartbeat: Option<Duration>,
    idempotency: Option<Arc<dyn IdempotencyStore>>,
    completed_retention: Duration,
    key: KeyFn,
    backoff: Backoff,
    fail_fast: bool,
    shutdown: CancellationToken,
    grace: Option<Duration>,
    wait_time_s: i32,
}

impl WorkerBuilder {
    /// The handler: an async function of the message; Ok deletes it, Err puts it back.
    pub fn handler<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Message) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.handler = Some(Arc::new(move |m| Box::pin(f(m))));
        self
    }

    /// At most this many messages in flight; never receives more than free capacity, so no
    /// message waits locally on a running lease.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// A token-bucket limit on messages started per second.
    pub fn rate_limit(mut self, per_second: u32) -> Self {
        self.rate_per_second = NonZeroU32::new(per_second);
        self
    }

    /// The lease each receive asks for and each heartbeat renews.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_secs(1));
        self
    }

    /// How often to renew (default: a third of the lease, so two missed beats survive).
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = Some(every.max(Duration::from_millis(100)));
        self
    }

    pub fn idempotency(mut self, store: Arc<dyn IdempotencyStore>) -> Self {
        self.idempotency = Some(store);
        self
    }

    /// How long a completed key is remembered.
    pub fn completed_retention(mut self, retention: Duration) -> Self {
        self.completed_retention = retention;
        self
    }

    /// The idempotency key of a message (default: the `leasehold-idempotency-key` attribute,
    /// else the MessageId).
    pub fn key<F: Fn(&Message) -> String + Send + Sync + 'static>(mut self, f: F) -> Self {
        self.key = Arc::new(f);
        self
    }

    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Put failed messages back at once (visibility 0) instead of after a backoff.
    pub fn fail_fast(mut self, yes: bool) -> Self {
        self.fail_fast = yes;
        self
    }

    /// Cancel to shut down: stop receiving, drain within the grace period.
    pub fn shutdown(mut self, token: CancellationToken) -> Self {
        self.shutdown = token;
        self
    }

    /// How long in-flight work may finish after shutdown (default: two thirds of the lease).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// Long-poll wait for receives, 0..=20 s.
    pub fn wait_time(mut self, seconds: i32) -> Self {
        self.wait_time_s = seconds.clamp(0, 20);
        self
    }

    pub fn build(self) -> Worker {
        let handler = self
            .handler
            .expect("a handler is required: WorkerBuilder::handler");
        let heartbeat = self
            .heartbeat
            .unwrap_or(self.lease / 3)
            .max(Duration::from_millis(100));
        let grace = self.grace.unwrap_or(self.lease * 2 / 3);
        if grace >= self.lease {
            tracing::warn!(?grace, lease = ?self.lease, "graceful shutdown is not shorter than the lease: drained work may already have been redelivered");
        }
        if heartbeat >= self.lease {
            tracing::warn!(?heartbeat, lease = ?self.lease, "heartbeat is not shorter than the lease: leases will lapse between beats");
        }
        let fifo = self.queue_url.trim_end_matches('/').ends_with(".fifo");
        let limiter = self
            .rate_per_second
            .map(|r| Arc::new(RateLimiter::direct(Quota::per_second(r))));
        Worker {
            inner: Arc::new(Inner {
                client: self.client,
                queue_url: self.queue_url,
                handler,
                concurrency: self.concurrency,
                limiter,
                rate: self.rate_per_second,
                lease: self.lease,
                heartbeat,
                idempotency: self.idempotency,
                completed_retention: self.completed_retention,
                key: self.key,
                backoff: self.backoff,
                fail_fast: self.fail_fast,
                grace,
                wait_time_s: self.wait_time_s,
                counters: Arc::new(Counters::default()),
                hard_stop: CancellationToken::new(),
                fifo,
            }),
            shutdown: self.shutdown,
        }
    }
}

struct Inner {
    client: Client,
    queue_url: String,
    handler: Handler,
    concurrency: usize,
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
    rate: Option<NonZeroU32>,
    lease: Duration,
    heartbeat: Duration,
    idempotency: Option<Arc<dyn IdempotencyStore>>,
    completed_retention: Duration,
    key: KeyFn,
    backoff: Backoff,
    fail_fast: bool,
    grace: Duration,
    wait_time_s: i32,
    counters: Arc<Counters>,
    /// Cancelled when the grace period is over: handlers still running are stopped.
    hard_stop: CancellationToken,
    /// A FIFO queue (its name ends in `.fifo`): groups run in turn (`fifo.rs`).
    fifo: bool,
}

pub struct Worker {
    inner: Arc<Inner>,
    shutdown: CancellationToken,
}

fn default_key(m: &Message) -> String {
    m.message_attributes
        .get(IDEMPOTENCY_KEY_ATTRIBUTE)
        .and_then(|a| a.string_value.clone())
        .unwrap_or_else(|| m.message_id.clone())
}

fn whole_seconds(d: Duration) -> i32 {
    d.as_secs().clamp(0, i32::MAX as u64) as i32
}

impl Worker {
    pub fn builder(client: Client, queue_url: impl Into<String>) -> WorkerBuilder {
        WorkerBuilder {
            client,
            queue_url: queue_url.into(),
            handler: None,
            concurrency: 10,
            rate_per_second: None,
            lease: Duration::from_secs(30),
            heartbeat: None,
            idempotency: None,
            completed_retention: Duration::from_secs(14 * 24 * 3600),
            key: Arc::new(default_key),
            backoff: Backoff::default(),
            fail_fast: false,
            shutdown: CancellationToken::new(),
            grace: None,
            wait_time_s: 20,
        }
    }

    /// The counters so far; they keep counting while the worker runs.
    pub fn stats(&self) -> WorkerStats {
        self.inner.counters.snapshot()
    }

    /// Runs until the shutdown token is cancelled and the drain is over.
    pub async fn run(&self) -> WorkerStats {
        let inner = &self.inner;
        let slots = Arc::new(Semaphore::new(inner.concurrency));
        let (deleter, deleter_task) = Deleter::spawn(inner.client.clone(), inner.queue_url.clone());
        let mut tasks = JoinSet::new();
        let mut groups = Groups::default();
        // A FIFO receive retried after an error reuses its attempt id, so SQS answers it
        // with the same messages instead of leasing others.
        let mut attempt_id: Option<String> = None;
        while !self.shutdown.is_cancelled() {
            let first = tokio::select! {
                permit = slots.clone().acquire_owned() => permit.expect("never closed"),
                _ = self.shutdown.cancelled() => break,
            };
            let mut permits = vec![first];
            while permits.len() < 10 {
                match slots.clone().try_acquire_owned() {
                    Ok(p) => permits.push(p),
                    Err(_) => break,
                }
            }
            if let (Some(limiter), Some(rate)) = (&inner.limiter, inner.rate) {
                permits.truncate(rate.get().min(10) as usize);
                let n = NonZeroU32::new(permits.len() as u32).expect("at least one permit");
                tokio::select! {
                    _ = limiter.until_n_ready(n) => {}
                    _ = self.shutdown.cancelled() => break,
                }
            }
            if inner.fifo && attempt_id.is_none() {
                attempt_id = Some(format!("{:032x}", rand::random::<u128>()));
            }
            let receive = inner
                .client
                .receive_message()
                .queue_url(&inner.queue_url)
                .max_number_of_messages(permits.len() as i32)
                .wait_time_seconds(inner.wait_time_s)
                .visibility_timeout(whole_seconds(inner.lease))
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .message_attribute_names("All")
                .set_receive_request_attempt_id(attempt_id.clone())
                .send();
            let answer = tokio::select! {
                answer = receive => answer,
                _ = self.shutdown.cancelled() => break,
            };
            let received_at = Instant::now();
            let messages = match answer {
                Ok(out) => {
                    attempt_id = None;
                    out.messages.unwrap_or_default()
                }
                Err(error) => {
                    tracing::warn!(error = ?error, "receive failed; retrying in a second");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = self.shutdown.cancelled() => {}
                    }
                    continue;
                }
            };
            for (m, permit) in messages.into_iter().zip(permits) {
                inner.counters.received.fetch_add(1, Ordering::Relaxed);
                let (Some(id), Some(handle)) = (m.message_id.clone(), m.receipt_handle.clone())
                else {
                    continue;
                };
                if self.shutdown.is_cancelled() {
                    // Received as shutdown began: give it straight back.
                    release(inner, &handle).await;
                    continue;
                }
                let message = Message {
                    message_id: id,
                    body: m.body.clone().unwrap_or_default(),
                    receive_count: m
                        .attributes
                        .as_ref()
                        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(1),
                    attributes: m
                        .attributes
                        .clone()
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k.as_str().to_string(), v))
                        .collect(),
                    message_attributes: m.message_attributes.clone().unwrap_or_default(),
                    received_at,
                    cancel: inner.hard_stop.child_token(),
                    lease_ceiling: CancellationToken::new(),
                };
                let turn = inner
                    .fifo
                    .then(|| message.attributes.get("MessageGroupId").cloned())
                    .flatten()
                    .map(|group| groups.next(&group));
                tasks.spawn(process(
                    inner.clone(),
                    deleter.clone(),
                    message,
                    handle,
                    permit,
                    turn,
                ));
            }
        }
        // Draining: in-flight work may finish within the grace period, then it is stopped
        // and its messages given back. Heartbeats run until each task ends.
        let deadline = Instant::now() + inner.grace;
        loop {
            match tokio::time::timeout_at(deadline, tasks.join_next()).await {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(_) => {
                    inner.hard_stop.cancel();
                    while tasks.join_next().await.is_some() {}
                    break;
                }
            }
        }
        drop(deleter);
        let _ = deleter_task.await;
        inner.counters.snapshot()
    }
}

async fn change_visibility(inner: &Inner, handle: &str, seconds: i32) {
    let result = inner
        .client
        .change_message_visibility()
        .queue_url(&inner.queue_url)
        .receipt_handle(handle)
        .visibility_timeout(seconds)
        .send()
        .await;
    if let Err(error) = result {
        tracing::warn!(error = ?error, "could not change the message's visibility");
    }
}

async fn release(inner: &Inner, handle: &str) {
    inner
        .counters
        .released_on_shutdown
        .fetch_add(1, Ordering::Relaxed);
    change_visibility(inner, handle, 0).await;
}

/// Puts a failed message back after its backoff, never past the 12-hour ceiling.
async fn put_back(inner: &Inner, handle: &str, receive_count: u32, received_at: Instant) {
    let delay = if inner.fail_fast {
        Duration::ZERO
    } else {
        inner.backoff.delay(receive_count)
    };
    let room = MAX_TOTAL_LEASE
        .saturating_sub(received_at.elapsed())
        .saturating_sub(Duration::from_secs(1));
    change_visibility(inner, handle, whole_seconds(delay.min(room))).await;
}

enum Outcome {
    Done(Result<(), HandlerError>),
    /// The lease was lost; the handler's result, if it returned within the cancel grace.
    LeaseLost(Option<Result<(), HandlerError>>),
    /// Shutdown ran out of grace; the handler's result, if it returned in time.
    Stopped(Option<Result<(), HandlerError>>),
}

/// What a FIFO message waiting for its turn in its group found.
enum TurnOutcome {
    /// The message before it succeeded: run.
    Go,
    /// The message before it did not succeed: give this one back rather than overtake it.
    Behind,
    /// This message's own lease was lost while it waited: leave it alone.
    Lost,
}

/// Waits for the message before it in its FIFO group, keeping its own lease meanwhile.
async fn wait_turn(inner: &Inner, turn: &mut Turn, message: &Message, handle: &str) -> TurnOutcome {
    let keeper = LeaseKeeper::start(
        lease_spec(inner, handle, message.received_at),
        None,
        inner.counters.clone(),
    );
    let outcome = tokio::select! {
        go = turn.wait() => if go { TurnOutcome::Go } else { TurnOutcome::Behind },
        _ = keeper.lost.cancelled() => TurnOutcome::Lost,
    };
    keeper.stop().await;
    outcome
}

fn lease_spec(inner: &Inner, handle: &str, received_at: Instant) -> LeaseSpec {
    LeaseSpec {
        client: inner.client.clone(),
        queue_url: inner.queue_url.clone(),
        receipt_handle: handle.to_string(),
        received_at,
        lease: inner.lease,
        period: inner.heartbeat,
        max_total: MAX_TOTAL_LEASE,
    }
}

async fn process(
    inner: Arc<Inner>,
    deleter: Deleter,
    message: Message,
    handle: String,
    _slot: OwnedSemaphorePermit,
    turn: Option<Turn>,
) {
    let mut turn = turn;
    if let Some(turn) = turn.as_mut() {
        match wait_turn(&inner, turn, &message, &handle).await {
            TurnOutcome::Go => {}
            // An earlier message of its group did not succeed: this one must not overtake
            // it. Given back at once; the group's order is the queue's again.
            TurnOutcome::Behind => {
                change_visibility(&inner, &handle, 0).await;
                return;
            }
            // Someone else may own it now: neither run nor touch it.
            TurnOutcome::Lost => return,
        }
    }
    let succeeded = run_message(&inner, &deleter, message, handle).await;
    if let Some(turn) = turn {
        turn.finish(succeeded);
    }
}

/// Runs one message through the gate, the lease keeper and the handler; true when it
/// succeeded (or was already done) and was deleted.
async fn run_message(
    inner: &Arc<Inner>,
    deleter: &Deleter,
    message: Message,
    handle: String,
) -> bool {
    let inner = inner.clone();
    let counters = inner.counters.clone();
    let started = Instant::now();
    let key = (inner.key)(&message);
    let claim_margin = inner.heartbeat.max(Duration::from_secs(1));
    let claim = match &inner.idempotency {
        None => None,
        Some(store) => match store.begin(&key, inner.lease + claim_margin).await {
            Ok(Begin::Started(claim)) => Some((store.clone(), claim)),
            Ok(Begin::Completed) => {
                // A duplicate of finished work: delete it without running.
                counters.duplicates_skipped.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("leasehold_worker_duplicates_skipped_total").increment(1);
                if deleter.delete(handle).await.is_err() {
                    counters.delete_failures.fetch_add(1, Ordering::Relaxed);
                }
                return true;
            }
            Ok(Begin::InProgressElsewhere) => {
                // Another worker is on it and may still crash: keep the message, try later.
                counters
                    .put_back_in_progress
                    .fetch_add(1, Ordering::Relaxed);
                put_back(&inner, &handle, message.receive_count, message.received_at).await;
                return false;
            }
            Err(error) => {
                tracing::warn!(%error, "idempotency store unavailable; not running unguarded");
                counters.failed.fetch_add(1, Ordering::Relaxed);
                put_back(&inner, &handle, message.receive_count, message.received_at).await;
                return false;
            }
        },
    };
    let spec = lease_spec(&inner, &handle, message.received_at);
    let settled = Arc::new(AtomicBool::new(false));
    let renewal = claim.as_ref().map(|(store, claim)| ClaimRenewal {
        store: store.clone(),
        key: key.clone(),
        claim: claim.clone(),
        margin: claim_margin,
        settled: settled.clone(),
    });
    let keeper = LeaseKeeper::start(spec, renewal, counters.clone());
    let mut message = message;
    message.lease_ceiling = keeper.ceiling.clone();
    let cancel = message.cancel.clone();
    let (receive_count, received_at) = (message.receive_count, message.received_at);
    let work = (inner.handler)(message);
    tokio::pin!(work);
    let outcome = tokio::select! {
        result = &mut work => Outcome::Done(result),
                _ = keeper.lost.cancelled() => {
            cancel.cancel();
            Outcome::LeaseLost(tokio::time::timeout(CANCEL_GRACE, &mut work).await.ok())
        }
        _ = cancel.cancelled() => {
            Outcome::Stopped(tokio::time::timeout(CANCEL_GRACE, &mut work).await.ok())
        }
    };
    metrics::histogram!("leasehold_worker_processing_seconds")
        .record(started.duration_since(received_at).as_secs_f64());
    // Every outcome completes or releases the claim next: the keeper stops renewing it.
    settled.store(true, Ordering::Release);
    match outcome {
        Outcome::Done(Ok(())) | Outcome::Stopped(Some(Ok(()))) => {
            if let Some((store, claim)) = &claim {
                if let Ok(false) = store.complete(&key, claim, inner.completed_retention).await {
                    tracing::warn!(%key, "completed work whose idempotency claim had been taken over");
                }
            }
            keeper.stop().await;
            counters.succeeded.fetch_add(1, Ordering::Relaxed);
            let deleted = deleter.delete(handle).await.is_ok();
            if !deleted {
                counters.delete_failures.fetch_add(1, Ordering::Relaxed);
            }
            deleted
        }
        Outcome::Done(Err(error)) => {
            tracing::info!(%error, receive_count, "handler failed; backing off");
            if let Some((store, claim)) = &claim {
                let _ = store.release(&key, claim).await;
            }
            keeper.stop().await;
            counters.failed.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("leasehold_worker_retries_total").increment(1);
            put_back(&inner, &handle, receive_count, received_at).await;
            false
        }
        Outcome::LeaseLost(result) => {
            // Someone else owns the message now: neither delete nor change it. Work that
            // finished anyway is recorded, so the other copy is skipped as a duplicate.
            if let Some((store, claim)) = &claim {
                if let Some(Ok(())) = result {
                    let _ = store.complete(&key, claim, inner.completed_retention).await;
                } else {
                    let _ = store.release(&key, claim).await;
                }
            }
            keeper.stop().await;
            false
        }
        Outcome::Stopped(_) => {
            if let Some((store, claim)) = &claim {
                let _ = store.release(&key, claim).await;
            }
            keeper.stop().await;
            release(&inner, &handle).await;
            false
        }
    }
}

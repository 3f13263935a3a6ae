//! The worker: receive within free capacity and the rate limit, hand each message to its own
//! task (`process.rs`), drain on shutdown.

use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName};
use aws_sdk_sqs::Client;
use governor::DefaultDirectRateLimiter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::builder::WorkerBuilder;
use crate::deleter::Deleter;
use crate::fifo::Groups;
use crate::idempotency::IdempotencyStore;
use crate::lease::Timing;
use crate::process::{process, release, Received};
use crate::stats::{Counters, WorkerStats};

/// A message attribute naming the unit of work, set by `leasehold redrive` so a redriven
/// message (which gets a new MessageId) keeps its idempotency key.
pub const IDEMPOTENCY_KEY_ATTRIBUTE: &str = "leasehold-idempotency-key";

pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;
pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send>>;
pub(crate) type Handler = Arc<dyn Fn(Message) -> BoxFuture + Send + Sync>;
pub(crate) type KeyFn = Arc<dyn Fn(&Message) -> String + Send + Sync>;

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
    /// Cancelled when the run must stop: its lease or claim could end before it would (it is
    /// then dropped after the stop grace), or the worker shuts down past its grace.
    pub cancel: CancellationToken,
    /// Cancelled when the lease can be extended no further (12 hours from the receive); the
    /// run is stopped before that lease ends.
    pub lease_ceiling: CancellationToken,
}

pub(crate) struct Inner {
    pub client: Client,
    pub queue_url: String,
    pub handler: Handler,
    pub concurrency: usize,
    pub limiter: Option<Arc<DefaultDirectRateLimiter>>,
    pub rate: Option<NonZeroU32>,
    pub timing: Timing,
    /// How long a cancelled handler has to return before it is dropped.
    pub stop_grace: Duration,
    pub idempotency: Option<Arc<dyn IdempotencyStore>>,
    pub completed_retention: Duration,
    pub key: KeyFn,
    pub backoff: Backoff,
    pub fail_fast: bool,
    pub grace: Duration,
    pub wait_time_s: i32,
    pub counters: Arc<Counters>,
    /// Cancelled when the grace period is over: handlers still running are stopped.
    pub hard_stop: CancellationToken,
    /// A FIFO queue (its name ends in `.fifo`): groups run in turn (`fifo.rs`).
    pub fifo: bool,
}

pub struct Worker {
    inner: Arc<Inner>,
    shutdown: CancellationToken,
}

pub(crate) fn whole_seconds(d: Duration) -> i32 {
    d.as_secs().clamp(0, i32::MAX as u64) as i32
}

impl Worker {
    pub fn builder(client: Client, queue_url: impl Into<String>) -> WorkerBuilder {
        WorkerBuilder::new(client, queue_url.into())
    }

    pub(crate) fn from_inner(inner: Inner, shutdown: CancellationToken) -> Worker {
        Worker {
            inner: Arc::new(inner),
            shutdown,
        }
    }

    /// The counters so far; they keep counting while the worker runs.
    pub fn stats(&self) -> WorkerStats {
        self.inner.counters.snapshot()
    }

    /// Free slots (up to ten, one receive's worth) and the rate limit's tokens for them; None
    /// once shutdown begins.
    async fn take_slots(&self, slots: &Arc<Semaphore>) -> Option<Vec<OwnedSemaphorePermit>> {
        let inner = &self.inner;
        let first = tokio::select! {
            permit = slots.clone().acquire_owned() => permit.expect("never closed"),
            _ = self.shutdown.cancelled() => return None,
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
                _ = self.shutdown.cancelled() => return None,
            }
        }
        Some(permits)
    }

    /// One receive. A receive under way when shutdown begins is waited for (within the
    /// grace): the server may already have leased messages to it, and an abandoned answer
    /// would leave them hidden a whole lease. Returns the answer and when it came.
    async fn receive(
        &self,
        max: usize,
        attempt_id: Option<String>,
    ) -> (Result<ReceiveMessageOutput, String>, Instant) {
        let inner = &self.inner;
        let receive = inner
            .client
            .receive_message()
            .queue_url(&inner.queue_url)
            .max_number_of_messages(max as i32)
            .wait_time_seconds(inner.wait_time_s)
            .visibility_timeout(whole_seconds(inner.timing.lease))
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .set_receive_request_attempt_id(attempt_id)
            .send();
        tokio::pin!(receive);
        let answer = tokio::select! {
            answer = &mut receive => answer.map_err(|e| format!("{e:?}")),
            _ = self.shutdown.cancelled() => {
                match tokio::time::timeout(inner.grace, &mut receive).await {
                    Ok(answer) => answer.map_err(|e| format!("{e:?}")),
                    Err(_) => Err("shutdown: the receive did not answer within the grace".into()),
                }
            }
        };
        (answer, Instant::now())
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
            let Some(permits) = self.take_slots(&slots).await else {
                break;
            };
            if inner.fifo && attempt_id.is_none() {
                attempt_id = Some(format!("{:032x}", rand::random::<u128>()));
            }
            let (answer, received_at) = self.receive(permits.len(), attempt_id.clone()).await;
            let messages = match answer {
                Ok(out) => {
                    attempt_id = None;
                    out.messages.unwrap_or_default()
                }
                Err(error) => {
                    if self.shutdown.is_cancelled() {
                        break;
                    }
                    tracing::warn!(%error, "receive failed; retrying in a second");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = self.shutdown.cancelled() => {}
                    }
                    continue;
                }
            };
            for (m, permit) in messages.into_iter().zip(permits) {
                inner.counters.received.fetch_add(1, Ordering::Relaxed);
                let Some(received) = Received::new(inner, m, received_at) else {
                    continue;
                };
                if self.shutdown.is_cancelled() {
                    // Received as shutdown began: give it straight back, while its lease is
                    // surely ours.
                    let before = (received_at + inner.timing.lease)
                        .checked_sub(crate::lease::slack(inner.timing.lease));
                    release(inner, &received.handle, before).await;
                    continue;
                }
                let turn = inner
                    .fifo
                    .then(|| received.message.attributes.get("MessageGroupId").cloned())
                    .flatten()
                    .map(|group| groups.next(&group));
                tasks.spawn(process(
                    inner.clone(),
                    deleter.clone(),
                    received,
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

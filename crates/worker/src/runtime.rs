//! The worker: receive within free capacity and the rate limit, hand each message to its own
//! task (`process.rs`), drain on shutdown.

use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::deleter::Deleter;
use crate::fifo::Groups;
use crate::inner::{whole_seconds, Inner};
use crate::process::{process, release, Received};
use crate::stats::WorkerStats;

/// A consumer of one queue: built by `Worker::builder` (`builder.rs`), run by `run`.
pub struct Worker {
    inner: Arc<Inner>,
    shutdown: CancellationToken,
}

impl Worker {
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
            answer = &mut receive => answer.map_err(|e| crate::errors::one_line(&e)),
            _ = self.shutdown.cancelled() => {
                match tokio::time::timeout(inner.grace, &mut receive).await {
                    Ok(answer) => answer.map_err(|e| crate::errors::one_line(&e)),
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

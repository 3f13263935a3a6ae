//! One message's life in the worker: its lease kept from the receive on, its turn in a FIFO
//! group, the idempotency gate, the run, then its fate (delete, backoff, release), in the
//! order that keeps the runtime's promise: no two runs of one message overlap.
//!
//! One keeper holds the lease from the receive until the fate is decided, across the wait for
//! a FIFO turn, the gate and the run. When it says the run must stop, the run is cancelled and,
//! after its stop grace, dropped; only once it is gone is the message touched again, and after
//! a loss it is not touched at all (someone else may own it).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;
use futures_util::FutureExt;
use opentelemetry::context::FutureExt as _;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::deleter::Deleter;
use crate::fifo::Turn;
use crate::idempotency::{Begin, IdempotencyStore};
use crate::inner::{whole_seconds, Inner};
use crate::lease::{ClaimRenewal, LeaseKeeper, Loss, SqsLease};
use crate::message::{BoxFuture, Message};
use crate::{HandlerError, MAX_TOTAL_LEASE};

/// A message as received, with the handle its fate is decided through.
pub(crate) struct Received {
    pub message: Message,
    pub handle: String,
}

impl Received {
    pub fn new(
        inner: &Inner,
        m: aws_sdk_sqs::types::Message,
        received_at: Instant,
    ) -> Option<Received> {
        let (Some(id), Some(handle)) = (m.message_id, m.receipt_handle) else {
            return None;
        };
        let attributes = m.attributes.unwrap_or_default();
        let receive_count = attributes
            .get(&MessageSystemAttributeName::ApproximateReceiveCount)
            .and_then(|c| c.parse().ok())
            .unwrap_or(1);
        let message = Message {
            message_id: id,
            body: m.body.unwrap_or_default(),
            receive_count,
            attributes: attributes
                .into_iter()
                .map(|(k, v)| (k.as_str().to_string(), v))
                .collect(),
            message_attributes: m.message_attributes.unwrap_or_default(),
            received_at,
            cancel: inner.hard_stop.child_token(),
            lease_ceiling: Default::default(),
        };
        Some(Received { message, handle })
    }
}

/// Changes the message's visibility, only while the lease is ours: the call is not made, or is
/// cut off, at `before` (the lease's confirmed end less slack; None after a loss). A change that
/// landed after the lease ended would reach a message another consumer holds now (SQS accepts an
/// old handle's change on a standard queue) and hand it to a third.
async fn change_visibility(inner: &Inner, handle: &str, seconds: i32, before: Option<Instant>) {
    let Some(before) = before.filter(|&b| Instant::now() < b) else {
        tracing::warn!("not changing the message's visibility: its lease may be over");
        return;
    };
    let change = inner
        .client
        .change_message_visibility()
        .queue_url(&inner.queue_url)
        .receipt_handle(handle)
        .visibility_timeout(seconds)
        .send();
    match tokio::time::timeout_at(before, change).await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            tracing::warn!(error = ?error, "could not change the message's visibility")
        }
        Err(_) => tracing::warn!("gave up changing the message's visibility: its lease is ending"),
    }
}

/// Gives a message back at once, on shutdown.
pub(crate) async fn release(inner: &Inner, handle: &str, before: Option<Instant>) {
    inner
        .counters
        .released_on_shutdown
        .fetch_add(1, Ordering::Relaxed);
    change_visibility(inner, handle, 0, before).await;
}

/// Puts a message back for `delay`, never past the 12-hour ceiling.
async fn put_back(
    inner: &Inner,
    handle: &str,
    delay: Duration,
    received_at: Instant,
    before: Option<Instant>,
) {
    let room = MAX_TOTAL_LEASE
        .saturating_sub(received_at.elapsed())
        .saturating_sub(Duration::from_secs(1));
    change_visibility(inner, handle, whole_seconds(delay.min(room)), before).await;
}

/// The backoff before a failed message comes back.
fn retry_delay(inner: &Inner, receive_count: u32) -> Duration {
    if inner.fail_fast {
        Duration::ZERO
    } else {
        inner.backoff.delay(receive_count)
    }
}

/// How long one call to the idempotency store may take outside the keeper's rounds.
fn store_call_limit(inner: &Inner) -> Duration {
    inner
        .timing
        .period
        .clamp(Duration::from_secs(1), Duration::from_secs(5))
}

pub(crate) async fn process(
    inner: Arc<Inner>,
    deleter: Deleter,
    received: Received,
    _slot: OwnedSemaphorePermit,
    turn: Option<Turn>,
) {
    let Received {
        mut message,
        handle,
    } = received;
    let lease = SqsLease {
        client: inner.client.clone(),
        queue_url: inner.queue_url.clone(),
        receipt_handle: handle.clone(),
    };
    let keeper = LeaseKeeper::start(
        Arc::new(lease),
        inner.timing,
        message.received_at,
        inner.counters.clone(),
    );
    message.lease_ceiling = keeper.ceiling.clone();
    let mut turn = turn;
    if let Some(turn) = turn.as_mut() {
        let go = tokio::select! {
            go = turn.wait() => Some(go),
            _ = keeper.lost.cancelled() => None,
        };
        match go {
            Some(true) => {}
            // An earlier message of its group did not succeed: this one must not overtake
            // it. Given back at once; the group's order is the queue's again.
            Some(false) => {
                let before = keeper.stop().await.touch_before(&inner.timing);
                change_visibility(&inner, &handle, 0, before).await;
                return;
            }
            // Its lease could not be kept while it waited: someone else may own it now.
            None => return,
        }
    }
    let traced = crate::trace::run_context(&inner.queue_url, &message);
    let succeeded = run_message(&inner, &deleter, keeper, message, &handle)
        .with_context(traced.clone())
        .await;
    crate::trace::finished(&traced, succeeded);
    if let Some(turn) = turn {
        turn.finish(succeeded);
    }
}

/// What the idempotency gate decided.
enum Gate {
    Run(Arc<dyn IdempotencyStore>, crate::Claim),
    /// Done already: delete the copy without running it.
    Completed,
    /// Another worker holds the claim: try again after a lease.
    Busy,
    Unavailable(String),
    /// The lease could not be kept while the store answered.
    Lost,
}

async fn gate(inner: &Inner, keeper: &LeaseKeeper, key: &str) -> Option<Gate> {
    let store = inner.idempotency.clone()?;
    let extra = inner.timing.period.max(Duration::from_secs(1));
    let sent = Instant::now();
    // The claim outlives the lease it was taken under by `extra`, as every renewal keeps it.
    let ttl = keeper.lease_until().saturating_duration_since(sent) + extra;
    let limit = store_call_limit(inner) * 2;
    let begin = tokio::select! {
        begin = tokio::time::timeout(limit, store.begin(key, ttl)) => begin.unwrap_or_else(|_| {
            Err(crate::IdempotencyError::Unavailable(format!("no answer within {limit:?}")))
        }),
        _ = keeper.lost.cancelled() => return Some(Gate::Lost),
    };
    Some(match begin {
        Ok(Begin::Started(claim)) => {
            keeper.hold_claim(ClaimRenewal {
                store: store.clone(),
                key: key.to_string(),
                claim: claim.clone(),
                extra,
                until: sent + ttl,
            });
            Gate::Run(store, claim)
        }
        Ok(Begin::Completed) => Gate::Completed,
        Ok(Begin::InProgressElsewhere) => Gate::Busy,
        Err(error) => Gate::Unavailable(error.to_string()),
    })
}

/// How a run ended.
struct Ran {
    /// The handler's result, if it returned (a panic is an error); None if it was dropped.
    result: Option<Result<(), HandlerError>>,
    /// Why the keeper had it stopped, if it did.
    loss: Option<Loss>,
    /// The worker's shutdown stopped it.
    stopped: bool,
}

/// Runs the handler until it returns, or until it must stop (the keeper's loss, or the end of
/// the shutdown grace) and its stop grace is over. The run is gone when this returns.
async fn run(inner: &Inner, keeper: &LeaseKeeper, message: Message) -> Ran {
    let cancel = message.cancel.clone();
    let started = Instant::now();
    // A handler that panics making its future, or polling it, has failed.
    let made = std::panic::catch_unwind(AssertUnwindSafe(|| (inner.handler)(message)));
    let work: BoxFuture = match made {
        Ok(work) => work,
        Err(panic) => Box::pin(async move { std::panic::resume_unwind(panic) }),
    };
    let mut run = Box::pin(AssertUnwindSafe(work).catch_unwind());
    let within_grace = |run| tokio::time::timeout(inner.stop_grace, run);
    let result = tokio::select! {
        result = &mut run => Some(result),
        _ = keeper.lost.cancelled() => {
            cancel.cancel();
            within_grace(&mut run).await.ok()
        }
        _ = cancel.cancelled() => within_grace(&mut run).await.ok(),
    };
    drop(run);
    metrics::histogram!("leasehold_worker_processing_seconds")
        .record(started.elapsed().as_secs_f64());
    let result = result.map(|r| {
        r.unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(format!("the handler panicked: {what}").into())
        })
    });
    Ran {
        result,
        loss: keeper.loss(),
        stopped: inner.hard_stop.is_cancelled(),
    }
}

/// Runs one message through the gate, the keeper and the handler; true when it succeeded (or
/// was already done) and was deleted.
async fn run_message(
    inner: &Inner,
    deleter: &Deleter,
    keeper: LeaseKeeper,
    message: Message,
    handle: &str,
) -> bool {
    let counters = &inner.counters;
    let key = (inner.key)(&message);
    let (receive_count, received_at) = (message.receive_count, message.received_at);
    let claim = match gate(inner, &keeper, &key).await {
        None => None,
        Some(Gate::Run(store, claim)) => Some((store, claim)),
        Some(Gate::Completed) => {
            // A duplicate of finished work: delete it without running.
            counters.duplicates_skipped.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("leasehold_worker_duplicates_skipped_total").increment(1);
            let stopped = keeper.stop().await;
            if stopped.loss.is_some() {
                return false;
            }
            return delete(inner, deleter, handle, stopped.until).await;
        }
        Some(Gate::Busy) => {
            // Another worker is on it and may still crash: keep the message, try again once
            // that worker's lease could have ended (never at once: that would only climb the
            // receive count towards the dead-letter queue).
            counters
                .put_back_in_progress
                .fetch_add(1, Ordering::Relaxed);
            let before = keeper.stop().await.touch_before(&inner.timing);
            put_back(inner, handle, inner.timing.lease, received_at, before).await;
            return false;
        }
        Some(Gate::Unavailable(error)) => {
            tracing::warn!(%error, "idempotency store unavailable; not running unguarded");
            counters.failed.fetch_add(1, Ordering::Relaxed);
            let before = keeper.stop().await.touch_before(&inner.timing);
            let delay = retry_delay(inner, receive_count);
            put_back(inner, handle, delay, received_at, before).await;
            return false;
        }
        Some(Gate::Lost) => return false,
    };
    let ran = run(inner, &keeper, message).await;
    // The run is gone. From here the claim is completed or released, no longer renewed.
    keeper.settle_claim();
    let limit = store_call_limit(inner);
    match ran {
        Ran {
            result: Some(Ok(())),
            loss: None,
            ..
        } => {
            counters.succeeded.fetch_add(1, Ordering::Relaxed);
            if let Some((store, claim)) = &claim {
                if !complete(inner, &keeper, store.as_ref(), &key, claim).await {
                    return false;
                }
            }
            let stopped = keeper.stop().await;
            if stopped.loss.is_some() {
                return false;
            }
            delete(inner, deleter, handle, stopped.until).await
        }
        Ran {
            result: Some(Ok(())),
            loss: Some(_),
            ..
        } => {
            // Finished as it was being stopped: the lease may be someone else's, so the
            // message is left alone, but the work is recorded, so the other copy is skipped.
            if let Some((store, claim)) = &claim {
                let completing = store.complete(&key, claim, inner.completed_retention);
                let _ = tokio::time::timeout(limit, completing).await;
            }
            false
        }
        Ran { loss: Some(_), .. } => {
            if let Some((store, claim)) = &claim {
                let _ = tokio::time::timeout(limit, store.release(&key, claim)).await;
            }
            false
        }
        Ran {
            result, stopped, ..
        } => {
            if let Some((store, claim)) = &claim {
                let _ = tokio::time::timeout(limit, store.release(&key, claim)).await;
            }
            let before = keeper.stop().await.touch_before(&inner.timing);
            if stopped {
                release(inner, handle, before).await;
            } else {
                let error = result.map_or_else(
                    || "dropped".into(),
                    |r| r.err().map(|e| e.to_string()).unwrap_or_default(),
                );
                tracing::info!(%error, receive_count, "handler failed; backing off");
                counters.failed.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("leasehold_worker_retries_total").increment(1);
                let delay = retry_delay(inner, receive_count);
                put_back(inner, handle, delay, received_at, before).await;
            }
            false
        }
    }
}

/// Marks the work completed, trying again while the lease is kept (the store may be
/// restarting: a message is deleted only once its work is recorded). False when the claim was
/// taken over, or the lease or the worker's grace ran out first.
async fn complete(
    inner: &Inner,
    keeper: &LeaseKeeper,
    store: &dyn IdempotencyStore,
    key: &str,
    claim: &crate::Claim,
) -> bool {
    let limit = store_call_limit(inner);
    loop {
        let completing = store.complete(key, claim, inner.completed_retention);
        match tokio::time::timeout(limit, completing).await {
            Ok(Ok(true)) => return true,
            Ok(Ok(false)) => {
                tracing::error!(%key, "completed work whose idempotency claim had been taken over: not deleting");
                return false;
            }
            Ok(Err(error)) => {
                tracing::warn!(%key, %error, "could not record the work as done; retrying while the lease is kept")
            }
            Err(_) => {
                tracing::warn!(%key, "recording the work as done timed out; retrying while the lease is kept")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = keeper.lost.cancelled() => return false,
            _ = inner.hard_stop.cancelled() => return false,
        }
    }
}

/// Deletes the message, trying again on a failure while the lease lasts (`until`, the last
/// confirmed end). A delete acknowledged after that end is counted and logged as late: the
/// message may have been handed to another consumer first.
async fn delete(inner: &Inner, deleter: &Deleter, handle: &str, until: Instant) -> bool {
    let counters = &inner.counters;
    while Instant::now() < until {
        match tokio::time::timeout_at(until, deleter.delete(handle.to_string())).await {
            Ok(Ok(())) => return true,
            Ok(Err(error)) => {
                tracing::warn!(%error, "delete failed; retrying while the lease lasts");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(_) => break,
        }
    }
    let late = tokio::time::timeout(inner.timing.lease, deleter.delete(handle.to_string())).await;
    if let Ok(Ok(())) = late {
        counters.late_deletes.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("leasehold_worker_late_deletes_total").increment(1);
        tracing::warn!(
            "deleted after the lease's confirmed end: another consumer may have received it first"
        );
        true
    } else {
        counters.delete_failures.fetch_add(1, Ordering::Relaxed);
        false
    }
}

//! The lease keeper: one task per message that renews its lease every period, from the
//! moment the receive returned, and says when the lease is lost or can grow no more.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::Client;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::errors::is_lost_lease;
use crate::idempotency::{Claim, IdempotencyStore};
use crate::stats::Counters;

/// What the keeper needs to renew an idempotency claim along with the lease.
pub struct ClaimRenewal {
    pub store: Arc<dyn IdempotencyStore>,
    pub key: String,
    pub claim: Claim,
    /// How much longer than the lease the claim lives, so it never lapses first.
    pub margin: Duration,
    /// Set once the handler is done and the claim is being completed or released: from then
    /// on the message's lease is still kept, but the claim is no longer renewed (an extension
    /// racing the completion would find it completed and cry takeover).
    pub settled: Arc<AtomicBool>,
}

pub struct LeaseSpec {
    pub client: Client,
    pub queue_url: String,
    pub receipt_handle: String,
    pub received_at: Instant,
    pub lease: Duration,
    pub period: Duration,
    pub max_total: Duration,
}

pub struct LeaseKeeper {
    stop: CancellationToken,
    /// Cancelled when the lease is lost: another consumer may own the message now.
    pub lost: CancellationToken,
    /// Cancelled when no further extension is possible (the 12-hour ceiling).
    pub ceiling: CancellationToken,
    task: JoinHandle<()>,
}

impl LeaseKeeper {
    pub fn start(
        spec: LeaseSpec,
        renewal: Option<ClaimRenewal>,
        counters: Arc<Counters>,
    ) -> LeaseKeeper {
        let stop = CancellationToken::new();
        let lost = CancellationToken::new();
        let ceiling = CancellationToken::new();
        let task = tokio::spawn(keep(
            spec,
            renewal,
            counters,
            stop.clone(),
            lost.clone(),
            ceiling.clone(),
        ));
        LeaseKeeper {
            stop,
            lost,
            ceiling,
            task,
        }
    }

    /// Stops renewing, and waits until no renewal is under way: after this, nothing changes
    /// the message's visibility but the caller.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

async fn keep(
    spec: LeaseSpec,
    renewal: Option<ClaimRenewal>,
    counters: Arc<Counters>,
    stop: CancellationToken,
    lost: CancellationToken,
    ceiling: CancellationToken,
) {
    let mut deadline = spec.received_at + spec.lease;
    let mut next_beat = spec.received_at + spec.period;
    loop {
        let wake = if ceiling.is_cancelled() {
            deadline
        } else {
            next_beat.min(deadline)
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(wake) => {}
        }
        let now = Instant::now();
        if now >= deadline {
            // Not renewed in time: the message may already be someone else's.
            counters.lost_leases.fetch_add(1, Ordering::Relaxed);
            lost.cancel();
            return;
        }
        let used = now - spec.received_at;
        let room = spec
            .max_total
            .saturating_sub(used)
            .saturating_sub(Duration::from_secs(1));
        let extend_by = spec.lease.min(room);
        if extend_by < spec.lease {
            ceiling.cancel();
        }
        if extend_by < Duration::from_secs(1) {
            continue;
        }
        let seconds = extend_by.as_secs().clamp(1, i32::MAX as u64) as i32;
        let result = spec
            .client
            .change_message_visibility()
            .queue_url(&spec.queue_url)
            .receipt_handle(&spec.receipt_handle)
            .visibility_timeout(seconds)
            .send()
            .await;
        match result {
            Ok(_) => {
                counters.heartbeats.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("leasehold_worker_heartbeats_total").increment(1);
                deadline = now + Duration::from_secs(seconds as u64);
                let unsettled = |r: &&ClaimRenewal| !r.settled.load(Ordering::Acquire);
                if let Some(r) = renewal.as_ref().filter(unsettled) {
                    let ttl = Duration::from_secs(seconds as u64) + r.margin;
                    let extended = r.store.extend(&r.key, &r.claim, ttl).await;
                    if matches!(extended, Ok(false)) && unsettled(&r) {
                        tracing::warn!(key = %r.key, "idempotency claim taken over by another worker");
                    }
                }
            }
            Err(error) if is_lost_lease(&error) => {
                counters.lost_leases.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("leasehold_worker_lost_leases_total").increment(1);
                tracing::warn!(error = ?error, "lease lost: the message has been redelivered");
                lost.cancel();
                return;
            }
            Err(error) => {
                // Transient: the next beat tries again, while the lease still runs.
                counters.heartbeat_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = ?error, "heartbeat failed, will retry");
            }
        }
        next_beat = now + spec.period;
    }
}

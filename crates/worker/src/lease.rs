//! The lease keeper: one task per message, from the moment the receive returned until the
//! worker has decided the message's fate. It renews the lease (and, once taken, the
//! idempotency claim) every period, and it tells the run to stop while there is still time to
//! stop it before anything it holds can end: no two runs of one message overlap.
//!
//! The keeper trusts only what the server confirmed. A renewal of `s` seconds sent at `t`
//! holds the message until at least `t + s`; a renewal that failed, timed out or is still in
//! flight holds nothing. When no renewal is confirmed `margin` before the last confirmed end
//! (the run's stop budget plus slack for the network), the run is told to stop: it then has its
//! stop budget to be gone, and the lease ends after that. Every renewal call is cut off at that
//! same instant, so a stalled connection cannot hold the keeper past it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::Client;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::errors::{is_lost_lease, one_line};
use crate::idempotency::{Claim, IdempotencyStore};
use crate::stats::Counters;

/// How a keeper renews: `Timing::new` derives the parts from the lease and the run's stop
/// budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// What each renewal asks for (whole seconds, as SQS takes them).
    pub lease: Duration,
    /// Between renewals that succeeded.
    pub period: Duration,
    /// How long before the last confirmed end the run is told to stop: its stop budget plus
    /// the slack.
    pub margin: Duration,
    /// No renewal reaches past this long after the receive (SQS's 12 hours).
    pub max_total: Duration,
}

/// Network and timer slack on top of a run's stop budget: a tenth of the lease, at most 1 s.
pub fn slack(lease: Duration) -> Duration {
    (lease / 10).min(Duration::from_secs(1))
}

impl Timing {
    pub fn new(lease: Duration, period: Duration, stop_budget: Duration) -> Timing {
        Timing {
            lease,
            period,
            margin: stop_budget.saturating_add(slack(lease)),
            max_total: crate::MAX_TOTAL_LEASE,
        }
    }

    /// Time left between a renewal falling due and the run having to stop: what one
    /// renewal has to get through. Zero means the settings leave a renewal no chance.
    pub fn room(&self) -> Duration {
        self.lease
            .saturating_sub(self.period.saturating_add(self.margin))
    }

    /// A failed renewal is tried again this soon (while time is left).
    fn retry_delay(&self) -> Duration {
        (self.period / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }
}

/// Why a keeper gave up: the run must stop now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Loss {
    /// The server said the handle no longer holds the message (deleted, or expired on FIFO).
    Refused,
    /// No renewal was confirmed in time: the lease may end before the run would.
    Unconfirmed,
    /// The idempotency claim was taken over, or could not be renewed in time.
    Claim,
    /// The 12-hour ceiling: the lease cannot be renewed any further.
    Ceiling,
}

/// What a renewal of the message's lease can answer.
#[derive(Debug)]
pub enum RenewError {
    /// The handle no longer holds the message.
    Lost(String),
    /// Anything else: the next try may succeed.
    Failed(String),
}

/// The message whose lease is kept: one SQS call in production, a script in tests.
#[async_trait::async_trait]
pub trait Lease: Send + Sync + 'static {
    /// Keeps the message hidden for `seconds` from now.
    async fn renew(&self, seconds: i32) -> Result<(), RenewError>;
}

/// A message on an SQS queue, by its receipt handle.
pub struct SqsLease {
    pub client: Client,
    pub queue_url: String,
    pub receipt_handle: String,
}

#[async_trait::async_trait]
impl Lease for SqsLease {
    async fn renew(&self, seconds: i32) -> Result<(), RenewError> {
        let result = self
            .client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(&self.receipt_handle)
            .visibility_timeout(seconds)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(error) if is_lost_lease(&error) => Err(RenewError::Lost(one_line(&error))),
            Err(error) => Err(RenewError::Failed(one_line(&error))),
        }
    }
}

/// The idempotency claim a run holds, renewed with the lease once it is taken.
pub struct ClaimRenewal {
    pub store: Arc<dyn IdempotencyStore>,
    pub key: String,
    pub claim: Claim,
    /// How much longer than the lease the claim is asked to live, so it never lapses first.
    pub extra: Duration,
    /// Until when the store confirmed the claim (begin sent at `t` with `ttl`: `t + ttl`).
    pub until: Instant,
}

struct State {
    /// The last confirmed end of the lease.
    lease_until: Instant,
    /// The claim and the last confirmed end of it, while it is renewed.
    claim: Option<ClaimRenewal>,
    loss: Option<Loss>,
}

/// A stopped keeper's last word.
#[derive(Clone, Copy, Debug)]
pub struct Stopped {
    /// The last confirmed end of the lease.
    pub until: Instant,
    /// Why the run had to stop, if it had to: the message may be someone else's now.
    pub loss: Option<Loss>,
}

impl Stopped {
    /// Until when the caller may still change the message (delete excepted, which counts
    /// late instead): the lease's confirmed end less the slack for the call to land; None
    /// after a loss, when the message is not to be touched at all.
    pub fn touch_before(&self, timing: &Timing) -> Option<Instant> {
        match self.loss {
            Some(_) => None,
            None => self.until.checked_sub(slack(timing.lease)),
        }
    }
}

pub struct LeaseKeeper {
    state: Arc<Mutex<State>>,
    stop: CancellationToken,
    /// Cancelled when the run must stop (`loss()` says why).
    pub lost: CancellationToken,
    /// Cancelled when no renewal can reach any further (the 12-hour ceiling is near).
    pub ceiling: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl LeaseKeeper {
    /// Starts keeping a lease of `timing.lease` that the server began no later than
    /// `received_at`.
    pub fn start(
        lease: Arc<dyn Lease>,
        timing: Timing,
        received_at: Instant,
        counters: Arc<Counters>,
    ) -> LeaseKeeper {
        let state = Arc::new(Mutex::new(State {
            lease_until: received_at + timing.lease,
            claim: None,
            loss: None,
        }));
        let stop = CancellationToken::new();
        let lost = CancellationToken::new();
        let ceiling = CancellationToken::new();
        let keeping = Keeping {
            lease,
            timing,
            received_at,
            counters,
            state: state.clone(),
            lost: lost.clone(),
            ceiling: ceiling.clone(),
        };
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = keeping.run() => {}
                }
            }
        });
        LeaseKeeper {
            state,
            stop,
            lost,
            ceiling,
            task: Some(task),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a few plain values written whole: a panic cannot leave it half-changed.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// From now on the claim is renewed with the lease, and its end counts like the lease's.
    pub fn hold_claim(&self, claim: ClaimRenewal) {
        self.state().claim = Some(claim);
    }

    /// The run is over and its claim is being completed or released: the claim is no longer
    /// renewed (a renewal racing the completion would find it completed), the lease still is.
    pub fn settle_claim(&self) -> Option<ClaimRenewal> {
        self.state().claim.take()
    }

    /// Why the run had to stop, if it had to.
    pub fn loss(&self) -> Option<Loss> {
        self.state().loss
    }

    /// The last confirmed end of the lease.
    pub fn lease_until(&self) -> Instant {
        self.state().lease_until
    }

    /// Stops renewing and waits until no renewal is under way: after this, nothing changes
    /// the message's visibility but the caller. Returns what the caller may still do.
    pub async fn stop(mut self) -> Stopped {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let state = self.state();
        Stopped {
            until: state.lease_until,
            loss: state.loss,
        }
    }
}

impl Drop for LeaseKeeper {
    /// A keeper never outlives its owner, even one that panicked or was dropped.
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// The keeper's task.
struct Keeping {
    lease: Arc<dyn Lease>,
    timing: Timing,
    received_at: Instant,
    counters: Arc<Counters>,
    state: Arc<Mutex<State>>,
    lost: CancellationToken,
    ceiling: CancellationToken,
}

/// What one round of renewals confirmed.
struct Round {
    lease: Option<Result<(), RenewError>>,
    claim: Option<Result<bool, String>>,
}

impl Keeping {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The instant the run must be told to stop, and what binds it.
    fn stop_at(&self) -> (Instant, Loss) {
        let state = self.state();
        let lease = (state.lease_until, Loss::Unconfirmed);
        let end = match &state.claim {
            Some(claim) if claim.until < state.lease_until => (claim.until, Loss::Claim),
            _ => lease,
        };
        (
            end.0.checked_sub(self.timing.margin).unwrap_or(end.0),
            end.1,
        )
    }

    fn give_up(&self, loss: Loss) {
        self.state().loss = Some(loss);
        self.counters.lost_leases.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("leasehold_worker_lost_leases_total").increment(1);
        self.lost.cancel();
    }

    async fn run(self) {
        // When the next renewal is due; None once the ceiling leaves nothing to renew.
        let mut next = Some(self.received_at + self.timing.period);
        loop {
            let (stop_at, binding) = self.stop_at();
            let now = Instant::now();
            if now >= stop_at {
                let loss = if self.ceiling.is_cancelled() && binding == Loss::Unconfirmed {
                    Loss::Ceiling
                } else {
                    binding
                };
                tracing::warn!(
                    ?loss,
                    "the run must stop: what it holds could end before it would"
                );
                self.give_up(loss);
                return;
            }
            let wake = next.map_or(stop_at, |due| due.min(stop_at));
            if now < wake {
                tokio::time::sleep_until(wake).await;
                continue;
            }
            let Some(seconds) = self.next_extension(now) else {
                next = None;
                continue;
            };
            let round = self
                .renew(seconds, stop_at.min(now + self.timing.period))
                .await;
            next = match self.record(now, seconds, round) {
                Ok(true) => Some(now + self.timing.period),
                Ok(false) => Some(Instant::now() + self.timing.retry_delay()),
                Err(loss) => {
                    self.give_up(loss);
                    return;
                }
            };
        }
    }

    /// How many seconds the next renewal asks for, short of the 12-hour ceiling; None when
    /// the ceiling leaves less than a second.
    fn next_extension(&self, now: Instant) -> Option<i32> {
        let room = self
            .timing
            .max_total
            .saturating_sub(now - self.received_at)
            .saturating_sub(Duration::from_secs(1));
        let extend_by = self.timing.lease.min(room);
        if extend_by < self.timing.lease {
            self.ceiling.cancel();
        }
        (extend_by >= Duration::from_secs(1))
            .then(|| extend_by.as_secs().clamp(1, i32::MAX as u64) as i32)
    }

    /// Renews the lease and the claim side by side, each cut off at `limit`.
    async fn renew(&self, seconds: i32, limit: Instant) -> Round {
        let claim = {
            let state = self.state();
            state.claim.as_ref().map(|c| {
                (
                    c.store.clone(),
                    c.key.clone(),
                    c.claim.clone(),
                    Duration::from_secs(seconds as u64) + c.extra,
                )
            })
        };
        let lease = tokio::time::timeout_at(limit, self.lease.renew(seconds));
        let claim = async {
            let (store, key, claim, ttl) = claim.as_ref()?;
            let extended = tokio::time::timeout_at(limit, store.extend(key, claim, *ttl)).await;
            extended.ok().map(|r| r.map_err(|e| e.to_string()))
        };
        let (lease, claim) = tokio::join!(lease, claim);
        Round {
            lease: lease.ok(),
            claim,
        }
    }

    /// Takes in what a round confirmed: Ok(true) if everything renewed, Ok(false) if a part
    /// should be tried again soon, Err when the run must stop at once.
    fn record(&self, sent: Instant, seconds: i32, round: Round) -> Result<bool, Loss> {
        let mut all = true;
        match round.lease {
            Some(Ok(())) => {
                self.counters.heartbeats.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("leasehold_worker_heartbeats_total").increment(1);
                let mut state = self.state();
                let until = sent + Duration::from_secs(seconds as u64);
                state.lease_until = state.lease_until.max(until);
            }
            Some(Err(RenewError::Lost(error))) => {
                tracing::warn!(%error, "lease lost: the handle no longer holds the message");
                return Err(Loss::Refused);
            }
            Some(Err(RenewError::Failed(error))) => {
                all = false;
                self.counters
                    .heartbeat_failures
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, "heartbeat failed, will retry while the lease lasts");
            }
            None => {
                all = false;
                self.counters
                    .heartbeat_failures
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!("heartbeat unanswered in time, will retry while the lease lasts");
            }
        }
        let mut state = self.state();
        if let Some(claim) = state.claim.as_mut() {
            match round.claim {
                Some(Ok(true)) => {
                    let ttl = Duration::from_secs(seconds as u64) + claim.extra;
                    claim.until = claim.until.max(sent + ttl);
                }
                Some(Ok(false)) => {
                    tracing::warn!(key = %claim.key, "idempotency claim taken over by another worker");
                    return Err(Loss::Claim);
                }
                Some(Err(error)) => {
                    all = false;
                    tracing::warn!(key = %claim.key, %error, "idempotency claim not renewed, will retry while it lasts");
                }
                // Not answered in time, or the claim was taken after this round began.
                None => all = false,
            }
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests;

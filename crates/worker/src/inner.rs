//! What every task of one worker shares: its settings, its counters and the token that stops
//! handlers once the shutdown grace is over. The builder makes it; the receive loop and the
//! per-message tasks read it.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::Client;
use governor::DefaultDirectRateLimiter;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::idempotency::IdempotencyStore;
use crate::lease::Timing;
use crate::message::{Handler, KeyFn};
use crate::stats::Counters;

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

pub(crate) fn whole_seconds(d: Duration) -> i32 {
    d.as_secs().clamp(0, i32::MAX as u64) as i32
}

//! `WorkerBuilder`: the worker's settings, their defaults (derived from the lease), and the
//! check that they leave a heartbeat time to get through before a run must be stopped.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::Client;
use governor::{Quota, RateLimiter};
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::idempotency::IdempotencyStore;
use crate::inner::Inner;
use crate::lease::{slack, Timing};
use crate::message::{idempotency_key, Handler, KeyFn, Message};
use crate::runtime::Worker;
use crate::stats::Counters;

/// Settings that cannot keep the promise that a run stops before its lease can end.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    #[error(
        "a heartbeat every {heartbeat:?}, a stop grace of {stop_grace:?} and {slack:?} of slack \
         leave a heartbeat no time to get through in a {lease:?} lease: a run must be stopped \
         before its lease can end, so lengthen the lease or shorten the heartbeat or the stop grace"
    )]
    NoRoomForHeartbeat {
        lease: Duration,
        heartbeat: Duration,
        stop_grace: Duration,
        slack: Duration,
    },
}

/// The least time a heartbeat must have between falling due and the run having to stop.
const LEAST_ROOM: Duration = Duration::from_millis(100);

pub struct WorkerBuilder {
    client: Client,
    queue_url: String,
    handler: Option<Handler>,
    concurrency: usize,
    rate_per_second: Option<NonZeroU32>,
    lease: Duration,
    heartbeat: Option<Duration>,
    stop_grace: Option<Duration>,
    idempotency: Option<Arc<dyn IdempotencyStore>>,
    completed_retention: Duration,
    key: KeyFn,
    backoff: Backoff,
    fail_fast: bool,
    shutdown: CancellationToken,
    grace: Option<Duration>,
    wait_time_s: i32,
}

/// The default stop grace: a sixth of the lease, at most `cap`.
pub fn default_stop_grace(lease: Duration, cap: Duration) -> Duration {
    (lease / 6).min(cap)
}

impl Worker {
    pub fn builder(client: Client, queue_url: impl Into<String>) -> WorkerBuilder {
        WorkerBuilder::new(client, queue_url.into())
    }
}

impl WorkerBuilder {
    fn new(client: Client, queue_url: String) -> WorkerBuilder {
        WorkerBuilder {
            client,
            queue_url,
            handler: None,
            concurrency: 10,
            rate_per_second: None,
            lease: Duration::from_secs(30),
            heartbeat: None,
            stop_grace: None,
            idempotency: None,
            completed_retention: Duration::from_secs(14 * 24 * 3600),
            key: Arc::new(idempotency_key),
            backoff: Backoff::default(),
            fail_fast: false,
            shutdown: CancellationToken::new(),
            grace: None,
            wait_time_s: 20,
        }
    }

    /// The handler: an async function of the message; Ok deletes it, Err puts it back.
    pub fn handler<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Message) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), crate::HandlerError>> + Send + 'static,
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

    /// The lease each receive asks for and each heartbeat renews, in whole seconds (SQS's
    /// unit), at least one.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Duration::from_secs(lease.as_secs().max(1));
        self
    }

    /// How often to renew (default: a third of the lease).
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = Some(every.max(Duration::from_millis(100)));
        self
    }

    /// How long a handler whose message token is cancelled (lease lost, shutdown past its
    /// grace) has to return before it is dropped (default: a sixth of the lease, at most 1 s).
    /// The keeper cancels that long, plus slack, before the lease could end.
    pub fn stop_grace(mut self, grace: Duration) -> Self {
        self.stop_grace = Some(grace);
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

    fn heartbeat_or_default(&self) -> Duration {
        self.heartbeat
            .unwrap_or(self.lease / 3)
            .max(Duration::from_millis(100))
    }

    fn stop_grace_or_default(&self) -> Duration {
        self.stop_grace
            .unwrap_or_else(|| default_stop_grace(self.lease, Duration::from_secs(1)))
    }

    /// The keeper's timing these settings give.
    pub fn timing(&self) -> Timing {
        Timing::new(
            self.lease,
            self.heartbeat_or_default(),
            self.stop_grace_or_default(),
        )
    }

    /// Whether the settings leave a heartbeat time to get through before a run has to be
    /// stopped (a third of the lease by default): a command line checks this at start.
    pub fn check(&self) -> Result<(), SettingsError> {
        if self.timing().room() >= LEAST_ROOM {
            return Ok(());
        }
        Err(SettingsError::NoRoomForHeartbeat {
            lease: self.lease,
            heartbeat: self.heartbeat_or_default(),
            stop_grace: self.stop_grace_or_default(),
            slack: slack(self.lease),
        })
    }

    /// Builds the worker. Settings that fail `check` are mended with a warning: the heartbeat
    /// goes back to a third of the lease and the stop grace to its default.
    pub fn build(mut self) -> Worker {
        let handler = self
            .handler
            .take()
            .expect("a handler is required: WorkerBuilder::handler");
        if let Err(error) = self.check() {
            tracing::warn!(%error, "using the default heartbeat and stop grace instead");
            self.heartbeat = None;
            self.stop_grace = None;
        }
        let timing = self.timing();
        let stop_grace = self.stop_grace_or_default();
        let grace = self.grace.unwrap_or(self.lease * 2 / 3);
        if grace >= self.lease {
            tracing::warn!(?grace, lease = ?self.lease, "graceful shutdown is not shorter than the lease: drained work may already have been redelivered");
        }
        let fifo = self.queue_url.trim_end_matches('/').ends_with(".fifo");
        let limiter = self
            .rate_per_second
            .map(|r| Arc::new(RateLimiter::direct(Quota::per_second(r))));
        Worker::from_inner(
            Inner {
                client: self.client,
                queue_url: self.queue_url,
                handler,
                concurrency: self.concurrency,
                limiter,
                rate: self.rate_per_second,
                timing,
                stop_grace,
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
            },
            self.shutdown,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> WorkerBuilder {
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .build();
        WorkerBuilder::new(Client::from_conf(config), "http://127.0.0.1:1/q".into())
    }

    #[test]
    fn the_defaults_leave_a_heartbeat_time_for_every_lease() {
        for lease_s in [1, 2, 3, 6, 30, 300, 43_200] {
            let b = builder().lease(Duration::from_secs(lease_s));
            assert_eq!(b.check(), Ok(()), "lease {lease_s} s");
            assert!(
                b.timing().room() >= b.timing().lease / 4,
                "lease {lease_s} s"
            );
        }
    }

    #[test]
    fn a_stop_grace_that_does_not_fit_the_lease_is_refused() {
        let b = builder()
            .lease(Duration::from_secs(3))
            .stop_grace(Duration::from_secs(5));
        let error = b.check().unwrap_err().to_string();
        assert!(error.contains("lengthen the lease"), "{error}");
        let b = builder()
            .lease(Duration::from_secs(6))
            .stop_grace(Duration::from_secs(2));
        assert_eq!(b.check(), Ok(()));
    }
}

//! The keeper against a scripted server under tokio's paused clock: whatever the renewals
//! do (answer, fail, stall, answer late, answer after the keeper stopped waiting), the run is
//! told to stop early enough to be gone before the server's lease ends.

use std::collections::HashMap;
use std::sync::Mutex as StdMutex;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::idempotency::{Begin, IdempotencyError};

/// What one renewal does on the way: `delay_in` until the server applies it, `delay_out`
/// until the answer is back.
#[derive(Clone, Copy, Debug)]
enum Call {
    Answer {
        delay_in: Duration,
        delay_out: Duration,
    },
    Fail(Duration),
    /// Applied by the server, but the answer never comes.
    LostAnswer(Duration),
    /// Never reaches the server, never answers.
    Stall,
    Refuse,
}

/// The server's view of one message: until when it is hidden, and the first instant it was
/// not (when another consumer could have received it).
struct FakeServer {
    start: Instant,
    hidden_until: Instant,
    first_visible: Option<Instant>,
    calls: usize,
}

impl FakeServer {
    /// A message leased at `start` for `lease`, shared with the `Scripted` renewals of it.
    fn leased(start: Instant, lease: Duration) -> Arc<StdMutex<FakeServer>> {
        Arc::new(StdMutex::new(FakeServer {
            start,
            hidden_until: start + lease,
            first_visible: None,
            calls: 0,
        }))
    }

    fn apply(&mut self, now: Instant, seconds: i32) {
        if now >= self.hidden_until && self.first_visible.is_none() {
            self.first_visible = Some(self.hidden_until);
        }
        self.hidden_until = now + Duration::from_secs(seconds as u64);
    }

    /// The first instant up to `end` at which the message was visible, if any.
    fn visible_before(&self, end: Instant) -> Option<Instant> {
        self.first_visible
            .or((self.hidden_until <= end).then_some(self.hidden_until))
    }
}

struct Scripted {
    server: Arc<StdMutex<FakeServer>>,
    script: Box<dyn Fn(usize, Duration) -> Call + Send + Sync>,
}

#[async_trait::async_trait]
impl Lease for Scripted {
    async fn renew(&self, seconds: i32) -> Result<(), RenewError> {
        let (n, since) = {
            let mut server = self.server.lock().unwrap();
            server.calls += 1;
            (server.calls, Instant::now() - server.start)
        };
        match (self.script)(n, since) {
            Call::Answer {
                delay_in,
                delay_out,
            } => {
                tokio::time::sleep(delay_in).await;
                self.server.lock().unwrap().apply(Instant::now(), seconds);
                tokio::time::sleep(delay_out).await;
                Ok(())
            }
            Call::Fail(after) => {
                tokio::time::sleep(after).await;
                Err(RenewError::Failed("503".into()))
            }
            Call::LostAnswer(delay_in) => {
                // On its way whatever the keeper does: it may land after the keeper gave up.
                let server = self.server.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay_in).await;
                    server.lock().unwrap().apply(Instant::now(), seconds);
                });
                std::future::pending().await
            }
            Call::Stall => std::future::pending().await,
            Call::Refuse => Err(RenewError::Lost("ReceiptHandleIsInvalid".into())),
        }
    }
}

fn quick() -> Call {
    Call::Answer {
        delay_in: Duration::from_millis(5),
        delay_out: Duration::from_millis(5),
    }
}

const STOP_BUDGET: Duration = Duration::from_millis(700);

fn timing(lease_s: u64) -> Timing {
    let lease = Duration::from_secs(lease_s);
    Timing::new(lease, lease / 3, STOP_BUDGET)
}

/// Runs a keeper for `horizon` against the script; returns the loss (and when it came), the
/// counters, and the first instant the server let the message be seen by another consumer
/// while the run could still be alive.
async fn keep(
    timing: Timing,
    budget: Duration,
    horizon: Duration,
    script: impl Fn(usize, Duration) -> Call + Send + Sync + 'static,
) -> (Option<(Loss, Duration)>, Arc<Counters>, Option<Duration>) {
    let start = Instant::now();
    let server = FakeServer::leased(start, timing.lease);
    let counters = Arc::new(Counters::default());
    let lease = Arc::new(Scripted {
        server: server.clone(),
        script: Box::new(script),
    });
    let keeper = LeaseKeeper::start(lease, timing, start, counters.clone());
    let lost = tokio::select! {
        _ = keeper.lost.cancelled() => Some((keeper.loss().unwrap(), start.elapsed())),
        _ = tokio::time::sleep(horizon) => None,
    };
    // The run is gone at the latest a stop budget after it was told to stop.
    let run_gone = match lost {
        Some((_, at)) => start + at + budget,
        None => start + horizon,
    };
    keeper.stop().await;
    let overlap = server
        .lock()
        .unwrap()
        .visible_before(run_gone)
        .filter(|&visible| visible < run_gone)
        .map(|visible| visible - start);
    (lost, counters, overlap)
}

#[tokio::test(start_paused = true)]
async fn a_healthy_lease_is_renewed_every_period_and_never_lost() {
    let (lost, counters, overlap) =
        keep(timing(3), STOP_BUDGET, Duration::from_secs(60), |_, _| {
            quick()
        })
        .await;
    assert_eq!(lost, None);
    assert_eq!(overlap, None);
    let beats = counters.heartbeats.load(Ordering::Relaxed);
    assert!((58..=60).contains(&beats), "one beat a second: {beats}");
}

#[tokio::test(start_paused = true)]
async fn a_stalled_renewal_stops_the_run_a_margin_before_the_lease_ends() {
    // The first two renewals answer; from the third on, nothing does.
    let (lost, _, overlap) = keep(timing(3), STOP_BUDGET, Duration::from_secs(60), |n, _| {
        if n <= 2 {
            quick()
        } else {
            Call::Stall
        }
    })
    .await;
    let (loss, at) = lost.expect("the run was told to stop");
    assert_eq!(loss, Loss::Unconfirmed);
    // Confirmed until 2 s + 3 s; told to stop a margin (0.7 s + 0.3 s) before.
    assert!(
        at >= Duration::from_millis(3_900) && at <= Duration::from_millis(4_100),
        "{at:?}"
    );
    assert_eq!(overlap, None, "the run was gone before the lease ended");
}

#[tokio::test(start_paused = true)]
async fn failed_renewals_are_retried_soon_and_one_success_keeps_the_lease() {
    // Every renewal fails at first, then one in four gets through.
    let (lost, counters, overlap) =
        keep(timing(3), STOP_BUDGET, Duration::from_secs(30), |n, _| {
            if n % 4 == 0 {
                quick()
            } else {
                Call::Fail(Duration::from_millis(10))
            }
        })
        .await;
    assert_eq!(lost, None, "retries got through before the margin");
    assert_eq!(overlap, None);
    assert!(counters.heartbeat_failures.load(Ordering::Relaxed) > 10);
}

#[tokio::test(start_paused = true)]
async fn a_refused_renewal_stops_the_run_at_once() {
    let (lost, _, overlap) = keep(timing(3), STOP_BUDGET, Duration::from_secs(30), |n, _| {
        if n == 1 {
            Call::Refuse
        } else {
            quick()
        }
    })
    .await;
    assert_eq!(lost, Some((Loss::Refused, Duration::from_secs(1))));
    assert_eq!(overlap, None);
}

#[tokio::test(start_paused = true)]
async fn the_ceiling_stops_the_run_before_twelve_hours_from_the_receive() {
    let mut timing = timing(3);
    timing.max_total = Duration::from_secs(20);
    let (lost, _, overlap) =
        keep(timing, STOP_BUDGET, Duration::from_secs(60), |_, _| quick()).await;
    let (loss, at) = lost.unwrap();
    assert_eq!(loss, Loss::Ceiling);
    assert!(at < Duration::from_secs(20), "{at:?}");
    assert_eq!(overlap, None);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_keeper_renews_nothing_more() {
    let start = Instant::now();
    let server = FakeServer::leased(start, Duration::from_secs(3));
    let lease = Arc::new(Scripted {
        server: server.clone(),
        script: Box::new(|_, _| quick()),
    });
    let keeper = LeaseKeeper::start(lease, timing(3), start, Arc::default());
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    drop(keeper);
    let calls = server.lock().unwrap().calls;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(server.lock().unwrap().calls, calls);
}

/// A claim store whose renewals answer as told.
struct ScriptedClaims {
    extend: Box<dyn Fn(usize) -> Option<bool> + Send + Sync>,
    calls: StdMutex<usize>,
}

#[async_trait::async_trait]
impl IdempotencyStore for ScriptedClaims {
    async fn begin(&self, _: &str, _: Duration) -> Result<Begin, IdempotencyError> {
        Ok(Begin::Started(Claim::new()))
    }
    async fn extend(&self, _: &str, _: &Claim, _: Duration) -> Result<bool, IdempotencyError> {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            *calls += 1;
            *calls
        };
        match (self.extend)(n) {
            Some(answer) => Ok(answer),
            None => std::future::pending().await,
        }
    }
    async fn complete(&self, _: &str, _: &Claim, _: Duration) -> Result<bool, IdempotencyError> {
        Ok(true)
    }
    async fn release(&self, _: &str, _: &Claim) -> Result<(), IdempotencyError> {
        Ok(())
    }
    async fn is_completed(&self, _: &str) -> Result<bool, IdempotencyError> {
        Ok(false)
    }
}

async fn keep_claim(
    extend: impl Fn(usize) -> Option<bool> + Send + Sync + 'static,
) -> (Loss, Duration) {
    let start = Instant::now();
    let server = FakeServer::leased(start, Duration::from_secs(3));
    let lease = Arc::new(Scripted {
        server,
        script: Box::new(|_, _| quick()),
    });
    let keeper = LeaseKeeper::start(lease, timing(3), start, Arc::default());
    keeper.hold_claim(ClaimRenewal {
        store: Arc::new(ScriptedClaims {
            extend: Box::new(extend),
            calls: StdMutex::new(0),
        }),
        key: "k".into(),
        claim: Claim::new(),
        extra: Duration::from_secs(1),
        until: start + Duration::from_secs(4),
    });
    tokio::time::timeout(Duration::from_secs(60), keeper.lost.cancelled())
        .await
        .expect("the run was told to stop");
    (keeper.loss().unwrap(), start.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_claim_taken_over_stops_the_run_at_the_next_beat() {
    let (loss, at) = keep_claim(|n| Some(n < 3)).await;
    assert_eq!(loss, Loss::Claim);
    assert!(
        at >= Duration::from_secs(3) && at < Duration::from_millis(3_100),
        "{at:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_claim_that_cannot_be_renewed_stops_the_run_before_it_lapses() {
    // Renewed at 1 s (until 1 + 3 + 1 s), then the store stalls.
    let (loss, at) = keep_claim(|n| (n == 1).then_some(true)).await;
    assert_eq!(loss, Loss::Claim);
    // The lease goes on being renewed; the claim's end (5 s) less the margin (1 s) binds.
    assert!(
        at >= Duration::from_millis(3_900) && at <= Duration::from_secs(4),
        "{at:?}"
    );
}

/// Random renewal behaviour, 300 seeded runs: the run is never alive while the server would
/// hand the message to another consumer.
#[tokio::test(start_paused = true)]
async fn under_any_mix_of_delays_failures_and_stalls_the_run_ends_before_the_lease() {
    let mut endings: HashMap<Option<Loss>, u32> = HashMap::new();
    for seed in 0..300u64 {
        let lease_s = 1 + seed % 6;
        let calls: Vec<Call> = {
            let mut rng = StdRng::seed_from_u64(seed);
            let scale = lease_s as f64;
            // One seed in three has a good network: calls answer at once or fail at once.
            let good = seed % 3 == 0;
            (0..200)
                .map(|_| {
                    let delay = |rng: &mut StdRng| {
                        Duration::from_secs_f64(rng.random_range(0.0..scale * 0.6))
                    };
                    let roll = rng.random_range(0..50);
                    if good {
                        return if roll < 45 {
                            quick()
                        } else {
                            Call::Fail(Duration::ZERO)
                        };
                    }
                    match roll {
                        0..=24 => Call::Answer {
                            delay_in: delay(&mut rng) / 4,
                            delay_out: delay(&mut rng) / 4,
                        },
                        25..=31 => Call::Answer {
                            delay_in: delay(&mut rng),
                            delay_out: delay(&mut rng),
                        },
                        32..=38 => Call::Fail(delay(&mut rng) / 8),
                        39..=43 => Call::LostAnswer(delay(&mut rng) * 2),
                        44..=48 => Call::Stall,
                        _ => Call::Refuse,
                    }
                })
                .collect()
        };
        let lease = Duration::from_secs(lease_s);
        let budget = STOP_BUDGET.min(lease / 6);
        let timing = Timing::new(lease, lease / 3, budget);
        let horizon = timing.lease * 20;
        let script = move |n: usize, _| calls[(n - 1) % calls.len()];
        let (lost, _, overlap) = keep(timing, budget, horizon, script).await;
        assert_eq!(overlap, None, "seed {seed}: lost {lost:?}");
        *endings.entry(lost.map(|(loss, _)| loss)).or_default() += 1;
    }
    // The mix reaches every way a keeper can end, each many times.
    for ending in [None, Some(Loss::Unconfirmed), Some(Loss::Refused)] {
        assert!(
            endings.get(&ending).copied().unwrap_or(0) >= 10,
            "{endings:?}"
        );
    }
}

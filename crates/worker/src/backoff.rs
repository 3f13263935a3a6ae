//! Backoff through ChangeMessageVisibility: a failed message comes back after a delay that
//! grows with its receive count, with jitter, capped, so retries do not hammer a failing
//! downstream all at once.

use std::time::Duration;

/// The shortest backoff, in seconds.
pub const MIN_DELAY_S: u64 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(5),
            cap: Duration::from_secs(900),
        }
    }
}

impl Backoff {
    /// The delay before the `receive_count`-th delivery is retried, in whole seconds:
    /// base x 2^(n-1), capped, then jittered into its upper half; never under one second,
    /// which would redeliver at once (`fail_fast` is the way to ask for that).
    pub fn delay(&self, receive_count: u32) -> Duration {
        let exponent = receive_count.saturating_sub(1).min(20);
        let full = self
            .base
            .saturating_mul(1 << exponent)
            .min(self.cap)
            .as_secs()
            .max(1);
        let half = full / 2;
        Duration::from_secs((half + rand::random_range(0..=full - half)).max(MIN_DELAY_S))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_with_the_receive_count_within_jitter_and_cap() {
        let b = Backoff {
            base: Duration::from_secs(4),
            cap: Duration::from_secs(60),
        };
        for _ in 0..100 {
            assert!((2..=4).contains(&b.delay(1).as_secs()));
            assert!((4..=8).contains(&b.delay(2).as_secs()));
            assert!((30..=60).contains(&b.delay(10).as_secs()));
            assert!((30..=60).contains(&b.delay(u32::MAX).as_secs()));
        }
    }

    #[test]
    fn a_jittered_delay_is_never_under_one_second() {
        for base in [0, 1] {
            let b = Backoff {
                base: Duration::from_secs(base),
                cap: Duration::from_secs(1),
            };
            assert!((0..1_000).all(|_| b.delay(1) == Duration::from_secs(1)));
        }
    }
}

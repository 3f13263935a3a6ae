//! The server's clock: wall time that never runs backwards, plus a jump offset for time travel.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use leasehold_engine::Clock;

#[derive(Debug, Default)]
pub struct WallClock {
    offset_ms: AtomicU64,
    last_ms: AtomicU64,
}

/// The furthest time travel may take the clock in all: a century, far past any lease,
/// delay or retention, and far from where millisecond arithmetic could overflow.
pub const MAX_TRAVEL_MS: u64 = 100 * 365 * 24 * 3_600_000;

impl WallClock {
    /// Moves the clock forward; it keeps running from there. Refused, changing nothing, when
    /// the jumps would add up to more than `MAX_TRAVEL_MS`.
    pub fn advance_ms(&self, ms: u64) -> Result<(), TravelTooFar> {
        self.offset_ms
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |offset| {
                offset
                    .checked_add(ms)
                    .filter(|total| *total <= MAX_TRAVEL_MS)
            })
            .map(|_| ())
            .map_err(|_| TravelTooFar)
    }
}

/// A time-travel jump beyond `MAX_TRAVEL_MS` in all.
#[derive(Debug, PartialEq, Eq)]
pub struct TravelTooFar;

impl Clock for WallClock {
    fn now_ms(&self) -> u64 {
        let system = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let now = system + self.offset_ms.load(Ordering::SeqCst);
        // A system clock stepped backwards must not make leases or delays run backwards.
        let previous = self.last_ms.fetch_max(now, Ordering::SeqCst);
        previous.max(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advancing_moves_now_forward_by_at_least_the_jump() {
        let clock = WallClock::default();
        let before = clock.now_ms();
        clock.advance_ms(3_600_000).unwrap();
        assert!(clock.now_ms() >= before + 3_600_000);
    }

    #[test]
    fn a_jump_past_a_century_in_all_is_refused_and_moves_nothing() {
        let clock = WallClock::default();
        assert_eq!(clock.advance_ms(u64::MAX), Err(TravelTooFar));
        clock.advance_ms(MAX_TRAVEL_MS - 1).unwrap();
        assert_eq!(clock.advance_ms(2), Err(TravelTooFar));
        assert_eq!(clock.offset_ms.load(Ordering::SeqCst), MAX_TRAVEL_MS - 1);
    }
}

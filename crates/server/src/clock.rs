//! The server's clock: wall time that never runs backwards, plus a jump offset for time travel.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use leasehold_engine::Clock;

#[derive(Debug, Default)]
pub struct WallClock {
    offset_ms: AtomicU64,
    last_ms: AtomicU64,
}

impl WallClock {
    /// Moves the clock forward; it keeps running from there.
    pub fn advance_ms(&self, ms: u64) {
        self.offset_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

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
        clock.advance_ms(3_600_000);
        assert!(clock.now_ms() >= before + 3_600_000);
    }
}

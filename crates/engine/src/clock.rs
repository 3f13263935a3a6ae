//! Time, injected: the engine asks a `Clock` for "now" and never reads the wall clock itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Milliseconds since the Unix epoch, as the engine sees them.
pub type Millis = u64;

/// The engine's only source of time. Implementations must never go backwards.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> Millis;
}

/// A clock that moves only when told to: tests and the simulator drive it.
#[derive(Clone, Debug)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    pub fn new(start_ms: Millis) -> Self {
        ManualClock {
            now: Arc::new(AtomicU64::new(start_ms)),
        }
    }

    pub fn advance_ms(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    pub fn advance_secs(&self, secs: u64) {
        self.advance_ms(secs * 1000);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }
}

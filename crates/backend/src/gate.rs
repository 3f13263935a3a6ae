//! Whether new messages are refused for want of something (memory, disk), as measurements
//! come in: the decision, and one log line each time it changes, never one per request.

use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug)]
pub struct SendGate {
    /// What runs short, for the log: "memory", "disk space".
    what: &'static str,
    refusing: AtomicBool,
}

impl SendGate {
    pub const fn new(what: &'static str) -> SendGate {
        SendGate {
            what,
            refusing: AtomicBool::new(false),
        }
    }

    /// Takes the latest decision; `detail` (the measurement against its bound) goes in the
    /// log line when the decision changes.
    pub fn decide(&self, refuse: bool, detail: impl FnOnce() -> String) {
        if self.refusing.swap(refuse, Ordering::Relaxed) == refuse {
            return;
        }
        let (what, detail) = (self.what, detail());
        if refuse {
            tracing::warn!("{what} runs short ({detail}): sends are refused with RequestThrottled until it recovers; receives and deletes go on");
        } else {
            tracing::info!("{what} has recovered ({detail}): sends are accepted again");
        }
    }

    pub fn is_refusing(&self) -> bool {
        self.refusing.load(Ordering::Relaxed)
    }
}

//! The in-flight quota: how many messages one queue holds leased at once, all its stripes
//! together. AWS stops at about 120,000: past it a standard queue's short poll is refused with
//! OverLimit and a long poll gets nothing, and a FIFO queue hands out nothing more.
//!
//! Every stripe of a queue shares one count. A receive reserves a place in it before it
//! leases (`try_reserve`, a compare-and-swap), so stripes leasing side by side under their
//! own locks never pass the quota together; every other way into or out of a lease (an
//! expiry, a delete, a release, a restore, a purge) moves the count as it moves the stripe's
//! own, and a visibility change keeps its lease's place throughout. A visibility change that
//! hides again a message whose lease already ran out (where the lease mode allows it) is
//! counted without a reservation: its consumer holds the message already, so it may take the
//! queue past the quota by such messages, and the next receives wait for room.

#[cfg(feature = "shuttle")]
use shuttle::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(feature = "shuttle"))]
use std::sync::atomic::{AtomicUsize, Ordering};

/// AWS's quota of messages in flight on one queue: the default of `--max-in-flight-per-queue`.
pub const MAX_IN_FLIGHT_PER_QUEUE: usize = 120_000;

/// A queue's messages in flight, over all its stripes.
#[derive(Debug, Default)]
pub(crate) struct InFlightCount(AtomicUsize);

impl InFlightCount {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    pub fn add(&self, n: usize) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn sub(&self, n: usize) {
        self.0.fetch_sub(n, Ordering::Relaxed);
    }

    /// Counts one lease more if the count stays within `limit`; false (and nothing counted)
    /// when the queue is at its quota.
    pub fn try_reserve(&self, limit: usize) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_past_the_limit_counts_nothing() {
        let count = InFlightCount::default();
        assert!(count.try_reserve(2));
        assert!(count.try_reserve(2));
        assert!(!count.try_reserve(2));
        assert_eq!(count.get(), 2);
        count.sub(1);
        assert!(count.try_reserve(2));
        assert_eq!(count.get(), 2);
    }
}

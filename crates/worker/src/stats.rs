//! What a worker did, counted: the live `Counters` the runtime and the lease keeper bump,
//! and the `WorkerStats` snapshot callers read. Its own module, so that the lease keeper does
//! not import the runtime that starts it.

use std::sync::atomic::{AtomicU64, Ordering};

/// What the worker did, counted.
#[derive(Default, Debug)]
pub struct Counters {
    pub received: AtomicU64,
    pub succeeded: AtomicU64,
    pub failed: AtomicU64,
    pub duplicates_skipped: AtomicU64,
    pub put_back_in_progress: AtomicU64,
    pub lost_leases: AtomicU64,
    pub heartbeats: AtomicU64,
    pub heartbeat_failures: AtomicU64,
    pub released_on_shutdown: AtomicU64,
    pub delete_failures: AtomicU64,
    /// Deletes acknowledged after the lease's last confirmed end.
    pub late_deletes: AtomicU64,
}

/// A snapshot of the counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WorkerStats {
    pub received: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub duplicates_skipped: u64,
    pub put_back_in_progress: u64,
    pub lost_leases: u64,
    pub heartbeats: u64,
    pub heartbeat_failures: u64,
    pub released_on_shutdown: u64,
    pub delete_failures: u64,
    pub late_deletes: u64,
}

impl Counters {
    pub fn snapshot(&self) -> WorkerStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WorkerStats {
            received: get(&self.received),
            succeeded: get(&self.succeeded),
            failed: get(&self.failed),
            duplicates_skipped: get(&self.duplicates_skipped),
            put_back_in_progress: get(&self.put_back_in_progress),
            lost_leases: get(&self.lost_leases),
            heartbeats: get(&self.heartbeats),
            heartbeat_failures: get(&self.heartbeat_failures),
            released_on_shutdown: get(&self.released_on_shutdown),
            delete_failures: get(&self.delete_failures),
            late_deletes: get(&self.late_deletes),
        }
    }
}

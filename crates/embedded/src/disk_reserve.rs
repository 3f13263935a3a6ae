//! The disk reserve of a durable embedded backend: below it sends are refused (throttled)
//! while receives, deletes and visibility changes go on, so consumers can drain the queue.

use std::sync::atomic::{AtomicU64, Ordering};

use leasehold_backend::SendGate;
use leasehold_engine::MOVE_BATCH_STORED;

/// What a message adds to the store besides its body and attributes (its record, its keys,
/// the b-tree's share), as sends are counted against the disk reserve between measurements.
pub(crate) const STORED_MESSAGE_OVERHEAD: u64 = 512;

/// The disk reserve: whether the store's file system has room for new messages.
pub(crate) struct DiskReserve {
    pub(crate) reserve: u64,
    /// Bytes the store's writes may still use, as last measured (`u64::MAX` until then).
    available: AtomicU64,
    /// Bytes of sends taken since that measurement: space is measured ten times a second,
    /// and a burst of big sends in between must not pass the reserve together.
    taken_since: AtomicU64,
    gate: SendGate,
}

impl DiskReserve {
    /// No reserve yet, and nothing measured: every send passes until the first measurement.
    pub(crate) fn unmeasured() -> DiskReserve {
        DiskReserve {
            reserve: 0,
            available: AtomicU64::new(u64::MAX),
            taken_since: AtomicU64::new(0),
            gate: SendGate::new("disk space"),
        }
    }

    /// Takes a measurement. Sends taken since the last one and already written are in it;
    /// those still on their way to the disk are not (a few milliseconds' worth, inside the
    /// reserve's margin).
    pub(crate) fn measured(&self, available: u64) {
        self.available.store(available, Ordering::Relaxed);
        self.taken_since.store(0, Ordering::Relaxed);
        self.gate.decide(available < self.reserve, || {
            format!(
                "{} MiB left for writes, reserve {} MiB",
                available >> 20,
                self.reserve >> 20
            )
        });
    }

    /// Counts a send of `bytes` against what the last measurement left, and refuses it when
    /// the reserve would be reached (or already is). Only the measurements open and close the
    /// gate (its log line, `/ready`, held move tasks), so it does not flap between them.
    pub(crate) fn take(&self, bytes: u64) -> Option<String> {
        if let Some(why) = self.refusal() {
            return Some(why);
        }
        let taken = self.taken_since.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let left = self.available.load(Ordering::Relaxed).saturating_sub(taken);
        if left >= self.reserve {
            return None;
        }
        // Refused: it takes nothing (saturating: a measurement may have reset the count
        // since this send added to it).
        let _ = self
            .taken_since
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |taken| {
                Some(taken.saturating_sub(bytes))
            });
        Some(format!(
            "The data directory's file system is about to go below its reserve of {} MiB: sends are refused until space returns.",
            self.reserve >> 20
        ))
    }

    /// How many messages move tasks may move in one write: none below the reserve, else as
    /// many bodies of the largest size (1 MiB) as the room above it holds, at most a round's.
    pub(crate) fn room_for_moves(&self) -> u64 {
        if self.gate.is_refusing() {
            return 0;
        }
        let room = self
            .available
            .load(Ordering::Relaxed)
            .saturating_sub(self.taken_since.load(Ordering::Relaxed))
            .saturating_sub(self.reserve);
        (room / u64::from(leasehold_engine::MAX_MESSAGE_SIZE)).min(MOVE_BATCH_STORED)
    }

    /// Why sends are refused now, if they are.
    pub(crate) fn refusal(&self) -> Option<String> {
        self.gate.is_refusing().then(|| {
            format!(
                "The data directory's file system has {} MiB left for writes, below its reserve of {} MiB: sends are refused until space returns.",
                self.available.load(Ordering::Relaxed) >> 20,
                self.reserve >> 20
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 46, defect 2: space is measured ten times a second; between two measurements a
    /// burst of big sends passed the reserve together. Each send now counts against what the
    /// last measurement left.
    #[test]
    fn sends_between_two_measurements_count_against_the_reserve() {
        let disk = DiskReserve {
            reserve: 64 << 20,
            available: AtomicU64::new(u64::MAX),
            taken_since: AtomicU64::new(0),
            gate: SendGate::new("disk space"),
        };
        disk.measured(100 << 20);
        for _ in 0..3 {
            assert_eq!(disk.take(10 << 20), None);
        }
        assert!(disk.take(10 << 20).is_some(), "a send past the reserve");
        // A refused send took nothing: a small one still fits; the gate stays open.
        assert_eq!(disk.take(1 << 20), None);
        assert!(!disk.gate.is_refusing());
        // The next measurement decides, from what it finds.
        disk.measured(60 << 20);
        assert!(disk.take(1).is_some());
        disk.measured(100 << 20);
        assert_eq!(disk.take(1 << 20), None);
    }
}

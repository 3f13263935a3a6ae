//! A queue's counters, in one type: what the engine counts, what the store writes in a queue's
//! record, what PostgreSQL adds up across servers (`leasehold_queue_stats`, a column each) and
//! what the lease report shows. A counter is added here, once, with its name.

/// What the engine has counted about a queue's leases since it was created.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub sent: u64,
    pub received: u64,
    pub deleted: u64,
    /// ReceiveMessage requests that returned nothing (a long poll counts once, at its end).
    pub empty_receives: u64,
    /// Leases that ran out without a delete: the message became receivable again.
    pub leases_expired: u64,
    /// Deletes whose lease had already expired: proof of duplicate work.
    pub late_deletes: u64,
    /// Messages moved to the dead-letter queue after maxReceiveCount receives.
    pub dead_lettered: u64,
    /// Of those, messages a consumer had finished and deleted late: successful work dumped
    /// into the dead-letter queue (the "DLQ mirage").
    pub dead_lettered_after_late_delete: u64,
    /// Deletes that arrived while their lease was live.
    pub deleted_within_lease: u64,
    /// ChangeMessageVisibility to 0: released for another consumer at once.
    pub released_early: u64,
    /// ChangeMessageVisibility above 0 on a live lease: heartbeats.
    pub extensions: u64,
    /// Deletes whose message was already gone: usually another consumer's copy of the same
    /// work, deleted first (on AWS-mode standard queues a late delete still removes).
    pub repeat_deletes: u64,
}

/// How many counters a queue keeps.
pub const COUNTERS: usize = 12;

impl QueueStats {
    /// Every counter's name, in the order of `values` (and of a store's record, and of
    /// PostgreSQL's columns).
    pub const NAMES: [&'static str; COUNTERS] = [
        "sent",
        "received",
        "deleted",
        "empty_receives",
        "leases_expired",
        "late_deletes",
        "dead_lettered",
        "dead_lettered_after_late_delete",
        "deleted_within_lease",
        "released_early",
        "extensions",
        "repeat_deletes",
    ];

    /// Every counter, in the order of `NAMES`.
    pub fn values(&self) -> [u64; COUNTERS] {
        let mut copy = self.clone();
        copy.values_mut().map(|v| *v)
    }

    /// Adds `other`'s counts to these: a queue's stripes' counters make the queue's.
    pub fn add(&mut self, other: &QueueStats) {
        for (mine, theirs) in self.values_mut().into_iter().zip(other.values()) {
            *mine = mine.saturating_add(theirs);
        }
    }

    /// Every counter, to change, in the order of `NAMES`.
    pub fn values_mut(&mut self) -> [&mut u64; COUNTERS] {
        [
            &mut self.sent,
            &mut self.received,
            &mut self.deleted,
            &mut self.empty_receives,
            &mut self.leases_expired,
            &mut self.late_deletes,
            &mut self.dead_lettered,
            &mut self.dead_lettered_after_late_delete,
            &mut self.deleted_within_lease,
            &mut self.released_early,
            &mut self.extensions,
            &mut self.repeat_deletes,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_come_back_in_the_order_of_their_names() {
        let mut stats = QueueStats::default();
        for (i, counter) in stats.values_mut().into_iter().enumerate() {
            *counter = i as u64 + 1;
        }
        assert_eq!(stats.values(), std::array::from_fn(|i| i as u64 + 1));
        assert_eq!(stats.sent, 1);
        assert_eq!(stats.repeat_deletes, 12);
    }
}

//! What only grows on `/metrics` (the counters, the hold histogram, finished messages by
//! receive count), kept growing when queues go: a queue deleted (or deleted and made again)
//! takes its counts out of the sum, which Prometheus would read as the server restarting and
//! count the whole remaining total again. The last counts each queue showed are kept from one
//! scrape to the next, and a queue's that went (or fell) are added to those of queues gone.
//! What a queue counted between its last scrape and its deletion is not seen.

use std::collections::{BTreeMap, HashMap};

use leasehold_engine::{LeaseReport, HOLD_BUCKETS_MS};

use super::families::COUNTERS;

/// Finished messages delivered more often than this are counted together, under
/// `receive_count="11+"`, so the series stay few.
pub(super) const RECEIVE_COUNT_SERIES: u32 = 10;

/// The hold histogram's buckets: `HOLD_BUCKETS_MS`, then the rest.
const HOLD_COUNTS: usize = HOLD_BUCKETS_MS.len() + 1;

/// One queue's (or many queues') growing figures: in arrays, so a scrape of many queues
/// allocates nothing for each (but for a queue that finished messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Grows {
    /// Each of `COUNTERS`.
    pub counters: [u64; COUNTERS.len()],
    /// The hold histogram's buckets and its sum.
    pub hold_counts: [u64; HOLD_COUNTS],
    pub hold_sum_ms: u64,
    /// Finished messages by receive count, those delivered more than `RECEIVE_COUNT_SERIES`
    /// times under `RECEIVE_COUNT_SERIES + 1`.
    pub by_receives: BTreeMap<u32, u64>,
}

impl Grows {
    pub fn zero() -> Grows {
        Grows {
            counters: [0; COUNTERS.len()],
            hold_counts: [0; HOLD_COUNTS],
            hold_sum_ms: 0,
            by_receives: BTreeMap::new(),
        }
    }

    pub fn of(r: &LeaseReport) -> Grows {
        let mut grows = Grows::zero();
        for (total, c) in grows.counters.iter_mut().zip(COUNTERS) {
            *total = (c.of)(r);
        }
        if let Some(buckets) = &r.hold_buckets {
            for (total, count) in grows.hold_counts.iter_mut().zip(&buckets.counts) {
                *total = *count;
            }
            grows.hold_sum_ms = buckets.sum_ms;
        }
        for (count, messages) in &r.receive_count_histogram {
            let bucket = (*count).clamp(1, RECEIVE_COUNT_SERIES + 1);
            *grows.by_receives.entry(bucket).or_default() += messages;
        }
        grows
    }

    pub fn add(&mut self, other: &Grows) {
        let pairs = self.counters.iter_mut().zip(&other.counters);
        for (total, value) in pairs.chain(self.hold_counts.iter_mut().zip(&other.hold_counts)) {
            *total = total.saturating_add(*value);
        }
        self.hold_sum_ms = self.hold_sum_ms.saturating_add(other.hold_sum_ms);
        for (count, messages) in &other.by_receives {
            let total = self.by_receives.entry(*count).or_default();
            *total = total.saturating_add(*messages);
        }
    }

    fn is_zero(&self) -> bool {
        self.counters
            .iter()
            .chain(&self.hold_counts)
            .all(|c| *c == 0)
            && self.hold_sum_ms == 0
            && self.by_receives.is_empty()
    }

    /// Whether any figure is below `earlier`'s: the queue was made again since.
    fn fell_below(&self, earlier: &Grows) -> bool {
        let pairs = self.counters.iter().zip(&earlier.counters);
        let mut pairs = pairs.chain(self.hold_counts.iter().zip(&earlier.hold_counts));
        pairs.any(|(now, then)| now < then)
            || self.hold_sum_ms < earlier.hold_sum_ms
            || earlier
                .by_receives
                .iter()
                .any(|(count, then)| self.by_receives.get(count).copied().unwrap_or(0) < *then)
    }
}

/// The server's record of what queues counted, kept between scrapes of `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct Retired {
    /// Each queue's counts at the last scrape (none for a queue that counted nothing).
    last: HashMap<String, Grows>,
    /// The counts of queues gone since the server started.
    gone: Option<Grows>,
}

impl Retired {
    /// Notes this scrape's counts of queue `key` in `seen`, and retires the last scrape's if
    /// these fell below them.
    pub(super) fn seen(&mut self, seen: &mut HashMap<String, Grows>, key: String, now: Grows) {
        if let Some(earlier) = self.last.remove(&key) {
            if now.fell_below(&earlier) {
                self.retire(&earlier);
            }
        }
        if !now.is_zero() {
            seen.insert(key, now);
        }
    }

    fn retire(&mut self, counts: &Grows) {
        self.gone.get_or_insert_with(Grows::zero).add(counts);
    }

    /// Ends a scrape: the queues not seen in it are gone; answers the counts of every queue
    /// gone so far.
    pub(super) fn scraped(&mut self, seen: HashMap<String, Grows>) -> Grows {
        let last = std::mem::replace(&mut self.last, seen);
        for earlier in last.values() {
            self.retire(earlier);
        }
        self.gone.clone().unwrap_or_else(Grows::zero)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(sent: u64) -> Grows {
        let mut grows = Grows::zero();
        grows.counters[0] = sent;
        grows
    }

    #[test]
    fn a_queue_deleted_or_made_again_keeps_what_it_counted_in_the_total() {
        let mut retired = Retired::default();
        let mut seen = HashMap::new();
        retired.seen(&mut seen, "a".into(), counted(5));
        retired.seen(&mut seen, "b".into(), counted(7));
        assert_eq!(retired.scraped(seen).counters[0], 0);
        // `a` is gone; `b` was deleted and made again, and counted 2 since.
        let mut seen = HashMap::new();
        retired.seen(&mut seen, "b".into(), counted(2));
        assert_eq!(retired.scraped(seen).counters[0], 12);
        // Nothing is retired twice.
        let mut seen = HashMap::new();
        retired.seen(&mut seen, "b".into(), counted(3));
        assert_eq!(retired.scraped(seen).counters[0], 12);
    }
}

//! What the server learns about leases that SQS never tells: how long consumers really hold
//! messages, over the last 15 minutes and since start, and how messages end.
//!
//! Histograms are HDR (two significant figures, values in milliseconds up to the longest
//! retention) and allocated only when a queue has something to record. They are kept across
//! restarts: `LeaseMetrics::record` is what a store writes (at most once a second per queue,
//! and at shutdown), `LeaseMetrics::from_record` what it reads back.

use std::collections::{BTreeMap, VecDeque};

use hdrhistogram::Histogram;

use crate::counters::QueueStats;
use crate::message::MsgKey;
use crate::receipt::Receipt;
use crate::rules::{Deletion, LeaseEnd};

/// The upper bounds, in milliseconds, of the lease-hold histogram's buckets: from a tenth of
/// a second to the 12-hour ceiling.
pub const HOLD_BUCKETS_MS: &[u64] = &[
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000, 600_000,
    1_800_000, 3_600_000, 7_200_000, 21_600_000, 43_200_000,
];

/// A histogram in fixed buckets (`Windowed::buckets`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buckets {
    /// Per bucket of `HOLD_BUCKETS_MS`, then the values above the last bound.
    pub counts: Vec<u64>,
    pub sum_ms: u64,
}

/// The sliding window the recent figures cover.
pub const WINDOW_MS: u64 = 15 * 60 * 1000;
const BUCKET_MS: u64 = 3 * 60 * 1000;
const MAX_VALUE_MS: u64 = 14 * 24 * 3600 * 1000;

fn histogram() -> Histogram<u32> {
    Histogram::new_with_bounds(1, MAX_VALUE_MS, 2).expect("valid histogram bounds")
}

/// Quantiles of a distribution of durations, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    pub count: u64,
    pub p50: u64,
    pub p90: u64,
    pub p95: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl Summary {
    fn of(h: &Histogram<u32>) -> Option<Summary> {
        // Two significant figures: report the middle of each value's bucket, within 1%.
        let at = |q: f64| h.median_equivalent(h.value_at_quantile(q));
        (!h.is_empty()).then(|| Summary {
            count: h.len(),
            p50: at(0.5),
            p90: at(0.9),
            p95: at(0.95),
            p99: at(0.99),
            p999: at(0.999),
            max: h.median_equivalent(h.max()),
        })
    }
}

/// A histogram since start plus one over the last `WINDOW_MS`, kept as time buckets.
#[derive(Default)]
pub struct Windowed {
    total: Option<Histogram<u32>>,
    buckets: VecDeque<(u64, Histogram<u32>)>,
}

/// Non-empty HDR buckets as (highest value in the bucket, count): re-recording the values
/// lands every count in its bucket again.
pub type Counts = Vec<(u64, u64)>;

fn counts(h: &Histogram<u32>) -> Counts {
    h.iter_recorded()
        .map(|v| (v.value_iterated_to(), u64::from(v.count_at_value())))
        .collect()
}

fn from_counts(counts: &Counts) -> Histogram<u32> {
    let mut h = histogram();
    for &(value, count) in counts {
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        h.saturating_record_n(value.clamp(1, MAX_VALUE_MS), count);
    }
    h
}

/// A `Windowed` as plain data, for a store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowedRecord {
    pub total: Counts,
    /// The recent window's time buckets: (start, counts).
    pub recent: Vec<(u64, Counts)>,
}

/// A queue's lease measurements as plain data, for a store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricsRecord {
    pub hold: WindowedRecord,
    pub first_receive: WindowedRecord,
    pub receive_counts: BTreeMap<u32, u64>,
    pub extensions_per_message: BTreeMap<u32, u64>,
}

impl WindowedRecord {
    /// Adds `other`'s measurements to these (counts of the same value add up when read
    /// back, `from_counts`); the recent buckets stay in time order.
    fn add(&mut self, other: &WindowedRecord) {
        self.total.extend_from_slice(&other.total);
        let mut recent: BTreeMap<u64, Counts> =
            std::mem::take(&mut self.recent).into_iter().collect();
        for (start, counts) in &other.recent {
            recent.entry(*start).or_default().extend_from_slice(counts);
        }
        self.recent = recent.into_iter().collect();
    }
}

impl MetricsRecord {
    /// Adds `other`'s measurements to these: a queue's stripes' make the queue's.
    pub fn add(&mut self, other: &MetricsRecord) {
        self.hold.add(&other.hold);
        self.first_receive.add(&other.first_receive);
        for (mine, theirs) in [
            (&mut self.receive_counts, &other.receive_counts),
            (
                &mut self.extensions_per_message,
                &other.extensions_per_message,
            ),
        ] {
            for (value, count) in theirs {
                *mine.entry(*value).or_default() += count;
            }
        }
    }
}

impl Windowed {
    fn to_record(&self) -> WindowedRecord {
        WindowedRecord {
            total: self.total.as_ref().map(counts).unwrap_or_default(),
            recent: self.buckets.iter().map(|(s, h)| (*s, counts(h))).collect(),
        }
    }

    fn from_record(record: &WindowedRecord) -> Windowed {
        Windowed {
            total: (!record.total.is_empty()).then(|| from_counts(&record.total)),
            buckets: record
                .recent
                .iter()
                .map(|(start, c)| (*start, from_counts(c)))
                .collect(),
        }
    }

    pub fn record(&mut self, now: u64, value_ms: u64) {
        let value = value_ms.clamp(1, MAX_VALUE_MS);
        self.total
            .get_or_insert_with(histogram)
            .saturating_record(value);
        let start = now - now % BUCKET_MS;
        if self.buckets.back().is_none_or(|(s, _)| *s != start) {
            self.buckets.push_back((start, histogram()));
        }
        while self
            .buckets
            .front()
            .is_some_and(|(s, _)| *s + WINDOW_MS <= now)
        {
            self.buckets.pop_front();
        }
        if let Some((_, h)) = self.buckets.back_mut() {
            h.saturating_record(value);
        }
    }

    pub fn total(&self) -> Option<Summary> {
        self.total.as_ref().and_then(Summary::of)
    }

    /// Everything recorded since start, counted into `HOLD_BUCKETS_MS` (each bucket holds
    /// the values above the previous bound up to its own; one more for the values above the
    /// last), with the sum of the values: a histogram that several servers can add up.
    pub fn buckets(&self) -> Option<Buckets> {
        let h = self.total.as_ref().filter(|h| !h.is_empty())?;
        let mut counts = Vec::with_capacity(HOLD_BUCKETS_MS.len() + 1);
        let mut below = 0;
        for &bound in HOLD_BUCKETS_MS {
            let upto = h.count_between(0, bound);
            counts.push(upto - below);
            below = upto;
        }
        counts.push(h.len() - below);
        Some(Buckets {
            counts,
            sum_ms: (h.mean() * h.len() as f64).round() as u64,
        })
    }

    /// The last 15 minutes (to bucket precision).
    pub fn recent(&self, now: u64) -> Option<Summary> {
        let mut live = self
            .buckets
            .iter()
            .filter(|(start, _)| start + WINDOW_MS > now)
            .map(|(_, h)| h);
        // No histogram is built for none or one (a scrape asks every queue, most of them
        // quiet: building one zeroes its counts).
        let first = live.next()?;
        let Some(second) = live.next() else {
            return Summary::of(first);
        };
        let mut merged = histogram();
        for h in [first, second].into_iter().chain(live) {
            merged.add(h).expect("same bounds");
        }
        Summary::of(&merged)
    }
}

/// The receive whose handle deleted each recently deleted message, so a delete of a message
/// already gone can tell an SDK retry (the same receive's handle: nothing new happened) from
/// another copy of the work finishing (a different receive's handle: a repeat delete).
/// Bounded by count and age: retries come within seconds.
#[derive(Default)]
pub struct RecentDeletes {
    order: VecDeque<(u64, MsgKey)>,
    /// Ordered, not hashed: every delete inserts one key and evicts the oldest, and keys
    /// (a send's instant and sequence number) mostly arrive in the order they are evicted,
    /// so both ends of the tree stay in cache, where a hash table of 65,536 keys touched two
    /// cold lines a delete (a sixth of an in-memory full cycle, under the queue's lock).
    by_key: BTreeMap<MsgKey, u32>,
}

/// How many deletes a queue remembers, and for how long: an SDK retries a delete within
/// seconds (a client timeout, then backoffs of at most 20 s), so five minutes cover it; the
/// count bounds what a busy queue holds (about 1 MiB at most, where 65,536 entries for 15
/// minutes held four times that in every busy queue, outside the memory budget's reach:
/// deletes go on while sends are refused).
const RECENT_DELETES: usize = 16_384;
pub const RECENT_DELETES_MS: u64 = 5 * 60 * 1000;

impl RecentDeletes {
    pub fn remember(&mut self, now: u64, key: MsgKey, receive_no: u32) {
        while self.order.front().is_some_and(|(at, _)| {
            self.order.len() >= RECENT_DELETES || at + RECENT_DELETES_MS <= now
        }) {
            if let Some((_, old)) = self.order.pop_front() {
                self.by_key.remove(&old);
            }
        }
        self.order.push_back((now, key));
        self.by_key.insert(key, receive_no);
    }

    /// The receive number whose handle deleted `key`, if it was deleted recently.
    pub fn deleted_by(&self, key: MsgKey) -> Option<u32> {
        self.by_key.get(&key).copied()
    }
}

/// How often a queue's changed measurements are handed to a store, at most.
pub const METRICS_EVERY_MS: u64 = 1_000;

/// Per-queue lease measurements.
#[derive(Default)]
pub struct LeaseMetrics {
    /// Not kept across restarts: it covers the seconds in which an SDK retries.
    pub recent_deletes: RecentDeletes,
    /// Something changed since the measurements were last handed to a store.
    pub changed: bool,
    /// When they were last handed to a store.
    pub written_ms: u64,
    /// From the receive that returned a message to the delete that removed it.
    pub hold: Windowed,
    /// From a send to the message's first receive.
    pub first_receive: Windowed,
    /// How many times finished messages (deleted or dead-lettered) had been delivered.
    pub receive_counts: BTreeMap<u32, u64>,
    /// How many times deleted messages' final leases had been extended.
    pub extensions_per_message: BTreeMap<u32, u64>,
}

/// What a delete found of its message, for its measurements.
#[derive(Clone, Copy, Debug)]
pub struct DeleteSeen {
    /// What the rules made of the delete.
    pub deletion: Deletion,
    pub receive_count: u32,
    /// Heartbeats on the message's current lease.
    pub extensions: u16,
}

impl LeaseMetrics {
    /// A delete's measurements, the same on every backend: how long the handle's consumer
    /// held the message (processing time, whatever became of it), how its lease ended (on
    /// time, late, or a repeat: the message was gone, another consumer's copy of the work
    /// finished first), and how a removed message's life ended. A retry of the delete that
    /// removed the message (the same receive's handle, while `recent_deletes` remembers it)
    /// shows nothing new and counts nothing. `seen`: None when the message was gone.
    pub fn count_delete(
        &mut self,
        stats: &mut QueueStats,
        now: u64,
        receipt: &Receipt,
        seen: Option<DeleteSeen>,
    ) {
        let retried = seen.is_none()
            && self.recent_deletes.deleted_by(receipt.key) == Some(receipt.receive_no);
        if retried {
            return;
        }
        self.record_hold(now, now.saturating_sub(receipt.received_ms));
        match LeaseEnd::of(seen.as_ref().map(|s| &s.deletion)) {
            LeaseEnd::Repeat => stats.repeat_deletes += 1,
            LeaseEnd::Late => stats.late_deletes += 1,
            LeaseEnd::OnTime => stats.deleted_within_lease += 1,
        }
        if let Some(seen) = seen.filter(|s| s.deletion.removes) {
            self.finished(seen.receive_count, Some(seen.extensions));
            self.recent_deletes
                .remember(now, receipt.key, receipt.receive_no);
            stats.deleted += 1;
        }
    }

    /// A receive leased a message: on its first receive, how long it waited since its send.
    pub fn count_lease(&mut self, stats: &mut QueueStats, now: u64, sent_ms: u64, first: bool) {
        stats.received += 1;
        if first {
            self.record_first_receive(now, now.saturating_sub(sent_ms));
        }
    }

    /// A receive dead-lettered a message after `receive_count` receives: its life ended
    /// there, and if a delete had come late for it, finished work went to the dead-letter
    /// queue (the DLQ mirage).
    pub fn count_dead_letter(
        &mut self,
        stats: &mut QueueStats,
        receive_count: u32,
        late_deleted: bool,
    ) {
        stats.dead_lettered += 1;
        stats.dead_lettered_after_late_delete += u64::from(late_deleted);
        self.finished(receive_count, None);
    }

    pub fn record_hold(&mut self, now: u64, value_ms: u64) {
        self.hold.record(now, value_ms);
        self.changed = true;
    }

    pub fn record_first_receive(&mut self, now: u64, value_ms: u64) {
        self.first_receive.record(now, value_ms);
        self.changed = true;
    }

    /// A message finished (deleted, or dead-lettered with no extensions to count).
    pub fn finished(&mut self, receives: u32, extensions: Option<u16>) {
        *self.receive_counts.entry(receives).or_default() += 1;
        if let Some(extensions) = extensions {
            *self
                .extensions_per_message
                .entry(u32::from(extensions))
                .or_default() += 1;
        }
        self.changed = true;
    }

    /// The measurements as they stand, changing nothing.
    pub fn record(&self) -> MetricsRecord {
        MetricsRecord {
            hold: self.hold.to_record(),
            first_receive: self.first_receive.to_record(),
            receive_counts: self.receive_counts.clone(),
            extensions_per_message: self.extensions_per_message.clone(),
        }
    }

    /// The measurements to write, when they changed and were not written in the last
    /// `METRICS_EVERY_MS` (or `force`, at shutdown).
    pub fn take_record(&mut self, now: u64, force: bool) -> Option<MetricsRecord> {
        let due = force || now >= self.written_ms + METRICS_EVERY_MS;
        (self.changed && due).then(|| {
            self.changed = false;
            self.written_ms = now;
            self.record()
        })
    }

    /// Everything measured since the last take, and a fresh start: what one server adds to
    /// the cluster's measurements (None: nothing new).
    pub fn take_delta(&mut self) -> Option<MetricsRecord> {
        let taken = std::mem::take(self);
        taken.changed.then(|| MetricsRecord {
            hold: taken.hold.to_record(),
            first_receive: taken.first_receive.to_record(),
            receive_counts: taken.receive_counts,
            extensions_per_message: taken.extensions_per_message,
        })
    }

    pub fn from_record(record: &MetricsRecord) -> LeaseMetrics {
        LeaseMetrics {
            hold: Windowed::from_record(&record.hold),
            first_receive: Windowed::from_record(&record.first_receive),
            receive_counts: record.receive_counts.clone(),
            extensions_per_message: record.extensions_per_message.clone(),
            ..LeaseMetrics::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 46, defect 5: what a queue remembers of its deletes is bounded by count and
    /// age, so a busy queue's memory stays small while deletes go on under memory pressure.
    #[test]
    fn recent_deletes_are_forgotten_past_their_count_or_their_five_minutes() {
        let key = |seq| MsgKey { sent_ms: 0, seq };
        let mut recent = RecentDeletes::default();
        for seq in 0..(RECENT_DELETES as u64 + 10) {
            recent.remember(1_000, key(seq), 1);
        }
        assert_eq!(recent.order.len(), RECENT_DELETES);
        assert_eq!(recent.deleted_by(key(9)), None, "the oldest are forgotten");
        assert_eq!(recent.deleted_by(key(10)), Some(1));
        recent.remember(1_000 + RECENT_DELETES_MS, key(u64::MAX), 2);
        assert_eq!(recent.order.len(), 1, "five minutes later only the newest");
        assert_eq!(recent.deleted_by(key(u64::MAX)), Some(2));
    }
}

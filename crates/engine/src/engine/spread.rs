//! Commands over a queue's stripes (`stripes.rs`), through `&Engine`, one stripe's lock at a
//! time: a send to one stripe, a receive that fills up from one stripe after another, deletes
//! and visibility changes sent to the stripes their handles name, and the looks that add the
//! stripes up (attributes, lease reports).
//!
//! Each stripe's changes go to the caller's `sink` while that stripe is still locked, so a
//! store receives each stripe's changes in the order they were made (a server's sink hands
//! them to its committer; `&mut Engine`'s keeps them for `take_changes`).

use std::collections::{BTreeMap, HashSet, VecDeque};

use super::leases::Fairness;
use super::{Engine, LeaseReport, Locked};
use crate::error::{EngineError, Result};
use crate::handout::Handout;
use crate::lease_stats::{LeaseMetrics, MetricsRecord};
use crate::queue::{numbering::stripe_of, Pick, Queue, QueueCounts, QueueStats};
use crate::receipt::Receipt;
use crate::settings::QueueSettings;
use crate::tenants::FairnessReport;

use super::messages::ReceiveRequest;
use super::Sink;

/// What a receive over a queue's stripes found.
#[derive(Debug)]
pub struct StripedReceive {
    /// What it leased: ids and receipt handles are written out (`Handout::finish`) with no
    /// lock held.
    pub handout: Handout,
    /// The queue's ReceiveMessageWaitTimeSeconds.
    pub queue_wait_s: u32,
    /// When nothing was handed out: how long until a message becomes receivable by itself.
    pub next_due_in_ms: Option<u64>,
    /// Whether messages may be left for another receive (a waiter to wake).
    pub more: bool,
    /// The dead-letter queue the receive moved messages to, and how many (its waiters to
    /// wake).
    pub dead_lettered: Option<(String, usize)>,
    /// A standard queue's receive that found nothing to hand out but messages held back by the
    /// queue's in-flight quota (`EngineConfig::max_in_flight_per_queue`): a short poll is
    /// answered OverLimit, as on AWS. A FIFO queue's answers empty, with no error.
    pub over_limit: bool,
}

impl Engine {
    /// Whether the queue is a FIFO queue (known without a lock).
    pub fn is_fifo(&self, name: &str) -> Result<bool> {
        self.cell(name).map(|cell| cell.fifo)
    }

    /// How many stripes the queue has.
    pub fn stripe_count(&self, name: &str) -> Result<usize> {
        self.cell(name).map(|cell| cell.count())
    }

    /// Runs `command` on one stripe (`None`: one to add messages to, `lock_queue`), its
    /// changes to `sink` before the lock goes.
    pub fn on_stripe<T>(
        &self,
        name: &str,
        stripe: Option<usize>,
        sink: Sink,
        command: impl FnOnce(&mut Locked) -> T,
    ) -> Result<T> {
        let mut locked = match stripe {
            Some(stripe) => self.lock_stripe(name, stripe)?,
            None => self.lock_queue(name)?,
        };
        let value = command(&mut locked);
        sink(locked.take_changes());
        Ok(value)
    }

    /// ReceiveMessage without waiting, over the queue's stripes in `receive_order` until
    /// the request is filled: each stripe as `Locked::receive` leaves it (dead-lettering
    /// what is due), one at a time.
    pub fn receive_striped(
        &self,
        name: &str,
        request: &ReceiveRequest,
        sink: Sink,
    ) -> Result<StripedReceive> {
        request.check()?;
        let cell = self.cell(name)?;
        let order = cell.receive_order();
        // With a noisy tenant, a first round over the stripes takes only quiet tenants'
        // messages, so no stripe's noisy messages go before another's quiet ones; a second
        // the noisy tenant's with the fewest in flight.
        // A lone noisy tenant with no quiet message anywhere is handed out as if no one were
        // noisy: one round.
        let mut by_rounds = cell.made_stripes().nth(1).is_some()
            && cell.tenants.any_noisy()
            && (cell.tenants.noisy_count() > 1 || cell.quiet_may_wait(self.clock.now_ms()));
        let rounds = match by_rounds {
            true => vec![Pick::Quiet, Pick::Fewest],
            false => vec![Pick::Any],
        };
        let mut visits: VecDeque<(usize, Pick)> = rounds
            .into_iter()
            .flat_map(|pick| order.clone().map(move |stripe| (stripe, pick)))
            .collect();
        // A stripe that stops at the in-flight quota is visited once more after the others:
        // their ticks may end leases the shared count still held (`quota.rs`).
        let mut revisits: VecDeque<(usize, Pick)> = VecDeque::new();
        let mut out = StripedReceive {
            handout: Handout::default(),
            queue_wait_s: 0,
            next_due_in_ms: None,
            more: false,
            dead_lettered: None,
            over_limit: false,
        };
        let mut at_quota = false;
        let mut next_due: Option<u64> = None;
        let mut now = 0;
        loop {
            let ((stripe, pick), revisit) = match visits.pop_front() {
                Some(visit) => (visit, false),
                None => match revisits.pop_front() {
                    Some(visit) => (visit, true),
                    None if by_rounds && (out.handout.len() as u32) < request.max_messages => {
                        // Not filled by quiet tenants' messages and the fewest-in-flight
                        // noisy tenant's: the rest from any noisy tenant.
                        by_rounds = false;
                        visits.extend(order.clone().map(|stripe| (stripe, Pick::Any)));
                        continue;
                    }
                    None => break,
                },
            };
            let wanted = request.max_messages - out.handout.len() as u32;
            let mut locked = self.lock_for_receive(name, stripe, wanted)?;
            let taken = locked.receive_picking(
                &ReceiveRequest {
                    max_messages: wanted,
                    ..request.clone()
                },
                pick,
            );
            now = locked.now();
            let stopped = locked.at_quota();
            out.queue_wait_s = locked.settings().receive_wait_s;
            let left = locked.counts().visible > 0;
            next_due = [next_due, locked.next_due()].into_iter().flatten().min();
            if let Some((target, moved)) = locked.dead_lettered() {
                let before = out.dead_lettered.as_ref().map_or(0, |(_, n)| *n);
                out.dead_lettered = Some((target.to_string(), before + moved));
            }
            sink(locked.take_changes());
            drop(locked);
            match taken {
                Ok(taken) => out.handout.extend(taken),
                // What earlier stripes leased is handed out, never left leased unseen (a
                // receive that passed `check` does not fail; this is for what might).
                Err(error) if out.handout.is_empty() => return Err(error),
                Err(_) => break,
            }
            match (stopped, revisit || cell.count() == 1) {
                (true, false) => revisits.push_back((stripe, pick)),
                (true, true) => at_quota = true,
                (false, _) => {}
            }
            if out.handout.len() as u32 >= request.max_messages {
                out.more = left || visits.iter().any(|&(s, _)| cell.may_hold_ready(s, now));
                break;
            }
            out.more |= left;
        }
        // At the quota no other receive finds room: nobody to wake.
        out.more &= !at_quota && revisits.is_empty();
        out.over_limit = at_quota && !cell.fifo && out.handout.is_empty();
        if out.handout.is_empty() {
            out.next_due_in_ms = next_due.map(|due| due.saturating_sub(now));
        }
        Ok(out)
    }

    /// Runs `each` on every handle opened before (`ReceiptSealer::open`), under the lock of
    /// the stripe its number names, a stripe at a time: DeleteMessage(Batch) and
    /// ChangeMessageVisibility(Batch). Answers in the handles' order.
    pub fn on_handles<T>(
        &self,
        name: &str,
        opened: Vec<Option<Receipt>>,
        sink: Sink,
        mut each: impl FnMut(&mut Locked, usize, Option<Receipt>) -> Result<T>,
    ) -> Result<Vec<Result<T>>> {
        let count = self.cell(name)?.count() as u32;
        // A handle that opens to nothing fails alike in any stripe.
        let stripe = |receipt: &Option<Receipt>| receipt.map_or(0, |r| stripe_of(r.key.seq, count));
        let first = opened.first().map_or(0, stripe);
        if opened.iter().all(|receipt| stripe(receipt) == first) {
            // Mostly so: one receive's handles, of one stripe.
            return self.on_stripe(name, Some(first), sink, |locked| {
                let handles = opened.into_iter().enumerate();
                handles
                    .map(|(i, receipt)| each(locked, i, receipt))
                    .collect()
            });
        }
        let mut by_stripe: BTreeMap<usize, Vec<(usize, Option<Receipt>)>> = BTreeMap::new();
        for (index, receipt) in opened.into_iter().enumerate() {
            by_stripe
                .entry(stripe(&receipt))
                .or_default()
                .push((index, receipt));
        }
        let mut answers: Vec<Option<Result<T>>> = Vec::new();
        for (stripe, handles) in by_stripe {
            self.on_stripe(name, Some(stripe), sink, |locked| {
                for (index, receipt) in handles {
                    if answers.len() <= index {
                        answers.resize_with(index + 1, || None);
                    }
                    answers[index] = Some(each(locked, index, receipt));
                }
            })?;
        }
        Ok(answers
            .into_iter()
            .map(|a| a.expect("every handle answered"))
            .collect())
    }

    /// Runs `look` on every stripe in turn, each brought up to the present (what a tick
    /// changed to `sink`).
    fn each_stripe<T>(
        &self,
        name: &str,
        sink: Sink,
        mut look: impl FnMut(&Locked) -> T,
    ) -> Result<Vec<T>> {
        let stripes: Vec<usize> = self.cell(name)?.made_stripes().collect();
        stripes
            .into_iter()
            .map(|stripe| self.on_stripe(name, Some(stripe), sink, |locked| look(locked)))
            .collect()
    }

    /// The queue's counts: its stripes' added up.
    pub fn counts_striped(&self, name: &str, sink: Sink) -> Result<QueueCounts> {
        let counts = self.each_stripe(name, sink, |q| q.counts())?;
        Ok(add_counts(&counts))
    }

    /// GetQueueAttributes: `All`, or the names asked for, in a stable order; the message
    /// counts are the stripes' added up.
    pub fn attributes(
        &self,
        name: &str,
        names: &[String],
        sink: Sink,
    ) -> Result<Vec<(String, String)>> {
        let (settings, created_ms, modified_ms) = {
            let head = self.queue(name)?;
            let meta = &head.meta;
            (meta.settings.clone(), meta.created_ms, meta.modified_ms)
        };
        let fifo = settings.fifo;
        // A standard queue knows no FifoQueue attribute, as on AWS.
        if let Some(unknown) = names.iter().find(|n| {
            *n != "All"
                && (!QueueSettings::known_names().any(|k| k == n.as_str())
                    || (!fifo && *n == "FifoQueue"))
        }) {
            return Err(EngineError::InvalidAttributeName(unknown.clone()));
        }
        let counts = self.counts_striped(name, sink)?;
        let all = names.iter().any(|n| n == "All");
        let mut out = Vec::new();
        for key in QueueSettings::known_names() {
            if !all && !names.iter().any(|n| n == key) {
                continue;
            }
            let value = match key {
                "ApproximateNumberOfMessages" => Some(counts.visible.to_string()),
                "ApproximateNumberOfMessagesNotVisible" => Some(counts.not_visible.to_string()),
                "ApproximateNumberOfMessagesDelayed" => Some(counts.delayed.to_string()),
                "CreatedTimestamp" => Some((created_ms / 1000).to_string()),
                "LastModifiedTimestamp" => Some((modified_ms / 1000).to_string()),
                "QueueArn" => Some(self.queue_arn(name)),
                settable => settings.get(settable),
            };
            if let Some(value) = value {
                out.push((key.to_string(), value));
            }
        }
        out.sort();
        Ok(out)
    }

    /// The queue's lease report: its stripes' measurements, counters and counts together.
    pub fn lease_report_striped(&self, name: &str, sink: Sink) -> Result<LeaseReport> {
        if self.cell(name)?.made_stripes().nth(1).is_none() {
            return self.on_stripe(name, Some(0), sink, |locked| {
                let queue = &locked.queue;
                let held = (queue.counts(), queue.oldest_sent_ms());
                let stats = queue.meta.stats.clone();
                let now = locked.now();
                let mut report =
                    LeaseReport::of(&queue.metrics, now, stats, held, locked.settings());
                report.fairness = fairness_look(queue)
                    .map(|(noisy, oldest)| Fairness::of(noisy, held.0, oldest, now));
                report
            });
        }
        let parts = self.each_stripe(name, sink, |locked| {
            let queue: &Queue = &locked.queue;
            (
                queue.metrics.record(),
                queue.meta.stats.clone(),
                queue.counts(),
                (queue.oldest_sent_ms(), fairness_look(queue)),
                locked.now(),
            )
        })?;
        let settings = self.queue(name)?.meta.settings.clone();
        let mut record = MetricsRecord::default();
        let mut stats = QueueStats::default();
        let mut oldest: Option<u64> = None;
        let mut fair: Option<(FairnessReport, Option<u64>)> = None;
        let mut now = 0;
        for (part, part_stats, _, (part_oldest, part_fair), part_now) in parts.iter().cloned() {
            record.add(&part);
            stats.add(&part_stats);
            oldest = [oldest, part_oldest].into_iter().flatten().min();
            if let Some((noisy, part_oldest_quiet)) = part_fair {
                // Every stripe reads the same table: the last look is the latest.
                let oldest_quiet = fair.as_ref().and_then(|(_, o)| *o);
                let oldest_quiet = [oldest_quiet, part_oldest_quiet]
                    .into_iter()
                    .flatten()
                    .min();
                fair = Some((noisy, oldest_quiet));
            }
            now = now.max(part_now);
        }
        let counts = add_counts(&parts.iter().map(|p| p.2).collect::<Vec<_>>());
        let metrics = LeaseMetrics::from_record(&record);
        let mut report = LeaseReport::of(&metrics, now, stats, (counts, oldest), &settings);
        report.fairness = fair.map(|(noisy, oldest)| Fairness::of(noisy, counts, oldest, now));
        Ok(report)
    }
}

/// A standard queue's noisy tenants, and its stripe's oldest message of a quiet tenant.
fn fairness_look(queue: &Queue) -> Option<(FairnessReport, Option<u64>)> {
    if queue.meta.settings.fifo {
        return None;
    }
    let report = queue.fairness();
    let noisy: HashSet<&str> = report.noisy.iter().map(|t| t.group.as_str()).collect();
    let oldest = queue.oldest_quiet_sent_ms(&noisy);
    Some((report, oldest))
}

fn add_counts(counts: &[QueueCounts]) -> QueueCounts {
    counts.iter().fold(
        QueueCounts {
            visible: 0,
            not_visible: 0,
            delayed: 0,
        },
        |sum, c| QueueCounts {
            visible: sum.visible + c.visible,
            not_visible: sum.not_visible + c.not_visible,
            delayed: sum.delayed + c.delayed,
        },
    )
}

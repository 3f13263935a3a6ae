//! Commands on one queue's messages under that queue's own lock, through `&Engine`: send,
//! receive (with the dead-letter queue it may feed), delete, change visibility, and what a
//! receive asks besides (counts, next due, empty receives, lease reports).
//!
//! A `Locked` holds one stripe of its queue (`stripes.rs`); commands that span the stripes
//! (`spread.rs`) lock them one after the other, never two of one queue at once.
//!
//! Lock order, the one rule that keeps this free of deadlock: the caller's hold of the
//! engine (`&Engine` shared, or `&mut Engine` alone) comes first; then stripe locks, two at
//! most and of two queues, in ascending queue id. A receive that may dead-letter locks its
//! source's stripe and a stripe of the target that way (`Engine::lock_for_receive`), and
//! only when a message it would take is due to move; nothing else holds two.
//!
//! Everything a command changed leaves with it (`Locked::take_changes`), taken while the
//! locks are held, so a store receives each queue's changes in the order they were made if
//! the caller hands them on before it lets the `Locked` go.

use std::sync::Arc;

use super::{Change, Engine, QueueCell, QueueGuard};
use crate::error::{EngineError, Result};
use crate::handout::{Accepted, Handout};
use crate::message::{Checked, ContentKey};
use crate::queue::{DeleteOutcome, Pick, Queue, QueueCounts, ReceiveParams};
use crate::receipt::Receipt;
use crate::settings::QueueSettings;

use super::messages::{check_batch, ReceiveRequest};

/// A queue's live dead-letter queue, for a receive.
struct DeadLetterTarget<'e> {
    name: String,
    max_receive_count: u32,
    queue: TargetLock<'e>,
}

/// How a receive holds its queue's dead-letter queue.
enum TargetLock<'e> {
    /// Locked beside the queue: the receive may move messages there.
    Held(QueueGuard<'e>),
    /// The queue is its own dead-letter queue (its RedrivePolicy may say so).
    Itself,
    /// Not locked: no message the receive takes now is due to move (`Queue::may_dead_letter`),
    /// so sources sharing a dead-letter queue do not wait for each other.
    NotNeeded,
}

/// One stripe of a queue (and for a receive, a stripe of its dead-letter queue) locked,
/// brought up to `now`.
pub struct Locked<'e> {
    engine: &'e Engine,
    name: &'e str,
    pub(super) queue: QueueGuard<'e>,
    dead_letter: Option<DeadLetterTarget<'e>>,
    now: u64,
    /// Changes that belong to no one queue (contents moving between queues), in order.
    moved: Vec<Change>,
    /// Messages the receives made through this `Locked` moved to the dead-letter queue.
    dead_lettered: usize,
    /// A receive through it stopped at the queue's in-flight quota (`quota.rs`).
    at_quota: bool,
}

impl Engine {
    /// A stripe of `name`'s queue to add messages to (this thread's own, or a free one),
    /// under its own lock, brought up to the present. Other queues' and stripes' commands go
    /// on meanwhile; a command on this stripe waits until the `Locked` is dropped.
    pub fn lock_queue<'e>(&'e self, name: &'e str) -> Result<Locked<'e>> {
        let (_, queue) = self.cell(name)?.lock_any();
        Ok(self.locked(name, queue, None))
    }

    /// Stripe `stripe` of `name`'s queue (modulo its count), like `lock_queue`.
    pub fn lock_stripe<'e>(&'e self, name: &'e str, stripe: usize) -> Result<Locked<'e>> {
        let queue = self.cell(name)?.lock(stripe);
        Ok(self.locked(name, queue, None))
    }

    /// Like `lock_stripe`, for a receive of up to `max_messages`: with a stripe of the queue's
    /// live dead-letter queue locked too (in queue id order) when the receive could move
    /// messages there.
    pub fn lock_for_receive<'e>(
        &'e self,
        name: &'e str,
        stripe: usize,
        max_messages: u32,
    ) -> Result<Locked<'e>> {
        let source_cell = self.cell(name)?;
        let mut source = source_cell.lock(stripe);
        let Some((target_name, target_cell, max)) = self.dead_letter_cell(&source) else {
            return Ok(self.locked(name, source, None));
        };
        let live =
            crate::rules::dead_letter_after(Some(max), source_cell.fifo, Some(target_cell.fifo));
        let Some(max_receive_count) = live else {
            return Ok(self.locked(name, source, None));
        };
        let mut target = DeadLetterTarget {
            name: target_name,
            max_receive_count,
            queue: TargetLock::Itself,
        };
        if target_cell.id == source_cell.id {
            return Ok(self.locked(name, source, Some(target)));
        }
        let now = self.clock.now_ms();
        if !self.frozen {
            source.tick(now);
        }
        if !source.may_dead_letter(max_messages as usize, max_receive_count) {
            // The source stays locked, so the receive sees exactly what was looked at.
            target.queue = TargetLock::NotNeeded;
            return Ok(self.locked_at(name, source, Some(target), now));
        }
        let target_stripe = target_cell.home_made();
        target.queue = TargetLock::Held(if target_cell.id > source_cell.id {
            target_cell.lock(target_stripe)
        } else {
            // The lower id first: let the source go and take both in order. What the tick
            // above changed stays noted in the source (taken with the next changes made to
            // it, by whoever locks it first), and its settings cannot change while `&self`
            // is held. Nothing else of the source was looked at that the receive relies on:
            // `locked` ticks again and the receive looks afresh.
            drop(source);
            let held = target_cell.lock(target_stripe);
            source = source_cell.lock(stripe);
            held
        });
        Ok(self.locked(name, source, Some(target)))
    }

    /// The cell of the queue `source`'s RedrivePolicy names, with its maxReceiveCount: None
    /// when it names none, or one that no longer exists (dead-lettering is then off rather
    /// than destroying messages).
    fn dead_letter_cell(&self, source: &Queue) -> Option<(String, &QueueCell, u32)> {
        let policy = source.meta.settings.redrive.as_ref()?;
        let target = self.queue_key_from_arn(&policy.dead_letter_target_arn)?;
        let cell = self.queues.get(&target)?;
        Some((target, cell, policy.max_receive_count))
    }

    fn locked<'e>(
        &'e self,
        name: &'e str,
        queue: QueueGuard<'e>,
        dead_letter: Option<DeadLetterTarget<'e>>,
    ) -> Locked<'e> {
        // Read under the locks, so a queue's instants never go back between two commands.
        let now = self.clock.now_ms();
        self.locked_at(name, queue, dead_letter, now)
    }

    /// `locked` at `now`, read while `queue` was locked.
    fn locked_at<'e>(
        &'e self,
        name: &'e str,
        mut queue: QueueGuard<'e>,
        mut dead_letter: Option<DeadLetterTarget<'e>>,
        now: u64,
    ) -> Locked<'e> {
        if !self.frozen {
            queue.tick(now);
            if let Some(DeadLetterTarget {
                queue: TargetLock::Held(target),
                ..
            }) = &mut dead_letter
            {
                target.tick(now);
            }
        }
        Locked {
            engine: self,
            name,
            queue,
            dead_letter,
            now,
            moved: Vec::new(),
            dead_lettered: 0,
            at_quota: false,
        }
    }
}

impl Locked<'_> {
    pub fn now(&self) -> u64 {
        self.now
    }

    pub fn settings(&self) -> &QueueSettings {
        &self.queue.meta.settings
    }

    pub fn counts(&self) -> QueueCounts {
        self.queue.counts()
    }

    /// The next instant at which a message of this queue becomes receivable by itself.
    pub fn next_due(&self) -> Option<u64> {
        self.queue.next_due()
    }

    /// SendMessage: validates against the queue's rules, then stores. The answer's id is
    /// written out (`Accepted::sent`) best after the `Locked` is let go.
    pub fn send(&mut self, message: Checked) -> Result<Accepted> {
        message.validate(&self.queue.meta.settings)?;
        self.queue.touch();
        Ok(self.queue.send(self.now, message.message))
    }

    /// SendMessageBatch: `check_batch`, then each entry is checked on its own (one too big
    /// for the queue fails alone, in `Failed`), as AWS does.
    pub fn send_batch(&mut self, messages: Vec<Checked>) -> Result<Vec<Result<Accepted>>> {
        check_batch(
            &self.queue.meta.settings,
            messages.iter().map(Checked::message),
        )?;
        Ok(messages.into_iter().map(|m| self.send(m)).collect())
    }

    /// ReceiveMessage without waiting: leases what is ready now. A message already received
    /// maxReceiveCount times moves to the dead-letter queue instead of being returned (when
    /// the queue was locked with `lock_for_receive`). What it leased is handed out
    /// (`Handout::finish`) best after the `Locked` is let go.
    pub fn receive(&mut self, request: &ReceiveRequest) -> Result<Handout> {
        self.receive_picking(request, Pick::Any)
    }

    /// `receive`, taking only the tenants' messages `pick` names (`queue/fair.rs`).
    pub(crate) fn receive_picking(
        &mut self,
        request: &ReceiveRequest,
        pick: Pick,
    ) -> Result<Handout> {
        request.check()?;
        let params = ReceiveParams {
            max_messages: request.max_messages as usize,
            visibility_s: request
                .visibility_s
                .unwrap_or(self.queue.meta.settings.visibility_timeout_s),
            // Without the dead-letter queue's lock, a message found due to move (there is
            // none: `may_dead_letter`) would be leased once more rather than lost.
            max_receive_count: self
                .dead_letter
                .as_ref()
                .filter(|t| !matches!(t.queue, TargetLock::NotNeeded))
                .map(|t| t.max_receive_count),
            attempt_id: request.attempt_id.as_deref(),
            max_in_flight: self.engine.config.max_in_flight_per_queue,
            pick,
        };
        let taken = self.queue.receive(self.now, params);
        self.at_quota |= taken.at_quota;
        let (drafts, dead) = (taken.deliveries, taken.dead);
        if !drafts.is_empty() || !dead.is_empty() {
            self.queue.touch();
        }
        let deliveries = Handout::new(drafts, self.engine.sealer.clone());
        let (Some(target), false) = (&mut self.dead_letter, dead.is_empty()) else {
            return Ok(deliveries);
        };
        // Only a receive that dead-letters something pays for naming its source.
        let source_arn: Arc<str> = Arc::from(self.engine.queue_arn(self.name).as_str());
        let source_id = self.queue.meta.id;
        let dead_letter_queue = match &mut target.queue {
            TargetLock::Held(other) => other,
            TargetLock::Itself | TargetLock::NotNeeded => &mut self.queue,
        };
        // A message the dead-letter queue's own redrive policy would move on at its next
        // receive is owed no wake-up there: two queues that are each other's dead-letter
        // queue would have their long polls bounce it between them, each waking the other,
        // without end (found by the node simulation).
        let engine = self.engine;
        let moves_on_at = engine
            .dead_letter_cell(dead_letter_queue)
            .and_then(|(_, next, max)| {
                let fifo = dead_letter_queue.meta.settings.fifo;
                crate::rules::dead_letter_after(Some(max), fifo, Some(next.fifo))
            })
            .unwrap_or(u32::MAX);
        for (key, message) in dead {
            let receivable = message.receive_count < moves_on_at;
            let stored = message.content.is_none();
            dead_letter_queue.touch();
            let moved =
                dead_letter_queue.accept_dead_letter(self.now, key.sent_ms, message, &source_arn);
            let from = ContentKey {
                queue_id: source_id,
                key,
            };
            let to = dead_letter_queue.content_key(moved);
            self.moved
                .extend(self.engine.content_moved(stored, from, to));
            self.dead_lettered += usize::from(receivable);
        }
        Ok(deliveries)
    }

    /// The dead-letter queue receives through this `Locked` moved messages to, and how
    /// many it can hand out: its waiting receives are owed a wake-up.
    /// None when the queue is its own dead-letter queue: what it moved stays as unreceivable
    /// as it was (waking its own polls would have them spin, each moving it again).
    pub fn dead_lettered(&self) -> Option<(&str, usize)> {
        let target = self.dead_letter.as_ref()?;
        let elsewhere = !matches!(target.queue, TargetLock::Itself);
        (elsewhere && self.dead_lettered > 0).then_some((target.name.as_str(), self.dead_lettered))
    }

    /// Whether a receive through this `Locked` stopped at the queue's in-flight quota with
    /// messages left that it would otherwise have handed out.
    pub fn at_quota(&self) -> bool {
        self.at_quota
    }

    /// Counts a ReceiveMessage request that returned nothing. Kept apart from `receive`
    /// because a long poll tries several times but is one request.
    pub fn record_empty_receive(&mut self) {
        self.queue.touch();
        self.queue.meta.stats.empty_receives += 1;
    }

    pub fn delete(&mut self, handle: &str) -> Result<DeleteOutcome> {
        self.delete_opened(handle, self.engine.sealer.open(handle))
    }

    /// `delete` of a handle already opened (`ReceiptSealer::open`, outside the lock).
    pub fn delete_opened(
        &mut self,
        handle: &str,
        opened: Option<Receipt>,
    ) -> Result<DeleteOutcome> {
        let receipt = self.issued_here(handle, opened)?;
        self.queue.touch();
        let mode = self.engine.config.lease_mode;
        self.queue.delete(self.now, &receipt, handle, mode)
    }

    /// `Queue::forget_lost` of the message an opened handle names.
    pub fn forget_lost_opened(&mut self, handle: &str, opened: Option<Receipt>) -> Result<bool> {
        let receipt = self.issued_here(handle, opened)?;
        self.queue.touch();
        Ok(self.queue.forget_lost(&receipt))
    }

    pub fn change_visibility(&mut self, handle: &str, timeout_s: u32) -> Result<()> {
        self.change_visibility_opened(handle, self.engine.sealer.open(handle), timeout_s)
    }

    /// `change_visibility` of a handle already opened (`ReceiptSealer::open`).
    pub fn change_visibility_opened(
        &mut self,
        handle: &str,
        opened: Option<Receipt>,
        timeout_s: u32,
    ) -> Result<()> {
        let receipt = self.issued_here(handle, opened)?;
        self.queue.touch();
        let mode = self.engine.config.lease_mode;
        self.queue
            .change_visibility(self.now, &receipt, handle, timeout_s, mode)
    }

    /// The receipt an opened handle holds, if this incarnation of the queue issued it.
    fn issued_here(&self, handle: &str, opened: Option<Receipt>) -> Result<Receipt> {
        match opened {
            Some(receipt) if receipt.queue_id == self.queue.meta.id => {
                // A handle goes to the stripe its number names (`Engine::on_handles`).
                debug_assert!(self.queue.numbers(receipt.key.seq), "{receipt:?} elsewhere");
                Ok(receipt)
            }
            _ => Err(EngineError::ReceiptHandleIsInvalid(handle.to_string())),
        }
    }

    /// Everything the commands made through this `Locked` changed, in the order a store must
    /// apply it: contents moved between queues, then the dead-letter queue's changes, then
    /// the queue's own. Empty unless the engine was configured with `track_changes`.
    pub fn take_changes(&mut self) -> Vec<Change> {
        if !self.engine.config.track_changes {
            return Vec::new();
        }
        let mut out = std::mem::take(&mut self.moved);
        let now = self.now;
        if let Some(DeadLetterTarget {
            name,
            queue: TargetLock::Held(target),
            ..
        }) = &mut self.dead_letter
        {
            target.drain_changes(name, now, &mut out);
        }
        self.queue.drain_changes(self.name, now, &mut out);
        out
    }
}

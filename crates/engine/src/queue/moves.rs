//! Messages that come into a queue other than by a send (dead-lettered, moved back by a move
//! task) or leave it other than by a delete (a purge, a move task's take), what a store takes
//! of them (their contents), and looks that change nothing (peek, oldest, newest).

use std::sync::Arc;

use super::{Queue, Removed};
use crate::fifo::{DedupKey, Original};
use crate::message::{
    format_message_id, handed_out, Content, MsgKey, Peeked, State, StoredMessage,
};

impl Queue {
    /// Takes in a message dead-lettered from another queue, keeping its id, body, attributes
    /// and receive count. A standard queue keeps its send time (so retention still counts
    /// from the original send); a FIFO queue re-stamps it, as AWS does.
    pub fn accept_dead_letter(
        &mut self,
        now: u64,
        sent_ms: u64,
        mut message: StoredMessage,
        source_arn: &Arc<str>,
    ) -> MsgKey {
        let key = self.next_key(if self.meta.settings.fifo {
            now
        } else {
            sent_ms
        });
        message.state = State::Ready;
        message
            .extras
            .get_or_insert_with(Box::default)
            .dead_letter_source = Some(source_arn.clone());
        self.insert(key, message, false);
        key
    }

    /// Takes in a message moved by a message move task: it starts afresh, with no receives,
    /// so it does not bounce straight back to the dead-letter queue.
    pub fn accept_moved(&mut self, now: u64, mut message: StoredMessage) -> MsgKey {
        // A new message, as AWS's redrive makes it: sent now (its retention starts again),
        // with an id of its own (derived from its new place), so a late delete of the old
        // one can never be taken for this one's.
        let key = self.next_key(now);
        message.state = State::Ready;
        message.receive_count = 0;
        message.first_receive_ms = 0;
        message.late_deleted = false;
        if let Some(extras) = message.extras.as_mut() {
            extras.dead_letter_source = None;
            extras.message_id = None;
        }
        self.insert(key, message, false);
        key
    }

    /// Drops every message; stats, settings and FIFO deduplication ids stay.
    /// Empties the queue and hands back what it held, for the caller to drop: freeing a
    /// million messages takes long enough to matter where it happens. `below`: a number past
    /// every message of every stripe of the queue (`next_seq` of each), marked purged, and
    /// numbering goes on from there.
    pub fn purge(&mut self, now: u64, below: u64) -> Removed {
        // The store drops the whole range; per-message changes would be redundant.
        self.changes.messages.clear();
        self.flying.sub(self.in_flight);
        self.tenants.purged(self.stripe_index());
        self.in_flight = 0;
        self.plain_ready = 0;
        self.delayed = 0;
        self.meta.last_purge_ms = Some(now);
        self.meta.purged_below_seq = below;
        self.set_next_seq(below.max(self.next_seq()));
        // AWS forgets the deduplication window with the messages: a purged id may be sent again.
        let forgotten = self.fifo.forget_all();
        if self.changes.enabled {
            self.changes.dedup.extend(forgotten);
        }
        Removed::new((
            std::mem::take(&mut self.messages),
            std::mem::take(&mut self.ready),
            std::mem::take(&mut self.noisy_ready),
            std::mem::take(&mut self.timers),
            self.fifo.take_groups(),
        ))
    }

    /// The oldest Ready message whose key is at most `limit`, with the queue it was
    /// dead-lettered from: what a message move task moves next. O(log n) on standard queues,
    /// whose Ready messages are indexed; a FIFO dead-letter queue is searched in key order.
    pub fn oldest_ready(&self, limit: MsgKey) -> Option<(MsgKey, Option<Arc<str>>)> {
        let key = if self.meta.settings.fifo {
            self.messages
                .range(..=limit)
                .find(|(_, m)| m.state == State::Ready)
                .map(|(k, _)| k)?
        } else {
            let noisy = self.noisy_ready.values();
            let firsts = noisy.filter_map(|ready| ready.range(..=limit).next());
            *firsts.chain(self.ready.range(..=limit).next()).min()?
        };
        let source = self.messages[&key]
            .extras
            .as_ref()
            .and_then(|e| e.dead_letter_source.clone());
        Some((key, source))
    }

    /// Takes a message out of the queue, to move it elsewhere: it keeps its id there if it is
    /// dead-lettered (a move task's redrive gives it a new one, `accept_moved`).
    pub fn take_message(&mut self, key: MsgKey) -> Option<StoredMessage> {
        let mut message = self.remove(key)?;
        let id = self.message_id(key, &message);
        message.extras.get_or_insert_with(Box::default).message_id = Some(id);
        Some(message)
    }

    /// The content of the message at `key`, taken out of memory for a store to keep, when
    /// a store is listening and the message still holds it.
    pub(crate) fn hand_over_content(&mut self, key: MsgKey) -> Option<Content> {
        if !self.changes.enabled {
            return None;
        }
        self.messages.get_mut(&key)?.content.take()
    }

    /// Marks every message that still holds its content as changed, so the next
    /// `take_changes` hands the contents over; answers how many.
    pub(crate) fn mark_held_contents(&mut self) -> usize {
        let held: Vec<MsgKey> = self
            .messages
            .iter()
            .filter(|(_, m)| m.content.is_some())
            .map(|(k, _)| k)
            .collect();
        for &key in &held {
            self.mark(key);
        }
        held.len()
    }

    pub(crate) fn message(&self, key: MsgKey) -> Option<&StoredMessage> {
        self.messages.get(&key)
    }

    pub(crate) fn fifo_original(&self, key: &DedupKey) -> Option<Original> {
        self.fifo.original(key)
    }

    /// The `limit` oldest stored messages as they stand at `now`, changing nothing: no
    /// receive count, no lease, no timer (a state whose end is past reads as receivable).
    pub fn peek(&self, now: u64, limit: usize) -> Vec<Peeked> {
        self.messages
            .iter()
            .take(limit)
            .map(|(key, message)| {
                let waiting = matches!(message.state, State::InFlight | State::Delayed)
                    && message.until_ms > now;
                let (body, _, unread) = handed_out(message.content.as_ref(), self.content_key(key));
                Peeked {
                    message_id: format_message_id(self.message_id(key, message)),
                    sent_ms: key.sent_ms,
                    receive_count: message.receive_count,
                    state: if waiting { message.state } else { State::Ready },
                    until_ms: waiting.then_some(message.until_ms),
                    group_id: message.group().cloned(),
                    body,
                    unread,
                }
            })
            .collect()
    }

    /// When the oldest stored message was sent.
    pub fn oldest_sent_ms(&self) -> Option<u64> {
        self.messages.first_key().map(|k| k.sent_ms)
    }

    /// The key of the newest stored message and how many are stored.
    pub fn newest(&self) -> (Option<MsgKey>, usize) {
        (self.messages.last_key(), self.messages.len())
    }
}

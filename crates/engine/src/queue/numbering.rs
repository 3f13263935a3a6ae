//! How a queue numbers its messages, and puts back what a store kept. Stripe `i` of a queue
//! split into `n` stripes numbers its messages `i + 1`, `i + 1 + n`, `i + 1 + 2n`, ...: the
//! numbers of a queue's stripes never meet, so a message's key (send time, number) is unique
//! in its queue, its id (derived from the number) unique, and its number says its stripe.

use super::Queue;
use crate::fifo::{DedupKey, Original};
use crate::message::{MsgKey, State, StoredMessage};

/// The stripe of `stripes` whose messages are numbered so: 0 for a number the queue never
/// gave (0 itself), which no stripe holds.
pub(crate) fn stripe_of(seq: u64, stripes: u32) -> usize {
    (seq.saturating_sub(1) % u64::from(stripes.max(1))) as usize
}

impl Queue {
    /// Stripe `index` of a queue whose head (stripe 0) is `head`, made now: the same
    /// settings, tags and instants, counters of its own, numbering its messages from
    /// `index + 1` or above the queue's last purge, its record marked to be written.
    pub(crate) fn stripe_of_head(head: &Queue, index: u32) -> Queue {
        let mut meta = head.meta.clone();
        meta.stats = Default::default();
        let purged_below = meta.purged_below_seq;
        let mut queue = Queue::restored(meta, head.sealer.clone());
        // One in-flight count for the whole queue (`quota.rs`).
        queue.flying = head.flying.clone();
        queue.tenants = head.tenants.clone();
        queue.stripe = index;
        queue.set_next_seq(purged_below);
        queue.changes.enabled = head.changes.enabled;
        queue.touch();
        queue
    }

    /// Which stripe of its queue this is.
    pub(crate) fn stripe_index(&self) -> u32 {
        self.stripe
    }

    fn first_seq(&self) -> u64 {
        u64::from(self.stripe) + 1
    }

    /// The smallest number of this stripe's at least `at_least`.
    fn aligned(&self, at_least: u64) -> u64 {
        let first = self.first_seq();
        let every = u64::from(self.meta.stripes.max(1));
        if at_least <= first {
            first
        } else {
            first + (at_least - first).div_ceil(every) * every
        }
    }

    pub(super) fn next_key(&mut self, sent_ms: u64) -> MsgKey {
        let seq = self.next_seq;
        self.next_seq += u64::from(self.meta.stripes.max(1));
        MsgKey { sent_ms, seq }
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Numbers on from the first of this stripe's numbers at least `next`.
    pub(crate) fn set_next_seq(&mut self, next: u64) {
        self.next_seq = self.aligned(next);
    }

    /// Whether `seq` is one of this stripe's numbers.
    pub(crate) fn numbers(&self, seq: u64) -> bool {
        seq >= 1 && stripe_of(seq, self.meta.stripes) == self.stripe as usize
    }

    /// Puts back a message a store kept, rebuilding every index for it. An id other than
    /// the one its place gives (a moved message, or one stored before ids were derived) is
    /// kept with it.
    pub(crate) fn restore_message(
        &mut self,
        key: MsgKey,
        id: [u8; 16],
        mut message: StoredMessage,
    ) {
        self.next_seq = self.next_seq.max(self.aligned(key.seq + 1));
        if key.seq < self.meta.purged_below_seq {
            // Purged; the store had not finished deleting it.
            return;
        }
        if self.message_id(key, &message) != id {
            message.extras.get_or_insert_with(Box::default).message_id = Some(id);
        }
        if message.state == State::Ready && message.until_ms != 0 {
            // Stored with its ready rank: it keeps its place among the FIFO groups.
            self.ready_rank = self.ready_rank.max(message.until_ms);
            self.insert_as_is(key, message, false);
        } else {
            self.insert(key, message, false);
        }
    }

    pub(crate) fn restore_dedup(&mut self, key: DedupKey, original: Original) {
        self.fifo.remember(key, original);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::ReceiptSealer;
    use crate::settings::QueueSettings;

    fn stripe(index: u32, of: u32) -> Queue {
        let mut head = Queue::new(1, QueueSettings::new(false), 0, ReceiptSealer::new([0; 16]));
        head.meta.stripes = of;
        Queue::stripe_of_head(&head, index)
    }

    #[test]
    fn stripes_number_their_messages_apart_and_say_whose_a_number_is() {
        let mut queues: Vec<Queue> = (0..3).map(|i| stripe(i, 3)).collect();
        let mut seen = Vec::new();
        for _ in 0..4 {
            for (i, q) in queues.iter_mut().enumerate() {
                let key = q.next_key(0);
                assert_eq!(stripe_of(key.seq, 3), i);
                assert!(q.numbers(key.seq));
                seen.push(key.seq);
            }
        }
        seen.sort();
        assert_eq!(seen, (1..=12).collect::<Vec<_>>());
    }

    #[test]
    fn numbering_on_after_a_restore_skips_past_what_was_kept_within_the_stripe() {
        let mut q = stripe(1, 4);
        q.set_next_seq(7);
        assert_eq!(q.next_seq(), 10);
        q.set_next_seq(2);
        assert_eq!(q.next_seq(), 2);
        assert_eq!(stripe(0, 1).aligned(5), 5);
    }
}

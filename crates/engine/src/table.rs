//! One queue's stored messages: an ordered index from key to slot, and the messages themselves
//! packed into fixed-size chunks.
//!
//! Why not a `BTreeMap<MsgKey, StoredMessage>`: messages arrive in key order, which leaves
//! B-tree nodes little more than half full, and there each slot holds a whole message. Here the
//! tree holds 20-byte entries and the messages sit densely in chunks, reused through a free
//! list. Why chunks and not one `Vec`: growing a vector of ten million messages would copy them
//! all at once, a pause that some request would wait on.

use std::collections::BTreeMap;
use std::ops::{Index, RangeBounds};

use crate::message::{MsgKey, StoredMessage};

/// Messages per chunk: 1,024 of 64 bytes, 64 KiB, a size mimalloc (the server's allocator)
/// packs into its pages with nothing left over.
const CHUNK: usize = 1024;

#[derive(Default)]
pub(crate) struct MessageTable {
    index: BTreeMap<MsgKey, u32>,
    chunks: Vec<Box<[Option<StoredMessage>]>>,
    /// Slots vacated by removals, reused before any new slot.
    free: Vec<u32>,
    /// Slots below this have been handed out at least once.
    used: u32,
}

impl MessageTable {
    pub fn len(&self) -> usize {
        self.index.len()
    }

    fn slot(&self, slot: u32) -> &Option<StoredMessage> {
        let slot = slot as usize;
        &self.chunks[slot / CHUNK][slot % CHUNK]
    }

    fn slot_mut(&mut self, slot: u32) -> &mut Option<StoredMessage> {
        let slot = slot as usize;
        &mut self.chunks[slot / CHUNK][slot % CHUNK]
    }

    pub fn get(&self, key: &MsgKey) -> Option<&StoredMessage> {
        self.index
            .get(key)
            .and_then(|&slot| self.slot(slot).as_ref())
    }

    pub fn get_mut(&mut self, key: &MsgKey) -> Option<&mut StoredMessage> {
        let slot = *self.index.get(key)?;
        self.slot_mut(slot).as_mut()
    }

    /// Stores a message under `key`, replacing (and returning) any message stored there.
    pub fn insert(&mut self, key: MsgKey, message: StoredMessage) -> Option<StoredMessage> {
        if let Some(&slot) = self.index.get(&key) {
            return self.slot_mut(slot).replace(message);
        }
        let slot = self.free.pop().unwrap_or_else(|| {
            let slot = self.used;
            if slot as usize == self.chunks.len() * CHUNK {
                self.chunks
                    .push(std::iter::repeat_with(|| None).take(CHUNK).collect());
            }
            // Four billion messages in one queue would need over 300 GB first.
            self.used = slot.checked_add(1).expect("under 2^32 messages per queue");
            slot
        });
        *self.slot_mut(slot) = Some(message);
        self.index.insert(key, slot);
        None
    }

    pub fn remove(&mut self, key: &MsgKey) -> Option<StoredMessage> {
        let slot = self.index.remove(key)?;
        let message = self.slot_mut(slot).take();
        if self.index.is_empty() {
            // A drained queue gives its memory back, all but one chunk: a queue that empties
            // after every message would otherwise allocate and fill 64 KiB per send.
            self.chunks.truncate(1);
            self.free = Vec::new();
            self.used = 0;
        } else {
            self.free.push(slot);
        }
        message
    }

    pub fn first_key(&self) -> Option<MsgKey> {
        self.index.first_key_value().map(|(k, _)| *k)
    }

    pub fn last_key(&self) -> Option<MsgKey> {
        self.index.last_key_value().map(|(k, _)| *k)
    }

    /// Every message in key order: oldest first.
    pub fn iter(&self) -> impl Iterator<Item = (MsgKey, &StoredMessage)> {
        self.range(..)
    }

    pub fn range(
        &self,
        keys: impl RangeBounds<MsgKey>,
    ) -> impl Iterator<Item = (MsgKey, &StoredMessage)> {
        self.index
            .range(keys)
            .filter_map(|(key, &slot)| Some((*key, self.slot(slot).as_ref()?)))
    }
}

impl Index<&MsgKey> for MessageTable {
    type Output = StoredMessage;

    fn index(&self, key: &MsgKey) -> &StoredMessage {
        self.get(key).expect("a stored message")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Content, State};

    /// A message told apart by its receive count.
    fn message(n: u32) -> StoredMessage {
        StoredMessage {
            content: Some(Content {
                body: format!("m{n}").into(),
                attributes: None,
            }),
            extras: None,
            first_receive_ms: 0,
            lease_start_ms: 0,
            until_ms: 0,
            receive_count: n,
            extensions: 0,
            late_deleted: false,
            state: State::Ready,
        }
    }

    fn key(seq: u64) -> MsgKey {
        MsgKey { sent_ms: 7, seq }
    }

    #[test]
    fn messages_come_back_by_key_and_in_key_order_across_chunks() {
        let mut table = MessageTable::default();
        let n = CHUNK as u64 * 2 + 5;
        for seq in (0..n).rev() {
            assert!(table.insert(key(seq), message(seq as u32)).is_none());
        }
        assert_eq!(table.len(), n as usize);
        assert_eq!(table.chunks.len(), 3);
        assert_eq!(table[&key(1030)].receive_count, 1030);
        let seqs: Vec<u64> = table.iter().map(|(k, _)| k.seq).collect();
        assert_eq!(seqs, (0..n).collect::<Vec<_>>());
        assert_eq!(
            (table.first_key(), table.last_key()),
            (Some(key(0)), Some(key(n - 1)))
        );
        assert_eq!(table.range(..=key(2)).count(), 3);
    }

    #[test]
    fn removed_slots_are_reused_and_a_drained_table_keeps_only_one_chunk() {
        let mut table = MessageTable::default();
        for seq in 0..10 {
            table.insert(key(seq), message(seq as u32));
        }
        assert_eq!(table.remove(&key(3)).map(|m| m.receive_count), Some(3));
        assert!(table.remove(&key(3)).is_none());
        assert!(table.get(&key(3)).is_none());
        table.insert(key(10), message(10));
        assert_eq!(table.used, 10, "the vacated slot is taken before a new one");
        let replaced = table.insert(key(10), message(11));
        assert_eq!(replaced.map(|m| m.receive_count), Some(10));
        assert_eq!(table.get_mut(&key(10)).map(|m| m.receive_count), Some(11));
        for seq in 11..CHUNK as u64 + 11 {
            table.insert(key(seq), message(0));
        }
        assert_eq!(table.chunks.len(), 2);
        for seq in 0..CHUNK as u64 + 11 {
            table.remove(&key(seq));
        }
        assert_eq!((table.len(), table.chunks.len(), table.used), (0, 1, 0));
        table.insert(key(0), message(1));
        assert_eq!(
            (table.chunks.len(), table.used),
            (1, 1),
            "the kept chunk is reused"
        );
        assert_eq!(table[&key(0)].receive_count, 1);
    }
}

//! The engine's state as records a store can keep: what changed after each command
//! (`take_changes`), and rebuilding an engine from what a store kept (`restore`).
//!
//! The records are plain values; encoding them is the store's business. Transitions that
//! follow from the clock alone (a lease or delay ending) are not changes: a restored engine
//! derives them again from the recorded instants.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{Engine, EngineConfig, MoveTask, QueueCell};
use crate::clock::Clock;
use crate::fifo::{DedupKey, Original};
use crate::lease_stats::{LeaseMetrics, MetricsRecord};
use crate::message::{Content, ContentKey, MsgKey, StoredMessage};
use crate::queue::numbering::stripe_of;
use crate::queue::{Queue, QueueMeta};
use crate::receipt::ReceiptSealer;

/// Engine-wide state: the receipt key, queue ids, recently deleted names, move tasks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineRecord {
    pub receipt_key: [u8; 16],
    pub next_queue_id: u64,
    pub deleted_at: Vec<(String, u64)>,
    pub tasks: Vec<MoveTask>,
}

/// One stripe of a queue's own state: everything but its messages and deduplication ids.
/// Every stripe keeps one (what is the queue's own is alike in all, the counters and the
/// numbering are the stripe's); stripe 0's, the head's, says the queue exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRecord {
    pub name: String,
    pub meta: QueueMeta,
    pub next_seq: u64,
    /// Which of `meta.stripes` stripes this record is: not in the record's value, its key.
    pub stripe: u32,
}

/// One change for a store to apply, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Engine(EngineRecord),
    /// Boxed: one is written per changed queue per command, beside many small message changes.
    Queue(Box<QueueRecord>),
    /// The queue and everything in it are gone: every one of its `stripes` records.
    QueueDeleted {
        queue_id: u64,
        stripes: u32,
    },
    /// Every message of the queue numbered below `below_seq` (all it held) is gone.
    Purged {
        queue_id: u64,
        below_seq: u64,
    },
    /// A message arrived in a queue with this content. The store keeps it under the
    /// message's key, once, until the message is gone (`Message` with None) or moved
    /// (`ContentMoved`); the message's own record, rewritten by every lease, does not carry it.
    Content {
        at: ContentKey,
        content: Content,
        /// Its queue asks for encryption at rest (`QueueSettings::encrypted_at_rest`): the
        /// store seals it. A content keeps what it was when it moves.
        sealed: bool,
    },
    /// A message whose content the store keeps moved to another queue: the content is now
    /// under `to`. Comes before the changes that delete the message at `from`.
    ContentMoved {
        from: ContentKey,
        to: ContentKey,
    },
    /// A message now stands so, with its id, or (None) is gone (its content with it).
    Message {
        queue_id: u64,
        key: MsgKey,
        message: Option<([u8; 16], StoredMessage)>,
    },
    /// A queue's stripe's lease measurements now stand so.
    Metrics {
        queue_id: u64,
        stripe: u32,
        record: Box<MetricsRecord>,
    },
    /// A FIFO deduplication id is remembered so, or (None) forgotten.
    Dedup {
        queue_id: u64,
        key: DedupKey,
        original: Option<Original>,
    },
}

/// What a store hands back on restart.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub engine: Option<EngineRecord>,
    pub queues: Vec<QueueRecord>,
    /// Queue id, key, message id, message.
    pub messages: Vec<(u64, MsgKey, [u8; 16], StoredMessage)>,
    pub dedup: Vec<(u64, DedupKey, Original)>,
    /// Queue id, stripe and its lease measurements.
    pub metrics: Vec<(u64, u32, MetricsRecord)>,
}

impl Queue {
    fn record(&self, name: &str) -> QueueRecord {
        QueueRecord {
            name: name.to_string(),
            meta: self.meta.clone(),
            next_seq: self.next_seq(),
            stripe: self.stripe_index(),
        }
    }

    pub(super) fn drain_changes(&mut self, name: &str, now: u64, out: &mut Vec<Change>) {
        if std::mem::take(&mut self.changes.meta) {
            out.push(Change::Queue(Box::new(self.record(name))));
        }
        self.drain_metrics(now, false, out);
        let mut keys = std::mem::take(&mut self.changes.messages);
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            if let Some(content) = self.hand_over_content(key) {
                out.push(Change::Content {
                    at: self.content_key(key),
                    content,
                    sealed: self.meta.settings.encrypted_at_rest(),
                });
            }
            let message = self
                .message(key)
                .map(|m| (self.message_id(key, m), m.clone()));
            out.push(Change::Message {
                queue_id: self.meta.id,
                key,
                message,
            });
        }
        for key in std::mem::take(&mut self.changes.dedup) {
            let original = self.fifo_original(&key);
            out.push(Change::Dedup {
                queue_id: self.meta.id,
                key,
                original,
            });
        }
    }
}

impl Queue {
    /// The measurements, when they changed and are due (or `force`d).
    fn drain_metrics(&mut self, now: u64, force: bool, out: &mut Vec<Change>) {
        if !self.changes.enabled {
            return;
        }
        if let Some(record) = self.metrics.take_record(now, force) {
            out.push(Change::Metrics {
                queue_id: self.meta.id,
                stripe: self.stripe_index(),
                record: Box::new(record),
            });
        }
    }
}

impl Engine {
    /// Every queue's measurements not yet handed to a store, whether due or not: for a
    /// server about to stop.
    pub fn take_all_metrics(&mut self) -> Vec<Change> {
        let now = self.clock.now_ms();
        let mut out = Vec::new();
        for queue in self.queues.values_mut().flat_map(QueueCell::stripes_mut) {
            queue.drain_metrics(now, true, &mut out);
        }
        out
    }

    /// Everything that changed since the last call, in the order a store must apply it.
    /// Empty unless the engine was configured with `track_changes`.
    pub fn take_changes(&mut self) -> Vec<Change> {
        let mut out = std::mem::take(&mut self.pending);
        if std::mem::take(&mut self.engine_dirty) {
            out.push(Change::Engine(self.engine_record()));
        }
        let now = self.clock.now_ms();
        for name in std::mem::take(&mut self.dirty_queues) {
            if let Some(cell) = self.queues.get_mut(&name) {
                for queue in cell.stripes_mut() {
                    queue.drain_changes(&name, now, &mut out);
                }
            }
        }
        out
    }

    fn engine_record(&self) -> EngineRecord {
        let mut deleted_at: Vec<(String, u64)> = self
            .deleted_at
            .iter()
            .map(|(n, at)| (n.clone(), *at))
            .collect();
        deleted_at.sort();
        EngineRecord {
            receipt_key: self.config.receipt_key,
            next_queue_id: self.next_queue_id,
            deleted_at,
            tasks: self.tasks.clone(),
        }
    }

    /// Hands every content the engine still holds to the store: after a restore from a
    /// store that kept contents inside message records (data files written before contents
    /// had records of their own), so those records are rewritten without them.
    pub fn hand_over_contents(&mut self) {
        if !self.config.track_changes {
            return;
        }
        for (name, cell) in &mut self.queues {
            if cell
                .stripes_mut()
                .map(|q| q.mark_held_contents())
                .sum::<usize>()
                > 0
            {
                self.dirty_queues.insert(name.clone());
            }
        }
    }

    /// Rebuilds an engine from a store's records. The stored receipt key wins over the
    /// configured one, so handles issued before the restart still open.
    pub fn restore(clock: Arc<dyn Clock>, config: EngineConfig, mut snapshot: Snapshot) -> Engine {
        let messages = std::mem::take(&mut snapshot.messages);
        let mut restoring = Engine::restoring(clock, config, snapshot);
        for (queue_id, key, id, message) in messages {
            restoring.message(queue_id, key, id, message);
        }
        restoring.finish()
    }

    /// Starts rebuilding an engine from a store's records but its messages, which the store
    /// then hands over one by one (`Restoring::message`), so a restart never holds them all
    /// in a list beside the engine.
    pub fn restoring(clock: Arc<dyn Clock>, mut config: EngineConfig, head: Snapshot) -> Restoring {
        let tracking = config.track_changes;
        if let Some(record) = &head.engine {
            config.receipt_key = record.receipt_key;
        }
        config.track_changes = false;
        let mut engine = Engine::new(clock, config);
        if let Some(record) = head.engine {
            engine.next_queue_id = record.next_queue_id;
            engine.deleted_at = record.deleted_at.into_iter().collect();
            engine.tasks = record.tasks;
        }
        let mut by_id: HashMap<u64, String> = HashMap::new();
        let mut records: BTreeMap<u64, BTreeMap<u32, QueueRecord>> = BTreeMap::new();
        for record in head.queues {
            records
                .entry(record.meta.id)
                .or_default()
                .insert(record.stripe, record);
        }
        for (id, mut stripes) in records {
            // Without its head's record the queue was deleted; the rest is left over.
            let Some(head) = stripes.remove(&0) else {
                continue;
            };
            by_id.insert(id, head.name.clone());
            engine.next_queue_id = engine.next_queue_id.max(id + 1);
            let name = head.name.clone();
            let (head, others) = Queue::from_records(head, stripes, &engine.sealer);
            engine.insert_queue(name, QueueCell::new(head, others));
        }
        for (queue_id, stripe, record) in &head.metrics {
            if let Some(cell) = by_id.get(queue_id).and_then(|n| engine.queues.get_mut(n)) {
                if (*stripe as usize) < cell.count() {
                    cell.stripe_mut(*stripe as usize).metrics = LeaseMetrics::from_record(record);
                }
            }
        }
        let mut dedup = head.dedup;
        dedup.sort_by_key(|(_, _, original)| original.expires_ms);
        for (queue_id, key, original) in dedup {
            if let Some(cell) = by_id.get(&queue_id).and_then(|n| engine.queues.get_mut(n)) {
                // Only FIFO queues deduplicate, and they have one stripe.
                cell.stripe_mut(0).restore_dedup(key, original);
            }
        }
        Restoring {
            engine,
            by_id,
            tracking,
        }
    }
}

/// An engine being rebuilt (`Engine::restoring`): its queues are there, its messages arrive.
pub struct Restoring {
    engine: Engine,
    by_id: HashMap<u64, String>,
    tracking: bool,
}

impl Restoring {
    /// Puts back one stored message; one of a queue that no longer exists is skipped.
    pub fn message(&mut self, queue_id: u64, key: MsgKey, id: [u8; 16], message: StoredMessage) {
        let name = self.by_id.get(&queue_id);
        if let Some(cell) = name.and_then(|n| self.engine.queues.get_mut(n)) {
            let stripe = stripe_of(key.seq, cell.count() as u32);
            cell.stripe_mut(stripe).restore_message(key, id, message);
        }
    }

    /// The rebuilt engine, recording changes again if it was configured to.
    pub fn finish(self) -> Engine {
        let mut engine = self.engine;
        engine.config.track_changes = self.tracking;
        for cell in engine.queues.values_mut() {
            cell.stripes_mut()
                .for_each(|queue| queue.changes.enabled = self.tracking);
            cell.refresh();
        }
        engine
    }
}

impl Queue {
    /// A queue's head and the stripes that have records: the head's says what is the
    /// queue's own; each stripe keeps its own counters and numbering. A stripe without a
    /// record was never made (or the file was written before its queue had stripes): it is
    /// made when first needed.
    fn from_records(
        head: QueueRecord,
        others: BTreeMap<u32, QueueRecord>,
        sealer: &ReceiptSealer,
    ) -> (Queue, Vec<Queue>) {
        let head_seq = head.next_seq;
        let mut first = Queue::restored(head.meta, sealer.clone());
        first.set_next_seq(head_seq);
        let count = first.meta.stripes.max(1);
        let others = others
            .into_iter()
            .filter(|(index, _)| (1..count).contains(index))
            .map(|(index, record)| {
                let mut stripe = Queue::stripe_of_head(&first, index);
                stripe.meta.stats = record.meta.stats;
                stripe.set_next_seq(record.next_seq);
                stripe
            })
            .collect();
        (first, others)
    }
}

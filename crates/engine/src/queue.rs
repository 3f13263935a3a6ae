//! One queue's state machine: stored messages, the ready set, the timer index, lease rules,
//! and for FIFO queues the group order (see `fifo.rs`).
//!
//! Invariants:
//! - every stored message is in exactly one state; Delayed and InFlight messages are in
//!   `timers` under the instant that state ends; Ready messages of a standard queue are in
//!   `ready`, and a FIFO queue's Ready messages are reached through their group;
//! - `in_flight` and `delayed` count the messages in those states;
//! - `messages` is ordered by (send time, sequence number), so its first entry is the oldest
//!   and retention expiry only ever looks at the front.
//!
//! Every operation first calls `tick(now)`, which moves due timers to Ready and drops expired
//! messages: amortised O(log n) per event, never a scan of the queue.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub use crate::counters::QueueStats;
use crate::error::Result;
use crate::fifo::{content_deduplication_id, DedupKey, FifoState, Original, FIFO_WINDOW_MS};
use crate::handout::{Accepted, Drafted};
use crate::lease_stats::{DeleteSeen, LeaseMetrics};
use crate::message::{
    format_message_id, handed_out, Content, ContentKey, Delivery, Extras, MsgKey, NewMessage,
    Peeked, State, StoredMessage,
};
use crate::receipt::{Receipt, ReceiptSealer};
use crate::rules::{self, ChangeKind, Handling, LeaseMode, Take};
use crate::settings::QueueSettings;
use crate::table::MessageTable;

mod invariants;

/// What a delete did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeleteOutcome {
    /// The message left the queue.
    pub removed: bool,
    /// The handle's lease had already expired when the delete arrived.
    pub late: bool,
}

/// What one call to `Queue::receive` asks for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReceiveParams<'a> {
    pub max_messages: usize,
    pub visibility_s: u32,
    /// Messages received this many times go to the dead-letter queue instead.
    pub max_receive_count: Option<u32>,
    /// FIFO only: a retried receive with the same id gets the same messages back.
    pub attempt_id: Option<&'a str>,
}

/// The approximate counts that GetQueueAttributes reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueCounts {
    pub visible: usize,
    pub not_visible: usize,
    pub delayed: usize,
}

/// The lease a receive hands out.
struct Lease {
    now: u64,
    until: u64,
    max_receive_count: Option<u32>,
}

/// What one receive has gathered so far.
#[derive(Default)]
struct Batch {
    deliveries: Vec<Drafted>,
    dead: Vec<(MsgKey, StoredMessage)>,
    leased: Vec<(MsgKey, u32)>,
}

/// What changed in a queue since a store last took its changes. Only kept when a store is
/// listening (`enabled`); otherwise nothing is recorded.
#[derive(Default)]
pub(crate) struct Changes {
    pub enabled: bool,
    pub meta: bool,
    pub messages: Vec<MsgKey>,
    pub dedup: Vec<DedupKey>,
}

/// What a purge or a queue deletion took out, still to be freed (`Engine::take_removed`).
pub struct Removed {
    _held: Box<dyn Send + Sync>,
}

impl Removed {
    pub(crate) fn new(held: impl Send + Sync + 'static) -> Removed {
        Removed {
            _held: Box::new(held),
        }
    }
}

/// What a queue is apart from its messages: held by `Queue`, and written whole in its
/// `QueueRecord`, so the two cannot drift apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueMeta {
    pub id: u64,
    pub settings: QueueSettings,
    pub tags: BTreeMap<String, String>,
    pub created_ms: u64,
    pub modified_ms: u64,
    pub last_purge_ms: Option<u64>,
    /// Messages numbered below this were purged: a store may still hold some of them while
    /// it deletes them in the background, and a restart skips them.
    pub purged_below_seq: u64,
    pub stats: QueueStats,
}

pub(crate) struct Queue {
    pub meta: QueueMeta,
    /// Seals receipt handles and derives message ids.
    sealer: ReceiptSealer,
    pub changes: Changes,
    pub metrics: LeaseMetrics,
    messages: MessageTable,
    ready: BTreeSet<MsgKey>,
    timers: BTreeSet<(u64, MsgKey)>,
    fifo: FifoState,
    next_seq: u64,
    /// The last ready rank handed out; after a restart, the largest one stored.
    ready_rank: u64,
    in_flight: usize,
    delayed: usize,
}

impl Queue {
    pub fn new(id: u64, settings: QueueSettings, now: u64, sealer: ReceiptSealer) -> Self {
        Queue::restored(
            QueueMeta {
                id,
                settings,
                tags: BTreeMap::new(),
                created_ms: now,
                modified_ms: now,
                last_purge_ms: None,
                purged_below_seq: 0,
                stats: QueueStats::default(),
            },
            sealer,
        )
    }

    /// A queue of no messages yet, as `meta` says.
    pub fn restored(meta: QueueMeta, sealer: ReceiptSealer) -> Self {
        Queue {
            meta,
            sealer,
            changes: Changes::default(),
            metrics: LeaseMetrics::default(),
            messages: MessageTable::default(),
            ready: BTreeSet::new(),
            timers: BTreeSet::new(),
            fifo: FifoState::default(),
            next_seq: 1,
            ready_rank: 0,
            in_flight: 0,
            delayed: 0,
        }
    }

    /// The group a message is ordered in: FIFO queues only.
    fn fifo_group(&self, key: MsgKey) -> Option<Arc<str>> {
        if !self.meta.settings.fifo {
            return None;
        }
        self.messages.get(&key).and_then(|m| m.group().cloned())
    }

    fn link(&mut self, key: MsgKey, (state, until): (State, u64), group: Option<&Arc<str>>) {
        match state {
            State::Ready if group.is_none() => {
                self.ready.insert(key);
            }
            State::Ready => {}
            State::Delayed => {
                self.delayed += 1;
                self.timers.insert((until, key));
            }
            State::InFlight => {
                self.in_flight += 1;
                self.timers.insert((until, key));
            }
        }
    }

    fn unlink(&mut self, key: MsgKey, (state, until): (State, u64)) {
        match state {
            State::Ready => {
                self.ready.remove(&key);
            }
            State::Delayed => {
                self.delayed -= 1;
                self.timers.remove(&(until, key));
            }
            State::InFlight => {
                self.in_flight -= 1;
                self.timers.remove(&(until, key));
            }
        }
    }

    /// Re-lists a FIFO group after anything about it changed: listed while its head is Ready.
    fn refresh_group(&mut self, group: &Arc<str>) {
        let listing = self.fifo.head(group).and_then(|key| {
            let head = self.messages.get(&key)?;
            (head.state == State::Ready).then_some((head.until_ms, key))
        });
        self.fifo.list(group, listing);
    }

    /// A number larger than every ready rank handed out before (see `StoredMessage::until_ms`).
    fn next_ready_rank(&mut self) -> u64 {
        self.ready_rank += 1;
        self.ready_rank
    }

    /// Moves a stored message to a new state that ends at `until` (Ready takes a fresh ready
    /// rank instead), keeping the indexes true.
    fn set_state(&mut self, key: MsgKey, state: State, until: u64) {
        let until = if state == State::Ready {
            self.next_ready_rank()
        } else {
            until
        };
        let group = self.fifo_group(key);
        let Some(message) = self.messages.get_mut(&key) else {
            return;
        };
        let old = (message.state, message.until_ms);
        (message.state, message.until_ms) = (state, until);
        self.unlink(key, old);
        self.link(key, (state, until), group.as_ref());
        if let Some(g) = group {
            self.refresh_group(&g);
        }
    }

    fn mark(&mut self, key: MsgKey) {
        if self.changes.enabled {
            self.changes.messages.push(key);
        }
    }

    /// Notes that the queue's own record (settings, counters, sequence) changed.
    pub fn touch(&mut self) {
        self.changes.meta |= self.changes.enabled;
    }

    /// Stores a message that arrives now: a Ready one takes a fresh ready rank.
    fn insert(&mut self, key: MsgKey, mut message: StoredMessage) {
        if message.state == State::Ready {
            message.until_ms = self.next_ready_rank();
        }
        self.insert_as_is(key, message);
    }

    fn insert_as_is(&mut self, key: MsgKey, message: StoredMessage) {
        self.mark(key);
        let state = (message.state, message.until_ms);
        let group = self
            .meta
            .settings
            .fifo
            .then(|| message.group().cloned())
            .flatten();
        self.messages.insert(key, message);
        if let Some(g) = &group {
            self.fifo.add_member(g, key);
        }
        self.link(key, state, group.as_ref());
        if let Some(g) = group {
            self.refresh_group(&g);
        }
    }

    fn remove(&mut self, key: MsgKey) -> Option<StoredMessage> {
        let group = self.fifo_group(key);
        let message = self.messages.remove(&key)?;
        self.mark(key);
        self.unlink(key, (message.state, message.until_ms));
        if let Some(g) = group {
            self.fifo.remove_member(&g, key);
            self.refresh_group(&g);
        }
        Some(message)
    }

    /// Brings the queue up to `now`: due delays and leases end, expired messages go.
    pub fn tick(&mut self, now: u64) {
        while let Some(&(due, key)) = self.timers.first() {
            if due > now {
                break;
            }
            if self
                .messages
                .get(&key)
                .is_some_and(|m| m.lease().ran_out(now))
            {
                // Counted once: the store learns the lease is over with the counter.
                self.meta.stats.leases_expired += 1;
                self.mark(key);
                self.touch();
            }
            self.set_state(key, State::Ready, 0);
        }
        let retention_ms = u64::from(self.meta.settings.retention_s) * 1000;
        while let Some(key) = self.messages.first_key() {
            if key.sent_ms + retention_ms > now {
                break;
            }
            self.remove(key);
        }
        let forgotten = self.fifo.expire(now);
        if self.changes.enabled {
            self.changes.dedup.extend(forgotten);
        }
        // Every operation starts here, so this also checks what the one before left.
        self.debug_check();
    }

    pub fn counts(&self) -> QueueCounts {
        QueueCounts {
            visible: self.messages.len() - self.in_flight - self.delayed,
            not_visible: self.in_flight,
            delayed: self.delayed,
        }
    }

    /// The next instant at which a delay or lease ends, if any.
    pub fn next_due(&self) -> Option<u64> {
        self.timers.first().map(|&(due, _)| due)
    }

    fn next_key(&mut self, sent_ms: u64) -> MsgKey {
        let seq = self.next_seq;
        self.next_seq += 1;
        MsgKey { sent_ms, seq }
    }

    /// Stores a validated message. On a FIFO queue a duplicate within the deduplication
    /// window is accepted and answered with the original's id, and nothing is stored.
    pub fn send(&mut self, now: u64, message: NewMessage) -> Accepted {
        let fifo = self.meta.settings.fifo;
        let group: Option<Arc<str>> = message.group_id.as_deref().map(Arc::from);
        let dedup_id: Option<Arc<str>> = if fifo {
            Some(match &message.deduplication_id {
                Some(explicit) => Arc::from(explicit.as_str()),
                None => Arc::from(content_deduplication_id(&message.body).as_str()),
            })
        } else {
            None
        };
        let dedup_key = dedup_id.clone().map(|d| {
            let scope = self
                .meta
                .settings
                .dedup_per_group
                .then(|| group.clone())
                .flatten();
            (scope, d)
        });
        if let Some(original) = dedup_key.as_ref().and_then(|k| self.fifo.original(k)) {
            return Accepted {
                id: Some(original.message_id),
                queue_id: self.meta.id,
                seq: original.seq,
                fifo,
            };
        }
        let key = self.next_key(now);
        // Only a FIFO queue needs the id now (to answer duplicates with); otherwise it is
        // derived once the queue's lock is let go (`Accepted::sent`).
        let mut id = None;
        if let Some(k) = dedup_key {
            let message_id = self.sealer.message_id(self.meta.id, key.seq);
            id = Some(message_id);
            let original = Original {
                message_id,
                seq: key.seq,
                expires_ms: now + FIFO_WINDOW_MS,
            };
            self.fifo.remember(k.clone(), original);
            if self.changes.enabled {
                self.changes.dedup.push(k);
            }
        }
        // FIFO queues have no per-message delay: the queue's applies, whatever the send says.
        let delay = match message.delay_s {
            Some(delay) if !self.meta.settings.fifo => delay,
            _ => self.meta.settings.delay_s,
        };
        let (state, until_ms) = if delay == 0 {
            (State::Ready, 0)
        } else {
            (State::Delayed, now + u64::from(delay) * 1000)
        };
        let system_attributes =
            (!message.system_attributes.is_empty()).then(|| Arc::new(message.system_attributes));
        let extras = Extras {
            group,
            deduplication_id: dedup_id,
            system_attributes,
            dead_letter_source: None,
            message_id: None,
        };
        let has_extras = extras.group.is_some() || extras.system_attributes.is_some();
        self.insert(
            key,
            StoredMessage {
                content: Some(Content {
                    body: message.body.into(),
                    attributes: (!message.attributes.is_empty())
                        .then(|| Arc::new(message.attributes)),
                }),
                extras: has_extras.then(|| Box::new(extras)),
                first_receive_ms: 0,
                lease_start_ms: 0,
                until_ms,
                receive_count: 0,
                extensions: 0,
                late_deleted: false,
                state,
            },
        );
        self.meta.stats.sent += 1;
        self.debug_check();
        Accepted {
            id,
            queue_id: self.meta.id,
            seq: key.seq,
            fifo,
        }
    }

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
        self.insert(key, message);
        key
    }

    /// Takes in a message moved by a message move task: it starts afresh, with no receives,
    /// so it does not bounce straight back to the dead-letter queue.
    pub fn accept_moved(&mut self, now: u64, sent_ms: u64, mut message: StoredMessage) -> MsgKey {
        let key = self.next_key(if self.meta.settings.fifo {
            now
        } else {
            sent_ms
        });
        message.state = State::Ready;
        message.receive_count = 0;
        message.first_receive_ms = 0;
        if let Some(extras) = message.extras.as_mut() {
            extras.dead_letter_source = None;
        }
        self.insert(key, message);
        key
    }

    /// Whether a receive of up to `max_messages` now could move a message to the dead-letter
    /// queue (one it would take was received `max_receive_count` times already), so that a
    /// receive that cannot does without the dead-letter queue's lock. A standard queue's
    /// receive takes the first ready messages, and takes exactly those if none is moved; a
    /// FIFO queue's, by group, is not looked into: it could.
    pub fn may_dead_letter(&self, max_messages: usize, max_receive_count: u32) -> bool {
        self.meta.settings.fifo
            || self.ready.iter().take(max_messages).any(|key| {
                self.messages
                    .get(key)
                    .is_some_and(|m| m.receive_count >= max_receive_count)
            })
    }

    /// Leases up to `max_messages` ready messages, oldest first (FIFO: by group, in order).
    /// Messages past maxReceiveCount are taken out and returned for the dead-letter queue.
    pub fn receive(
        &mut self,
        now: u64,
        params: ReceiveParams,
    ) -> (Vec<Drafted>, Vec<(MsgKey, StoredMessage)>) {
        if let Some(replayed) = self.replay_attempt(now, &params) {
            return (replayed, Vec::new());
        }
        let lease = Lease {
            now,
            until: rules::lease_end(now, params.visibility_s),
            max_receive_count: params.max_receive_count,
        };
        let mut batch = Batch::default();
        'outer: while batch.leased.len() < params.max_messages {
            if self.meta.settings.fifo {
                // One group at a time, in order, as far as its messages are ready.
                let Some(group) = self.fifo.pop_ready_group() else {
                    break;
                };
                let mut cursor = None;
                while let Some(key) = self.fifo.next_member(&group, cursor) {
                    if batch.leased.len() == params.max_messages {
                        break 'outer;
                    }
                    cursor = Some(key);
                    if !self.take(key, &lease, &mut batch) {
                        break;
                    }
                }
            } else {
                let Some(&key) = self.ready.first() else {
                    break;
                };
                self.take(key, &lease, &mut batch);
            }
        }
        let Batch {
            deliveries,
            dead,
            leased,
        } = batch;
        // Only a receive that leased something is replayed: an empty answer pinned to its
        // attempt id would keep a long poll (which asks again with the same id) empty for
        // its whole wait.
        if let (Some(id), true, false) = (
            params.attempt_id,
            self.meta.settings.fifo,
            leased.is_empty(),
        ) {
            self.fifo.record_attempt(now, id, leased);
        }
        self.debug_check();
        (deliveries, dead)
    }

    /// Leases one Ready message into `batch`, or dead-letters it. False if it is not Ready.
    fn take(&mut self, key: MsgKey, lease: &Lease, batch: &mut Batch) -> bool {
        let Some(message) = self.messages.get_mut(&key) else {
            return false;
        };
        if message.state != State::Ready {
            return false;
        }
        let Take::Lease { receive_no, first } =
            rules::take(message.receive_count, lease.max_receive_count)
        else {
            let (receives, late) = (message.receive_count, message.late_deleted);
            self.metrics
                .count_dead_letter(&mut self.meta.stats, receives, late);
            batch
                .dead
                .push((key, self.take_message(key).expect("stored")));
            return true;
        };
        message.receive_count = receive_no;
        message.lease_start_ms = lease.now;
        message.extensions = 0;
        if first {
            message.first_receive_ms = lease.now;
        }
        self.metrics
            .count_lease(&mut self.meta.stats, lease.now, key.sent_ms, first);
        self.set_state(key, State::InFlight, lease.until);
        self.mark(key);
        batch.leased.push((key, receive_no));
        batch.deliveries.push(self.delivery(key, receive_no));
        true
    }

    /// A FIFO receive retried with the same ReceiveRequestAttemptId within five minutes gets
    /// the same messages and handles back, with the lease restarted.
    fn replay_attempt(&mut self, now: u64, params: &ReceiveParams) -> Option<Vec<Drafted>> {
        let items = self.fifo.attempt(params.attempt_id?)?.to_vec();
        let until = rules::lease_end(now, params.visibility_s);
        let mut out = Vec::new();
        for (key, receive_no) in items {
            let still_ours = self
                .messages
                .get(&key)
                .is_some_and(|m| m.receive_count == receive_no && m.state != State::Delayed);
            if still_ours {
                self.set_state(key, State::InFlight, until);
                self.mark(key);
                out.push(self.delivery(key, receive_no));
            }
        }
        Some(out)
    }

    /// Where a store keeps the content of the message at `key`.
    pub(crate) fn content_key(&self, key: MsgKey) -> ContentKey {
        ContentKey {
            queue_id: self.meta.id,
            key,
        }
    }

    /// A stored message's id: kept from the queue it was first sent to, or derived.
    pub(crate) fn message_id(&self, key: MsgKey, message: &StoredMessage) -> [u8; 16] {
        message
            .extras
            .as_ref()
            .and_then(|e| e.message_id)
            .unwrap_or_else(|| self.sealer.message_id(self.meta.id, key.seq))
    }

    /// What a receive hands out of the message at `key`: its id and receipt handle are
    /// written out later (`Drafted::finish`), outside the queue's lock.
    fn delivery(&self, key: MsgKey, receive_no: u32) -> Drafted {
        let message = &self.messages[&key];
        let extras = message.extras.as_deref();
        let (body, attributes, unread) =
            handed_out(message.content.as_ref(), self.content_key(key));
        let delivery = Delivery {
            message_id: String::new(),
            receipt_handle: String::new(),
            body,
            attributes,
            unread,
            system_attributes: extras.and_then(|e| e.system_attributes.clone()),
            sent_ms: key.sent_ms,
            first_receive_ms: message.first_received().unwrap_or(key.sent_ms),
            receive_count: receive_no,
            group_id: extras.and_then(|e| e.group.clone()),
            deduplication_id: extras.and_then(|e| e.deduplication_id.clone()),
            sequence_number: self.meta.settings.fifo.then_some(key.seq),
            dead_letter_source_arn: extras.and_then(|e| e.dead_letter_source.clone()),
        };
        Drafted {
            delivery,
            id: extras.and_then(|e| e.message_id),
            receipt: Receipt {
                received_ms: message.lease_start_ms,
                queue_id: self.meta.id,
                key,
                receive_no,
            },
        }
    }

    pub fn delete(
        &mut self,
        now: u64,
        receipt: &Receipt,
        handle: &str,
        mode: LeaseMode,
    ) -> Result<DeleteOutcome> {
        let handling = Handling::of(&self.meta.settings, mode);
        let seen = self.messages.get(&receipt.key).map(|m| DeleteSeen {
            deletion: rules::delete(handling, &m.lease(), receipt.receive_no, now),
            receive_count: m.receive_count,
            extensions: m.extensions,
        });
        self.metrics
            .count_delete(&mut self.meta.stats, now, receipt, seen);
        let Some(DeleteSeen { deletion, .. }) = seen else {
            // Deleting twice, or after retention dropped it, succeeds as on AWS.
            return Ok(DeleteOutcome {
                removed: false,
                late: false,
            });
        };
        if deletion.late {
            // Marked for the DLQ mirage; an on-time delete skips the second lookup.
            if let Some(message) = self.messages.get_mut(&receipt.key) {
                message.late_deleted = true;
            }
        }
        if let Some(refusal) = deletion.refusal {
            self.mark(receipt.key);
            return Err(refusal.error(handle));
        }
        if deletion.removes {
            self.remove(receipt.key);
        } else {
            self.mark(receipt.key);
        }
        Ok(DeleteOutcome {
            removed: deletion.removes,
            late: deletion.late,
        })
    }

    pub fn change_visibility(
        &mut self,
        now: u64,
        receipt: &Receipt,
        handle: &str,
        timeout_s: u32,
        mode: LeaseMode,
    ) -> Result<()> {
        let handling = Handling::of(&self.meta.settings, mode);
        let lease = self.messages.get(&receipt.key).map(StoredMessage::lease);
        let change =
            rules::change_visibility(handling, lease.as_ref(), receipt.receive_no, now, timeout_s)
                .map_err(|refusal| refusal.error(handle))?;
        match change.kind {
            ChangeKind::Released => self.meta.stats.released_early += 1,
            ChangeKind::Extended => {
                self.meta.stats.extensions += 1;
                if let Some(m) = self.messages.get_mut(&receipt.key) {
                    m.extensions = m.extensions.saturating_add(1);
                }
            }
            ChangeKind::Other => {}
        }
        if change.released_now {
            self.set_state(receipt.key, State::Ready, 0);
        } else {
            self.set_state(receipt.key, State::InFlight, change.until_ms);
        }
        self.mark(receipt.key);
        Ok(())
    }

    /// Drops every message; stats, settings and FIFO deduplication ids stay.
    /// Empties the queue and hands back what it held, for the caller to drop: freeing a
    /// million messages takes long enough to matter where it happens.
    pub fn purge(&mut self, now: u64) -> Removed {
        // The store drops the whole range; per-message changes would be redundant.
        self.changes.messages.clear();
        self.in_flight = 0;
        self.delayed = 0;
        self.meta.last_purge_ms = Some(now);
        self.meta.purged_below_seq = self.next_seq;
        // AWS forgets the deduplication window with the messages: a purged id may be sent again.
        let forgotten = self.fifo.forget_all();
        if self.changes.enabled {
            self.changes.dedup.extend(forgotten);
        }
        Removed::new((
            std::mem::take(&mut self.messages),
            std::mem::take(&mut self.ready),
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
            *self.ready.range(..=limit).next()?
        };
        let source = self.messages[&key]
            .extras
            .as_ref()
            .and_then(|e| e.dead_letter_source.clone());
        Some((key, source))
    }

    /// Takes a message out of the queue, to move it elsewhere: it keeps its id there.
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

    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    pub(crate) fn set_next_seq(&mut self, next: u64) {
        self.next_seq = next;
    }

    pub(crate) fn message(&self, key: MsgKey) -> Option<&StoredMessage> {
        self.messages.get(&key)
    }

    pub(crate) fn fifo_original(&self, key: &DedupKey) -> Option<Original> {
        self.fifo.original(key)
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
        self.next_seq = self.next_seq.max(key.seq + 1);
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
            self.insert_as_is(key, message);
        } else {
            self.insert(key, message);
        }
    }

    pub(crate) fn restore_dedup(&mut self, key: DedupKey, original: Original) {
        self.fifo.remember(key, original);
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

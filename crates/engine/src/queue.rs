//! One queue's state machine (of a standard queue split into stripes, one stripe's:
//! `engine/stripes.rs`): stored messages, the ready set, the timer index, lease rules, and
//! for FIFO queues the group order (see `fifo.rs`). Deletes and visibility changes are in
//! `queue/settle.rs`; arrivals from other queues, purges, takes and looks in `queue/moves.rs`;
//! numbering and restoring in `queue/numbering.rs`.
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
use crate::fifo::{content_deduplication_id, DedupKey, FifoState, Original, FIFO_WINDOW_MS};
use crate::handout::{Accepted, Drafted};
use crate::lease_stats::LeaseMetrics;
use crate::message::{
    handed_out, Content, ContentKey, Delivery, Extras, MsgKey, NewMessage, State, StoredMessage,
};
use crate::quota::InFlightCount;
use crate::receipt::{Receipt, ReceiptSealer};
use crate::rules::{self, Take};
use crate::settings::QueueSettings;
use crate::table::MessageTable;
use crate::tenants::Tenants;

mod fair;
mod invariants;
mod moves;
pub(crate) mod numbering;
mod receive;
mod settle;

pub(crate) use receive::{Pick, ReceiveParams};

/// What a delete did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeleteOutcome {
    /// The message left the queue.
    pub removed: bool,
    /// The handle's lease had already expired when the delete arrived.
    pub late: bool,
}

/// The approximate counts that GetQueueAttributes reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueCounts {
    pub visible: usize,
    pub not_visible: usize,
    pub delayed: usize,
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
    /// How many stripes a standard queue is split into (`engine/stripes.rs`), fixed at its
    /// creation: each holds its own share of the messages, numbered apart, and its own
    /// counters (`stats` are this stripe's) and measurements. 1 for a FIFO queue.
    pub stripes: u32,
}

pub(crate) struct Queue {
    pub meta: QueueMeta,
    /// Seals receipt handles and derives message ids.
    sealer: ReceiptSealer,
    pub changes: Changes,
    pub metrics: LeaseMetrics,
    messages: MessageTable,
    /// Ready messages of a standard queue, but for those `noisy_ready` holds.
    ready: BTreeSet<MsgKey>,
    /// Ready messages of tenants found noisy, by tenant (`fair.rs`): moved here when a
    /// receive meets them at the front of `ready`, and back when their tenant is quiet.
    noisy_ready: BTreeMap<Arc<str>, BTreeSet<MsgKey>>,
    /// Ready messages without a group: each a quiet tenant of its own (`fair.rs`).
    plain_ready: usize,
    timers: BTreeSet<(u64, MsgKey)>,
    fifo: FifoState,
    /// Which of the queue's `meta.stripes` stripes this is: it numbers its messages
    /// `index + 1`, then every `meta.stripes` on (`numbering.rs`).
    stripe: u32,
    next_seq: u64,
    /// The last ready rank handed out; after a restart, the largest one stored.
    ready_rank: u64,
    in_flight: usize,
    /// The in-flight count of the whole queue, shared by its stripes (`quota.rs`).
    flying: Arc<InFlightCount>,
    /// The whole queue's tenants, shared by its stripes (`tenants.rs`).
    tenants: Arc<Tenants>,
    delayed: usize,
    /// The latest instant an operation brought the queue up to (`tick`).
    now_ms: u64,
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
                stripes: 1,
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
            noisy_ready: BTreeMap::new(),
            plain_ready: 0,
            timers: BTreeSet::new(),
            fifo: FifoState::default(),
            stripe: 0,
            next_seq: 1,
            ready_rank: 0,
            in_flight: 0,
            flying: Arc::default(),
            tenants: Arc::default(),
            delayed: 0,
            now_ms: 0,
        }
    }

    /// The group a message is ordered in: FIFO queues only.
    fn fifo_group(&self, key: MsgKey) -> Option<Arc<str>> {
        if !self.meta.settings.fifo {
            return None;
        }
        self.messages.get(&key).and_then(|m| m.group().cloned())
    }

    /// Lists a message in its state's index and counts. `reserved`: a lease whose place in
    /// the queue's in-flight count its receive already took (`InFlightCount::try_reserve`).
    fn link(
        &mut self,
        key: MsgKey,
        (state, until): (State, u64),
        group: Option<&Arc<str>>,
        reserved: bool,
    ) {
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
                if !reserved {
                    self.flying.add(1);
                }
                self.timers.insert((until, key));
            }
        }
    }

    /// Takes a message out of its state's index and counts. `lease_goes_on`: it leaves one
    /// lease for another (a visibility change), so its place in the queue's in-flight count
    /// is kept rather than given up for a moment another stripe's receive could take.
    fn unlink(&mut self, key: MsgKey, (state, until): (State, u64), lease_goes_on: bool) {
        match state {
            State::Ready => {
                if !self.ready.remove(&key) {
                    self.forget_noisy_ready(key);
                }
            }
            State::Delayed => {
                self.delayed -= 1;
                self.timers.remove(&(until, key));
            }
            State::InFlight => {
                self.in_flight -= 1;
                if !lease_goes_on {
                    self.flying.sub(1);
                }
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
        self.set_state_reserved(key, state, until, false);
    }

    /// `set_state`, for a lease whose place in the in-flight count is already taken.
    fn set_state_reserved(&mut self, key: MsgKey, state: State, until: u64, reserved: bool) {
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
        let lease_start_ms = message.lease_start_ms;
        let plain = message.group().is_none();
        // A message with a group made the table active when it arrived: a queue that never
        // saw one does without.
        let tenant = match self.tenants.active() && !self.meta.settings.fifo {
            true => Some(message.group().cloned()),
            false => None,
        };
        (message.state, message.until_ms) = (state, until);
        let lease_goes_on = old.0 == State::InFlight && state == State::InFlight;
        // A lease already counted and a reservation for it would take two places.
        debug_assert!(
            !(reserved && lease_goes_on),
            "a reserved place for a live lease"
        );
        self.unlink(key, old, lease_goes_on);
        self.link(
            key,
            (state, until),
            group.as_ref(),
            reserved || lease_goes_on,
        );
        if let Some(g) = group {
            self.refresh_group(&g);
        }
        self.count_plain(plain, Some(old.0), Some(state));
        if let Some(tenant) = tenant {
            self.tenant_moved(tenant.as_ref(), Some(old), Some(state), lease_start_ms);
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
    fn insert(&mut self, key: MsgKey, mut message: StoredMessage, sent: bool) {
        if message.state == State::Ready {
            message.until_ms = self.next_ready_rank();
        }
        self.insert_as_is(key, message, sent);
    }

    /// Stores a message with its state as it is. `sent`: it arrives by a send (a tenant's
    /// last send is when fair queues let it go quiet: `tenants.rs`).
    fn insert_as_is(&mut self, key: MsgKey, message: StoredMessage, sent: bool) {
        self.mark(key);
        let state = (message.state, message.until_ms);
        let tenant = self.tenant_of(&message).cloned();
        self.count_plain(message.group().is_none(), None, Some(state.0));
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
        self.link(key, state, group.as_ref(), false);
        if let Some(g) = group {
            self.refresh_group(&g);
        }
        self.tenant_arrived(tenant.as_ref(), state.0, sent);
    }

    fn remove(&mut self, key: MsgKey) -> Option<StoredMessage> {
        let group = self.fifo_group(key);
        let message = self.messages.remove(&key)?;
        self.mark(key);
        self.unlink(key, (message.state, message.until_ms), false);
        if let Some(g) = group {
            self.fifo.remove_member(&g, key);
            self.refresh_group(&g);
        }
        self.count_plain(message.group().is_none(), Some(message.state), None);
        self.tenant_left(&message);
        Some(message)
    }

    /// Brings the queue up to `now`: due delays and leases end, expired messages go.
    pub fn tick(&mut self, now: u64) {
        self.now_ms = self.now_ms.max(now);
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

    /// Since when this queue has had a message to hand out, as far as its indexes say
    /// without a tick: its oldest ready message's send, or the next delay or lease to end
    /// (u64::MAX: nothing). What a receive over several stripes starts with the oldest of.
    pub fn waiting_since(&self) -> u64 {
        let ready = self.first_ready().map_or(u64::MAX, |k| k.sent_ms);
        ready.min(self.next_due().unwrap_or(u64::MAX))
    }

    /// Stores a validated message. On a FIFO queue a duplicate within the deduplication
    /// window is accepted and answered with the original's id, and nothing is stored.
    pub fn send(&mut self, now: u64, message: NewMessage) -> Accepted {
        self.now_ms = self.now_ms.max(now);
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
        crate::faults::point("a send, numbered but not stored");
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
            true,
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
}

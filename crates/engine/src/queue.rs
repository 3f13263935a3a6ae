//! One queue's state machine: stored messages, the ready set, the timer index, lease rules.
//!
//! Invariants:
//! - every stored message is in exactly one of `ready` (state Ready) or `timers` (Delayed or
//!   InFlight, keyed by the instant its state ends);
//! - `in_flight` and `delayed` count the messages in those states;
//! - sequence numbers grow with send time, so the first entry of `messages` is the oldest and
//!   retention expiry only ever looks at the front.
//!
//! Every operation first calls `tick(now)`, which moves due timers to `ready` and drops expired
//! messages: amortised O(log n) per event, never a scan of the queue.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::error::{EngineError, Result};
use crate::message::{format_message_id, Delivery, NewMessage, State, StoredMessage};
use crate::receipt::{Receipt, ReceiptSealer};
use crate::settings::{QueueSettings, MAX_VISIBILITY_TIMEOUT_S};

/// How receipt handles behave once their lease is over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LeaseMode {
    /// As real AWS behaves on standard queues: any handle ever issued still deletes.
    #[default]
    Aws,
    /// The contract the seed module teaches: only the current, unexpired lease counts.
    Strict,
}

/// What the engine has counted about a queue's leases since it was created.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub sent: u64,
    pub received: u64,
    pub deleted: u64,
    /// ReceiveMessage requests that returned nothing (a long poll counts once, at its end).
    pub empty_receives: u64,
    /// Leases that ran out without a delete: the message became receivable again.
    pub leases_expired: u64,
    /// Deletes whose lease had already expired: proof of duplicate work.
    pub late_deletes: u64,
}

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
pub struct ReceiveParams {
    pub max_messages: usize,
    pub visibility_s: u32,
}

pub(crate) struct Queue {
    pub id: u64,
    pub settings: QueueSettings,
    pub tags: BTreeMap<String, String>,
    pub created_ms: u64,
    pub modified_ms: u64,
    pub last_purge_ms: Option<u64>,
    pub stats: QueueStats,
    messages: BTreeMap<u64, StoredMessage>,
    ready: BTreeSet<u64>,
    timers: BTreeSet<(u64, u64)>,
    next_seq: u64,
    in_flight: usize,
    delayed: usize,
}

/// The approximate counts that GetQueueAttributes reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueCounts {
    pub visible: usize,
    pub not_visible: usize,
    pub delayed: usize,
}

impl Queue {
    pub fn new(id: u64, settings: QueueSettings, now: u64) -> Self {
        Queue {
            id,
            settings,
            tags: BTreeMap::new(),
            created_ms: now,
            modified_ms: now,
            last_purge_ms: None,
            stats: QueueStats::default(),
            messages: BTreeMap::new(),
            ready: BTreeSet::new(),
            timers: BTreeSet::new(),
            next_seq: 1,
            in_flight: 0,
            delayed: 0,
        }
    }

    fn link(&mut self, seq: u64, state: State) {
        match state {
            State::Ready => {
                self.ready.insert(seq);
            }
            State::Delayed { until } => {
                self.delayed += 1;
                self.timers.insert((until, seq));
            }
            State::InFlight { until } => {
                self.in_flight += 1;
                self.timers.insert((until, seq));
            }
        }
    }

    fn unlink(&mut self, seq: u64, state: State) {
        match state {
            State::Ready => {
                self.ready.remove(&seq);
            }
            State::Delayed { until } => {
                self.delayed -= 1;
                self.timers.remove(&(until, seq));
            }
            State::InFlight { until } => {
                self.in_flight -= 1;
                self.timers.remove(&(until, seq));
            }
        }
    }

    /// Moves a stored message to a new state, keeping the indexes true.
    fn set_state(&mut self, seq: u64, state: State) {
        let Some(message) = self.messages.get_mut(&seq) else {
            return;
        };
        let old = std::mem::replace(&mut message.state, state);
        self.unlink(seq, old);
        self.link(seq, state);
    }

    fn remove(&mut self, seq: u64) -> Option<StoredMessage> {
        let message = self.messages.remove(&seq)?;
        self.unlink(seq, message.state);
        Some(message)
    }

    /// Brings the queue up to `now`: due delays and leases end, expired messages go.
    pub fn tick(&mut self, now: u64) {
        while let Some(&(due, seq)) = self.timers.first() {
            if due > now {
                break;
            }
            if matches!(
                self.messages.get(&seq).map(|m| m.state),
                Some(State::InFlight { .. })
            ) {
                self.stats.leases_expired += 1;
            }
            self.set_state(seq, State::Ready);
        }
        let retention_ms = u64::from(self.settings.retention_s) * 1000;
        while let Some((&seq, message)) = self.messages.first_key_value() {
            if message.sent_ms + retention_ms > now {
                break;
            }
            self.remove(seq);
        }
    }

    pub fn counts(&self) -> QueueCounts {
        QueueCounts {
            visible: self.ready.len(),
            not_visible: self.in_flight,
            delayed: self.delayed,
        }
    }

    /// The next instant at which a delay or lease ends, if any.
    pub fn next_due(&self) -> Option<u64> {
        self.timers.first().map(|&(due, _)| due)
    }

    /// Stores a validated message and returns its id.
    pub fn send(&mut self, now: u64, message: NewMessage, id: [u8; 16]) -> String {
        let seq = self.next_seq;
        self.next_seq += 1;
        let delay = message.delay_s.unwrap_or(self.settings.delay_s);
        let state = if delay == 0 {
            State::Ready
        } else {
            State::Delayed {
                until: now + u64::from(delay) * 1000,
            }
        };
        let non_empty =
            |attrs: crate::MessageAttributes| (!attrs.is_empty()).then(|| Arc::new(attrs));
        self.messages.insert(
            seq,
            StoredMessage {
                id,
                body: message.body.into(),
                attributes: non_empty(message.attributes),
                system_attributes: non_empty(message.system_attributes),
                sent_ms: now,
                first_receive_ms: None,
                lease_start_ms: 0,
                receive_count: 0,
                state,
            },
        );
        self.link(seq, state);
        self.stats.sent += 1;
        format_message_id(id)
    }

    /// Leases up to `max_messages` ready messages, oldest first.
    pub fn receive(
        &mut self,
        now: u64,
        params: ReceiveParams,
        sealer: &ReceiptSealer,
    ) -> Vec<Delivery> {
        let until = now + u64::from(params.visibility_s) * 1000;
        let mut deliveries = Vec::with_capacity(params.max_messages.min(self.ready.len()));
        while deliveries.len() < params.max_messages {
            let Some(seq) = self.ready.pop_first() else {
                break;
            };
            let queue_id = self.id;
            let message = self
                .messages
                .get_mut(&seq)
                .expect("ready set names a stored message");
            message.receive_count += 1;
            message.lease_start_ms = now;
            let first_receive_ms = *message.first_receive_ms.get_or_insert(now);
            message.state = State::InFlight { until };
            let receipt = Receipt {
                queue_id,
                seq,
                receive_no: message.receive_count,
            };
            deliveries.push(Delivery {
                message_id: format_message_id(message.id),
                receipt_handle: sealer.seal(receipt),
                body: message.body.clone(),
                attributes: message.attributes.clone(),
                system_attributes: message.system_attributes.clone(),
                sent_ms: message.sent_ms,
                first_receive_ms,
                receive_count: message.receive_count,
            });
            self.in_flight += 1;
            self.timers.insert((until, seq));
        }
        self.stats.received += deliveries.len() as u64;
        deliveries
    }

    /// Whether the lease that `receipt` names is still the message's current, live lease.
    fn holds_live_lease(message: &StoredMessage, receipt: &Receipt) -> bool {
        receipt.receive_no == message.receive_count
            && matches!(message.state, State::InFlight { .. })
    }

    pub fn delete(&mut self, receipt: &Receipt, mode: LeaseMode) -> DeleteOutcome {
        let Some(message) = self.messages.get(&receipt.seq) else {
            // Deleting twice, or after retention dropped it, succeeds as on AWS.
            return DeleteOutcome {
                removed: false,
                late: false,
            };
        };
        let late = !Self::holds_live_lease(message, receipt);
        if late {
            self.stats.late_deletes += 1;
        }
        let removed = !late || mode == LeaseMode::Aws;
        if removed {
            self.remove(receipt.seq);
            self.stats.deleted += 1;
        }
        DeleteOutcome { removed, late }
    }

    pub fn change_visibility(
        &mut self,
        now: u64,
        receipt: &Receipt,
        handle: &str,
        timeout_s: u32,
        mode: LeaseMode,
    ) -> Result<()> {
        let Some(message) = self.messages.get(&receipt.seq) else {
            return Err(EngineError::MessageNotAvailable(handle.to_string()));
        };
        if mode == LeaseMode::Strict && !Self::holds_live_lease(message, receipt) {
            return Err(EngineError::MessageNotInflight(handle.to_string()));
        }
        // SQS counts in whole seconds: the lease so far, rounded down, plus the new timeout.
        let held_s = now.saturating_sub(message.lease_start_ms) / 1000;
        let until = now + u64::from(timeout_s) * 1000;
        if held_s + u64::from(timeout_s) > u64::from(MAX_VISIBILITY_TIMEOUT_S) {
            return Err(EngineError::out_of_range(
                "VisibilityTimeout",
                timeout_s,
                "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]",
            ));
        }
        let state = if timeout_s == 0 {
            State::Ready
        } else {
            State::InFlight { until }
        };
        self.set_state(receipt.seq, state);
        Ok(())
    }

    /// Drops every message; stats and settings stay.
    pub fn purge(&mut self, now: u64) {
        self.messages.clear();
        self.ready.clear();
        self.timers.clear();
        self.in_flight = 0;
        self.delayed = 0;
        self.last_purge_ms = Some(now);
    }
}

//! `Queue::receive`: leasing ready messages (a standard queue's oldest first, its quiet
//! tenants' before its noisy ones: `fair.rs`; a FIFO queue's by group), dead-lettering those
//! past maxReceiveCount, within the in-flight quota, and replaying a FIFO receive's attempt.

use super::*;

/// What one call to `Queue::receive` asks for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReceiveParams<'a> {
    pub max_messages: usize,
    pub visibility_s: u32,
    /// Messages received this many times go to the dead-letter queue instead.
    pub max_receive_count: Option<u32>,
    /// FIFO only: a retried receive with the same id gets the same messages back.
    pub attempt_id: Option<&'a str>,
    /// The most messages the whole queue may hold in flight (`quota.rs`).
    pub max_in_flight: usize,
    /// Which tenants' messages a standard queue's receive may take (`fair.rs`).
    pub pick: Pick,
}

/// Which tenants' ready messages a receive takes. A receive over several stripes, when a
/// tenant is noisy, goes round them `Quiet`, then `Fewest`, then (if it found nothing) `Any`,
/// so that no stripe hands out what another stripe's would go before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pick {
    /// Quiet tenants' first, then the noisy tenant's of this stripe with the fewest in flight.
    Any,
    /// Quiet tenants' only.
    Quiet,
    /// Quiet tenants' first, then a noisy tenant's while none on any stripe has fewer in
    /// flight.
    Fewest,
}

/// What one call to `Queue::receive` handed out.
pub(crate) struct Taken {
    pub deliveries: Vec<Drafted>,
    /// Messages past maxReceiveCount, taken out for the dead-letter queue.
    pub dead: Vec<(MsgKey, StoredMessage)>,
    /// It stopped at the queue's in-flight quota with messages left to hand out.
    pub at_quota: bool,
}

/// What `Queue::take` did with one message.
#[derive(PartialEq, Eq)]
enum Took {
    Leased,
    DeadLettered,
    /// It was not Ready.
    NotReady,
    /// The queue is at its in-flight quota: the message was left as it was.
    AtQuota,
}

/// The lease a receive hands out.
struct Lease {
    now: u64,
    until: u64,
    max_receive_count: Option<u32>,
    max_in_flight: usize,
}

/// What one receive has gathered so far.
#[derive(Default)]
struct Batch {
    deliveries: Vec<Drafted>,
    dead: Vec<(MsgKey, StoredMessage)>,
    leased: Vec<(MsgKey, u32)>,
}

impl Queue {
    /// Whether a receive of up to `max_messages` now could move a message to the dead-letter
    /// queue (one it would take was received `max_receive_count` times already), so that a
    /// receive that cannot does without the dead-letter queue's lock. A standard queue's
    /// receive takes the first ready messages, and takes exactly those if none is moved; a
    /// FIFO queue's, by group, is not looked into: it could.
    pub fn may_dead_letter(&self, max_messages: usize, max_receive_count: u32) -> bool {
        // With tenants, the messages taken need not be the first ready ones: a tenant may
        // turn noisy meanwhile, by another stripe's receive or this one's own leases.
        self.meta.settings.fifo
            || self.tenants.active()
            || self.ready.iter().take(max_messages).any(|key| {
                self.messages
                    .get(key)
                    .is_some_and(|m| m.receive_count >= max_receive_count)
            })
    }

    /// Leases up to `max_messages` ready messages, oldest first (FIFO: by group, in order).
    /// Messages past maxReceiveCount are taken out and returned for the dead-letter queue.
    pub fn receive(&mut self, now: u64, params: ReceiveParams) -> Taken {
        self.now_ms = self.now_ms.max(now);
        self.requiet();
        if let Some(replayed) = self.replay_attempt(now, &params) {
            return Taken {
                deliveries: replayed,
                dead: Vec::new(),
                at_quota: false,
            };
        }
        let lease = Lease {
            now,
            until: rules::lease_end(now, params.visibility_s),
            max_receive_count: params.max_receive_count,
            max_in_flight: params.max_in_flight,
        };
        let mut batch = Batch::default();
        let mut at_quota = false;
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
                    match self.take(key, &lease, &mut batch) {
                        Took::Leased | Took::DeadLettered => {}
                        Took::NotReady => break,
                        Took::AtQuota => {
                            // The group stays listed, its head as it was.
                            self.refresh_group(&group);
                            at_quota = true;
                            break 'outer;
                        }
                    }
                }
            } else {
                let Some(key) = self.next_ready(params.pick) else {
                    break;
                };
                if self.take(key, &lease, &mut batch) == Took::AtQuota {
                    at_quota = true;
                    break;
                }
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
        Taken {
            deliveries,
            dead,
            at_quota,
        }
    }

    /// Leases one Ready message into `batch` if the queue's in-flight quota has room, or
    /// dead-letters it.
    fn take(&mut self, key: MsgKey, lease: &Lease, batch: &mut Batch) -> Took {
        let Some(message) = self.messages.get(&key) else {
            return Took::NotReady;
        };
        if message.state != State::Ready {
            return Took::NotReady;
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
            return Took::DeadLettered;
        };
        if !self.flying.try_reserve(lease.max_in_flight) {
            return Took::AtQuota;
        }
        let message = self.messages.get_mut(&key).expect("looked up above");
        message.receive_count = receive_no;
        crate::faults::point("a receive, counted but not leased");
        message.lease_start_ms = lease.now;
        message.extensions = 0;
        if first {
            message.first_receive_ms = lease.now;
        }
        self.metrics
            .count_lease(&mut self.meta.stats, lease.now, key.sent_ms, first);
        self.set_state_reserved(key, State::InFlight, lease.until, true);
        self.mark(key);
        batch.leased.push((key, receive_no));
        batch.deliveries.push(self.delivery(key, receive_no));
        Took::Leased
    }

    /// A FIFO receive retried with the same ReceiveRequestAttemptId within five minutes gets
    /// the same messages and handles back, with the lease restarted.
    fn replay_attempt(&mut self, now: u64, params: &ReceiveParams) -> Option<Vec<Drafted>> {
        let items = self.fifo.attempt(params.attempt_id?)?.to_vec();
        let until = rules::lease_end(now, params.visibility_s);
        let mut out = Vec::new();
        for (key, receive_no) in items {
            let state = self
                .messages
                .get(&key)
                .filter(|m| m.receive_count == receive_no)
                .map(|m| m.state);
            // A lease that ran out since is taken again only within the in-flight quota.
            let still_ours = match state {
                Some(State::InFlight) => true,
                Some(State::Ready) => self.flying.try_reserve(params.max_in_flight),
                Some(State::Delayed) | None => false,
            };
            if still_ours {
                let reserved = state == Some(State::Ready);
                self.set_state_reserved(key, State::InFlight, until, reserved);
                self.mark(key);
                out.push(self.delivery(key, receive_no));
            }
        }
        Some(out)
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
}

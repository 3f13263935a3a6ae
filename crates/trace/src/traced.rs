//! `Traced`: a `Backend` in front of another that tells each traced message's life as spans
//! (`spans`), from the commands that go through it and their answers. It changes no command
//! and no answer, and a message it does not trace costs it one look at its attributes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use leasehold_backend::{Backend, Messages, Received, Result};
use leasehold_engine::{
    Clock, Delivery, EngineError, LeaseMode, NewMessage, Peeked, ReceiveRequest, Sent,
};
use opentelemetry::Context;
use tokio::sync::Notify;

use crate::book::{Book, Message};
use crate::context::producer;
use crate::spans::{LeaseEnd, Spans};

mod forward;

/// How many messages are traced at once, at most; past it the longest-traced is let go.
pub const TRACED_MESSAGES: usize = 100_000;

/// How many of a message's receipt handles are known: a delete or a visibility change by an
/// older one is not traced.
const HANDLES_KEPT: usize = 4;

/// How long a queue's visibility timeout is taken as known (ms of the server's clock); a
/// change through this server forgets it at once, one through another server of a cluster
/// is seen after this.
const VISIBILITY_KEPT_MS: u64 = 10_000;

/// A backend whose messages' lives are traced.
pub struct Traced {
    inner: Arc<dyn Backend>,
    clock: Arc<dyn Clock>,
    spans: Spans,
    book: Book,
    /// Whether a late delete removes the message (`--lease-mode aws`) or does nothing.
    late_delete_removes: bool,
    /// Each queue's visibility timeout (s) and when it was read: the lease a receive that
    /// names none takes.
    visibility: Mutex<HashMap<String, (u32, u64)>>,
}

impl Traced {
    pub(crate) fn new(
        inner: Arc<dyn Backend>,
        clock: Arc<dyn Clock>,
        spans: Spans,
        lease_mode: LeaseMode,
    ) -> Traced {
        Traced {
            inner,
            clock,
            spans,
            book: Book::new(TRACED_MESSAGES),
            late_delete_removes: lease_mode == LeaseMode::Aws,
            visibility: Mutex::default(),
        }
    }

    /// Ends every open lease (the server stops): their spans say so, and are exported.
    pub fn stop(&self) {
        self.let_go(self.book.drain());
    }

    fn let_go(&self, messages: Vec<Message>) {
        let now = self.clock.now_ms();
        for message in messages {
            if let Some(lease) = message.lease {
                Spans::end_lease(lease, now, LeaseEnd::Untraced);
            }
        }
    }

    fn put(&self, id: String, message: Message) {
        let let_go = self.book.put(id, message);
        self.let_go(let_go);
    }

    fn sent(&self, queue: &str, sent: &Sent, parent: &Context) {
        let now = self.clock.now_ms();
        let Some(parent) = self.spans.send(queue, &sent.message_id, now, parent) else {
            return;
        };
        // A FIFO queue's duplicate within its deduplication window answers the first send's
        // id: that message's life goes on as it was.
        if self.book.contains(&sent.message_id) {
            return;
        }
        let message = Message {
            queue: queue.to_string(),
            parent,
            sent_ms: now,
            received: false,
            lease: None,
            handles: Vec::new(),
        };
        self.put(sent.message_id.clone(), message);
    }

    /// Whether a delivery's message is traced, or may be (its producer named a trace).
    fn may_trace(&self, delivery: &Delivery) -> bool {
        let none = Default::default();
        let attributes = delivery.attributes.as_deref().unwrap_or(&none);
        let system = delivery.system_attributes.as_deref().unwrap_or(&none);
        self.book.contains(&delivery.message_id) || producer(attributes, system).is_some()
    }

    /// The lease each delivery begins, after the one before it, if any, ran out.
    async fn received(&self, queue: &str, visibility_s: Option<u32>, deliveries: &[Delivery]) {
        for delivery in deliveries {
            if !self.may_trace(delivery) {
                continue;
            }
            // Read before the message is taken out of the book, so that a command by one
            // of its handles meanwhile finds it.
            let visibility_s = match visibility_s {
                Some(seconds) => seconds,
                None => self.visibility_timeout_s(queue).await,
            };
            let Some(mut message) = self.traced(queue, delivery) else {
                continue;
            };
            let now = self.clock.now_ms();
            match message.lease.take() {
                // A FIFO receive retried with its attempt id hands the same lease out again.
                Some(lease) if lease.handle == delivery.receipt_handle => {
                    message.lease = Some(lease);
                    self.put(delivery.message_id.clone(), message);
                    continue;
                }
                Some(lease) => Spans::end_lease(lease, now, LeaseEnd::RanOut),
                None => {}
            }
            // A dead-lettered message keeps its id: its life goes on in the other queue.
            message.queue = queue.to_string();
            let id = delivery.message_id.as_str();
            if !message.received {
                self.spans
                    .wait(queue, id, message.sent_ms, now, &message.parent);
                message.received = true;
            }
            let handle = delivery.receipt_handle.clone();
            let deadline = now.saturating_add(u64::from(visibility_s) * 1000);
            let lease = self.spans.lease(
                (queue, id),
                (delivery.receive_count, handle.clone()),
                (now, deadline),
                &message.parent,
            );
            message.lease = Some(lease);
            message.handles.push(handle);
            if message.handles.len() > HANDLES_KEPT {
                let oldest = message.handles.remove(0);
                self.book.forget_handle(&oldest);
            }
            self.put(delivery.message_id.clone(), message);
        }
    }

    /// A delivered message's trace: the one this server began at its send, or, for a message
    /// sent through another server (or before this one traced), its producer's, if the
    /// producer's decision was to sample it.
    fn traced(&self, queue: &str, delivery: &Delivery) -> Option<Message> {
        if let Some(message) = self.book.take(&delivery.message_id) {
            return Some(message);
        }
        let none = Default::default();
        let attributes = delivery.attributes.as_deref().unwrap_or(&none);
        let system = delivery.system_attributes.as_deref().unwrap_or(&none);
        let parent = producer(attributes, system)?;
        Spans::sampled(&parent).then(|| Message {
            queue: queue.to_string(),
            parent,
            sent_ms: delivery.sent_ms,
            received: delivery.receive_count > 1,
            lease: None,
            handles: Vec::new(),
        })
    }

    /// The queue's visibility timeout, as last read (within `VISIBILITY_KEPT_MS`).
    async fn visibility_timeout_s(&self, queue: &str) -> u32 {
        let now = self.clock.now_ms();
        let known = self.known_visibility().get(queue).copied();
        if let Some((seconds, _)) = known.filter(|(_, read)| now < read + VISIBILITY_KEPT_MS) {
            return seconds;
        }
        let asked = vec!["VisibilityTimeout".to_string()];
        let pairs = self.inner.get_attributes(queue, asked).await;
        let value = pairs.ok().and_then(|pairs| pairs.into_iter().next());
        let seconds = value.and_then(|(_, v)| v.parse().ok()).unwrap_or(30);
        let mut known = self.known_visibility();
        known.insert(queue.to_string(), (seconds, now));
        seconds
    }

    fn known_visibility(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u32, u64)>> {
        // Only whole entries are ever written under it: a poisoned map is whole.
        self.visibility
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A queue's settings changed, or it went: its visibility timeout is read again.
    pub(crate) fn forget_visibility(&self, queue: &str) {
        self.known_visibility().remove(queue);
    }

    fn deleted(&self, handle: &str) {
        let Some((id, mut message)) = self.book.take_by_handle(handle) else {
            return;
        };
        let now = self.clock.now_ms();
        let current = message.lease.as_ref().is_some_and(|l| l.handle == handle);
        // Late: the handle's lease ran out before the delete came (it is not the open lease,
        // which the message's next receive ended, or the open lease's deadline has passed).
        let late = !current || message.lease.as_ref().is_some_and(|l| now > l.deadline_ms);
        let number = message.lease.as_ref().filter(|_| current).map(|l| l.number);
        let parent = message.parent.clone();
        let queue = message.queue.clone();
        let removes = !late || self.late_delete_removes;
        self.spans
            .delete((&queue, &id), number, (late, removes), now, &parent);
        if removes {
            if let Some(lease) = message.lease.take() {
                Spans::end_lease(lease, now, LeaseEnd::Deleted);
            }
            self.book.forget(&message);
            return;
        }
        // A late delete in the strict lease mode does nothing: the message is still there,
        // and a lease by a newer receive is still its holder's.
        if current {
            if let Some(lease) = message.lease.take() {
                Spans::end_lease(lease, now, LeaseEnd::RanOut);
            }
        }
        self.put(id, message);
    }

    fn visibility_changed(&self, handle: &str, seconds: u32) {
        let Some((id, mut message)) = self.book.take_by_handle(handle) else {
            return;
        };
        let now = self.clock.now_ms();
        if let Some(mut lease) = message.lease.take() {
            let new_deadline = now.saturating_add(u64::from(seconds) * 1000);
            if lease.handle != handle || now > lease.deadline_ms {
                // An older lease's handle, or one that ran out: changes nothing traced.
                message.lease = Some(lease);
            } else if new_deadline < lease.deadline_ms {
                // Visibility 0, or a backoff's put-back: the lease is given back early.
                Spans::end_lease(lease, now, LeaseEnd::Released);
            } else {
                Spans::extended(&mut lease, now, new_deadline);
                message.lease = Some(lease);
            }
        }
        self.put(id, message);
    }
}

#[async_trait]
impl Messages for Traced {
    async fn send(&self, queue: &str, message: NewMessage) -> Result<Sent> {
        let parent = producer(&message.attributes, &message.system_attributes);
        let sent = self.inner.send(queue, message).await?;
        self.sent(queue, &sent, &parent.unwrap_or_default());
        Ok(sent)
    }

    async fn send_batch(
        &self,
        queue: &str,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<Result<Sent, EngineError>>> {
        let parents: Vec<Option<Context>> = messages
            .iter()
            .map(|m| producer(&m.attributes, &m.system_attributes))
            .collect();
        let results = self.inner.send_batch(queue, messages).await?;
        for (result, parent) in results.iter().zip(parents) {
            if let Ok(sent) = result {
                self.sent(queue, sent, &parent.unwrap_or_default());
            }
        }
        Ok(results)
    }

    async fn receive(&self, queue: &str, request: ReceiveRequest) -> Result<Received> {
        let visibility_s = request.visibility_s;
        let received = self.inner.receive(queue, request).await?;
        self.received(queue, visibility_s, &received.deliveries)
            .await;
        Ok(received)
    }

    async fn delete(
        &self,
        queue: &str,
        handles: Vec<String>,
    ) -> Result<Vec<Result<(), EngineError>>> {
        let results = self.inner.delete(queue, handles.clone()).await?;
        for (handle, result) in handles.iter().zip(&results) {
            if result.is_ok() {
                self.deleted(handle);
            }
        }
        Ok(results)
    }

    async fn change_visibility(
        &self,
        queue: &str,
        changes: Vec<(String, u32)>,
    ) -> Result<Vec<Result<(), EngineError>>> {
        let results = self.inner.change_visibility(queue, changes.clone()).await?;
        for ((handle, seconds), result) in changes.iter().zip(&results) {
            if result.is_ok() {
                self.visibility_changed(handle, *seconds);
            }
        }
        Ok(results)
    }

    async fn peek(&self, queue: &str, limit: usize) -> Result<Vec<Peeked>> {
        self.inner.peek(queue, limit).await
    }

    fn waiter(&self, queue: &str) -> Arc<Notify> {
        self.inner.waiter(queue)
    }

    fn wake_all(&self) {
        self.inner.wake_all()
    }
}

#[cfg(test)]
mod tests;

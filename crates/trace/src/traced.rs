//! `Traced`: a `Backend` in front of another that tells each traced message's life as spans
//! (`spans`), from the commands that go through it and their answers. It changes no command
//! and no answer, and a message it does not trace costs it one look at its attributes.

use std::sync::Arc;

use async_trait::async_trait;
use leasehold_backend::{
    Backend, Measurements, Messages, MoveTaskStart, Page, Pairs, Permission, QueueAdmin,
    QueueListing, Received, Result, TimeTravel,
};
use leasehold_engine::{
    Clock, Delivery, EngineError, LeaseReport, MoveTaskInfo, Naming, NewMessage, Peeked, QueuePage,
    ReceiveRequest, Sent,
};
use opentelemetry::Context;
use tokio::sync::Notify;

use crate::book::{Book, Message};
use crate::context::producer;
use crate::spans::{LeaseEnd, Spans};

/// How many messages are traced at once, at most; past it the longest-traced is let go.
pub const TRACED_MESSAGES: usize = 100_000;

/// A backend whose messages' lives are traced.
pub struct Traced {
    inner: Arc<dyn Backend>,
    clock: Arc<dyn Clock>,
    spans: Spans,
    book: Book,
}

impl Traced {
    pub(crate) fn new(inner: Arc<dyn Backend>, clock: Arc<dyn Clock>, spans: Spans) -> Traced {
        Traced {
            inner,
            clock,
            spans,
            book: Book::new(TRACED_MESSAGES),
        }
    }

    /// Ends every open lease (the server stops): their spans say so, and are exported.
    pub fn stop(&self) {
        let now = self.clock.now_ms();
        for message in self.book.drain() {
            if let Some(lease) = message.lease {
                Spans::end_lease(lease, now, LeaseEnd::Untraced);
            }
        }
    }

    fn let_go(&self, messages: Vec<Message>) {
        let now = self.clock.now_ms();
        for message in messages {
            if let Some(lease) = message.lease {
                Spans::end_lease(lease, now, LeaseEnd::Untraced);
            }
        }
    }

    fn sent(&self, queue: &str, sent: &Sent, parent: &Context) {
        let now = self.clock.now_ms();
        let Some(parent) = self.spans.send(queue, &sent.message_id, now, parent) else {
            return;
        };
        let message = Message {
            queue: queue.to_string(),
            parent,
            sent_ms: now,
            received: false,
            lease: None,
            handles: Vec::new(),
        };
        let let_go = self.book.put(sent.message_id.clone(), message);
        self.let_go(let_go);
    }

    /// The lease each delivery begins, after the one before it, if any, ran out.
    async fn received(&self, queue: &str, visibility_s: Option<u32>, deliveries: &[Delivery]) {
        let mut queue_visibility_s = None;
        for delivery in deliveries {
            let Some(mut message) = self.traced(queue, delivery) else {
                continue;
            };
            // A FIFO receive retried with its attempt id hands the same lease out again.
            let same = message.lease.as_ref();
            if same.is_some_and(|lease| lease.handle == delivery.receipt_handle) {
                let let_go = self.book.put(delivery.message_id.clone(), message);
                self.let_go(let_go);
                continue;
            }
            let visibility_s = match visibility_s.or(queue_visibility_s) {
                Some(seconds) => seconds,
                None => {
                    let seconds = self.visibility_timeout_s(queue).await;
                    queue_visibility_s = Some(seconds);
                    seconds
                }
            };
            let now = self.clock.now_ms();
            if let Some(lease) = message.lease.take() {
                Spans::end_lease(lease, now, LeaseEnd::RanOut);
            }
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
            let let_go = self.book.put(delivery.message_id.clone(), message);
            self.let_go(let_go);
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

    async fn visibility_timeout_s(&self, queue: &str) -> u32 {
        let asked = vec!["VisibilityTimeout".to_string()];
        let pairs = self.inner.get_attributes(queue, asked).await;
        let value = pairs.ok().and_then(|pairs| pairs.into_iter().next());
        value.and_then(|(_, v)| v.parse().ok()).unwrap_or(30)
    }

    fn deleted(&self, handle: &str) {
        let Some((id, mut message)) = self.book.take_by_handle(handle) else {
            return;
        };
        self.book.forget(&message);
        let now = self.clock.now_ms();
        // Late: the handle's lease ran out before the delete came (it is not the open lease's,
        // which the message's next receive ended, or the open lease's deadline has passed).
        let (late, number) = match message.lease.take() {
            Some(lease) if lease.handle == handle => {
                let late = now > lease.deadline_ms;
                let number = lease.number;
                Spans::end_lease(lease, now, LeaseEnd::Deleted);
                (late, Some(number))
            }
            open => {
                if let Some(lease) = open {
                    Spans::end_lease(lease, now, LeaseEnd::Deleted);
                }
                (true, None)
            }
        };
        let parent = &message.parent;
        self.spans
            .delete((&message.queue, &id), number, late, now, parent);
    }

    fn visibility_changed(&self, handle: &str, seconds: u32) {
        let Some((id, mut message)) = self.book.take_by_handle(handle) else {
            return;
        };
        let now = self.clock.now_ms();
        if let Some(mut lease) = message.lease.take() {
            if lease.handle != handle || now > lease.deadline_ms {
                // An older lease's handle, or one that ran out: changes nothing traced.
                message.lease = Some(lease);
            } else if seconds == 0 {
                Spans::end_lease(lease, now, LeaseEnd::Released);
            } else {
                Spans::extended(&mut lease, now, now + u64::from(seconds) * 1000);
                message.lease = Some(lease);
            }
        }
        let let_go = self.book.put(id, message);
        self.let_go(let_go);
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

#[async_trait]
impl Backend for Traced {
    fn naming(&self) -> &Naming {
        self.inner.naming()
    }

    async fn tick(&self) {
        self.inner.tick().await
    }

    async fn flush(&self) {
        self.inner.flush().await
    }

    async fn ready(&self) -> Result<()> {
        self.inner.ready().await
    }

    fn refusing_sends(&self) -> Option<String> {
        self.inner.refusing_sends()
    }
}

#[async_trait]
impl QueueAdmin for Traced {
    async fn create_queue(&self, queue: &str, attributes: Pairs, tags: Pairs) -> Result<()> {
        self.inner.create_queue(queue, attributes, tags).await
    }

    async fn queue_exists(&self, queue: &str) -> Result<()> {
        self.inner.queue_exists(queue).await
    }

    async fn delete_queue(&self, queue: &str) -> Result<()> {
        self.inner.delete_queue(queue).await
    }

    async fn list_queues(&self, listing: QueueListing) -> Result<QueuePage> {
        self.inner.list_queues(listing).await
    }

    async fn list_dead_letter_source_queues(&self, queue: &str, page: Page) -> Result<QueuePage> {
        self.inner.list_dead_letter_source_queues(queue, page).await
    }

    async fn get_attributes(&self, queue: &str, names: Vec<String>) -> Result<Pairs> {
        self.inner.get_attributes(queue, names).await
    }

    async fn set_attributes(&self, queue: &str, attributes: Pairs) -> Result<()> {
        self.inner.set_attributes(queue, attributes).await
    }

    async fn purge(&self, queue: &str) -> Result<()> {
        self.inner.purge(queue).await
    }

    async fn tag(&self, queue: &str, tags: Pairs) -> Result<()> {
        self.inner.tag(queue, tags).await
    }

    async fn untag(&self, queue: &str, keys: Vec<String>) -> Result<()> {
        self.inner.untag(queue, keys).await
    }

    async fn list_tags(&self, queue: &str) -> Result<Pairs> {
        self.inner.list_tags(queue).await
    }

    async fn add_permission(&self, queue: &str, permission: Permission) -> Result<()> {
        self.inner.add_permission(queue, permission).await
    }

    async fn remove_permission(&self, queue: &str, label: &str) -> Result<()> {
        self.inner.remove_permission(queue, label).await
    }

    async fn start_move_task(&self, task: MoveTaskStart) -> Result<String> {
        self.inner.start_move_task(task).await
    }

    async fn cancel_move_task(&self, handle: &str) -> Result<u64> {
        self.inner.cancel_move_task(handle).await
    }

    async fn list_move_tasks(
        &self,
        source_arn: &str,
        max: Option<u32>,
    ) -> Result<Vec<MoveTaskInfo>> {
        self.inner.list_move_tasks(source_arn, max).await
    }
}

#[async_trait]
impl Measurements for Traced {
    async fn record_empty_receive(&self, queue: &str) {
        self.inner.record_empty_receive(queue).await
    }

    async fn lease_report(&self, queue: &str) -> Result<LeaseReport> {
        self.inner.lease_report(queue).await
    }

    async fn lease_reports(&self, name_prefix: &str) -> Vec<(String, LeaseReport)> {
        self.inner.lease_reports(name_prefix).await
    }
}

#[async_trait]
impl TimeTravel for Traced {
    async fn clock_advanced(&self, by_ms: u64) -> Result<u64> {
        self.inner.clock_advanced(by_ms).await
    }
}

#[cfg(test)]
mod tests;

//! The embedded backend's commands: each method of the `Backend` parts as one engine call
//! through `Embedded::on_queue` (a command on one queue's messages), `Embedded::apply`
//! (what spans queues) or `read` (what changes nothing), and the wake-ups it owes waiting
//! receives.

use std::sync::Arc;

use async_trait::async_trait;
use leasehold_backend::{
    Backend, BackendError, Measurements, Messages, MoveTaskStart, Page, Pairs, Permission,
    QueueAdmin, QueueListing, Received, Result, TimeTravel,
};
use leasehold_engine::{
    EngineError, LeaseReport, MoveTaskInfo, Naming, NewMessage, QueuePage, ReceiveRequest, Sent,
};
use tokio::sync::Notify;

use crate::{Access, Embedded, REPORTS_PER_YIELD};

/// When a long poll looks again after a receive whose every message was deleted before its
/// content was read.
const LOOK_AGAIN_AFTER_LOST_CONTENT_MS: u64 = 25;

#[async_trait]
impl Backend for Embedded {
    fn naming(&self) -> &Naming {
        &self.naming
    }

    async fn tick(&self) {
        self.measure_disk().await;
        // Looked at under a shared hold first: taking the engine alone ten times a second
        // would stall every queue's commands for nothing while no task runs. The hold ends
        // with this statement, before the engine is asked for alone below.
        let running = self.engine_shared().moves_running();
        if !running {
            return;
        }
        let woken = {
            // Nothing moves once the store has failed.
            let Ok(mut engine) = self.lock(Access::Change) else {
                return;
            };
            let woken = engine.run_move_tasks();
            self.write_detached(&engine.take_changes());
            woken
        };
        for queue in woken {
            self.waiters.wake(&queue);
        }
    }

    async fn flush(&self) {
        let mut engine = self.engine();
        // Still under the lock, so no newer record of the same queue is written before it.
        self.write_detached(&engine.take_all_metrics());
    }

    async fn ready(&self) -> Result<()> {
        match self.is_healthy() {
            true => Ok(()),
            false => Err(BackendError::Failed(self.failure_reason())),
        }
    }

    fn refusing_sends(&self) -> Option<String> {
        self.disk.refusal()
    }
}

#[async_trait]
impl QueueAdmin for Embedded {
    async fn create_queue(&self, queue: &str, attributes: Pairs, tags: Pairs) -> Result<()> {
        self.apply(Access::Change, |e| {
            e.create_queue(queue, &attributes, &tags)
        })
        .await
    }

    async fn queue_exists(&self, queue: &str) -> Result<()> {
        self.read(|e| e.queue_exists(queue))
    }

    async fn delete_queue(&self, queue: &str) -> Result<()> {
        self.apply(Access::Change, |e| e.delete_queue(queue)).await
    }

    async fn list_queues(&self, listing: QueueListing) -> Result<QueuePage> {
        self.read(|e| e.list_queues(listing.asked()))
    }

    async fn list_dead_letter_source_queues(&self, queue: &str, page: Page) -> Result<QueuePage> {
        self.read(|e| e.list_dead_letter_source_queues(queue, page.max, page.next_token.as_deref()))
    }

    async fn get_attributes(&self, queue: &str, names: Vec<String>) -> Result<Pairs> {
        Ok(self.on_queue_detached(Access::Read, |e, sink| e.attributes(queue, &names, sink))??)
    }

    async fn set_attributes(&self, queue: &str, attributes: Pairs) -> Result<()> {
        self.apply(Access::Change, |e| e.set_attributes(queue, &attributes))
            .await?;
        // A new redrive policy may make receivable what the old one would have moved on (no
        // wake-up was owed for it then: `Locked::dead_lettered`): the queue's polls look again.
        self.waiters.wake(queue);
        Ok(())
    }

    async fn purge(&self, queue: &str) -> Result<()> {
        self.apply(Access::Change, |e| e.purge(queue)).await
    }

    async fn tag(&self, queue: &str, tags: Pairs) -> Result<()> {
        self.apply(Access::Change, |e| e.tag_queue(queue, &tags))
            .await
    }

    async fn untag(&self, queue: &str, keys: Vec<String>) -> Result<()> {
        self.apply(Access::Change, |e| e.untag_queue(queue, &keys))
            .await
    }

    async fn list_tags(&self, queue: &str) -> Result<Pairs> {
        self.read(|e| e.list_tags(queue).map(|tags| tags.into_iter().collect()))
    }

    async fn add_permission(&self, queue: &str, permission: Permission) -> Result<()> {
        self.apply(Access::Change, |e| {
            e.add_permission(
                queue,
                &permission.label,
                &permission.accounts,
                &permission.actions,
            )
        })
        .await
    }

    async fn remove_permission(&self, queue: &str, label: &str) -> Result<()> {
        self.apply(Access::Change, |e| e.remove_permission(queue, label))
            .await
    }

    async fn start_move_task(&self, task: MoveTaskStart) -> Result<String> {
        self.apply(Access::Change, |e| {
            e.start_move_task(
                &task.source_arn,
                task.destination_arn.as_deref(),
                task.per_second,
            )
        })
        .await
    }

    async fn cancel_move_task(&self, handle: &str) -> Result<u64> {
        self.apply(Access::Change, |e| e.cancel_move_task(handle))
            .await
    }

    async fn list_move_tasks(
        &self,
        source_arn: &str,
        max: Option<u32>,
    ) -> Result<Vec<MoveTaskInfo>> {
        // Listing runs the tasks first, as any command does; serving reads only, nothing
        // moves (memory stays what the store holds).
        self.apply(Access::Read, |e| match self.is_healthy() {
            true => e.list_move_tasks(source_arn, max),
            false => e.move_tasks_as_they_stand(source_arn, max),
        })
        .await
    }
}

#[async_trait]
impl Messages for Embedded {
    async fn peek(&self, queue: &str, limit: usize) -> Result<Vec<leasehold_engine::Peeked>> {
        let peeked = self.read(|e| e.peek(queue, limit))?;
        match &self.contents {
            Some(contents) => contents
                .fill_peeked(peeked)
                .await
                .map_err(|e| BackendError::Failed(e.to_string())),
            None => Ok(peeked),
        }
    }

    async fn send(&self, queue: &str, message: NewMessage) -> Result<Sent> {
        self.admit_send([&message])?;
        // What needs no queue is checked, and the id written out, with no lock held.
        let message = message.checked();
        let accepted = self
            .on_queue(|e, sink| e.on_stripe(queue, None, sink, |q| q.send(message))?)
            .await?;
        let sent = accepted.sent(&self.sealer);
        self.waiters.wake_some(queue, 1);
        Ok(sent)
    }

    async fn send_batch(
        &self,
        queue: &str,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<Result<Sent, EngineError>>> {
        self.admit_send(&messages)?;
        let messages = messages.into_iter().map(NewMessage::checked).collect();
        let results: Vec<_> = self
            .on_queue(|e, sink| e.on_stripe(queue, None, sink, |q| q.send_batch(messages))?)
            .await?
            .into_iter()
            .map(|accepted| accepted.map(|a| a.sent(&self.sealer)))
            .collect();
        self.wake_per_success(queue, &results);
        Ok(results)
    }

    async fn receive(&self, queue: &str, request: ReceiveRequest) -> Result<Received> {
        let received = self
            .on_queue(|e, sink| e.receive_striped(queue, &request, sink))
            .await?;
        let more = received.more;
        if let Some((dead_letter_queue, moved)) = &received.dead_lettered {
            // Messages that arrive by a dead-letter move wake that queue's polls, as a send's.
            self.waiters.wake_some(dead_letter_queue, *moved);
        }
        // Ids and receipt handles are written out here, no lock held.
        let received = Received {
            deliveries: received.handout.finish(),
            queue_wait_s: received.queue_wait_s,
            next_due_in_ms: received.next_due_in_ms,
            over_limit: received.over_limit,
        };
        if !received.deliveries.is_empty() && more {
            // Sends wake one waiter per message; pass on what this one left behind.
            self.waiters.wake_some(queue, 1);
        }
        let Some(contents) = &self.contents else {
            return Ok(received);
        };
        // The receive's own commit is done, so every content it hands out is written.
        let leased = received.deliveries.len();
        let filled = contents
            .fill_deliveries(received.deliveries)
            .await
            .map_err(|e| BackendError::Failed(e.to_string()))?;
        let deliveries = filled.delivered;
        if !filled.unread.is_empty() {
            self.drop_contentless(queue, filled.unread, &filled.damaged)
                .await;
        }
        // Every message it leased was deleted before its content was read (a late delete):
        // the receive found nothing, and knows no delay or lease to wait for, so a long poll
        // looks again shortly rather than at the end of its wait (found by the simulation);
        // not at once, so that content lost for good cannot spin it.
        let next_due_in_ms = match (leased, deliveries.is_empty()) {
            (1.., true) => Some(LOOK_AGAIN_AFTER_LOST_CONTENT_MS),
            _ => received.next_due_in_ms,
        };
        Ok(Received {
            deliveries,
            next_due_in_ms,
            ..received
        })
    }

    async fn delete(
        &self,
        queue: &str,
        handles: Vec<String>,
    ) -> Result<Vec<Result<(), EngineError>>> {
        // Opened before the queue is locked: decoding and checking them needs no queue.
        let opened: Vec<_> = handles.iter().map(|h| self.sealer.open(h)).collect();
        let (results, fifo) = self
            .on_queue(|e, sink| {
                let results = e.on_handles(queue, opened, sink, |q, i, receipt| {
                    q.delete_opened(&handles[i], receipt).map(drop)
                })?;
                Ok((results, e.is_fifo(queue)?))
            })
            .await?;
        if fifo {
            // A delete lets its group's next message be delivered.
            self.wake_per_success(queue, &results);
        }
        Ok(results)
    }

    async fn change_visibility(
        &self,
        queue: &str,
        changes: Vec<(String, u32)>,
    ) -> Result<Vec<Result<(), EngineError>>> {
        let opened: Vec<_> = changes.iter().map(|(h, _)| self.sealer.open(h)).collect();
        let results = self
            .on_queue(|e, sink| {
                e.on_handles(queue, opened, sink, |q, i, receipt| {
                    let (handle, timeout) = &changes[i];
                    q.change_visibility_opened(handle, receipt, *timeout)
                })
            })
            .await?;
        self.wake_per_success(queue, &results);
        Ok(results)
    }

    fn waiter(&self, queue: &str) -> Arc<Notify> {
        self.waiters.of(queue)
    }

    fn wake_all(&self) {
        self.waiters.wake_all();
    }
}

#[async_trait]
impl Measurements for Embedded {
    async fn record_empty_receive(&self, queue: &str) {
        // Counted durably, but nobody waits for the write.
        let _ = self.on_queue_detached(Access::Change, |e, sink| {
            e.on_stripe(queue, None, sink, |q| q.record_empty_receive())
        });
    }

    async fn lease_report(&self, queue: &str) -> Result<LeaseReport> {
        Ok(self.on_queue_detached(Access::Read, |e, sink| e.lease_report_striped(queue, sink))??)
    }

    async fn lease_reports(&self, name_prefix: &str) -> Result<Vec<(String, LeaseReport)>> {
        let mut names = self.engine_shared().queue_names();
        names.retain(|key| leasehold_engine::name_of(key).starts_with(name_prefix));
        let mut reports = Vec::with_capacity(names.len());
        for chunk in names.chunks(REPORTS_PER_YIELD) {
            reports.extend(chunk.iter().filter_map(|name| {
                let report = self
                    .on_queue_detached(Access::Read, |e, sink| e.lease_report_striped(name, sink));
                report.ok().and_then(|r| r.ok()).map(|r| (name.clone(), r))
            }));
            tokio::task::yield_now().await;
        }
        Ok(reports)
    }
}

#[async_trait]
impl TimeTravel for Embedded {
    async fn clock_advanced(&self, _by_ms: u64) -> Result<u64> {
        // The engine reads the server's clock, which has jumped already.
        Ok(self.engine().now_ms())
    }
}

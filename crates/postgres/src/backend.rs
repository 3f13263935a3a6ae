//! `Backend` for PostgreSQL: queue metadata through the engine's rules (`queues.rs`),
//! messages as rows (`messages.rs`, `fifo.rs`), move tasks as rows (`moves.rs`), lease
//! measurements added up across servers (`leases.rs`).

use std::sync::Arc;

use async_trait::async_trait;
use leasehold_backend::{
    Backend, BackendError, Measurements, Messages, MoveTaskStart, Page, Pairs, Permission,
    QueueAdmin, QueueListing, Received, Result, TimeTravel,
};
use leasehold_engine::{
    list_queue_keys, EngineError, LeaseReport, MoveTaskInfo, Naming, NewMessage, QueuePage,
    ReceiveRequest, RedrivePolicy, Sent,
};
use tokio::sync::Notify;
use tokio_postgres::types::ToSql;

use crate::group::Job;
use crate::{storable, unavailable, Postgres};

/// Whether a queue is FIFO: its name says so (CreateQueue holds the name and the attribute
/// together), so a request is routed before anything is read.
fn fifo(queue: &str) -> bool {
    queue.ends_with(".fifo")
}

/// Counts GetQueueAttributes takes from the rows rather than from the transient engine.
const COUNTED: [&str; 3] = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
];

impl Postgres {
    /// Wakes this server's receives waiting on queues that messages were moved into (other
    /// servers hear it from the database).
    fn wake(&self, queues: &[String]) {
        for queue in queues {
            self.waiters.wake(queue);
        }
    }

    /// The queue keys a query selects.
    async fn keys(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<String>> {
        let client = self.client().await?;
        let rows = client
            .query(sql, params)
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// Sends to any queue: a FIFO queue's in a transaction of their own, a standard queue's
    /// in the next group (`group/`).
    async fn send_any(
        &self,
        queue: &str,
        messages: Vec<NewMessage>,
        batch: bool,
    ) -> Result<Vec<Result<Sent, EngineError>>> {
        match fifo(queue) {
            true => self.send_all(queue, messages, batch).await,
            false => {
                self.grouped(queue, |reply| Job::Send {
                    queue: queue.to_string(),
                    messages,
                    batch,
                    reply,
                })
                .await
            }
        }
    }

    /// A standard queue's request, in the next group; a name PostgreSQL cannot hold names
    /// no queue.
    async fn grouped<T>(
        &self,
        queue: &str,
        job: impl FnOnce(crate::group::Reply<T>) -> Job,
    ) -> Result<T> {
        if !storable(queue) {
            return Err(EngineError::QueueDoesNotExist.into());
        }
        self.grouper.submit(job).await
    }

    /// The queue's key, and that of the dead-letter queue a RedrivePolicy among `attributes`
    /// names, whose rules the engine checks against it.
    fn with_target(&self, queue: &str, attributes: &Pairs) -> Vec<String> {
        let target = attributes
            .iter()
            .find(|(name, _)| name == "RedrivePolicy")
            .and_then(|(_, value)| RedrivePolicy::parse(value).ok())
            .and_then(|policy| self.naming.key_of_arn(&policy.dead_letter_target_arn));
        std::iter::once(queue.to_string()).chain(target).collect()
    }
}

#[async_trait]
impl Backend for Postgres {
    fn naming(&self) -> &Naming {
        &self.naming
    }

    async fn tick(&self) {
        self.vacuum_if_due();
        if let Err(error) = self.sweep().await {
            tracing::warn!(%error, "the retention sweep did not run");
        }
        if let Err(error) = self.flush_measurements(false).await {
            tracing::warn!(%error, "the lease measurements wait for the database");
        }
        match self.run_due_tasks().await {
            Ok(woken) => self.wake(&woken),
            Err(error) => tracing::warn!(%error, "the message move tasks did not run"),
        }
    }

    async fn flush(&self) {
        if let Err(error) = self.flush_measurements(true).await {
            tracing::warn!(%error, "the last lease measurements were not written");
        }
    }

    async fn ready(&self) -> Result<()> {
        let client = self.client().await?;
        client
            .execute("SELECT 1", &[])
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(())
    }
}

#[async_trait]
impl QueueAdmin for Postgres {
    async fn create_queue(&self, queue: &str, attributes: Pairs, tags: Pairs) -> Result<()> {
        let keys = self.with_target(queue, &attributes);
        self.on_queues_making(&keys, Some(queue), |e| {
            e.create_queue(queue, &attributes, &tags)
        })
        .await
    }

    async fn queue_exists(&self, queue: &str) -> Result<()> {
        if !storable(queue) {
            return Err(EngineError::QueueDoesNotExist.into());
        }
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT 1 FROM leasehold_queues WHERE key = $1", &[&queue])
            .await
            .map_err(|e| unavailable(&e))?;
        row.map(drop).ok_or(EngineError::QueueDoesNotExist.into())
    }

    async fn delete_queue(&self, queue: &str) -> Result<()> {
        self.on_queues(&[queue.to_string()], |e| e.delete_queue(queue))
            .await
    }

    async fn list_queues(&self, listing: QueueListing) -> Result<QueuePage> {
        let keys = self.keys("SELECT key FROM leasehold_queues", &[]).await?;
        Ok(list_queue_keys(&self.naming, keys.iter(), listing.asked())?)
    }

    async fn list_dead_letter_source_queues(&self, queue: &str, page: Page) -> Result<QueuePage> {
        self.queue_exists(queue).await?;
        let arn = self.naming.queue_arn(queue);
        let sql = "SELECT key FROM leasehold_queues WHERE dead_letter_target_arn = $1";
        let sources = self.keys(sql, &[&arn]).await?;
        // A dead-letter queue is in its sources' region: the engine's listing of that region.
        let asked = leasehold_engine::QueueListing {
            account: Some(self.naming.key_account(queue)),
            region: Some(self.naming.key_parts(queue).0),
            prefix: None,
            max_results: page.max,
            next_token: page.next_token.as_deref(),
        };
        Ok(list_queue_keys(&self.naming, sources.iter(), asked)?)
    }

    async fn get_attributes(&self, queue: &str, names: Vec<String>) -> Result<Pairs> {
        let (mut attributes, queue_id, settings) = self
            .on_queues(&[queue.to_string()], |e| {
                let attributes = e.get_attributes(queue, &names)?;
                Ok((attributes, e.queue_id(queue)?, e.settings(queue)?))
            })
            .await?;
        if attributes
            .iter()
            .any(|(name, _)| COUNTED.contains(&name.as_str()))
        {
            let counts = self.counts(queue_id, &settings).await?;
            for (name, value) in &mut attributes {
                if let Some(i) = COUNTED.iter().position(|c| c == name) {
                    *value = counts[i].to_string();
                }
            }
        }
        Ok(attributes)
    }

    async fn set_attributes(&self, queue: &str, attributes: Pairs) -> Result<()> {
        let keys = self.with_target(queue, &attributes);
        self.on_queues(&keys, |e| e.set_attributes(queue, &attributes))
            .await
    }

    async fn purge(&self, queue: &str) -> Result<()> {
        self.on_queues(&[queue.to_string()], |e| e.purge(queue))
            .await
    }

    async fn tag(&self, queue: &str, tags: Pairs) -> Result<()> {
        self.on_queues(&[queue.to_string()], |e| e.tag_queue(queue, &tags))
            .await
    }

    async fn untag(&self, queue: &str, keys: Vec<String>) -> Result<()> {
        self.on_queues(&[queue.to_string()], |e| e.untag_queue(queue, &keys))
            .await
    }

    async fn list_tags(&self, queue: &str) -> Result<Pairs> {
        self.on_queues(&[queue.to_string()], |e| {
            e.list_tags(queue).map(|tags| tags.into_iter().collect())
        })
        .await
    }

    async fn add_permission(&self, queue: &str, permission: Permission) -> Result<()> {
        self.on_queues(&[queue.to_string()], |e| {
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
        self.on_queues(&[queue.to_string()], |e| e.remove_permission(queue, label))
            .await
    }

    async fn start_move_task(&self, task: MoveTaskStart) -> Result<String> {
        let (handle, woken) = self.start_task(task).await?;
        self.wake(&woken);
        Ok(handle)
    }

    async fn cancel_move_task(&self, handle: &str) -> Result<u64> {
        let (moved, woken) = self.cancel_task(handle).await?;
        self.wake(&woken);
        Ok(moved)
    }

    async fn list_move_tasks(
        &self,
        source_arn: &str,
        max: Option<u32>,
    ) -> Result<Vec<MoveTaskInfo>> {
        let (tasks, woken) = self.list_tasks(source_arn, max).await?;
        self.wake(&woken);
        Ok(tasks)
    }
}

#[async_trait]
impl Messages for Postgres {
    async fn peek(&self, queue: &str, limit: usize) -> Result<Vec<leasehold_engine::Peeked>> {
        self.core.peek(queue, limit).await
    }

    async fn send(&self, queue: &str, message: NewMessage) -> Result<Sent> {
        let sent = self.send_any(queue, vec![message], false).await?;
        let sent = sent.into_iter().next().ok_or_else(|| {
            BackendError::Failed("a send of one message answered nothing".into())
        })??;
        self.waiters.wake_some(queue, 1);
        Ok(sent)
    }

    async fn send_batch(
        &self,
        queue: &str,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<Result<Sent, EngineError>>> {
        let results = self.send_any(queue, messages, true).await?;
        self.waiters
            .wake_some(queue, results.iter().filter(|r| r.is_ok()).count());
        Ok(results)
    }

    async fn receive(&self, queue: &str, request: ReceiveRequest) -> Result<Received> {
        request.check()?;
        let max = request.max_messages as usize;
        let received = match fifo(queue) {
            true => self.claim(queue, request).await?,
            false => {
                self.grouped(queue, |reply| Job::Receive {
                    queue: queue.to_string(),
                    request,
                    reply,
                })
                .await?
            }
        };
        if received.deliveries.len() == max {
            // There may be more: pass the turn to the next waiting receive.
            self.waiters.wake_some(queue, 1);
        }
        Ok(received)
    }

    async fn delete(
        &self,
        queue: &str,
        handles: Vec<String>,
    ) -> Result<Vec<Result<(), EngineError>>> {
        match fifo(queue) {
            true => self.delete_all(queue, handles).await,
            false => {
                self.grouped(queue, |reply| Job::Delete {
                    queue: queue.to_string(),
                    handles,
                    reply,
                })
                .await
            }
        }
    }

    async fn change_visibility(
        &self,
        queue: &str,
        changes: Vec<(String, u32)>,
    ) -> Result<Vec<Result<(), EngineError>>> {
        let results = self.change_all(queue, changes).await?;
        self.waiters
            .wake_some(queue, results.iter().filter(|r| r.is_ok()).count());
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
impl Measurements for Postgres {
    async fn record_empty_receive(&self, queue: &str) {
        self.measurements
            .record(queue, |m| m.stats.empty_receives += 1);
    }

    async fn lease_report(&self, queue: &str) -> Result<LeaseReport> {
        self.cluster_report(queue).await
    }

    async fn lease_reports(&self, name_prefix: &str) -> Result<Vec<(String, LeaseReport)>> {
        self.local_reports(name_prefix).await
    }
}

#[async_trait]
impl TimeTravel for Postgres {
    async fn clock_advanced(&self, by_ms: u64) -> Result<u64> {
        self.advance_clock(by_ms).await
    }
}

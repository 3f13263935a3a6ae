//! The commands `Traced` only passes on: the queues themselves, the measurements, time.

use async_trait::async_trait;
use leasehold_backend::{
    Backend, Measurements, MoveTaskStart, Page, Pairs, Permission, QueueAdmin, QueueListing,
    Result, TimeTravel,
};
use leasehold_engine::{LeaseReport, MoveTaskInfo, Naming, QueuePage};

use super::Traced;

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
        self.forget_visibility(queue);
        self.inner.create_queue(queue, attributes, tags).await
    }

    async fn queue_exists(&self, queue: &str) -> Result<()> {
        self.inner.queue_exists(queue).await
    }

    async fn delete_queue(&self, queue: &str) -> Result<()> {
        self.forget_visibility(queue);
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
        let set = self.inner.set_attributes(queue, attributes).await;
        self.forget_visibility(queue);
        set
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

    async fn lease_reports(&self, name_prefix: &str) -> Result<Vec<(String, LeaseReport)>> {
        self.inner.lease_reports(name_prefix).await
    }
}

#[async_trait]
impl TimeTravel for Traced {
    async fn clock_advanced(&self, by_ms: u64) -> Result<u64> {
        self.inner.clock_advanced(by_ms).await
    }
}

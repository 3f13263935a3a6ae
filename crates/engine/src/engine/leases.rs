//! The lease report: what the server measured about a queue's leases, for the admin route,
//! the metrics endpoint and the advisor.

use std::collections::BTreeMap;

use super::Engine;
use crate::error::Result;
use crate::lease_stats::{Buckets, Summary};
use crate::queue::{QueueCounts, QueueStats};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseReport {
    /// Lease-hold time (receive to delete), since start and over the last 15 minutes.
    pub hold_total: Option<Summary>,
    pub hold_recent: Option<Summary>,
    /// Lease-hold time since start in the fixed buckets of `HOLD_BUCKETS_MS`.
    pub hold_buckets: Option<Buckets>,
    /// Send to first receive, since start and over the last 15 minutes.
    pub first_receive_total: Option<Summary>,
    pub first_receive_recent: Option<Summary>,
    pub stats: QueueStats,
    /// Finished messages (deleted or dead-lettered) by how many times they were delivered.
    pub receive_count_histogram: BTreeMap<u32, u64>,
    /// Deleted messages by how many heartbeats their final lease had.
    pub extensions_per_message: BTreeMap<u32, u64>,
    pub oldest_message_age_ms: Option<u64>,
    pub counts: QueueCounts,
    pub visibility_timeout_s: u32,
    pub max_receive_count: Option<u32>,
    pub retention_s: u32,
}

impl Engine {
    pub fn lease_report(&mut self, name: &str) -> Result<LeaseReport> {
        let (queue, now) = self.queue_now(name)?;
        let m = &queue.metrics;
        Ok(LeaseReport {
            hold_total: m.hold.total(),
            hold_recent: m.hold.recent(now),
            hold_buckets: m.hold.buckets(),
            first_receive_total: m.first_receive.total(),
            first_receive_recent: m.first_receive.recent(now),
            stats: queue.meta.stats.clone(),
            receive_count_histogram: m.receive_counts.clone(),
            extensions_per_message: m.extensions_per_message.clone(),
            oldest_message_age_ms: queue.oldest_sent_ms().map(|sent| now.saturating_sub(sent)),
            counts: queue.counts(),
            visibility_timeout_s: queue.meta.settings.visibility_timeout_s,
            max_receive_count: queue
                .meta
                .settings
                .redrive
                .as_ref()
                .map(|r| r.max_receive_count),
            retention_s: queue.meta.settings.retention_s,
        })
    }

    /// Every queue's name, for reports over all queues.
    pub fn queue_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.queues.keys().cloned().collect();
        names.sort();
        names
    }
}

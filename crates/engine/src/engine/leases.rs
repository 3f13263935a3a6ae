//! The lease report: what the server measured about a queue's leases, for the admin route,
//! the metrics endpoint and the advisor.

use std::collections::BTreeMap;

use super::Engine;
use crate::error::Result;
use crate::lease_stats::{Buckets, LeaseMetrics, Summary};
use crate::queue::{QueueCounts, QueueStats};
use crate::settings::QueueSettings;
use crate::tenants::{FairnessReport, NoisyTenant};

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
    /// A standard queue's fair-queue figures (`tenants.rs`); None for a FIFO queue, and
    /// where the backend does not keep them.
    pub fairness: Option<Fairness>,
}

/// AWS's fair-queue metrics for one queue, and Leasehold's own look at each noisy tenant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fairness {
    /// ApproximateNumberOfNoisyGroups.
    pub noisy_groups: usize,
    /// ApproximateNumberOfMessages{Visible,NotVisible,Delayed}InQuietGroups: messages
    /// without a group are quiet tenants of their own.
    pub quiet: QueueCounts,
    /// ApproximateAgeOfOldestMessageInQuietGroups.
    pub oldest_quiet_age_ms: Option<u64>,
    /// The noisy tenants, most in flight first, with their recent hold times.
    pub noisy: Vec<NoisyTenant>,
}

impl Fairness {
    /// The figures from the noisy tenants, the queue's counts and its oldest quiet message.
    pub fn of(
        report: FairnessReport,
        counts: QueueCounts,
        oldest_quiet_sent_ms: Option<u64>,
        now: u64,
    ) -> Fairness {
        let noisy = report.noisy_counts;
        Fairness {
            noisy_groups: report.noisy.len(),
            quiet: QueueCounts {
                visible: counts.visible.saturating_sub(noisy.visible),
                not_visible: counts.not_visible.saturating_sub(noisy.in_flight),
                delayed: counts.delayed.saturating_sub(noisy.delayed),
            },
            oldest_quiet_age_ms: oldest_quiet_sent_ms.map(|sent| now.saturating_sub(sent)),
            noisy: report.noisy,
        }
    }
}

impl LeaseReport {
    /// A queue's report from its measurements and what it holds now: the same for every
    /// backend (the engine's below; PostgreSQL's, from the whole cluster's measurements).
    pub fn of(
        metrics: &LeaseMetrics,
        now: u64,
        stats: QueueStats,
        held: (QueueCounts, Option<u64>),
        settings: &QueueSettings,
    ) -> LeaseReport {
        let (counts, oldest_sent_ms) = held;
        LeaseReport {
            hold_total: metrics.hold.total(),
            hold_recent: metrics.hold.recent(now),
            hold_buckets: metrics.hold.buckets(),
            first_receive_total: metrics.first_receive.total(),
            first_receive_recent: metrics.first_receive.recent(now),
            stats,
            receive_count_histogram: metrics.receive_counts.clone(),
            extensions_per_message: metrics.extensions_per_message.clone(),
            oldest_message_age_ms: oldest_sent_ms.map(|sent| now.saturating_sub(sent)),
            counts,
            visibility_timeout_s: settings.visibility_timeout_s,
            max_receive_count: settings.redrive.as_ref().map(|r| r.max_receive_count),
            retention_s: settings.retention_s,
            fairness: None,
        }
    }
}

impl Engine {
    pub fn lease_report(&mut self, name: &str) -> Result<LeaseReport> {
        self.with_sink(|e, sink| e.lease_report_striped(name, sink))
    }

    /// Every queue's name, for reports over all queues: in the table's own order, not by
    /// name, so that a visit of each in turn walks the table's memory in order (with 50,000
    /// queues, a scrape's visits in name order spent most of their time waiting for memory).
    pub fn queue_names(&self) -> Vec<String> {
        self.queues.keys().cloned().collect()
    }
}

//! The lease report as a document: what `GET /_leasehold/queues/{name}/leases` answers and
//! `leasehold advise` reads back. One struct for both ends, so the names cannot drift.

use std::collections::BTreeMap;

use leasehold_engine::{
    DurationSummary, Fairness, LeaseReport, QueueCounts, HOLD_BUCKETS_MS, LEASE_WINDOW_MS,
};
use serde::{Deserialize, Serialize};

/// Quantiles of measured durations, in milliseconds; None until something was measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quantiles {
    pub count: u64,
    pub p50: Option<u64>,
    pub p90: Option<u64>,
    pub p95: Option<u64>,
    pub p99: Option<u64>,
    pub p999: Option<u64>,
    pub max: Option<u64>,
}

impl From<Option<DurationSummary>> for Quantiles {
    fn from(s: Option<DurationSummary>) -> Self {
        s.map_or_else(Quantiles::default, |s| Quantiles {
            count: s.count,
            p50: Some(s.p50),
            p90: Some(s.p90),
            p95: Some(s.p95),
            p99: Some(s.p99),
            p999: Some(s.p999),
            max: Some(s.max),
        })
    }
}

/// One bucket of the hold-time histogram: holds up to `le_ms` (None: above the last bound).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldBucket {
    pub le_ms: Option<u64>,
    pub count: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageCounts {
    pub visible: usize,
    pub not_visible: usize,
    pub delayed: usize,
}

impl From<QueueCounts> for MessageCounts {
    fn from(c: QueueCounts) -> MessageCounts {
        MessageCounts {
            visible: c.visible,
            not_visible: c.not_visible,
            delayed: c.delayed,
        }
    }
}

/// The queue settings a lease is judged against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LeaseSettings {
    pub visibility_timeout_s: u32,
    pub max_receive_count: Option<u32>,
    pub retention_s: u32,
}

/// One queue's lease report. The names are a contract other tools read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LeaseReportDoc {
    pub queue: String,
    pub lease_hold_ms: Quantiles,
    pub lease_hold_ms_last_15m: Quantiles,
    /// Receive-to-delete times since start in fixed buckets (`HOLD_BUCKETS_MS`, then one
    /// without an upper bound): each bucket's own count, not cumulative.
    #[serde(default)]
    pub lease_hold_buckets: Vec<HoldBucket>,
    pub window_ms: u64,
    pub send_to_first_receive_ms: Quantiles,
    pub send_to_first_receive_ms_last_15m: Quantiles,
    pub deleted_within_lease: u64,
    pub expired_leases: u64,
    pub late_deletes: u64,
    pub repeat_deletes: u64,
    pub released_early: u64,
    pub extensions: u64,
    /// Messages by how many heartbeats they got (keys are counts, as strings in JSON).
    pub extensions_per_message: BTreeMap<u32, u64>,
    pub receive_count_histogram: BTreeMap<u32, u64>,
    pub dlq_moves: u64,
    pub dlq_moves_after_late_delete: u64,
    pub sent: u64,
    pub received: u64,
    pub deleted: u64,
    pub empty_receives: u64,
    pub oldest_message_age_ms: Option<u64>,
    pub messages: MessageCounts,
    pub settings: LeaseSettings,
    /// A standard queue's tenants (fair queues); absent for FIFO queues and where the
    /// backend does not keep them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairness: Option<FairnessDoc>,
}

/// A standard queue's fair-queue figures: AWS's metrics, and each noisy tenant's hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FairnessDoc {
    pub noisy_groups: usize,
    /// Messages of quiet tenants (those without a group among them).
    pub quiet_messages: MessageCounts,
    pub oldest_quiet_message_age_ms: Option<u64>,
    /// The noisy tenants, most in flight first.
    pub noisy_tenants: Vec<NoisyTenantDoc>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NoisyTenantDoc {
    /// Its message group id.
    pub group: String,
    pub messages: MessageCounts,
    /// Its recent leases' mean receive-to-end time (decayed over about a minute).
    pub mean_hold_ms: Option<u64>,
    /// Its share of the queue's recent processing time, 0 to 1.
    pub processing_share: f64,
}

impl FairnessDoc {
    fn of(f: &Fairness) -> FairnessDoc {
        FairnessDoc {
            noisy_groups: f.noisy_groups,
            quiet_messages: f.quiet.into(),
            oldest_quiet_message_age_ms: f.oldest_quiet_age_ms,
            noisy_tenants: f
                .noisy
                .iter()
                .map(|t| NoisyTenantDoc {
                    group: t.group.clone(),
                    messages: MessageCounts {
                        visible: t.counts.visible,
                        not_visible: t.counts.in_flight,
                        delayed: t.counts.delayed,
                    },
                    mean_hold_ms: t.mean_hold_ms,
                    processing_share: f64::from(t.processing_permille) / 1000.0,
                })
                .collect(),
        }
    }
}

impl LeaseReportDoc {
    pub fn of(name: &str, r: &LeaseReport) -> LeaseReportDoc {
        let s = &r.stats;
        LeaseReportDoc {
            queue: name.to_string(),
            lease_hold_ms: r.hold_total.into(),
            lease_hold_ms_last_15m: r.hold_recent.into(),
            lease_hold_buckets: r.hold_buckets.as_ref().map_or_else(Vec::new, |b| {
                let bounds = HOLD_BUCKETS_MS.iter().copied().map(Some).chain([None]);
                bounds
                    .zip(b.counts.iter().copied())
                    .map(|(le_ms, count)| HoldBucket { le_ms, count })
                    .collect()
            }),
            window_ms: LEASE_WINDOW_MS,
            send_to_first_receive_ms: r.first_receive_total.into(),
            send_to_first_receive_ms_last_15m: r.first_receive_recent.into(),
            deleted_within_lease: s.deleted_within_lease,
            expired_leases: s.leases_expired,
            late_deletes: s.late_deletes,
            repeat_deletes: s.repeat_deletes,
            released_early: s.released_early,
            extensions: s.extensions,
            extensions_per_message: r.extensions_per_message.clone(),
            receive_count_histogram: r.receive_count_histogram.clone(),
            dlq_moves: s.dead_lettered,
            dlq_moves_after_late_delete: s.dead_lettered_after_late_delete,
            sent: s.sent,
            received: s.received,
            deleted: s.deleted,
            empty_receives: s.empty_receives,
            oldest_message_age_ms: r.oldest_message_age_ms,
            messages: r.counts.into(),
            settings: LeaseSettings {
                visibility_timeout_s: r.visibility_timeout_s,
                max_receive_count: r.max_receive_count,
                retention_s: r.retention_s,
            },
            fairness: r.fairness.as_ref().map(FairnessDoc::of),
        }
    }
}

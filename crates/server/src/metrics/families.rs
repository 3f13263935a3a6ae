//! The per-queue figures `/metrics` and `/metrics/queues` both write, each once in a table
//! with how the server's one series of it is made from every queue's (summed, or the
//! largest), and the helpers that write a family.

use leasehold_engine::LeaseReport;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// How the server's one series of a per-queue gauge is made from every queue's.
#[derive(Clone, Copy)]
pub(super) enum Total {
    Sum,
    Max,
    /// Meaningless summed (a setting): on the per-queue endpoint only.
    None,
}

/// A gauge each queue has (None: this queue has no such figure).
pub(super) struct QueueGauge {
    pub name: &'static str,
    pub help: &'static str,
    pub of: fn(&LeaseReport) -> Option<f64>,
    pub total: Total,
}

/// A counter each queue has; the server's series is their sum.
pub(super) struct QueueCounter {
    pub name: &'static str,
    pub help: &'static str,
    pub of: fn(&LeaseReport) -> u64,
}

fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// CloudWatch's SQS gauges under their own names, AWS's fair-queue gauges, and the lease a
/// hold time is measured against (the alert on a hold near its lease compares the two).
pub(super) const GAUGES: &[QueueGauge] = &[
    QueueGauge {
        name: "sqs_approximate_number_of_messages_visible",
        help: "Messages available for retrieval.",
        of: |r| Some(r.counts.visible as f64),
        total: Total::Sum,
    },
    QueueGauge {
        name: "sqs_approximate_number_of_messages_not_visible",
        help: "Messages in flight.",
        of: |r| Some(r.counts.not_visible as f64),
        total: Total::Sum,
    },
    QueueGauge {
        name: "sqs_approximate_number_of_messages_delayed",
        help: "Messages delayed.",
        of: |r| Some(r.counts.delayed as f64),
        total: Total::Sum,
    },
    QueueGauge {
        name: "sqs_approximate_age_of_oldest_message_seconds",
        help: "Age of the oldest stored message.",
        of: |r| Some(seconds(r.oldest_message_age_ms.unwrap_or(0))),
        total: Total::Max,
    },
    QueueGauge {
        name: "sqs_approximate_number_of_noisy_groups",
        help: "Message groups (tenants) of a fair queue found noisy.",
        of: |r| Some(r.fairness.as_ref()?.noisy_groups as f64),
        total: Total::Sum,
    },
    QueueGauge {
        name: "sqs_approximate_number_of_messages_visible_in_quiet_groups",
        help: "Messages available for retrieval from quiet tenants.",
        of: |r| Some(r.fairness.as_ref()?.quiet.visible as f64),
        total: Total::Sum,
    },
    QueueGauge {
        name: "sqs_approximate_number_of_messages_not_visible_in_quiet_groups",
        help: "Quiet tenants' messages in flight.",
        of: |r| Some(r.fairness.as_ref()?.quiet.not_visible as f64),
        total: Total::Sum,
    },
    QueueGauge {
        name: "sqs_approximate_number_of_messages_delayed_in_quiet_groups",
        help: "Quiet tenants' messages delayed.",
        of: |r| Some(r.fairness.as_ref()?.quiet.delayed as f64),
        total: Total::Sum,
    },
    QueueGauge {
        name: "sqs_approximate_age_of_oldest_message_in_quiet_groups_seconds",
        help: "Age of the oldest stored message of a quiet tenant.",
        of: |r| {
            Some(seconds(
                r.fairness.as_ref()?.oldest_quiet_age_ms.unwrap_or(0),
            ))
        },
        total: Total::Max,
    },
    QueueGauge {
        name: "leasehold_visibility_timeout_seconds",
        help: "The queue's visibility timeout: the lease a receive takes unless it asks another.",
        of: |r| Some(f64::from(r.visibility_timeout_s)),
        total: Total::None,
    },
    QueueGauge {
        name: "leasehold_lease_hold_recent_max_seconds",
        help: "The longest receive-to-delete time over the last 15 minutes.",
        of: |r| Some(seconds(r.hold_recent?.max)),
        total: Total::Max,
    },
];

/// CloudWatch's SQS counters, and what SQS does not tell.
pub(super) const COUNTERS: &[QueueCounter] = &[
    QueueCounter {
        name: "sqs_number_of_messages_sent",
        help: "Messages added to the queue.",
        of: |r| r.stats.sent,
    },
    QueueCounter {
        name: "sqs_number_of_messages_received",
        help: "Messages returned by ReceiveMessage.",
        of: |r| r.stats.received,
    },
    QueueCounter {
        name: "sqs_number_of_messages_deleted",
        help: "Messages deleted.",
        of: |r| r.stats.deleted,
    },
    QueueCounter {
        name: "sqs_number_of_empty_receives",
        help: "ReceiveMessage calls that returned nothing.",
        of: |r| r.stats.empty_receives,
    },
    QueueCounter {
        name: "leasehold_deleted_within_lease",
        help: "Deletes that arrived while their lease was live.",
        of: |r| r.stats.deleted_within_lease,
    },
    QueueCounter {
        name: "leasehold_late_deletes",
        help: "Deletes that arrived after their lease expired: duplicate work.",
        of: |r| r.stats.late_deletes,
    },
    QueueCounter {
        name: "leasehold_repeat_deletes",
        help: "Deletes whose message was already gone: another copy of the work finished first.",
        of: |r| r.stats.repeat_deletes,
    },
    QueueCounter {
        name: "leasehold_expired_leases",
        help: "Leases that ran out; the message became receivable again.",
        of: |r| r.stats.leases_expired,
    },
    QueueCounter {
        name: "leasehold_released_early",
        help: "Leases given back early: visibility set to 0, or to end sooner (a backoff).",
        of: |r| r.stats.released_early,
    },
    QueueCounter {
        name: "leasehold_lease_extensions",
        help: "Heartbeats: visibility extended on a live lease.",
        of: |r| r.stats.extensions,
    },
    QueueCounter {
        name: "leasehold_dlq_moves",
        help: "Messages moved to the dead-letter queue.",
        of: |r| r.stats.dead_lettered,
    },
    QueueCounter {
        name: "leasehold_dlq_moves_after_late_delete",
        help: "Dead-lettered messages a consumer had finished: the DLQ mirage.",
        of: |r| r.stats.dead_lettered_after_late_delete,
    },
];

pub(super) const FINISHED_BY_RECEIVE_COUNT: (&str, &str) = (
    "leasehold_finished_messages_by_receive_count",
    "Deleted or dead-lettered messages by how many times they were delivered.",
);

pub(super) const HOLD_HISTOGRAM: (&str, &str) = (
    "leasehold_lease_hold_seconds",
    "Receive-to-delete time since start.",
);

/// A series' labels: pairs of a name and a value.
pub(super) type Labels = Vec<(&'static str, String)>;

pub(super) fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    let mut family =
        encoder.encode_descriptor(name, help, None, ConstGauge::new(0.0).metric_type())?;
    for (labels, value) in rows {
        ConstGauge::new(*value).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

pub(super) fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let mut family =
        encoder.encode_descriptor(name, help, None, ConstCounter::new(0u64).metric_type())?;
    for (labels, value) in rows {
        ConstCounter::new(*value).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

//! `/metrics`: the server's series, a fixed set whatever the number of queues: every queue's
//! figures summed (or the largest, for ages and hold times; the counters with those of the
//! queues gone, `grows`), the number of queues, and the server's own pressure gauges.

use std::collections::HashMap;

use leasehold_engine::LeaseReport;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::families::{
    counter, gauge, Labels, Total, COUNTERS, FINISHED_BY_RECEIVE_COUNT, GAUGES, HOLD_HISTOGRAM,
};
use super::grows::{Grows, Retired, RECEIVE_COUNT_SERIES};
use super::per_queue::hold_buckets;
use crate::state::AppState;

/// Every queue's figures added up, taken at scrape time.
#[derive(Debug)]
pub(super) struct Totals {
    queues: usize,
    /// Each of `GAUGES`' total, none for those without one.
    gauges: Vec<Option<f64>>,
    /// The growing figures of the queues there and of those gone (`Retired`).
    grows: Grows,
}

impl Totals {
    /// Adds up `reports`, and what the queues gone since the server started counted; each
    /// report is dropped once counted, so a scrape of many queues holds little more than one
    /// report at a time beside the list.
    pub(super) fn of(reports: Vec<(String, LeaseReport)>, retired: &mut Retired) -> Totals {
        let mut totals = Totals {
            // Zero with no queue: every series is there whatever the queues (ages and
            // counts are never negative, so zero is also where a largest starts).
            gauges: GAUGES
                .iter()
                .map(|g| match g.total {
                    Total::Sum | Total::Max => Some(0.0),
                    Total::None => None,
                })
                .collect(),
            grows: Grows::zero(),
            queues: 0,
        };
        let mut seen = HashMap::new();
        for (key, report) in reports {
            totals.add_gauges(&report);
            let grows = Grows::of(&report);
            totals.grows.add(&grows);
            retired.seen(&mut seen, key, grows);
        }
        totals.grows.add(&retired.scraped(seen));
        totals
    }

    fn add_gauges(&mut self, r: &LeaseReport) {
        self.queues += 1;
        for (total, g) in self.gauges.iter_mut().zip(GAUGES) {
            let (Some(t), Some(value)) = (total.as_mut(), (g.of)(r)) else {
                continue;
            };
            *t = match g.total {
                Total::Max => t.max(value),
                Total::Sum | Total::None => *t + value,
            };
        }
    }
}

impl Collector for Totals {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        gauge(
            &mut encoder,
            "leasehold_queues",
            "Queues on this server (every region and account); /metrics/queues has each one's series.",
            &[(Vec::new(), self.queues as f64)],
        )?;
        for (total, g) in self.gauges.iter().zip(GAUGES) {
            if let Some(value) = total {
                gauge(&mut encoder, g.name, g.help, &[(Vec::new(), *value)])?;
            }
        }
        for (total, c) in self.grows.counters.iter().zip(COUNTERS) {
            counter(&mut encoder, c.name, c.help, &[(Vec::new(), *total)])?;
        }
        let (name, help) = HOLD_HISTOGRAM;
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
        let hold = &self.grows;
        family.encode_histogram::<NoLabelSet>(
            hold.hold_sum_ms as f64 / 1000.0,
            hold.hold_counts.iter().sum(),
            &hold_buckets(&hold.hold_counts),
            None,
        )?;
        // Every count's series, zero or not, so the set is the same at every scrape.
        let by_receives: Vec<(Labels, f64)> = (1..=RECEIVE_COUNT_SERIES + 1)
            .map(|count| {
                let label = match count > RECEIVE_COUNT_SERIES {
                    true => format!("{count}+"),
                    false => count.to_string(),
                };
                let messages = self.grows.by_receives.get(&count).copied().unwrap_or(0);
                (vec![("receive_count", label)], messages as f64)
            })
            .collect();
        let (name, help) = FINISHED_BY_RECEIVE_COUNT;
        gauge(&mut encoder, name, help, &by_receives)
    }
}

/// The server's own pressure gauges, taken at scrape time: memory against its limit, and
/// whether (and why) new messages are refused.
#[derive(Debug, Default)]
pub(super) struct Pressure {
    resident_bytes: u64,
    limit_bytes: u64,
    refused_for_memory: u64,
    /// The reason sends are refused now: `memory` or `disk`.
    refusing: Option<&'static str>,
}

impl Pressure {
    pub(super) fn of(state: &AppState) -> Pressure {
        let refusing = if state.memory.reason().is_some() {
            Some("memory")
        } else if state.backend.refusing_sends().is_some() {
            Some("disk")
        } else {
            None
        };
        Pressure {
            resident_bytes: state.memory.resident(),
            limit_bytes: state.memory.limit(),
            refused_for_memory: state.memory.refused(),
            refusing,
        }
    }
}

impl Collector for Pressure {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let plain = |v: f64| vec![(Vec::new(), v)];
        gauge(
            &mut encoder,
            "leasehold_memory_resident_bytes",
            "The server's resident memory, as last measured.",
            &plain(self.resident_bytes as f64),
        )?;
        gauge(
            &mut encoder,
            "leasehold_memory_limit_bytes",
            "The memory limit the server keeps under (cgroup, --memory-limit or a share of RAM).",
            &plain(self.limit_bytes as f64),
        )?;
        let refusing = |reason: &'static str| {
            (
                vec![("reason", reason.to_string())],
                f64::from(u8::from(self.refusing == Some(reason))),
            )
        };
        gauge(
            &mut encoder,
            "leasehold_sends_refused",
            "1 while new messages are refused (RequestThrottled), by reason.",
            &[refusing("memory"), refusing("disk")],
        )?;
        counter(
            &mut encoder,
            "leasehold_sends_refused_for_memory",
            "Send requests refused because memory was near its limit.",
            &[(Vec::new(), self.refused_for_memory)],
        )
    }
}

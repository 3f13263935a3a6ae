//! `/metrics/queues`: a set of series per queue, each labelled by `queue` (its key: the bare
//! name in the server's own region and account), for the queues a scrape asks for.

use leasehold_engine::{LeaseReport, NoisyTenant, HOLD_BUCKETS_MS};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::families::{
    counter, gauge, Labels, COUNTERS, FINISHED_BY_RECEIVE_COUNT, GAUGES, HOLD_HISTOGRAM,
};

/// The reports of the queues a scrape asks for, taken at scrape time.
#[derive(Debug)]
pub(super) struct QueueReports(pub Vec<(String, LeaseReport)>);

/// The noisy tenants of one queue with series of their own.
const NOISY_TENANT_SERIES: usize = 20;

fn queue(name: &str) -> Labels {
    vec![("queue", name.to_string())]
}

/// A label value as the exposition formats write it: prometheus-client writes values as
/// given, and a message group id (any printable ASCII, a sender's choice) may hold a quote or
/// a backslash.
fn escaped_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

impl QueueReports {
    /// Receive-to-delete time since start as a Prometheus histogram: fixed buckets, so the
    /// histograms of several servers add up (quantiles do not).
    fn hold_histogram(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (name, help) = HOLD_HISTOGRAM;
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
        for (queue_name, report) in &self.0 {
            let Some(buckets) = &report.hold_buckets else {
                continue;
            };
            let counted = hold_buckets(&buckets.counts);
            let total = buckets.counts.iter().sum();
            family
                .encode_family(&queue(queue_name))?
                .encode_histogram::<NoLabelSet>(
                    buckets.sum_ms as f64 / 1000.0,
                    total,
                    &counted,
                    None,
                )?;
        }
        Ok(())
    }

    /// Receive-to-delete time over the last 15 minutes by quantile: per queue only (the
    /// quantiles of several queues do not add up).
    fn hold_quantiles(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut hold = Vec::new();
        for (name, r) in &self.0 {
            let Some(s) = r.hold_recent else {
                continue;
            };
            for (quantile, ms) in [
                ("0.5", s.p50),
                ("0.9", s.p90),
                ("0.99", s.p99),
                ("0.999", s.p999),
            ] {
                let labels = vec![("queue", name.clone()), ("quantile", quantile.to_string())];
                hold.push((labels, ms as f64 / 1000.0));
            }
        }
        gauge(
            encoder,
            "leasehold_lease_hold_recent_seconds",
            "Receive-to-delete time over the last 15 minutes, by quantile.",
            &hold,
        )
    }

    /// Each noisy tenant's share: of the `NOISY_TENANT_SERIES` with most in flight per
    /// queue, so the series stay few whatever the senders do (a tenant turns noisy with a
    /// tenth of its queue's leases or processing time, but stays so until its backlog is
    /// gone).
    fn noisy_tenants(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let per_tenant = |f: &dyn Fn(&NoisyTenant) -> f64| -> Vec<(Labels, f64)> {
            let fair = self
                .0
                .iter()
                .filter_map(|(name, r)| Some((name, r.fairness.as_ref()?)));
            let rows = fair.flat_map(|(name, fairness)| {
                let most_in_flight = fairness.noisy.iter().take(NOISY_TENANT_SERIES);
                most_in_flight.map(move |tenant| {
                    let group = escaped_label(&tenant.group);
                    let labels = vec![("queue", name.to_string()), ("group", group)];
                    (labels, f(tenant))
                })
            });
            rows.collect()
        };
        gauge(
            encoder,
            "leasehold_noisy_tenant_messages_in_flight",
            "A noisy tenant's messages in flight.",
            &per_tenant(&|t| t.counts.in_flight as f64),
        )?;
        gauge(
            encoder,
            "leasehold_noisy_tenant_hold_seconds",
            "A noisy tenant's recent mean receive-to-end time.",
            &per_tenant(&|t| t.mean_hold_ms.unwrap_or(0) as f64 / 1000.0),
        )?;
        gauge(
            encoder,
            "leasehold_noisy_tenant_processing_share",
            "A noisy tenant's share of its queue's recent processing time, 0 to 1.",
            &per_tenant(&|t| f64::from(t.processing_permille) / 1000.0),
        )
    }
}

/// The histogram's buckets as the encoder takes them: each upper bound in seconds (the last
/// one infinite) with its count.
pub(super) fn hold_buckets(counts: &[u64]) -> Vec<(f64, u64)> {
    let bounds = HOLD_BUCKETS_MS
        .iter()
        .map(|ms| *ms as f64 / 1000.0)
        .chain([f64::MAX]);
    bounds.zip(counts.iter().copied()).collect()
}

impl Collector for QueueReports {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for g in GAUGES {
            let rows: Vec<(Labels, f64)> = self
                .0
                .iter()
                .filter_map(|(name, r)| Some((queue(name), (g.of)(r)?)))
                .collect();
            gauge(&mut encoder, g.name, g.help, &rows)?;
        }
        for c in COUNTERS {
            let rows: Vec<(Labels, u64)> =
                self.0.iter().map(|(n, r)| (queue(n), (c.of)(r))).collect();
            counter(&mut encoder, c.name, c.help, &rows)?;
        }
        self.hold_quantiles(&mut encoder)?;
        self.hold_histogram(&mut encoder)?;
        self.noisy_tenants(&mut encoder)?;
        let mut by_receives = Vec::new();
        for (name, r) in &self.0 {
            for (count, messages) in &r.receive_count_histogram {
                let labels = vec![
                    ("queue", name.clone()),
                    ("receive_count", count.to_string()),
                ];
                by_receives.push((labels, *messages as f64));
            }
        }
        let (name, help) = FINISHED_BY_RECEIVE_COUNT;
        gauge(&mut encoder, name, help, &by_receives)
    }
}

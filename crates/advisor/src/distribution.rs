//! A processing-time distribution: from raw durations or from measured quantiles.

use leasehold_engine::DurationSummary;

/// Quantiles in seconds, and the raw durations when they are known.
#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    sorted: Option<Vec<f64>>,
}

fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

impl Distribution {
    /// From measured durations in seconds; None when there are none.
    pub fn from_durations(durations: &[f64]) -> Option<Distribution> {
        let mut sorted: Vec<f64> = durations
            .iter()
            .copied()
            .filter(|d| d.is_finite() && *d >= 0.0)
            .collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        Some(Distribution {
            count: sorted.len() as u64,
            p50: nearest_rank(&sorted, 0.5),
            p90: nearest_rank(&sorted, 0.9),
            p99: nearest_rank(&sorted, 0.99),
            p999: nearest_rank(&sorted, 0.999),
            max: *sorted.last().expect("not empty"),
            sorted: Some(sorted),
        })
    }

    /// From quantiles in seconds, as a report or a course gives them.
    pub fn from_quantiles(p50: f64, p90: f64, p99: f64, p999: f64, max: f64) -> Distribution {
        Distribution {
            count: 0,
            p50,
            p90,
            p99,
            p999,
            max: max.max(p999),
            sorted: None,
        }
    }

    /// The same distribution, stated as measured over `count` samples.
    pub fn with_count(mut self, count: u64) -> Distribution {
        self.count = count;
        self
    }

    /// From the server's lease-hold summary (milliseconds).
    pub fn from_summary(s: &DurationSummary) -> Distribution {
        let secs = |ms: u64| ms as f64 / 1000.0;
        Distribution {
            count: s.count,
            ..Distribution::from_quantiles(
                secs(s.p50),
                secs(s.p90),
                secs(s.p99),
                secs(s.p999),
                secs(s.max),
            )
        }
    }

    /// The share of work that takes longer than `seconds`: exact from raw durations, else
    /// interpolated linearly between the known quantiles.
    pub fn fraction_above(&self, seconds: f64) -> f64 {
        if let Some(sorted) = &self.sorted {
            let above = sorted.len() - sorted.partition_point(|d| *d <= seconds);
            return above as f64 / sorted.len() as f64;
        }
        let points = [
            (0.0, 0.0),
            (0.5, self.p50),
            (0.9, self.p90),
            (0.99, self.p99),
            (0.999, self.p999),
            (1.0, self.max),
        ];
        if seconds >= self.max {
            return 0.0;
        }
        for pair in points.windows(2) {
            let ((q0, v0), (q1, v1)) = (pair[0], pair[1]);
            if seconds < v1 {
                let within = if v1 > v0 {
                    (seconds - v0).max(0.0) / (v1 - v0)
                } else {
                    1.0
                };
                return 1.0 - (q0 + (q1 - q0) * within);
            }
        }
        0.0
    }
}

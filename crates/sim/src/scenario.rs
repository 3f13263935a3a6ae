//! Scenarios: what arrives, how long work takes, how the database slows down, how consumers
//! behave and scale, and what goes wrong when. Read from TOML; every field has a default.

use serde::{Deserialize, Serialize};

use crate::SimError;

/// The name the dwell times of the steady arrivals, which belong to no tenant, go under.
pub const OTHERS: &str = "others";

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub seed: u64,
    pub duration_s: f64,
    /// Width of one row of the time series.
    pub step_s: f64,
    /// Window over which amplification (executions per distinct message) is measured.
    pub amplification_window_s: f64,
    /// Window of the load multiple (executions over arrivals), the seeds' "Nx the load": a
    /// minute of the story (a lab scenario at 15x says 4).
    pub load_window_s: f64,
    /// How long the system must stay healthy after the last trigger to count as recovered
    /// (the rest of the run will do, if it is at least two fifths of this).
    pub recovery_hold_s: f64,
    pub queue: QueueSpec,
    pub arrivals: Arrivals,
    pub work: Work,
    pub database: Database,
    pub consumers: Consumers,
    pub scaling: Scaling,
    pub triggers: Vec<Trigger>,
    /// Tenants that send beside the steady arrivals (which belong to no tenant: each message
    /// its own, as on AWS), each with its own rate, time and work: a flood, a slow tenant.
    pub tenants: Vec<TenantSpec>,
    /// How `leasehold lab` runs this scenario for real (time scale, database, redrive); the
    /// simulator reads nothing here.
    pub lab: Option<toml::Table>,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            name: "unnamed".into(),
            description: String::new(),
            seed: 1,
            duration_s: 3600.0,
            step_s: 10.0,
            amplification_window_s: 300.0,
            load_window_s: 60.0,
            recovery_hold_s: 300.0,
            queue: QueueSpec::default(),
            arrivals: Arrivals::default(),
            work: Work::default(),
            database: Database::default(),
            consumers: Consumers::default(),
            scaling: Scaling::default(),
            triggers: Vec::new(),
            tenants: Vec::new(),
            lab: None,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueSpec {
    pub visibility_timeout_s: u32,
    /// 0 for no dead-letter queue.
    pub max_receive_count: u32,
    /// `strict` (the textbook: a stale handle deletes nothing) or `aws` (a stale handle still
    /// deletes, as real SQS does on standard queues).
    pub lease_mode: String,
    pub retention_s: u32,
    /// Whether tenants' messages carry their tenant as MessageGroupId, so the queue is fair
    /// (quiet tenants' messages first while one is noisy); false sends the same traffic
    /// without it, oldest first.
    pub fair: bool,
}

impl Default for QueueSpec {
    fn default() -> Self {
        QueueSpec {
            visibility_timeout_s: 30,
            max_receive_count: 0,
            lease_mode: "strict".into(),
            retention_s: 1_209_600,
            fair: true,
        }
    }
}

/// One tenant of a shared queue: Poisson arrivals at `rate_per_s` from `from_s` until
/// `to_s` (default: the whole run), its work `work_scale` times the usual.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantSpec {
    pub name: String,
    pub rate_per_s: f64,
    pub from_s: f64,
    pub to_s: Option<f64>,
    pub work_scale: f64,
}

impl Default for TenantSpec {
    fn default() -> Self {
        TenantSpec {
            name: "tenant".into(),
            rate_per_s: 1.0,
            from_s: 0.0,
            to_s: None,
            work_scale: 1.0,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Arrivals {
    /// `steady` (Poisson at `rate_per_s`), plus any `bursts`, or `file` (one arrival time in
    /// seconds per line).
    pub kind: String,
    pub rate_per_s: f64,
    pub bursts: Vec<Burst>,
    /// From `at_s` on, arrivals come at `rate_per_s` instead (ramping load down after a trigger
    /// shows hysteresis: the load at which a spiral ends is lower than the one that started it).
    pub rate_changes: Vec<RateChange>,
    pub file: Option<String>,
}

impl Arrivals {
    /// The steady arrival rate at `t_s` seconds into the run.
    pub fn rate_at(&self, t_s: f64) -> f64 {
        self.rate_changes
            .iter()
            .filter(|c| c.at_s <= t_s)
            .max_by(|a, b| a.at_s.total_cmp(&b.at_s))
            .map_or(self.rate_per_s, |c| c.rate_per_s)
    }

    /// The first rate change after `t_s`.
    pub fn next_change_after(&self, t_s: f64) -> Option<f64> {
        self.rate_changes
            .iter()
            .map(|c| c.at_s)
            .filter(|at| *at > t_s)
            .reduce(f64::min)
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RateChange {
    pub at_s: f64,
    pub rate_per_s: f64,
}

impl Default for Arrivals {
    fn default() -> Self {
        Arrivals {
            kind: "steady".into(),
            rate_per_s: 0.5,
            bursts: Vec::new(),
            rate_changes: Vec::new(),
            file: None,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Burst {
    pub at_s: f64,
    pub count: u64,
}

/// Unloaded processing time of one message.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Work {
    /// `fixed`, `exponential` (mean), `lognormal` (median, sigma), or `quantiles` (p50, p90,
    /// p99, p999, max; piecewise linear between them).
    pub kind: String,
    pub mean_s: f64,
    pub median_s: f64,
    pub sigma: f64,
    pub p50_s: f64,
    pub p90_s: f64,
    pub p99_s: f64,
    pub p999_s: f64,
    pub max_s: f64,
    /// Whether a message's unloaded time is drawn once and kept for every execution of it (a
    /// slow document is slow every time, as the seeds' are), rather than drawn afresh.
    pub per_message: bool,
}

impl Work {
    /// The mean unloaded time: of the lognormal, of the piecewise-linear quantiles, or the
    /// mean itself.
    pub fn mean_s(&self) -> f64 {
        let mean = match self.kind.as_str() {
            "lognormal" => self.median_s * (self.sigma * self.sigma / 2.0).exp(),
            "quantiles" => {
                let points = self.quantile_points();
                points
                    .windows(2)
                    .map(|p| (p[1].0 - p[0].0) * (p[0].1 + p[1].1) / 2.0)
                    .sum()
            }
            _ => self.mean_s,
        };
        mean.max(0.001)
    }

    /// The quantiles as (share, seconds), from 0 to the maximum.
    pub(crate) fn quantile_points(&self) -> [(f64, f64); 6] {
        let max = self.max_s.max(self.p999_s);
        [
            (0.0, 0.0),
            (0.5, self.p50_s),
            (0.9, self.p90_s),
            (0.99, self.p99_s),
            (0.999, self.p999_s),
            (1.0, max),
        ]
    }
}

impl Default for Work {
    fn default() -> Self {
        Work {
            kind: "lognormal".into(),
            mean_s: 15.0,
            median_s: 15.0,
            sigma: 0.2,
            p50_s: 0.0,
            p90_s: 0.0,
            p99_s: 0.0,
            p999_s: 0.0,
            max_s: 0.0,
            per_message: false,
        }
    }
}

/// The downstream database: it slows down with concurrent load past its capacity, and with
/// row-lock contention when duplicates of one message work on the same rows at once.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Database {
    /// Concurrent executions it serves without slowing down.
    pub capacity: u32,
    /// Each execution beyond capacity adds this fraction of capacity's worth of slowdown:
    /// time x (1 + load_slope x (running - capacity) / capacity).
    pub load_slope: f64,
    /// Copies of one message running at once fight over the same rows: each takes
    /// (1 + contention x (copies - 1)) times as long, recomputed as copies start and end.
    pub contention: f64,
}

impl Default for Database {
    fn default() -> Self {
        Database {
            capacity: 10,
            load_slope: 1.0,
            contention: 0.4,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Consumers {
    /// Renew the lease every lease/3 while working.
    pub heartbeat: bool,
    /// Claim each message in an idempotency store first: skip completed work, put back work
    /// in progress elsewhere.
    pub idempotency: bool,
    /// At most this many executions at once across the fleet (0: no ceiling).
    pub concurrency_ceiling: u32,
    /// Token bucket: at most this many executions started per second (0: none).
    pub rate_limit_per_s: f64,
    /// Retry budget (a token bucket over retries, as Finagle's): each first execution earns
    /// this many retry tokens (0: no budget); a redelivered message runs only on a token,
    /// else it goes back with the backoff. Caps amplification near 1 + this.
    pub retry_budget: f64,
    /// What a failed execution does: `wait-lease` (nothing; the lease runs out), `release`
    /// (visibility 0), or `backoff` (visibility = backoff_s x 2^(receives-1), capped at 900 s,
    /// in whole seconds and drawn in its upper half, as the runtime's backoff is).
    pub on_failure: String,
    pub backoff_s: f64,
    /// Graceful shutdown on deploy: how long a stopping worker may finish its message.
    pub graceful_shutdown_s: f64,
    /// Whether a stopping worker's heartbeats stop when its shutdown begins (a common bug:
    /// the heartbeat is torn down first) rather than when its message is done.
    pub heartbeat_stops_on_shutdown: bool,
}

impl Default for Consumers {
    fn default() -> Self {
        Consumers {
            heartbeat: false,
            idempotency: false,
            concurrency_ceiling: 0,
            rate_limit_per_s: 0.0,
            retry_budget: 0.0,
            on_failure: "wait-lease".into(),
            backoff_s: 5.0,
            graceful_shutdown_s: 0.0,
            heartbeat_stops_on_shutdown: false,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scaling {
    /// `fixed` (a fleet of `workers`) or `lambda` (scale on visible messages up to
    /// `max_concurrency`, adding at most `ramp_per_minute`).
    pub kind: String,
    pub workers: u32,
    pub max_concurrency: u32,
    pub ramp_per_minute: u32,
    pub interval_s: f64,
    /// With `lambda`: the function timeout. An execution still running then is killed (no
    /// delete; its message comes back when its lease ends), as Lambda does at most at 900 s.
    pub function_timeout_s: f64,
}

impl Default for Scaling {
    fn default() -> Self {
        Scaling {
            kind: "fixed".into(),
            workers: 10,
            max_concurrency: 1000,
            ramp_per_minute: 60,
            interval_s: 10.0,
            function_timeout_s: 900.0,
        }
    }
}

/// Something going wrong.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Trigger {
    /// `blip` (work takes `factor` times longer from start_s to end_s), `lock` (the rows every
    /// execution writes are locked from start_s to end_s, as a migration's table lock would:
    /// an execution reaching its write, after (1 - database.contention) of its time, waits for
    /// the end, then does the rest), `crash` (`workers`
    /// busy workers die at start_s, back after restart_after_s), `deploy` (a rolling restart
    /// from start_s, one worker every interval_s), `poison` (`count` messages that always
    /// fail, sent at start_s).
    pub kind: String,
    pub start_s: f64,
    pub end_s: f64,
    pub factor: f64,
    pub workers: u32,
    pub restart_after_s: f64,
    pub interval_s: f64,
    pub count: u64,
}

impl Default for Trigger {
    fn default() -> Self {
        Trigger {
            kind: "blip".into(),
            start_s: 0.0,
            end_s: 0.0,
            factor: 1.0,
            workers: 1,
            restart_after_s: 30.0,
            interval_s: 10.0,
            count: 1,
        }
    }
}

impl Scenario {
    pub fn from_toml(text: &str) -> Result<Scenario, SimError> {
        let scenario: Scenario =
            toml::from_str(text).map_err(|e| SimError::Scenario(e.to_string()))?;
        scenario.validate()?;
        Ok(scenario)
    }

    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |m: String| Err(SimError::Scenario(m));
        if !(self.duration_s > 0.0
            && self.step_s > 0.0
            && self.amplification_window_s > 0.0
            && self.load_window_s > 0.0
            && self.recovery_hold_s > 0.0)
        {
            return bad(
                "duration_s, step_s, amplification_window_s, load_window_s and recovery_hold_s must be positive"
                    .into(),
            );
        }
        if self.tenants.iter().any(|t| {
            let rate = (0.0..f64::INFINITY).contains(&t.rate_per_s);
            let scale = t.work_scale > 0.0 && t.work_scale.is_finite();
            !(rate && scale && t.from_s >= 0.0) || t.name.is_empty() || t.name == OTHERS
        }) {
            return bad(format!(
                "each tenant needs a name (not {OTHERS:?}), a finite rate_per_s >= 0, from_s >= 0 and a finite work_scale > 0"
            ));
        }
        if self.load_window_s < self.step_s {
            return bad("load_window_s must be at least step_s".into());
        }
        if self
            .arrivals
            .rate_changes
            .iter()
            .any(|c| !(c.rate_per_s >= 0.0 && c.at_s >= 0.0))
        {
            return bad("arrivals.rate_changes need at_s >= 0 and rate_per_s >= 0".into());
        }
        if !matches!(self.queue.lease_mode.as_str(), "strict" | "aws") {
            return bad(format!(
                "queue.lease_mode is strict or aws, not {:?}",
                self.queue.lease_mode
            ));
        }
        if !(1..=43_200).contains(&self.queue.visibility_timeout_s) {
            return bad("queue.visibility_timeout_s must be 1..=43200".into());
        }
        if !matches!(self.arrivals.kind.as_str(), "steady" | "file") {
            return bad(format!(
                "arrivals.kind is steady or file, not {:?}",
                self.arrivals.kind
            ));
        }
        if !matches!(
            self.work.kind.as_str(),
            "fixed" | "exponential" | "lognormal" | "quantiles"
        ) {
            return bad(format!("unknown work.kind {:?}", self.work.kind));
        }
        if !matches!(
            self.consumers.on_failure.as_str(),
            "wait-lease" | "release" | "backoff"
        ) {
            return bad(format!(
                "unknown consumers.on_failure {:?}",
                self.consumers.on_failure
            ));
        }
        if !(0.0..=900.0).contains(&self.consumers.backoff_s) {
            return bad("consumers.backoff_s must be in [0, 900] seconds".into());
        }
        if !(self.scaling.function_timeout_s > 0.0 && self.scaling.function_timeout_s <= 900.0) {
            return bad("scaling.function_timeout_s must be in (0, 900], Lambda's range".into());
        }
        if !matches!(self.scaling.kind.as_str(), "fixed" | "lambda") || self.scaling.workers == 0 {
            return bad("scaling.kind is fixed or lambda, with workers >= 1".into());
        }
        for t in &self.triggers {
            if !matches!(
                t.kind.as_str(),
                "blip" | "lock" | "crash" | "deploy" | "poison"
            ) {
                return bad(format!("unknown trigger kind {:?}", t.kind));
            }
        }
        Ok(())
    }

    /// When the last trigger is over: recovery is measured from here.
    pub fn triggers_end_s(&self) -> Option<f64> {
        self.triggers
            .iter()
            .map(|t| match t.kind.as_str() {
                "blip" | "lock" => t.end_s,
                "deploy" => {
                    t.start_s + t.interval_s * self.scaling.workers as f64 + t.restart_after_s
                }
                "crash" => t.start_s + t.restart_after_s,
                _ => t.start_s,
            })
            .reduce(f64::max)
    }

    /// A `lambda` fleet's most consumers at once: `max_concurrency`, and the consumers'
    /// `concurrency_ceiling` where one is set (an SQS event source's maximum concurrency caps
    /// the function's instances, not only the executions among them).
    pub fn lambda_limit(&self) -> u32 {
        let ceiling = self.consumers.concurrency_ceiling;
        let limit = self.scaling.max_concurrency.max(1);
        if ceiling > 0 {
            limit.min(ceiling)
        } else {
            limit
        }
    }

    /// How a `lambda` fleet of `active` consumers changes at a scaling interval while
    /// `visible` messages wait: toward one consumer per visible message (at least one, at most
    /// `lambda_limit`), growing by at most `ramp_per_minute`'s share of the interval.
    /// Positive: start that many; negative: stop that many idle ones (a busy one finishes).
    /// The simulator's and the lab's controllers both follow it.
    pub fn lambda_change(&self, visible: u64, active: usize) -> i64 {
        let s = &self.scaling;
        let target = visible.clamp(1, u64::from(self.lambda_limit())) as i64;
        let active = active as i64;
        if target > active {
            let step = ((f64::from(s.ramp_per_minute) * s.interval_s / 60.0).ceil() as i64).max(1);
            (target - active).min(step)
        } else {
            target - active
        }
    }
}

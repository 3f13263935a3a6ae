//! The sizing advisor: a pure function from a processing-time distribution and a queue's
//! settings to a visibility timeout, a heartbeat period and a maxReceiveCount, each with the
//! reason and the numbers behind it.
//!
//! The method is the seed course module's: size from the tail (p99 including in-process
//! queueing, times a safety factor); when the tail is long, heartbeat instead of a bigger
//! constant (a base lease covering p90 with headroom, renewed every lease/3); check
//! maxReceiveCount x lease against retention; keep graceful shutdown below the lease; with
//! Lambda, at least 6 x the function timeout; past 12 hours, a job record, not a lease.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod checks;
mod distribution;

pub use checks::{evaluate, problems, Evaluation, Setting};
pub use distribution::Distribution;

/// The longest a lease can be extended, from its receive.
pub const TWELVE_HOURS_S: f64 = 43_200.0;

/// What the advisor is told besides the distribution.
#[derive(Clone, Debug, PartialEq)]
pub struct Inputs {
    /// The queue's current VisibilityTimeout, to judge it.
    pub current_visibility_s: Option<f64>,
    /// The queue's current (or planned) maxReceiveCount.
    pub max_receive_count: Option<u32>,
    pub retention_s: Option<f64>,
    /// A Lambda consumer's function timeout.
    pub lambda_timeout_s: Option<f64>,
    /// The consumer's graceful-shutdown budget.
    pub shutdown_grace_s: Option<f64>,
    /// Multiplier on p99 for a constant lease (the module's 2).
    pub safety_factor: f64,
    /// Longest acceptable wait before a crashed consumer's messages are redelivered; a
    /// constant lease longer than this calls for heartbeats instead, and a heartbeat's base
    /// lease stays within it.
    pub max_crash_recovery_s: f64,
    /// Longest downstream outage to ride out without sending healthy messages to the DLQ:
    /// maxReceiveCount x lease must reach it.
    pub max_outage_s: f64,
}

impl Inputs {
    /// What makes no sense to advise from: a usage error for a command line to refuse.
    pub fn check(&self) -> Result<(), String> {
        if !(self.safety_factor.is_finite() && self.safety_factor >= 1.0) {
            return Err(format!(
                "a safety factor of {} sizes the lease below p99: it must be at least 1",
                self.safety_factor
            ));
        }
        if let Some(lambda) = self.lambda_timeout_s.filter(|l| *l > 900.0) {
            return Err(format!(
                "a Lambda function timeout of {lambda} s is past Lambda's most, 900 s"
            ));
        }
        let positive = [
            ("crash budget", Some(self.max_crash_recovery_s)),
            ("outage budget", Some(self.max_outage_s)),
            ("Lambda timeout", self.lambda_timeout_s),
            ("retention period", self.retention_s),
            ("visibility timeout", self.current_visibility_s),
        ];
        for (what, value) in positive {
            if let Some(v) = value.filter(|v| !(v.is_finite() && *v > 0.0)) {
                return Err(format!(
                    "the {what} must be a positive number of seconds, not {v}"
                ));
            }
        }
        Ok(())
    }
}

impl Default for Inputs {
    fn default() -> Self {
        Inputs {
            current_visibility_s: None,
            max_receive_count: None,
            retention_s: None,
            lambda_timeout_s: None,
            shutdown_grace_s: None,
            safety_factor: 2.0,
            max_crash_recovery_s: 300.0,
            max_outage_s: 300.0,
        }
    }
}

/// A different answer the seeds give, with its trade-off.
#[derive(Clone, Debug, PartialEq)]
pub struct Alternative {
    pub name: String,
    pub evaluation: Evaluation,
    pub trade_off: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Advice {
    pub visibility_timeout_s: f64,
    /// None when no heartbeat is advised.
    pub heartbeat_interval_s: Option<f64>,
    pub max_receive_count: u32,
    pub time_to_dlq_s: f64,
    pub crash_recovery_s: f64,
    /// Graceful shutdown should finish within this, below the lease.
    pub shutdown_grace_s: f64,
    pub reasons: Vec<String>,
    pub warnings: Vec<String>,
    /// The queue's current setting, judged; and the SQS default.
    pub evaluations: Vec<Evaluation>,
    pub alternatives: Vec<Alternative>,
}

/// The step a person would round `seconds` to: whole seconds, then 5 s, 10 s, 1 min, 5 min.
fn nice_step(seconds: f64) -> f64 {
    match seconds {
        s if s <= 10.0 => 1.0,
        s if s <= 60.0 => 5.0,
        s if s <= 600.0 => 10.0,
        s if s <= 3600.0 => 60.0,
        _ => 300.0,
    }
}

/// Rounds up to a value a person would set (`nice_step`), from 1 s to 12 hours.
pub fn nice_ceil(seconds: f64) -> f64 {
    let step = nice_step(seconds);
    ((seconds / step).ceil() * step).clamp(1.0, TWELVE_HOURS_S)
}

/// Rounds down to a value a person would set, in the same steps; at least 1 s.
fn nice_floor(seconds: f64) -> f64 {
    let step = nice_step(seconds);
    ((seconds / step).floor() * step).clamp(1.0, TWELVE_HOURS_S)
}

pub(crate) fn minutes(seconds: f64) -> String {
    if seconds < 600.0 {
        format!("{seconds:.0} s")
    } else if seconds < 7200.0 {
        format!("{:.0} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}

pub(crate) fn percent(fraction: f64) -> String {
    if fraction > 0.0 && fraction < 0.001 {
        "under 0.1%".into()
    } else {
        format!("{:.1}%", fraction * 100.0)
    }
}

/// The shortest constant lease advised: shorter turns a GC pause or one slow network call into
/// duplicate work.
pub const MIN_LEASE_S: f64 = 10.0;
/// The shortest base lease advised with heartbeats: shorter is fragile (one slow
/// ChangeMessageVisibility loses the lease) and chatty (a call every few seconds per message).
pub const MIN_HEARTBEAT_LEASE_S: f64 = 30.0;
/// The longest base lease advised with heartbeats, so that each beat extends the lease well
/// short of the 12-hour ceiling.
pub const MAX_HEARTBEAT_LEASE_S: f64 = 3.0 * 3600.0;
/// The maxReceiveCount the seeds start from: two retries, then the DLQ.
pub const BASE_MAX_RECEIVE_COUNT: u32 = 3;
/// AWS's largest maxReceiveCount.
pub const MAX_RECEIVE_COUNT: u32 = 1_000;

/// With Lambda: no heartbeat (a function cannot extend its batch's lease), and at least 6 x
/// the function timeout, AWS's guidance, so Lambda's own retries fit in one lease.
fn lambda_lease(lambda: f64, reasons: &mut Vec<String>) -> (f64, Option<f64>) {
    let lease = nice_ceil(6.0 * lambda);
    reasons.push(format!(
        "Visibility timeout {} = 6 x the Lambda function timeout ({}): AWS's guidance, so the service's retries of a batch fit in one lease. A Lambda function cannot heartbeat, so none is advised.",
        minutes(lease),
        minutes(lambda)
    ));
    (lease, None)
}

/// Why a constant lease will not do, when it will not.
struct NoConstant {
    long_tail: bool,
    slow_recovery: bool,
    tail_outlives: bool,
}

/// A base lease with heartbeats, for a long tail, a slowest job past the constant, or a
/// constant that recovers too slowly: it covers p90 with headroom, but never past the crash
/// budget (the point of heartbeating) nor so long that a beat cannot extend it.
fn heartbeat_lease(
    d: &Distribution,
    inputs: &Inputs,
    constant: f64,
    why: &NoConstant,
    reasons: &mut Vec<String>,
) -> (f64, Option<f64>) {
    let covering = nice_ceil(d.p90 * 1.25);
    let budget = nice_floor(inputs.max_crash_recovery_s).min(MAX_HEARTBEAT_LEASE_S);
    // At least 3 s, so that a beat at a third of it leaves two to miss.
    let lease = covering.max(MIN_HEARTBEAT_LEASE_S).min(budget).max(3.0);
    let beat = (lease / 3.0).floor();
    if why.long_tail {
        let multiple = if d.p99 > 0.0 {
            format!("{:.1} x", d.p999 / d.p99)
        } else {
            "far above".into()
        };
        reasons.push(format!(
            "p99.9 ({}) is {multiple} p99 ({}): a long tail. A bigger constant would make crash recovery as slow as the tail, so heartbeat instead.",
            minutes(d.p999),
            minutes(d.p99)
        ));
    }
    if why.slow_recovery {
        reasons.push(format!(
            "A constant lease of {} x p99 = {} would freeze a crashed consumer's messages for longer than the {} crash budget, so heartbeat instead.",
            inputs.safety_factor,
            minutes(constant),
            minutes(inputs.max_crash_recovery_s)
        ));
    }
    if why.tail_outlives && !why.long_tail && !why.slow_recovery {
        reasons.push(format!(
            "The slowest work ({}) outlives a constant lease of {}: without a heartbeat such a message is handed out again while it runs and, after a few receives, lands in the DLQ although it succeeds (the DLQ mirage). Heartbeat instead.",
            minutes(d.max),
            minutes(constant)
        ));
    }
    let finish = percent(1.0 - d.fraction_above(lease));
    reasons.push(if lease < covering {
        format!(
            "Base lease {}: the most the {} crash budget allows{}; p90 ({}) would want {}, so {finish} of messages finish without an extension and the rest are carried by the heartbeat.",
            minutes(lease),
            minutes(inputs.max_crash_recovery_s),
            if budget >= MAX_HEARTBEAT_LEASE_S { " with a beat that still extends it" } else { "" },
            minutes(d.p90),
            minutes(covering)
        )
    } else if lease > covering {
        format!(
            "Base lease {}: p90 ({}) would allow {}, but a shorter lease with heartbeats every few seconds is fragile (one slow call loses it) and chatty; {finish} of messages finish without a single extension.",
            minutes(lease),
            minutes(d.p90),
            minutes(covering)
        )
    } else {
        format!(
            "Base lease {}: covers p90 ({}) with 25% headroom, so {finish} of messages finish without a single extension.",
            minutes(lease),
            minutes(d.p90)
        )
    });
    if lease < MIN_HEARTBEAT_LEASE_S {
        reasons.push(format!(
            "A base lease under {} is fragile (one slow call loses it) and chatty; the {} crash budget allows no more.",
            minutes(MIN_HEARTBEAT_LEASE_S),
            minutes(inputs.max_crash_recovery_s)
        ));
    }
    reasons.push(format!(
        "Heartbeat every {} (lease / 3), renewing the lease by {} each time: two missed beats are survivable.",
        minutes(beat),
        minutes(lease)
    ));
    (lease, Some(beat))
}

/// The advice for a distribution.
pub fn advise(d: &Distribution, inputs: &Inputs) -> Advice {
    let mut reasons = Vec::new();
    let mut warnings = Vec::new();
    if let Err(why) = inputs.check() {
        warnings.push(format!("Inputs: {why}."));
    }
    let safety = inputs.safety_factor.max(1.0);
    let constant = nice_ceil(d.p99 * safety).max(MIN_LEASE_S);
    let why = NoConstant {
        long_tail: d.p999 > 1.5 * d.p99,
        slow_recovery: constant > inputs.max_crash_recovery_s,
        tail_outlives: d.max > constant,
    };
    let (visibility, heartbeat) = if let Some(lambda) = inputs.lambda_timeout_s {
        lambda_lease(lambda, &mut reasons)
    } else if why.long_tail || why.slow_recovery || why.tail_outlives {
        heartbeat_lease(d, inputs, constant, &why, &mut reasons)
    } else {
        let floored = constant > nice_ceil(d.p99 * safety);
        reasons.push(format!(
            "Visibility timeout {} = p99 ({}) x {} safety factor, rounded up{}; the timer starts at the receive, so the measurement includes in-process queueing.",
            minutes(constant),
            minutes(d.p99),
            safety,
            if floored {
                format!(", and no shorter than {}: a shorter lease turns a GC pause or one slow network call into duplicates", minutes(MIN_LEASE_S))
            } else {
                String::new()
            }
        ));
        (constant, None)
    };
    let max_receive_count = receive_count(visibility, inputs, &mut reasons);
    let advised = Setting {
        visibility_s: visibility,
        heartbeat_s: heartbeat,
        max_receive_count,
    };
    let shutdown_grace = (visibility * 2.0 / 3.0).floor();
    reasons.push(if heartbeat.is_some() {
        format!(
            "Graceful shutdown within {}: heartbeats keep the leases alive while the consumer drains, so nothing is redelivered meanwhile; work still running then is stopped and released for another consumer.",
            minutes(shutdown_grace)
        )
    } else {
        format!(
            "Graceful shutdown within {}: without heartbeats, draining past the lease is pointless, the message has been redelivered by then.",
            minutes(shutdown_grace)
        )
    });
    // What the advice cannot help, said as the evaluations would say it.
    warnings.extend(problems(d, &advised, inputs).into_iter().map(sentence));
    queue_warnings(d, &advised, inputs, &mut warnings);
    warnings.push("No visibility timeout removes the need for idempotency: crashes, deploys and lost deletes still produce duplicates.".into());

    let mut evaluations = Vec::new();
    let queue_mrc = inputs.max_receive_count.unwrap_or(max_receive_count);
    if let Some(current) = inputs.current_visibility_s {
        evaluations.push(evaluate(d, current, None, queue_mrc, inputs));
    }
    if inputs.current_visibility_s != Some(30.0) {
        evaluations.push(evaluate(d, 30.0, None, queue_mrc, inputs));
    }
    let alternatives = vec![
        Alternative {
            name: "seed 000: constant 2 x p99, no heartbeat".into(),
            evaluation: evaluate(
                d,
                nice_ceil(d.p99 * 2.0).max(MIN_LEASE_S),
                None,
                max_receive_count,
                inputs,
            ),
            trade_off: "Simplest consumer; crash recovery and time to DLQ grow with the tail.".into(),
        },
        Alternative {
            name: "seed 004: base timeout 6 x p99".into(),
            evaluation: evaluate(d, nice_ceil(6.0 * d.p99), None, max_receive_count, inputs),
            trade_off: "Fewest duplicates from GC pauses, jitter and lock waits; but a crashed consumer's messages stay frozen for the whole timeout, and time to DLQ triples. Heartbeats buy the same safety with a short lease.".into(),
        },
    ];
    Advice {
        visibility_timeout_s: visibility,
        heartbeat_interval_s: heartbeat,
        max_receive_count,
        time_to_dlq_s: advised.time_to_dlq_s(),
        crash_recovery_s: visibility,
        shutdown_grace_s: shutdown_grace,
        reasons,
        warnings,
        evaluations,
        alternatives,
    }
}

/// maxReceiveCount: the seeds' 3, or more when 3 x the lease would not outlast the outage
/// budget (a short lease would send healthy messages to the DLQ in the first minute of an
/// outage).
fn receive_count(visibility: f64, inputs: &Inputs, reasons: &mut Vec<String>) -> u32 {
    let needed = (inputs.max_outage_s / visibility).ceil();
    let count = if needed > f64::from(BASE_MAX_RECEIVE_COUNT) {
        (needed.min(f64::from(MAX_RECEIVE_COUNT))) as u32
    } else {
        BASE_MAX_RECEIVE_COUNT
    };
    let to_dlq = f64::from(count) * visibility;
    reasons.push(if to_dlq < inputs.max_outage_s {
        format!(
            "maxReceiveCount {count}, AWS's most: {count} x the {} lease = {} still falls short of the {} outage budget (see the warnings).",
            minutes(visibility),
            minutes(to_dlq),
            minutes(inputs.max_outage_s)
        )
    } else if count == BASE_MAX_RECEIVE_COUNT {
        format!(
            "maxReceiveCount {count}: with the lease sized to the work, extra receives come from failures, not overruns; two retries, then the DLQ after about {} ({count} x {}), which outlasts the {} outage budget.",
            minutes(to_dlq),
            minutes(visibility),
            minutes(inputs.max_outage_s)
        )
    } else {
        format!(
            "maxReceiveCount {count}: {BASE_MAX_RECEIVE_COUNT} x the {} lease would send healthy messages to the DLQ after {} of a downstream outage; {count} receives outlast the {} outage budget ({}).",
            minutes(visibility),
            minutes(f64::from(BASE_MAX_RECEIVE_COUNT) * visibility),
            minutes(inputs.max_outage_s),
            minutes(to_dlq)
        )
    });
    count
}

/// The queue's own settings: its lease against a Lambda function's timeout, its lease x
/// maxReceiveCount against its retention, and its maxReceiveCount with the advised lease
/// when it differs from the advice's.
fn queue_warnings(
    d: &Distribution,
    advised: &Setting,
    inputs: &Inputs,
    warnings: &mut Vec<String>,
) {
    if let (Some(current), Some(lambda)) = (inputs.current_visibility_s, inputs.lambda_timeout_s) {
        if current < 6.0 * lambda {
            warnings.push(format!(
                "The current visibility timeout ({}) is below 6 x the Lambda timeout ({}): expect unexplained duplicates.",
                minutes(current),
                minutes(6.0 * lambda)
            ));
        }
    }
    let Some(mrc) = inputs.max_receive_count else {
        return;
    };
    if let (Some(current), Some(retention)) = (inputs.current_visibility_s, inputs.retention_s) {
        let to_dlq = f64::from(mrc) * current;
        if to_dlq >= retention {
            warnings.push(format!(
                "The queue as it is set now (maxReceiveCount {mrc} x its {} lease = {}) reaches the DLQ only after its retention period ({}): its failing messages expire instead.",
                minutes(current),
                minutes(to_dlq),
                minutes(retention)
            ));
        }
    }
    if mrc == advised.max_receive_count {
        return;
    }
    let with_queues = Setting {
        max_receive_count: mrc,
        ..*advised
    };
    let found = problems(d, &with_queues, inputs);
    warnings.push(format!(
        "The queue's maxReceiveCount {mrc} with the advised {} lease gives {} to the DLQ{}.",
        minutes(advised.visibility_s),
        minutes(with_queues.time_to_dlq_s()),
        if found.is_empty() {
            String::new()
        } else {
            format!(": {}", found.join("; "))
        }
    ));
}

/// A problem as a sentence of its own.
fn sentence(problem: String) -> String {
    let mut chars = problem.chars();
    match chars.next() {
        Some(first) => format!("{}{}.", first.to_uppercase(), chars.as_str()),
        None => problem,
    }
}

#[cfg(test)]
mod tests;

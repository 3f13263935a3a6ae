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

mod distribution;

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
    /// constant lease longer than this calls for heartbeats instead.
    pub max_crash_recovery_s: f64,
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
        }
    }
}

/// How one candidate lease would fare against the distribution.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    pub visibility_timeout_s: f64,
    pub heartbeat_interval_s: Option<f64>,
    pub max_receive_count: u32,
    /// Share of messages whose processing outlives the lease: each is processed twice or more.
    pub overrun_fraction: f64,
    /// How long a crashed consumer's messages stay invisible.
    pub crash_recovery_s: f64,
    pub time_to_dlq_s: f64,
    pub verdict: String,
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

/// Rounds up to a value a person would set: whole seconds, then 5 s, 10 s, 1 min, 5 min steps.
pub fn nice_ceil(seconds: f64) -> f64 {
    let step = match seconds {
        s if s <= 10.0 => 1.0,
        s if s <= 60.0 => 5.0,
        s if s <= 600.0 => 10.0,
        s if s <= 3600.0 => 60.0,
        _ => 300.0,
    };
    ((seconds / step).ceil() * step).clamp(1.0, TWELVE_HOURS_S)
}

fn minutes(seconds: f64) -> String {
    if seconds < 600.0 {
        format!("{seconds:.0} s")
    } else if seconds < 7200.0 {
        format!("{:.0} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}

fn percent(fraction: f64) -> String {
    if fraction > 0.0 && fraction < 0.001 {
        "under 0.1%".into()
    } else {
        format!("{:.1}%", fraction * 100.0)
    }
}

/// With Lambda: no heartbeat (a function cannot extend its batch's lease), and at least 6 x
/// the function timeout, AWS's guidance, so Lambda's own retries fit in one lease.
fn lambda_lease(
    d: &Distribution,
    lambda: f64,
    reasons: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> (f64, Option<f64>) {
    let lease = nice_ceil(6.0 * lambda);
    reasons.push(format!(
        "Visibility timeout {} = 6 x the Lambda function timeout ({}): AWS's guidance, so the service's retries of a batch fit in one lease. A Lambda function cannot heartbeat, so none is advised.",
        minutes(lease),
        minutes(lambda)
    ));
    if d.p99 > lambda {
        warnings.push(format!(
            "p99 ({}) is longer than the Lambda timeout ({}): those invocations time out and are retried.",
            minutes(d.p99),
            minutes(lambda)
        ));
    }
    (lease, None)
}

/// A base lease with heartbeats, for a long tail or a constant that recovers too slowly.
fn heartbeat_lease(
    d: &Distribution,
    inputs: &Inputs,
    constant: f64,
    long_tail: bool,
    slow_recovery: bool,
    reasons: &mut Vec<String>,
) -> (f64, Option<f64>) {
    let covering = nice_ceil(d.p90 * 1.25);
    let lease = covering.max(MIN_HEARTBEAT_LEASE_S);
    let beat = (lease / 3.0).floor();
    if long_tail {
        reasons.push(format!(
            "p99.9 ({}) is {:.1} x p99 ({}): a long tail. A bigger constant would make crash recovery as slow as the tail, so heartbeat instead.",
            minutes(d.p999),
            d.p999 / d.p99.max(f64::MIN_POSITIVE),
            minutes(d.p99)
        ));
    }
    if slow_recovery {
        reasons.push(format!(
            "A constant lease of {} x p99 = {} would freeze a crashed consumer's messages for longer than the {} recovery budget, so heartbeat instead.",
            inputs.safety_factor,
            minutes(constant),
            minutes(inputs.max_crash_recovery_s)
        ));
    }
    reasons.push(if d.p90 * 1.25 > TWELVE_HOURS_S {
        format!(
            "Base lease {}, the 12-hour ceiling: p90 ({}) is beyond any lease, so such work needs a job record (see the warnings).",
            minutes(lease),
            minutes(d.p90)
        )
    } else if lease > covering {
        format!(
            "Base lease {}: p90 ({}) would allow {}, but a shorter lease with heartbeats every few seconds is fragile (one slow call loses it) and chatty; {} of messages finish without a single extension.",
            minutes(lease),
            minutes(d.p90),
            minutes(covering),
            percent(1.0 - d.fraction_above(lease))
        )
    } else {
        format!(
            "Base lease {}: covers p90 ({}) with 25% headroom, so {} of messages finish without a single extension.",
            minutes(lease),
            minutes(d.p90),
            percent(1.0 - d.fraction_above(lease))
        )
    });
    reasons.push(format!(
        "Heartbeat every {} (lease / 3), renewing the lease by {} each time: two missed beats are survivable.",
        minutes(beat),
        minutes(lease)
    ));
    (lease, Some(beat))
}

/// How a lease fares: overruns (duplicates), crash recovery, time to the DLQ.
pub fn evaluate(
    d: &Distribution,
    visibility_s: f64,
    heartbeat_s: Option<f64>,
    max_receive_count: u32,
    inputs: &Inputs,
) -> Evaluation {
    // A heartbeat keeps the lease alive while work runs, up to the 12-hour ceiling.
    let effective = if heartbeat_s.is_some() {
        TWELVE_HOURS_S
    } else {
        visibility_s
    };
    let overrun = d.fraction_above(effective);
    let time_to_dlq = max_receive_count as f64 * visibility_s;
    let mut problems = Vec::new();
    if overrun > 0.01 {
        problems.push(format!(
            "{} of messages outlive the {} lease and are processed at least twice",
            percent(overrun),
            minutes(visibility_s)
        ));
    }
    if visibility_s > inputs.max_crash_recovery_s {
        problems.push(format!(
            "a crashed consumer's messages stay frozen for {} (budget {})",
            minutes(visibility_s),
            minutes(inputs.max_crash_recovery_s)
        ));
    }
    if time_to_dlq > 4.0 * inputs.max_crash_recovery_s {
        problems.push(format!(
            "a poison message takes {} to reach the DLQ ({} x {}), holding a worker on every attempt",
            minutes(time_to_dlq),
            max_receive_count,
            minutes(visibility_s)
        ));
    }
    let verdict = if problems.is_empty() {
        "fits".to_string()
    } else {
        format!("fails: {}", problems.join("; "))
    };
    Evaluation {
        visibility_timeout_s: visibility_s,
        heartbeat_interval_s: heartbeat_s,
        max_receive_count,
        overrun_fraction: overrun,
        crash_recovery_s: visibility_s,
        time_to_dlq_s: time_to_dlq,
        verdict,
    }
}

/// The shortest constant lease advised: shorter turns a GC pause or one slow network call into
/// duplicate work.
pub const MIN_LEASE_S: f64 = 10.0;
/// The shortest base lease advised with heartbeats: shorter is fragile (one slow
/// ChangeMessageVisibility loses the lease) and chatty (a call every few seconds per message).
pub const MIN_HEARTBEAT_LEASE_S: f64 = 30.0;

/// The advice for a distribution.
pub fn advise(d: &Distribution, inputs: &Inputs) -> Advice {
    let mut reasons = Vec::new();
    let mut warnings = Vec::new();
    let constant = nice_ceil(d.p99 * inputs.safety_factor).max(MIN_LEASE_S);
    let long_tail = d.p999 > 1.5 * d.p99;
    let slow_recovery = constant > inputs.max_crash_recovery_s;
    let (visibility, heartbeat) = if let Some(lambda) = inputs.lambda_timeout_s {
        lambda_lease(d, lambda, &mut reasons, &mut warnings)
    } else if long_tail || slow_recovery {
        heartbeat_lease(d, inputs, constant, long_tail, slow_recovery, &mut reasons)
    } else {
        let floored = constant > nice_ceil(d.p99 * inputs.safety_factor);
        reasons.push(format!(
            "Visibility timeout {} = p99 ({}) x {} safety factor, rounded up{}; the timer starts at the receive, so the measurement includes in-process queueing.",
            minutes(constant),
            minutes(d.p99),
            inputs.safety_factor,
            if floored {
                format!(", and no shorter than {}: a shorter lease turns a GC pause or one slow network call into duplicates", minutes(MIN_LEASE_S))
            } else {
                String::new()
            }
        ));
        (constant, None)
    };
    let max_receive_count = 3;
    let time_to_dlq = max_receive_count as f64 * visibility;
    reasons.push(format!(
        "maxReceiveCount {max_receive_count}: with the lease sized to the work, extra receives come from failures, not overruns; two retries, then the DLQ after about {} ({} x {}).",
        minutes(time_to_dlq),
        max_receive_count,
        minutes(visibility)
    ));
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

    if d.max > TWELVE_HOURS_S || d.p999 > TWELVE_HOURS_S {
        warnings.push(format!(
            "Some work takes {}: no chain of extensions passes 12 hours from the receive. Record such jobs in a database and delete the message once the job is recorded.",
            minutes(d.max)
        ));
    }
    if let Some(retention) = inputs.retention_s {
        if time_to_dlq >= retention {
            warnings.push(format!(
                "Time to DLQ ({}) is longer than the retention period ({}): messages expire before they reach the DLQ, losing the message and the evidence.",
                minutes(time_to_dlq),
                minutes(retention)
            ));
        } else if time_to_dlq * 10.0 > retention {
            warnings.push(format!(
                "Time to DLQ ({}) is more than a tenth of the retention period ({}): a message that waited long before its first receive may expire before it reaches the DLQ.",
                minutes(time_to_dlq),
                minutes(retention)
            ));
        }
    }
    if let Some(mrc) = inputs.max_receive_count.filter(|m| *m != max_receive_count) {
        let e = evaluate(d, visibility, heartbeat, mrc, inputs);
        warnings.push(format!(
            "The queue's maxReceiveCount {mrc} with a {} lease gives {} to the DLQ.",
            minutes(visibility),
            minutes(e.time_to_dlq_s)
        ));
    }
    if let Some(grace) = inputs.shutdown_grace_s.filter(|g| *g >= visibility) {
        warnings.push(format!(
            "The graceful-shutdown budget ({}) is not shorter than the lease ({}): drained work will already have been redelivered.",
            minutes(grace),
            minutes(visibility)
        ));
    }
    if let (Some(current), Some(lambda)) = (inputs.current_visibility_s, inputs.lambda_timeout_s) {
        if current < 6.0 * lambda {
            warnings.push(format!(
                "The current visibility timeout ({}) is below 6 x the Lambda timeout ({}): expect unexplained duplicates.",
                minutes(current),
                minutes(6.0 * lambda)
            ));
        }
    }
    warnings.push("No visibility timeout removes the need for idempotency: crashes, deploys and lost deletes still produce duplicates.".into());

    let mut evaluations = Vec::new();
    if let Some(current) = inputs.current_visibility_s {
        evaluations.push(evaluate(
            d,
            current,
            None,
            inputs.max_receive_count.unwrap_or(max_receive_count),
            inputs,
        ));
    }
    if inputs.current_visibility_s != Some(30.0) {
        evaluations.push(evaluate(
            d,
            30.0,
            None,
            inputs.max_receive_count.unwrap_or(max_receive_count),
            inputs,
        ));
    }
    let alternatives = vec![
        Alternative {
            name: "seed 000: constant 2 x p99, no heartbeat".into(),
            evaluation: evaluate(d, constant, None, max_receive_count, inputs),
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
        time_to_dlq_s: time_to_dlq,
        crash_recovery_s: visibility,
        shutdown_grace_s: shutdown_grace,
        reasons,
        warnings,
        evaluations,
        alternatives,
    }
}

#[cfg(test)]
mod tests;

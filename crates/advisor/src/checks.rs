//! The checks every setting is held to, the advice's own and each it is compared with: one
//! list, so no setting is rated "fits" while a warning says otherwise.

use crate::{minutes, percent, Distribution, Inputs, TWELVE_HOURS_S};

/// A setting to check: a lease, perhaps renewed by a heartbeat, and a maxReceiveCount.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Setting {
    pub visibility_s: f64,
    pub heartbeat_s: Option<f64>,
    pub max_receive_count: u32,
}

impl Setting {
    /// How long a message that keeps failing (a poison message, or any message while the
    /// downstream is out) takes to reach the DLQ.
    pub fn time_to_dlq_s(&self) -> f64 {
        f64::from(self.max_receive_count) * self.visibility_s
    }

    /// How long work may run before its message is handed out again: with a heartbeat that
    /// extends, up to the 12-hour ceiling; else the lease.
    fn holds_s(&self) -> f64 {
        match self.heartbeat_s {
            Some(_) if self.visibility_s < TWELVE_HOURS_S => TWELVE_HOURS_S,
            _ => self.visibility_s,
        }
    }
}

/// What is wrong with `setting` for work distributed as `d`, each as one sentence; empty when
/// it fits.
pub fn problems(d: &Distribution, setting: &Setting, inputs: &Inputs) -> Vec<String> {
    let mut found = Vec::new();
    let lease = minutes(setting.visibility_s);
    let mrc = setting.max_receive_count;
    match inputs.lambda_timeout_s {
        Some(lambda) => lambda_problems(d, setting, lambda, &mut found),
        None => tail_problems(d, setting, &mut found),
    }
    if setting.visibility_s > inputs.max_crash_recovery_s {
        found.push(format!(
            "a crashed consumer's messages stay frozen for {lease} (crash budget {})",
            minutes(inputs.max_crash_recovery_s)
        ));
    }
    let to_dlq = setting.time_to_dlq_s();
    // A poison message may take as long as the outage the user means to ride out: a longer
    // outage budget is a choice of a slower DLQ, not a problem with it.
    if to_dlq > (4.0 * inputs.max_crash_recovery_s).max(inputs.max_outage_s) {
        found.push(format!(
            "a poison message takes {} to reach the DLQ ({mrc} x {lease}), holding a worker on every attempt",
            minutes(to_dlq)
        ));
    }
    if to_dlq < inputs.max_outage_s {
        found.push(format!(
            "a downstream outage longer than {} ({mrc} x {lease}) sends healthy messages to the DLQ (outage budget {})",
            minutes(to_dlq),
            minutes(inputs.max_outage_s)
        ));
    }
    if let Some(retention) = inputs.retention_s {
        if to_dlq >= retention {
            found.push(format!(
                "the time to DLQ ({}) is longer than the retention period ({}): messages expire before they reach the DLQ, losing the message and the evidence",
                minutes(to_dlq),
                minutes(retention)
            ));
        } else if to_dlq * 10.0 > retention {
            found.push(format!(
                "the time to DLQ ({}) is more than a tenth of the retention period ({}): a message that waited long before its first receive may expire before it reaches the DLQ",
                minutes(to_dlq),
                minutes(retention)
            ));
        }
    }
    if let Some(grace) = inputs
        .shutdown_grace_s
        .filter(|g| *g >= setting.visibility_s)
    {
        found.push(match setting.heartbeat_s {
            None => format!(
                "the graceful-shutdown budget ({}) is not shorter than the {lease} lease, and nothing renews it: drained work will already have been redelivered",
                minutes(grace)
            ),
            Some(_) => format!(
                "the graceful-shutdown budget ({}) is not shorter than the {lease} lease: only heartbeats that go on through the drain (not torn down when shutdown begins) keep that work from being redelivered",
                minutes(grace)
            ),
        });
    }
    found
}

/// Overruns and the tail of a consumer that may heartbeat.
fn tail_problems(d: &Distribution, setting: &Setting, found: &mut Vec<String>) {
    let lease = minutes(setting.visibility_s);
    if setting.heartbeat_s.is_some() && setting.visibility_s >= TWELVE_HOURS_S {
        found.push(format!(
            "a heartbeat renewing by {lease} extends nothing: the lease already reaches the 12-hour ceiling"
        ));
    }
    let holds = setting.holds_s();
    let overrun = d.fraction_above(holds);
    if d.max > holds && holds >= TWELVE_HOURS_S {
        found.push(format!(
            "some work ({} of it, the slowest {}) runs past 12 hours from the receive, which no chain of extensions passes (the 12-hour ceiling): record such jobs in a database and delete the message once the job is recorded",
            percent(overrun),
            minutes(d.max)
        ));
    } else if overrun > 0.01 {
        found.push(format!(
            "{} of messages outlive the {} lease and are processed at least twice",
            percent(overrun),
            minutes(holds)
        ));
    } else if d.max > holds {
        found.push(format!(
            "the slowest work ({}) outlives the {lease} lease with no heartbeat: such a message is handed out again while it runs, and after {} receives lands in the DLQ although it succeeds (the DLQ mirage)",
            minutes(d.max),
            setting.max_receive_count
        ));
    }
}

/// A Lambda consumer: no heartbeat, AWS's 6 x the function timeout, and work past the
/// function timeout killed and retried.
fn lambda_problems(d: &Distribution, setting: &Setting, lambda: f64, found: &mut Vec<String>) {
    if setting.heartbeat_s.is_some() {
        found.push("a Lambda function cannot heartbeat its batch's lease".into());
    }
    if setting.visibility_s < 6.0 * lambda {
        found.push(format!(
            "the {} lease is below 6 x the Lambda function timeout ({}): the service's retries of a batch outlive the lease, and messages are processed twice unexplained",
            minutes(setting.visibility_s),
            minutes(6.0 * lambda)
        ));
    }
    let killed = d.fraction_above(lambda);
    if killed > 0.0 || d.max > lambda {
        found.push(format!(
            "{} of the work (the slowest {}) outlives the {} function timeout: those invocations are killed and retried, and after {} receives the message lands in the DLQ",
            if killed > 0.0 { percent(killed) } else { "some".into() },
            minutes(d.max),
            minutes(lambda),
            setting.max_receive_count
        ));
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
    /// "fits", or "fails: " and every problem found.
    pub verdict: String,
}

/// How a lease fares: overruns (duplicates), the tail, crash recovery, time to the DLQ
/// against poison, outages and retention, Lambda and shutdown.
pub fn evaluate(
    d: &Distribution,
    visibility_s: f64,
    heartbeat_s: Option<f64>,
    max_receive_count: u32,
    inputs: &Inputs,
) -> Evaluation {
    let setting = Setting {
        visibility_s,
        heartbeat_s,
        max_receive_count,
    };
    let found = problems(d, &setting, inputs);
    Evaluation {
        visibility_timeout_s: visibility_s,
        heartbeat_interval_s: heartbeat_s,
        max_receive_count,
        overrun_fraction: d.fraction_above(setting.holds_s()),
        crash_recovery_s: visibility_s,
        time_to_dlq_s: setting.time_to_dlq_s(),
        verdict: if found.is_empty() {
            "fits".to_string()
        } else {
            format!("fails: {}", found.join("; "))
        },
    }
}

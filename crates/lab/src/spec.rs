//! The `[lab]` table of a scenario file: what only the live run needs. The simulator ignores
//! it, so one file serves both.

use leasehold_sim::Scenario;
use serde::{Deserialize, Serialize};

use crate::LabError;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LabSpec {
    /// How many seconds of the story the scenario tells one second of the lab stands for: a
    /// seed's 30 s lease and 15 s of work are a 2 s lease and 1 s of work at 15. The file's
    /// times are the lab's; this only states the scaling in the report.
    pub time_scale: f64,
    /// What the times stand for, in a sentence for the report.
    pub story: String,
    /// After the run, compare redrives of the dead-letter queue: `blind` (a move task, the
    /// console's redrive), `leasehold` (skipping work the downstream finished), or `both`
    /// (half the DLQ each). Empty: none.
    pub redrive: String,
    /// How long the fleet runs after the redrives, in seconds.
    pub redrive_s: f64,
}

impl Default for LabSpec {
    fn default() -> Self {
        LabSpec {
            time_scale: 1.0,
            story: String::new(),
            redrive: String::new(),
            redrive_s: 20.0,
        }
    }
}

impl LabSpec {
    /// The scenario's `[lab]` table, checked against what the lab can run.
    pub fn of(scenario: &Scenario) -> Result<LabSpec, LabError> {
        let spec: LabSpec = match &scenario.lab {
            Some(table) => table
                .clone()
                .try_into()
                .map_err(|e| LabError::Setup(format!("[lab]: {e}")))?,
            None => LabSpec::default(),
        };
        if !(spec.time_scale > 0.0 && (1.0..=300.0).contains(&spec.redrive_s)) {
            return Err(LabError::Setup(
                "[lab] time_scale must be positive and redrive_s 1..=300".into(),
            ));
        }
        if !matches!(spec.redrive.as_str(), "" | "both") {
            return Err(LabError::Setup(format!(
                "[lab] redrive is \"both\" or absent, not {:?}",
                spec.redrive
            )));
        }
        if !spec.redrive.is_empty() && scenario.queue.max_receive_count == 0 {
            return Err(LabError::Setup(
                "[lab] redrive needs a dead-letter queue: set queue.max_receive_count".into(),
            ));
        }
        if let Some(t) = scenario.triggers.iter().find(|t| {
            !matches!(
                t.kind.as_str(),
                "blip" | "lock" | "poison" | "crash" | "deploy"
            )
        }) {
            return Err(LabError::Setup(format!(
                "the lab injects blips (a slow query on the database), table locks, poison messages, crashes, deploys and bursts of arrivals; a {:?} trigger runs only in the simulator",
                t.kind
            )));
        }
        let consumers = &scenario.consumers;
        let crashes = scenario.triggers.iter().any(|t| t.kind == "crash");
        if crashes && (consumers.idempotency || consumers.retry_budget > 0.0) {
            return Err(LabError::Setup(
                "a crash's recovery is measured at the message's next execution, which idempotency or a retry budget may put off: a crash runs without them".into(),
            ));
        }
        let poison = scenario.triggers.iter().any(|t| t.kind == "poison");
        if let Some(t) = (scenario.tenants.iter()).find(|t| crate::load::is_poison(&t.name)) {
            return Err(LabError::Setup(format!(
                "tenant {:?}: names starting with poison- are the lab's poison messages'",
                t.name
            )));
        }
        if poison && scenario.queue.max_receive_count == 0 {
            return Err(LabError::Setup(
                "a poison trigger needs a dead-letter queue to end in: set queue.max_receive_count"
                    .into(),
            ));
        }
        if poison
            && crate::consumers::uses_runtime(scenario)
            && scenario.consumers.on_failure == "wait-lease"
        {
            return Err(LabError::Setup(
                "the runtime puts a failed message back: with a poison trigger, set consumers.on_failure to release or backoff".into(),
            ));
        }
        Self::check_fleet(scenario)?;
        if scenario.arrivals.kind != "steady" {
            return Err(LabError::Setup(
                "the lab sends steady arrivals (with rate changes and bursts): arrivals.kind must be steady".into(),
            ));
        }
        if scenario.duration_s > 600.0 || crate::consumers::Fleet::size(scenario) > 64 {
            return Err(LabError::Setup(
                "a lab run is bounded: at most 600 s and 64 workers, a lambda fleet's max_concurrency too (scale the scenario down)".into(),
            ));
        }
        if scenario.consumers.idempotency && !crate::consumers::uses_runtime(scenario) {
            return Err(LabError::Setup(
                "the lab's idempotency gate is the runtime's, which heartbeats to the end of its drain: set consumers.heartbeat, without heartbeat_stops_on_shutdown".into(),
            ));
        }
        Ok(spec)
    }

    /// What the lab's fleets can be: fixed, or `lambda` (naive consumers scaled by the
    /// controller, nothing else stopping them; `Scenario::validate` refuses other kinds); a
    /// rate limit is the runtime's, and in a fleet of processes each would have its own.
    fn check_fleet(scenario: &Scenario) -> Result<(), LabError> {
        let lambda = crate::processes::is_lambda(scenario);
        let runtime = crate::consumers::uses_runtime(scenario);
        if lambda && scenario.consumers.heartbeat {
            return Err(LabError::Setup(
                "a lambda fleet's consumers are function invocations, without the runtime: set consumers.heartbeat = false".into(),
            ));
        }
        let stops =
            (scenario.triggers.iter()).any(|t| matches!(t.kind.as_str(), "crash" | "deploy"));
        if lambda && stops {
            return Err(LabError::Setup(
                "a lambda fleet is started and stopped by its controller: crash and deploy triggers run with a fixed fleet".into(),
            ));
        }
        let rate_limit = scenario.consumers.rate_limit_per_s > 0.0;
        if rate_limit && !runtime {
            return Err(LabError::Setup(
                "the rate limit is the runtime's: with consumers.rate_limit_per_s, set consumers.heartbeat (without heartbeat_stops_on_shutdown)".into(),
            ));
        }
        if rate_limit && crate::processes::needed(scenario) {
            return Err(LabError::Setup(
                "a crash or a deploy runs each consumer as a process, each with a rate limit of its own: consumers.rate_limit_per_s runs with neither".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POISONED: &str = r#"
        name = "p"
        duration_s = 30
        [queue]
        visibility_timeout_s = 2
        max_receive_count = 3
        [consumers]
        heartbeat = true
        on_failure = "backoff"
        [[triggers]]
        kind = "poison"
        start_s = 5
        count = 2
    "#;

    fn refusal(text: &str) -> String {
        let scenario = Scenario::from_toml(text).expect("a scenario");
        match LabSpec::of(&scenario) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_poison_trigger_runs_with_a_dead_letter_queue_and_a_way_to_put_failures_back() {
        assert_eq!(refusal(POISONED), "");
        let no_dlq = POISONED.replace("max_receive_count = 3", "max_receive_count = 0");
        assert!(refusal(&no_dlq).contains("needs a dead-letter queue"));
        let waits = POISONED.replace("\"backoff\"", "\"wait-lease\"");
        assert!(refusal(&waits).contains("the runtime puts a failed message back"));
        let naive = waits.replace("heartbeat = true", "heartbeat = false");
        assert_eq!(refusal(&naive), "");
    }

    #[test]
    fn crashes_deploys_and_lambda_fleets_run_on_processes_within_what_those_can_do() {
        let crash = POISONED.replace("\"poison\"", "\"crash\"");
        assert_eq!(refusal(&crash), "");
        // The database's slots hold its capacity for processes, as the pool does for tasks.
        let tight = format!("{crash}\n[database]\ncapacity = 3\n[scaling]\nworkers = 4\n");
        assert_eq!(refusal(&tight), "");
        let limited = crash.replace("[consumers]", "[consumers]\nrate_limit_per_s = 5");
        assert!(refusal(&limited).contains("a rate limit of its own"));
        let deploy = POISONED.replace("\"poison\"", "\"deploy\"");
        assert_eq!(refusal(&deploy), "");
        let buggy = deploy.replace(
            "heartbeat = true",
            "heartbeat = true\nheartbeat_stops_on_shutdown = true",
        );
        // Seed 000's bug runs live as a naive consumer's own heartbeat, without the gate.
        assert_eq!(refusal(&buggy), "");
        let gated = buggy.replace("[consumers]", "[consumers]\nidempotency = true");
        assert!(refusal(&gated).contains("without heartbeat_stops_on_shutdown"));
        let lambda = crash.replace("[consumers]", "[scaling]\nkind = \"lambda\"\n[consumers]");
        assert!(refusal(&lambda).contains("function invocations, without the runtime"));
        let beating = lambda.replace(
            "heartbeat = true",
            "heartbeat = true\nheartbeat_stops_on_shutdown = true",
        );
        assert!(refusal(&beating).contains("function invocations, without the runtime"));
        let naive = lambda.replace("heartbeat = true", "heartbeat = false");
        assert!(refusal(&naive).contains("started and stopped by its controller"));
        let unbounded = naive.replace("\"crash\"", "\"blip\"");
        assert!(
            refusal(&unbounded).contains("64 workers"),
            "max_concurrency 1000"
        );
        let alone = unbounded.replace(
            "kind = \"lambda\"",
            "kind = \"lambda\"\nmax_concurrency = 64",
        );
        assert_eq!(refusal(&alone), "");
    }
}

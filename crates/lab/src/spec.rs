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
        if let Some(t) = scenario
            .triggers
            .iter()
            .find(|t| !matches!(t.kind.as_str(), "blip" | "lock"))
        {
            return Err(LabError::Setup(format!(
                "the lab injects blips (a slow query on the database), table locks and bursts of arrivals; a {:?} trigger runs only in the simulator",
                t.kind
            )));
        }
        if scenario.scaling.kind != "fixed" {
            return Err(LabError::Setup(
                "the lab runs a fixed fleet: scaling.kind must be fixed".into(),
            ));
        }
        if scenario.arrivals.kind != "steady" {
            return Err(LabError::Setup(
                "the lab sends steady arrivals (with rate changes and bursts): arrivals.kind must be steady".into(),
            ));
        }
        if scenario.duration_s > 600.0 || scenario.scaling.workers > 64 {
            return Err(LabError::Setup(
                "a lab run is bounded: at most 600 s and 64 workers (scale the scenario's time down)".into(),
            ));
        }
        if scenario.consumers.idempotency && !scenario.consumers.heartbeat {
            return Err(LabError::Setup(
                "the lab's idempotency gate is the runtime's, which always heartbeats: set consumers.heartbeat".into(),
            ));
        }
        Ok(spec)
    }
}

//! The death-spiral lab: a deterministic, seeded simulator driven by the real queue engine
//! under a virtual clock. It reproduces the amplification the seeds describe (slow work past
//! the lease, duplicates fighting over the same rows, scaling on inflated queue depth) and
//! shows which settings stop it.
//!
//! No copy of the queue's rules lives here: every send, receive, heartbeat, delete and
//! dead-letter move goes through `leasehold_engine::Engine` with a `ManualClock`.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod model;
mod plot;
mod report;
mod scenario;
mod seeds;
mod sim;
mod sweep;

pub use model::{contention, load_factor, WorkModel};
pub use plot::draw_comparison;
pub use report::{
    dwell_line, load_multiples, outcome_line, rows_csv, summarize, write_outputs, Row, Summary,
    TenantDwell,
};
pub use scenario::{Scenario, TenantSpec, OTHERS};
pub use seeds::{over_seeds, run_seeds, seeds_line, SeedsSummary, Spread};
pub use sim::Tally;
pub use sweep::{sweep, sweep_triggers, SweepCell, TriggerCell};

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invalid scenario: {0}")]
    Scenario(String),
    #[error("engine: {0}")]
    Engine(#[from] leasehold_engine::EngineError),
    #[error("writing outputs: {0}")]
    Output(String),
}

/// Everything a run produced.
pub struct Outcome {
    pub summary: Summary,
    pub rows: Vec<Row>,
}

/// Runs a scenario to its end. `progress` hears the fraction done, now and then.
pub fn run(scenario: &Scenario, progress: &mut dyn FnMut(f64)) -> Result<Outcome, SimError> {
    scenario.validate()?;
    let started = std::time::Instant::now();
    let tally = sim::Simulation::new(scenario)?.run(progress)?;
    let mut summary = report::summarize(scenario, &tally);
    summary.wall_clock_s = started.elapsed().as_secs_f64();
    Ok(Outcome {
        summary,
        rows: tally.rows,
    })
}

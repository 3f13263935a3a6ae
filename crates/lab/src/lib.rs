//! The live lab: a scenario run for real, bounded in time, and checked against the simulator.
//!
//! A Leasehold server (started by the caller: this crate talks to it over SQS and its admin
//! routes only), a fleet of consumers (naive, or the `leasehold-worker` runtime), and a
//! downstream PostgreSQL database whose latency grows with load and row contention. Arrivals
//! and triggers follow the scenario file, whose times are already scaled down (leases of
//! seconds); the same file runs in the simulator, and the report puts the two side by side.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod consumers;
mod downstream;
mod load;
mod measure;
mod poison;
mod processes;
mod redrive;
mod report;
mod run;
mod scaler;
mod spec;

pub use report::{Comparison, LabReport, ModelCheck};

/// Checks a `--postgres` URL before anything starts.
pub fn check_postgres_url(url: &str) -> Result<(), LabError> {
    downstream::parse_url(url).map(|_| ())
}
pub use processes::run_consumer;
pub use run::{run, LabOptions};
pub use spec::LabSpec;

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("{0}")]
    Setup(String),
    #[error("the downstream database: {0}")]
    Postgres(String),
    #[error("the server: {0}")]
    Server(String),
    #[error("the simulator: {0}")]
    Sim(#[from] leasehold_sim::SimError),
    #[error("writing the report: {0}")]
    Output(String),
    #[error("interrupted: the run stopped early and cleaned up")]
    Interrupted,
    /// An execution of a poison message failed, as the scenario has it: a measure, not a
    /// failure of the lab.
    #[error("a poison message failed, as the scenario's trigger has it")]
    Poison,
    /// An execution ran past a Lambda function's timeout and was ended: a measure too.
    #[error("the execution ran past the function's timeout and was ended")]
    TimedOut,
}

impl LabError {
    fn postgres(e: tokio_postgres::Error) -> LabError {
        // The server's own message (and its detail) says more than the client's summary.
        let text = match e.as_db_error() {
            Some(db) => db.message().to_string(),
            None => e.to_string(),
        };
        LabError::Postgres(text)
    }

    fn sqs(what: &str, e: impl std::error::Error) -> LabError {
        LabError::Server(format!(
            "{what}: {}",
            aws_sdk_sqs::error::DisplayErrorContext(e)
        ))
    }
}

//! A load generator for any SQS endpoint that speaks AWS JSON 1.0.
//!
//! It talks HTTP through a pooled hyper client with hand-built JSON bodies, so the client costs
//! little next to the server it measures. Scenarios live in `scenario.rs`; each call's latency
//! goes into an HDR histogram per action.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod big_ops;
mod client;
mod scenario;

use std::collections::BTreeMap;
use std::time::Duration;

pub use client::{Signer, SqsClient};
pub use scenario::{cpu_ticks, peak_rss_mib, Scenario, Tally};

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("request to {endpoint} failed: {reason}")]
    Http { endpoint: String, reason: String },
    #[error("{action} answered {status}: {body}")]
    Status {
        action: String,
        status: u16,
        body: String,
    },
    #[error("unexpected answer to {action}: {reason}")]
    Answer { action: String, reason: String },
    #[error("cannot sign a request: {0}")]
    Signing(String),
}

/// How a run is set up.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    pub endpoint: String,
    pub scenario: Scenario,
    pub duration: Duration,
    /// Concurrent clients in all.
    pub clients: usize,
    pub body_bytes: usize,
    /// A server process to sample CPU and memory of, on Linux.
    pub server_pid: Option<u32>,
    /// Signs every request, for a server that checks signatures; None sends them unsigned.
    pub signer: Option<Signer>,
    /// The MessageGroupId of every message sent: on a standard queue, one tenant of a fair
    /// queue (issue 34's one-tenant measurement).
    pub group_id: Option<String>,
}

/// Latency of one action, in microseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Latency {
    pub calls: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

#[derive(Clone, Debug)]
pub struct Report {
    pub scenario: String,
    pub clients: usize,
    pub seconds: f64,
    /// Messages through the scenario's last step (sent, or deleted), per second.
    pub messages_per_second: f64,
    pub messages: u64,
    pub sent_per_second: f64,
    pub deleted_per_second: f64,
    pub errors: u64,
    pub latency: BTreeMap<&'static str, Latency>,
    /// Average CPU of the server over the run, in percent of one core.
    pub server_cpu_percent: Option<f64>,
    /// Peak resident memory of the server, in MiB.
    pub server_rss_mib: Option<f64>,
}

impl Report {
    pub fn print(&self) {
        println!(
            "{}: {} clients, {:.1} s, {:.0} messages/s ({} messages, {} errors; sent {:.0}/s, deleted {:.0}/s)",
            self.scenario,
            self.clients,
            self.seconds,
            self.messages_per_second,
            self.messages,
            self.errors,
            self.sent_per_second,
            self.deleted_per_second
        );
        for (action, l) in &self.latency {
            println!(
                "  {action:<22} {:>8} calls  p50 {:>7.2} ms  p99 {:>7.2} ms  p99.9 {:>7.2} ms  max {:>7.2} ms",
                l.calls,
                l.p50_us as f64 / 1000.0,
                l.p99_us as f64 / 1000.0,
                l.p999_us as f64 / 1000.0,
                l.max_us as f64 / 1000.0
            );
        }
        if let (Some(cpu), Some(rss)) = (self.server_cpu_percent, self.server_rss_mib) {
            println!("  server: {cpu:.0}% CPU (of one core), peak RSS {rss:.0} MiB");
        }
    }
}

pub async fn run(config: BenchConfig) -> Result<Report, BenchError> {
    scenario::run(config).await
}

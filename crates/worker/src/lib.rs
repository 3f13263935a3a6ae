//! A resilient consumer runtime for SQS queues: the seed playbook as a library.
//!
//! It talks to any SQS (AWS, Leasehold, an emulator) through `aws-sdk-sqs` only, and never
//! imports the server. Per message it keeps the lease alive with a heartbeat from the moment
//! the receive returned, and stops the handler before the lease (or the idempotency claim) it
//! holds can end, so no two runs of one message overlap; it gates work through an idempotency
//! store, puts failures back with a jittered backoff, and on shutdown drains within a grace
//! period shorter than the lease.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod backoff;
mod builder;
mod deleter;
mod errors;
mod fifo;
pub mod idempotency;
mod inner;
mod lease;
mod message;
mod process;
pub mod redrive;
mod runtime;
mod stats;
mod trace;

pub use backoff::Backoff;
pub use builder::{default_stop_grace, SettingsError, WorkerBuilder};
pub use errors::is_lost_lease;
pub use idempotency::{Begin, Claim, IdempotencyError, IdempotencyStore};
pub use message::{idempotency_key, HandlerError, Message, IDEMPOTENCY_KEY_ATTRIBUTE};
pub use runtime::Worker;
pub use stats::WorkerStats;
pub use tokio_util::sync::CancellationToken;

/// The longest one receive's lease can be extended to, from that receive.
pub const MAX_TOTAL_LEASE: std::time::Duration = std::time::Duration::from_secs(43_200);

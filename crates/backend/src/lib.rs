//! The backend seam: what a server asks of whatever holds its queues, as one async trait with
//! typed commands and replies (no JSON, no wire shapes). The protocol validates, converts,
//! checksums and shapes above it, once for every backend; a backend only applies commands.
//!
//! The backends are crates of their own: `leasehold-embedded` (the pure engine behind a lock,
//! the SQLite committer under it) and `leasehold-postgres`; the binary chooses one, and the
//! server knows only this seam. Long-poll wake-ups come from the backend too ([`Backend::waiter`]):
//! it is the one that knows when a send, a release or a delete made messages deliverable, and
//! a backend shared by several servers can wake waiters on all of them.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod gate;
mod waiters;

pub use gate::SendGate;
pub use waiters::Waiters;

use std::sync::Arc;

use async_trait::async_trait;
use leasehold_engine::{
    Delivery, EngineError, LeaseReport, MoveTaskInfo, Naming, NewMessage, QueuePage,
    ReceiveRequest, Sent,
};
use thiserror::Error;
use tokio::sync::Notify;

/// Why a backend did not apply a command.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum BackendError {
    /// The command was refused for what it asked: SQS's own errors.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The backend cannot serve for now (it is restoring itself); the client may retry.
    #[error("{0}")]
    Unavailable(String),
    /// The backend failed: nothing of the command is acknowledged.
    #[error("{0}")]
    Failed(String),
    /// The backend does not serve this command (yet): refused rather than answered by
    /// other rules.
    #[error("{0}")]
    Unsupported(String),
    /// Refused for now to protect the server (short of memory or disk); the client may retry
    /// after backing off, and commands that drain the queue still go through.
    #[error("{0}")]
    Throttled(String),
}

pub type Result<T, E = BackendError> = std::result::Result<T, E>;

/// Name and value pairs: queue attributes, tags.
pub type Pairs = Vec<(String, String)>;

/// One receive attempt's answer.
#[derive(Debug, Default)]
pub struct Received {
    pub deliveries: Vec<Delivery>,
    /// The queue's own ReceiveMessageWaitTimeSeconds, for a receive that names no wait.
    pub queue_wait_s: u32,
    /// For a receive that found nothing: in how many milliseconds a delay or a lease of the
    /// queue ends by itself, making a message receivable without anybody's command, which is
    /// when a long poll looks again. None when messages were delivered.
    pub next_due_in_ms: Option<u64>,
    /// A standard queue held messages back at its in-flight quota and delivered none: a
    /// short poll is answered OverLimit, a long poll waits on (and gets nothing if no lease
    /// ends in its wait), as on AWS.
    pub over_limit: bool,
}

/// Whatever holds a server's queues, as the server needs it: each part below is a trait of
/// its own, so a caller names the part it uses. Every method taking `queue` takes its key (see
/// [`Naming`]). Commands are validated above these traits as far as the queue's state is not
/// needed; what depends on the queue's state (its settings, its messages) is checked here.
/// A batch answers one result per entry, in order, after the request as a whole was checked.
#[async_trait]
pub trait Backend: QueueAdmin + Messages + Measurements + TimeTravel {
    /// How queues are named: the own region and account.
    fn naming(&self) -> &Naming;
    /// Background work that is due (message move tasks); called about ten times a second.
    async fn tick(&self);
    /// Hands over what is not yet durable (the last second's measurements): at shutdown.
    async fn flush(&self);
    /// Whether the backend takes writes now (`GET /ready`): the embedded store has not
    /// failed; PostgreSQL answers. The error says why not.
    async fn ready(&self) -> Result<()>;
    /// Why sends are refused for now (the embedded store's disk below its reserve), if they
    /// are: for `/ready` and `/metrics`.
    fn refusing_sends(&self) -> Option<String> {
        None
    }
}

/// The queues themselves: their lifecycle, attributes, tags, permissions, and the message
/// move tasks that redrive a dead-letter queue.
#[async_trait]
pub trait QueueAdmin: Send + Sync {
    async fn create_queue(&self, queue: &str, attributes: Pairs, tags: Pairs) -> Result<()>;
    async fn queue_exists(&self, queue: &str) -> Result<()>;
    async fn delete_queue(&self, queue: &str) -> Result<()>;
    async fn list_queues(&self, listing: QueueListing) -> Result<QueuePage>;
    async fn list_dead_letter_source_queues(&self, queue: &str, page: Page) -> Result<QueuePage>;
    async fn get_attributes(&self, queue: &str, names: Vec<String>) -> Result<Pairs>;
    async fn set_attributes(&self, queue: &str, attributes: Pairs) -> Result<()>;
    async fn purge(&self, queue: &str) -> Result<()>;
    async fn tag(&self, queue: &str, tags: Pairs) -> Result<()>;
    async fn untag(&self, queue: &str, keys: Vec<String>) -> Result<()>;
    async fn list_tags(&self, queue: &str) -> Result<Pairs>;
    async fn add_permission(&self, queue: &str, permission: Permission) -> Result<()>;
    async fn remove_permission(&self, queue: &str, label: &str) -> Result<()>;
    async fn start_move_task(&self, task: MoveTaskStart) -> Result<String>;
    async fn cancel_move_task(&self, handle: &str) -> Result<u64>;
    async fn list_move_tasks(
        &self,
        source_arn: &str,
        max: Option<u32>,
    ) -> Result<Vec<MoveTaskInfo>>;
}

/// Messages: sent, received under a lease, deleted or given a new lease by handle; and the
/// long-poll wake-ups that come with them.
#[async_trait]
pub trait Messages: Send + Sync {
    async fn send(&self, queue: &str, message: NewMessage) -> Result<Sent>;
    async fn send_batch(
        &self,
        queue: &str,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<Result<Sent, EngineError>>>;
    async fn receive(&self, queue: &str, request: ReceiveRequest) -> Result<Received>;
    async fn delete(
        &self,
        queue: &str,
        handles: Vec<String>,
    ) -> Result<Vec<Result<(), EngineError>>>;
    /// Each receipt handle with its new visibility timeout in seconds.
    async fn change_visibility(
        &self,
        queue: &str,
        changes: Vec<(String, u32)>,
    ) -> Result<Vec<Result<(), EngineError>>>;
    /// The `limit` oldest messages, changing nothing: no receive count, no lease.
    async fn peek(&self, queue: &str, limit: usize) -> Result<Vec<leasehold_engine::Peeked>>;
    /// What the receives waiting on `queue` wait on: notified when messages may have become
    /// receivable there.
    fn waiter(&self, queue: &str) -> Arc<Notify>;
    /// Wakes every waiting receive: the clock jumped, or the server stops.
    fn wake_all(&self);
}

/// The honest-lease measurements: how long consumers hold each queue's messages.
#[async_trait]
pub trait Measurements: Send + Sync {
    /// A long poll that ends empty: counted for the lease report, not waited on.
    async fn record_empty_receive(&self, queue: &str);
    /// How long consumers hold this queue's messages.
    async fn lease_report(&self, queue: &str) -> Result<LeaseReport>;
    /// The lease report of every queue whose name (in any region and account) starts with
    /// `name_prefix` ("" for all), for a metrics scrape or the dashboard; in no particular
    /// order. An error, not a short list, when the backend cannot read them all.
    async fn lease_reports(&self, name_prefix: &str) -> Result<Vec<(String, LeaseReport)>>;
}

/// Time travel (`--time-travel`, for tests).
#[async_trait]
pub trait TimeTravel: Send + Sync {
    /// The clock the backend's rules read has jumped `by_ms` forward; answers the backend's
    /// instant after the jump.
    async fn clock_advanced(&self, by_ms: u64) -> Result<u64>;
}

/// ListQueues' filter and page.
#[derive(Debug, Clone, Default)]
pub struct QueueListing {
    /// None: the backend's own account.
    pub account: Option<String>,
    pub region: Option<String>,
    pub prefix: Option<String>,
    pub page: Page,
}

impl QueueListing {
    /// The engine's listing this one asks for.
    pub fn asked(&self) -> leasehold_engine::QueueListing<'_> {
        leasehold_engine::QueueListing {
            account: self.account.as_deref(),
            region: self.region.as_deref(),
            prefix: self.prefix.as_deref(),
            max_results: self.page.max,
            next_token: self.page.next_token.as_deref(),
        }
    }
}

/// Which page of a listing: at most `max` names, after `next_token`.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub max: Option<usize>,
    pub next_token: Option<String>,
}

/// AddPermission's grant.
#[derive(Debug, Clone)]
pub struct Permission {
    pub label: String,
    pub accounts: Vec<String>,
    pub actions: Vec<String>,
}

/// StartMessageMoveTask's request.
#[derive(Debug, Clone)]
pub struct MoveTaskStart {
    pub source_arn: String,
    pub destination_arn: Option<String>,
    pub per_second: Option<u32>,
}

//! What a handler is given and gives back: the `Message`, the handler's shape, and the
//! attribute that carries a unit of work's idempotency key.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use aws_sdk_sqs::types::MessageAttributeValue;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A message attribute naming the unit of work, set by `leasehold redrive` so a redriven
/// message (which gets a new MessageId) keeps its idempotency key.
pub const IDEMPOTENCY_KEY_ATTRIBUTE: &str = "leasehold-idempotency-key";

pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;
pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send>>;
pub(crate) type Handler = Arc<dyn Fn(Message) -> BoxFuture + Send + Sync>;
pub(crate) type KeyFn = Arc<dyn Fn(&Message) -> String + Send + Sync>;

/// The idempotency key the runtime gives a message unless told otherwise (`WorkerBuilder::
/// key`): its `leasehold-idempotency-key` attribute, else its message id.
pub fn idempotency_key(m: &Message) -> String {
    m.message_attributes
        .get(IDEMPOTENCY_KEY_ATTRIBUTE)
        .and_then(|a| a.string_value.clone())
        .unwrap_or_else(|| m.message_id.clone())
}

/// One message as a handler sees it.
#[derive(Clone, Debug)]
pub struct Message {
    pub message_id: String,
    pub body: String,
    pub receive_count: u32,
    /// System attributes (SentTimestamp, ApproximateReceiveCount, ...).
    pub attributes: HashMap<String, String>,
    pub message_attributes: HashMap<String, MessageAttributeValue>,
    /// When the receive returned: the lease has been running since.
    pub received_at: Instant,
    /// Cancelled when the run must stop: its lease or claim could end before it would (it is
    /// then dropped after the stop grace), or the worker shuts down past its grace.
    pub cancel: CancellationToken,
    /// Cancelled when the lease can be extended no further (12 hours from the receive); the
    /// run is stopped before that lease ends.
    pub lease_ceiling: CancellationToken,
}

//! Leasehold's queue engine: SQS semantics as a pure, synchronous state machine.
//!
//! No I/O, no async, no wire formats: commands come in as method calls, replies go out as
//! values, and time comes from an injected [`Clock`]. The protocol, store, simulator and
//! advisor crates build on this one; it depends on none of them.

mod clock;
mod engine;
mod error;
mod message;
mod queue;
mod receipt;
mod settings;

pub use clock::{Clock, ManualClock, Millis};
pub use engine::{validate_queue_name, Engine, EngineConfig, QueuePage, MAX_LIST_RESULTS};
pub use error::{EngineError, Result};
pub use message::{
    is_allowed_char, AttributeData, Delivery, MessageAttribute, MessageAttributes, NewMessage,
    MAX_MESSAGE_ATTRIBUTES,
};
pub use queue::{DeleteOutcome, LeaseMode, QueueCounts, QueueStats};
pub use settings::{
    QueueSettings, MAX_DELAY_S, MAX_MESSAGE_SIZE, MAX_VISIBILITY_TIMEOUT_S, MAX_WAIT_TIME_S,
};

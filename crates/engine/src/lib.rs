//! Leasehold's queue engine: SQS semantics as a pure, synchronous state machine.
//!
//! No I/O, no async, no wire formats: commands come in as method calls, replies go out as
//! values, and time comes from an injected [`Clock`]. The protocol, store, simulator and
//! advisor crates build on this one; it depends on none of them.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod clock;
mod counters;
mod engine;
mod error;
pub mod faults;
mod fifo;
mod handout;
mod lease_stats;
mod message;
mod queue;
mod quota;
mod receipt;
mod redrive;
pub mod rules;
mod settings;
mod table;
mod tenants;

pub use clock::{Clock, ManualClock, Millis};
pub use engine::{
    check_batch, check_queue_room, is_account_id, is_region, list_queue_keys, name_of,
    validate_queue_name, Engine, EngineConfig, Fairness, LeaseReport, Locked, MoveTask,
    MoveTaskInfo, MoveTaskStatus, Naming, QueueListing, QueuePage, ReceiveRequest, Sink,
    StripedReceive, MAX_LIST_RESULTS, MAX_STRIPES, MOVE_BATCH_STORED, MOVE_TASK_QUEUE_GONE,
};
pub use engine::{Change, EngineRecord, QueueRecord, Restoring, Snapshot};
pub use error::{EngineError, Result};
pub use fifo::{content_deduplication_id, DedupKey, Original, FIFO_WINDOW_MS};
pub use handout::{Accepted, Handout, Sent};
pub use lease_stats::{
    Buckets, Counts, DeleteSeen, LeaseMetrics, MetricsRecord, Summary as DurationSummary,
    WindowedRecord, HOLD_BUCKETS_MS, METRICS_EVERY_MS, RECENT_DELETES_MS,
    WINDOW_MS as LEASE_WINDOW_MS,
};
pub use message::{
    format_message_id, is_allowed_char, AttributeData, Checked, Content, ContentKey, Delivery,
    Extras, MessageAttribute, MessageAttributes, MsgKey, NewMessage, Peeked, State as MessageState,
    StoredMessage, MAX_MESSAGE_ATTRIBUTES,
};
pub use queue::{DeleteOutcome, QueueCounts, QueueMeta, QueueStats, Removed};
pub use quota::MAX_IN_FLIGHT_PER_QUEUE;
pub use receipt::{Receipt, ReceiptSealer};
pub use redrive::{RedriveAllowPolicy, RedrivePolicy, MAX_RECEIVE_COUNT};
pub use rules::LeaseMode;
pub use settings::{
    QueueSettings, MAX_DELAY_S, MAX_MESSAGE_SIZE, MAX_QUEUES_PER_ACCOUNT, MAX_VISIBILITY_TIMEOUT_S,
    MAX_WAIT_TIME_S,
};
pub use tenants::{FairnessReport, NoisyTenant, TenantCounts, QUIET_AFTER_MS};

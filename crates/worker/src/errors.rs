//! Telling a lost lease from a passing failure.

use aws_sdk_sqs::error::ProvideErrorMetadata;

/// The error codes that mean our receipt handle no longer holds the message: someone else may
/// own it now, so extending is impossible and the work should stop.
const LOST: &[&str] = &[
    "ReceiptHandleIsInvalid",
    "AWS.SimpleQueueService.MessageNotInflight",
    "MessageNotInflight",
    "InvalidParameterValue",
];

/// Whether an SDK error says the lease is lost (rather than a transient failure to retry).
pub fn is_lost_lease<E: ProvideErrorMetadata>(error: &E) -> bool {
    error.code().is_some_and(|code| LOST.contains(&code))
}

//! The engine's errors: one variant per SQS failure the core can detect.
//!
//! The mapping to wire codes (JSON `__type`, query code, HTTP status) lives in the protocol crate.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EngineError {
    #[error("The specified queue does not exist.")]
    QueueDoesNotExist,
    #[error("A queue already exists with the same name and a different value for attribute {0}")]
    QueueAlreadyExists(String),
    #[error("You must wait 60 seconds after deleting a queue before you can create another with the same name.")]
    QueueDeletedRecently,
    #[error("Only one PurgeQueue operation on {0} is allowed every 60 seconds.")]
    PurgeQueueInProgress(String),
    #[error("{0}")]
    InvalidParameterValue(String),
    #[error("The request must contain the parameter {0}.")]
    MissingParameter(String),
    #[error("Unknown Attribute {0}.")]
    InvalidAttributeName(String),
    #[error("{0}")]
    InvalidAttributeNameReason(String),
    #[error("Invalid value for the parameter {0}.")]
    InvalidAttributeValue(String),
    #[error("{0}")]
    InvalidAttributeValueReason(String),
    #[error("{0}")]
    InvalidMessageContents(String),
    #[error("The input receipt handle \"{0}\" is not a valid receipt handle.")]
    ReceiptHandleIsInvalid(String),
    #[error(
        "Value {0} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."
    )]
    ReceiptHandleExpired(String),
    #[error("Value {0} for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.")]
    MessageNotAvailable(String),
    #[error("Message with receipt handle {0} is not in flight.")]
    MessageNotInflight(String),
    #[error("Batch requests cannot be longer than {0} bytes. You have sent {1} bytes.")]
    BatchRequestTooLong(usize, usize),
    #[error("{0}")]
    ResourceNotFound(String),
    /// A quota reached: AddPermission past the policy's size, CreateQueue past the
    /// account's queues.
    #[error("{0}")]
    OverLimit(String),
}

impl EngineError {
    /// A move task's source or destination that does not exist, in AWS's words.
    pub fn resource_not_found(parameter: &str) -> EngineError {
        EngineError::ResourceNotFound(format!(
            "The resource that you specified for the {parameter} parameter doesn't exist."
        ))
    }

    /// `InvalidParameterValue` for a numeric parameter outside its range, in AWS's words.
    pub fn out_of_range(param: &str, value: impl std::fmt::Display, reason: &str) -> Self {
        EngineError::InvalidParameterValue(format!(
            "Value {value} for parameter {param} is invalid. Reason: {reason}"
        ))
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

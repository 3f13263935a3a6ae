//! Protocol-level errors, and the one table that maps every error to AWS's wire codes.

use leasehold_backend::BackendError;
use leasehold_engine::EngineError;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProtocolError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("The request body could not be read: {0}")]
    Malformed(String),
    #[error("The action or operation requested is invalid: {0}")]
    UnknownOperation(String),
    /// A query request with no `Action` at all: AWS answers 404 `<UnknownOperationException/>`.
    #[error("The request names no Action.")]
    NoAction,
    /// An action that cannot be sent to a queue's URL (CreateQueue, ListQueues).
    #[error("The action {0} is not valid for this endpoint.")]
    ActionNotForEndpoint(String),
    #[error("The request must contain the parameter {0}.")]
    MissingParameter(&'static str),
    #[error("The request could not be made durable: {0}")]
    Internal(String),
    #[error("{0}")]
    InvalidParameterValue(String),
    #[error("There should be at least one {0} in the request.")]
    EmptyBatchRequest(&'static str),
    #[error("Maximum number of entries per request are 10. You have sent {0}.")]
    TooManyEntriesInBatchRequest(usize),
    #[error("A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.")]
    InvalidBatchEntryId,
    #[error("Id {0} repeated.")]
    BatchEntryIdsNotDistinct(String),
    #[error("{0}")]
    AccessDenied(String),
    #[error("{0}")]
    RequestThrottled(String),
    #[error("{0}")]
    ServiceUnavailable(String),
    #[error("The request was not completed within {0} seconds.")]
    RequestTimeout(u64),
    #[error("{0}")]
    UnsupportedOperation(String),
    /// The authentication failures, in AWS's words (`sigv4` at the server's edge).
    #[error("Request is missing Authentication Token")]
    MissingAuthenticationToken,
    #[error("{0}")]
    IncompleteSignature(String),
    #[error("The security token included in the request is invalid.")]
    InvalidClientTokenId,
    #[error("{0}")]
    SignatureDoesNotMatch(String),
    #[error("{0}")]
    RequestExpired(String),
}

impl From<BackendError> for ProtocolError {
    fn from(error: BackendError) -> Self {
        match error {
            BackendError::Engine(e) => ProtocolError::Engine(e),
            BackendError::Unavailable(why) => ProtocolError::ServiceUnavailable(why),
            BackendError::Failed(why) => ProtocolError::Internal(why),
            BackendError::Unsupported(why) => ProtocolError::UnsupportedOperation(why),
            BackendError::Throttled(why) => ProtocolError::RequestThrottled(why),
        }
    }
}

impl ProtocolError {
    /// The message the query protocol sends: as the JSON protocol's, except where AWS still
    /// answers in its older words.
    pub fn query_message(&self) -> String {
        match self {
            ProtocolError::Engine(EngineError::QueueDoesNotExist) => {
                "The specified queue does not exist for this wsdl version.".to_string()
            }
            other => other.to_string(),
        }
    }
}

/// How one error shows on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireCode {
    pub status: u16,
    /// The JSON protocol's `__type`, fully qualified.
    pub json_type: &'static str,
    /// The query protocol's code, also sent in `x-amzn-query-error` on JSON errors.
    pub query_code: &'static str,
    pub sender_fault: bool,
}

const fn sender(status: u16, json_type: &'static str, query_code: &'static str) -> WireCode {
    WireCode {
        status,
        json_type,
        query_code,
        sender_fault: true,
    }
}

/// The table: AWS's JSON `__type` and query code for each error, as recorded against real AWS.
pub fn wire_code(error: &ProtocolError) -> WireCode {
    use EngineError as E;
    use ProtocolError as P;
    const SQS_INVALID_PARAMETER: WireCode = sender(
        400,
        "com.amazonaws.sqs#InvalidParameterValueException",
        "InvalidParameterValue",
    );
    match error {
        P::Engine(e) => match e {
            E::QueueDoesNotExist => sender(
                400,
                "com.amazonaws.sqs#QueueDoesNotExist",
                "AWS.SimpleQueueService.NonExistentQueue",
            ),
            E::QueueAlreadyExists(_) => sender(
                400,
                "com.amazonaws.sqs#QueueNameExists",
                "QueueAlreadyExists",
            ),
            E::QueueDeletedRecently => sender(
                400,
                "com.amazonaws.sqs#QueueDeletedRecently",
                "AWS.SimpleQueueService.QueueDeletedRecently",
            ),
            E::PurgeQueueInProgress(_) => sender(
                403,
                "com.amazonaws.sqs#PurgeQueueInProgress",
                "AWS.SimpleQueueService.PurgeQueueInProgress",
            ),
            E::InvalidParameterValue(_)
            | E::MessageNotAvailable(_)
            | E::ReceiptHandleExpired(_) => SQS_INVALID_PARAMETER,
            E::ResourceNotFound(_) => sender(
                404,
                "com.amazonaws.sqs#ResourceNotFoundException",
                "ResourceNotFoundException",
            ),
            E::OverLimit(_) => sender(403, "com.amazonaws.sqs#OverLimit", "OverLimit"),
            E::MissingParameter(_) => sender(
                400,
                "com.amazonaws.sqs#MissingRequiredParameterException",
                "MissingParameter",
            ),
            E::InvalidAttributeName(_) | E::InvalidAttributeNameReason(_) => sender(
                400,
                "com.amazonaws.sqs#InvalidAttributeName",
                "InvalidAttributeName",
            ),
            E::InvalidAttributeValue(_) | E::InvalidAttributeValueReason(_) => sender(
                400,
                "com.amazonaws.sqs#InvalidAttributeValue",
                "InvalidAttributeValue",
            ),
            E::InvalidMessageContents(_) => sender(
                400,
                "com.amazonaws.sqs#InvalidMessageContents",
                "InvalidMessageContents",
            ),
            E::ReceiptHandleIsInvalid(_) => sender(
                404,
                "com.amazonaws.sqs#ReceiptHandleIsInvalid",
                "ReceiptHandleIsInvalid",
            ),
            E::MessageNotInflight(_) => sender(
                400,
                "com.amazonaws.sqs#MessageNotInflight",
                "AWS.SimpleQueueService.MessageNotInflight",
            ),
            E::BatchRequestTooLong(..) => sender(
                400,
                "com.amazonaws.sqs#BatchRequestTooLong",
                "AWS.SimpleQueueService.BatchRequestTooLong",
            ),
        },
        P::Malformed(_) => sender(
            400,
            "com.amazon.coral.service#SerializationException",
            "MalformedInput",
        ),
        P::UnknownOperation(_) | P::ActionNotForEndpoint(_) => sender(
            400,
            "com.amazon.coral.service#UnknownOperationException",
            "InvalidAction",
        ),
        P::NoAction => sender(
            404,
            "com.amazon.coral.service#UnknownOperationException",
            "UnknownOperationException",
        ),
        P::MissingParameter(_) => sender(
            400,
            "com.amazonaws.sqs#MissingRequiredParameterException",
            "MissingParameter",
        ),
        P::InvalidParameterValue(_) => SQS_INVALID_PARAMETER,
        P::Internal(_) => WireCode {
            status: 500,
            json_type: "com.amazon.coral.service#InternalFailure",
            query_code: "InternalFailure",
            sender_fault: false,
        },
        P::EmptyBatchRequest(_) => sender(
            400,
            "com.amazonaws.sqs#EmptyBatchRequest",
            "AWS.SimpleQueueService.EmptyBatchRequest",
        ),
        P::TooManyEntriesInBatchRequest(_) => sender(
            400,
            "com.amazonaws.sqs#TooManyEntriesInBatchRequest",
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        ),
        P::InvalidBatchEntryId => sender(
            400,
            "com.amazonaws.sqs#InvalidBatchEntryId",
            "AWS.SimpleQueueService.InvalidBatchEntryId",
        ),
        P::BatchEntryIdsNotDistinct(_) => sender(
            400,
            "com.amazonaws.sqs#BatchEntryIdsNotDistinct",
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        ),
        P::AccessDenied(_) => sender(
            403,
            "com.amazon.coral.service#AccessDeniedException",
            "AccessDenied",
        ),
        P::RequestThrottled(_) => sender(
            400,
            "com.amazonaws.sqs#RequestThrottled",
            "RequestThrottled",
        ),
        P::ServiceUnavailable(_) => WireCode {
            status: 503,
            json_type: "com.amazon.coral.service#ServiceUnavailableException",
            query_code: "ServiceUnavailable",
            sender_fault: false,
        },
        P::RequestTimeout(_) => sender(
            408,
            "com.amazon.coral.service#RequestTimeoutException",
            "RequestTimeout",
        ),
        P::UnsupportedOperation(_) => sender(
            400,
            "com.amazonaws.sqs#UnsupportedOperation",
            "AWS.SimpleQueueService.UnsupportedOperation",
        ),
        P::MissingAuthenticationToken => sender(
            403,
            "com.amazon.coral.service#MissingAuthenticationTokenException",
            "MissingAuthenticationToken",
        ),
        P::IncompleteSignature(_) => sender(
            400,
            "com.amazon.coral.service#IncompleteSignatureException",
            "IncompleteSignature",
        ),
        P::InvalidClientTokenId => sender(
            403,
            "com.amazon.coral.service#UnrecognizedClientException",
            "InvalidClientTokenId",
        ),
        P::SignatureDoesNotMatch(_) => sender(
            403,
            "com.amazon.coral.service#InvalidSignatureException",
            "SignatureDoesNotMatch",
        ),
        P::RequestExpired(_) => sender(
            400,
            "com.amazon.coral.service#RequestExpired",
            "RequestExpired",
        ),
    }
}

pub type Result<T, E = ProtocolError> = std::result::Result<T, E>;

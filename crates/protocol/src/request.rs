//! The SQS actions as one typed request enum, parsed from an action name and a JSON document.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ProtocolError, Result};
use crate::shapes::*;

/// One SQS request, protocol-neutral: the query protocol builds the same values.
#[derive(Debug, Clone)]
pub enum Request {
    CreateQueue(CreateQueueInput),
    DeleteQueue(QueueUrlInput),
    GetQueueUrl(GetQueueUrlInput),
    ListQueues(ListQueuesInput),
    GetQueueAttributes(GetQueueAttributesInput),
    SetQueueAttributes(SetQueueAttributesInput),
    PurgeQueue(QueueUrlInput),
    SendMessage(SendMessageInput),
    SendMessageBatch(SendMessageBatchInput),
    ReceiveMessage(ReceiveMessageInput),
    DeleteMessage(DeleteMessageInput),
    DeleteMessageBatch(HandleBatchInput),
    ChangeMessageVisibility(ChangeVisibilityInput),
    ChangeMessageVisibilityBatch(HandleBatchInput),
    TagQueue(TagQueueInput),
    UntagQueue(UntagQueueInput),
    ListQueueTags(QueueUrlInput),
    AddPermission(AddPermissionInput),
    RemovePermission(RemovePermissionInput),
    ListDeadLetterSourceQueues(ListDeadLetterSourceQueuesInput),
    StartMessageMoveTask(StartMessageMoveTaskInput),
    CancelMessageMoveTask(CancelMessageMoveTaskInput),
    ListMessageMoveTasks(ListMessageMoveTasksInput),
}

/// Where a request's members come from: a JSON body, parsed straight into the shape, or a
/// document the query protocol assembled.
trait Source {
    fn parse<T: DeserializeOwned>(self) -> Result<T>;
}

impl Source for Value {
    fn parse<T: DeserializeOwned>(self) -> Result<T> {
        serde_json::from_value(self).map_err(|e| ProtocolError::Malformed(e.to_string()))
    }
}

struct JsonBody<'a>(&'a [u8]);

impl Source for JsonBody<'_> {
    fn parse<T: DeserializeOwned>(self) -> Result<T> {
        serde_json::from_slice(self.0).map_err(|e| ProtocolError::Malformed(e.to_string()))
    }
}

impl Request {
    /// Parses an AWS JSON 1.0 body for `action` (the part after `AmazonSQS.`).
    pub fn from_json(action: &str, body: &[u8]) -> Result<Request> {
        let body = if body.iter().all(u8::is_ascii_whitespace) {
            b"{}".as_slice()
        } else {
            body
        };
        if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ProtocolError::Malformed(
                "the body must be a JSON object".into(),
            ));
        }
        Request::build(action, JsonBody(body))
    }

    /// Builds a request from a JSON-shaped document.
    pub fn from_value(action: &str, value: Value) -> Result<Request> {
        Request::build(action, value)
    }

    fn build(action: &str, source: impl Source) -> Result<Request> {
        use Request as R;
        Ok(match action {
            "CreateQueue" => R::CreateQueue(source.parse()?),
            "DeleteQueue" => R::DeleteQueue(source.parse()?),
            "GetQueueUrl" => R::GetQueueUrl(source.parse()?),
            "ListQueues" => R::ListQueues(source.parse()?),
            "GetQueueAttributes" => R::GetQueueAttributes(source.parse()?),
            "SetQueueAttributes" => R::SetQueueAttributes(source.parse()?),
            "PurgeQueue" => R::PurgeQueue(source.parse()?),
            "SendMessage" => R::SendMessage(source.parse()?),
            "SendMessageBatch" => R::SendMessageBatch(source.parse()?),
            "ReceiveMessage" => R::ReceiveMessage(source.parse()?),
            "DeleteMessage" => R::DeleteMessage(source.parse()?),
            "DeleteMessageBatch" => R::DeleteMessageBatch(source.parse()?),
            "ChangeMessageVisibility" => R::ChangeMessageVisibility(source.parse()?),
            "ChangeMessageVisibilityBatch" => R::ChangeMessageVisibilityBatch(source.parse()?),
            "TagQueue" => R::TagQueue(source.parse()?),
            "UntagQueue" => R::UntagQueue(source.parse()?),
            "ListQueueTags" => R::ListQueueTags(source.parse()?),
            "AddPermission" => R::AddPermission(source.parse()?),
            "RemovePermission" => R::RemovePermission(source.parse()?),
            "ListDeadLetterSourceQueues" => R::ListDeadLetterSourceQueues(source.parse()?),
            "StartMessageMoveTask" => R::StartMessageMoveTask(source.parse()?),
            "CancelMessageMoveTask" => R::CancelMessageMoveTask(source.parse()?),
            "ListMessageMoveTasks" => R::ListMessageMoveTasks(source.parse()?),
            other => return Err(ProtocolError::UnknownOperation(other.to_string())),
        })
    }

    /// The QueueUrl the request names, if it names one.
    pub fn queue_url(&self) -> Option<&str> {
        use Request as R;
        match self {
            R::CreateQueue(_)
            | R::GetQueueUrl(_)
            | R::ListQueues(_)
            | R::StartMessageMoveTask(_)
            | R::CancelMessageMoveTask(_)
            | R::ListMessageMoveTasks(_) => None,
            R::AddPermission(i) => i.queue_url.as_deref(),
            R::RemovePermission(i) => i.queue_url.as_deref(),
            R::ListDeadLetterSourceQueues(i) => i.queue_url.as_deref(),
            R::DeleteQueue(i) | R::PurgeQueue(i) | R::ListQueueTags(i) => i.queue_url.as_deref(),
            R::GetQueueAttributes(i) => i.queue_url.as_deref(),
            R::SetQueueAttributes(i) => i.queue_url.as_deref(),
            R::SendMessage(i) => i.queue_url.as_deref(),
            R::SendMessageBatch(i) => i.queue_url.as_deref(),
            R::ReceiveMessage(i) => i.queue_url.as_deref(),
            R::DeleteMessage(i) => i.queue_url.as_deref(),
            R::DeleteMessageBatch(i) | R::ChangeMessageVisibilityBatch(i) => i.queue_url.as_deref(),
            R::ChangeMessageVisibility(i) => i.queue_url.as_deref(),
            R::TagQueue(i) => i.queue_url.as_deref(),
            R::UntagQueue(i) => i.queue_url.as_deref(),
        }
    }

    /// The action's name, as `X-Amz-Target` and the query protocol's `Action` spell it.
    pub fn action(&self) -> &'static str {
        use Request as R;
        match self {
            R::CreateQueue(_) => "CreateQueue",
            R::DeleteQueue(_) => "DeleteQueue",
            R::GetQueueUrl(_) => "GetQueueUrl",
            R::ListQueues(_) => "ListQueues",
            R::GetQueueAttributes(_) => "GetQueueAttributes",
            R::SetQueueAttributes(_) => "SetQueueAttributes",
            R::PurgeQueue(_) => "PurgeQueue",
            R::SendMessage(_) => "SendMessage",
            R::SendMessageBatch(_) => "SendMessageBatch",
            R::ReceiveMessage(_) => "ReceiveMessage",
            R::DeleteMessage(_) => "DeleteMessage",
            R::DeleteMessageBatch(_) => "DeleteMessageBatch",
            R::ChangeMessageVisibility(_) => "ChangeMessageVisibility",
            R::ChangeMessageVisibilityBatch(_) => "ChangeMessageVisibilityBatch",
            R::TagQueue(_) => "TagQueue",
            R::UntagQueue(_) => "UntagQueue",
            R::ListQueueTags(_) => "ListQueueTags",
            R::AddPermission(_) => "AddPermission",
            R::RemovePermission(_) => "RemovePermission",
            R::ListDeadLetterSourceQueues(_) => "ListDeadLetterSourceQueues",
            R::StartMessageMoveTask(_) => "StartMessageMoveTask",
            R::CancelMessageMoveTask(_) => "CancelMessageMoveTask",
            R::ListMessageMoveTasks(_) => "ListMessageMoveTasks",
        }
    }

    /// Whether success may have made a message receivable, so waiting receives should look.
    /// How many waiting receives on `queue` this request may give a message to: one per
    /// message sent or released, and on a FIFO queue one per message deleted (a delete lets
    /// its group's next message be delivered). Waking more than that only makes the rest look
    /// and sleep again.
    pub fn receivers_to_wake(&self, queue: &str) -> usize {
        let fifo = queue.ends_with(".fifo");
        match self {
            Request::SendMessage(_) | Request::ChangeMessageVisibility(_) => 1,
            Request::DeleteMessage(_) if fifo => 1,
            Request::SendMessageBatch(input) => input.entries.as_ref().map_or(0, Vec::len),
            Request::ChangeMessageVisibilityBatch(input) => {
                input.entries.as_ref().map_or(0, Vec::len)
            }
            Request::DeleteMessageBatch(input) if fifo => {
                input.entries.as_ref().map_or(0, Vec::len)
            }
            _ => 0,
        }
    }

    /// An `X-Amzn-Trace-Id` request header becomes the sent messages' `AWSTraceHeader`
    /// system attribute, as on AWS, unless a message names its own.
    pub fn add_trace_header(&mut self, trace: &str) {
        let entries: Vec<&mut crate::shapes::MessageEntry> = match self {
            Request::SendMessage(input) => vec![&mut input.message],
            Request::SendMessageBatch(input) => input.entries.iter_mut().flatten().collect(),
            _ => return,
        };
        for entry in entries {
            entry
                .message_system_attributes
                .get_or_insert_with(Default::default)
                .entry("AWSTraceHeader".to_string())
                .or_insert_with(|| crate::shapes::MessageAttributeValue {
                    string_value: Some(trace.to_string()),
                    data_type: Some("String".to_string()),
                    ..Default::default()
                });
        }
    }

    /// Whether the action only reads: safe to answer to a plain GET, and from a server whose
    /// store has failed.
    pub fn is_read_only(&self) -> bool {
        matches!(
            self,
            Request::GetQueueUrl(_)
                | Request::ListQueues(_)
                | Request::GetQueueAttributes(_)
                | Request::ListQueueTags(_)
                | Request::ListDeadLetterSourceQueues(_)
                | Request::ListMessageMoveTasks(_)
        )
    }

    /// Whether the action can make messages receivable, so that the queue it names is worth
    /// looking up for `receivers_to_wake`.
    pub fn may_wake_receivers(&self) -> bool {
        matches!(
            self,
            Request::SendMessage(_)
                | Request::SendMessageBatch(_)
                | Request::ChangeMessageVisibility(_)
                | Request::ChangeMessageVisibilityBatch(_)
                | Request::DeleteMessage(_)
                | Request::DeleteMessageBatch(_)
        )
    }
}

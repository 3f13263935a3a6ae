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

fn parse<T: DeserializeOwned>(value: Value) -> Result<T> {
    serde_json::from_value(value).map_err(|e| ProtocolError::Malformed(e.to_string()))
}

impl Request {
    /// Parses an AWS JSON 1.0 body for `action` (the part after `AmazonSQS.`).
    pub fn from_json(action: &str, body: &[u8]) -> Result<Request> {
        let value = if body.iter().all(u8::is_ascii_whitespace) {
            Value::Object(Default::default())
        } else {
            serde_json::from_slice(body).map_err(|e| ProtocolError::Malformed(e.to_string()))?
        };
        if !value.is_object() {
            return Err(ProtocolError::Malformed(
                "the body must be a JSON object".into(),
            ));
        }
        Request::from_value(action, value)
    }

    /// Builds a request from a JSON-shaped document.
    pub fn from_value(action: &str, value: Value) -> Result<Request> {
        use Request as R;
        Ok(match action {
            "CreateQueue" => R::CreateQueue(parse(value)?),
            "DeleteQueue" => R::DeleteQueue(parse(value)?),
            "GetQueueUrl" => R::GetQueueUrl(parse(value)?),
            "ListQueues" => R::ListQueues(parse(value)?),
            "GetQueueAttributes" => R::GetQueueAttributes(parse(value)?),
            "SetQueueAttributes" => R::SetQueueAttributes(parse(value)?),
            "PurgeQueue" => R::PurgeQueue(parse(value)?),
            "SendMessage" => R::SendMessage(parse(value)?),
            "SendMessageBatch" => R::SendMessageBatch(parse(value)?),
            "ReceiveMessage" => R::ReceiveMessage(parse(value)?),
            "DeleteMessage" => R::DeleteMessage(parse(value)?),
            "DeleteMessageBatch" => R::DeleteMessageBatch(parse(value)?),
            "ChangeMessageVisibility" => R::ChangeMessageVisibility(parse(value)?),
            "ChangeMessageVisibilityBatch" => R::ChangeMessageVisibilityBatch(parse(value)?),
            "TagQueue" => R::TagQueue(parse(value)?),
            "UntagQueue" => R::UntagQueue(parse(value)?),
            "ListQueueTags" => R::ListQueueTags(parse(value)?),
            "AddPermission" => R::AddPermission(parse(value)?),
            "RemovePermission" => R::RemovePermission(parse(value)?),
            "ListDeadLetterSourceQueues" => R::ListDeadLetterSourceQueues(parse(value)?),
            "StartMessageMoveTask" => R::StartMessageMoveTask(parse(value)?),
            "CancelMessageMoveTask" => R::CancelMessageMoveTask(parse(value)?),
            "ListMessageMoveTasks" => R::ListMessageMoveTasks(parse(value)?),
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
    pub fn may_wake_receivers(&self) -> bool {
        matches!(
            self,
            Request::SendMessage(_)
                | Request::SendMessageBatch(_)
                | Request::ChangeMessageVisibility(_)
                | Request::ChangeMessageVisibilityBatch(_)
        )
    }
}

//! Request and response shapes of the SQS API, named and cased as AWS JSON 1.0 sends them.
//!
//! Every member is optional here; required ones are checked by `required` so a missing one is
//! AWS's `MissingParameter`, not a deserializer's message.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{ProtocolError, Result};

pub type StringMap = BTreeMap<String, String>;

/// The queue a request's input names by URL, if its action is about one queue.
pub trait NamesQueue {
    fn queue_url(&self) -> Option<&str>;
}

/// Inputs with a `QueueUrl` member.
macro_rules! names_queue {
    ($($input:ty),+ $(,)?) => {
        $(impl NamesQueue for $input {
            fn queue_url(&self) -> Option<&str> {
                self.queue_url.as_deref()
            }
        })+
    };
}

/// Inputs of actions about no one queue.
macro_rules! names_no_queue {
    ($($input:ty),+ $(,)?) => {
        $(impl NamesQueue for $input {
            fn queue_url(&self) -> Option<&str> {
                None
            }
        })+
    };
}

names_queue!(
    QueueUrlInput,
    GetQueueAttributesInput,
    SetQueueAttributesInput,
    SendMessageInput,
    SendMessageBatchInput,
    ReceiveMessageInput,
    DeleteMessageInput,
    ChangeVisibilityInput,
    HandleBatchInput,
    TagQueueInput,
    UntagQueueInput,
    AddPermissionInput,
    RemovePermissionInput,
    ListDeadLetterSourceQueuesInput,
);
names_no_queue!(
    CreateQueueInput,
    GetQueueUrlInput,
    ListQueuesInput,
    StartMessageMoveTaskInput,
    CancelMessageMoveTaskInput,
    ListMessageMoveTasksInput,
);

/// A required member: present, or `MissingParameter` naming it.
pub fn required<T>(value: Option<T>, name: &'static str) -> Result<T> {
    value.ok_or(ProtocolError::MissingParameter(name))
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct QueueUrlInput {
    pub queue_url: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CreateQueueInput {
    pub queue_name: Option<String>,
    pub attributes: Option<StringMap>,
    #[serde(alias = "tags")]
    pub tags: Option<StringMap>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct GetQueueUrlInput {
    pub queue_name: Option<String>,
    #[serde(rename = "QueueOwnerAWSAccountId")]
    pub queue_owner_aws_account_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListQueuesInput {
    pub queue_name_prefix: Option<String>,
    pub next_token: Option<String>,
    pub max_results: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct GetQueueAttributesInput {
    pub queue_url: Option<String>,
    pub attribute_names: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SetQueueAttributesInput {
    pub queue_url: Option<String>,
    pub attributes: Option<StringMap>,
}

/// A message attribute value on the wire; binary values are base64 in JSON.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct MessageAttributeValue {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub string_value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binary_value: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub string_list_values: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binary_list_values: Vec<String>,
    pub data_type: Option<String>,
}

pub type WireAttributes = BTreeMap<String, MessageAttributeValue>;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SendMessageInput {
    pub queue_url: Option<String>,
    #[serde(flatten)]
    pub message: MessageEntry,
}

/// The members SendMessage and a SendMessageBatch entry share.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct MessageEntry {
    pub id: Option<String>,
    pub message_body: Option<String>,
    pub delay_seconds: Option<i64>,
    pub message_attributes: Option<WireAttributes>,
    pub message_system_attributes: Option<WireAttributes>,
    pub message_deduplication_id: Option<String>,
    pub message_group_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SendMessageBatchInput {
    pub queue_url: Option<String>,
    pub entries: Option<Vec<MessageEntry>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ReceiveMessageInput {
    pub queue_url: Option<String>,
    pub attribute_names: Option<Vec<String>>,
    pub message_system_attribute_names: Option<Vec<String>>,
    pub message_attribute_names: Option<Vec<String>>,
    pub max_number_of_messages: Option<i64>,
    pub visibility_timeout: Option<i64>,
    pub wait_time_seconds: Option<i64>,
    pub receive_request_attempt_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DeleteMessageInput {
    pub queue_url: Option<String>,
    pub receipt_handle: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ChangeVisibilityInput {
    pub queue_url: Option<String>,
    pub receipt_handle: Option<String>,
    pub visibility_timeout: Option<i64>,
}

/// An entry of DeleteMessageBatch or ChangeMessageVisibilityBatch.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct HandleEntry {
    pub id: Option<String>,
    pub receipt_handle: Option<String>,
    pub visibility_timeout: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct HandleBatchInput {
    pub queue_url: Option<String>,
    pub entries: Option<Vec<HandleEntry>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TagQueueInput {
    pub queue_url: Option<String>,
    pub tags: Option<StringMap>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct UntagQueueInput {
    pub queue_url: Option<String>,
    pub tag_keys: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AddPermissionInput {
    pub queue_url: Option<String>,
    pub label: Option<String>,
    #[serde(rename = "AWSAccountIds")]
    pub aws_account_ids: Option<Vec<String>>,
    pub actions: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RemovePermissionInput {
    pub queue_url: Option<String>,
    pub label: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListDeadLetterSourceQueuesInput {
    pub queue_url: Option<String>,
    pub next_token: Option<String>,
    pub max_results: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct StartMessageMoveTaskInput {
    pub source_arn: Option<String>,
    pub destination_arn: Option<String>,
    pub max_number_of_messages_per_second: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CancelMessageMoveTaskInput {
    pub task_handle: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListMessageMoveTasksInput {
    pub source_arn: Option<String>,
    pub max_results: Option<i64>,
}

// ---- outputs ----

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct ReceivedMessage {
    pub message_id: String,
    pub receipt_handle: String,
    #[serde(rename = "MD5OfBody")]
    pub md5_of_body: String,
    pub body: String,
    #[serde(skip_serializing_if = "StringMap::is_empty")]
    pub attributes: StringMap,
    #[serde(
        rename = "MD5OfMessageAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub md5_of_message_attributes: Option<String>,
    #[serde(skip_serializing_if = "WireAttributes::is_empty")]
    pub message_attributes: WireAttributes,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct ReceiveMessageOutput {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<ReceivedMessage>,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SendMessageOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub message_id: String,
    #[serde(rename = "MD5OfMessageBody")]
    pub md5_of_message_body: String,
    #[serde(
        rename = "MD5OfMessageAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub md5_of_message_attributes: Option<String>,
    #[serde(
        rename = "MD5OfMessageSystemAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub md5_of_message_system_attributes: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct MoveTaskResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_handle: Option<String>,
    pub status: String,
    pub source_arn: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination_arn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_number_of_messages_per_second: Option<u32>,
    pub approximate_number_of_messages_moved: u64,
    pub approximate_number_of_messages_to_move: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    pub started_timestamp: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct BatchResultErrorEntry {
    pub id: String,
    pub sender_fault: bool,
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct BatchOutput<T> {
    pub successful: Vec<T>,
    pub failed: Vec<BatchResultErrorEntry>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct IdOnly {
    pub id: String,
}

/// The answer of the actions that answer nothing: `{}`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NoOutput {}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct QueueUrlOutput {
    pub queue_url: String,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListQueuesOutput {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub queue_urls: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// ListDeadLetterSourceQueues' answer: the one member of the SQS API spelt in camel case.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DeadLetterSourcesOutput {
    #[serde(rename = "queueUrls", skip_serializing_if = "Vec::is_empty")]
    pub queue_urls: Vec<String>,
    #[serde(rename = "NextToken", skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// GetQueueAttributes' answer. AWS leaves the map out when nothing asked for has a value (a
/// Policy removed with its last permission).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AttributesOutput {
    #[serde(skip_serializing_if = "StringMap::is_empty")]
    pub attributes: StringMap,
}

/// ListQueueTags' answer, without the map when the queue has no tags.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct TagsOutput {
    #[serde(skip_serializing_if = "StringMap::is_empty")]
    pub tags: StringMap,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct StartMoveTaskOutput {
    pub task_handle: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CancelMoveTaskOutput {
    pub approximate_number_of_messages_moved: u64,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListMoveTasksOutput {
    pub results: Vec<MoveTaskResult>,
}

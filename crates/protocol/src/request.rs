//! The SQS actions as one typed request enum, parsed from an action name and a JSON document.

use serde::de::DeserializeOwned;
use serde_json::Value;

use leasehold_backend::Backend;

use crate::actions::{dead_letters, messages, queues, receive, Context, IntoStep, Step};
use crate::error::{ProtocolError, Result};
use crate::shapes::*;

/// **The one list of actions**: each action's name with its input shape and the function in
/// `actions/` that applies it. The `Request` enum, the parser from an action name,
/// `Request::action`, `Request::queue_url`, `ACTIONS` and the dispatch `Request::apply` are
/// generated from it, so an action is added here and in its own code (its input and output
/// shapes, its function), nowhere else.
macro_rules! actions {
    ($($action:ident($input:ty) => $apply:path),+ $(,)?) => {
        /// One SQS request, protocol-neutral: the query protocol builds the same values.
        #[derive(Debug, Clone)]
        pub enum Request {
            $($action($input)),+
        }

        /// Every action's name, as `X-Amz-Target` and the query protocol's `Action` spell it.
        pub const ACTIONS: &[&str] = &[$(stringify!($action)),+];

        impl Request {
            fn build(action: &str, source: impl Source) -> Result<Request> {
                match action {
                    $(stringify!($action) => Ok(Request::$action(source.parse()?)),)+
                    other => Err(ProtocolError::UnknownOperation(other.to_string())),
                }
            }

            /// The action's name.
            pub fn action(&self) -> &'static str {
                match self {
                    $(Request::$action(_) => stringify!($action)),+
                }
            }

            /// The QueueUrl the request names, if it names one.
            pub fn queue_url(&self) -> Option<&str> {
                match self {
                    $(Request::$action(input) => input.queue_url()),+
                }
            }

            /// Step two: applies the request on `backend`, if the caller may.
            pub async fn apply(self, backend: &dyn Backend, ctx: &Context) -> Result<Step> {
                crate::actions::access::check(backend, ctx, &self).await?;
                match self {
                    $(Request::$action(input) => Ok($apply(backend, ctx, input).await?.into_step()),)+
                }
            }
        }
    };
}

actions! {
    CreateQueue(CreateQueueInput) => queues::create_queue,
    DeleteQueue(QueueUrlInput) => queues::delete_queue,
    GetQueueUrl(GetQueueUrlInput) => queues::get_queue_url,
    ListQueues(ListQueuesInput) => queues::list_queues,
    GetQueueAttributes(GetQueueAttributesInput) => queues::get_queue_attributes,
    SetQueueAttributes(SetQueueAttributesInput) => queues::set_queue_attributes,
    PurgeQueue(QueueUrlInput) => queues::purge_queue,
    SendMessage(SendMessageInput) => messages::send_message,
    SendMessageBatch(SendMessageBatchInput) => messages::send_message_batch,
    ReceiveMessage(ReceiveMessageInput) => receive::receive_message,
    DeleteMessage(DeleteMessageInput) => messages::delete_message,
    DeleteMessageBatch(HandleBatchInput) => messages::delete_message_batch,
    ChangeMessageVisibility(ChangeVisibilityInput) => messages::change_message_visibility,
    ChangeMessageVisibilityBatch(HandleBatchInput) => messages::change_message_visibility_batch,
    TagQueue(TagQueueInput) => queues::tag_queue,
    UntagQueue(UntagQueueInput) => queues::untag_queue,
    ListQueueTags(QueueUrlInput) => queues::list_queue_tags,
    AddPermission(AddPermissionInput) => queues::add_permission,
    RemovePermission(RemovePermissionInput) => queues::remove_permission,
    ListDeadLetterSourceQueues(ListDeadLetterSourceQueuesInput) => dead_letters::list_dead_letter_source_queues,
    StartMessageMoveTask(StartMessageMoveTaskInput) => dead_letters::start_message_move_task,
    CancelMessageMoveTask(CancelMessageMoveTaskInput) => dead_letters::cancel_message_move_task,
    ListMessageMoveTasks(ListMessageMoveTasksInput) => dead_letters::list_message_move_tasks,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_action_parses_and_names_itself() {
        assert_eq!(ACTIONS.len(), 23);
        for action in ACTIONS {
            let request = Request::from_json(action, b"{}").expect("an empty body parses");
            assert_eq!(request.action(), *action);
        }
        assert!(matches!(
            Request::from_json("FlyToTheMoon", b"{}"),
            Err(ProtocolError::UnknownOperation(_))
        ));
    }

    #[test]
    fn exactly_the_actions_about_one_queue_name_its_url() {
        let about_no_one_queue = [
            "CreateQueue",
            "GetQueueUrl",
            "ListQueues",
            "StartMessageMoveTask",
            "CancelMessageMoveTask",
            "ListMessageMoveTasks",
        ];
        for action in ACTIONS {
            let document = serde_json::json!({"QueueUrl": "http://host/000000000000/q"});
            let request = Request::from_value(action, document).expect("parses");
            assert_eq!(
                request.queue_url().is_some(),
                !about_no_one_queue.contains(action),
                "{action}"
            );
        }
    }
}

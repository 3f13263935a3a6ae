//! The SQS actions as one typed request enum, parsed from an action name and a JSON document.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ProtocolError, Result};
use crate::shapes::*;

/// **The one list of actions**: each action's name with its input shape. The `Request` enum,
/// the parser from an action name, `Request::action` and `Request::queue_url` are generated
/// from it, so an action is added here and in its own code (its shape, its arm in
/// `execute.rs`), nowhere else.
macro_rules! actions {
    ($($action:ident($input:ty)),+ $(,)?) => {
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
        }
    };
}

actions! {
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

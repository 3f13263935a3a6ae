//! ReceiveMessage: its members checked once, then attempted as often as the server's long
//! poll looks; each attempt's messages shaped for the wire (MD5s, the attributes asked for)
//! after the backend let go of them.

use std::time::Duration;

use leasehold_backend::Backend;
use leasehold_engine::{AttributeData, Delivery, EngineError, ReceiveRequest};

use super::messages::format_sequence_number;
use super::{checked, Context};
use crate::checksum::{md5_hex, md5_of_attributes};
use crate::convert::{attribute_selected, optional_u32, to_u32, to_wire};
use crate::error::Result;
use crate::shapes::*;
use crate::wire::Answer;

/// How soon a long poll on a queue at its in-flight quota looks again: a delete, which makes
/// room, wakes no waiting receive.
const AT_QUOTA_LOOK_AGAIN: Duration = Duration::from_millis(100);

/// A checked ReceiveMessage, ready to be attempted.
pub struct Receive {
    queue: String,
    request: ReceiveRequest,
    /// The wait the request asked for; None waits the queue's default.
    wait_s: Option<u32>,
    /// The system attributes asked for.
    system: Vec<String>,
    /// The message attributes asked for.
    selectors: Vec<String>,
    sender_id: String,
}

/// What one attempt found.
pub enum Attempt {
    /// Messages, shaped for the wire.
    Taken(Answer),
    /// None. `wait` is how long the receive waits in all; `look_again_in` when a delay or a
    /// lease of the queue ends by itself.
    Empty {
        wait: Duration,
        look_again_in: Option<Duration>,
    },
}

pub(crate) async fn receive_message(
    backend: &dyn Backend,
    ctx: &Context,
    input: ReceiveMessageInput,
) -> Result<Receive> {
    let queue = ctx.queue(backend, input.queue_url)?;
    let request = (|| {
        let max = optional_u32(
            input.max_number_of_messages,
            "MaxNumberOfMessages",
            "Must be between 1 and 10, if provided.",
        )?;
        let visibility_s = optional_u32(
            input.visibility_timeout,
            "VisibilityTimeout",
            "Must be >= 0 and <= 43200, if provided.",
        )?;
        let wait_s = input.wait_time_seconds.map(wait_seconds).transpose()?;
        let request = ReceiveRequest {
            max_messages: max.unwrap_or(1),
            visibility_s,
            attempt_id: input.receive_request_attempt_id,
        };
        Ok((request, wait_s))
    })();
    let (request, wait_s) = checked(backend, &queue, request).await?;
    let system = [input.attribute_names, input.message_system_attribute_names]
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    Ok(Receive {
        queue,
        request,
        wait_s,
        system,
        selectors: input.message_attribute_names.unwrap_or_default(),
        sender_id: backend.naming().account_id.clone(),
    })
}

fn wait_seconds(asked: i64) -> Result<u32> {
    let reason = "Must be >= 0 and <= 20, if provided.";
    let wait = to_u32(asked, "WaitTimeSeconds", reason)?;
    if wait > leasehold_engine::MAX_WAIT_TIME_S {
        return Err(EngineError::out_of_range("WaitTimeSeconds", wait, reason).into());
    }
    Ok(wait)
}

impl Receive {
    /// The key of the queue it receives from.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The most messages it asks for.
    pub fn max_messages(&self) -> u32 {
        self.request.max_messages
    }

    /// One attempt, not waiting.
    pub async fn attempt(&self, backend: &dyn Backend) -> Result<Attempt> {
        let received = backend.receive(&self.queue, self.request.clone()).await?;
        if received.deliveries.is_empty() {
            let wait_s = self.wait_s.unwrap_or(received.queue_wait_s);
            if received.over_limit && wait_s == 0 {
                return Err(EngineError::OverLimit(
                    "the queue holds its most messages in flight (received, not yet deleted): delete some first".into(),
                )
                .into());
            }
            let mut look_again_in = received.next_due_in_ms.map(Duration::from_millis);
            if received.over_limit {
                // A delete makes room without waking anybody: look again soon.
                look_again_in = Some(
                    look_again_in.map_or(AT_QUOTA_LOOK_AGAIN, |due| due.min(AT_QUOTA_LOOK_AGAIN)),
                );
            }
            return Ok(Attempt::Empty {
                wait: Duration::from_secs(wait_s.into()),
                look_again_in,
            });
        }
        Ok(Attempt::Taken(Answer::Received(
            self.shape(received.deliveries),
        )))
    }

    /// The answer of a receive that found nothing in all its wait, counted for the lease
    /// report.
    pub async fn nothing(&self, backend: &dyn Backend) -> Answer {
        backend.record_empty_receive(&self.queue).await;
        Answer::Received(ReceiveMessageOutput::default())
    }

    fn shape(&self, deliveries: Vec<Delivery>) -> ReceiveMessageOutput {
        let messages = deliveries.into_iter().map(|d| self.shape_one(d)).collect();
        ReceiveMessageOutput { messages }
    }

    fn shape_one(&self, d: Delivery) -> ReceivedMessage {
        let wants = |name: &str| self.system.iter().any(|s| s == "All" || s == name);
        let mut attributes = StringMap::new();
        let mut put = |name: &str, value: String| {
            if wants(name) {
                attributes.insert(name.to_string(), value);
            }
        };
        put("SenderId", self.sender_id.clone());
        put("SentTimestamp", d.sent_ms.to_string());
        put("ApproximateReceiveCount", d.receive_count.to_string());
        put(
            "ApproximateFirstReceiveTimestamp",
            d.first_receive_ms.to_string(),
        );
        if let Some(group) = &d.group_id {
            put("MessageGroupId", group.to_string());
        }
        if let Some(dedup) = &d.deduplication_id {
            put("MessageDeduplicationId", dedup.to_string());
        }
        if let Some(seq) = d.sequence_number {
            put("SequenceNumber", format_sequence_number(seq));
        }
        if let Some(source) = &d.dead_letter_source_arn {
            put("DeadLetterQueueSourceArn", source.to_string());
        }
        if let Some(trace) = d
            .system_attributes
            .as_ref()
            .and_then(|s| s.get("AWSTraceHeader"))
        {
            if let AttributeData::Text(text) = &trace.data {
                put("AWSTraceHeader", text.clone());
            }
        }
        let selected: Vec<_> = d
            .attributes
            .iter()
            .flat_map(|a| a.iter())
            .filter(|(name, _)| attribute_selected(&self.selectors, name))
            .collect();
        let md5_of_message_attributes =
            (!selected.is_empty()).then(|| md5_of_attributes(selected.iter().copied()));
        ReceivedMessage {
            message_id: d.message_id,
            receipt_handle: d.receipt_handle,
            md5_of_body: md5_hex(d.body.as_bytes()),
            body: d.body.to_string(),
            attributes,
            md5_of_message_attributes,
            message_attributes: selected
                .into_iter()
                .map(|(n, a)| (n.clone(), to_wire(a)))
                .collect(),
        }
    }
}

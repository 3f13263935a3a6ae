//! Message operations: send, receive (with dead-lettering), delete, change visibility.

use std::sync::Arc;

use super::Engine;
use crate::error::{EngineError, Result};
use crate::message::{ContentKey, Delivery, NewMessage};
use crate::queue::{DeleteOutcome, ReceiveParams, Sent};
use crate::settings::{QueueSettings, MAX_MESSAGE_SIZE, MAX_VISIBILITY_TIMEOUT_S};

/// What ReceiveMessage asks the engine for.
#[derive(Clone, Debug, Default)]
pub struct ReceiveRequest {
    /// 1..=10.
    pub max_messages: u32,
    /// Overrides the queue's VisibilityTimeout for this receive.
    pub visibility_s: Option<u32>,
    /// FIFO only: retrying with the same id returns the same messages.
    pub attempt_id: Option<String>,
}

impl ReceiveRequest {
    pub fn up_to(max_messages: u32) -> Self {
        ReceiveRequest {
            max_messages,
            ..ReceiveRequest::default()
        }
    }
}

impl ReceiveRequest {
    /// AWS's ranges for what a receive asks, checked before anything else (any backend
    /// checks them the same way).
    pub fn check(&self) -> Result<()> {
        if !(1..=10).contains(&self.max_messages) {
            return Err(EngineError::out_of_range(
                "MaxNumberOfMessages",
                self.max_messages,
                "Must be between 1 and 10, if provided.",
            ));
        }
        if let Some(v) = self.visibility_s.filter(|v| *v > MAX_VISIBILITY_TIMEOUT_S) {
            return Err(EngineError::out_of_range(
                "VisibilityTimeout",
                v,
                "Must be >= 0 and <= 43200, if provided.",
            ));
        }
        Ok(())
    }
}

/// What fails a whole SendMessageBatch before any entry is sent: its total is held to SQS's
/// fixed limit, whatever the queue's MaximumMessageSize; on a FIFO queue an entry without its
/// group (or without a deduplication id the queue cannot derive) fails the batch, as AWS does.
pub fn check_batch(settings: &QueueSettings, messages: &[NewMessage]) -> Result<()> {
    let total: usize = messages.iter().map(NewMessage::size).sum();
    if total > MAX_MESSAGE_SIZE as usize {
        return Err(EngineError::BatchRequestTooLong(
            MAX_MESSAGE_SIZE as usize,
            total,
        ));
    }
    if settings.fifo {
        for message in messages {
            message.check_fifo_ids(settings).map_err(|e| match e {
                EngineError::MissingParameter(param) => EngineError::InvalidParameterValue(
                    format!("The request must contain the parameter {param}."),
                ),
                other => other,
            })?;
        }
    }
    Ok(())
}

impl Engine {
    /// SendMessage: validates against the queue's rules, then stores.
    pub fn send(&mut self, name: &str, message: NewMessage) -> Result<Sent> {
        message.validate(&self.queue(name)?.meta.settings)?;
        let (queue, now) = self.queue_mut(name)?;
        Ok(queue.send(now, message))
    }

    /// SendMessageBatch: `check_batch`, then each entry is checked on its own (one too big
    /// for the queue fails alone, in `Failed`), as AWS does.
    pub fn send_batch(
        &mut self,
        name: &str,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<Result<Sent>>> {
        check_batch(&self.queue(name)?.meta.settings, &messages)?;
        Ok(messages.into_iter().map(|m| self.send(name, m)).collect())
    }

    /// ReceiveMessage without waiting: leases what is ready now. A message already received
    /// maxReceiveCount times moves to the dead-letter queue instead of being returned.
    pub fn receive(&mut self, name: &str, request: &ReceiveRequest) -> Result<Vec<Delivery>> {
        request.check()?;
        let dead_letter_queue = self.live_dead_letter_target(name)?;
        let (queue, now) = self.queue_now(name)?;
        let params = ReceiveParams {
            max_messages: request.max_messages as usize,
            visibility_s: request
                .visibility_s
                .unwrap_or(queue.meta.settings.visibility_timeout_s),
            max_receive_count: dead_letter_queue.as_ref().map(|(_, max)| *max),
            attempt_id: request.attempt_id.as_deref(),
        };
        let (deliveries, dead) = queue.receive(now, params);
        if !deliveries.is_empty() || !dead.is_empty() {
            queue.touch();
        }
        if let (Some((target, _)), false) = (dead_letter_queue, dead.is_empty()) {
            // Only a receive that dead-letters something pays for naming its source.
            let source_arn: Arc<str> = Arc::from(self.queue_arn(name).as_str());
            let source_id = self.queue(name)?.meta.id;
            for (key, message) in dead {
                let stored = message.content.is_none();
                let (dlq, _) = self.queue_mut(&target)?;
                let moved = dlq.accept_dead_letter(now, key.sent_ms, message, &source_arn);
                let to = dlq.content_key(moved);
                let from = ContentKey {
                    queue_id: source_id,
                    key,
                };
                self.content_moved(stored, from, to);
            }
        }
        Ok(deliveries)
    }

    /// Counts a ReceiveMessage request that returned nothing. Kept apart from `receive`
    /// because a long poll tries several times but is one request.
    /// The counter is durable, so the queue's record is marked changed through the same
    /// path as every other command's.
    pub fn record_empty_receive(&mut self, name: &str) {
        if let Ok((queue, _)) = self.queue_mut(name) {
            queue.meta.stats.empty_receives += 1;
        }
    }

    pub fn delete_message(&mut self, name: &str, handle: &str) -> Result<DeleteOutcome> {
        let mode = self.config.lease_mode;
        let receipt = self.open_receipt(self.queue(name)?, handle)?;
        let (queue, now) = self.queue_mut(name)?;
        queue.delete(now, &receipt, handle, mode)
    }

    pub fn change_visibility(&mut self, name: &str, handle: &str, timeout_s: u32) -> Result<()> {
        let mode = self.config.lease_mode;
        let receipt = self.open_receipt(self.queue(name)?, handle)?;
        let (queue, now) = self.queue_mut(name)?;
        queue.change_visibility(now, &receipt, handle, timeout_s, mode)
    }
}

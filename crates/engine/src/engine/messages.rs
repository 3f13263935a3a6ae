//! Message operations: send, receive (with dead-lettering), delete, change visibility.

use super::{Engine, Locked};
use crate::error::{EngineError, Result};
use crate::handout::{Handout, Sent};
use crate::message::{Delivery, NewMessage};
use crate::queue::DeleteOutcome;
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
pub fn check_batch<'m>(
    settings: &QueueSettings,
    messages: impl IntoIterator<Item = &'m NewMessage> + Clone,
) -> Result<()> {
    let total: usize = messages.clone().into_iter().map(NewMessage::size).sum();
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
    /// Runs a command on one queue through `Locked` (the same code the shared path runs),
    /// and keeps what it changed for `take_changes`. `receiving`: a receive of up to so many
    /// messages (`lock_for_receive`).
    pub(super) fn on_queue<T>(
        &mut self,
        name: &str,
        receiving: Option<u32>,
        command: impl FnOnce(&mut Locked) -> Result<T>,
    ) -> Result<T> {
        let (value, changes) = {
            let mut locked = match receiving {
                Some(max_messages) => self.lock_for_receive(name, max_messages)?,
                None => self.lock_queue(name)?,
            };
            let value = command(&mut locked);
            (value, locked.take_changes())
        };
        self.pending.extend(changes);
        value
    }

    /// SendMessage: see `Locked::send`.
    pub fn send(&mut self, name: &str, message: NewMessage) -> Result<Sent> {
        let sent = self.on_queue(name, None, |q| q.send(message.checked()))?;
        Ok(sent.sent(&self.sealer))
    }

    /// SendMessageBatch: see `Locked::send_batch`.
    pub fn send_batch(
        &mut self,
        name: &str,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<Result<Sent>>> {
        let checked = messages.into_iter().map(NewMessage::checked).collect();
        let accepted = self.on_queue(name, None, |q| q.send_batch(checked))?;
        let sealer = &self.sealer;
        Ok(accepted
            .into_iter()
            .map(|a| a.map(|a| a.sent(sealer)))
            .collect())
    }

    /// ReceiveMessage without waiting: see `Locked::receive`.
    pub fn receive(&mut self, name: &str, request: &ReceiveRequest) -> Result<Vec<Delivery>> {
        self.on_queue(name, Some(request.max_messages), |q| q.receive(request))
            .map(Handout::finish)
    }

    /// See `Locked::record_empty_receive`.
    pub fn record_empty_receive(&mut self, name: &str) {
        let _ = self.on_queue(name, None, |q| {
            q.record_empty_receive();
            Ok(())
        });
    }

    pub fn delete_message(&mut self, name: &str, handle: &str) -> Result<DeleteOutcome> {
        self.on_queue(name, None, |q| q.delete(handle))
    }

    pub fn change_visibility(&mut self, name: &str, handle: &str, timeout_s: u32) -> Result<()> {
        self.on_queue(name, None, |q| q.change_visibility(handle, timeout_s))
    }
}

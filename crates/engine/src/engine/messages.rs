//! Message operations: send, receive (with dead-lettering), delete, change visibility.

use super::{Engine, Sink};
use crate::error::{EngineError, Result};
use crate::handout::Sent;
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
    /// Runs a command over `&Engine` (the same code the shared path runs), keeping what it
    /// changed, stripe by stripe, for `take_changes`.
    pub(super) fn with_sink<T>(&mut self, command: impl FnOnce(&Engine, Sink) -> T) -> T {
        let mut changes = Vec::new();
        let value = command(self, &mut |c| changes.extend(c));
        self.pending.extend(changes);
        value
    }

    /// SendMessage: see `Locked::send`.
    pub fn send(&mut self, name: &str, message: NewMessage) -> Result<Sent> {
        let sent = self
            .with_sink(|e, sink| e.on_stripe(name, None, sink, |q| q.send(message.checked())))??;
        Ok(sent.sent(&self.sealer))
    }

    /// SendMessageBatch: see `Locked::send_batch`.
    pub fn send_batch(
        &mut self,
        name: &str,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<Result<Sent>>> {
        let checked = messages.into_iter().map(NewMessage::checked).collect();
        let accepted =
            self.with_sink(|e, sink| e.on_stripe(name, None, sink, |q| q.send_batch(checked)))??;
        let sealer = &self.sealer;
        Ok(accepted
            .into_iter()
            .map(|a| a.map(|a| a.sent(sealer)))
            .collect())
    }

    /// ReceiveMessage without waiting: see `Engine::receive_striped`.
    pub fn receive(&mut self, name: &str, request: &ReceiveRequest) -> Result<Vec<Delivery>> {
        let received = self.with_sink(|e, sink| e.receive_striped(name, request, sink))?;
        Ok(received.handout.finish())
    }

    /// See `Locked::record_empty_receive`.
    pub fn record_empty_receive(&mut self, name: &str) {
        let _ =
            self.with_sink(|e, sink| e.on_stripe(name, None, sink, |q| q.record_empty_receive()));
    }

    pub fn delete_message(&mut self, name: &str, handle: &str) -> Result<DeleteOutcome> {
        let opened = vec![self.sealer.open(handle)];
        self.with_sink(|e, sink| {
            e.on_handles(name, opened, sink, |q, _, receipt| {
                q.delete_opened(handle, receipt)
            })
        })?
        .remove(0)
    }

    pub fn change_visibility(&mut self, name: &str, handle: &str, timeout_s: u32) -> Result<()> {
        let opened = vec![self.sealer.open(handle)];
        self.with_sink(|e, sink| {
            e.on_handles(name, opened, sink, |q, _, receipt| {
                q.change_visibility_opened(handle, receipt, timeout_s)
            })
        })?
        .remove(0)
    }
}

//! Sending, deleting and changing the visibility of messages (receiving is `receive.rs`).

use leasehold_backend::Backend;
use leasehold_engine::{EngineError, NewMessage, Sent, MAX_VISIBILITY_TIMEOUT_S};

use super::batch::{only, open, sort};
use super::{checked, Context};
use crate::checksum::{md5_hex, md5_of_map};
use crate::convert::{from_wire, optional_u32, to_u32};
use crate::error::Result;
use crate::shapes::*;

pub(crate) async fn send_message(
    backend: &dyn Backend,
    ctx: &Context,
    input: SendMessageInput,
) -> Result<SendMessageOutput> {
    let queue = ctx.queue(backend, input.queue_url)?;
    let (message, checksums) = checked(backend, &queue, prepare(input.message)).await?;
    let sent = backend.send(&queue, message).await?;
    Ok(checksums.answer(None, sent))
}

pub(crate) async fn send_message_batch(
    backend: &dyn Backend,
    ctx: &Context,
    input: SendMessageBatchInput,
) -> Result<BatchOutput<SendMessageOutput>> {
    let entry_name = "SendMessageBatchRequestEntry";
    let (queue, entries) = open(backend, ctx, input.queue_url, input.entries, entry_name).await?;
    let (passed, outline) = sort(entries, prepare);
    let (messages, checksums): (Vec<_>, Vec<_>) = passed.into_iter().unzip();
    // Each result with the checksums of its own entry, whether or not the entries before it
    // were sent.
    let results = backend.send_batch(&queue, messages).await?;
    let results = results
        .into_iter()
        .zip(checksums)
        .map(|(result, sums)| result.map(|sent| (sent, sums)));
    Ok(outline.answer(results, |id, (sent, sums)| sums.answer(Some(id), sent)))
}

pub(crate) async fn delete_message(
    backend: &dyn Backend,
    ctx: &Context,
    input: DeleteMessageInput,
) -> Result<NoOutput> {
    let queue = ctx.queue(backend, input.queue_url)?;
    let handle = required(input.receipt_handle, "ReceiptHandle");
    let handle = checked(backend, &queue, handle).await?;
    only(backend.delete(&queue, vec![handle]).await?)?;
    Ok(NoOutput {})
}

pub(crate) async fn delete_message_batch(
    backend: &dyn Backend,
    ctx: &Context,
    input: HandleBatchInput,
) -> Result<BatchOutput<IdOnly>> {
    let entry_name = "DeleteMessageBatchRequestEntry";
    let (queue, entries) = open(backend, ctx, input.queue_url, input.entries, entry_name).await?;
    let (handles, outline) = sort(entries, |e| required(e.receipt_handle, "ReceiptHandle"));
    let results = backend.delete(&queue, handles).await?;
    Ok(outline.answer(results, |id, ()| IdOnly { id }))
}

pub(crate) async fn change_message_visibility(
    backend: &dyn Backend,
    ctx: &Context,
    input: ChangeVisibilityInput,
) -> Result<NoOutput> {
    let queue = ctx.queue(backend, input.queue_url)?;
    let change = visibility_change(input.receipt_handle, input.visibility_timeout);
    let change = checked(backend, &queue, change).await?;
    only(backend.change_visibility(&queue, vec![change]).await?)?;
    Ok(NoOutput {})
}

pub(crate) async fn change_message_visibility_batch(
    backend: &dyn Backend,
    ctx: &Context,
    input: HandleBatchInput,
) -> Result<BatchOutput<IdOnly>> {
    let entry_name = "ChangeMessageVisibilityBatchRequestEntry";
    let (queue, entries) = open(backend, ctx, input.queue_url, input.entries, entry_name).await?;
    let (changes, outline) = sort(entries, |e| {
        visibility_change(e.receipt_handle, e.visibility_timeout)
    });
    let results = backend.change_visibility(&queue, changes).await?;
    Ok(outline.answer(results, |id, ()| IdOnly { id }))
}

/// A receipt handle with its new visibility timeout, both required.
fn visibility_change(handle: Option<String>, timeout: Option<i64>) -> Result<(String, u32)> {
    let handle = required(handle, "ReceiptHandle")?;
    let timeout = visibility(required(timeout, "VisibilityTimeout")?)?;
    Ok((handle, timeout))
}

fn visibility(value: i64) -> Result<u32> {
    let reason = "VisibilityTimeout must be an integer between 0 and 43200";
    let v = to_u32(value, "VisibilityTimeout", reason)?;
    if v > MAX_VISIBILITY_TIMEOUT_S {
        return Err(EngineError::out_of_range("VisibilityTimeout", v, reason).into());
    }
    Ok(v)
}

/// A message converted from the wire, with the checksums its answer carries: taken before
/// the message goes to the backend, so no backend lock is held while MD5s are computed.
fn prepare(entry: MessageEntry) -> Result<(NewMessage, Checksums)> {
    let message = new_message(entry)?;
    let checksums = Checksums::of(&message);
    Ok((message, checksums))
}

fn new_message(entry: MessageEntry) -> Result<NewMessage> {
    let body = entry.message_body.unwrap_or_default();
    let delay_s = optional_u32(
        entry.delay_seconds,
        "DelaySeconds",
        "DelaySeconds must be >= 0 and <= 900.",
    )?;
    Ok(NewMessage {
        body,
        attributes: from_wire(&entry.message_attributes.unwrap_or_default())?,
        system_attributes: from_wire(&entry.message_system_attributes.unwrap_or_default())?,
        delay_s,
        group_id: entry.message_group_id,
        deduplication_id: entry.message_deduplication_id,
    })
}

/// The checksums a send answers with.
struct Checksums {
    body: String,
    attributes: Option<String>,
    system_attributes: Option<String>,
}

impl Checksums {
    fn of(message: &NewMessage) -> Checksums {
        Checksums {
            body: md5_hex(message.body.as_bytes()),
            attributes: md5_of_map(&message.attributes),
            system_attributes: md5_of_map(&message.system_attributes),
        }
    }

    fn answer(self, id: Option<String>, sent: Sent) -> SendMessageOutput {
        SendMessageOutput {
            id,
            message_id: sent.message_id,
            sequence_number: sent.sequence_number.map(format_sequence_number),
            md5_of_message_body: self.body,
            md5_of_message_attributes: self.attributes,
            md5_of_message_system_attributes: self.system_attributes,
        }
    }
}

/// AWS's sequence numbers are 20-digit decimal strings, increasing per queue, with no
/// leading zeros ("18849496460467696128"): ours, offset by 10^19 (a queue would need 8 x 10^18
/// messages to run past u64).
pub(super) fn format_sequence_number(seq: u64) -> String {
    const AWS_LIKE: u64 = 10_000_000_000_000_000_000;
    AWS_LIKE.saturating_add(seq).to_string()
}

//! Runs a parsed request against the engine and shapes the answer as AWS does.

use std::collections::HashSet;

use leasehold_engine::{
    Delivery, Engine, EngineError, NewMessage, QueuePage, ReceiveRequest, Sent,
    MAX_VISIBILITY_TIMEOUT_S,
};
use serde::Serialize;
use serde_json::{json, Value};

use crate::checksum::{md5_hex, md5_of_attributes, md5_of_map};
use crate::convert::{attribute_selected, from_wire, queue_name, queue_url, to_u32, to_wire};
use crate::error::{wire_code, ProtocolError, Result};
use crate::request::Request;
use crate::shapes::*;

/// What the request needs to know about how it arrived.
#[derive(Debug, Clone)]
pub struct Context {
    /// The `Host` the client addressed, so queue URLs point back at it.
    pub host: String,
    /// The region the request was made in (its SigV4 credential scope, else its host); None
    /// for the engine's own.
    pub region: Option<String>,
}

impl Context {
    /// The key of the queue a QueueUrl names, for this request.
    pub fn queue(&self, engine: &Engine, url: &Option<String>) -> Result<String> {
        queue_name(engine, self.region.as_deref(), &required(url, "QueueUrl")?)
    }

    /// The key of queue `name` in this request's region.
    fn queue_named(&self, engine: &Engine, name: &str) -> String {
        engine.queue_key(self.region.as_deref(), name)
    }
}

fn to_value(output: impl Serialize) -> Value {
    serde_json::to_value(output).expect("response shapes always serialise")
}

fn pairs(map: Option<StringMap>) -> Vec<(String, String)> {
    map.unwrap_or_default().into_iter().collect()
}

/// Runs every action except the waiting part of ReceiveMessage (see [`receive`]).
pub fn execute(engine: &mut Engine, ctx: &Context, request: &Request) -> Result<Value> {
    execute_prepared(engine, ctx, request, Prepared::of(request))
}

/// The part of a send that needs no engine: each message converted from the wire, with the
/// checksums its answer carries. A server prepares it before taking the engine's lock, so
/// that the MD5s are not computed while every other request waits. Empty for other actions.
pub struct Prepared(Vec<Result<(NewMessage, Checksums)>>);

impl Prepared {
    pub fn of(request: &Request) -> Prepared {
        let entries: &[MessageEntry] = match request {
            Request::SendMessage(i) => std::slice::from_ref(&i.message),
            Request::SendMessageBatch(i) => i.entries.as_deref().unwrap_or_default(),
            _ => &[],
        };
        // A batch of more than ten is refused before any entry is looked at: no work for it.
        if entries.len() > MAX_BATCH_ENTRIES {
            return Prepared(Vec::new());
        }
        let prepare = |entry| {
            let message = new_message(entry)?;
            let checksums = Checksums::of(&message);
            Ok((message, checksums))
        };
        Prepared(entries.iter().map(prepare).collect())
    }
}

/// [`execute`], with its sends already prepared (see [`Prepared`]).
pub fn execute_prepared(
    engine: &mut Engine,
    ctx: &Context,
    request: &Request,
    prepared: Prepared,
) -> Result<Value> {
    use Request as R;
    let name = |engine: &Engine, url: &Option<String>| ctx.queue(engine, url);
    Ok(match request {
        R::CreateQueue(i) => {
            let queue = ctx.queue_named(engine, &required(&i.queue_name, "QueueName")?);
            engine.create_queue(&queue, &pairs(i.attributes.clone()), &pairs(i.tags.clone()))?;
            json!({ "QueueUrl": queue_url(engine, &ctx.host, &queue) })
        }
        R::GetQueueUrl(i) => {
            let queue = ctx.queue_named(engine, &required(&i.queue_name, "QueueName")?);
            engine.queue_exists(&queue)?;
            json!({ "QueueUrl": queue_url(engine, &ctx.host, &queue) })
        }
        R::DeleteQueue(i) => {
            engine.delete_queue(&name(engine, &i.queue_url)?)?;
            json!({})
        }
        R::ListQueues(i) => {
            let max = max_results(i.max_results)?;
            let page = engine.list_queues(
                ctx.region.as_deref(),
                i.queue_name_prefix.as_deref(),
                max,
                i.next_token.as_deref().filter(|t| !t.is_empty()),
            )?;
            url_page(engine, ctx, page, "QueueUrls")
        }
        R::ListDeadLetterSourceQueues(i) => {
            let queue = name(engine, &i.queue_url)?;
            let max = max_results(i.max_results)?;
            let page = engine.list_dead_letter_source_queues(
                &queue,
                max,
                i.next_token.as_deref().filter(|t| !t.is_empty()),
            )?;
            // The one member of the SQS API spelt in camel case.
            url_page(engine, ctx, page, "queueUrls")
        }
        R::AddPermission(i) => {
            let queue = name(engine, &i.queue_url)?;
            engine.add_permission(
                &queue,
                &required(&i.label, "Label")?,
                &required(&i.aws_account_ids, "AWSAccountIds")?,
                &required(&i.actions, "Actions")?,
            )?;
            json!({})
        }
        R::RemovePermission(i) => {
            let queue = name(engine, &i.queue_url)?;
            engine.remove_permission(&queue, &required(&i.label, "Label")?)?;
            json!({})
        }
        R::StartMessageMoveTask(i) => {
            let rate = match i.max_number_of_messages_per_second {
                None => None,
                Some(r) => Some(to_u32(
                    r,
                    "MaxNumberOfMessagesPerSecond",
                    "Must be between 1 and 500.",
                )?),
            };
            let handle = engine.start_move_task(
                &required(&i.source_arn, "SourceArn")?,
                i.destination_arn.as_deref(),
                rate,
            )?;
            json!({ "TaskHandle": handle })
        }
        R::CancelMessageMoveTask(i) => {
            let moved = engine.cancel_move_task(&required(&i.task_handle, "TaskHandle")?)?;
            json!({ "ApproximateNumberOfMessagesMoved": moved })
        }
        R::ListMessageMoveTasks(i) => {
            let max = match i.max_results {
                None => None,
                Some(m) => Some(to_u32(
                    m,
                    "MaxResults",
                    "You must enter a number that's between 1 and 10.",
                )?),
            };
            let tasks = engine.list_move_tasks(&required(&i.source_arn, "SourceArn")?, max)?;
            let results: Vec<MoveTaskResult> = tasks
                .into_iter()
                .map(|t| MoveTaskResult {
                    task_handle: t.task_handle,
                    status: t.status.as_str().to_string(),
                    source_arn: t.source_arn,
                    destination_arn: t.destination_arn,
                    max_number_of_messages_per_second: t.max_per_second,
                    approximate_number_of_messages_moved: t.moved,
                    approximate_number_of_messages_to_move: t.to_move,
                    failure_reason: t.failure_reason,
                    started_timestamp: t.started_ms,
                })
                .collect();
            json!({ "Results": results })
        }
        R::GetQueueAttributes(i) => {
            let queue = name(engine, &i.queue_url)?;
            let names = i.attribute_names.clone().unwrap_or_default();
            let attributes: StringMap =
                engine.get_attributes(&queue, &names)?.into_iter().collect();
            // AWS leaves the map out when nothing asked for has a value (a Policy removed
            // with its last permission).
            if attributes.is_empty() {
                json!({})
            } else {
                json!({ "Attributes": attributes })
            }
        }
        R::SetQueueAttributes(i) => {
            let queue = name(engine, &i.queue_url)?;
            engine.set_attributes(&queue, &pairs(i.attributes.clone()))?;
            json!({})
        }
        R::PurgeQueue(i) => {
            engine.purge(&name(engine, &i.queue_url)?)?;
            json!({})
        }
        R::SendMessage(i) => {
            let queue = name(engine, &i.queue_url)?;
            to_value(send_one(engine, &queue, prepared)?)
        }
        R::SendMessageBatch(i) => {
            let queue = name(engine, &i.queue_url)?;
            send_batch(engine, &queue, i.entries.as_deref(), prepared)?
        }
        R::ReceiveMessage(i) => to_value(receive(engine, ctx, i)?),
        R::DeleteMessage(i) => {
            let queue = name(engine, &i.queue_url)?;
            engine.delete_message(&queue, &required(&i.receipt_handle, "ReceiptHandle")?)?;
            json!({})
        }
        R::DeleteMessageBatch(i) => {
            let queue = name(engine, &i.queue_url)?;
            handle_batch(
                i.entries.as_deref(),
                "DeleteMessageBatchRequestEntry",
                |entry| {
                    let handle = required(&entry.receipt_handle, "ReceiptHandle")?;
                    engine.delete_message(&queue, &handle)?;
                    Ok(())
                },
            )?
        }
        R::ChangeMessageVisibility(i) => {
            let queue = name(engine, &i.queue_url)?;
            let handle = required(&i.receipt_handle, "ReceiptHandle")?;
            let timeout = visibility(required(&i.visibility_timeout, "VisibilityTimeout")?)?;
            engine.change_visibility(&queue, &handle, timeout)?;
            json!({})
        }
        R::ChangeMessageVisibilityBatch(i) => {
            let queue = name(engine, &i.queue_url)?;
            handle_batch(
                i.entries.as_deref(),
                "ChangeMessageVisibilityBatchRequestEntry",
                |entry| {
                    let handle = required(&entry.receipt_handle, "ReceiptHandle")?;
                    let timeout =
                        visibility(required(&entry.visibility_timeout, "VisibilityTimeout")?)?;
                    engine.change_visibility(&queue, &handle, timeout)?;
                    Ok(())
                },
            )?
        }
        R::TagQueue(i) => {
            let queue = name(engine, &i.queue_url)?;
            let tags = pairs(Some(required(&i.tags, "Tags")?));
            engine.tag_queue(&queue, &tags)?;
            json!({})
        }
        R::UntagQueue(i) => {
            let queue = name(engine, &i.queue_url)?;
            engine.untag_queue(&queue, &required(&i.tag_keys, "TagKeys")?)?;
            json!({})
        }
        R::ListQueueTags(i) => {
            let tags = engine.list_tags(&name(engine, &i.queue_url)?)?;
            if tags.is_empty() {
                json!({})
            } else {
                json!({ "Tags": tags })
            }
        }
    })
}

fn max_results(value: Option<i64>) -> Result<Option<usize>> {
    value
        .map(|n| {
            to_u32(
                n,
                "MaxResults",
                "MaxResults must be an integer between 1 and 1000.",
            )
            .map(|n| n as usize)
        })
        .transpose()
}

/// A page of queue URLs under `member`, with NextToken when there is more.
fn url_page(engine: &Engine, ctx: &Context, page: QueuePage, member: &str) -> Value {
    let urls: Vec<String> = page
        .names
        .iter()
        .map(|n| queue_url(engine, &ctx.host, n))
        .collect();
    let mut out = json!({});
    if !urls.is_empty() {
        out[member] = json!(urls);
    }
    if let Some(token) = page.next_token {
        out["NextToken"] = json!(token);
    }
    out
}

fn visibility(value: i64) -> Result<u32> {
    let reason = "VisibilityTimeout must be an integer between 0 and 43200";
    let v = to_u32(value, "VisibilityTimeout", reason)?;
    if v > MAX_VISIBILITY_TIMEOUT_S {
        return Err(EngineError::out_of_range("VisibilityTimeout", v, reason).into());
    }
    Ok(v)
}

fn new_message(entry: &MessageEntry) -> Result<NewMessage> {
    let body = entry.message_body.clone().unwrap_or_default();
    let delay_s = match entry.delay_seconds {
        None => None,
        Some(d) => Some(to_u32(
            d,
            "DelaySeconds",
            "DelaySeconds must be >= 0 and <= 900.",
        )?),
    };
    Ok(NewMessage {
        body,
        attributes: from_wire(&entry.message_attributes.clone().unwrap_or_default())?,
        system_attributes: from_wire(&entry.message_system_attributes.clone().unwrap_or_default())?,
        delay_s,
        group_id: entry.message_group_id.clone(),
        deduplication_id: entry.message_deduplication_id.clone(),
    })
}

/// The checksums a send answers with, taken before the message moves into the engine.
pub struct Checksums {
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

fn send_one(engine: &mut Engine, queue: &str, prepared: Prepared) -> Result<SendMessageOutput> {
    let (message, checksums) = prepared.0.into_iter().next().expect("one prepared entry")?;
    let sent = engine.send(queue, message)?;
    Ok(checksums.answer(None, sent))
}

/// The most entries a batch request may carry.
const MAX_BATCH_ENTRIES: usize = 10;

/// Checks a batch's shape as AWS does, before any entry runs.
fn check_batch_ids<'a>(
    ids: impl ExactSizeIterator<Item = Option<&'a str>>,
    entry_name: &'static str,
) -> Result<()> {
    if ids.len() == 0 {
        return Err(ProtocolError::EmptyBatchRequest(entry_name));
    }
    if ids.len() > MAX_BATCH_ENTRIES {
        return Err(ProtocolError::TooManyEntriesInBatchRequest(ids.len()));
    }
    let mut seen = HashSet::new();
    for id in ids {
        let id = id.ok_or(ProtocolError::MissingParameter("Id"))?;
        let valid = !id.is_empty()
            && id.len() <= 80
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            return Err(ProtocolError::InvalidBatchEntryId);
        }
        if !seen.insert(id) {
            return Err(ProtocolError::BatchEntryIdsNotDistinct(id.to_string()));
        }
    }
    Ok(())
}

fn failure(id: &str, error: &ProtocolError) -> BatchResultErrorEntry {
    let code = wire_code(error);
    BatchResultErrorEntry {
        id: id.to_string(),
        sender_fault: code.sender_fault,
        code: code.query_code.to_string(),
        message: error.to_string(),
    }
}

fn send_batch(
    engine: &mut Engine,
    queue: &str,
    entries: Option<&[MessageEntry]>,
    prepared: Prepared,
) -> Result<Value> {
    let entries = entries.unwrap_or_default();
    check_batch_ids(
        entries.iter().map(|e| e.id.as_deref()),
        "SendMessageBatchRequestEntry",
    )?;
    let mut checksums = Vec::with_capacity(prepared.0.len());
    let mut valid = Vec::with_capacity(prepared.0.len());
    let conversions: Vec<Result<()>> = prepared
        .0
        .into_iter()
        .map(|c| {
            c.map(|(message, sums)| {
                checksums.push(sums);
                valid.push(message);
            })
        })
        .collect();
    let mut results = engine.send_batch(queue, valid)?.into_iter().zip(checksums);
    let mut out = BatchOutput {
        successful: vec![],
        failed: vec![],
    };
    for (entry, conversion) in entries.iter().zip(conversions) {
        let id = entry.id.clone().unwrap_or_default();
        let outcome = conversion.and_then(|()| {
            let (result, checksums) = results.next().expect("one result per valid entry");
            result
                .map(|sent| (sent, checksums))
                .map_err(ProtocolError::from)
        });
        match outcome {
            Ok((sent, checksums)) => out.successful.push(checksums.answer(Some(id), sent)),
            Err(error) => out.failed.push(failure(&id, &error)),
        }
    }
    Ok(to_value(out))
}

fn handle_batch(
    entries: Option<&[HandleEntry]>,
    entry_name: &'static str,
    mut run: impl FnMut(&HandleEntry) -> Result<()>,
) -> Result<Value> {
    let entries = entries.unwrap_or_default();
    check_batch_ids(entries.iter().map(|e| e.id.as_deref()), entry_name)?;
    let mut out = BatchOutput {
        successful: vec![],
        failed: vec![],
    };
    for entry in entries {
        let id = entry.id.clone().unwrap_or_default();
        match run(entry) {
            Ok(()) => out.successful.push(IdOnly { id }),
            Err(error) => out.failed.push(failure(&id, &error)),
        }
    }
    Ok(to_value(out))
}

/// The wait a ReceiveMessage asks for, in seconds: its own, or the queue's default.
pub fn receive_wait_seconds(
    engine: &Engine,
    ctx: &Context,
    input: &ReceiveMessageInput,
) -> Result<u32> {
    let queue = ctx.queue(engine, &input.queue_url)?;
    match input.wait_time_seconds {
        None => Ok(engine.settings(&queue)?.receive_wait_s),
        Some(w) => {
            let reason = "Must be >= 0 and <= 20, if provided.";
            let w = to_u32(w, "WaitTimeSeconds", reason)?;
            if w > leasehold_engine::MAX_WAIT_TIME_S {
                return Err(EngineError::out_of_range("WaitTimeSeconds", w, reason).into());
            }
            Ok(w)
        }
    }
}

/// One non-waiting ReceiveMessage attempt, shaped for the wire.
pub fn receive(
    engine: &mut Engine,
    ctx: &Context,
    input: &ReceiveMessageInput,
) -> Result<ReceiveMessageOutput> {
    take_messages(engine, ctx, input).map(Taken::shape)
}

/// What one receive took from the engine, not yet shaped for the wire. Shaping (an MD5 of
/// every body, attribute maps, strings) needs no engine, so a server does it after releasing
/// the engine's lock, not while every other request waits.
pub struct Taken {
    deliveries: Vec<Delivery>,
    system: Vec<String>,
    selectors: Vec<String>,
    sender_id: String,
}

impl Taken {
    pub fn is_empty(&self) -> bool {
        self.deliveries.is_empty()
    }

    pub fn shape(self) -> ReceiveMessageOutput {
        let Taken {
            deliveries,
            system,
            selectors,
            sender_id,
        } = self;
        let messages = deliveries
            .into_iter()
            .map(|d| shape_delivery(d, &system, &selectors, &sender_id))
            .collect();
        ReceiveMessageOutput { messages }
    }
}

/// The engine's half of one non-waiting ReceiveMessage attempt.
pub fn take_messages(
    engine: &mut Engine,
    ctx: &Context,
    input: &ReceiveMessageInput,
) -> Result<Taken> {
    let queue = ctx.queue(engine, &input.queue_url)?;
    let max = match input.max_number_of_messages {
        None => 1,
        Some(n) => to_u32(
            n,
            "MaxNumberOfMessages",
            "Must be between 1 and 10, if provided.",
        )?,
    };
    let visibility = match input.visibility_timeout {
        None => None,
        Some(v) => Some(to_u32(
            v,
            "VisibilityTimeout",
            "Must be >= 0 and <= 43200, if provided.",
        )?),
    };
    receive_wait_seconds(engine, ctx, input)?;
    let request = ReceiveRequest {
        max_messages: max,
        visibility_s: visibility,
        attempt_id: input.receive_request_attempt_id.clone(),
    };
    let deliveries = engine.receive(&queue, &request)?;
    let system: Vec<String> = input
        .attribute_names
        .iter()
        .chain(input.message_system_attribute_names.iter())
        .flatten()
        .cloned()
        .collect();
    Ok(Taken {
        deliveries,
        system,
        selectors: input.message_attribute_names.clone().unwrap_or_default(),
        sender_id: engine.config().account_id.clone(),
    })
}

fn shape_delivery(
    d: Delivery,
    system: &[String],
    selectors: &[String],
    sender_id: &str,
) -> ReceivedMessage {
    let wants = |name: &str| system.iter().any(|s| s == "All" || s == name);
    let mut attributes = StringMap::new();
    let mut put = |name: &str, value: String| {
        if wants(name) {
            attributes.insert(name.to_string(), value);
        }
    };
    put("SenderId", sender_id.to_string());
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
        if let leasehold_engine::AttributeData::Text(text) = &trace.data {
            put("AWSTraceHeader", text.clone());
        }
    }
    let selected: Vec<_> = d
        .attributes
        .iter()
        .flat_map(|a| a.iter())
        .filter(|(name, _)| attribute_selected(selectors, name))
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

/// AWS's sequence numbers are 20-digit decimal strings, increasing per queue.
fn format_sequence_number(seq: u64) -> String {
    format!("{:020}", seq)
}

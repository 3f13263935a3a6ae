//! Messages as the engine stores them, and AWS's rules for bodies and message attributes.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{EngineError, Result};
use crate::settings::QueueSettings;

pub const MAX_MESSAGE_ATTRIBUTES: usize = 10;
const MAX_ATTRIBUTE_NAME_LEN: usize = 256;
const MAX_DATA_TYPE_LEN: usize = 256;

/// The value of a message attribute: text for String and Number types, bytes for Binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttributeData {
    Text(String),
    Binary(Vec<u8>),
}

/// One message attribute, e.g. `{"DataType": "Number.price", "StringValue": "3.5"}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageAttribute {
    pub data_type: String,
    pub data: AttributeData,
}

/// Message attributes keyed by name; a BTreeMap because the MD5 is computed in name order.
pub type MessageAttributes = BTreeMap<String, MessageAttribute>;

/// What a producer hands to SendMessage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewMessage {
    pub body: String,
    pub attributes: MessageAttributes,
    /// Only `AWSTraceHeader` is allowed here, as on AWS.
    pub system_attributes: MessageAttributes,
    /// Per-message delay; None takes the queue's DelaySeconds. Standard queues only.
    pub delay_s: Option<u32>,
    /// MessageGroupId: orders a FIFO queue; names the tenant on a standard queue, which
    /// hands out quiet tenants' messages before noisy ones' (fair queues: `tenants.rs`).
    pub group_id: Option<String>,
    /// MessageDeduplicationId: FIFO queues only.
    pub deduplication_id: Option<String>,
}

/// Returns true for the characters SQS accepts in bodies and string attribute values.
pub fn is_allowed_char(c: char) -> bool {
    matches!(c as u32, 0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}

/// Printable ASCII, tab, newline or carriage return: a byte that settles itself.
fn plain(b: u8) -> bool {
    (0x20..0x80).contains(&b) || matches!(b, b'\t' | b'\n' | b'\r')
}

/// Whether every byte is `plain`: ASCII (std's word-at-a-time check), then no control
/// character but those three, 32 bytes at a time with no branch inside a block, which the
/// compiler turns into vector compares (a byte-at-a-time loop with an early exit was a tenth
/// of an in-memory full cycle).
fn all_plain(bytes: &[u8]) -> bool {
    let controls = |block: &[u8]| {
        block.iter().fold(0u8, |found, &b| {
            let unwanted = (b < 0x20) & (b != b'\t') & (b != b'\n') & (b != b'\r');
            found | u8::from(unwanted)
        })
    };
    let mut blocks = bytes.chunks_exact(32);
    bytes.is_ascii()
        && blocks.all(|block| controls(block) == 0)
        && blocks.remainder().iter().all(|&b| plain(b))
}

fn check_chars(text: &str, what: &str) -> Result<()> {
    // Most bodies are printable ASCII: one pass over bytes settles them without decoding.
    if all_plain(text.as_bytes()) {
        return Ok(());
    }
    match text.chars().find(|c| !is_allowed_char(*c)) {
        None => Ok(()),
        Some(bad) => Err(EngineError::InvalidMessageContents(format!(
            "Invalid binary character '#x{:X}' was found in the {what}, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
            bad as u32
        ))),
    }
}

fn invalid(msg: String) -> EngineError {
    EngineError::InvalidParameterValue(msg)
}

fn check_attribute_name(name: &str, kind: &str) -> Result<()> {
    let lower = name.to_ascii_lowercase();
    // Letters and digits of any script, as AWS accepts (`attr.1øßä`).
    let valid_chars = name
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if name.is_empty()
        || name.len() > MAX_ATTRIBUTE_NAME_LEN
        || !valid_chars
        || name.starts_with('.')
        || name.ends_with('.')
        || name.contains("..")
        || lower.starts_with("aws.")
        || lower.starts_with("amazon.")
    {
        return Err(invalid(format!(
            "Message ({kind}) attribute name '{name}' is invalid. The attribute name can contain only A-Z, a-z, 0-9, underscore (_), hyphen (-), and period (.), must not start or end with a period, must not contain successive periods, and must not start with 'AWS.' or 'Amazon.'."
        )));
    }
    Ok(())
}

fn check_attribute(name: &str, attr: &MessageAttribute, kind: &str) -> Result<()> {
    check_attribute_name(name, kind)?;
    let (base, label) = match attr.data_type.split_once('.') {
        Some((base, label)) => (base, Some(label)),
        None => (attr.data_type.as_str(), None),
    };
    let label_ok = label.is_none_or(|l| {
        !l.is_empty()
            && l.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    });
    if attr.data_type.is_empty() {
        return Err(invalid(format!(
            "The message ({kind}) attribute '{name}' must contain a non-empty attribute type."
        )));
    }
    if !matches!(base, "String" | "Number" | "Binary")
        || !label_ok
        || attr.data_type.len() > MAX_DATA_TYPE_LEN
    {
        return Err(invalid(format!(
            "The type of message ({kind}) attribute '{name}' is invalid. You must use only the following supported type prefixes: Binary, Number, String."
        )));
    }
    match (&attr.data, base) {
        (AttributeData::Binary(bytes), "Binary") if !bytes.is_empty() => Ok(()),
        (AttributeData::Text(text), "String" | "Number") if !text.is_empty() => {
            // AWS answers a bad character in an attribute value (unlike one in a body) with
            // InvalidParameterValue.
            check_chars(text, &format!("message ({kind}) attribute '{name}'")).map_err(
                |e| match e {
                    EngineError::InvalidMessageContents(text) => invalid(text),
                    other => other,
                },
            )?;
            if base == "Number" && !is_number(text) {
                return Err(invalid(format!(
                    "Could not cast message ({kind}) attribute '{name}' value to number."
                )));
            }
            Ok(())
        }
        _ => Err(invalid(format!(
            "Message ({kind}) attribute '{name}' must contain a non-empty value of type '{base}'."
        ))),
    }
}

/// AWS accepts decimal numbers with up to 38 digits, optionally signed, with an exponent.
fn is_number(text: &str) -> bool {
    let digits = text.chars().filter(|c| c.is_ascii_digit()).count();
    digits > 0 && digits <= 38 && text.trim().parse::<f64>().is_ok_and(f64::is_finite)
}

/// The bytes an attribute map adds to a message's size: name, type and value of each.
pub fn attributes_size(attributes: &MessageAttributes) -> usize {
    attributes
        .iter()
        .map(|(name, attr)| {
            name.len()
                + attr.data_type.len()
                + match &attr.data {
                    AttributeData::Text(t) => t.len(),
                    AttributeData::Binary(b) => b.len(),
                }
        })
        .sum()
}

impl NewMessage {
    pub fn new(body: impl Into<String>) -> Self {
        NewMessage {
            body: body.into(),
            ..NewMessage::default()
        }
    }

    /// The size AWS checks against MaximumMessageSize: body plus message attributes.
    pub fn size(&self) -> usize {
        self.body.len() + attributes_size(&self.attributes)
    }

    /// Checks the message against AWS's rules for the queue it is sent to.
    pub fn validate(&self, settings: &QueueSettings) -> Result<()> {
        self.check_content()?;
        self.check_for(settings)
    }

    /// The message, with what `validate` checks of it that needs no queue checked already:
    /// the costly part (every character of the body), done before the queue is locked.
    pub fn checked(self) -> Checked {
        let content = self.check_content();
        Checked {
            message: self,
            content,
        }
    }

    /// The first of `validate`'s checks, those of the message alone, in AWS's order.
    fn check_content(&self) -> Result<()> {
        if self.body.is_empty() {
            return Err(EngineError::MissingParameter("MessageBody".into()));
        }
        check_chars(&self.body, "message body")?;
        if self.attributes.len() > MAX_MESSAGE_ATTRIBUTES {
            return Err(invalid(format!(
                "Number of message attributes [{}] exceeds the allowed maximum [{MAX_MESSAGE_ATTRIBUTES}].",
                self.attributes.len()
            )));
        }
        for (name, attr) in &self.attributes {
            check_attribute(name, attr, "user")?;
        }
        for (name, attr) in &self.system_attributes {
            if name != "AWSTraceHeader" {
                return Err(invalid(format!(
                    "Message system attribute name '{name}' is invalid."
                )));
            }
            if !matches!(&attr.data, AttributeData::Text(t) if !t.is_empty())
                || attr.data_type != "String"
            {
                return Err(invalid(format!(
                    "Message system attribute '{name}' must contain a non-empty value of type 'String'."
                )));
            }
        }
        Ok(())
    }

    /// The rest of `validate`'s checks, those against the queue's settings.
    fn check_for(&self, settings: &QueueSettings) -> Result<()> {
        let max_size = settings.max_message_size;
        if self.size() > max_size as usize {
            return Err(invalid(format!(
                "One or more parameters are invalid. Reason: Message must be shorter than {max_size} bytes."
            )));
        }
        if let Some(delay) = self.delay_s {
            if delay > crate::settings::MAX_DELAY_S {
                return Err(EngineError::out_of_range(
                    "DelaySeconds",
                    delay,
                    "DelaySeconds must be >= 0 and <= 900.",
                ));
            }
        }
        if settings.fifo {
            self.validate_fifo(settings)
        } else if let Some(group) = &self.group_id {
            // A standard queue takes a group id (fair queues) under the same rules.
            check_fifo_id("MessageGroupId", group)?;
            self.deduplication_id.as_ref().map_or(Ok(()), |id| {
                Err(EngineError::out_of_range(
                    "MessageDeduplicationId",
                    id,
                    NOT_FOR_THIS_QUEUE_TYPE,
                ))
            })
        } else if let Some(id) = &self.deduplication_id {
            Err(EngineError::out_of_range(
                "MessageDeduplicationId",
                id,
                NOT_FOR_THIS_QUEUE_TYPE,
            ))
        } else {
            Ok(())
        }
    }

    fn validate_fifo(&self, settings: &QueueSettings) -> Result<()> {
        if let Some(delay) = self.delay_s.filter(|d| *d > 0) {
            return Err(EngineError::out_of_range(
                "DelaySeconds",
                delay,
                NOT_FOR_THIS_QUEUE_TYPE,
            ));
        }
        self.check_fifo_ids(settings)
    }

    /// A FIFO message's group id, and a deduplication id unless the queue derives one.
    pub(crate) fn check_fifo_ids(&self, settings: &QueueSettings) -> Result<()> {
        let Some(group) = &self.group_id else {
            return Err(EngineError::MissingParameter("MessageGroupId".into()));
        };
        check_fifo_id("MessageGroupId", group)?;
        match &self.deduplication_id {
            Some(id) => check_fifo_id("MessageDeduplicationId", id),
            None if settings.content_based_dedup => Ok(()),
            None => Err(invalid(
                "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly".into(),
            )),
        }
    }
}

const NOT_FOR_THIS_QUEUE_TYPE: &str =
    "The request include parameter that is not valid for this queue type.";

/// MessageGroupId and MessageDeduplicationId: 1..128 alphanumeric or punctuation characters.
fn check_fifo_id(param: &str, id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c.is_ascii_punctuation());
    if ok {
        Ok(())
    } else {
        Err(EngineError::out_of_range(
            param,
            id,
            &format!(
                "{param} can only include alphanumeric and punctuation characters. 1 to 128 in length."
            ),
        ))
    }
}

/// Where a message sits in its queue's indexes: by send time, then sequence number. Sequence
/// numbers grow with sends, so for messages sent to the queue this is send order; a message
/// dead-lettered into a standard queue keeps its send time and so its place by age (one a
/// move task brings is sent anew).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MsgKey {
    pub sent_ms: u64,
    pub seq: u64,
}

/// Where a stored message is in its life. Delayed and InFlight end at the message's
/// `until_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Waiting out DelaySeconds.
    Delayed,
    /// Receivable now.
    Ready,
    /// Leased by a receive.
    InFlight,
}

/// The rarely set parts of a message, boxed so that plain messages stay small.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extras {
    pub group: Option<Arc<str>>,
    pub deduplication_id: Option<Arc<str>>,
    pub system_attributes: Option<Arc<MessageAttributes>>,
    /// The ARN of the queue a dead-lettered message came from.
    pub dead_letter_source: Option<Arc<str>>,
    /// The id it was given in the queue it was first sent to, when it has moved from there:
    /// a message's id is otherwise derived from its place (see `ReceiptSealer::message_id`).
    pub message_id: Option<[u8; 16]>,
}

/// What a message carries for its consumers and nothing its lease rules need: the body and
/// the message attributes. Shared with receives, not copied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Content {
    pub body: Arc<str>,
    pub attributes: Option<Arc<MessageAttributes>>,
}

impl Content {
    /// The bytes it holds: what a cache of contents weighs it by.
    pub fn size(&self) -> usize {
        self.body.len() + self.attributes.as_deref().map_or(0, attributes_size)
    }
}

/// Where a message's content is kept in a store: its queue and its key there. A message that
/// moves to another queue has its content moved with it (`Change::ContentMoved`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentKey {
    pub queue_id: u64,
    pub key: MsgKey,
}

/// A stored message. A store persists it with its id and hands it back on restart. Kept to
/// 64 bytes: a queue holds millions, so every field counts (see `table.rs`); the id is not
/// among them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredMessage {
    /// The body and attributes; None once handed to a store (an engine that tracks changes
    /// keeps none: a backlog is not bounded by memory), which keeps them under the message's
    /// `ContentKey`.
    pub content: Option<Content>,
    pub extras: Option<Box<Extras>>,
    /// When it was first received; meaningful only once `receive_count` is above 0.
    pub first_receive_ms: u64,
    /// When the current (or latest) lease started: the 12-hour ceiling counts from here.
    pub lease_start_ms: u64,
    /// When a Delayed or InFlight state ends. While Ready: its ready rank, a per-queue count
    /// that grows each time a message becomes Ready, which orders FIFO groups by how long
    /// their heads have waited (stores do not keep it).
    pub until_ms: u64,
    pub receive_count: u32,
    /// Heartbeats (visibility extensions) during the current lease, up to 65,535.
    pub extensions: u16,
    /// A consumer deleted it after its lease had expired, and it stayed (strict mode, FIFO).
    pub late_deleted: bool,
    pub state: State,
}

impl StoredMessage {
    pub fn group(&self) -> Option<&Arc<str>> {
        self.extras.as_ref().and_then(|e| e.group.as_ref())
    }

    /// When it was first received, if it has been.
    /// The lease as the rulebook sees it. A Ready message is receivable (its `until_ms` is a
    /// ready rank, not an instant); the engine never stores a release, since a released
    /// message is Ready at once and its timer, the only place asking whether a lease ran
    /// out, is gone.
    pub fn lease(&self) -> crate::rules::MessageLease {
        crate::rules::MessageLease {
            receive_count: self.receive_count,
            started_ms: self.lease_start_ms,
            hidden_until_ms: match self.state {
                State::Ready => 0,
                State::Delayed | State::InFlight => self.until_ms,
            },
            released: false,
        }
    }

    pub fn first_received(&self) -> Option<u64> {
        (self.receive_count > 0).then_some(self.first_receive_ms)
    }
}

// The table's memory budget rests on this (see BENCHMARKS.md, bytes per message).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<StoredMessage>() == 64);

/// A message as one receive hands it out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    pub message_id: String,
    pub receipt_handle: String,
    /// Empty while `unread` says where the body is still to be read from.
    pub body: Arc<str>,
    pub attributes: Option<Arc<MessageAttributes>>,
    /// Where the body and attributes are kept when the engine holds none: the backend reads
    /// them from its store (`fill`) before anyone sees the delivery.
    pub unread: Option<ContentKey>,
    pub system_attributes: Option<Arc<MessageAttributes>>,
    pub sent_ms: u64,
    pub first_receive_ms: u64,
    pub receive_count: u32,
    pub group_id: Option<Arc<str>>,
    pub deduplication_id: Option<Arc<str>>,
    /// FIFO queues only: the message's place in the queue.
    pub sequence_number: Option<u64>,
    pub dead_letter_source_arn: Option<Arc<str>>,
}

/// A message to send, with the outcome of the checks that need no queue (`NewMessage::checked`).
#[derive(Debug)]
pub struct Checked {
    pub(crate) message: NewMessage,
    pub(crate) content: Result<()>,
}

impl Checked {
    pub fn message(&self) -> &NewMessage {
        &self.message
    }

    /// Every check of `NewMessage::validate`: the content's outcome, then the queue's.
    pub(crate) fn validate(&self, settings: &QueueSettings) -> Result<()> {
        self.content.clone()?;
        self.message.check_for(settings)
    }
}

/// A stored message as a peek sees it: nothing about it changes by being looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peeked {
    pub message_id: String,
    pub sent_ms: u64,
    pub receive_count: u32,
    /// What a receive would find now: `Ready` (receivable), `InFlight` or `Delayed`.
    pub state: State,
    /// When an `InFlight` or `Delayed` state ends.
    pub until_ms: Option<u64>,
    pub group_id: Option<Arc<str>>,
    /// Empty while `unread` says where the body is still to be read from.
    pub body: Arc<str>,
    /// As `Delivery::unread`.
    pub unread: Option<ContentKey>,
}

/// What the engine hands out with a message's content: held, or still to be read from its
/// store. The backend fills in what is unread before anyone sees it.
pub(crate) fn handed_out(
    content: Option<&Content>,
    at: ContentKey,
) -> (Arc<str>, Option<Arc<MessageAttributes>>, Option<ContentKey>) {
    match content {
        Some(c) => (c.body.clone(), c.attributes.clone(), None),
        None => (Arc::from(""), None, Some(at)),
    }
}

impl Delivery {
    /// Puts in the content read back from a store.
    pub fn fill(&mut self, content: Content) {
        self.body = content.body;
        self.attributes = content.attributes;
        self.unread = None;
    }
}

impl Peeked {
    /// Puts in the body read back from a store.
    pub fn fill(&mut self, content: Content) {
        self.body = content.body;
        self.unread = None;
    }
}

/// Formats 16 random bytes as a version-4 UUID, as AWS message ids look.
pub fn format_message_id(bytes: [u8; 16]) -> String {
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_checked_against_the_characters_sqs_allows() {
        for ok in [
            "plain ascii ~",
            "tab\tnewline\ncr\r",
            "del \u{7F}",
            "é 日本 🦀",
            "\u{FFFD}",
        ] {
            assert!(check_chars(ok, "body").is_ok(), "{ok:?}");
        }
        for bad in [
            "nul \u{0}",
            "bell \u{7}",
            "é then \u{1}",
            "\u{FFFE}",
            "\u{FFFF}",
        ] {
            assert!(
                matches!(
                    check_chars(bad, "body"),
                    Err(EngineError::InvalidMessageContents(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_bad_character_is_found_wherever_it_sits_in_a_long_body() {
        for at in [0, 31, 32, 33, 63, 64, 95, 99] {
            let mut body = "x".repeat(100);
            assert!(check_chars(&body, "body").is_ok());
            body.replace_range(at..at + 1, "\u{1}");
            assert!(check_chars(&body, "body").is_err(), "at {at}");
            body.replace_range(at..at + 1, "\t");
            assert!(check_chars(&body, "body").is_ok(), "tab at {at}");
        }
    }
}

//! Engine records to store keys and values, and back. A versioned, length-prefixed binary
//! format: every value starts with its format version, and every read is bounds-checked, so a
//! damaged record is reported, never misread.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use leasehold_engine::{
    AttributeData, Change, Content, ContentKey, Counts, DedupKey, EngineRecord, Extras,
    MessageAttribute, MessageAttributes, MessageState, MetricsRecord, MoveTask, MoveTaskStatus,
    MsgKey, Original, QueueMeta, QueueRecord, QueueSettings, QueueStats, RedriveAllowPolicy,
    RedrivePolicy, Snapshot, StoredMessage, WindowedRecord,
};

use crate::batch::{RangeDelete, WriteBatch};

mod primitives;
mod records;

use crate::sealing::SEALS_KEY;
use primitives::{Reader, Writer};
use records::*;
pub use records::{attributes_value, decode_attributes, decode_queue, queue_value};

const VERSION: u8 = 1;
/// Message records without their content, which has a record of its own (`content_key`).
const MESSAGE_VERSION: u8 = 2;

pub const ENGINE_KEY: &[u8] = b"E";
const QUEUE: u8 = b'Q';
const MESSAGE: u8 = b'M';
const DEDUP: u8 = b'D';
const METRICS: u8 = b'H';

/// A message's content (body and attributes) is a record of its own, keyed as its message's
/// record with one byte more, so the two sit side by side in the file: a send, a delete or a
/// move writes the same pages as it would for one record. Written once, never read at
/// restart (`is_content`).
const CONTENT_SUFFIX: u8 = 1;
/// The length of a message record's key: kind, queue id, send time, sequence number.
const MESSAGE_KEY_LEN: usize = 1 + 8 + 8 + 8;
/// The length of a content's key, and the kind byte it starts with: what a scan skips.
pub const CONTENT_KEY: (usize, u8) = (MESSAGE_KEY_LEN + 1, MESSAGE);

/// Whether `key` is a message content's, which a restart does not read.
pub fn is_content(key: &[u8]) -> bool {
    key.len() == CONTENT_KEY.0 && key.first() == Some(&CONTENT_KEY.1)
}

fn prefixed(kind: u8, queue_id: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(MESSAGE_KEY_LEN + 1);
    key.push(kind);
    key.extend_from_slice(&queue_id.to_be_bytes());
    key
}

/// A record of one stripe of a queue (its queue record, its measurements): the head's
/// (stripe 0) keyed as a queue without stripes always was, another's with its number after.
fn stripe_key(kind: u8, queue_id: u64, stripe: u32) -> Vec<u8> {
    let mut key = prefixed(kind, queue_id);
    if stripe > 0 {
        key.extend_from_slice(&stripe.to_be_bytes());
    }
    key
}

/// The stripe a queue or measurements record's key names after its queue id.
fn read_stripe(k: &mut Reader) -> Result<u32, String> {
    if k.at_end() {
        Ok(0)
    } else {
        k.u32()
    }
}

fn message_key(queue_id: u64, key: MsgKey) -> Vec<u8> {
    let mut k = prefixed(MESSAGE, queue_id);
    k.extend_from_slice(&key.sent_ms.to_be_bytes());
    k.extend_from_slice(&key.seq.to_be_bytes());
    k
}

/// Where a store keeps the content of the message at `at`.
pub fn content_key(at: ContentKey) -> Vec<u8> {
    let mut k = message_key(at.queue_id, at.key);
    k.push(CONTENT_SUFFIX);
    k
}

fn dedup_key(queue_id: u64, key: &DedupKey) -> Vec<u8> {
    let mut w = Writer(prefixed(DEDUP, queue_id));
    w.opt(&key.0, |w, g| w.str(g));
    w.str(&key.1);
    w.0
}

/// Every record of one kind for one queue.
fn all_of(kind: u8, queue_id: u64) -> RangeDelete {
    RangeDelete {
        start: prefixed(kind, queue_id),
        end: prefixed(kind, queue_id + 1),
        below: None,
    }
}

/// Where a message key keeps its sequence number: after the kind, queue id and send time.
const SEQ_OFFSET: usize = 1 + 8 + 8;

/// The messages of a queue numbered below `below_seq`, their contents with them: those a
/// purge removed.
fn purged(queue_id: u64, below_seq: u64) -> RangeDelete {
    RangeDelete {
        below: Some((SEQ_OFFSET, below_seq.to_be_bytes().to_vec())),
        ..all_of(MESSAGE, queue_id)
    }
}

/// What a store still holds that the engine no longer has (the messages of deleted queues,
/// purged messages), left behind when a background delete was cut short by a stop: range
/// deletes that finish the job.
pub fn leftovers(snapshot: &Snapshot) -> WriteBatch {
    let mut found = Leftovers::new(snapshot);
    for (queue_id, key, ..) in &snapshot.messages {
        found.note(*queue_id, *key);
    }
    found.batch()
}

/// `leftovers`, found as message records go by (`crate::restore`): `new` takes every record
/// but the messages.
pub struct Leftovers {
    purged_below: BTreeMap<u64, u64>,
    orphans: BTreeSet<u64>,
    purges: BTreeSet<(u64, u64)>,
}

impl Leftovers {
    pub fn new(head: &Snapshot) -> Leftovers {
        let purged_below: BTreeMap<u64, u64> = head
            .queues
            .iter()
            .map(|q| (q.meta.id, q.meta.purged_below_seq))
            .collect();
        let orphans = head
            .dedup
            .iter()
            .map(|(queue_id, ..)| *queue_id)
            .filter(|id| !purged_below.contains_key(id))
            .collect();
        Leftovers {
            purged_below,
            orphans,
            purges: BTreeSet::new(),
        }
    }

    /// A message record the store still holds.
    pub fn note(&mut self, queue_id: u64, key: MsgKey) {
        match self.purged_below.get(&queue_id) {
            None => {
                self.orphans.insert(queue_id);
            }
            Some(below) if key.seq < *below => {
                self.purges.insert((queue_id, *below));
            }
            Some(_) => {}
        }
    }

    pub fn batch(self) -> WriteBatch {
        let mut batch = WriteBatch::default();
        for queue_id in self.orphans {
            batch.delete_range(all_of(MESSAGE, queue_id));
            batch.delete_range(all_of(DEDUP, queue_id));
        }
        for (queue_id, below) in self.purges {
            batch.delete_range(purged(queue_id, below));
        }
        batch
    }
}

/// The writes that apply `changes`, in order; a content whose queue asks for encryption at
/// rest is a put to be sealed (`Op::PutSealed`), bound to its store key, by the store.
pub fn encode(changes: &[Change]) -> WriteBatch {
    let mut batch = WriteBatch::default();
    for change in changes {
        match change {
            Change::Engine(record) => batch.put(ENGINE_KEY.to_vec(), engine_value(record)),
            Change::Queue(record) => batch.put(
                stripe_key(QUEUE, record.meta.id, record.stripe),
                queue_value(record),
            ),
            Change::QueueDeleted { queue_id, stripes } => {
                // Without its records the queue's messages are skipped at restart, so the
                // ranges may be deleted in the background.
                for stripe in 0..(*stripes).max(1) {
                    batch.delete(stripe_key(QUEUE, *queue_id, stripe));
                    batch.delete(stripe_key(METRICS, *queue_id, stripe));
                }
                batch.delete_range(all_of(MESSAGE, *queue_id));
                batch.delete_range(all_of(DEDUP, *queue_id));
            }
            Change::Purged {
                queue_id,
                below_seq,
            } => batch.delete_range(purged(*queue_id, *below_seq)),
            Change::Content {
                at,
                content,
                sealed,
            } => match sealed {
                true => batch.put_sealed(content_key(*at), content_value(content)),
                false => batch.put(content_key(*at), content_value(content)),
            },
            Change::ContentMoved { from, to } => batch.copy(content_key(*from), content_key(*to)),
            Change::Metrics {
                queue_id,
                stripe,
                record,
            } => batch.put(
                stripe_key(METRICS, *queue_id, *stripe),
                metrics_value(record),
            ),
            Change::Message {
                queue_id,
                key,
                message,
            } => {
                let k = message_key(*queue_id, *key);
                match message {
                    Some((id, m)) => batch.put(k, message_value(id, m)),
                    None => {
                        batch.delete(k);
                        batch.delete(content_key(ContentKey {
                            queue_id: *queue_id,
                            key: *key,
                        }));
                    }
                }
            }
            Change::Dedup {
                queue_id,
                key,
                original,
            } => {
                let k = dedup_key(*queue_id, key);
                match original {
                    Some(o) => batch.put(k, original_value(o)),
                    None => batch.delete(k),
                }
            }
        }
    }
    batch
}

/// Adds one stored record to a snapshot being rebuilt.
pub fn decode_into(snapshot: &mut Snapshot, key: &[u8], value: &[u8]) -> Result<(), String> {
    if key == SEALS_KEY {
        // Not the engine's: read at start by `sealing::recorded`.
        return Ok(());
    }
    if key.first() == Some(&MESSAGE) {
        snapshot.messages.push(decode_message(key, value)?);
        return Ok(());
    }
    let mut r = Reader::new(value);
    let mut k = Reader::new(key);
    let kind = k.u8()?;
    if r.u8()? != VERSION {
        return Err("unknown record format version".into());
    }
    match kind {
        b'E' => snapshot.engine = Some(read_engine(&mut r)?),
        QUEUE => {
            let _queue_id = k.u64()?;
            let stripe = read_stripe(&mut k)?;
            snapshot.queues.push(QueueRecord {
                stripe,
                ..read_queue(&mut r)?
            });
        }
        METRICS => {
            let queue_id = k.u64()?;
            let stripe = read_stripe(&mut k)?;
            snapshot
                .metrics
                .push((queue_id, stripe, read_metrics(&mut r)?));
        }
        DEDUP => {
            let queue_id = k.u64()?;
            let group = k.opt(|k| k.arc_str())?;
            let id = k.arc_str()?;
            snapshot
                .dedup
                .push((queue_id, (group, id), read_original(&mut r)?));
        }
        other => return Err(format!("unknown record kind {other}")),
    }
    r.finish()
}

/// The key range of message records (and their contents, which a scan skips).
pub const MESSAGES: (&[u8], &[u8]) = (b"M", b"N");

/// In SQL over the `kv` table: how many message records of the current format (whose body is
/// a record of its own, just after theirs in key order) lack that record, as a damaged file
/// would. Parameters: the messages' key range, and the format's version byte. A full read of
/// the messages' keys: for checks of a copy, not for a start.
pub const BODILESS_MESSAGES_SQL: &str = "SELECT count(*) FROM (
        SELECT k, v, lead(k) OVER (ORDER BY k) AS next FROM kv WHERE k >= ?1 AND k < ?2)
    WHERE length(k) = ?3 AND substr(v, 1, 1) = ?4
      AND (next IS NULL OR length(next) <> ?3 + 1 OR substr(next, 1, ?3) <> k)";

/// The parameters `BODILESS_MESSAGES_SQL` takes after the key range: a message record's key
/// length and the version byte of records whose body is apart.
pub const BODILESS_MESSAGES_PARAMS: (i64, [u8; 1]) = (MESSAGE_KEY_LEN as i64, [MESSAGE_VERSION]);

/// A stored message record: its queue, key, id and the message.
pub fn decode_message(
    key: &[u8],
    value: &[u8],
) -> Result<(u64, MsgKey, [u8; 16], StoredMessage), String> {
    let mut r = Reader::new(value);
    let mut k = Reader::new(key);
    if k.u8()? != MESSAGE {
        return Err("not a message record".into());
    }
    let version = r.u8()?;
    if version != VERSION && version != MESSAGE_VERSION {
        return Err("unknown record format version".into());
    }
    let queue_id = k.u64()?;
    let key = MsgKey {
        sent_ms: k.u64()?,
        seq: k.u64()?,
    };
    let (id, message) = read_message(&mut r, version == VERSION)?;
    r.finish()?;
    Ok((queue_id, key, id, message))
}

fn write_attributes(w: &mut Writer, attributes: &MessageAttributes) {
    w.list(&attributes.iter().collect::<Vec<_>>(), |w, (name, a)| {
        w.str(name);
        w.str(&a.data_type);
        match &a.data {
            AttributeData::Text(t) => {
                w.u8(1);
                w.str(t);
            }
            AttributeData::Binary(b) => {
                w.u8(2);
                w.bytes(b);
            }
        }
    });
}

fn read_attributes(r: &mut Reader) -> Result<Arc<MessageAttributes>, String> {
    let items = r.list(|r| {
        let name = r.string()?;
        let data_type = r.string()?;
        let data = match r.u8()? {
            1 => AttributeData::Text(r.string()?),
            2 => AttributeData::Binary(r.bytes()?.to_vec()),
            t => return Err(format!("unknown attribute transport {t}")),
        };
        Ok((name, MessageAttribute { data_type, data }))
    })?;
    Ok(Arc::new(items.into_iter().collect()))
}

/// A message's content as stored: its body and attributes.
pub fn content_value(content: &Content) -> Vec<u8> {
    content_value_of(&content.body, content.attributes.as_deref())
}

/// `content_value` of a body and attributes not (yet) in a `Content`.
pub fn content_value_of(body: &str, attributes: Option<&MessageAttributes>) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(body.len() + 16));
    w.u8(VERSION);
    w.str(body);
    w.opt(&attributes, |w, a| write_attributes(w, a));
    w.0
}

/// A message's content from `content_value`'s bytes.
pub fn decode_content(bytes: &[u8]) -> Result<Content, String> {
    read_value(bytes, read_content)
}

fn read_content(r: &mut Reader) -> Result<Content, String> {
    Ok(Content {
        body: r.arc_str()?,
        attributes: r.opt(read_attributes)?,
    })
}

/// The id is written on its own; `Extras::message_id`, which only repeats it, is not. The
/// content is not written here: it has a record of its own (`Change::Content`), so a lease
/// rewrites a hundred bytes, not the body.
fn message_value(id: &[u8; 16], m: &StoredMessage) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(64));
    w.u8(MESSAGE_VERSION);
    w.raw(id);
    w.opt(&m.extras, |w, e| {
        w.opt(&e.group, |w, g| w.str(g));
        w.opt(&e.deduplication_id, |w, d| w.str(d));
        w.opt(&e.system_attributes, |w, a| write_attributes(w, a));
        w.opt(&e.dead_letter_source, |w, s| w.str(s));
    });
    w.opt(&m.first_received(), |w, t| w.u64(*t));
    w.u64(m.lease_start_ms);
    w.u32(m.receive_count);
    w.u32(u32::from(m.extensions));
    w.u8(m.late_deleted as u8);
    match m.state {
        MessageState::Ready if m.until_ms == 0 => w.u8(0),
        // A ready rank keeps FIFO groups in the order they waited across a restart.
        MessageState::Ready => {
            w.u8(3);
            w.u64(m.until_ms);
        }
        MessageState::Delayed => {
            w.u8(1);
            w.u64(m.until_ms);
        }
        MessageState::InFlight => {
            w.u8(2);
            w.u64(m.until_ms);
        }
    }
    w.0
}

/// A message record; `with_content`: one written before contents had records of their own,
/// which carries its body and attributes after the id.
fn read_message(r: &mut Reader, with_content: bool) -> Result<([u8; 16], StoredMessage), String> {
    let id = r.array()?;
    let content = if with_content {
        Some(read_content(r)?)
    } else {
        None
    };
    let extras = r.opt(|r| {
        Ok(Box::new(Extras {
            group: r.opt(|r| r.arc_str())?,
            deduplication_id: r.opt(|r| r.arc_str())?,
            system_attributes: r.opt(read_attributes)?,
            dead_letter_source: r.opt(|r| r.arc_str())?,
            message_id: None,
        }))
    })?;
    let first_receive_ms = r.opt(|r| r.u64())?.unwrap_or(0);
    let lease_start_ms = r.u64()?;
    let receive_count = r.u32()?;
    let extensions = u16::try_from(r.u32()?).unwrap_or(u16::MAX);
    let late_deleted = r.bool()?;
    let (state, until_ms) = match r.u8()? {
        0 => (MessageState::Ready, 0),
        1 => (MessageState::Delayed, r.u64()?),
        2 => (MessageState::InFlight, r.u64()?),
        3 => (MessageState::Ready, r.u64()?),
        s => return Err(format!("unknown message state {s}")),
    };
    let message = StoredMessage {
        content,
        extras,
        first_receive_ms,
        lease_start_ms,
        until_ms,
        receive_count,
        extensions,
        late_deleted,
        state,
    };
    Ok((id, message))
}

fn original_value(o: &Original) -> Vec<u8> {
    let mut w = Writer::new();
    w.raw(&o.message_id);
    w.u64(o.seq);
    w.u64(o.expires_ms);
    w.0
}

fn read_original(r: &mut Reader) -> Result<Original, String> {
    Ok(Original {
        message_id: r.array()?,
        seq: r.u64()?,
        expires_ms: r.u64()?,
    })
}

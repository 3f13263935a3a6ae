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

/// The writes that apply `changes`, in order.
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
            Change::Content { at, content } => batch.put(content_key(*at), content_value(content)),
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

// ---- values ----

fn metrics_value(m: &MetricsRecord) -> Vec<u8> {
    let mut w = Writer::new();
    for windowed in [&m.hold, &m.first_receive] {
        write_counts(&mut w, &windowed.total);
        w.list(&windowed.recent, |w, (start, counts)| {
            w.u64(*start);
            write_counts(w, counts);
        });
    }
    for map in [&m.receive_counts, &m.extensions_per_message] {
        w.list(&map.iter().collect::<Vec<_>>(), |w, (k, v)| {
            w.u32(**k);
            w.u64(**v);
        });
    }
    w.0
}

fn write_counts(w: &mut Writer, counts: &Counts) {
    w.list(counts, |w, (value, count)| {
        w.u64(*value);
        w.u64(*count);
    });
}

fn read_counts(r: &mut Reader) -> Result<Counts, String> {
    r.list(|r| Ok((r.u64()?, r.u64()?)))
}

fn read_windowed(r: &mut Reader) -> Result<WindowedRecord, String> {
    Ok(WindowedRecord {
        total: read_counts(r)?,
        recent: r.list(|r| Ok((r.u64()?, read_counts(r)?)))?,
    })
}

fn read_metrics(r: &mut Reader) -> Result<MetricsRecord, String> {
    let hold = read_windowed(r)?;
    let first_receive = read_windowed(r)?;
    let mut map = || -> Result<BTreeMap<u32, u64>, String> {
        Ok(r.list(|r| Ok((r.u32()?, r.u64()?)))?.into_iter().collect())
    };
    Ok(MetricsRecord {
        hold,
        first_receive,
        receive_counts: map()?,
        extensions_per_message: map()?,
    })
}

fn engine_value(e: &EngineRecord) -> Vec<u8> {
    let mut w = Writer::new();
    w.raw(&e.receipt_key);
    w.u64(e.next_queue_id);
    w.list(&e.deleted_at, |w, (name, at)| {
        w.str(name);
        w.u64(*at);
    });
    w.list(&e.tasks, write_task);
    w.0
}

fn read_engine(r: &mut Reader) -> Result<EngineRecord, String> {
    Ok(EngineRecord {
        receipt_key: r.array()?,
        next_queue_id: r.u64()?,
        deleted_at: r.list(|r| Ok((r.string()?, r.u64()?)))?,
        tasks: r.list(read_task)?,
    })
}

fn write_task(w: &mut Writer, t: &MoveTask) {
    w.str(&t.id);
    w.str(&t.source);
    w.str(&t.source_arn);
    w.opt(&t.destination_arn, |w, d| w.str(d));
    w.opt(&t.rate, |w, r| w.u32(*r));
    w.u8(match t.status {
        MoveTaskStatus::Running => 0,
        MoveTaskStatus::Completed => 1,
        MoveTaskStatus::Cancelled => 2,
        MoveTaskStatus::Failed => 3,
    });
    w.u64(t.moved);
    w.u64(t.to_move);
    w.opt(&t.limit, |w, k| {
        w.u64(k.sent_ms);
        w.u64(k.seq);
    });
    w.u64(t.started_ms);
    w.opt(&t.failure, |w, f| w.str(f));
}

fn read_task(r: &mut Reader) -> Result<MoveTask, String> {
    Ok(MoveTask {
        id: r.string()?,
        source: r.string()?,
        source_arn: r.string()?,
        destination_arn: r.opt(|r| r.string())?,
        rate: r.opt(|r| r.u32())?,
        status: match r.u8()? {
            0 => MoveTaskStatus::Running,
            1 => MoveTaskStatus::Completed,
            2 => MoveTaskStatus::Cancelled,
            3 => MoveTaskStatus::Failed,
            s => return Err(format!("unknown move task status {s}")),
        },
        moved: r.u64()?,
        to_move: r.u64()?,
        limit: r.opt(|r| {
            Ok(MsgKey {
                sent_ms: r.u64()?,
                seq: r.u64()?,
            })
        })?,
        started_ms: r.u64()?,
        failure: r.opt(|r| r.string())?,
    })
}

/// A queue's record as stored: the same bytes in SQLite and in PostgreSQL.
pub fn queue_value(q: &QueueRecord) -> Vec<u8> {
    let mut w = Writer::new();
    w.str(&q.name);
    w.u64(q.meta.id);
    let s = &q.meta.settings;
    for n in [
        s.visibility_timeout_s,
        s.delay_s,
        s.retention_s,
        s.max_message_size,
        s.receive_wait_s,
        s.kms_data_key_reuse_s,
    ] {
        w.u32(n);
    }
    w.opt(&s.policy, |w, p| w.str(p));
    w.opt(&s.kms_master_key_id, |w, k| w.str(k));
    for b in [
        s.sqs_managed_sse,
        s.fifo,
        s.content_based_dedup,
        s.dedup_per_group,
        s.throughput_per_group,
    ] {
        w.u8(b as u8);
    }
    w.opt(&s.redrive, |w, p| {
        w.str(&p.dead_letter_target_arn);
        w.u32(p.max_receive_count);
    });
    w.opt(&s.redrive_allow, |w, p| match p {
        RedriveAllowPolicy::AllowAll => w.u8(0),
        RedriveAllowPolicy::DenyAll => w.u8(1),
        RedriveAllowPolicy::ByQueue(arns) => {
            w.u8(2);
            w.list(arns, |w, a| w.str(a));
        }
    });
    w.list(&q.meta.tags.iter().collect::<Vec<_>>(), |w, (k, v)| {
        w.str(k);
        w.str(v);
    });
    w.u64(q.meta.created_ms);
    w.u64(q.meta.modified_ms);
    w.opt(&q.meta.last_purge_ms, |w, t| w.u64(*t));
    for n in q.meta.stats.values() {
        w.u64(n);
    }
    w.u64(q.next_seq);
    // Appended later: a record without it (older files) reads as never purged.
    w.u64(q.meta.purged_below_seq);
    // Appended later still: a record without it is of a queue of one stripe.
    w.u32(q.meta.stripes);
    w.0
}

/// A queue's record from `queue_value`'s bytes.
pub fn decode_queue(bytes: &[u8]) -> Result<QueueRecord, String> {
    read_value(bytes, read_queue)
}

/// Message attributes as stored.
pub fn attributes_value(attributes: &MessageAttributes) -> Vec<u8> {
    let mut w = Writer::new();
    write_attributes(&mut w, attributes);
    w.0
}

/// Message attributes from `attributes_value`'s bytes.
pub fn decode_attributes(bytes: &[u8]) -> Result<Arc<MessageAttributes>, String> {
    read_value(bytes, read_attributes)
}

/// One value as a `Writer` wrote it: the format's version, then all of `read`'s.
fn read_value<T>(
    bytes: &[u8],
    read: impl FnOnce(&mut Reader) -> Result<T, String>,
) -> Result<T, String> {
    let mut r = Reader::new(bytes);
    if r.u8()? != VERSION {
        return Err("unknown record format version".into());
    }
    let value = read(&mut r)?;
    r.finish()?;
    Ok(value)
}

fn read_queue(r: &mut Reader) -> Result<QueueRecord, String> {
    let name = r.string()?;
    let id = r.u64()?;
    let s = QueueSettings {
        visibility_timeout_s: r.u32()?,
        delay_s: r.u32()?,
        retention_s: r.u32()?,
        max_message_size: r.u32()?,
        receive_wait_s: r.u32()?,
        kms_data_key_reuse_s: r.u32()?,
        policy: r.opt(|r| r.string())?,
        kms_master_key_id: r.opt(|r| r.string())?,
        // Files written before encryption was reported honestly say true; nothing was ever
        // encrypted, so the flag is read and dropped.
        sqs_managed_sse: r.bool().map(|_| false)?,
        fifo: r.bool()?,
        content_based_dedup: r.bool()?,
        dedup_per_group: r.bool()?,
        throughput_per_group: r.bool()?,
        redrive: r.opt(|r| {
            Ok(RedrivePolicy {
                dead_letter_target_arn: r.string()?,
                max_receive_count: r.u32()?,
            })
        })?,
        redrive_allow: r.opt(|r| match r.u8()? {
            0 => Ok(RedriveAllowPolicy::AllowAll),
            1 => Ok(RedriveAllowPolicy::DenyAll),
            2 => Ok(RedriveAllowPolicy::ByQueue(r.list(|r| r.string())?)),
            t => Err(format!("unknown redrive allow policy {t}")),
        })?,
    };
    let tags: BTreeMap<String, String> = r
        .list(|r| Ok((r.string()?, r.string()?)))?
        .into_iter()
        .collect();
    // Read in the order written: the sequence number sits between the stats and the purge mark.
    let created_ms = r.u64()?;
    let modified_ms = r.u64()?;
    let last_purge_ms = r.opt(|r| r.u64())?;
    let mut stats = QueueStats::default();
    for counter in stats.values_mut() {
        *counter = r.u64()?;
    }
    let next_seq = r.u64()?;
    let purged_below_seq = if r.at_end() { 0 } else { r.u64()? };
    let stripes = if r.at_end() { 1 } else { r.u32()?.max(1) };
    if stripes as usize > leasehold_engine::MAX_STRIPES || (s.fifo && stripes > 1) {
        return Err(format!(
            "a queue of {stripes} stripes, more than it can be split into"
        ));
    }
    Ok(QueueRecord {
        name,
        meta: QueueMeta {
            id,
            settings: s,
            tags,
            created_ms,
            modified_ms,
            last_purge_ms,
            purged_below_seq,
            stats,
            stripes,
        },
        next_seq,
        stripe: 0,
    })
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
    let mut w = Writer(Vec::with_capacity(content.body.len() + 16));
    w.u8(VERSION);
    w.str(&content.body);
    w.opt(&content.attributes, |w, a| write_attributes(w, a));
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

// ---- primitives ----

struct Writer(Vec<u8>);

impl Writer {
    fn new() -> Writer {
        Writer(vec![VERSION])
    }
    fn raw(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.raw(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.raw(&v.to_be_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.raw(b);
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn opt<T>(&mut self, v: &Option<T>, f: impl FnOnce(&mut Writer, &T)) {
        match v {
            None => self.u8(0),
            Some(x) => {
                self.u8(1);
                f(self, x);
            }
        }
    }
    fn list<T>(&mut self, items: &[T], mut f: impl FnMut(&mut Writer, &T)) {
        self.u32(items.len() as u32);
        for item in items {
            f(self, item);
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or("record is truncated")?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn bool(&mut self) -> Result<bool, String> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("bad boolean {b}")),
        }
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_be_bytes(self.array()?))
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn string(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| "text is not UTF-8".to_string())
    }
    fn arc_str(&mut self) -> Result<Arc<str>, String> {
        std::str::from_utf8(self.bytes()?)
            .map(Arc::from)
            .map_err(|_| "text is not UTF-8".to_string())
    }
    fn opt<T>(
        &mut self,
        f: impl FnOnce(&mut Reader<'a>) -> Result<T, String>,
    ) -> Result<Option<T>, String> {
        match self.u8()? {
            0 => Ok(None),
            1 => f(self).map(Some),
            b => Err(format!("bad option tag {b}")),
        }
    }
    fn list<T>(
        &mut self,
        mut f: impl FnMut(&mut Reader<'a>) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        let n = self.u32()? as usize;
        // A length larger than what is left is damage, not a reason to allocate.
        if n > self.buf.len() - self.pos {
            return Err("list length exceeds the record".into());
        }
        (0..n).map(|_| f(self)).collect()
    }
    fn at_end(&self) -> bool {
        self.pos == self.buf.len()
    }

    fn finish(&self) -> Result<(), String> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err("trailing bytes after the record".into())
        }
    }
}

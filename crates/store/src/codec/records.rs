//! The values of the engine's own records: a queue's, its measurements', the engine's and
//! its move tasks', and a message's attributes.

use super::*;

pub(super) fn metrics_value(m: &MetricsRecord) -> Vec<u8> {
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

pub(super) fn write_counts(w: &mut Writer, counts: &Counts) {
    w.list(counts, |w, (value, count)| {
        w.u64(*value);
        w.u64(*count);
    });
}

pub(super) fn read_counts(r: &mut Reader) -> Result<Counts, String> {
    r.list(|r| Ok((r.u64()?, r.u64()?)))
}

pub(super) fn read_windowed(r: &mut Reader) -> Result<WindowedRecord, String> {
    Ok(WindowedRecord {
        total: read_counts(r)?,
        recent: r.list(|r| Ok((r.u64()?, read_counts(r)?)))?,
    })
}

pub(super) fn read_metrics(r: &mut Reader) -> Result<MetricsRecord, String> {
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

pub(super) fn engine_value(e: &EngineRecord) -> Vec<u8> {
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

pub(super) fn read_engine(r: &mut Reader) -> Result<EngineRecord, String> {
    Ok(EngineRecord {
        receipt_key: r.array()?,
        next_queue_id: r.u64()?,
        deleted_at: r.list(|r| Ok((r.string()?, r.u64()?)))?,
        tasks: r.list(read_task)?,
    })
}

pub(super) fn write_task(w: &mut Writer, t: &MoveTask) {
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

pub(super) fn read_task(r: &mut Reader) -> Result<MoveTask, String> {
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
pub(super) fn read_value<T>(
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

pub(super) fn read_queue(r: &mut Reader) -> Result<QueueRecord, String> {
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
        // Files from before contents were sealed (issue 30) may say true, from when it was
        // reported without being done: read as it is, such a queue's new messages are
        // sealed, and the plain contents it held still read.
        sqs_managed_sse: r.bool()?,
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

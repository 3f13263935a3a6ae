//! A queue's stripes as records: each stripe's queue record and measurements under a key of
//! its own (the head's as a queue without stripes always was), read back with their stripe;
//! a deleted queue takes every stripe's records with it; a record written before queues had
//! stripes reads as a queue of one.

use std::collections::BTreeMap;

use leasehold_engine::{Change, MetricsRecord, QueueRecord, QueueSettings, Snapshot};
use leasehold_store::{codec, Op};

fn record(stripe: u32, stripes: u32, next_seq: u64) -> QueueRecord {
    let mut meta = leasehold_engine::QueueMeta {
        id: 7,
        settings: QueueSettings::new(false),
        tags: BTreeMap::new(),
        created_ms: 1,
        modified_ms: 2,
        last_purge_ms: None,
        purged_below_seq: 0,
        stats: Default::default(),
        stripes,
    };
    meta.stats.sent = u64::from(stripe) + 10;
    QueueRecord {
        name: "q".into(),
        meta,
        next_seq,
        stripe,
    }
}

/// What the batch's puts leave, read back as a store's restart would.
fn read_back(changes: &[Change]) -> (Snapshot, BTreeMap<Vec<u8>, Vec<u8>>) {
    let mut kept = BTreeMap::new();
    for op in codec::encode(changes).ops {
        match op {
            Op::Put(k, v) | Op::PutSealed(k, v) => {
                kept.insert(k, v);
            }
            Op::Delete(k) => {
                kept.remove(&k);
            }
            _ => {}
        }
    }
    let mut snapshot = Snapshot::default();
    for (k, v) in &kept {
        codec::decode_into(&mut snapshot, k, v).unwrap();
    }
    (snapshot, kept)
}

#[test]
fn every_stripe_keeps_its_own_records_and_a_deleted_queue_takes_them_all() {
    let metrics = |stripe| Change::Metrics {
        queue_id: 7,
        stripe,
        record: Box::new(MetricsRecord::default()),
    };
    let changes: Vec<Change> = (0..3)
        .flat_map(|s| {
            [
                Change::Queue(Box::new(record(s, 3, 4 + u64::from(s)))),
                metrics(s),
            ]
        })
        .collect();
    let (snapshot, kept) = read_back(&changes);
    assert_eq!(kept.len(), 6);
    let mut queues = snapshot.queues.clone();
    queues.sort_by_key(|q| q.stripe);
    assert_eq!(
        queues,
        (0..3)
            .map(|s| record(s, 3, 4 + u64::from(s)))
            .collect::<Vec<_>>()
    );
    let mut stripes: Vec<(u64, u32)> = snapshot.metrics.iter().map(|(q, s, _)| (*q, *s)).collect();
    stripes.sort();
    assert_eq!(stripes, [(7, 0), (7, 1), (7, 2)]);

    let mut all = changes;
    all.push(Change::QueueDeleted {
        queue_id: 7,
        stripes: 3,
    });
    let (snapshot, kept) = read_back(&all);
    assert!(kept.is_empty(), "left: {kept:?}");
    assert!(snapshot.queues.is_empty());
}

#[test]
fn a_queue_record_written_before_stripes_reads_as_one_stripe() {
    let value = codec::queue_value(&record(0, 1, 9));
    // The last field, the stripe count, appended later: an older record ends before it.
    let older = &value[..value.len() - 4];
    let read = codec::decode_queue(older).unwrap();
    assert_eq!(read.meta.stripes, 1);
    assert_eq!(read.next_seq, 9);
    let damaged = codec::queue_value(&record(0, 10_000, 9));
    assert!(
        codec::decode_queue(&damaged).is_err(),
        "more stripes than any queue has"
    );
}

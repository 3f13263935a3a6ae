//! The persistence seam: changes taken after every command, applied to a plain map as a
//! store would, rebuild an engine that answers exactly like the original.

use std::collections::BTreeMap;
use std::sync::Arc;

use leasehold_engine::{
    Change, Content, ContentKey, DedupKey, Delivery, Engine, EngineConfig, EngineError,
    EngineRecord, LeaseMode, ManualClock, MetricsRecord, MoveTask, MsgKey, NewMessage, Original,
    QueueRecord, ReceiveRequest, Snapshot, StoredMessage,
};
use proptest::prelude::*;

/// The simplest store: a map per record kind.
#[derive(Default)]
struct MapStore {
    engine: Option<EngineRecord>,
    /// By queue id and stripe.
    queues: BTreeMap<(u64, u32), QueueRecord>,
    messages: BTreeMap<(u64, MsgKey), ([u8; 16], StoredMessage)>,
    contents: BTreeMap<ContentKey, Content>,
    dedup: BTreeMap<(u64, DedupKey), Original>,
    metrics: BTreeMap<(u64, u32), MetricsRecord>,
}

impl MapStore {
    fn apply(&mut self, changes: Vec<Change>) {
        for change in changes {
            match change {
                Change::Engine(record) => self.engine = Some(record),
                Change::Queue(record) => {
                    self.queues.insert((record.meta.id, record.stripe), *record);
                }
                Change::QueueDeleted { queue_id, stripes } => {
                    for stripe in 0..stripes {
                        self.queues.remove(&(queue_id, stripe));
                        self.metrics.remove(&(queue_id, stripe));
                    }
                    self.messages.retain(|(q, _), _| *q != queue_id);
                    self.contents.retain(|at, _| at.queue_id != queue_id);
                    self.dedup.retain(|(q, _), _| *q != queue_id);
                }
                Change::Purged { queue_id, .. } => {
                    self.messages.retain(|(q, _), _| *q != queue_id);
                    self.contents.retain(|at, _| at.queue_id != queue_id);
                }
                Change::Content { at, content, .. } => {
                    self.contents.insert(at, content);
                }
                Change::ContentMoved { from, to } => {
                    let content = self.contents.get(&from).cloned().expect("moved content");
                    self.contents.insert(to, content);
                }
                Change::Metrics {
                    queue_id,
                    stripe,
                    record,
                } => {
                    self.metrics.insert((queue_id, stripe), *record);
                }
                Change::Message {
                    queue_id,
                    key,
                    message,
                } => match message {
                    Some(m) => {
                        self.messages.insert((queue_id, key), m);
                    }
                    None => {
                        self.messages.remove(&(queue_id, key));
                        self.contents.remove(&ContentKey { queue_id, key });
                    }
                },
                Change::Dedup {
                    queue_id,
                    key,
                    original,
                } => match original {
                    Some(o) => {
                        self.dedup.insert((queue_id, key), o);
                    }
                    None => {
                        self.dedup.remove(&(queue_id, key));
                    }
                },
            }
        }
    }

    /// The deliveries with their contents read back, as a backend hands them out.
    fn filled(
        &self,
        deliveries: Result<Vec<Delivery>, EngineError>,
    ) -> Result<Vec<Delivery>, EngineError> {
        let mut deliveries = deliveries?;
        for d in &mut deliveries {
            if let Some(at) = d.unread {
                d.fill(self.contents.get(&at).cloned().expect("a stored content"));
            }
        }
        Ok(deliveries)
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            engine: self.engine.clone(),
            queues: self.queues.values().cloned().collect(),
            messages: self
                .messages
                .iter()
                .map(|((q, k), (id, m))| (*q, *k, *id, m.clone()))
                .collect(),
            dedup: self
                .dedup
                .iter()
                .map(|((q, k), o)| (*q, k.clone(), *o))
                .collect(),
            metrics: self
                .metrics
                .iter()
                .map(|((q, s), r)| (*q, *s, r.clone()))
                .collect(),
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Send {
        queue: usize,
        delay_s: u32,
        group: u8,
    },
    Receive {
        queue: usize,
        max: u32,
        visibility_s: u32,
    },
    Delete {
        pick: usize,
    },
    Change {
        pick: usize,
        seconds: u32,
    },
    Advance {
        ms: u64,
    },
    Purge {
        queue: usize,
    },
    Recreate {
        queue: usize,
    },
}

const QUEUES: [&str; 2] = ["plain", "ordered.fifo"];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 0u32..3, 0u8..3).prop_map(|(queue, delay_s, group)| Op::Send { queue, delay_s, group }),
        3 => (0..2usize, 1u32..4, 0u32..6).prop_map(|(queue, max, visibility_s)| Op::Receive { queue, max, visibility_s }),
        2 => any::<usize>().prop_map(|pick| Op::Delete { pick }),
        1 => (any::<usize>(), 0u32..5).prop_map(|(pick, seconds)| Op::Change { pick, seconds }),
        2 => (0u64..20_000).prop_map(|ms| Op::Advance { ms }),
        1 => (0..2usize).prop_map(|queue| Op::Purge { queue }),
        1 => (0..2usize).prop_map(|queue| Op::Recreate { queue }),
    ]
}

fn create(engine: &mut Engine, queue: usize) {
    let mut attrs = vec![
        ("VisibilityTimeout".to_string(), "3".to_string()),
        ("MessageRetentionPeriod".to_string(), "120".to_string()),
    ];
    if queue == 1 {
        attrs.push(("FifoQueue".into(), "true".into()));
        attrs.push(("ContentBasedDeduplication".into(), "true".into()));
    }
    let _ = engine.create_queue(QUEUES[queue], &attrs, &[]);
}

/// Everything a client could observe about a queue, without changing it.
fn observe(engine: &mut Engine) -> Vec<String> {
    QUEUES
        .iter()
        .map(|q| {
            format!(
                "{q}: {:?} {:?}",
                engine.get_attributes(q, &["All".into()]),
                engine.stats(q)
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn an_engine_restored_from_its_changes_answers_like_the_original(ops in proptest::collection::vec(op(), 1..80)) {
        restores_alike(ops, 1)?;
    }

    /// The same with the standard queue in three stripes: every stripe's record, counters
    /// and numbering come back, each message in the stripe its number names.
    #[test]
    fn a_striped_engine_restored_from_its_changes_answers_like_the_original(ops in proptest::collection::vec(op(), 1..80)) {
        restores_alike(ops, 3)?;
    }
}

fn restores_alike(ops: Vec<Op>, stripes: usize) -> Result<(), TestCaseError> {
    {
        let clock = ManualClock::new(5_000_000);
        let config = EngineConfig {
            lease_mode: LeaseMode::Aws,
            receipt_key: [9; 16],
            seed: 7,
            track_changes: true,
            stripes,
            ..EngineConfig::default()
        };
        let mut engine = Engine::new(Arc::new(clock.clone()), config.clone());
        let mut store = MapStore::default();
        create(&mut engine, 0);
        create(&mut engine, 1);
        store.apply(engine.take_changes());
        let mut handles: Vec<(usize, String)> = Vec::new();
        for (n, op) in ops.into_iter().enumerate() {
            match op {
                Op::Send {
                    queue,
                    delay_s,
                    group,
                } => {
                    let mut m = NewMessage::new(format!("m{n}"));
                    if queue == 1 {
                        m.group_id = Some(format!("g{group}"));
                    } else {
                        m.delay_s = Some(delay_s);
                    }
                    if queue == 0 && stripes > 1 {
                        // Spread over the stripes, as threads working side by side would.
                        let mut changes = Vec::new();
                        let mut sink = |c: Vec<Change>| changes.extend(c);
                        let _ = engine.on_stripe(QUEUES[0], Some(n % stripes), &mut sink, |q| {
                            q.send(m.checked())
                        });
                        store.apply(changes);
                    } else {
                        let _ = engine.send(QUEUES[queue], m);
                    }
                }
                Op::Receive {
                    queue,
                    max,
                    visibility_s,
                } => {
                    let request = ReceiveRequest {
                        max_messages: max,
                        visibility_s: Some(visibility_s),
                        attempt_id: None,
                    };
                    for d in engine.receive(QUEUES[queue], &request).unwrap_or_default() {
                        handles.push((queue, d.receipt_handle));
                    }
                }
                Op::Delete { pick } if !handles.is_empty() => {
                    let (queue, handle) = &handles[pick % handles.len()];
                    let _ = engine.delete_message(QUEUES[*queue], handle);
                }
                Op::Change { pick, seconds } if !handles.is_empty() => {
                    let (queue, handle) = &handles[pick % handles.len()];
                    let _ = engine.change_visibility(QUEUES[*queue], handle, seconds);
                }
                Op::Advance { ms } => clock.advance_ms(ms),
                Op::Purge { queue } => {
                    let _ = engine.purge(QUEUES[queue]);
                }
                Op::Recreate { queue } => {
                    let _ = engine.delete_queue(QUEUES[queue]);
                    clock.advance_ms(60_000);
                    create(&mut engine, queue);
                }
                _ => {}
            }
            prop_assert_eq!(engine.check_invariants(), Ok(()));
            store.apply(engine.take_changes());
        }
        let mut restored = Engine::restore(
            Arc::new(clock.clone()),
            EngineConfig {
                receipt_key: [1; 16],
                ..config
            },
            store.snapshot(),
        );
        prop_assert_eq!(restored.check_invariants(), Ok(()));
        prop_assert_eq!(observe(&mut restored), observe(&mut engine));
        // Old handles still work the same way on both.
        for (queue, handle) in &handles {
            prop_assert_eq!(
                restored
                    .change_visibility(QUEUES[*queue], handle, 0)
                    .map_err(|e| e.to_string()),
                engine
                    .change_visibility(QUEUES[*queue], handle, 0)
                    .map_err(|e| e.to_string())
            );
        }
        // And both deliver the same messages, with the same ids, counts and handles.
        for queue in QUEUES {
            for _ in 0..4 {
                let request = ReceiveRequest {
                    max_messages: 10,
                    visibility_s: Some(30),
                    attempt_id: None,
                };
                let (again, original) = (
                    restored.receive(queue, &request),
                    engine.receive(queue, &request),
                );
                store.apply(engine.take_changes());
                prop_assert_eq!(store.filled(again), store.filled(original));
            }
        }
    }
    Ok(())
}

/// Message ids are derived from a message's place in its queue, not stored with it; one
/// that moves to the dead-letter queue keeps the id it was sent with, across a restart too. A
/// move task's redrive makes a new message, as AWS's does: an id of its own, as stable.
#[test]
fn a_message_keeps_its_id_into_the_dead_letter_queue_and_a_redriven_one_has_its_own() {
    let clock = ManualClock::new(5_000_000);
    let config = EngineConfig {
        receipt_key: [9; 16],
        track_changes: true,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(Arc::new(clock.clone()), config.clone());
    let mut store = MapStore::default();
    let redrive =
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1}"#;
    engine.create_queue("dlq", &[], &[]).unwrap();
    let attrs = [
        ("VisibilityTimeout".to_string(), "1".to_string()),
        ("RedrivePolicy".to_string(), redrive.to_string()),
    ];
    engine.create_queue("src", &attrs, &[]).unwrap();
    let sent = engine.send("src", NewMessage::new("m")).unwrap().message_id;
    let one = ReceiveRequest::up_to(1);
    let ids = |engine: &mut Engine, queue: &str| -> Vec<String> {
        let deliveries = engine.receive(queue, &one).unwrap();
        deliveries.into_iter().map(|d| d.message_id).collect()
    };
    let restart = |engine: &mut Engine, store: &mut MapStore| {
        store.apply(engine.take_changes());
        Engine::restore(Arc::new(clock.clone()), config.clone(), store.snapshot())
    };

    assert_eq!(ids(&mut engine, "src"), [sent.as_str()]);
    clock.advance_ms(1_000);
    assert!(
        ids(&mut engine, "src").is_empty(),
        "moved to the dead-letter queue"
    );
    engine = restart(&mut engine, &mut store);
    assert_eq!(ids(&mut engine, "dlq"), [sent.as_str()]);

    clock.advance_ms(30_000);
    engine
        .start_move_task("arn:aws:sqs:us-east-1:000000000000:dlq", None, None)
        .unwrap();
    engine.run_move_tasks();
    let peeked = |engine: &Engine| -> Vec<String> {
        let peeked = engine.peek("src", 10).unwrap();
        peeked.into_iter().map(|p| p.message_id).collect()
    };
    engine = restart(&mut engine, &mut store);
    let redriven = peeked(&engine);
    assert_eq!(redriven.len(), 1);
    assert_ne!(redriven[0], sent, "a new message");
    engine = restart(&mut engine, &mut store);
    assert_eq!(peeked(&engine), redriven);
    assert_eq!(ids(&mut engine, "src"), redriven);
}

/// The per-account queue quota counts the queues a restart brings back, and a deleted one
/// gives its place back; another account has a quota of its own.
#[test]
fn the_queue_quota_counts_restored_queues_per_account() {
    let clock = ManualClock::new(5_000_000);
    let config = EngineConfig {
        track_changes: true,
        max_queues_per_account: 2,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(Arc::new(clock.clone()), config.clone());
    let mut store = MapStore::default();
    engine.create_queue("a", &[], &[]).unwrap();
    engine.create_queue("b", &[], &[]).unwrap();
    store.apply(engine.take_changes());
    let mut engine = Engine::restore(Arc::new(clock.clone()), config, store.snapshot());
    let over = engine.create_queue("c", &[], &[]).unwrap_err();
    assert!(matches!(over, EngineError::OverLimit(_)), "{over:?}");
    engine.create_queue("a", &[], &[]).unwrap();
    engine.create_queue("222222222222:c", &[], &[]).unwrap();
    engine.delete_queue("a").unwrap();
    engine.create_queue("c", &[], &[]).unwrap();
}

/// Issue 46, defect 6: the generator of move-task ids starts again from the configured seed at
/// every restart, so the first task after one drew the id of the first task ever, which the
/// engine still keeps: a handle named two tasks. A new task's id is never a kept task's.
#[test]
fn a_move_task_started_after_a_restart_never_takes_a_kept_tasks_id() {
    let clock = ManualClock::new(5_000_000);
    let config = EngineConfig {
        track_changes: true,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(Arc::new(clock.clone()), config.clone());
    let mut store = MapStore::default();
    let dlq = "arn:aws:sqs:us-east-1:000000000000:dlq";
    let redrive = format!(r#"{{"deadLetterTargetArn":"{dlq}","maxReceiveCount":1}}"#);
    engine.create_queue("dlq", &[], &[]).unwrap();
    engine
        .create_queue("src", &[("RedrivePolicy".to_string(), redrive)], &[])
        .unwrap();
    for i in 0..5 {
        engine
            .send("dlq", NewMessage::new(format!("m{i}")))
            .unwrap();
    }
    let first = engine.start_move_task(dlq, None, Some(1)).unwrap();
    let _ = engine.cancel_move_task(&first);
    store.apply(engine.take_changes());
    let mut engine = Engine::restore(Arc::new(clock.clone()), config, store.snapshot());
    let second = engine.start_move_task(dlq, None, Some(1)).unwrap();
    let id = |handle: &str| MoveTask::read_handle(handle).unwrap().0;
    assert_ne!(id(&first), id(&second));
}

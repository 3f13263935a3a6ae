//! The PostgreSQL backend against the machine's real PostgreSQL (127.0.0.1:5432, database
//! `test`), each test in a schema of its own. Test names carry `postgres`, which is how
//! `scripts/test --no-services` skips them.

use leasehold_backend::{Messages, QueueAdmin};
use std::sync::Arc;

use leasehold_backend::{Backend, BackendError};
use leasehold_engine::{EngineError, NewMessage, ReceiveRequest};
use leasehold_postgres::{Options, Postgres, StartError};

mod common;
use common::{admin, naming, Schema, URL};
use tokio::task::JoinSet;

fn receive(max: u32, visibility_s: Option<u32>) -> ReceiveRequest {
    ReceiveRequest {
        max_messages: max,
        visibility_s,
        attempt_id: None,
    }
}

/// Two servers creating queues in one account at once: the quota is counted under the
/// account's lock, so exactly the quota is made, never one more, and the refused are
/// OverLimit; another account's quota is its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_concurrent_creations_on_two_servers_stop_at_the_account_quota() {
    let schema = Schema::new().await;
    let quota = |_| Options {
        schema: Some(schema.0.clone()),
        max_queues_per_account: 5,
        ..Options::default()
    };
    let servers = Arc::new([
        Postgres::connect(URL, naming(), quota(0)).await.unwrap(),
        Postgres::connect(URL, naming(), quota(1)).await.unwrap(),
    ]);
    let mut creators = JoinSet::new();
    for n in 0..24 {
        let servers = servers.clone();
        creators.spawn(async move {
            let key = format!("q{n}");
            servers[n % 2].create_queue(&key, vec![], vec![]).await
        });
    }
    let results = creators.join_all().await;
    let made = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(made, 5, "{results:?}");
    for refused in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(
            matches!(refused, BackendError::Engine(EngineError::OverLimit(_))),
            "{refused:?}"
        );
    }
    servers[1]
        .create_queue("222222222222:other", vec![], vec![])
        .await
        .unwrap();
    let servers = Arc::into_inner(servers).expect("the creators are done");
    schema.drop_all(servers).await;
}

#[tokio::test]
async fn postgres_a_message_sent_on_one_server_is_received_and_deleted_on_another() {
    let schema = Schema::new().await;
    let (a, b) = (schema.server().await, schema.server().await);
    a.create_queue("q", vec![], vec![]).await.unwrap();
    let sent = a.send("q", NewMessage::new("hello")).await.unwrap();
    let taken = b.receive("q", receive(10, Some(30))).await.unwrap();
    assert_eq!(taken.deliveries.len(), 1);
    let delivery = &taken.deliveries[0];
    assert_eq!(delivery.message_id, sent.message_id);
    assert_eq!(&*delivery.body, "hello");
    assert_eq!(delivery.receive_count, 1);
    // Leased: nobody else gets it; the handle from B deletes it on A.
    assert!(a
        .receive("q", receive(10, None))
        .await
        .unwrap()
        .deliveries
        .is_empty());
    let deleted = a
        .delete("q", vec![delivery.receipt_handle.clone()])
        .await
        .unwrap();
    assert_eq!(deleted, vec![Ok(())]);
    let counts = b
        .get_attributes(
            "q",
            vec![
                "ApproximateNumberOfMessages".into(),
                "ApproximateNumberOfMessagesNotVisible".into(),
            ],
        )
        .await
        .unwrap();
    let expected = [
        ("ApproximateNumberOfMessages", "0"),
        ("ApproximateNumberOfMessagesNotVisible", "0"),
    ];
    assert_eq!(
        counts,
        expected
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .to_vec()
    );
    schema.drop_all([a, b]).await;
}

#[tokio::test]
async fn postgres_leases_end_by_the_clusters_clock_and_count_receives() {
    let schema = Schema::new().await;
    let server = schema.server().await;
    server.freeze_clock(Some(1_000_000)).await.unwrap();
    server.create_queue("q", vec![], vec![]).await.unwrap();
    server.send("q", NewMessage::new("m")).await.unwrap();
    let first = server.receive("q", receive(1, Some(30))).await.unwrap();
    assert_eq!(first.deliveries.len(), 1);
    let still = server.receive("q", receive(1, None)).await.unwrap();
    assert!(still.deliveries.is_empty());
    assert_eq!(still.next_due_in_ms, Some(30_000));
    server.freeze_clock(Some(1_030_000)).await.unwrap();
    let again = server.receive("q", receive(1, None)).await.unwrap();
    assert_eq!(again.deliveries[0].receive_count, 2);
    assert_eq!(again.deliveries[0].first_receive_ms, 1_000_000);
    // The first receive's handle still deletes, as on AWS's standard queues.
    let old = first.deliveries[0].receipt_handle.clone();
    assert_eq!(server.delete("q", vec![old]).await.unwrap(), vec![Ok(())]);
    schema.drop_all([server]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_concurrent_receives_never_share_a_message() {
    let schema = Schema::new().await;
    let servers = Arc::new([schema.server().await, schema.server().await]);
    servers[0].create_queue("q", vec![], vec![]).await.unwrap();
    let batch = (0..10)
        .map(|i| NewMessage::new(format!("m{i}")))
        .collect::<Vec<_>>();
    for _ in 0..20 {
        servers[0].send_batch("q", batch.clone()).await.unwrap();
    }
    let mut receivers = JoinSet::new();
    for n in 0..8 {
        let servers = servers.clone();
        receivers.spawn(async move {
            let mut got = Vec::new();
            loop {
                let taken = servers[n % 2]
                    .receive("q", receive(10, Some(300)))
                    .await
                    .unwrap();
                if taken.deliveries.is_empty() {
                    return got;
                }
                got.extend(taken.deliveries.into_iter().map(|d| d.message_id));
            }
        });
    }
    let mut all: Vec<String> = receivers.join_all().await.into_iter().flatten().collect();
    let total = all.len();
    all.sort();
    all.dedup();
    assert_eq!((total, all.len()), (200, 200));
    let servers = Arc::into_inner(servers).expect("the receivers are done");
    schema.drop_all(servers).await;
}

#[tokio::test]
async fn postgres_queue_metadata_follows_the_engines_rules() {
    let schema = Schema::new().await;
    let server = schema.server().await;
    let attributes = vec![("VisibilityTimeout".to_string(), "45".to_string())];
    server
        .create_queue("q", attributes.clone(), vec![])
        .await
        .unwrap();
    // Idempotent for the same attributes, refused for different ones.
    server.create_queue("q", attributes, vec![]).await.unwrap();
    let other = vec![("VisibilityTimeout".to_string(), "46".to_string())];
    let refused = server.create_queue("q", other, vec![]).await;
    assert!(matches!(
        refused,
        Err(BackendError::Engine(EngineError::QueueAlreadyExists(_)))
    ));
    let got = server
        .get_attributes("q", vec!["VisibilityTimeout".into()])
        .await
        .unwrap();
    assert_eq!(
        got,
        vec![("VisibilityTimeout".to_string(), "45".to_string())]
    );
    server
        .tag("q", vec![("team".into(), "a".into())])
        .await
        .unwrap();
    assert_eq!(
        server.list_tags("q").await.unwrap(),
        vec![("team".to_string(), "a".to_string())]
    );
    server.delete_queue("q").await.unwrap();
    assert_eq!(
        server.queue_exists("q").await,
        Err(BackendError::Engine(EngineError::QueueDoesNotExist))
    );
    // A deleted name cannot be reused for a minute, on any server.
    let other_server = schema.server().await;
    let recreated = other_server.create_queue("q", vec![], vec![]).await;
    assert_eq!(
        recreated,
        Err(BackendError::Engine(EngineError::QueueDeletedRecently))
    );
    schema.drop_all([server, other_server]).await;
}

#[tokio::test]
async fn postgres_a_wrong_url_or_an_unreachable_host_is_one_clear_error() {
    let no_host = Postgres::connect(
        "postgres://postgres@127.0.0.1:1/test",
        naming(),
        Options::default(),
    )
    .await;
    let Err(StartError::Connect(why)) = no_host else {
        panic!("an unreachable host must fail to connect");
    };
    assert!(why.contains("refused"), "{why}");
    let bad = Postgres::connect("postgres://[::1", naming(), Options::default()).await;
    assert!(matches!(bad, Err(StartError::Url(_))));
}

#[tokio::test]
async fn postgres_a_schema_newer_than_this_build_is_refused() {
    let schema = Schema::new().await;
    drop(schema.server().await);
    admin(&format!(
        "INSERT INTO {}.refinery_schema_history (version, name, applied_on, checksum) VALUES (99, 'future', 'now', '0')",
        schema.0
    ))
    .await;
    let options = Options {
        schema: Some(schema.0.clone()),
        ..Options::default()
    };
    let refused = Postgres::connect(URL, naming(), options).await;
    let Err(StartError::Schema(why)) = refused else {
        panic!("a newer schema must be refused");
    };
    assert!(why.contains("version 99"), "{why}");
    schema.drop_all([]).await;
}

#[tokio::test]
async fn postgres_a_send_on_one_server_wakes_a_receive_waiting_on_another() {
    let schema = Schema::new().await;
    let (a, b) = (schema.server().await, schema.server().await);
    a.create_queue("q", vec![], vec![]).await.unwrap();
    let notify = a.waiter("q");
    let notified = notify.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    let started = std::time::Instant::now();
    b.send("q", NewMessage::new("from b")).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(2), notified)
        .await
        .expect("the send on b wakes the waiter on a");
    let waited = started.elapsed();
    assert!(waited < std::time::Duration::from_millis(500), "{waited:?}");
    schema.drop_all([a, b]).await;
}

#[tokio::test]
async fn postgres_a_message_received_max_receive_count_times_moves_to_its_dead_letter_queue() {
    let schema = Schema::new().await;
    let server = schema.server().await;
    server.freeze_clock(Some(1_000_000)).await.unwrap();
    server.create_queue("dlq", vec![], vec![]).await.unwrap();
    let policy =
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":"2"}"#;
    let attributes = vec![("RedrivePolicy".to_string(), policy.to_string())];
    server
        .create_queue("src", attributes, vec![])
        .await
        .unwrap();
    let sent = server.send("src", NewMessage::new("poison")).await.unwrap();
    for n in 1..=2u64 {
        let taken = server.receive("src", receive(1, Some(10))).await.unwrap();
        assert_eq!(taken.deliveries.len(), 1, "receive {n}");
        server
            .freeze_clock(Some(1_000_000 + n * 10_000))
            .await
            .unwrap();
    }
    let third = server.receive("src", receive(1, None)).await.unwrap();
    assert!(third.deliveries.is_empty());
    let moved = server.receive("dlq", receive(1, None)).await.unwrap();
    let message = &moved.deliveries[0];
    assert_eq!(message.message_id, sent.message_id);
    assert_eq!(&*message.body, "poison");
    assert_eq!(message.receive_count, 3);
    assert_eq!(
        message.dead_letter_source_arn.as_deref(),
        Some("arn:aws:sqs:us-east-1:000000000000:src")
    );
    // The dead-letter queue's handle deletes it there.
    let handle = message.receipt_handle.clone();
    assert_eq!(
        server.delete("dlq", vec![handle]).await.unwrap(),
        vec![Ok(())]
    );
    schema.drop_all([server]).await;
}

/// A dead-letter move wakes the receives waiting on the dead-letter queue, on this server
/// and on another; a move task's redrive makes a new message (its own id, sent when moved).
#[tokio::test]
async fn postgres_a_dead_letter_move_wakes_the_dead_letter_queue_and_a_redrive_is_a_new_message() {
    let schema = Schema::new().await;
    let (a, b) = (schema.server().await, schema.server().await);
    a.freeze_clock(Some(1_000_000)).await.unwrap();
    a.create_queue("dlq", vec![], vec![]).await.unwrap();
    let policy =
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1}"#;
    let attributes = vec![("RedrivePolicy".to_string(), policy.to_string())];
    a.create_queue("src", attributes, vec![]).await.unwrap();
    let sent = a.send("src", NewMessage::new("poison")).await.unwrap();
    assert_eq!(
        a.receive("src", receive(1, Some(10)))
            .await
            .unwrap()
            .deliveries
            .len(),
        1
    );
    a.freeze_clock(Some(1_010_000)).await.unwrap();
    let (here, there) = (a.waiter("dlq"), b.waiter("dlq"));
    let (here, there) = (here.notified(), there.notified());
    tokio::pin!(here, there);
    here.as_mut().enable();
    there.as_mut().enable();
    assert!(a
        .receive("src", receive(1, None))
        .await
        .unwrap()
        .deliveries
        .is_empty());
    let wait = std::time::Duration::from_secs(2);
    tokio::time::timeout(wait, here)
        .await
        .expect("woken on this server");
    tokio::time::timeout(wait, there)
        .await
        .expect("woken on the other");

    a.freeze_clock(Some(1_020_000)).await.unwrap();
    let back = common::redriven(&a, "src").await;
    assert_eq!(back.len(), 1, "redriven");
    assert_ne!(back[0].message_id, sent.message_id, "a new message");
    assert_eq!(back[0].sent_ms, 1_020_000, "sent when it was moved");
    schema.drop_all([a, b]).await;
}

#[tokio::test]
async fn postgres_a_dead_letter_queue_lists_its_sources_and_a_purge_empties_a_queue() {
    let schema = Schema::new().await;
    let server = schema.server().await;
    server.create_queue("dlq", vec![], vec![]).await.unwrap();
    let policy =
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":"5"}"#;
    for source in ["b-src", "a-src"] {
        let attributes = vec![("RedrivePolicy".to_string(), policy.to_string())];
        server
            .create_queue(source, attributes, vec![])
            .await
            .unwrap();
    }
    let listed = server
        .list_dead_letter_source_queues("dlq", leasehold_backend::Page::default())
        .await
        .unwrap();
    assert_eq!(listed.names, ["a-src", "b-src"]);
    for body in ["x", "y"] {
        server.send("a-src", NewMessage::new(body)).await.unwrap();
    }
    server.purge("a-src").await.unwrap();
    assert!(server
        .receive("a-src", receive(10, None))
        .await
        .unwrap()
        .deliveries
        .is_empty());
    // A second purge within a minute is refused, by the engine's rule.
    let again = server.purge("a-src").await;
    assert!(
        matches!(
            again,
            Err(BackendError::Engine(EngineError::PurgeQueueInProgress(_)))
        ),
        "{again:?}"
    );
    schema.drop_all([server]).await;
}

#[tokio::test]
async fn postgres_messages_past_retention_are_skipped_then_swept() {
    let schema = Schema::new().await;
    let (a, b) = (schema.server().await, schema.server().await);
    a.freeze_clock(Some(1_000_000)).await.unwrap();
    let attributes = vec![("MessageRetentionPeriod".to_string(), "60".to_string())];
    a.create_queue("q", attributes, vec![]).await.unwrap();
    a.send("q", NewMessage::new("old")).await.unwrap();
    a.freeze_clock(Some(1_061_000)).await.unwrap();
    a.send("q", NewMessage::new("new")).await.unwrap();
    let count = a
        .get_attributes("q", vec!["ApproximateNumberOfMessages".into()])
        .await
        .unwrap();
    assert_eq!(count[0].1, "1");
    // Both servers tick at once; the expired row goes, the other stays.
    tokio::join!(a.tick(), b.tick());
    let rows = rows_in(&schema).await;
    assert_eq!(rows, 1);
    let taken = b.receive("q", receive(10, None)).await.unwrap();
    let bodies: Vec<_> = taken.deliveries.iter().map(|d| &*d.body).collect();
    assert_eq!(bodies, ["new"]);
    schema.drop_all([a, b]).await;
}

#[tokio::test]
async fn postgres_a_deleted_queue_goes_at_once_and_its_messages_in_the_background() {
    let schema = Schema::new().await;
    let server = schema.server().await;
    server.create_queue("big", vec![], vec![]).await.unwrap();
    let batch: Vec<_> = (0..10).map(|i| NewMessage::new(format!("m{i}"))).collect();
    for _ in 0..3 {
        server.send_batch("big", batch.clone()).await.unwrap();
    }
    server.delete_queue("big").await.unwrap();
    let gone = server.receive("big", receive(10, None)).await;
    assert!(matches!(
        gone,
        Err(BackendError::Engine(EngineError::QueueDoesNotExist))
    ));
    assert_eq!(rows_in(&schema).await, 30, "the delete itself is short");
    server.tick().await;
    assert_eq!(rows_in(&schema).await, 0, "the sweep took them");
    schema.drop_all([server]).await;
}

/// Messages stored in the schema's table, whatever their state.
async fn rows_in(schema: &Schema) -> i64 {
    let (client, connection) = tokio_postgres::connect(URL, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let sql = format!("SELECT count(*) FROM {}.leasehold_messages", schema.0);
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

/// Four groups, sent concurrently (in order within each group) while four receivers on two
/// servers take up to three messages at a time: every group's messages reach the receivers
/// one lease after another, in the order sent, each exactly once. A receiver deletes what
/// it holds before the group's next message can be handed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_fifo_groups_keep_their_order_across_servers_and_concurrent_receivers() {
    use std::collections::HashMap;
    use std::sync::Mutex;
    const GROUPS: usize = 4;
    const PER_GROUP: usize = 25;
    let (schema, servers) = two_servers_and_a_fifo_queue().await;
    let mut tasks = JoinSet::new();
    for group in 0..GROUPS {
        let servers = servers.clone();
        tasks.spawn(async move {
            for i in 0..PER_GROUP {
                let mut message = NewMessage::new(format!("{group} {i}"));
                message.group_id = Some(format!("g{group}"));
                servers[i % 2].send("q.fifo", message).await.unwrap();
            }
        });
    }
    let next: Arc<Mutex<HashMap<usize, usize>>> = Arc::default();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for n in 0..4 {
        let (servers, next) = (servers.clone(), next.clone());
        tasks.spawn(async move {
            while next.lock().unwrap().values().sum::<usize>() < GROUPS * PER_GROUP {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the receivers stalled"
                );
                let server = &servers[n % 2];
                let taken = server
                    .receive("q.fifo", receive(3, Some(60)))
                    .await
                    .unwrap();
                for delivery in taken.deliveries {
                    let (group, i) = delivery.body.split_once(' ').unwrap();
                    let (group, i): (usize, usize) = (group.parse().unwrap(), i.parse().unwrap());
                    let expected = *next.lock().unwrap().get(&group).unwrap_or(&0);
                    assert_eq!(i, expected, "group {group} out of order");
                    assert_eq!(delivery.receive_count, 1);
                    next.lock().unwrap().insert(group, i + 1);
                    let handle = delivery.receipt_handle;
                    assert_eq!(
                        server.delete("q.fifo", vec![handle]).await.unwrap(),
                        vec![Ok(())]
                    );
                }
            }
        });
    }
    tasks.join_all().await;
    assert!(next.lock().unwrap().values().all(|n| *n == PER_GROUP));
    let servers = Arc::into_inner(servers).expect("the tasks are done");
    schema.drop_all(servers).await;
}

#[tokio::test]
async fn postgres_fifo_deduplicates_replays_attempts_and_refuses_ended_leases() {
    let schema = Schema::new().await;
    let (a, b) = (schema.server().await, schema.server().await);
    a.freeze_clock(Some(1_000_000)).await.unwrap();
    let fifo = vec![("FifoQueue".to_string(), "true".to_string())];
    a.create_queue("q.fifo", fifo, vec![]).await.unwrap();
    let message = |body: &str, dedup: &str| {
        let mut message = NewMessage::new(body);
        message.group_id = Some("g".into());
        message.deduplication_id = Some(dedup.into());
        message
    };
    let first = a.send("q.fifo", message("one", "d1")).await.unwrap();
    // The same id on the other server within five minutes: the original answers.
    let again = b.send("q.fifo", message("other body", "d1")).await.unwrap();
    assert_eq!(again.message_id, first.message_id);
    assert_eq!(again.sequence_number, first.sequence_number);
    let second = b.send("q.fifo", message("two", "d2")).await.unwrap();
    assert!(second.sequence_number > first.sequence_number);

    // A receive retried with its attempt id, on either server, gets the same messages and
    // handles back.
    let attempt = ReceiveRequest {
        max_messages: 10,
        visibility_s: Some(30),
        attempt_id: Some("try-1".into()),
    };
    let got = a.receive("q.fifo", attempt.clone()).await.unwrap();
    let bodies: Vec<&str> = got.deliveries.iter().map(|d| &*d.body).collect();
    assert_eq!(bodies, ["one", "two"]);
    assert_eq!(got.deliveries[0].sequence_number, first.sequence_number);
    assert_eq!(got.deliveries[0].group_id.as_deref(), Some("g"));
    let replayed = b.receive("q.fifo", attempt.clone()).await.unwrap();
    let handles = |r: &leasehold_backend::Received| -> Vec<String> {
        r.deliveries
            .iter()
            .map(|d| d.receipt_handle.clone())
            .collect()
    };
    assert_eq!(handles(&replayed), handles(&got));

    // Once the lease is over, its handle neither deletes nor extends: the message is back.
    a.freeze_clock(Some(1_031_000)).await.unwrap();
    let old = got.deliveries[0].receipt_handle.clone();
    let refused = b.delete("q.fifo", vec![old.clone()]).await.unwrap();
    assert!(matches!(
        refused[0],
        Err(EngineError::ReceiptHandleExpired(_))
    ));
    let refused = b
        .change_visibility("q.fifo", vec![(old, 10)])
        .await
        .unwrap();
    assert!(matches!(
        refused[0],
        Err(EngineError::ReceiptHandleExpired(_))
    ));
    let retaken = b.receive("q.fifo", receive(1, Some(30))).await.unwrap();
    assert_eq!(retaken.deliveries[0].receive_count, 2);

    // Five minutes on, the id may be sent again; a purge forgets it at once.
    a.freeze_clock(Some(1_301_000)).await.unwrap();
    let fresh = a.send("q.fifo", message("three", "d1")).await.unwrap();
    assert_ne!(fresh.message_id, first.message_id);
    a.purge("q.fifo").await.unwrap();
    let after_purge = a.send("q.fifo", message("four", "d1")).await.unwrap();
    assert_ne!(after_purge.message_id, fresh.message_id);
    schema.drop_all([a, b]).await;
}

/// FIFO batches naming the same groups in opposite orders, sent at once on two servers: each
/// takes its groups' send locks in one order, so neither waits on the other in a cycle (a
/// deadlock PostgreSQL would break by failing one).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_fifo_batches_naming_groups_in_other_orders_both_succeed() {
    let (schema, servers) = two_servers_and_a_fifo_queue().await;
    let mut senders = JoinSet::new();
    for n in 0..2usize {
        let servers = servers.clone();
        senders.spawn(async move {
            for round in 0..25 {
                let mut groups = ["g0", "g1", "g2", "g3"];
                if n == 1 {
                    groups.reverse();
                }
                let batch = groups
                    .iter()
                    .map(|g| {
                        let mut message = NewMessage::new(format!("{n} {round} {g}"));
                        message.group_id = Some(g.to_string());
                        message
                    })
                    .collect();
                let sent = servers[n].send_batch("q.fifo", batch).await.unwrap();
                assert!(sent.iter().all(Result::is_ok), "{sent:?}");
            }
        });
    }
    senders.join_all().await;
    let servers = Arc::into_inner(servers).expect("the senders are done");
    schema.drop_all(servers).await;
}

/// Two servers on a schema of their own, and a FIFO queue `q.fifo` with content-based
/// deduplication.
async fn two_servers_and_a_fifo_queue() -> (Schema, Arc<[Postgres; 2]>) {
    let schema = Schema::new().await;
    let servers = Arc::new([schema.server().await, schema.server().await]);
    let fifo = vec![
        ("FifoQueue".to_string(), "true".to_string()),
        ("ContentBasedDeduplication".to_string(), "true".to_string()),
    ];
    servers[0]
        .create_queue("q.fifo", fifo, vec![])
        .await
        .unwrap();
    (schema, servers)
}

//! Races between two transactions on PostgreSQL (issue 46, defects 10 and 11), each made to
//! happen by a connection of the test's own that holds a row's lock at the moment that
//! matters. Test names carry `postgres`, which is how `scripts/test --no-services` skips them.

use leasehold_backend::{Backend, Measurements, Messages, MoveTaskStart, QueueAdmin};
use std::sync::Arc;

use leasehold_engine::{EngineError, MoveTaskStatus, NewMessage, ReceiveRequest};
use leasehold_postgres::Postgres;

mod common;
use common::{Schema, URL};

/// A connection of the test's own in the schema, beside the server's.
async fn connection(schema: &Schema) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(URL, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!("SET search_path = {}", schema.0))
        .await
        .unwrap();
    client
}

fn fifo() -> Vec<(String, String)> {
    vec![
        ("FifoQueue".to_string(), "true".to_string()),
        ("ContentBasedDeduplication".to_string(), "true".to_string()),
    ]
}

fn in_group(body: &str) -> NewMessage {
    let mut message = NewMessage::new(body);
    message.group_id = Some("g".into());
    message
}

/// The retention sweep deleted a deduplication id that had just been renewed: it chose the
/// rows past their window in one snapshot and deleted them by key, never looking again at
/// the expiry of the row it deleted, so a resend within the (renewed) window was taken as new.
#[tokio::test]
async fn postgres_the_sweep_keeps_a_deduplication_id_renewed_while_it_ran() {
    let schema = Schema::new().await;
    let server = schema.server().await;
    server.create_queue("q.fifo", fifo(), vec![]).await.unwrap();
    server.send("q.fifo", in_group("once")).await.unwrap();
    let test = connection(&schema).await;
    // Past its window, as far as the sweep's first look goes.
    test.execute("UPDATE leasehold_dedup SET expires_ms = 0", &[])
        .await
        .unwrap();
    // Renewed by a transaction still open when the sweep runs.
    let mut renewer = connection(&schema).await;
    let renewal = renewer.transaction().await.unwrap();
    renewal
        .execute(
            "UPDATE leasehold_dedup SET expires_ms = 9000000000000000",
            &[],
        )
        .await
        .unwrap();
    let sweep = tokio::spawn(async move {
        server.tick().await;
        server
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    renewal.commit().await.unwrap();
    let server = sweep.await.unwrap();
    let kept: i64 = test
        .query_one("SELECT count(*) FROM leasehold_dedup", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 1, "the renewed deduplication id was swept");
    schema.drop_all([server]).await;
}

/// A move task's round took the ready messages SKIP LOCKED: with the oldest held by another
/// transaction at that moment, it moved the group's later messages first, and a round that
/// found only held ones called the task complete with messages left. Now a round moves up to
/// the first held message, and the task runs on until it has moved it.
#[tokio::test]
async fn postgres_a_move_task_waits_for_a_held_message_and_keeps_its_group_in_order() {
    let schema = Schema::new().await;
    let server = schema.server().await;
    for queue in ["dlq.fifo", "dest.fifo"] {
        server.create_queue(queue, fifo(), vec![]).await.unwrap();
    }
    let arn = |q: &str| format!("arn:aws:sqs:us-east-1:000000000000:{q}");
    let redrive = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":1}}"#,
        arn("dlq.fifo")
    );
    let mut source = fifo();
    source.push(("RedrivePolicy".into(), redrive));
    server
        .create_queue("src.fifo", source, vec![])
        .await
        .unwrap();
    for body in ["m1", "m2", "m3"] {
        server.send("dlq.fifo", in_group(body)).await.unwrap();
    }
    let mut holder = connection(&schema).await;
    let held = holder.transaction().await.unwrap();
    let locked = held
        .execute(
            "SELECT 1 FROM leasehold_messages m JOIN leasehold_queues q ON q.id = m.queue_id
             WHERE q.key = 'dlq.fifo' ORDER BY m.seq LIMIT 1 FOR UPDATE OF m",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(locked, 1, "the oldest message is held");
    let task = MoveTaskStart {
        source_arn: arn("dlq.fifo"),
        destination_arn: Some(arn("dest.fifo")),
        per_second: None,
    };
    server.start_move_task(task).await.unwrap();
    let task = || async {
        let tasks = server
            .list_move_tasks(&arn("dlq.fifo"), None)
            .await
            .unwrap();
        (tasks[0].status, tasks[0].moved)
    };
    assert_eq!(task().await, (MoveTaskStatus::Running, 0));
    held.commit().await.unwrap();
    assert_eq!(task().await, (MoveTaskStatus::Completed, 3));
    let request = ReceiveRequest {
        max_messages: 10,
        visibility_s: Some(30),
        attempt_id: None,
    };
    let got = server.receive("dest.fifo", request).await.unwrap();
    let bodies: Vec<&str> = got.deliveries.iter().map(|d| &*d.body).collect();
    assert_eq!(bodies, ["m1", "m2", "m3"]);
    schema.drop_all([server]).await;
}

/// A queue `held` with one message per body, all received with a lease of 30 s: their
/// handles, in order.
async fn leased(server: &Postgres, bodies: &[&str]) -> Vec<String> {
    server.create_queue("held", vec![], vec![]).await.unwrap();
    for body in bodies {
        server.send("held", NewMessage::new(*body)).await.unwrap();
    }
    let request = ReceiveRequest {
        max_messages: u32::try_from(bodies.len()).unwrap(),
        visibility_s: Some(30),
        attempt_id: None,
    };
    let taken = server.receive("held", request).await.unwrap().deliveries;
    assert_eq!(taken.len(), bodies.len());
    taken.into_iter().map(|d| d.receipt_handle).collect()
}

type Deleting = tokio::task::JoinHandle<leasehold_backend::Result<Vec<Result<(), EngineError>>>>;

/// A delete of `handles` from `held`, on a task of its own.
fn delete_later(server: &Arc<Postgres>, handles: Vec<String>) -> Deleting {
    let server = server.clone();
    tokio::spawn(async move { server.delete("held", handles).await })
}

/// What the delete answered, once the row it waits for is free (`why`, if it never is).
async fn answered(deleting: Deleting, why: &str) -> Vec<Result<(), EngineError>> {
    tokio::time::timeout(std::time::Duration::from_secs(10), deleting)
        .await
        .expect(why)
        .unwrap()
        .unwrap()
}

/// A delete whose message another transaction holds (a purge, a claim, a server's long
/// statement) used to wait in its group's transaction, and every request of that server's
/// groups waited with it. Now the group passes the row over, commits the rest, and the
/// delete of that one waits in a transaction of its own.
#[tokio::test]
async fn postgres_a_delete_waiting_for_a_held_message_holds_up_no_other_request() {
    let schema = Schema::new().await;
    let server = Arc::new(schema.server().await);
    let handles = leased(&server, &["a", "b"]).await;
    server.create_queue("other", vec![], vec![]).await.unwrap();
    let held_seq = {
        let test = connection(&schema).await;
        let row = test
            .query_one("SELECT min(seq) FROM leasehold_messages", &[])
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    // The oldest message's row, held by a transaction of the test's own.
    let mut holder = connection(&schema).await;
    let hold = holder.transaction().await.unwrap();
    hold.execute(
        "SELECT 1 FROM leasehold_messages WHERE seq = $1 FOR UPDATE",
        &[&held_seq],
    )
    .await
    .unwrap();
    let deleting = delete_later(&server, handles);
    // Meanwhile the server's other requests go on.
    let sent = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        server.send("other", NewMessage::new("meanwhile")),
    )
    .await;
    assert!(
        matches!(sent, Ok(Ok(_))),
        "a send waited behind the held delete"
    );
    let got = server
        .receive("other", ReceiveRequest::up_to(1))
        .await
        .unwrap();
    assert_eq!(got.deliveries.len(), 1);
    // The free message is gone already; the held one waits for its row.
    let test = connection(&schema).await;
    let left = |test: tokio_postgres::Client| async move {
        let row = test
            .query_one(
                "SELECT count(*) FROM leasehold_messages m JOIN leasehold_queues q
                 ON q.id = m.queue_id WHERE q.key LIKE '%held'",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    assert_eq!(left(test).await, 1, "the free message was deleted at once");
    assert!(!deleting.is_finished(), "the held one waits");
    hold.rollback().await.unwrap();
    let deleted = answered(deleting, "the delete finishes once the row is free").await;
    assert_eq!(deleted, vec![Ok(()), Ok(())]);
    assert_eq!(left(connection(&schema).await).await, 0);
    let server = Arc::try_unwrap(server).ok().unwrap();
    schema.drop_all([server]).await;
}

/// A delete whose message another transaction holds and then removes (a purge, another
/// server's delete): the group passes it over, the delete of its own waits, finds it gone,
/// and counts what it was: a repeat delete, duplicate work, not nothing.
#[tokio::test]
async fn postgres_a_held_message_removed_by_its_holder_counts_as_a_repeat_delete() {
    let schema = Schema::new().await;
    let server = Arc::new(schema.server().await);
    let handles = leased(&server, &["a"]).await;
    let mut holder = connection(&schema).await;
    let hold = holder.transaction().await.unwrap();
    hold.execute("DELETE FROM leasehold_messages", &[])
        .await
        .unwrap();
    let deleting = delete_later(&server, handles);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!deleting.is_finished(), "the delete waits for the held row");
    hold.commit().await.unwrap();
    let deleted = answered(deleting, "the delete finishes once the row is gone").await;
    assert_eq!(deleted, vec![Ok(())]);
    let stats = server.lease_report("held").await.unwrap().stats;
    assert_eq!((stats.deleted, stats.repeat_deletes), (0, 1));
    let server = Arc::try_unwrap(server).ok().unwrap();
    schema.drop_all([server]).await;
}

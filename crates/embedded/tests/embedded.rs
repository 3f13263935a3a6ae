//! The embedded backend at its seam: typed commands in, typed replies out, and the wake-ups a
//! long poll depends on.

use leasehold_backend::{Measurements, Messages, MoveTaskStart, QueueAdmin};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use leasehold_backend::{Backend, BackendError};
use leasehold_embedded::{Embedded, EngineSetup};
use leasehold_engine::{EngineConfig, EngineError, ManualClock, NewMessage, ReceiveRequest};
use leasehold_store::{Durability, FaultyStore, MemoryStore};
use tokio::sync::futures::Notified;

fn setup(clock: &ManualClock) -> EngineSetup {
    EngineSetup {
        clock: Arc::new(clock.clone()),
        config: EngineConfig::default(),
    }
}

async fn with_queue(name: &str, attributes: &[(&str, &str)]) -> (Embedded, ManualClock) {
    let clock = ManualClock::new(1_000_000);
    let backend = Embedded::in_memory(setup(&clock));
    let attributes = attributes
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    backend
        .create_queue(name, attributes, vec![])
        .await
        .unwrap();
    (backend, clock)
}

/// How many of `waiting` were woken.
async fn woken(waiting: &mut [Pin<Box<Notified<'_>>>]) -> usize {
    let mut count = 0;
    for notified in waiting {
        let wait = tokio::time::timeout(Duration::from_millis(20), notified.as_mut());
        count += usize::from(wait.await.is_ok());
    }
    count
}

fn waiting(notify: &tokio::sync::Notify, count: usize) -> Vec<Pin<Box<Notified<'_>>>> {
    (0..count)
        .map(|_| {
            let mut notified = Box::pin(notify.notified());
            notified.as_mut().enable();
            notified
        })
        .collect()
}

fn one() -> ReceiveRequest {
    ReceiveRequest {
        max_messages: 1,
        ..ReceiveRequest::default()
    }
}

#[tokio::test]
async fn a_send_wakes_one_waiting_receive_per_message_sent() {
    let (backend, _clock) = with_queue("q", &[]).await;
    let notify = backend.waiter("q");
    let mut receives = waiting(&notify, 5);
    backend.send("q", NewMessage::new("a")).await.unwrap();
    let batch = vec![NewMessage::new("b"), NewMessage::new("c")];
    backend.send_batch("q", batch).await.unwrap();
    assert_eq!(woken(&mut receives).await, 3);
}

#[tokio::test]
async fn a_receive_that_leaves_messages_behind_wakes_the_next_waiter() {
    let (backend, _clock) = with_queue("q", &[]).await;
    backend.send("q", NewMessage::new("a")).await.unwrap();
    backend.send("q", NewMessage::new("b")).await.unwrap();
    let notify = backend.waiter("q");
    let mut receives = waiting(&notify, 3);
    backend.receive("q", one()).await.unwrap();
    assert_eq!(woken(&mut receives).await, 1);
}

#[tokio::test]
async fn a_release_wakes_a_waiter_and_a_fifo_delete_frees_its_group() {
    let (backend, _clock) = with_queue("q.fifo", &[("FifoQueue", "true")]).await;
    for body in ["first", "second"] {
        let mut message = NewMessage::new(body);
        message.group_id = Some("g".into());
        message.deduplication_id = Some(body.into());
        backend.send("q.fifo", message).await.unwrap();
    }
    let taken = backend.receive("q.fifo", one()).await.unwrap();
    let handle = taken.deliveries[0].receipt_handle.clone();
    let notify = backend.waiter("q.fifo");

    let mut receives = waiting(&notify, 2);
    let released = backend
        .change_visibility("q.fifo", vec![(handle.clone(), 0)])
        .await
        .unwrap();
    assert_eq!(released, vec![Ok(())]);
    assert_eq!(woken(&mut receives).await, 1);

    let handle = backend.receive("q.fifo", one()).await.unwrap().deliveries[0]
        .receipt_handle
        .clone();
    let mut receives = waiting(&notify, 2);
    let deleted = backend.delete("q.fifo", vec![handle]).await.unwrap();
    assert_eq!(deleted, vec![Ok(())]);
    assert_eq!(woken(&mut receives).await, 1);
}

#[tokio::test]
async fn an_empty_receive_says_the_queues_wait_and_when_its_next_lease_ends() {
    let (backend, clock) = with_queue("q", &[("ReceiveMessageWaitTimeSeconds", "7")]).await;
    backend.send("q", NewMessage::new("a")).await.unwrap();
    let request = ReceiveRequest {
        max_messages: 1,
        visibility_s: Some(30),
        attempt_id: None,
    };
    assert_eq!(
        backend
            .receive("q", request)
            .await
            .unwrap()
            .deliveries
            .len(),
        1
    );
    clock.advance_ms(10_000);
    let empty = backend.receive("q", one()).await.unwrap();
    assert!(empty.deliveries.is_empty());
    assert_eq!(empty.queue_wait_s, 7);
    assert_eq!(empty.next_due_in_ms, Some(20_000));
}

#[tokio::test]
async fn a_batch_answers_each_entry_and_a_missing_queue_answers_for_the_whole() {
    let (backend, _clock) = with_queue("q", &[]).await;
    let results = backend.delete("q", vec!["forged".into()]).await.unwrap();
    assert!(matches!(
        results[0],
        Err(EngineError::ReceiptHandleIsInvalid(_))
    ));
    let missing = backend.delete("nope", vec!["forged".into()]).await;
    assert_eq!(
        missing,
        Err(BackendError::Engine(EngineError::QueueDoesNotExist))
    );
}

#[tokio::test]
async fn after_a_failed_write_changes_fail_and_reads_show_only_what_was_acknowledged() {
    let clock = ManualClock::new(1_000_000);
    let mut store = FaultyStore::new(MemoryStore::default());
    store.fail_write = Some(4);
    let backend = Embedded::durable(setup(&clock), Box::new(store), Durability::Always).unwrap();
    backend.create_queue("q", vec![], vec![]).await.unwrap();
    let mut acknowledged = 0;
    let failure = loop {
        match backend.send("q", NewMessage::new("m")).await {
            Ok(_) => acknowledged += 1,
            Err(error) => break error,
        }
        assert!(acknowledged < 10, "the fourth write never failed");
    };
    assert!(matches!(failure, BackendError::Failed(_)), "{failure:?}");
    let later = backend.send("q", NewMessage::new("refused")).await;
    assert!(matches!(later, Err(BackendError::Failed(_))), "{later:?}");
    let counts = backend
        .get_attributes("q", vec!["ApproximateNumberOfMessages".into()])
        .await
        .unwrap();
    let visible = acknowledged.to_string();
    assert_eq!(
        counts,
        vec![("ApproximateNumberOfMessages".into(), visible)]
    );
}

#[tokio::test]
async fn a_write_that_finds_the_disk_full_fails_alone_and_the_backend_takes_writes_again() {
    let clock = ManualClock::new(1_000_000);
    let mut store = FaultyStore::new(MemoryStore::default());
    store.full_at_write = Some(4);
    let backend = Embedded::durable(setup(&clock), Box::new(store), Durability::Always).unwrap();
    backend.create_queue("q", vec![], vec![]).await.unwrap();
    let mut acknowledged = Vec::new();
    let mut refused = Vec::new();
    for n in 0..5 {
        let body = format!("m{n}");
        match backend.send("q", NewMessage::new(body.clone())).await {
            Ok(_) => acknowledged.push(body),
            Err(error) => {
                assert!(matches!(error, BackendError::Unavailable(_)), "{error:?}");
                refused.push(body);
            }
        }
    }
    assert_eq!(refused.len(), 1, "one write found the disk full");
    assert_eq!(backend.ready().await, Ok(()));
    let mut received = Vec::new();
    loop {
        let got = backend
            .receive("q", ReceiveRequest::up_to(10))
            .await
            .unwrap();
        if got.deliveries.is_empty() {
            break;
        }
        received.extend(got.deliveries.into_iter().map(|d| d.body.to_string()));
    }
    received.sort();
    assert_eq!(received, acknowledged, "the refused send is nowhere");
}

const ARN: &str = "arn:aws:sqs:us-east-1:000000000000:";

/// A source queue "src" whose RedrivePolicy sends to "dlq" after one receive, leases of 1 s.
async fn with_dead_letter_queue(backend: &Embedded) {
    backend.create_queue("dlq", vec![], vec![]).await.unwrap();
    let policy = format!(r#"{{"deadLetterTargetArn":"{ARN}dlq","maxReceiveCount":1}}"#);
    let attributes = vec![
        ("RedrivePolicy".to_string(), policy),
        ("VisibilityTimeout".to_string(), "1".to_string()),
    ];
    backend
        .create_queue("src", attributes, vec![])
        .await
        .unwrap();
}

/// How many messages one receive of up to one got.
async fn received(backend: &Embedded, queue: &str) -> usize {
    backend
        .receive(queue, one())
        .await
        .unwrap()
        .deliveries
        .len()
}

/// Every attribute of the queue.
async fn all(backend: &Embedded, queue: &str) -> Vec<(String, String)> {
    let names = vec!["All".to_string()];
    backend.get_attributes(queue, names).await.unwrap()
}

fn move_back() -> MoveTaskStart {
    MoveTaskStart {
        source_arn: format!("{ARN}dlq"),
        destination_arn: Some(format!("{ARN}src")),
        per_second: None,
    }
}

#[tokio::test]
async fn a_dead_letter_move_and_a_move_task_wake_the_receives_waiting_where_messages_arrive() {
    let clock = ManualClock::new(1_000_000);
    let backend = Embedded::in_memory(setup(&clock));
    with_dead_letter_queue(&backend).await;
    backend.send("src", NewMessage::new("m")).await.unwrap();
    assert_eq!(received(&backend, "src").await, 1);
    clock.advance_ms(1_000);

    let dlq = backend.waiter("dlq");
    let mut on_dlq = waiting(&dlq, 2);
    let moved = backend.receive("src", one()).await.unwrap();
    assert!(moved.deliveries.is_empty(), "moved, not delivered");
    assert_eq!(woken(&mut on_dlq).await, 1, "the dead-letter queue's poll");

    let src = backend.waiter("src");
    let mut on_src = waiting(&src, 2);
    backend.start_move_task(move_back()).await.unwrap();
    assert!(woken(&mut on_src).await >= 1, "the source's poll");
    assert_eq!(received(&backend, "src").await, 1);
}

#[tokio::test]
async fn a_redriven_message_is_a_new_message_with_its_own_id_and_send_time() {
    let clock = ManualClock::new(1_000_000);
    let backend = Embedded::in_memory(setup(&clock));
    with_dead_letter_queue(&backend).await;
    let sent = backend.send("dlq", NewMessage::new("m")).await.unwrap();
    clock.advance_ms(5_000);
    backend.start_move_task(move_back()).await.unwrap();
    let back = backend
        .receive("src", one())
        .await
        .unwrap()
        .deliveries
        .remove(0);
    assert_ne!(back.message_id, sent.message_id);
    assert_eq!(back.sent_ms, 1_005_000, "sent when it was moved");
    assert_eq!(back.receive_count, 1);
}

#[tokio::test]
async fn serving_reads_only_moves_nothing_and_ends_no_lease_in_memory() {
    let clock = ManualClock::new(1_000_000);
    let mut store = FaultyStore::new(MemoryStore::default());
    store.fail_write = Some(20);
    let backend = Embedded::durable(setup(&clock), Box::new(store), Durability::Always).unwrap();
    with_dead_letter_queue(&backend).await;
    for body in ["a", "b", "c"] {
        backend.send("dlq", NewMessage::new(body)).await.unwrap();
    }
    backend
        .send("src", NewMessage::new("leased"))
        .await
        .unwrap();
    assert_eq!(received(&backend, "src").await, 1);
    let task = MoveTaskStart {
        per_second: Some(1),
        ..move_back()
    };
    backend.start_move_task(task).await.unwrap();
    let mut sends = 0;
    while backend.send("src", NewMessage::new("x")).await.is_ok() {
        sends += 1;
        assert!(sends < 20, "no write failed");
    }
    let (dlq_before, src_before) = (all(&backend, "dlq").await, all(&backend, "src").await);

    clock.advance_ms(10_000);
    let tasks = backend
        .list_move_tasks(&format!("{ARN}dlq"), None)
        .await
        .unwrap();
    assert_eq!(
        tasks[0].moved, 0,
        "no message moved while nothing can be written"
    );
    assert_eq!(all(&backend, "dlq").await, dlq_before);
    assert_eq!(
        all(&backend, "src").await,
        src_before,
        "the lease did not end in memory"
    );
    let report = backend.lease_report("src").await.unwrap();
    assert_eq!(report.stats.leases_expired, 0);
}

#[tokio::test]
async fn a_queue_that_is_its_own_dead_letter_queue_does_not_wake_its_own_polls() {
    let clock = ManualClock::new(1_000_000);
    let backend = Embedded::in_memory(setup(&clock));
    backend.create_queue("loop", vec![], vec![]).await.unwrap();
    let policy = format!(r#"{{"deadLetterTargetArn":"{ARN}loop","maxReceiveCount":1}}"#);
    let attributes = vec![
        ("RedrivePolicy".to_string(), policy),
        ("VisibilityTimeout".to_string(), "1".to_string()),
    ];
    backend.set_attributes("loop", attributes).await.unwrap();
    backend.send("loop", NewMessage::new("m")).await.unwrap();
    assert_eq!(received(&backend, "loop").await, 1);
    clock.advance_ms(1_000);
    let notify = backend.waiter("loop");
    let mut polls = waiting(&notify, 2);
    assert_eq!(received(&backend, "loop").await, 0, "moved onto itself");
    assert_eq!(woken(&mut polls).await, 0, "a poll woken here would spin");
}

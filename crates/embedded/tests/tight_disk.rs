//! The embedded backend at its disk reserve (issue 46): what it does when the file system its
//! store writes to is nearly full (`MemoryStore::with_free_space` reports what a test sets).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use leasehold_backend::{Backend, Messages, MoveTaskStart, QueueAdmin};
use leasehold_embedded::{Embedded, EngineSetup, StoreOptions};
use leasehold_engine::{EngineConfig, ManualClock, NewMessage, ReceiveRequest, MOVE_BATCH_STORED};
use leasehold_store::{Durability, MemoryStore};

const RESERVE: u64 = 64 << 20;

/// A durable backend on a store whose file system reports `free` bytes.
fn durable(clock: &ManualClock, free: &Arc<AtomicU64>) -> Embedded {
    let store = MemoryStore::default().with_free_space(free.clone());
    let setup = EngineSetup {
        clock: Arc::new(clock.clone()),
        config: EngineConfig::default(),
    };
    let options = StoreOptions {
        disk_reserve_bytes: Some(RESERVE),
        ..StoreOptions::from(Durability::Always)
    };
    Embedded::durable(setup, Box::new(store), options).unwrap()
}

/// Queues `src` and its dead-letter queue `dlq`, with `n` messages moved to `dlq`.
async fn dead_letters(backend: &Embedded, n: usize) {
    let redrive =
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1}"#;
    backend.create_queue("dlq", vec![], vec![]).await.unwrap();
    let attributes = vec![("RedrivePolicy".to_string(), redrive.to_string())];
    backend
        .create_queue("src", attributes, vec![])
        .await
        .unwrap();
    for i in 0..n {
        backend
            .send("src", NewMessage::new(format!("m{i}")))
            .await
            .unwrap();
    }
    let bounce = ReceiveRequest {
        max_messages: 10,
        visibility_s: Some(0),
        attempt_id: None,
    };
    // Each message is received twice: the second receive moves it.
    for _ in 0..4 * n.div_ceil(10) {
        if count(backend, "dlq").await == n.to_string() {
            return;
        }
        backend.receive("src", bounce.clone()).await.unwrap();
    }
    panic!("{n} messages did not reach the dead-letter queue");
}

/// A move task with no rate, from `dlq` back to where its messages came from.
fn redrive_all() -> MoveTaskStart {
    MoveTaskStart {
        source_arn: "arn:aws:sqs:us-east-1:000000000000:dlq".into(),
        destination_arn: None,
        per_second: None,
    }
}

async fn count(backend: &Embedded, queue: &str) -> String {
    let counts = backend
        .get_attributes(queue, vec!["ApproximateNumberOfMessages".into()])
        .await
        .unwrap();
    counts[0].1.clone()
}

/// Issue 46, defect 1: below the reserve a move task copied bodies anyway; on a tight disk its
/// write failed, was put back, and the same batch was tried again without end. Now running
/// tasks move nothing below the reserve, and go on by themselves once space returns.
#[tokio::test]
async fn a_move_task_waits_below_the_disk_reserve_and_goes_on_once_space_returns() {
    let clock = ManualClock::new(1_000_000);
    let free = Arc::new(AtomicU64::new(1 << 30));
    let backend = durable(&clock, &free);
    dead_letters(&backend, 20).await;
    free.store(RESERVE / 2, Ordering::SeqCst);
    backend.tick().await;
    assert!(backend.refusing_sends().is_some());
    backend.start_move_task(redrive_all()).await.unwrap();
    for _ in 0..5 {
        clock.advance_ms(1_000);
        backend.tick().await;
    }
    assert_eq!(
        count(&backend, "dlq").await,
        "20",
        "moved below the reserve"
    );
    assert_eq!(count(&backend, "src").await, "0");
    free.store(1 << 30, Ordering::SeqCst);
    backend.tick().await;
    backend.tick().await;
    assert_eq!(count(&backend, "dlq").await, "0");
    assert_eq!(count(&backend, "src").await, "20");
}

/// Issue 46, defect 1: a task with no rate copied up to 10,000 bodies (up to 1 MiB each) in
/// one write, far past the disk reserve. Where a store keeps the bodies, a call moves at most
/// `MOVE_BATCH_STORED` (ten calls a second: 500 a second, AWS's highest rate).
#[tokio::test]
async fn a_move_task_copies_a_bounded_batch_per_write() {
    let clock = ManualClock::new(1_000_000);
    let free = Arc::new(AtomicU64::new(1 << 30));
    let backend = durable(&clock, &free);
    dead_letters(&backend, 120).await;
    backend.start_move_task(redrive_all()).await.unwrap();
    let batch = MOVE_BATCH_STORED as usize;
    assert_eq!(count(&backend, "dlq").await, (120 - batch).to_string());
    backend.tick().await;
    assert_eq!(count(&backend, "dlq").await, (120 - 2 * batch).to_string());
    backend.tick().await;
    assert_eq!(count(&backend, "dlq").await, "0");
    assert_eq!(count(&backend, "src").await, "120");
}

/// Issue 46, defect 1 (after a review): the bound is on one write, not one task, and follows
/// the room above the reserve: with 30 MiB above it, a tick copies at most 30 bodies (of up
/// to 1 MiB each), however many tasks run.
#[tokio::test]
async fn the_moves_of_one_write_fit_the_room_above_the_reserve() {
    let clock = ManualClock::new(1_000_000);
    let free = Arc::new(AtomicU64::new(1 << 30));
    let backend = durable(&clock, &free);
    dead_letters(&backend, 40).await;
    free.store(RESERVE + (30 << 20), Ordering::SeqCst);
    backend.tick().await;
    backend.start_move_task(redrive_all()).await.unwrap();
    assert_eq!(count(&backend, "dlq").await, "10", "moved past the room");
    free.store(RESERVE + (5 << 20), Ordering::SeqCst);
    backend.tick().await;
    assert_eq!(count(&backend, "dlq").await, "5");
}

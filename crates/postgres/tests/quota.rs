//! The in-flight quota on PostgreSQL (`quota.rs`): counted over every server of a cluster,
//! exactly, whatever ends a lease. Test names carry `postgres`, which is how `scripts/test
//! --no-services` skips them.

use futures_util::future::join_all;
use leasehold_backend::{Messages, QueueAdmin, TimeTravel};
use leasehold_engine::{NewMessage, ReceiveRequest};
use leasehold_postgres::{Options, Postgres};

mod common;
use common::{key_file, naming, Schema, URL};

async fn server(schema: &Schema, quota: usize) -> Postgres {
    let options = Options {
        schema: Some(schema.0.clone()),
        max_in_flight_per_queue: quota,
        encryption_key_file: Some(key_file()),
        ..Options::default()
    };
    Postgres::connect(URL, naming(), options).await.unwrap()
}

async fn not_visible(server: &Postgres, queue: &str) -> String {
    let name = "ApproximateNumberOfMessagesNotVisible".to_string();
    server.get_attributes(queue, vec![name]).await.unwrap()[0]
        .1
        .clone()
}

/// Receives of two servers at once, sixteen of ten each, on a queue of 100 messages whose
/// quota is 25: together they lease exactly 25, and every other receive says OverLimit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_two_servers_receiving_at_once_never_pass_the_quota_together() {
    let schema = Schema::new().await;
    let (a, b) = (server(&schema, 25).await, server(&schema, 25).await);
    a.create_queue("q", vec![], vec![]).await.unwrap();
    let batch: Vec<NewMessage> = (0..10).map(|i| NewMessage::new(format!("m{i}"))).collect();
    for _ in 0..10 {
        a.send_batch("q", batch.clone()).await.unwrap();
    }
    let receives = (0..16).map(|i| {
        let server = if i % 2 == 0 { &a } else { &b };
        server.receive("q", ReceiveRequest::up_to(10))
    });
    let answers: Vec<_> = join_all(receives)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let leased: usize = answers.iter().map(|r| r.deliveries.len()).sum();
    assert_eq!(leased, 25);
    assert!(answers
        .iter()
        .all(|r| !r.deliveries.is_empty() || r.over_limit));
    assert_eq!(not_visible(&a, "q").await, "25");
    schema.drop_all([a, b]).await;
}

/// The count follows a delete, a release, an extension, a lease that runs out and a purge,
/// each on either server.
#[tokio::test]
async fn postgres_every_way_a_lease_ends_makes_room() {
    let schema = Schema::new().await;
    let (a, b) = (server(&schema, 3).await, server(&schema, 3).await);
    a.create_queue("q", vec![], vec![]).await.unwrap();
    for i in 0..8 {
        a.send("q", NewMessage::new(format!("m{i}"))).await.unwrap();
    }
    let first = a.receive("q", ReceiveRequest::up_to(10)).await.unwrap();
    assert_eq!(first.deliveries.len(), 3);
    let at_quota = b.receive("q", ReceiveRequest::up_to(10)).await.unwrap();
    assert!(at_quota.deliveries.is_empty() && at_quota.over_limit);

    let handle = |i: usize| first.deliveries[i].receipt_handle.clone();
    b.delete("q", vec![handle(0)]).await.unwrap();
    a.change_visibility("q", vec![(handle(1), 0)])
        .await
        .unwrap();
    // An extension keeps its place: still one lease.
    b.change_visibility("q", vec![(handle(2), 600)])
        .await
        .unwrap();
    let more = b.receive("q", ReceiveRequest::up_to(10)).await.unwrap();
    assert_eq!(more.deliveries.len(), 2);
    assert!(
        b.receive("q", ReceiveRequest::up_to(10))
            .await
            .unwrap()
            .over_limit
    );

    // The two new leases run out (30 s); the extended one does not.
    a.clock_advanced(31_000).await.unwrap();
    let after = a.receive("q", ReceiveRequest::up_to(10)).await.unwrap();
    assert_eq!(after.deliveries.len(), 2);
    assert_eq!(not_visible(&a, "q").await, "3");

    a.purge("q").await.unwrap();
    for i in 0..4 {
        a.send("q", NewMessage::new(format!("n{i}"))).await.unwrap();
    }
    let fresh = b.receive("q", ReceiveRequest::up_to(10)).await.unwrap();
    assert_eq!(fresh.deliveries.len(), 3);
    schema.drop_all([a, b]).await;
}

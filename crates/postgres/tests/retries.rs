//! Honest leases across servers: a delete an SDK retries may reach another server than the
//! one that removed the message, and is a retry there too (`leasehold_recent_deletes`), not
//! a repeat delete; the cluster's lease report and the servers' own measurements agree.

use leasehold_backend::{Backend, Measurements, Messages, QueueAdmin};
use leasehold_engine::{NewMessage, QueueStats, ReceiveRequest};

mod common;
use common::Schema;

fn receive(visibility_s: u32) -> ReceiveRequest {
    ReceiveRequest {
        max_messages: 1,
        visibility_s: Some(visibility_s),
        attempt_id: None,
    }
}

#[tokio::test]
async fn postgres_a_retried_delete_on_another_server_is_a_retry_and_an_old_handle_a_repeat() {
    let schema = Schema::new().await;
    let (a, b) = (schema.server().await, schema.server().await);
    a.create_queue("q", vec![], vec![]).await.unwrap();
    a.send("q", NewMessage::new("work")).await.unwrap();
    // Two receives: the first's lease of 0 s ends at once, the second holds the message.
    let first = a.receive("q", receive(0)).await.unwrap().deliveries;
    let second = a.receive("q", receive(30)).await.unwrap().deliveries;
    let (old, current) = (&first[0].receipt_handle, &second[0].receipt_handle);
    assert_eq!(
        a.delete("q", vec![current.clone()]).await.unwrap(),
        vec![Ok(())]
    );
    // The SDK's retry of that delete reaches B: the message is gone, and it is a retry.
    assert_eq!(
        b.delete("q", vec![current.clone()]).await.unwrap(),
        vec![Ok(())]
    );
    // The first consumer's delete comes after the second's removed it: a repeat delete,
    // duplicate work the queue counts, whichever server it reaches.
    assert_eq!(
        b.delete("q", vec![old.clone()]).await.unwrap(),
        vec![Ok(())]
    );

    // B's measurements reach the database within 2 s; at once when flushed.
    b.flush().await;
    let cluster = a.lease_report("q").await.unwrap().stats;
    let expected = QueueStats {
        sent: 1,
        received: 2,
        deleted: 1,
        deleted_within_lease: 1,
        repeat_deletes: 1,
        leases_expired: 1,
        ..QueueStats::default()
    };
    assert_eq!(cluster, expected, "the cluster's report");
    // Each server's own measurements (its /metrics, which Prometheus adds up) sum to it.
    let own = |reports: Vec<(String, leasehold_engine::LeaseReport)>| {
        reports
            .into_iter()
            .find(|(queue, _)| queue.ends_with("q"))
            .map(|(_, report)| report.stats)
            .unwrap_or_default()
    };
    let (of_a, of_b) = (
        own(a.lease_reports("").await.unwrap()),
        own(b.lease_reports("").await.unwrap()),
    );
    assert_eq!(of_a.deleted + of_b.deleted, 1);
    assert_eq!(of_a.repeat_deletes + of_b.repeat_deletes, 1);
    assert_eq!(
        of_b.repeat_deletes, 1,
        "B counted the old handle's delete, not the retry"
    );
    schema.drop_all([a, b]).await;
}

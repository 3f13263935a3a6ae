//! Durable servers through the SDK: state survives a restart; a failed write is an error to
//! the client, never an acknowledgement.

use leasehold_server::ServerConfig;
use leasehold_store::{Durability, SqliteStore};
use leasehold_store::{FaultyStore, MemoryStore};

use crate::harness::{code, TestServer};

fn config() -> ServerConfig {
    ServerConfig {
        time_travel: true,
        ..ServerConfig::default()
    }
}

async fn durable(dir: &std::path::Path) -> TestServer {
    durable_with(dir, Durability::Always.into()).await
}

async fn durable_with(
    dir: &std::path::Path,
    options: leasehold_embedded::StoreOptions,
) -> TestServer {
    let store = SqliteStore::open(dir).unwrap();
    TestServer::start_state(super::harness::durable(config(), Box::new(store), options).unwrap())
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_messages_leases_and_metadata_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = durable(dir.path()).await;
    s.queue("dlq", &[]).await;
    let redrive =
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":2}"#;
    let url = s
        .queue(
            "work",
            &[("VisibilityTimeout", "120"), ("RedrivePolicy", redrive)],
        )
        .await;
    s.sqs
        .tag_queue()
        .queue_url(&url)
        .tags("team", "core")
        .send()
        .await
        .unwrap();
    let fifo = s.queue("f.fifo", &[("FifoQueue", "true")]).await;
    let first = s
        .sqs
        .send_message()
        .queue_url(&fifo)
        .message_body("x")
        .message_group_id("g")
        .message_deduplication_id("d")
        .send()
        .await
        .unwrap();
    for i in 0..5 {
        s.send(&url, &format!("m{i}")).await;
    }
    let leased = s.receive(&url, 2).await;
    let handle = leased[0].receipt_handle.clone().unwrap();
    s.delete(&url, leased[1].receipt_handle.clone().unwrap())
        .await;
    s.stop().await;

    let s = durable(dir.path()).await;
    assert_eq!(s.attribute(&url, "ApproximateNumberOfMessages").await, "3");
    assert_eq!(
        s.attribute(&url, "ApproximateNumberOfMessagesNotVisible")
            .await,
        "1",
        "the lease kept its expiry"
    );
    assert_eq!(s.attribute(&url, "RedrivePolicy").await, redrive);
    let tags = s
        .sqs
        .list_queue_tags()
        .queue_url(&url)
        .send()
        .await
        .unwrap()
        .tags
        .unwrap();
    assert_eq!(tags["team"], "core");
    // The handle issued before the restart still works, and the receive count carried over.
    s.sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&handle)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let counts = s.receive_counts(&url, 10).await;
    assert_eq!(counts.len(), 4);
    assert!(counts.contains(&"2".to_string()), "{counts:?}");
    // The FIFO deduplication window survived too.
    let dup = s
        .sqs
        .send_message()
        .queue_url(&fifo)
        .message_body("y")
        .message_group_id("g")
        .message_deduplication_id("d")
        .send()
        .await
        .unwrap();
    assert_eq!(dup.message_id, first.message_id);
    s.stop().await;
}

/// A durable server whose store fails its `n`th write and every one after it.
async fn failing_at_write(n: u64) -> TestServer {
    let mut store = FaultyStore::new(MemoryStore::default());
    store.fail_write = Some(n);
    TestServer::start_state(
        super::harness::durable(config(), Box::new(store), Durability::Always).unwrap(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_answers_an_error_and_acknowledges_nothing_after_it() {
    // The seventh write fails. Group commit may merge the first writes (the new receipt key,
    // the queue), so the test counts how many sends got through before the fault.
    let s = failing_at_write(7).await;
    let url = s.queue("q", &[]).await;
    let mut outcomes = Vec::new();
    for i in 0..8 {
        outcomes.push(
            s.sqs
                .send_message()
                .queue_url(&url)
                .message_body(format!("m{i}"))
                .send()
                .await,
        );
    }
    let acked = outcomes.iter().take_while(|o| o.is_ok()).count();
    assert!(
        (1..8).contains(&acked),
        "some sends succeed before the fault: {acked}"
    );
    for failed in &outcomes[acked..] {
        let err = failed.as_ref().unwrap_err();
        assert_eq!(code(err), "InternalFailure");
        assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(500));
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failed_write_nothing_refused_is_visible_and_reads_still_work() {
    let s = failing_at_write(7).await;
    let url = s.queue("q", &[]).await;
    let mut acked = 0;
    for i in 0..12 {
        let sent = s
            .sqs
            .send_message()
            .queue_url(&url)
            .message_body(format!("m{i}"))
            .send()
            .await;
        acked += usize::from(sent.is_ok());
    }
    assert!((1..12).contains(&acked), "{acked} of 12 acknowledged");
    // Counts are what the store holds: the acknowledged sends, not the refused ones.
    assert_eq!(
        s.attribute(&url, "ApproximateNumberOfMessages").await,
        acked.to_string()
    );
    // Reads are served; anything that would change state is refused.
    s.sqs.list_queues().send().await.unwrap();
    s.sqs.get_queue_url().queue_name("q").send().await.unwrap();
    let err = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InternalFailure");
    let err = s
        .sqs
        .create_queue()
        .queue_name("new")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InternalFailure");
    assert!(s
        .sqs
        .get_queue_url()
        .queue_name("new")
        .send()
        .await
        .is_err());
    s.stop().await;
}

async fn leases(s: &TestServer, queue: &str) -> serde_json::Value {
    let url = format!("{}/_leasehold/queues/{queue}/leases", s.base);
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_measurements_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = durable(dir.path()).await;
    let url = s.queue("measured", &[]).await;
    for i in 0..20 {
        s.send(&url, &format!("m{i}")).await;
        let got = s.receive(&url, 1).await.remove(0);
        s.advance(2).await;
        s.delete(&url, got.receipt_handle.unwrap()).await;
    }
    let before = leases(&s, "measured").await;
    s.stop().await;
    let s = durable(dir.path()).await;
    let after = leases(&s, "measured").await;
    assert_eq!(after["lease_hold_ms"]["count"], 20, "{after}");
    for field in [
        "lease_hold_ms",
        "send_to_first_receive_ms",
        "receive_count_histogram",
        "extensions_per_message",
    ] {
        assert_eq!(after[field], before[field], "{field}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_empty_receive_count_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = durable(dir.path()).await;
    let url = s.queue("idle", &[]).await;
    for _ in 0..3 {
        assert!(s.receive(&url, 1).await.is_empty());
    }
    s.stop().await;
    let s = durable(dir.path()).await;
    let after = leases(&s, "idle").await;
    assert_eq!(after["empty_receives"], 3, "{after}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_answers_while_ready_says_when_the_store_takes_no_more_writes() {
    let s = failing_at_write(3).await;
    let get = |path: &'static str| {
        let base = s.base.clone();
        async move {
            let response = reqwest::get(format!("{base}{path}")).await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<serde_json::Value>().await.unwrap())
        }
    };
    assert_eq!(get("/health").await.0, 200);
    assert_eq!(
        get("/ready").await,
        (200, serde_json::json!({"status": "ready"}))
    );
    let url = s.queue("q", &[]).await;
    // Sends until the store's third write fails; after that the store takes no writes.
    for i in 0..5 {
        let _ = s
            .sqs
            .send_message()
            .queue_url(&url)
            .message_body(format!("m{i}"))
            .send()
            .await;
    }
    let (status, body) = get("/ready").await;
    assert_eq!(
        (status, &body["status"]),
        (503, &serde_json::json!("not ready")),
        "{body}"
    );
    assert!(
        body["reason"].as_str().unwrap().contains("store failed"),
        "{body}"
    );
    let (status, body) = get("/health").await;
    assert_eq!(
        (status, body),
        (200, serde_json::json!({"status": "alive"}))
    );
}

/// A durable server keeps message bodies in its store, not in memory: they come back from it
/// with their attributes and checksums, through a dead-letter move, a
/// restart, and a cache too small to hold them; the dashboard's peek reads them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_and_attributes_come_back_from_the_store_through_moves_and_restarts() {
    use aws_sdk_sqs::types::MessageAttributeValue;
    let dir = tempfile::tempdir().unwrap();
    let uncached = leasehold_embedded::StoreOptions {
        body_cache_bytes: 0,
        ..Durability::Always.into()
    };
    let s = durable_with(dir.path(), uncached.clone()).await;
    let dlq = s.queue("dlq", &[]).await;
    let redrive =
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1}"#;
    let url = s
        .queue(
            "work",
            &[("VisibilityTimeout", "1"), ("RedrivePolicy", redrive)],
        )
        .await;
    let big = "é".repeat(100_000);
    let price = MessageAttributeValue::builder()
        .data_type("Number")
        .string_value("3.5")
        .build()
        .unwrap();
    let sent = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body(&big)
        .message_attributes("price", price)
        .send()
        .await
        .unwrap();
    s.send(&url, "small").await;
    let got = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    let first = got.iter().find(|m| m.body.as_deref() == Some(big.as_str()));
    let first = first.expect("the big body, read back from the store");
    assert_eq!(first.md5_of_body, sent.md5_of_message_body);
    assert_eq!(
        first.md5_of_message_attributes,
        sent.md5_of_message_attributes
    );
    s.advance(2).await;
    // Received once already: this receive moves both to the dead-letter queue.
    assert!(s.receive(&url, 10).await.is_empty());
    s.stop().await;

    let s = durable_with(dir.path(), uncached).await;
    let peeked: serde_json::Value = reqwest::get(format!(
        "{}/_leasehold/api/queues/dlq/messages?bodies=true",
        s.base
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let mut peeked_bodies: Vec<&str> = peeked["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["body"].as_str())
        .collect();
    peeked_bodies.sort();
    assert_eq!(peeked_bodies, ["small", big.as_str()]);
    let moved = s
        .sqs
        .receive_message()
        .queue_url(&dlq)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    let mut bodies: Vec<&str> = moved.iter().filter_map(|m| m.body.as_deref()).collect();
    bodies.sort();
    assert_eq!(bodies, ["small", big.as_str()]);
    let big_one = moved
        .iter()
        .find(|m| m.body.as_deref() == Some(big.as_str()));
    let attributes = big_one.unwrap().message_attributes.clone().unwrap();
    assert_eq!(attributes["price"].string_value.as_deref(), Some("3.5"));
    s.stop().await;
}

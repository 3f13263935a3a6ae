//! The dashboard's JSON, on either backend: the queue list with dead-letter queues and their
//! sources, a peek that changes nothing, and a move task back from a dead-letter queue.

use crate::harness::TestServer;

async fn get(server: &TestServer, path: &str) -> serde_json::Value {
    let response = reqwest::get(format!("{}/_leasehold/api{path}", server.base))
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.json().await.unwrap()
}

#[tokio::test]
async fn a_peek_shows_the_oldest_messages_and_changes_nothing() {
    let server = TestServer::start().await;
    let url = server.queue("peeked", &[("VisibilityTimeout", "30")]).await;
    for body in ["first", "second", "third"] {
        server.send(&url, body).await;
    }
    let leased = server.receive(&url, 1).await;
    assert_eq!(leased.len(), 1);
    let peek = get(&server, "/queues/peeked/messages?limit=10").await;
    let messages = peek["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[0]["state"], "in flight");
    assert_eq!(messages[0]["receive_count"], 1);
    assert_eq!(messages[0]["message_id"], leased[0].message_id().unwrap());
    assert_eq!(messages[1]["state"], "visible");
    assert!(messages[1]["body"].is_null(), "bodies only on request");
    let with_bodies = get(&server, "/queues/peeked/messages?bodies=true").await;
    assert_eq!(with_bodies["messages"][2]["body"], "third");
    // Nothing changed: two receivable messages, never received before.
    let rest = server.receive_counts(&url, 10).await;
    assert_eq!(rest, ["1", "1"], "the peek counted no receive");
    let report = get(&server, "/queues/peeked").await;
    assert_eq!(report["report"]["received"], 3);
    server.stop().await;
}

#[tokio::test]
async fn the_queue_list_names_dead_letter_queues_and_a_redrive_moves_them_back() {
    let server = TestServer::start().await;
    let dlq = server.queue("dead", &[]).await;
    let policy =
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dead","maxReceiveCount":1}"#;
    let source = server
        .queue(
            "live",
            &[("RedrivePolicy", policy), ("VisibilityTimeout", "1")],
        )
        .await;
    server.send(&source, "poison").await;
    assert_eq!(server.receive(&source, 1).await.len(), 1);
    server.advance(2).await;
    assert!(server.receive(&source, 1).await.is_empty(), "dead-lettered");
    let queues = get(&server, "/queues").await;
    let row = |key: &str| {
        queues["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["key"] == key)
            .cloned()
            .unwrap()
    };
    assert_eq!(row("live")["dead_letter_queue"], "dead");
    assert_eq!(row("dead")["sources"], serde_json::json!(["live"]));
    assert_eq!(row("dead")["messages"]["visible"], 1);

    let moved = reqwest::Client::new()
        .post(format!(
            "{}/_leasehold/api/queues/dead/redrive",
            server.base
        ))
        .json(&serde_json::json!({"expected": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(moved.status(), 200);
    let moved: serde_json::Value = moved.json().await.unwrap();
    assert_eq!(moved["messages"], 1);
    for _ in 0..100 {
        if server
            .attribute(&source, "ApproximateNumberOfMessages")
            .await
            == "1"
        {
            assert_eq!(
                server.attribute(&dlq, "ApproximateNumberOfMessages").await,
                "0"
            );
            server.stop().await;
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the move task did not move the message back");
}

#[tokio::test]
async fn a_page_of_another_site_cannot_start_a_redrive_through_a_browser() {
    let server = TestServer::start().await;
    server.queue("dead-letters", &[]).await;
    let url = format!("{}/_leasehold/api/queues/dead-letters/redrive", server.base);
    let http = reqwest::Client::new();
    for (header, value) in [
        ("origin", "https://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ] {
        let refused = http.post(&url).header(header, value).send().await.unwrap();
        assert_eq!(refused.status(), 403, "{header}: {value}");
    }
    // The dashboard's own page (same origin) gets past the check to the move task's rules.
    let host = server.base.trim_start_matches("http://").to_string();
    let own = http
        .post(&url)
        .header("origin", format!("http://{host}"))
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .unwrap();
    assert_eq!(
        own.status(),
        400,
        "not a dead-letter queue: the move task's own refusal"
    );
    server.stop().await;
}

//! FIFO queues through the SDK.

use aws_sdk_sqs::types::MessageSystemAttributeName as S;

use crate::harness::{code, TestServer};

async fn fifo(s: &TestServer, name: &str, extra: &[(&str, &str)]) -> String {
    let mut attrs = vec![("FifoQueue", "true")];
    attrs.extend_from_slice(extra);
    s.queue(name, &attrs).await
}

#[tokio::test]
async fn a_group_is_delivered_in_order_one_batch_at_a_time() {
    let s = TestServer::start().await;
    let url = fifo(&s, "g.fifo", &[("ContentBasedDeduplication", "true")]).await;
    for (body, group) in [("a1", "a"), ("b1", "b"), ("a2", "a")] {
        s.sqs
            .send_message()
            .queue_url(&url)
            .message_body(body)
            .message_group_id(group)
            .send()
            .await
            .unwrap();
    }
    let first: Vec<_> = s.receive(&url, 10).await;
    let bodies: Vec<_> = first.iter().map(|m| m.body.clone().unwrap()).collect();
    assert_eq!(bodies, ["a1", "a2", "b1"]);
    assert!(
        s.receive(&url, 10).await.is_empty(),
        "every group has a message in flight"
    );
}

#[tokio::test]
async fn deduplicated_sends_answer_with_the_original_and_sequence_numbers_increase() {
    let s = TestServer::start().await;
    let url = fifo(&s, "d.fifo", &[]).await;
    let send = |body: &str, dedup: &str| {
        s.sqs
            .send_message()
            .queue_url(&url)
            .message_body(body)
            .message_group_id("g")
            .message_deduplication_id(dedup)
            .send()
    };
    let a = send("x", "one").await.unwrap();
    let dup = send("y", "one").await.unwrap();
    let b = send("z", "two").await.unwrap();
    assert_eq!(dup.message_id, a.message_id);
    assert_eq!(dup.sequence_number, a.sequence_number);
    let (sa, sb) = (a.sequence_number.unwrap(), b.sequence_number.unwrap());
    assert!(sb.parse::<u128>().unwrap() > sa.parse::<u128>().unwrap());
    assert_eq!(s.attribute(&url, "ApproximateNumberOfMessages").await, "2");
    let m = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .message_system_attribute_names(S::All)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap()
        .remove(0);
    let attrs = m.attributes.unwrap();
    assert_eq!(attrs[&S::MessageGroupId], "g");
    assert_eq!(attrs[&S::SequenceNumber], sa);
}

#[tokio::test]
async fn fifo_rejects_missing_group_and_per_message_delay() {
    let s = TestServer::start().await;
    let url = fifo(&s, "r.fifo", &[("ContentBasedDeduplication", "true")]).await;
    let err = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "MissingParameter");
    let err = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_group_id("g")
        .delay_seconds(3)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InvalidParameterValue");
}

#[tokio::test]
async fn an_expired_fifo_handle_is_refused() {
    let s = TestServer::start().await;
    let url = fifo(
        &s,
        "e.fifo",
        &[
            ("ContentBasedDeduplication", "true"),
            ("VisibilityTimeout", "30"),
        ],
    )
    .await;
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_group_id("g")
        .send()
        .await
        .unwrap();
    let handle = s.receive(&url, 1).await.remove(0).receipt_handle.unwrap();
    s.advance(31).await;
    let err = s
        .sqs
        .delete_message()
        .queue_url(&url)
        .receipt_handle(&handle)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InvalidParameterValue");
    assert!(format!("{err:?}").contains("The receipt handle has expired"));
}

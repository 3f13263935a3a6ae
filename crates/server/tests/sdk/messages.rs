//! Sending, receiving and deleting messages: bodies, attributes, checksums, delays, batches.

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageAttributeValue, MessageSystemAttributeName as S,
    SendMessageBatchRequestEntry,
};

use crate::harness::{code, TestServer};

fn text(data_type: &str, value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type(data_type)
        .string_value(value)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_message_round_trips_with_its_attributes_and_checksums() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    let binary = MessageAttributeValue::builder()
        .data_type("Binary")
        .binary_value(Blob::new(vec![0u8, 1, 2, 255]))
        .build()
        .unwrap();
    let sent = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("hello")
        .message_attributes("color", text("String", "blue"))
        .message_attributes("price", text("Number.usd", "3.50"))
        .message_attributes("blob", binary.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(
        sent.md5_of_message_body.as_deref(),
        Some("5d41402abc4b2a76b9719d911017c592")
    );
    let sent_attr_md5 = sent.md5_of_message_attributes.clone().unwrap();

    let received = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("All")
        .message_system_attribute_names(S::All)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    let m = &received[0];
    assert_eq!(m.body.as_deref(), Some("hello"));
    assert_eq!(m.message_id, sent.message_id);
    assert_eq!(
        m.md5_of_body.as_deref(),
        Some("5d41402abc4b2a76b9719d911017c592")
    );
    assert_eq!(
        m.md5_of_message_attributes.as_deref(),
        Some(sent_attr_md5.as_str())
    );
    let attrs = m.message_attributes.as_ref().unwrap();
    assert_eq!(attrs["color"], text("String", "blue"));
    assert_eq!(attrs["price"], text("Number.usd", "3.50"));
    assert_eq!(attrs["blob"], binary);
    let system = m.attributes.as_ref().unwrap();
    assert_eq!(system[&S::ApproximateReceiveCount], "1");
    assert_eq!(system[&S::SenderId], "000000000000");
    let sent_at: u64 = system[&S::SentTimestamp].parse().unwrap();
    let first: u64 = system[&S::ApproximateFirstReceiveTimestamp]
        .parse()
        .unwrap();
    assert!(first >= sent_at);
}

#[tokio::test]
async fn message_attributes_are_returned_only_when_asked_for() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_attributes("trace.id", text("String", "1"))
        .message_attributes("trace.span", text("String", "2"))
        .message_attributes("other", text("String", "3"))
        .send()
        .await
        .unwrap();
    let m = s.receive(&url, 1).await.remove(0);
    assert!(m.message_attributes.is_none());
    assert!(m.md5_of_message_attributes.is_none());
    assert!(m.attributes.is_none());
    s.sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(m.receipt_handle.unwrap())
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let m = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("trace.*")
        .send()
        .await
        .unwrap()
        .messages
        .unwrap()
        .remove(0);
    let mut names: Vec<_> = m.message_attributes.unwrap().into_keys().collect();
    names.sort();
    assert_eq!(names, ["trace.id", "trace.span"]);
}

#[tokio::test]
async fn bodies_with_characters_sqs_forbids_are_refused() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    for body in ["nul \u{0}", "bell \u{7}", "\u{FFFF}"] {
        let err = s
            .sqs
            .send_message()
            .queue_url(&url)
            .message_body(body)
            .send()
            .await
            .unwrap_err();
        assert_eq!(code(&err), "InvalidMessageContents", "{body:?}");
    }
    s.send(&url, "tab\tnewline\n emoji \u{1F600} \u{E000}")
        .await;
    assert_eq!(s.attribute(&url, "ApproximateNumberOfMessages").await, "1");
}

#[tokio::test]
async fn invalid_message_attributes_are_refused() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    let mut eleven = s.sqs.send_message().queue_url(&url).message_body("x");
    for i in 0..11 {
        eleven = eleven.message_attributes(format!("a{i}"), text("String", "v"));
    }
    assert_eq!(
        code(&eleven.send().await.unwrap_err()),
        "InvalidParameterValue"
    );
    for (name, value) in [
        ("AWS.reserved", text("String", "v")),
        (".dot", text("String", "v")),
        ("n", text("Number", "not-a-number")),
        ("n", text("Mystery", "v")),
        ("n", text("String", "")),
    ] {
        let err = s
            .sqs
            .send_message()
            .queue_url(&url)
            .message_body("x")
            .message_attributes(name, value.clone())
            .send()
            .await
            .unwrap_err();
        assert_eq!(code(&err), "InvalidParameterValue", "{name} {value:?}");
    }
    assert_eq!(s.attribute(&url, "ApproximateNumberOfMessages").await, "0");
}

#[tokio::test]
async fn messages_larger_than_the_queue_limit_are_refused() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[("MaximumMessageSize", "1024")]).await;
    s.send(&url, &"x".repeat(1024)).await;
    let err = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("x".repeat(1025))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InvalidParameterValue");
    let err = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("x".repeat(1000))
        .message_attributes("attribute", text("String", &"v".repeat(30)))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code(&err),
        "InvalidParameterValue",
        "attributes count toward the size"
    );
    // A batch is not held to the queue's limit as a whole, only entry by entry: the entry
    // too big fails alone and the others are sent (AWS-recorded).
    let batch = |bodies: &[String]| {
        let entries = bodies.iter().enumerate().map(|(i, body)| {
            SendMessageBatchRequestEntry::builder()
                .id(format!("e{i}"))
                .message_body(body)
                .build()
                .unwrap()
        });
        s.sqs
            .send_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries.collect()))
            .send()
    };
    let out = batch(&["y".repeat(1024), "y".repeat(1025), "y".repeat(600)])
        .await
        .unwrap();
    let sent: Vec<&str> = out.successful().iter().map(|e| e.id()).collect();
    assert_eq!(sent, ["e0", "e2"]);
    // Each sent entry answers its own body's checksum, also after an entry that failed.
    let alone = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("y".repeat(600))
        .send()
        .await
        .unwrap();
    assert_eq!(
        out.successful()[1].md5_of_message_body(),
        alone.md5_of_message_body().unwrap()
    );
    let failed = &out.failed()[0];
    assert_eq!(
        (failed.id(), failed.code(), failed.sender_fault()),
        ("e1", "InvalidParameterValue", true)
    );
    assert_eq!(
        failed.message(),
        Some(
            "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes."
        )
    );
    // Only the whole batch past SQS's fixed 1 MiB is refused whole, and nothing is sent.
    let before = s.attribute(&url, "ApproximateNumberOfMessages").await;
    let err = batch(&["z".repeat(600_000), "z".repeat(600_000)])
        .await
        .unwrap_err();
    assert_eq!(code(&err), "AWS.SimpleQueueService.BatchRequestTooLong");
    assert_eq!(
        err.message(),
        Some("Batch requests cannot be longer than 1048576 bytes. You have sent 1200000 bytes.")
    );
    assert_eq!(
        s.attribute(&url, "ApproximateNumberOfMessages").await,
        before
    );
}

#[tokio::test]
async fn delays_hide_new_messages_per_queue_and_per_message() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[("DelaySeconds", "10")]).await;
    s.send(&url, "queue-delay").await;
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("no-delay")
        .delay_seconds(0)
        .send()
        .await
        .unwrap();
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("long")
        .delay_seconds(900)
        .send()
        .await
        .unwrap();
    assert_eq!(
        s.attribute(&url, "ApproximateNumberOfMessagesDelayed")
            .await,
        "2"
    );
    let take = || async {
        let mut bodies = Vec::new();
        for m in s.receive(&url, 10).await {
            bodies.push(m.body.unwrap());
            let handle = m.receipt_handle.unwrap();
            s.delete(&url, handle).await;
        }
        bodies
    };
    assert_eq!(take().await, ["no-delay"]);
    s.advance(9).await;
    assert!(take().await.is_empty(), "the queue's delay has 1 s to go");
    s.advance(1).await;
    assert_eq!(take().await, ["queue-delay"]);
    s.advance(889).await;
    assert!(take().await.is_empty());
    s.advance(1).await;
    assert_eq!(take().await, ["long"]);
    let err = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .delay_seconds(901)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InvalidParameterValue");
}

#[tokio::test]
async fn messages_past_the_retention_period_are_dropped_even_in_flight() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[("MessageRetentionPeriod", "60")]).await;
    s.send(&url, "old").await;
    s.receive(&url, 1).await;
    s.advance(61).await;
    assert_eq!(
        s.attribute(&url, "ApproximateNumberOfMessagesNotVisible")
            .await,
        "0"
    );
    assert!(s.receive(&url, 10).await.is_empty());
}

#[tokio::test]
async fn send_batch_reports_each_entry_and_rejects_malformed_batches() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    let entry = |id: &str, body: &str| {
        SendMessageBatchRequestEntry::builder()
            .id(id)
            .message_body(body)
            .build()
            .unwrap()
    };
    let out = s
        .sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(entry("ok-1", "one"))
        .entries(entry("bad", "\u{0}"))
        .entries(entry("ok_2", "two"))
        .send()
        .await
        .unwrap();
    let ok: Vec<_> = out.successful.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ok, ["ok-1", "ok_2"]);
    assert_eq!(
        out.successful[0].md5_of_message_body,
        "f97c5d29941bfb1b2fdab0874906ab82"
    );
    assert_eq!(out.failed.len(), 1);
    assert_eq!(out.failed[0].id, "bad");
    assert_eq!(out.failed[0].code, "InvalidMessageContents");
    assert!(out.failed[0].sender_fault);

    let batch = |entries: Vec<SendMessageBatchRequestEntry>| {
        s.sqs
            .send_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries))
            .send()
    };
    let err = batch(vec![]).await.unwrap_err();
    assert_eq!(code(&err), "AWS.SimpleQueueService.EmptyBatchRequest");
    let err = batch((0..11).map(|i| entry(&format!("e{i}"), "x")).collect())
        .await
        .unwrap_err();
    assert_eq!(
        code(&err),
        "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
    );
    let err = batch(vec![entry("bad id!", "x")]).await.unwrap_err();
    assert_eq!(code(&err), "AWS.SimpleQueueService.InvalidBatchEntryId");
    let err = batch(vec![entry("same", "x"), entry("same", "y")])
        .await
        .unwrap_err();
    assert_eq!(
        code(&err),
        "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"
    );
    assert_eq!(s.attribute(&url, "ApproximateNumberOfMessages").await, "2");
}

#[tokio::test]
async fn delete_batch_deletes_good_handles_and_reports_bad_ones() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    s.send(&url, "a").await;
    let m = s.receive(&url, 1).await.remove(0);
    let entry = |id: &str, handle: &str| {
        DeleteMessageBatchRequestEntry::builder()
            .id(id)
            .receipt_handle(handle)
            .build()
            .unwrap()
    };
    let out = s
        .sqs
        .delete_message_batch()
        .queue_url(&url)
        .entries(entry("real", m.receipt_handle.as_deref().unwrap()))
        .entries(entry("fake", "not-a-handle"))
        .send()
        .await
        .unwrap();
    assert_eq!(out.successful.len(), 1);
    assert_eq!(out.successful[0].id, "real");
    assert_eq!(out.failed[0].id, "fake");
    assert_eq!(out.failed[0].code, "ReceiptHandleIsInvalid");
    assert_eq!(
        out.failed[0].message.as_deref(),
        Some("The input receipt handle \"not-a-handle\" is not a valid receipt handle.")
    );
    assert_eq!(
        s.attribute(&url, "ApproximateNumberOfMessagesNotVisible")
            .await,
        "0"
    );
}

#[tokio::test]
async fn a_deduplication_id_is_refused_on_a_standard_queue_but_a_group_id_is_accepted() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    let err = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_deduplication_id("d1")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InvalidParameterValue");
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_group_id("tenant-1")
        .send()
        .await
        .unwrap();
    assert_eq!(s.attribute(&url, "ApproximateNumberOfMessages").await, "1");
}

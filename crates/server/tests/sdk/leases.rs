//! Leases through the SDK: visibility, receive counts, ChangeMessageVisibility, the 12-hour
//! ceiling, and what receipt handles are worth in each lease mode.

use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, MessageSystemAttributeName as S,
};
use leasehold_engine::LeaseMode;

use crate::harness::{code, TestServer};

async fn receive_with_attrs(s: &TestServer, url: &str) -> Option<aws_sdk_sqs::types::Message> {
    s.sqs
        .receive_message()
        .queue_url(url)
        .message_system_attribute_names(S::All)
        .send()
        .await
        .unwrap()
        .messages
        .and_then(|mut m| m.pop())
}

#[tokio::test]
async fn a_leased_message_is_hidden_then_redelivered_with_a_new_handle_and_count() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[("VisibilityTimeout", "30")]).await;
    s.send(&url, "job").await;
    let first = receive_with_attrs(&s, &url).await.unwrap();
    assert!(
        receive_with_attrs(&s, &url).await.is_none(),
        "hidden while leased"
    );
    assert_eq!(
        s.attribute(&url, "ApproximateNumberOfMessagesNotVisible")
            .await,
        "1"
    );
    s.advance(29).await;
    assert!(
        receive_with_attrs(&s, &url).await.is_none(),
        "still leased at 29 s"
    );
    s.advance(1).await;
    let second = receive_with_attrs(&s, &url).await.unwrap();
    assert_ne!(first.receipt_handle, second.receipt_handle);
    assert_eq!(first.message_id, second.message_id);
    let a1 = first.attributes.unwrap();
    let a2 = second.attributes.unwrap();
    assert_eq!(a2[&S::ApproximateReceiveCount], "2");
    assert_eq!(
        a1[&S::ApproximateFirstReceiveTimestamp],
        a2[&S::ApproximateFirstReceiveTimestamp],
        "the first receive time never changes"
    );
}

#[tokio::test]
async fn the_receive_visibility_timeout_overrides_the_queue_default() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[("VisibilityTimeout", "30")]).await;
    s.send(&url, "job").await;
    s.sqs
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(5)
        .send()
        .await
        .unwrap();
    s.advance(5).await;
    assert_eq!(s.receive(&url, 1).await.len(), 1);
}

#[tokio::test]
async fn change_visibility_counts_from_now_zero_releases_and_does_not_carry_over() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[("VisibilityTimeout", "30")]).await;
    s.send(&url, "job").await;
    let m = s.receive(&url, 1).await.remove(0);
    let handle = m.receipt_handle.unwrap();
    s.advance(20).await;
    s.sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&handle)
        .visibility_timeout(30)
        .send()
        .await
        .unwrap();
    s.advance(29).await;
    assert!(
        s.receive(&url, 1).await.is_empty(),
        "extended to 30 s from the change"
    );
    s.sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&handle)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let again = s.receive(&url, 1).await;
    assert_eq!(again.len(), 1, "visibility 0 releases at once");
    s.advance(30).await;
    assert_eq!(
        s.receive(&url, 1).await.len(),
        1,
        "the next receive gets the queue default, not the change"
    );
}

#[tokio::test]
async fn no_chain_of_extensions_passes_twelve_hours_from_the_receive() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    s.send(&url, "job").await;
    let handle = s.receive(&url, 1).await.remove(0).receipt_handle.unwrap();
    let change = |secs: i32| {
        s.sqs
            .change_message_visibility()
            .queue_url(&url)
            .receipt_handle(&handle)
            .visibility_timeout(secs)
            .send()
    };
    change(43_200).await.unwrap();
    s.advance(3_600).await;
    let err = change(39_601).await.unwrap_err();
    assert_eq!(code(&err), "InvalidParameterValue");
    assert!(
        format!("{:?}", err).contains(
            "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]"
        ),
        "{err:?}"
    );
    change(39_600).await.unwrap();
    let err = change(43_201).await.unwrap_err();
    assert_eq!(code(&err), "InvalidParameterValue");
}

#[tokio::test]
async fn aws_mode_an_expired_or_superseded_handle_still_deletes_and_deleting_twice_succeeds() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[("VisibilityTimeout", "30")]).await;
    s.send(&url, "job").await;
    let a = s.receive(&url, 1).await.remove(0).receipt_handle.unwrap();
    s.advance(30).await;
    let b = s.receive(&url, 1).await.remove(0).receipt_handle.unwrap();
    s.delete(&url, &a).await;
    assert_eq!(
        s.attribute(&url, "ApproximateNumberOfMessagesNotVisible")
            .await,
        "0",
        "A's stale handle deleted it"
    );
    s.delete(&url, &a).await;
    s.delete(&url, &b).await;
    let err = s
        .sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&b)
        .visibility_timeout(10)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InvalidParameterValue");
    assert!(format!("{err:?}")
        .contains("Message does not exist or is not available for visibility timeout change"));
}

#[tokio::test]
async fn aws_mode_change_visibility_on_an_expired_lease_succeeds() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[("VisibilityTimeout", "30")]).await;
    s.send(&url, "job").await;
    let a = s.receive(&url, 1).await.remove(0).receipt_handle.unwrap();
    s.advance(45).await;
    s.sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&a)
        .visibility_timeout(60)
        .send()
        .await
        .unwrap();
    assert!(s.receive(&url, 1).await.is_empty(), "hidden again for 60 s");
}

#[tokio::test]
async fn a_handle_the_server_never_issued_is_receipt_handle_is_invalid() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    let err = s
        .sqs
        .delete_message()
        .queue_url(&url)
        .receipt_handle("garbage")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "ReceiptHandleIsInvalid");
    let err = s
        .sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle("garbage")
        .visibility_timeout(5)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "ReceiptHandleIsInvalid");
}

#[tokio::test]
async fn strict_mode_a_stale_handle_deletes_nothing_and_cannot_change_visibility() {
    let s = TestServer::start_with(LeaseMode::Strict).await;
    let url = s.queue("q", &[("VisibilityTimeout", "30")]).await;
    s.send(&url, "job").await;
    let a = s.receive(&url, 1).await.remove(0).receipt_handle.unwrap();
    s.advance(30).await;
    let b = s.receive(&url, 1).await.remove(0).receipt_handle.unwrap();
    // Consumer A's late delete answers success but does nothing: the seed's silent race.
    s.delete(&url, &a).await;
    assert_eq!(
        s.attribute(&url, "ApproximateNumberOfMessagesNotVisible")
            .await,
        "1"
    );
    let err = s
        .sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&a)
        .visibility_timeout(60)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "AWS.SimpleQueueService.MessageNotInflight");
    s.delete(&url, &b).await;
    assert_eq!(
        s.attribute(&url, "ApproximateNumberOfMessagesNotVisible")
            .await,
        "0"
    );
}

#[tokio::test]
async fn change_visibility_batch_reports_each_entry() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    s.send(&url, "job").await;
    let handle = s.receive(&url, 1).await.remove(0).receipt_handle.unwrap();
    let entry = |id: &str, handle: &str, secs: i32| {
        ChangeMessageVisibilityBatchRequestEntry::builder()
            .id(id)
            .receipt_handle(handle)
            .visibility_timeout(secs)
            .build()
            .unwrap()
    };
    let out = s
        .sqs
        .change_message_visibility_batch()
        .queue_url(&url)
        .entries(entry("ok", &handle, 0))
        .entries(entry("fake", "nope", 10))
        .entries(entry("toolong", &handle, 43_201))
        .send()
        .await
        .unwrap();
    assert_eq!(
        out.successful
            .iter()
            .map(|e| e.id.as_str())
            .collect::<Vec<_>>(),
        ["ok"]
    );
    let failed: Vec<_> = out
        .failed
        .iter()
        .map(|e| (e.id.as_str(), e.code.as_str()))
        .collect();
    assert_eq!(
        failed,
        [
            ("fake", "ReceiptHandleIsInvalid"),
            ("toolong", "InvalidParameterValue")
        ]
    );
    assert_eq!(
        s.receive(&url, 1).await.len(),
        1,
        "the good entry released the message"
    );
}

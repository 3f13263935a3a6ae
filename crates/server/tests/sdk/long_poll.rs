//! Long polling in real time: a waiting receive wakes on a send, a visibility change, a lease
//! or delay ending, or a clock jump; an empty one waits its full time.

use std::time::{Duration, Instant};

use crate::harness::TestServer;

fn long_poll(
    s: &TestServer,
    url: &str,
    wait: i32,
) -> impl std::future::Future<Output = (Vec<aws_sdk_sqs::types::Message>, Duration)> {
    let request = s
        .sqs
        .receive_message()
        .queue_url(url)
        .wait_time_seconds(wait)
        .max_number_of_messages(10);
    async move {
        let started = Instant::now();
        let out = request.send().await.unwrap();
        (out.messages.unwrap_or_default(), started.elapsed())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_receive_returns_as_soon_as_a_message_is_sent() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    let waiting = tokio::spawn(long_poll(&s, &url, 10));
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.send(&url, "wake").await;
    let (messages, took) = waiting.await.unwrap();
    assert_eq!(messages.len(), 1);
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_long_poll_waits_its_full_time() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    let (messages, took) = long_poll(&s, &url, 1).await;
    assert!(messages.is_empty());
    assert!(
        took >= Duration::from_millis(990),
        "returned early after {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_default_wait_applies_when_the_request_names_none() {
    let s = TestServer::start().await;
    let url = s
        .queue("q", &[("ReceiveMessageWaitTimeSeconds", "1")])
        .await;
    let started = Instant::now();
    assert!(s.receive(&url, 1).await.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(990));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_receive_wakes_when_a_visibility_change_releases_a_message() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    s.send(&url, "held").await;
    let handle = s.receive(&url, 1).await.remove(0).receipt_handle.unwrap();
    let waiting = tokio::spawn(long_poll(&s, &url, 10));
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(handle)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let (messages, took) = waiting.await.unwrap();
    assert_eq!(messages.len(), 1);
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_receive_wakes_when_a_lease_expires_without_polling_on_a_timer() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    s.send(&url, "leased").await;
    s.sqs
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(1)
        .send()
        .await
        .unwrap();
    let (messages, took) = long_poll(&s, &url, 10).await;
    assert_eq!(messages.len(), 1);
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_receive_wakes_when_a_delay_ends() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("later")
        .delay_seconds(1)
        .send()
        .await
        .unwrap();
    let (messages, took) = long_poll(&s, &url, 10).await;
    assert_eq!(messages.len(), 1);
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_receive_wakes_when_the_clock_jumps_past_a_lease() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    s.send(&url, "leased").await;
    s.sqs
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(3600)
        .send()
        .await
        .unwrap();
    let waiting = tokio::spawn(long_poll(&s, &url, 10));
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.advance(3600).await;
    let (messages, took) = waiting.await.unwrap();
    assert_eq!(messages.len(), 1);
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[tokio::test]
async fn wait_time_out_of_range_is_refused() {
    let s = TestServer::start().await;
    let url = s.queue("q", &[]).await;
    let err = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(21)
        .send()
        .await
        .unwrap_err();
    assert_eq!(crate::harness::code(&err), "InvalidParameterValue");
    let err = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(11)
        .send()
        .await
        .unwrap_err();
    assert_eq!(crate::harness::code(&err), "InvalidParameterValue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_long_poll_wakes_when_a_delete_frees_the_groups_next_message() {
    let s = TestServer::start().await;
    let url = s
        .queue(
            "g.fifo",
            &[("FifoQueue", "true"), ("ContentBasedDeduplication", "true")],
        )
        .await;
    for body in ["first", "second"] {
        s.sqs
            .send_message()
            .queue_url(&url)
            .message_body(body)
            .message_group_id("g")
            .send()
            .await
            .unwrap();
    }
    let first = s.receive(&url, 1).await.remove(0);
    let waiting = tokio::spawn(long_poll(&s, &url, 10));
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.delete(&url, first.receipt_handle.unwrap()).await;
    let (got, waited) = waiting.await.unwrap();
    assert_eq!(got[0].body.as_deref(), Some("second"));
    assert!(
        waited < Duration::from_secs(2),
        "woken by the delete, not after {waited:?}"
    );
}

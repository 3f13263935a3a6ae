//! The test server as a test uses it: an `aws-sdk-sqs` client over real HTTP, and the clock.

use std::time::{Duration, Instant};

use leasehold_testing::TestServer;

#[tokio::test]
async fn a_thirty_second_lease_runs_out_after_advance_without_waiting() {
    let started = Instant::now();
    let server = TestServer::start().await;
    let sqs = server.sqs();
    let url = (sqs.create_queue().queue_name("orders").send().await)
        .unwrap()
        .queue_url
        .unwrap();
    sqs.send_message()
        .queue_url(&url)
        .message_body("order 1")
        .send()
        .await
        .unwrap();
    let receive = || {
        sqs.receive_message()
            .queue_url(&url)
            .visibility_timeout(30)
            .send()
    };
    let first = receive().await.unwrap().messages.unwrap_or_default();
    assert_eq!(first.len(), 1);
    assert!(receive()
        .await
        .unwrap()
        .messages
        .unwrap_or_default()
        .is_empty());
    server.advance(Duration::from_secs(29)).await;
    assert!(
        receive()
            .await
            .unwrap()
            .messages
            .unwrap_or_default()
            .is_empty(),
        "still leased at 29 s"
    );
    server.advance(Duration::from_secs(2)).await;
    let again = receive().await.unwrap().messages.unwrap_or_default();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].body.as_deref(), Some("order 1"));
    assert!(started.elapsed() < Duration::from_secs(5));
    server.stop().await;
}

#[tokio::test]
async fn a_jump_wakes_a_long_poll_already_waiting_for_the_lease_to_run_out() {
    let server = TestServer::start().await;
    let sqs = server.sqs();
    let url = (sqs.create_queue().queue_name("q").send().await)
        .unwrap()
        .queue_url
        .unwrap();
    sqs.send_message()
        .queue_url(&url)
        .message_body("m")
        .send()
        .await
        .unwrap();
    let leased = sqs.receive_message().queue_url(&url).visibility_timeout(30);
    assert_eq!(leased.send().await.unwrap().messages.unwrap().len(), 1);
    let waiting = tokio::spawn({
        let (sqs, url) = (sqs.clone(), url.clone());
        async move {
            let started = Instant::now();
            let long_poll = sqs.receive_message().queue_url(url).wait_time_seconds(20);
            let answer = long_poll.send().await.unwrap();
            (answer.messages.unwrap_or_default().len(), started.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.advance(Duration::from_secs(31)).await;
    let (got, waited) = waiting.await.unwrap();
    assert_eq!(got, 1);
    assert!(
        waited < Duration::from_secs(5),
        "woken by the jump, not its 20 s: {waited:?}"
    );
}

#[tokio::test]
async fn a_dropped_server_no_longer_answers_on_its_port() {
    let server = TestServer::start().await;
    let address = server
        .endpoint_url()
        .trim_start_matches("http://")
        .to_string();
    assert!(tokio::net::TcpStream::connect(&address).await.is_ok());
    drop(server);
    let mut refused = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(&address).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused, "the port still accepts after the drop");
}

#[tokio::test]
async fn two_servers_keep_their_queues_and_clocks_apart() {
    let (a, b) = (TestServer::start().await, TestServer::start().await);
    assert_ne!(a.endpoint_url(), b.endpoint_url());
    a.sqs()
        .create_queue()
        .queue_name("only-on-a")
        .send()
        .await
        .unwrap();
    let on_b = b.sqs().list_queues().send().await.unwrap();
    assert!(on_b.queue_urls.unwrap_or_default().is_empty());
    a.advance(Duration::from_secs(3600)).await;
    let url_b = (b.sqs().create_queue().queue_name("q").send().await)
        .unwrap()
        .queue_url
        .unwrap();
    b.sqs()
        .send_message()
        .queue_url(&url_b)
        .message_body("m")
        .delay_seconds(60)
        .send()
        .await
        .unwrap();
    let early = b
        .sqs()
        .receive_message()
        .queue_url(&url_b)
        .send()
        .await
        .unwrap();
    assert!(
        early.messages.unwrap_or_default().is_empty(),
        "a's jump moved b's clock"
    );
}

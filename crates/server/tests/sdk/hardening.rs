//! What a demanding operator threw at the server: parameter names thousands of segments
//! deep, a clock jump of 1.8e16 s, the largest valid messages, web pages of other sites,
//! more waiting receives than allowed, and a shutdown with clients still connected.

use std::time::{Duration, Instant};

use leasehold_server::{Limits, ServerConfig};
use tokio::io::AsyncWriteExt;

use crate::harness::{code, TestServer};

async fn text(response: reqwest::Response) -> (u16, String) {
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn a_parameter_name_of_five_thousand_segments_is_refused_not_a_crash() {
    let s = TestServer::start().await;
    let deep = vec!["a"; 5_000].join(".");
    let (status, body) = text(
        reqwest::get(format!("{}/?Action=ListQueues&{deep}=1", s.base))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("<Code>InvalidParameterValue</Code>"),
        "{body}"
    );
    let posted = reqwest::Client::new()
        .post(format!("{}/", s.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("Action=CreateQueue&QueueName=x&{deep}=1"))
        .send()
        .await
        .unwrap();
    let (status, body) = text(posted).await;
    assert_eq!(status, 400, "{body}");
    // Still serving, and the refused CreateQueue made nothing.
    let queues = s.sqs.list_queues().send().await.unwrap();
    assert!(queues.queue_urls.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn a_clock_jump_past_a_century_is_refused_and_moves_nothing() {
    let s = TestServer::start().await;
    let client = reqwest::Client::new();
    let jump = |seconds: f64| {
        client
            .post(format!("{}/_leasehold/clock/advance", s.base))
            .json(&serde_json::json!({ "seconds": seconds }))
            .send()
    };
    let before: serde_json::Value = jump(0.0).await.unwrap().json().await.unwrap();
    let (status, body) = text(jump(1.8e16).await.unwrap()).await;
    assert_eq!(status, 400, "{body}");
    let after: serde_json::Value = jump(0.0).await.unwrap().json().await.unwrap();
    let moved = after["now_ms"].as_u64().unwrap() - before["now_ms"].as_u64().unwrap();
    assert!(
        moved < 60_000,
        "the refused jump moved the clock {moved} ms"
    );
}

/// 1 MiB of newlines (two bytes each in JSON) and 700 KiB of `é` (six bytes each as
/// `%C3%A9` in a form): valid on AWS, larger than 2 MiB on the wire.
fn largest_bodies() -> [String; 2] {
    ["\n".repeat(1_048_576), "é".repeat(700 * 1024 / 2)]
}

#[tokio::test]
async fn the_largest_valid_messages_pass_through_both_protocols() {
    let s = TestServer::start().await;
    let url = s.queue("big", &[]).await;
    for body in largest_bodies() {
        s.send(&url, &body).await;
        let form = reqwest::Client::new()
            .post(&url)
            .form(&[("Action", "SendMessage"), ("MessageBody", body.as_str())])
            .send()
            .await
            .unwrap();
        let (status, answer) = text(form).await;
        assert_eq!(status, 200, "{}", &answer[..answer.len().min(300)]);
        for _ in 0..2 {
            let got = s.receive(&url, 1).await.remove(0);
            assert_eq!(got.body.as_deref(), Some(body.as_str()));
            s.delete(&url, got.receipt_handle.unwrap()).await;
        }
    }
}

#[tokio::test]
async fn a_body_over_the_limit_gets_the_actions_error_in_its_wires_format() {
    let s = TestServer::start().await;
    let huge = "a".repeat(9 * 1024 * 1024);
    let json_body = format!(
        r#"{{"QueueUrl":"{}/000000000000/q","MessageBody":"{huge}"}}"#,
        s.base
    );
    let (status, headers, json) = s.raw(Some("AmazonSQS.SendMessage"), &json_body).await;
    assert_eq!(status, 400);
    assert_eq!(
        json["__type"],
        "com.amazonaws.sqs#InvalidParameterValueException"
    );
    assert_eq!(
        headers["x-amzn-query-error"].to_str().unwrap(),
        "InvalidParameterValue;Sender"
    );
    let form = reqwest::Client::new()
        .post(format!("{}/", s.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "Action=SendMessageBatch&SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody={huge}"
        ))
        .send()
        .await
        .unwrap();
    let (status, body) = text(form).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("<Code>AWS.SimpleQueueService.BatchRequestTooLong</Code>"),
        "{body}"
    );
}

#[tokio::test]
async fn requests_from_web_pages_of_other_sites_are_refused_and_change_nothing() {
    let s = TestServer::start().await;
    let url = s.queue("local", &[]).await;
    let post = |headers: &[(&str, String)]| {
        let mut request = reqwest::Client::new()
            .post(&url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body("Action=SendMessage&MessageBody=from%20a%20page");
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        request.send()
    };
    let foreign = [
        vec![("origin", "http://evil.example".to_string())],
        vec![("origin", "null".to_string())],
        vec![("sec-fetch-site", "cross-site".to_string())],
        vec![("sec-fetch-site", "same-site".to_string())],
    ];
    for headers in foreign {
        let (status, body) = text(post(&headers).await.unwrap()).await;
        assert_eq!(status, 403, "{headers:?}: {body}");
        assert!(body.contains("<Code>AccessDenied</Code>"), "{body}");
    }
    assert_eq!(s.attribute(&url, "ApproximateNumberOfMessages").await, "0");
    // The server's own pages (the same origin) may.
    let own = vec![
        ("origin", s.base.clone()),
        ("sec-fetch-site", "same-origin".to_string()),
    ];
    let (status, body) = text(post(&own).await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
}

async fn limited(limits: Limits) -> TestServer {
    TestServer::start_state(super::harness::in_memory(ServerConfig {
        time_travel: true,
        limits,
        ..ServerConfig::default()
    }))
    .await
}

#[tokio::test]
async fn sheds_are_sqs_errors_in_the_wires_format() {
    let s = limited(Limits {
        requests_in_progress: 0,
        ..Limits::default()
    })
    .await;
    let (status, headers, json) = s.raw(Some("AmazonSQS.ListQueues"), "{}").await;
    assert_eq!(status, 503);
    assert_eq!(
        json["__type"],
        "com.amazon.coral.service#ServiceUnavailableException"
    );
    assert_eq!(
        headers["x-amzn-query-error"].to_str().unwrap(),
        "ServiceUnavailable;Receiver"
    );
    let (status, body) = text(
        reqwest::get(format!("{}/?Action=ListQueues", s.base))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 503);
    assert!(body.contains("<Code>ServiceUnavailable</Code>"), "{body}");
}

fn long_poll(
    s: &TestServer,
    url: &str,
    seconds: i32,
) -> tokio::task::JoinHandle<Result<usize, String>> {
    let (sqs, url) = (s.sqs.clone(), url.to_string());
    tokio::spawn(async move {
        sqs.receive_message()
            .queue_url(url)
            .wait_time_seconds(seconds)
            .send()
            .await
            .map(|out| out.messages.unwrap_or_default().len())
            .map_err(|e| code(&e))
    })
}

#[tokio::test]
async fn waiting_receives_have_their_own_bound_and_leave_the_rest_served() {
    let s = limited(Limits {
        requests_in_progress: 4,
        waiting_receives: 2,
        ..Limits::default()
    })
    .await;
    let url = s.queue("waits", &[]).await;
    let waiting = [long_poll(&s, &url, 4), long_poll(&s, &url, 4)];
    tokio::time::sleep(Duration::from_millis(300)).await;
    let shed = long_poll(&s, &url, 10).await.unwrap();
    assert_eq!(shed, Err("RequestThrottled".to_string()));
    // Waiting receives hold no work slot: more requests than work slots still get through.
    for i in 0..6 {
        s.sqs
            .get_queue_url()
            .queue_name("waits")
            .send()
            .await
            .unwrap();
        if i == 0 {
            s.send(&url, "one").await;
        }
    }
    let started = Instant::now();
    let mut got = 0;
    for poll in waiting {
        got += poll.await.unwrap().unwrap();
    }
    assert_eq!(got, 1);
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the other waiter kept waiting"
    );
}

#[tokio::test]
async fn a_batch_wakes_one_waiting_receive_per_message() {
    let s = TestServer::start().await;
    let url = s.queue("wake", &[]).await;
    let polls: Vec<_> = (0..3).map(|_| long_poll(&s, &url, 3)).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let mut batch = s.sqs.send_message_batch().queue_url(&url);
    for id in ["a", "b"] {
        batch = batch.entries(
            aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                .id(id)
                .message_body(id)
                .build()
                .unwrap(),
        );
    }
    batch.send().await.unwrap();
    let mut prompt = 0;
    for poll in polls {
        if poll.await.unwrap().unwrap() == 1 {
            prompt += usize::from(started.elapsed() < Duration::from_secs(2));
        }
    }
    assert_eq!(prompt, 2, "both messages went to a waiting receive at once");
}

#[tokio::test]
async fn shutdown_ends_within_two_seconds_answering_waiting_receives_empty() {
    let s = TestServer::start().await;
    let url = s.queue("closing", &[]).await;
    let polls: Vec<_> = (0..3).map(|_| long_poll(&s, &url, 20)).collect();
    // A client that sent half a request and went quiet.
    let address = s.base.trim_start_matches("http://").to_string();
    let mut slow = tokio::net::TcpStream::connect(&address).await.unwrap();
    slow.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nAction=")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    s.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    for poll in polls {
        assert_eq!(poll.await.unwrap(), Ok(0));
    }
}

/// `/health` and `/ready` answer JSON on any backend (this suite also runs on PostgreSQL).
#[tokio::test]
async fn health_and_ready_answer_json() {
    let s = TestServer::start().await;
    for (path, expected) in [
        ("/health", serde_json::json!({"status": "alive"})),
        ("/ready", serde_json::json!({"status": "ready"})),
    ] {
        let response = reqwest::get(format!("{}{path}", s.base)).await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        assert_eq!(
            response.json::<serde_json::Value>().await.unwrap(),
            expected
        );
    }
    s.stop().await;
}

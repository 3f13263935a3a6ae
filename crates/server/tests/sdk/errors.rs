//! What arrives on the wire when a request is wrong: status, `__type`, query-error header.

use crate::harness::TestServer;

#[tokio::test]
async fn malformed_json_is_a_400_with_a_clear_message_not_a_500() {
    let s = TestServer::start().await;
    for body in ["{broken", "[1,2]", "\"text\"", "{\"QueueName\": 5}"] {
        let (status, _, json) = s.raw(Some("AmazonSQS.CreateQueue"), body).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(
            json["__type"], "com.amazon.coral.service#SerializationException",
            "{body}"
        );
        assert!(json["message"].as_str().unwrap().len() > 10);
    }
}

#[tokio::test]
async fn an_unknown_action_is_a_400_and_a_request_naming_none_a_404() {
    let s = TestServer::start().await;
    let (status, headers, json) = s.raw(Some("AmazonSQS.FlyToTheMoon"), "{}").await;
    assert_eq!(status, 400);
    assert_eq!(
        json["__type"],
        "com.amazon.coral.service#UnknownOperationException"
    );
    assert_eq!(headers["x-amzn-query-error"], "InvalidAction;Sender");
    // Neither a JSON target nor a query Action: AWS's bare 404.
    let (status, _, _) = s.raw(None, "{}").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_missing_required_parameter_names_it() {
    let s = TestServer::start().await;
    let (status, headers, json) = s.raw(Some("AmazonSQS.SendMessage"), "{}").await;
    assert_eq!(status, 400);
    assert_eq!(
        json["__type"],
        "com.amazonaws.sqs#MissingRequiredParameterException"
    );
    assert_eq!(
        json["message"],
        "The request must contain the parameter QueueUrl."
    );
    assert_eq!(headers["x-amzn-query-error"], "MissingParameter;Sender");
    s.queue("q", &[]).await;
    let (status, _, json) = s
        .raw(
            Some("AmazonSQS.SendMessage"),
            &format!("{{\"QueueUrl\": \"{}/000000000000/q\"}}", s.base),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        json["message"],
        "The request must contain the parameter MessageBody."
    );
}

#[tokio::test]
async fn errors_carry_the_json_type_and_the_legacy_code_header() {
    let s = TestServer::start().await;
    let (status, headers, json) = s
        .raw(Some("AmazonSQS.GetQueueUrl"), "{\"QueueName\": \"absent\"}")
        .await;
    assert_eq!(status, 400);
    assert_eq!(json["__type"], "com.amazonaws.sqs#QueueDoesNotExist");
    assert_eq!(json["message"], "The specified queue does not exist.");
    assert_eq!(
        headers["x-amzn-query-error"],
        "AWS.SimpleQueueService.NonExistentQueue;Sender"
    );
    assert_eq!(headers["content-type"], "application/x-amz-json-1.0");
    assert!(headers.contains_key("x-amzn-requestid"));
}

#[tokio::test]
async fn time_travel_refuses_negative_or_malformed_jumps() {
    let s = TestServer::start().await;
    let http = reqwest::Client::new();
    for body in ["{\"seconds\": -1}", "{}", "nope"] {
        let response = http
            .post(format!("{}/_leasehold/clock/advance", s.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{body}");
    }
    let response = http
        .post(format!("{}/_leasehold/clock/advance", s.base))
        .json(&serde_json::json!({"seconds": 5}))
        .send()
        .await
        .unwrap();
    let json: serde_json::Value = response.json().await.unwrap();
    assert!(json["now_ms"].as_u64().unwrap() > 1_600_000_000_000);
}

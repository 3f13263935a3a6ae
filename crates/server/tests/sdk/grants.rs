//! Tenants stay inside their grant (issue 48), each case as the holder of one account or one
//! presigned URL would try it: what is executed is what was signed.

use std::time::{Duration, SystemTime};

use aws_sdk_sqs::types::QueueAttributeName;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};

use crate::auth::{alice, alices_params, create, presign, signed_server, ALICE};
use crate::harness::TestServer;

/// Alice's queue holding one message, and a URL she presigned for GetQueueAttributes on it.
async fn a_queue_and_a_narrow_link(server: &TestServer) -> (String, String) {
    let alice = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let url = create(&alice, "narrow").await;
    alice
        .send_message()
        .queue_url(&url)
        .message_body("secret")
        .send()
        .await
        .unwrap();
    let query = format!(
        "Action=GetQueueAttributes&Version=2012-11-05&QueueUrl={}&AttributeName.1=All",
        form_urlencoded::byte_serialize(url.as_bytes()).collect::<String>()
    );
    let link = presign(
        &server.base,
        &query,
        SystemTime::now(),
        Duration::from_secs(300),
    );
    (url, link)
}

/// How many of the queue's messages are in flight: a receive that got through took one.
async fn in_flight(server: &TestServer, url: &str) -> String {
    let alice = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let attributes = alice
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    attributes[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible].clone()
}

#[tokio::test]
async fn a_presigned_url_cannot_be_replayed_as_another_action() {
    let server = signed_server().await;
    let (url, link) = a_queue_and_a_narrow_link(&server).await;
    let http = reqwest::Client::new();
    let ok = http.get(&link).send().await.unwrap();
    assert_eq!(ok.status(), 200, "the link does what it was signed for");

    // The same link with the action in a header and the parameters in a JSON body.
    let json = http
        .post(&link)
        .header("x-amz-target", "AmazonSQS.ReceiveMessage")
        .header("content-type", "application/x-amz-json-1.0")
        .body(format!(r#"{{"QueueUrl":"{url}"}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(json.status(), 403);
    let text = json.text().await.unwrap();
    assert!(text.contains("AccessDenied"), "{text}");
    // The same link with the action in a form body.
    let form = http
        .post(&link)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "Action=ReceiveMessage&QueueUrl={}",
            form_urlencoded::byte_serialize(url.as_bytes()).collect::<String>()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 403, "{}", form.text().await.unwrap());
    assert_eq!(in_flight(&server, &url).await, "0", "nothing was received");
    server.stop().await;
}

#[tokio::test]
async fn a_header_signature_must_cover_the_action_it_names() {
    let server = signed_server().await;
    let alice_client = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let url = create(&alice_client, "target").await;
    let body = format!(r#"{{"QueueUrl":"{url}"}}"#);
    let host = server.base.trim_start_matches("http://").to_string();
    // Signed over everything but X-Amz-Target, which is then sent anyway.
    let mut settings = SigningSettings::default();
    let mut excluded = settings.excluded_headers.take().unwrap_or_default();
    excluded.push("x-amz-target".into());
    settings.excluded_headers = Some(excluded);
    let identity = alice();
    let params = alices_params(&identity, SystemTime::now(), settings);
    let endpoint = format!("{}/", server.base);
    let headers = [
        ("content-type", "application/x-amz-json-1.0"),
        ("host", host.as_str()),
        ("x-amz-target", "AmazonSQS.PurgeQueue"),
    ];
    let signable = SignableRequest::new(
        "POST",
        endpoint.as_str(),
        headers.iter().copied(),
        SignableBody::Bytes(body.as_bytes()),
    )
    .unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    let mut request = reqwest::Client::new().post(&endpoint).body(body.clone());
    for (name, value) in headers.iter().filter(|(n, _)| *n != "host") {
        request = request.header(*name, *value);
    }
    for (name, value) in instructions.headers() {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 403);
    let text = response.text().await.unwrap();
    assert!(text.contains("not signed: x-amz-target"), "{text}");
    server.stop().await;
}

#[tokio::test]
async fn in_open_mode_dummy_signature_parameters_do_not_let_a_get_change_state() {
    let server = TestServer::start().await;
    let response = reqwest::get(format!(
        "{}/?Action=CreateQueue&QueueName=viaget&X-Amz-Algorithm=AWS4-HMAC-SHA256\
         &X-Amz-Credential=x&X-Amz-Signature=x",
        server.base
    ))
    .await
    .unwrap();
    assert_eq!(response.status(), 403);
    let listed = server.sqs.list_queues().send().await.unwrap();
    assert!(listed.queue_urls().is_empty(), "no queue was made");
    server.stop().await;
}

//! Tenants stay inside their grant (issue 48), each case as the holder of one account or one
//! presigned URL would try it: what is executed is what was signed.

use std::time::{Duration, SystemTime};

use aws_sdk_sqs::types::QueueAttributeName;
use aws_sigv4::http_request::SigningSettings;

use crate::auth::{
    create, presign, signed_by_alice, signed_server, signed_server_config, signed_server_with,
    ALICE, BOB,
};
use crate::harness::{code, TestServer};

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

    // The same link, its method kept, with the action in a header and the parameters in a
    // JSON body.
    let json = http
        .get(&link)
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
        .get(&link)
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
    let endpoint = format!("{}/", server.base);
    let headers = [
        ("content-type", "application/x-amz-json-1.0"),
        ("host", host.as_str()),
        ("x-amz-target", "AmazonSQS.PurgeQueue"),
    ];
    let request = signed_by_alice(
        ("POST", &endpoint),
        &headers,
        body.as_bytes(),
        SystemTime::now(),
        settings,
    )
    .body(body.clone());
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

/// Whether `result` was refused, and with which code.
fn refused<T, E: aws_sdk_sqs::error::ProvideErrorMetadata + std::fmt::Debug>(
    result: Result<T, aws_sdk_sqs::error::SdkError<E, aws_smithy_runtime_api::http::Response>>,
) -> String {
    match result {
        Ok(_) => "allowed".into(),
        Err(error) => code(&error).to_string(),
    }
}

#[tokio::test]
async fn a_grant_of_everything_never_hands_over_the_owners_actions() {
    let server = signed_server().await;
    let alice = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let bob = server.client_as(BOB.0, BOB.1, "us-east-1");
    let url = create(&alice, "shared").await;
    alice
        .add_permission()
        .queue_url(&url)
        .label("bob-everything")
        .aws_account_ids(BOB.2)
        .actions("*")
        .send()
        .await
        .unwrap();
    bob.send_message()
        .queue_url(&url)
        .message_body("granted")
        .send()
        .await
        .unwrap();
    let gone = "AWS.SimpleQueueService.NonExistentQueue";
    let set = bob
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::VisibilityTimeout, "1")
        .send()
        .await;
    assert_eq!(refused(set), gone);
    let grant = bob
        .add_permission()
        .queue_url(&url)
        .label("more")
        .aws_account_ids("333333333333")
        .actions("*")
        .send()
        .await;
    assert_eq!(refused(grant), gone);
    let tag = bob.tag_queue().queue_url(&url).tags("k", "v").send().await;
    assert_eq!(refused(tag), gone);
    assert_eq!(
        refused(bob.list_queue_tags().queue_url(&url).send().await),
        gone
    );
    assert_eq!(
        refused(bob.delete_queue().queue_url(&url).send().await),
        gone
    );
    // The queue is still alice's, as it was.
    let attributes = alice
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::VisibilityTimeout)
        .send()
        .await
        .unwrap();
    assert_eq!(
        attributes.attributes().unwrap()[&QueueAttributeName::VisibilityTimeout],
        "30"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_deny_in_a_queue_policy_denies() {
    let server = signed_server().await;
    let alice = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let bob = server.client_as(BOB.0, BOB.1, "us-east-1");
    let url = create(&alice, "guarded").await;
    let arn = "arn:aws:sqs:us-east-1:111111111111:guarded";
    let policy = format!(
        r#"{{"Version":"2012-10-17","Statement":[
            {{"Effect":"Allow","Principal":{{"AWS":"{bob}"}},"Action":"sqs:*","Resource":"{arn}"}},
            {{"Effect":"Deny","Principal":"*","Action":["sqs:Delete*","sqs:Purge*"],"Resource":"{arn}"}}]}}"#,
        bob = BOB.2
    );
    alice
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::Policy, policy)
        .send()
        .await
        .unwrap();
    bob.send_message()
        .queue_url(&url)
        .message_body("kept")
        .send()
        .await
        .unwrap();
    let gone = "AWS.SimpleQueueService.NonExistentQueue";
    assert_eq!(
        refused(bob.purge_queue().queue_url(&url).send().await),
        gone
    );
    let received = bob.receive_message().queue_url(&url).send().await.unwrap();
    let handle = received.messages()[0].receipt_handle().unwrap();
    let delete = bob
        .delete_message()
        .queue_url(&url)
        .receipt_handle(handle)
        .send()
        .await;
    assert_eq!(refused(delete), gone);
    assert_eq!(
        refused(bob.delete_queue().queue_url(&url).send().await),
        gone
    );
    server.stop().await;
}

#[tokio::test]
async fn a_move_task_cannot_write_into_another_accounts_queue_nor_tell_it_exists() {
    let server = signed_server().await;
    let alice = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let bob = server.client_as(BOB.0, BOB.1, "us-east-1");
    let target = create(&alice, "target").await;
    // Bob's own dead-letter queue, holding a forged message.
    let bob_dlq = create(&bob, "bob-dlq").await;
    let bob_dlq_arn = format!("arn:aws:sqs:us-east-1:{}:bob-dlq", BOB.2);
    let redrive = format!(r#"{{"deadLetterTargetArn":"{bob_dlq_arn}","maxReceiveCount":1}}"#);
    bob.create_queue()
        .queue_name("bob-source")
        .attributes(QueueAttributeName::RedrivePolicy, redrive)
        .send()
        .await
        .unwrap();
    bob.send_message()
        .queue_url(&bob_dlq)
        .message_body("forged")
        .send()
        .await
        .unwrap();
    let into = |name: &str| format!("arn:aws:sqs:us-east-1:{}:{name}", ALICE.2);
    let existing = bob
        .start_message_move_task()
        .source_arn(&bob_dlq_arn)
        .destination_arn(into("target"))
        .send()
        .await;
    let missing = bob
        .start_message_move_task()
        .source_arn(&bob_dlq_arn)
        .destination_arn(into("no-such-queue"))
        .send()
        .await;
    let (existing, missing) = (existing.unwrap_err(), missing.unwrap_err());
    assert_eq!(code(&existing), "ResourceNotFoundException");
    assert_eq!(
        format!(
            "{:?}",
            existing.as_service_error().map(|e| e.meta().message())
        ),
        format!(
            "{:?}",
            missing.as_service_error().map(|e| e.meta().message())
        ),
        "the same answer whether alice's queue exists or not"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = alice
        .receive_message()
        .queue_url(&target)
        .wait_time_seconds(0)
        .send()
        .await
        .unwrap();
    assert!(
        got.messages().is_empty(),
        "nothing was moved into alice's queue"
    );
    server.stop().await;
}

/// Sends a request head that promises a body and never sends it; the answer, if one comes
/// within two seconds.
async fn head_only(base: &str, authorization: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: {address}\r\nX-Amz-Target: AmazonSQS.ListQueues\r\n\
         Content-Type: application/x-amz-json-1.0\r\nX-Amz-Date: 20261206T000000Z\r\n\
         Authorization: {authorization}\r\nContent-Length: 1000\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut answer)).await;
    read.ok()
        .map(|n| String::from_utf8_lossy(&answer[..n.unwrap_or(0)]).to_string())
}

#[tokio::test]
async fn a_stranger_takes_no_work_slot_and_has_no_body_read() {
    // No work slot free at all: anything that took one would be shed with a 503.
    let server = signed_server_with(leasehold_server::Limits {
        requests_in_progress: 0,
        ..leasehold_server::Limits::default()
    })
    .await;
    let stranger = "AWS4-HMAC-SHA256 Credential=AKIDNOBODY/20261206/us-east-1/sqs/aws4_request, \
                    SignedHeaders=host;x-amz-date, Signature=00";
    let answer = head_only(&server.base, stranger)
        .await
        .expect("answered at once, without waiting for the body");
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("InvalidClientTokenId"), "{answer}");
    server.stop().await;
}

#[tokio::test]
async fn tags_and_policies_are_held_to_awss_sizes() {
    let server = signed_server().await;
    let alice = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let url = create(&alice, "sized").await;
    let huge = "v".repeat(100_000);
    let tagged = alice
        .tag_queue()
        .queue_url(&url)
        .tags("k", &huge)
        .send()
        .await;
    assert_eq!(refused(tagged), "InvalidParameterValue");
    let long_key = alice
        .tag_queue()
        .queue_url(&url)
        .tags("k".repeat(129), "v")
        .send()
        .await;
    assert_eq!(refused(long_key), "InvalidParameterValue");
    let fits = alice
        .tag_queue()
        .queue_url(&url)
        .tags("k".repeat(128), "v".repeat(256))
        .send()
        .await;
    assert_eq!(refused(fits), "allowed");
    let padding = "x".repeat(9_000);
    let policy = format!(r#"{{"Version":"2012-10-17","Id":"{padding}","Statement":[]}}"#);
    let set = alice
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::Policy, policy)
        .send()
        .await;
    assert_eq!(refused(set), "InvalidAttributeValue");
    // AddPermission, one label after another, stops where the policy would outgrow its size.
    let mut last = String::new();
    for n in 0..200 {
        let added = alice
            .add_permission()
            .queue_url(&url)
            .label(format!("label-{n:03}-{}", "l".repeat(60)))
            .aws_account_ids(BOB.2)
            .actions("SendMessage")
            .send()
            .await;
        last = refused(added);
        if last != "allowed" {
            break;
        }
    }
    assert_eq!(last, "OverLimit");
    server.stop().await;
}

#[tokio::test]
async fn an_account_past_its_queue_quota_is_refused_and_no_other_account_is() {
    let server = signed_server_config(leasehold_server::ServerConfig {
        max_queues_per_account: 2,
        ..leasehold_server::ServerConfig::default()
    })
    .await;
    let alice = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let bob = server.client_as(BOB.0, BOB.1, "us-east-1");
    let first = create(&alice, "first").await;
    create(&alice, "second").await;
    let third = alice.create_queue().queue_name("third").send().await;
    assert_eq!(refused(third), "OverLimit");
    // The same queue asked for again is no new queue; another account has its own quota.
    let again = alice.create_queue().queue_name("first").send().await;
    assert_eq!(refused(again), "allowed");
    create(&bob, "first").await;
    let listed = alice
        .list_queues()
        .send()
        .await
        .unwrap()
        .queue_urls
        .unwrap();
    assert_eq!(
        listed.len(),
        2,
        "the refused queue was not made: {listed:?}"
    );
    // A deleted queue gives its place back.
    alice.delete_queue().queue_url(&first).send().await.unwrap();
    let third = alice.create_queue().queue_name("third").send().await;
    assert_eq!(refused(third), "allowed");
    server.stop().await;
}

#[tokio::test]
async fn a_signed_header_beside_presigned_parameters_is_refused() {
    let server = signed_server().await;
    // A GET signed in its header, carrying presigned-looking parameters that would let it
    // change state by GET if they counted.
    let url = format!(
        "{}/?Action=CreateQueue&QueueName=twice&Version=2012-11-05\
         &X-Amz-Signature=x&X-Amz-Credential=x&X-Amz-Algorithm=AWS4-HMAC-SHA256",
        server.base
    );
    let host = server.base.trim_start_matches("http://").to_string();
    let request = signed_by_alice(
        ("GET", &url),
        &[("host", host.as_str())],
        b"",
        SystemTime::now(),
        SigningSettings::default(),
    );
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 400);
    let text = response.text().await.unwrap();
    assert!(text.contains("Only one auth mechanism allowed"), "{text}");
    let alice = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let listed = alice.list_queues().send().await.unwrap();
    assert!(listed.queue_urls().is_empty(), "no queue was made");
    server.stop().await;
}

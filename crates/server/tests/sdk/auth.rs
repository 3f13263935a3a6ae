//! Signatures and accounts through the real SDK: the right key works, a wrong key, an unknown
//! key, an old signature, a tampered body or no signature fail with AWS's codes; presigned
//! URLs work until they expire; one account cannot see another's queues unless a permission
//! lets it; the admin routes want the admin token.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials as AwsCredentials;
use aws_sdk_sqs::types::QueueAttributeName;
use aws_sigv4::http_request::{
    sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use leasehold_server::auth::{Auth, Credential, Credentials};
use leasehold_server::ServerConfig;

use crate::harness::{code, TestServer};

pub(crate) const ALICE: (&str, &str, &str) = ("AKIDALICE", "alice-secret", "111111111111");
pub(crate) const BOB: (&str, &str, &str) = ("AKIDBOB", "bob-secret", "222222222222");
pub(crate) const ADMIN_TOKEN: &str = "admin-token-for-tests";

/// A call refused as AWS refuses a queue the caller may not see: it does not exist.
fn assert_no_queue<
    T: std::fmt::Debug,
    E: aws_sdk_sqs::error::ProvideErrorMetadata + std::fmt::Debug,
>(
    result: Result<T, aws_sdk_sqs::error::SdkError<E, aws_smithy_runtime_api::http::Response>>,
) {
    let error = result.expect_err("refused");
    assert_eq!(code(&error), "AWS.SimpleQueueService.NonExistentQueue");
}

/// Creates queue `name` as `client`'s account and answers its URL.
pub(crate) async fn create(client: &aws_sdk_sqs::Client, name: &str) -> String {
    client
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap()
}

pub(crate) async fn signed_server() -> TestServer {
    signed_server_with(leasehold_server::Limits::default()).await
}

/// A server that checks Alice's and Bob's signatures, within `limits`.
pub(crate) async fn signed_server_with(limits: leasehold_server::Limits) -> TestServer {
    signed_server_config(ServerConfig {
        limits,
        ..ServerConfig::default()
    })
    .await
}

/// A server of `config` that checks Alice's and Bob's signatures.
pub(crate) async fn signed_server_config(config: ServerConfig) -> TestServer {
    let credentials = Credentials::new(
        [ALICE, BOB]
            .iter()
            .map(|(key, secret, account)| Credential {
                access_key_id: key.to_string(),
                secret_access_key: secret.to_string(),
                account_id: account.to_string(),
            })
            .collect(),
    )
    .unwrap();
    TestServer::start_config(ServerConfig {
        auth: Some(Auth {
            credentials,
            admin_token: Some(ADMIN_TOKEN.into()),
        }),
        ..config
    })
    .await
}

#[tokio::test]
async fn the_right_key_works_and_a_wrong_or_unknown_key_fails_with_awss_codes() {
    let server = signed_server().await;
    let alice = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let url = create(&alice, "orders").await;
    assert!(url.ends_with("/111111111111/orders"), "{url}");
    alice
        .send_message()
        .queue_url(&url)
        .message_body("hi")
        .send()
        .await
        .unwrap();
    let got = alice
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(got.messages().len(), 1);

    let wrong_secret = server.client_as(ALICE.0, "not-alices-secret", "us-east-1");
    let error = wrong_secret.list_queues().send().await.unwrap_err();
    assert_eq!(code(&error), "SignatureDoesNotMatch");
    assert_eq!(error.raw_response().map(|r| r.status().as_u16()), Some(403));

    let stranger = server.client_as("AKIDNOBODY", "whatever", "us-east-1");
    let error = stranger
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&error), "InvalidClientTokenId");
    assert_eq!(error.raw_response().map(|r| r.status().as_u16()), Some(403));

    // Nothing the refused requests asked for happened.
    let attributes = alice
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    assert_eq!(
        attributes.attributes().unwrap()
            [&QueueAttributeName::ApproximateNumberOfMessagesNotVisible],
        "1"
    );

    let (status, headers, body) = server.raw(Some("AmazonSQS.ListQueues"), "{}").await;
    assert_eq!(status, 403);
    assert_eq!(
        headers["x-amzn-query-error"].to_str().unwrap(),
        "MissingAuthenticationToken;Sender"
    );
    assert_eq!(body["message"], "Request is missing Authentication Token");
    server.stop().await;
}

#[tokio::test]
async fn any_region_in_the_scope_is_accepted_and_keeps_its_queues_apart() {
    let server = signed_server().await;
    let east = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let frankfurt = server.client_as(ALICE.0, ALICE.1, "eu-central-1");
    frankfurt
        .create_queue()
        .queue_name("regional")
        .send()
        .await
        .unwrap();
    let listed = east.list_queues().send().await.unwrap();
    assert!(listed.queue_urls().is_empty(), "{listed:?}");
    let listed = frankfurt.list_queues().send().await.unwrap();
    assert_eq!(listed.queue_urls().len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn one_account_cannot_see_or_touch_anothers_queues() {
    let server = signed_server().await;
    let alice = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let bob = server.client_as(BOB.0, BOB.1, "us-east-1");
    let alices = create(&alice, "shared-name").await;

    assert!(bob
        .list_queues()
        .send()
        .await
        .unwrap()
        .queue_urls()
        .is_empty());
    assert_no_queue(bob.get_queue_url().queue_name("shared-name").send().await);
    assert_no_queue(
        bob.send_message()
            .queue_url(&alices)
            .message_body("x")
            .send()
            .await,
    );
    assert_no_queue(bob.receive_message().queue_url(&alices).send().await);
    assert_no_queue(bob.purge_queue().queue_url(&alices).send().await);
    assert_no_queue(bob.delete_queue().queue_url(&alices).send().await);

    // Bob's queue of the same name is his own.
    let bobs = create(&bob, "shared-name").await;
    assert!(bobs.ends_with("/222222222222/shared-name"), "{bobs}");
    bob.send_message()
        .queue_url(&bobs)
        .message_body("bob's")
        .send()
        .await
        .unwrap();
    let alice_sees = alice
        .receive_message()
        .queue_url(&alices)
        .send()
        .await
        .unwrap();
    assert!(alice_sees.messages().is_empty());
    let arn = alice
        .get_queue_attributes()
        .queue_url(&alices)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes()
        .unwrap()[&QueueAttributeName::QueueArn]
        .clone();
    assert_eq!(arn, "arn:aws:sqs:us-east-1:111111111111:shared-name");
    server.stop().await;
}

#[tokio::test]
async fn add_permission_lets_another_account_do_exactly_the_actions_it_names() {
    let server = signed_server().await;
    let alice = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let bob = server.client_as(BOB.0, BOB.1, "us-east-1");
    let url = create(&alice, "inbox").await;
    alice
        .add_permission()
        .queue_url(&url)
        .label("bob-sends")
        .aws_account_ids(BOB.2)
        .actions("SendMessage")
        .actions("GetQueueUrl")
        .send()
        .await
        .unwrap();

    bob.send_message()
        .queue_url(&url)
        .message_body("from bob")
        .send()
        .await
        .unwrap();
    let found = bob
        .get_queue_url()
        .queue_name("inbox")
        .queue_owner_aws_account_id(ALICE.2)
        .send()
        .await
        .unwrap();
    assert_eq!(found.queue_url(), Some(url.as_str()));
    assert_no_queue(bob.receive_message().queue_url(&url).send().await);
    let got = alice
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(got.messages()[0].body(), Some("from bob"));

    alice
        .remove_permission()
        .queue_url(&url)
        .label("bob-sends")
        .send()
        .await
        .unwrap();
    assert_no_queue(
        bob.send_message()
            .queue_url(&url)
            .message_body("again")
            .send()
            .await,
    );
    server.stop().await;
}

/// Alice's signing parameters at `time`, with these settings.
pub(crate) fn alices_params(
    identity: &Identity,
    time: SystemTime,
    settings: SigningSettings,
) -> aws_sigv4::http_request::SigningParams<'_> {
    v4::SigningParams::builder()
        .identity(identity)
        .region("us-east-1")
        .name("sqs")
        .time(time)
        .settings(settings)
        .build()
        .unwrap()
        .into()
}

pub(crate) fn alice() -> Identity {
    AwsCredentials::new(ALICE.0, ALICE.1, None, None, "t").into()
}

/// A request Alice signs in its header at `time` with `settings`: `method` to `url` with
/// `headers` (`host` among them, signed but left to the client to send), over `signed_body`;
/// the caller sets the body it actually sends.
pub(crate) fn signed_by_alice(
    (method, url): (&str, &str),
    headers: &[(&str, &str)],
    signed_body: &[u8],
    time: SystemTime,
    settings: SigningSettings,
) -> reqwest::RequestBuilder {
    let identity = alice();
    let params = alices_params(&identity, time, settings);
    let signable = SignableRequest::new(
        method,
        url,
        headers.iter().copied(),
        SignableBody::Bytes(signed_body),
    )
    .unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = reqwest::Client::new().request(method, url);
    for (name, value) in headers.iter().filter(|(n, _)| *n != "host") {
        request = request.header(*name, *value);
    }
    for (name, value) in instructions.headers() {
        request = request.header(name, value);
    }
    request
}

/// Signs a JSON 1.0 request to `base` as the SDK would, at `time`, over `signed_body`, and
/// sends `sent_body`.
async fn send_signed(
    base: &str,
    target: &str,
    signed_body: &str,
    sent_body: &str,
    time: SystemTime,
) -> (u16, String, serde_json::Value) {
    let host = base.trim_start_matches("http://").to_string();
    let headers = [
        ("content-type", "application/x-amz-json-1.0"),
        ("host", host.as_str()),
        ("x-amz-target", target),
    ];
    let url = format!("{base}/");
    let request = signed_by_alice(
        ("POST", &url),
        &headers,
        signed_body.as_bytes(),
        time,
        SigningSettings::default(),
    );
    let response = request.body(sent_body.to_string()).send().await.unwrap();
    let status = response.status().as_u16();
    let code = response
        .headers()
        .get("x-amzn-query-error")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, code, response.json().await.unwrap_or_default())
}

#[tokio::test]
async fn an_old_signature_or_a_tampered_body_is_refused_and_changes_nothing() {
    let server = signed_server().await;
    let body = r#"{"QueueName":"signed"}"#;
    let now = SystemTime::now();
    let (status, _, _) = send_signed(&server.base, "AmazonSQS.CreateQueue", body, body, now).await;
    assert_eq!(status, 200);

    let old = now - Duration::from_secs(16 * 60);
    let (status, code, json) = send_signed(
        &server.base,
        "AmazonSQS.CreateQueue",
        r#"{"QueueName":"old"}"#,
        r#"{"QueueName":"old"}"#,
        old,
    )
    .await;
    assert_eq!(
        (status, code.as_str()),
        (400, "RequestExpired;Sender"),
        "{json}"
    );
    assert!(
        json["message"]
            .as_str()
            .unwrap()
            .starts_with("Signature expired: "),
        "{json}"
    );

    let tampered = r#"{"QueueName":"tampered"}"#;
    let (status, code, _) =
        send_signed(&server.base, "AmazonSQS.CreateQueue", body, tampered, now).await;
    assert_eq!(
        (status, code.as_str()),
        (403, "SignatureDoesNotMatch;Sender")
    );

    let alice = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let urls = alice.list_queues().send().await.unwrap();
    assert_eq!(
        urls.queue_urls().len(),
        1,
        "only the signed queue: {urls:?}"
    );
    server.stop().await;
}

/// A presigned GET URL for a query-protocol action, valid for `expires`, signed at `time`.
pub(crate) fn presign(base: &str, query: &str, time: SystemTime, expires: Duration) -> String {
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(expires);
    let identity = alice();
    let params = alices_params(&identity, time, settings);
    let url = format!("{base}/?{query}");
    let signable = SignableRequest::new(
        "GET",
        url.as_str(),
        std::iter::empty(),
        SignableBody::UnsignedPayload,
    )
    .unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    let mut request = axum::http::Request::get(url).body(()).unwrap();
    instructions.apply_to_request_http1x(&mut request);
    request.uri().to_string()
}

#[tokio::test]
async fn a_presigned_url_works_until_it_expires() {
    let server = signed_server().await;
    let alice = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let url = create(&alice, "presigned").await;
    let query = format!(
        "Action=SendMessage&Version=2012-11-05&QueueUrl={}&MessageBody=by%20link",
        form_urlencoded::byte_serialize(url.as_bytes()).collect::<String>()
    );
    let http = reqwest::Client::new();
    let link = presign(
        &server.base,
        &query,
        SystemTime::now(),
        Duration::from_secs(300),
    );
    let response = http.get(&link).send().await.unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());

    let long_ago = SystemTime::now() - Duration::from_secs(600);
    let expired = presign(&server.base, &query, long_ago, Duration::from_secs(300));
    let response = http.get(&expired).send().await.unwrap();
    assert_eq!(response.status(), 400);
    let text = response.text().await.unwrap();
    assert!(text.contains("<Code>RequestExpired</Code>"), "{text}");

    let forged = link.replace("by%20link", "forged");
    let response = http.get(&forged).send().await.unwrap();
    assert_eq!(response.status(), 403);
    assert!(response
        .text()
        .await
        .unwrap()
        .contains("<Code>SignatureDoesNotMatch</Code>"));

    let got = alice
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    let bodies: Vec<_> = got.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["by link"]);
    server.stop().await;
}

#[tokio::test]
async fn the_admin_routes_want_the_admin_token_and_health_does_not() {
    let server = signed_server().await;
    let http = reqwest::Client::new();
    let metrics = format!("{}/metrics", server.base);
    assert_eq!(http.get(&metrics).send().await.unwrap().status(), 401);
    let per_queue = format!("{}/metrics/queues?prefix=q", server.base);
    assert_eq!(http.get(&per_queue).send().await.unwrap().status(), 401);
    let wrong = http
        .get(&metrics)
        .bearer_auth("guess")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let right = http
        .get(&metrics)
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 200);
    let health = http
        .get(format!("{}/health", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    server.stop().await;
}

#[tokio::test]
async fn another_accounts_move_tasks_can_be_neither_listed_nor_started_nor_cancelled() {
    let server = signed_server().await;
    let alice = server.client_as(ALICE.0, ALICE.1, "us-east-1");
    let bob = server.client_as(BOB.0, BOB.1, "us-east-1");
    let dlq = create(&alice, "dlq").await;
    let dlq_arn = "arn:aws:sqs:us-east-1:111111111111:dlq";
    let policy = format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":1}}"#);
    alice
        .create_queue()
        .queue_name("source")
        .attributes(QueueAttributeName::RedrivePolicy, policy)
        .send()
        .await
        .unwrap();
    alice
        .send_message()
        .queue_url(&dlq)
        .message_body("stuck")
        .send()
        .await
        .unwrap();
    let started = alice
        .start_message_move_task()
        .source_arn(dlq_arn)
        .max_number_of_messages_per_second(1)
        .send()
        .await
        .unwrap();
    let handle = started.task_handle().unwrap().to_string();

    assert!(bob
        .list_message_move_tasks()
        .source_arn(dlq_arn)
        .send()
        .await
        .is_err());
    assert!(bob
        .start_message_move_task()
        .source_arn(dlq_arn)
        .send()
        .await
        .is_err());
    assert!(bob
        .cancel_message_move_task()
        .task_handle(&handle)
        .send()
        .await
        .is_err());
    let listed = alice
        .list_message_move_tasks()
        .source_arn(dlq_arn)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.results().len(), 1);
    alice
        .cancel_message_move_task()
        .task_handle(&handle)
        .send()
        .await
        .unwrap();
    server.stop().await;
}

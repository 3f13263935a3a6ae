//! The query protocol on the wire: GET and POST, to `/` or to the queue URL, XML answers.

use crate::harness::TestServer;

async fn get(s: &TestServer, path_and_query: &str) -> (u16, String) {
    let response = reqwest::get(format!("{}{path_and_query}", s.base))
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The parameters of a SigV4 presigned URL (what `aws sqs` tools and SDK presigners add).
const PRESIGNED: &str = "&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=test%2F20261203%2Fus-east-1%2Fsqs%2Faws4_request&X-Amz-Date=20261203T000000Z&X-Amz-Expires=300&X-Amz-SignedHeaders=host&X-Amz-Signature=00";

async fn post(s: &TestServer, path: &str, form: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", s.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form.to_string())
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// Query requests in XML, to `/` or to the queue URL; a GET that looks presigned reads, but in
/// open mode (where no signature is checked) changes nothing: its parameters prove nothing.
#[tokio::test]
async fn query_requests_are_served_in_xml_and_an_unchecked_presigned_get_only_reads() {
    let s = TestServer::start().await;
    let (status, body) = get(
        &s,
        &format!("/?Action=CreateQueue&QueueName=legacy&Version=2012-11-05{PRESIGNED}"),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("<Code>AccessDenied</Code>"), "{body}");
    let (status, body) = post(
        &s,
        "/",
        "Action=CreateQueue&QueueName=legacy&Version=2012-11-05",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("<CreateQueueResponse xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\">")
    );
    assert!(body.contains(&format!(
        "<QueueUrl>{}/000000000000/legacy</QueueUrl>",
        s.base
    )));
    // Addressed to the queue URL: the path names the queue.
    let (status, body) = post(
        &s,
        "/000000000000/legacy",
        "Action=SendMessage&MessageBody=hi%20there",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("<MD5OfMessageBody>"));
    let (status, body) = get(
        &s,
        &format!("/000000000000/legacy?Action=GetQueueAttributes&AttributeName.1=All{PRESIGNED}"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("<Name>ApproximateNumberOfMessages</Name><Value>1</Value>"),
        "{body}"
    );
    let (_, body) = post(
        &s,
        "/000000000000/legacy",
        "Action=ReceiveMessage&AttributeName.1=All",
    )
    .await;
    assert!(body.contains("<Body>hi there</Body>"), "{body}");
    assert!(
        body.contains("<Name>ApproximateReceiveCount</Name><Value>1</Value>"),
        "{body}"
    );
}

#[tokio::test]
async fn an_unsigned_get_may_read_but_changes_nothing() {
    let s = TestServer::start().await;
    let url = s.queue("guarded", &[]).await;
    s.send(&url, "keep me").await;
    for action in [
        "DeleteQueue",
        "PurgeQueue",
        "SendMessage&MessageBody=x",
        "ReceiveMessage",
        "SetQueueAttributes&Attribute.1.Name=DelaySeconds&Attribute.1.Value=5",
    ] {
        let (status, body) = get(&s, &format!("/000000000000/guarded?Action={action}")).await;
        assert_eq!(status, 403, "{action}: {body}");
        assert!(body.contains("<Code>AccessDenied</Code>"), "{body}");
    }
    let (status, body) = get(
        &s,
        "/000000000000/guarded?Action=GetQueueAttributes&AttributeName.1=All",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("<Name>ApproximateNumberOfMessages</Name><Value>1</Value>"),
        "{body}"
    );
    assert!(
        body.contains("<Name>DelaySeconds</Name><Value>0</Value>"),
        "{body}"
    );
    let (status, _) = get(&s, "/?Action=ListQueues").await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn query_errors_are_xml_error_responses_with_legacy_codes() {
    let s = TestServer::start().await;
    let (status, body) = get(&s, "/?Action=GetQueueUrl&QueueName=absent").await;
    assert_eq!(status, 400);
    assert!(body.contains("<ErrorResponse xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\">"));
    assert!(body.contains("<Code>AWS.SimpleQueueService.NonExistentQueue</Code>"));
    assert!(body.contains("<Type>Sender</Type>"));
    assert!(body.contains("<RequestId>"));
    let (status, body) = get(&s, "/?Action=Teleport").await;
    assert_eq!(status, 400);
    assert!(body.contains("<Code>InvalidAction</Code>"));
    let (status, body) = get(&s, "/?QueueName=x").await;
    assert_eq!(
        (status, body.as_str()),
        (404, "<UnknownOperationException/>")
    );
}

#[tokio::test]
async fn a_form_post_to_the_queue_url_works() {
    let s = TestServer::start().await;
    let url = s.queue("formq", &[]).await;
    let response = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("Action=SendMessage&MessageBody=from%20a%20form&MessageAttribute.1.Name=k&MessageAttribute.1.Value.DataType=String&MessageAttribute.1.Value.StringValue=v")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let m = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap()
        .messages
        .unwrap()
        .remove(0);
    assert_eq!(m.body.as_deref(), Some("from a form"));
    assert_eq!(
        m.message_attributes.unwrap()["k"].string_value.as_deref(),
        Some("v")
    );
}

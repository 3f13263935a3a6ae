//! DNS rebinding (issue 35): a web page on a name its owner points at 127.0.0.1 is the same
//! origin as the server to the browser, but its requests carry its own name as `Host`. An open
//! server, and the admin routes of any server, refuse names that are not theirs.

use leasehold_server::hosts::AllowedHosts;
use leasehold_server::ServerConfig;

use super::auth::{signed_server, signed_server_config, ADMIN_TOKEN};
use super::harness::TestServer;

/// The port of `base` (`http://127.0.0.1:PORT`).
fn port(base: &str) -> &str {
    base.rsplit(':').next().unwrap()
}

async fn get(base: &str, path: &str, host: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .header("host", host)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn a_page_on_another_name_can_neither_read_nor_change_an_open_server() {
    let s = TestServer::start().await;
    s.queue("private", &[]).await;
    let evil = format!("evil.example:{}", port(&s.base));
    let (status, body) = get(&s.base, "/_leasehold/api/queues", &evil).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("--allowed-host evil.example"), "{body}");
    assert!(!body.contains("private"), "{body}");
    let (status, body) = get(&s.base, "/?Action=ListQueues", &evil).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("<Code>AccessDenied</Code>"), "{body}");
    // The form POST such a page sends: its own origin, same-origin to the browser.
    let created = reqwest::Client::new()
        .post(format!("{}/", s.base))
        .header("host", &evil)
        .header("origin", format!("http://{evil}"))
        .header("sec-fetch-site", "same-origin")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("Action=CreateQueue&QueueName=planted")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 403);
    let queues = s.sqs.list_queues().send().await.unwrap();
    assert_eq!(queues.queue_urls().len(), 1, "{:?}", queues.queue_urls());
    let json = reqwest::Client::new()
        .post(format!("{}/", s.base))
        .header("host", &evil)
        .header("x-amz-target", "AmazonSQS.ListQueues")
        .header("content-type", "application/x-amz-json-1.0")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(json.status(), 403);
    let body = json.text().await.unwrap();
    assert!(body.contains("AccessDenied"), "{body}");
    // Health says nothing, and orchestrators probe it by whatever name.
    assert_eq!(get(&s.base, "/health", &evil).await.0, 200);
}

#[tokio::test]
async fn loopback_names_ip_addresses_and_other_ports_are_served() {
    let s = TestServer::start().await;
    let port = port(&s.base);
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "[::1]".to_string(),
        format!("192.168.1.20:{port}"),
        // A port that is not the server's: a name is what a rebinding page cannot change.
        "localhost:1".to_string(),
    ] {
        let (status, body) = get(&s.base, "/?Action=ListQueues", &host).await;
        assert_eq!(status, 200, "{host}: {body}");
        let (status, body) = get(&s.base, "/_leasehold/api/queues", &host).await;
        assert_eq!(status, 200, "{host}: {body}");
    }
}

#[tokio::test]
async fn names_given_with_allowed_host_are_served() {
    let s = TestServer::start_config(ServerConfig {
        allowed_hosts: AllowedHosts::new(["leasehold".to_string(), "sqs.example.com".into()]),
        ..ServerConfig::default()
    })
    .await;
    for host in ["leasehold:9324", "SQS.example.com", "sqs.example.com."] {
        let (status, body) = get(&s.base, "/?Action=ListQueues", host).await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    assert_eq!(
        get(&s.base, "/?Action=ListQueues", "leasehold.evil")
            .await
            .0,
        403
    );
}

#[tokio::test]
async fn signed_requests_pass_by_any_name_but_the_admin_routes_check_it() {
    let server = signed_server().await;
    let evil = format!("evil.example:{}", port(&server.base));
    // SigV4 signs the Host: a page cannot forge one, so signed SQS is not checked; an
    // unsigned request by that name is refused for its missing signature.
    let (status, body) = get(&server.base, "/?Action=ListQueues", &evil).await;
    assert_ne!(status, 200, "{body}");
    assert!(!body.contains("allowed-host"), "{body}");
    let metrics = |host: String| {
        reqwest::Client::new()
            .get(format!("{}/metrics", server.base))
            .header("host", host)
            .bearer_auth(ADMIN_TOKEN)
            .send()
    };
    let refused = metrics(evil.clone()).await.unwrap();
    assert_eq!(refused.status(), 403);
    assert!(refused.text().await.unwrap().contains("--allowed-host"));
    let served = metrics(format!("localhost:{}", port(&server.base)))
        .await
        .unwrap();
    assert_eq!(served.status(), 200);
    server.stop().await;
    let allowed = signed_server_config(ServerConfig {
        allowed_hosts: AllowedHosts::new(["evil.example".to_string()]),
        ..ServerConfig::default()
    })
    .await;
    let served = reqwest::Client::new()
        .get(format!("{}/metrics", allowed.base))
        .header("host", evil)
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), 200);
    allowed.stop().await;
}

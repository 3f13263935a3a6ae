//! `leasehold serve --config FILE` and the rules about who may reach the server, against the
//! real binary: declared queues are made at start and a second start changes nothing; a
//! changed declaration is applied and logged; variables override the file; a wrong file is
//! one line naming the key and its line, exit 2; an open server refuses a non-loopback bind;
//! names given with `allowed-host` and the host of `public-url` pass the Host check.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use aws_sdk_sqs::types::QueueAttributeName;
use common::{client, free_port, wait_until_listening, Running};

const DECLARED: &str = r#"
data-dir = "DATA"
idle-timeout = 30

[[queues]]
name = "orders-dlq"

[[queues]]
name = "orders"
attributes = { VisibilityTimeout = 60, RedrivePolicy = { deadLetterTargetArn = "orders-dlq", maxReceiveCount = 5 } }
tags = { team = "payments" }

[[queues]]
name = "events.fifo"
attributes = { FifoQueue = true, ContentBasedDeduplication = true }
"#;

fn write_config(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("leasehold.toml");
    let data = dir.join("data");
    std::fs::write(&path, text.replace("DATA", &data.display().to_string())).unwrap();
    path
}

fn start(config: &Path, port: u16, env: &[(&str, &str)]) -> Running {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    command
        .args(["serve", "--config"])
        .arg(config)
        .env("LEASEHOLD_BIND", format!("127.0.0.1:{port}"))
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let running = Running::new(command.spawn().unwrap());
    wait_until_listening(port);
    running
}

/// SIGTERM, then everything the server logged.
fn stop(running: Running) -> String {
    running.terminate()
}

async fn attribute(port: u16, url: &str, name: QueueAttributeName) -> String {
    let out = client(port)
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(name.clone())
        .send()
        .await
        .unwrap();
    out.attributes().unwrap()[&name].clone()
}

#[tokio::test]
async fn declared_queues_are_made_at_start_and_a_second_start_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), DECLARED);
    let port = free_port();
    let server = start(&config, port, &[]);
    let sqs = client(port);
    let orders = common::queue_url(&sqs, "orders").await;
    assert_eq!(
        attribute(port, &orders, QueueAttributeName::VisibilityTimeout).await,
        "60"
    );
    let redrive = attribute(port, &orders, QueueAttributeName::RedrivePolicy).await;
    assert!(redrive.contains(":000000000000:orders-dlq"), "{redrive}");
    let tags = sqs
        .list_queue_tags()
        .queue_url(&orders)
        .send()
        .await
        .unwrap();
    assert_eq!(tags.tags().unwrap()["team"], "payments");
    let events = common::queue_url(&sqs, "events.fifo").await;
    assert_eq!(
        attribute(port, &events, QueueAttributeName::ContentBasedDeduplication).await,
        "true"
    );
    common::send(&sqs, &orders, "kept").await;
    let first = stop(server);
    assert_eq!(
        first.matches("declared queue created").count(),
        3,
        "{first}"
    );

    let server = start(&config, port, &[]);
    assert_eq!(common::stored(&client(port), &orders).await, 1);
    let second = stop(server);
    assert!(
        !second.contains("declared queue"),
        "a second start changed something: {second}"
    );

    let changed = DECLARED.replace("VisibilityTimeout = 60", "VisibilityTimeout = 90");
    let config = write_config(dir.path(), &changed);
    let server = start(&config, port, &[]);
    assert_eq!(
        attribute(port, &orders, QueueAttributeName::VisibilityTimeout).await,
        "90"
    );
    let third = stop(server);
    assert!(third.contains("declared queue updated"), "{third}");
    assert!(third.contains("VisibilityTimeout: 60 -> 90"), "{third}");
}

#[tokio::test]
async fn variables_and_flags_override_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "bind = \"127.0.0.1:1\"\nin-memory = true\naccount-id = \"123456789012\"\n",
    );
    let port = free_port();
    // LEASEHOLD_BIND (set by `start`) wins over the file's unusable port 1.
    let server = start(&config, port, &[]);
    let url = common::create_queue(&client(port), "where").await;
    assert_eq!(
        attribute(port, &url, QueueAttributeName::QueueArn).await,
        "arn:aws:sqs:us-east-1:123456789012:where"
    );
    stop(server);
}

#[test]
fn a_wrong_file_is_one_line_naming_the_key_and_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "in-memory = true\nidle-timout = 30\n");
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("line 2") && stderr.contains("idle-timout"),
        "{stderr}"
    );

    let config = write_config(
        dir.path(),
        "in-memory = true\n[[queues]]\nname = \"bad\"\nattributes = { VisibilityTimeout = 99999 }\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "serve",
            "--bind",
            &format!("127.0.0.1:{}", free_port()),
            "--config",
        ])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("queue `bad`") && stderr.contains("VisibilityTimeout"),
        "{stderr}"
    );
}

/// A credentials file in `dir` with the key the tests' SDK client signs with.
fn test_credentials(dir: &Path) -> std::path::PathBuf {
    let credentials = dir.join("credentials");
    std::fs::write(
        &credentials,
        "[tests]\naws_access_key_id = test\naws_secret_access_key = test\n",
    )
    .unwrap();
    credentials
}

/// `serve` (with `extra` flags) is refused at start, exit 2, in one line that says `says`
/// and names --allow-anonymous; with --allow-anonymous it serves on `port`, and warns.
fn refused_unless_allowed_by_name(serve: impl Fn(&[&str]) -> Command, port: u16, says: &str) {
    let out = serve(&[]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(says) && stderr.contains("--allow-anonymous"),
        "{stderr}"
    );
    let open = Running::new(
        serve(&["--allow-anonymous"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_until_listening(port);
    let logs = open.terminate();
    assert!(logs.contains("WARN") && logs.contains(says), "{logs}");
}

#[test]
fn an_open_server_refuses_a_non_loopback_bind_unless_allowed_by_name() {
    let port = free_port();
    let serve = |extra: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
        command
            .args(["serve", "--in-memory", "--bind", &format!("0.0.0.0:{port}")])
            .args(extra);
        command
    };
    refused_unless_allowed_by_name(serve, port, "without credentials");
}

#[test]
fn a_non_loopback_admin_listener_is_refused_unless_allowed_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let credentials = test_credentials(dir.path());
    let (port, admin_port) = (free_port(), free_port());
    let serve = |extra: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
        command
            .args(["serve", "--in-memory", "--credentials"])
            .arg(&credentials)
            .args(["--bind", &format!("127.0.0.1:{port}")])
            .args(["--admin-bind", &format!("0.0.0.0:{admin_port}")])
            .args(extra)
            .stdout(Stdio::null());
        command
    };
    refused_unless_allowed_by_name(serve, admin_port, "admin routes");
}

#[test]
fn a_wrong_credentials_file_is_a_usage_error_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    std::fs::write(&file, "[default]\naws_access_key_id = K\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--in-memory", "--credentials"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("profile [default]") && stderr.contains("aws_secret_access_key"),
        "{stderr}"
    );
}

#[tokio::test]
async fn with_credentials_the_admin_routes_want_the_token_or_the_admin_listener() {
    let dir = tempfile::tempdir().unwrap();
    let credentials = test_credentials(dir.path());
    let (port, admin_port) = (free_port(), free_port());
    let server = Running::new(
        Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args([
                "serve",
                "--in-memory",
                "--bind",
                &format!("127.0.0.1:{port}"),
            ])
            .args([
                "--admin-token",
                "let-me-in",
                "--admin-bind",
                &format!("127.0.0.1:{admin_port}"),
            ])
            .arg("--credentials")
            .arg(&credentials)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until_listening(port);
    wait_until_listening(admin_port);
    common::create_queue(&client(port), "watched").await;
    let http = reqwest::Client::new();
    let get = |url: String, token: Option<&str>| {
        let mut request = http.get(url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(
        get(format!("http://127.0.0.1:{port}/metrics"), None).await,
        401
    );
    assert_eq!(
        get(
            format!("http://127.0.0.1:{port}/metrics"),
            Some("let-me-in")
        )
        .await,
        200
    );
    assert_eq!(
        get(format!("http://127.0.0.1:{admin_port}/metrics"), None).await,
        200
    );
    assert_eq!(
        get(format!("http://127.0.0.1:{admin_port}/ready"), None).await,
        200
    );
    // The admin listener serves no SQS; its root is the dashboard.
    assert_eq!(
        reqwest::Client::new()
            .post(format!("http://127.0.0.1:{admin_port}/"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        405
    );
    let page = reqwest::get(format!("http://127.0.0.1:{admin_port}/"))
        .await
        .unwrap();
    assert_eq!(page.url().path(), "/_leasehold/dashboard/");
    // Open, but not to a page of another site that would change something.
    let cross_site = reqwest::Client::new()
        .post(format!(
            "http://127.0.0.1:{admin_port}/_leasehold/api/queues/watched/redrive"
        ))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(cross_site.status(), 403);
    assert!(page
        .text()
        .await
        .unwrap()
        .contains("<title>Leasehold</title>"));

    let advise = |token: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
        command
            .args([
                "advise",
                "--endpoint-url",
                &format!("http://127.0.0.1:{port}"),
                "--queue",
                "watched",
            ])
            .env_remove("LEASEHOLD_ADMIN_TOKEN");
        if let Some(token) = token {
            command.args(["--admin-token", token]);
        }
        command.output().unwrap()
    };
    let refused = advise(None);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--admin-token"));
    let allowed = advise(Some("let-me-in"));
    assert!(
        !String::from_utf8_lossy(&allowed.stderr).contains("admin token"),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
    drop(server);
}

#[tokio::test]
async fn the_public_url_starts_every_queue_url() {
    let port = free_port();
    let _server = Running::new(
        Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args([
                "serve",
                "--in-memory",
                "--bind",
                &format!("127.0.0.1:{port}"),
            ])
            .args(["--public-url", "https://sqs.example.com:8443"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until_listening(port);
    let sqs = client(port);
    let url = common::create_queue(&sqs, "behind-a-proxy").await;
    assert_eq!(
        url,
        "https://sqs.example.com:8443/000000000000/behind-a-proxy"
    );
    common::send(&sqs, &url, "through the proxy's URL").await;
    assert_eq!(common::stored(&sqs, &url).await, 1);
}

async fn status_by_name(port: u16, host: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/?Action=ListQueues"))
        .header("host", host)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn names_from_the_file_and_the_public_url_are_served_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "in-memory = true\nallowed-host = [\"leasehold\", \"queue.internal:9324\"]\npublic-url = \"https://sqs.example.com:8443\"\n",
    );
    let port = free_port();
    let server = start(&config, port, &[]);
    for host in [
        "leasehold:9324",
        "queue.internal",
        "sqs.example.com:8443",
        "localhost",
    ] {
        assert_eq!(status_by_name(port, host).await, 200, "{host}");
    }
    assert_eq!(status_by_name(port, "evil.example").await, 403);
    stop(server);
}

#[test]
fn an_allowed_host_that_is_not_a_name_is_a_usage_error_at_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "serve",
            "--in-memory",
            "--allowed-host",
            "evil.example/path",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--allowed-host"), "{stderr}");
    assert!(stderr.contains("expected a host name"), "{stderr}");
}

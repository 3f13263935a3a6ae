//! `leasehold work` as a new user first runs it: with only a local queue URL and no AWS
//! settings it consumes; a mistake is one readable line and exit code 2, found at start.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Server, POSTGRES_URL};

/// `leasehold ARGS` in an environment with no AWS settings at all (and no way to reach the
/// instance metadata service).
fn bare(args: &[&str], home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

fn run(args: &[&str], home: &Path) -> (Output, String) {
    let out = bare(args, home).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, err)
}

#[tokio::test]
async fn with_only_a_local_queue_url_and_no_credentials_it_consumes() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue(&sqs, "first-try").await;
    common::send(&sqs, &url, "hello").await;
    let home = tempfile::tempdir().unwrap();
    let got = home.path().join("got");
    let script = format!("cat > {}", got.display());
    let mut worker = bare(
        &["work", "--queue-url", &url, "--", "sh", "-c", &script],
        home.path(),
    )
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while common::stored(&sqs, &url).await > 0 {
        assert!(Instant::now() < deadline, "the message was not consumed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(std::fs::read_to_string(&got).unwrap(), "hello");
    let _ = worker.kill();
    let out = worker.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("placeholder credentials").count(), 1, "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "colour codes in logs that are not a terminal: {err}"
    );
}

/// A mistake's message: one line (clap's own usage errors add a hint), and exit code 2.
fn assert_mistake(args: &[&str], home: &Path, says: &str) {
    let (out, err) = run(args, home);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
    for debug_dump in ["DispatchFailure {", "Os {", "panicked", "Stack backtrace"] {
        assert!(!err.contains(debug_dump), "{args:?}: {err}");
    }
}

#[tokio::test]
async fn mistakes_are_found_at_start_and_said_in_one_line_with_exit_code_2() {
    let server = Server::start(&[]);
    let url = common::create_queue(&server.client(), "exists").await;
    let missing = url.replace("exists", "missing");
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let started = Instant::now();
    assert_mistake(
        &["work", "--queue-url", &missing, "--", "true"],
        h,
        "QueueDoesNotExist: The specified queue does not exist.",
    );
    assert_mistake(
        &["work", "--queue-url", &url, "--lease", "0", "--", "true"],
        h,
        "0 is not in 1..=43200",
    );
    assert_mistake(
        &[
            "work",
            "--queue-url",
            &url,
            "--lease",
            "43201",
            "--",
            "true",
        ],
        h,
        "43201 is not in 1..=43200",
    );
    assert_mistake(
        &[
            "work",
            "--queue-url",
            &url,
            "--concurrency",
            "0",
            "--",
            "true",
        ],
        h,
        "0 is not in 1..=10000",
    );
    assert_mistake(
        &["work", "--queue-url", &url, "--", "no-such-command-here"],
        h,
        "the command \"no-such-command-here\" was not found",
    );
    // --http: a web URL, instead of a command, never both.
    assert_mistake(
        &["work", "--queue-url", &url, "--http", "ftp://x/work"],
        h,
        "an http:// URL of a local web app, not ftp:",
    );
    assert_mistake(
        &["work", "--queue-url", &url, "--http", "https://x/work"],
        h,
        "an http:// URL of a local web app, not https:",
    );
    assert_mistake(
        &[
            "work",
            "--queue-url",
            &url,
            "--http",
            "http://x/work",
            "--",
            "true",
        ],
        h,
        "cannot be used with",
    );
    assert_mistake(
        &[
            "work",
            "--queue-url",
            &url,
            "--kill-grace",
            "1",
            "--http",
            "http://x/w",
        ],
        h,
        "cannot be used with",
    );
    let stopped = url.replace(&server.port.to_string(), &common::free_port().to_string());
    assert_mistake(
        &["work", "--queue-url", &stopped, "--", "true"],
        h,
        "Connection refused",
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "no retry loops on a mistake"
    );
}

#[tokio::test]
async fn postgres_an_idempotency_store_that_cannot_be_used_is_named_with_its_cause() {
    let server = Server::start(&[]);
    let url = common::create_queue(&server.client(), "gated").await;
    let home = tempfile::tempdir().unwrap();
    let absent = POSTGRES_URL.replace("/test", "/no_such_database");
    let started = Instant::now();
    assert_mistake(
        &[
            "work",
            "--queue-url",
            &url,
            "--idempotency",
            &absent,
            "--",
            "true",
        ],
        home.path(),
        "database \"no_such_database\" does not exist",
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn logs_can_be_json_lines() {
    let server = Server::start(&[]);
    let url = common::create_queue(&server.client(), "json-logs").await;
    let home = tempfile::tempdir().unwrap();
    let missing = url.replace("json-logs", "missing");
    let (_, err) = run(
        &[
            "--log-format",
            "json",
            "work",
            "--queue-url",
            &missing,
            "--",
            "true",
        ],
        home.path(),
    );
    let log = err.lines().next().unwrap_or_default();
    let parsed: serde_json::Value =
        serde_json::from_str(log).unwrap_or_else(|e| panic!("{e}: {log}"));
    assert_eq!(parsed["level"], "INFO");
}

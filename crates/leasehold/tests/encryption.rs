//! Encryption at rest (issue 30) against the real binary and its real data files: what an
//! encrypted queue stores is not readable in them (a clear queue's is, which shows the search
//! can see a body); a byte changed in a sealed record, or a record put in another's place, is
//! reported with its queue and message id and never served; keys rotate by a line added; a
//! key file that is missing or wrong stops the start with one line.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName};
use common::{client, free_port, wait_until_listening};

/// A server on `data`, its log written to `log`.
struct Serving {
    child: Child,
    port: u16,
}

impl Serving {
    fn start(data: &Path, log: &Path, extra: &[&str]) -> Serving {
        let port = free_port();
        let child = serve_command(data, port, extra)
            .stderr(File::create(log).unwrap())
            .spawn()
            .expect("the leasehold binary starts");
        wait_until_listening(port);
        Serving { child, port }
    }

    fn sqs(&self) -> aws_sdk_sqs::Client {
        client(self.port)
    }

    /// Stops it at once (what it acknowledged is on disk: fsync always).
    fn stop(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve_command(data: &Path, port: u16, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    command
        .args([
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data)
        .args(extra)
        .env_remove("LEASEHOLD_ENCRYPTION_KEY_FILE")
        .stdout(Stdio::null());
    command
}

/// A start that must fail: its exit status and what it said.
fn start_refused(data: &Path) -> (std::process::ExitStatus, String) {
    let mut child = serve_command(data, free_port(), &[])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut said = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut said).unwrap();
            return (status, said);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server started on a key file that does not fit its data");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every byte of the data directory's files: the data file, its write-ahead log, the rest.
fn raw_bytes(data: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(data).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() && path.file_name().unwrap() != "encryption.key" {
            all.extend(std::fs::read(&path).unwrap());
        }
    }
    all
}

fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn data_file(data: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(data.join("leasehold.db")).unwrap()
}

/// The keys of the message contents in the data file, oldest message first.
fn content_keys(data: &Path) -> Vec<Vec<u8>> {
    let db = data_file(data);
    let mut statement = db
        .prepare("SELECT k FROM kv WHERE length(k) = 26 AND substr(k, 1, 1) = X'4D' ORDER BY k")
        .unwrap();
    let keys = statement
        .query_map([], |row| row.get::<_, Vec<u8>>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    keys
}

fn value_at(data: &Path, key: &[u8]) -> Vec<u8> {
    data_file(data)
        .query_row("SELECT v FROM kv WHERE k = ?1", [key], |row| row.get(0))
        .unwrap()
}

fn put_at(data: &Path, key: &[u8], value: &[u8]) {
    data_file(data)
        .execute("UPDATE kv SET v = ?2 WHERE k = ?1", (key, value))
        .unwrap();
}

async fn create(sqs: &aws_sdk_sqs::Client, name: &str, attributes: &[(&str, &str)]) -> String {
    let mut request = sqs.create_queue().queue_name(name);
    for (attribute, value) in attributes {
        request = request.attributes(QueueAttributeName::from(*attribute), *value);
    }
    request.send().await.unwrap().queue_url.unwrap()
}

async fn send(sqs: &aws_sdk_sqs::Client, url: &str, body: &str) -> String {
    let attribute = MessageAttributeValue::builder()
        .data_type("String")
        .string_value(format!("{body}-ATTRIBUTE"))
        .build()
        .unwrap();
    (sqs.send_message().queue_url(url).message_body(body))
        .message_attributes("tag", attribute)
        .send()
        .await
        .unwrap()
        .message_id
        .unwrap()
}

/// Bodies received (and their attribute's value) until `count` came, or 10 s passed.
async fn receive(sqs: &aws_sdk_sqs::Client, url: &str, count: usize) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.len() < count && Instant::now() < deadline {
        let received = (sqs.receive_message().queue_url(url))
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_attribute_names("All")
            .send()
            .await
            .unwrap();
        for message in received.messages.unwrap_or_default() {
            let tag = (message.message_attributes.as_ref())
                .and_then(|a| a.get("tag"))
                .and_then(|v| v.string_value.clone())
                .unwrap_or_default();
            got.push((message.body.unwrap_or_default(), tag));
        }
    }
    got.sort();
    got
}

async fn sse_of(sqs: &aws_sdk_sqs::Client, url: &str) -> String {
    let attributes = (sqs.get_queue_attributes().queue_url(url))
        .attribute_names(QueueAttributeName::SqsManagedSseEnabled)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    attributes[&QueueAttributeName::SqsManagedSseEnabled].clone()
}

fn key_file(data: &Path) -> PathBuf {
    data.join("encryption.key")
}

#[tokio::test]
async fn an_encrypted_queue_s_bodies_and_attributes_are_not_in_the_data_files_and_a_clear_one_s_are(
) {
    let dir = tempfile::tempdir().unwrap();
    let (data, log) = (dir.path().join("data"), dir.path().join("log"));
    let server = Serving::start(&data, &log, &[]);
    let sqs = server.sqs();
    let sealed = create(&sqs, "sealed", &[]).await;
    let clear = create(&sqs, "clear", &[("SqsManagedSseEnabled", "false")]).await;
    assert_eq!(sse_of(&sqs, &sealed).await, "true");
    assert_eq!(sse_of(&sqs, &clear).await, "false");
    send(&sqs, &sealed, "SECRET-BODY-7f3a").await;
    send(&sqs, &clear, "PLAIN-BODY-5e1d").await;
    server.stop();

    let raw = raw_bytes(&data);
    assert!(
        holds(&raw, "PLAIN-BODY-5e1d"),
        "the search cannot see a body"
    );
    assert!(holds(&raw, "PLAIN-BODY-5e1d-ATTRIBUTE"));
    assert!(
        !holds(&raw, "SECRET-BODY-7f3a"),
        "an encrypted body is in the data files"
    );
    assert!(
        !holds(&raw, "7f3a-ATTRIBUTE"),
        "an encrypted attribute is in the data files"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(key_file(&data)).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the key file is readable by others");
    // Format 2: a release that cannot open sealed contents refuses the file at start.
    let format: i64 = data_file(&data)
        .query_row("SELECT v FROM meta WHERE k = 'format'", [], |row| {
            row.get(0)
        })
        .unwrap();
    assert_eq!(format, 2);

    let server = Serving::start(&data, &log, &[]);
    let sqs = server.sqs();
    let secret = (
        "SECRET-BODY-7f3a".to_string(),
        "SECRET-BODY-7f3a-ATTRIBUTE".to_string(),
    );
    assert_eq!(receive(&sqs, &sealed, 1).await, vec![secret]);
    assert_eq!(receive(&sqs, &clear, 1).await.len(), 1);
}

#[tokio::test]
async fn a_changed_byte_or_a_record_in_another_s_place_is_reported_by_queue_and_id_and_never_served(
) {
    let dir = tempfile::tempdir().unwrap();
    let (data, log) = (dir.path().join("data"), dir.path().join("log"));
    let server = Serving::start(&data, &log, &[]);
    let sqs = server.sqs();
    let url = create(&sqs, "tampered", &[]).await;
    let mut ids = Vec::new();
    for body in ["m0", "m1", "m2", "m3"] {
        ids.push(send(&sqs, &url, body).await);
    }
    server.stop();

    let keys = content_keys(&data);
    assert_eq!(keys.len(), 4);
    // m0: one byte of its ciphertext flipped.
    let mut flipped = value_at(&data, &keys[0]);
    let last = flipped.len() - 1;
    flipped[last] ^= 0x01;
    put_at(&data, &keys[0], &flipped);
    // m1 and m2: each in the other's place, both whole.
    let (one, two) = (value_at(&data, &keys[1]), value_at(&data, &keys[2]));
    put_at(&data, &keys[1], &two);
    put_at(&data, &keys[2], &one);

    let server = Serving::start(&data, &log, &["--body-cache-mb", "0"]);
    let sqs = server.sqs();
    let served = receive(&sqs, &url, 4).await;
    assert_eq!(served, vec![("m3".to_string(), "m3-ATTRIBUTE".to_string())]);
    server.stop();
    let said = std::fs::read_to_string(&log).unwrap();
    for id in &ids[..3] {
        let line = (said.lines())
            .find(|line| line.contains(id.as_str()))
            .unwrap_or_else(|| panic!("message {id} is not reported: {said}"));
        assert!(line.contains("integrity check"), "{line}");
        assert!(line.contains("tampered"), "the queue is not named: {line}");
    }
    assert!(!said.contains(ids[3].as_str()));
}

#[tokio::test]
async fn keys_rotate_by_a_line_added_and_a_missing_or_wrong_key_file_stops_the_start_with_one_line()
{
    let dir = tempfile::tempdir().unwrap();
    let (data, log) = (dir.path().join("data"), dir.path().join("log"));
    let server = Serving::start(&data, &log, &[]);
    let sqs = server.sqs();
    let url = create(&sqs, "rotated", &[]).await;
    send(&sqs, &url, "before").await;
    server.stop();

    let first = std::fs::read_to_string(key_file(&data)).unwrap();
    let second_key = "2 ".to_string() + &"5a".repeat(32) + "\n";
    std::fs::write(key_file(&data), format!("{first}{second_key}")).unwrap();
    let server = Serving::start(&data, &log, &[]);
    send(&server.sqs(), &url, "after").await;
    server.stop();
    // Sealed under key 1, then under key 2: the number after the record's first byte.
    let numbers: Vec<u32> = (content_keys(&data).iter())
        .map(|key| u32::from_be_bytes(value_at(&data, key)[1..5].try_into().unwrap()))
        .collect();
    assert_eq!(numbers, vec![1, 2]);
    let server = Serving::start(&data, &log, &["--body-cache-mb", "0"]);
    let bodies: Vec<String> = (receive(&server.sqs(), &url, 2).await.into_iter())
        .map(|(body, _)| body)
        .collect();
    assert_eq!(bodies, vec!["after", "before"]);
    server.stop();

    let refusals = [
        // The old key's line removed.
        (second_key.clone(), "has no key 1"),
        // Another key under number 1.
        (
            format!("1 {}\n{second_key}", "00".repeat(32)),
            "different key numbered 1",
        ),
    ];
    for (file, expected) in refusals {
        std::fs::write(key_file(&data), file).unwrap();
        let (status, said) = start_refused(&data);
        assert!(!status.success());
        let lines: Vec<&str> = said.lines().filter(|l| l.contains("key file")).collect();
        assert_eq!(lines.len(), 1, "{said}");
        assert!(lines[0].contains(expected), "{said}");
    }
    std::fs::remove_file(key_file(&data)).unwrap();
    let (status, said) = start_refused(&data);
    assert!(!status.success());
    assert!(said.contains("is missing"), "{said}");
    // Nothing was made in its place.
    assert!(!key_file(&data).exists());
}

#[tokio::test]
async fn a_message_moved_to_its_dead_letter_queue_opens_there() {
    let dir = tempfile::tempdir().unwrap();
    let (data, log) = (dir.path().join("data"), dir.path().join("log"));
    // No cache: every content read comes from the data file.
    let server = Serving::start(&data, &log, &["--body-cache-mb", "0"]);
    let sqs = server.sqs();
    let dead = create(&sqs, "moved-dlq", &[]).await;
    let policy = r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:moved-dlq","maxReceiveCount":1}"#;
    let url = create(
        &sqs,
        "moved",
        &[("RedrivePolicy", policy), ("VisibilityTimeout", "0")],
    )
    .await;
    send(&sqs, &url, "moved-body").await;
    assert_eq!(receive(&sqs, &url, 1).await.len(), 1);
    // Its second receive moves it.
    let again = (sqs.receive_message().queue_url(&url))
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    assert!(again.messages.unwrap_or_default().is_empty());
    server.stop();
    let server = Serving::start(&data, &log, &["--body-cache-mb", "0"]);
    let expected = ("moved-body".to_string(), "moved-body-ATTRIBUTE".to_string());
    assert_eq!(receive(&server.sqs(), &dead, 1).await, vec![expected]);
    server.stop();
    assert!(!std::fs::read_to_string(&log).unwrap().contains("integrity"));
}

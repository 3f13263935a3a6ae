//! Encryption at rest on PostgreSQL (issue 30): what the table holds of an encrypted queue's
//! messages, a row changed or swapped by hand, moves between queues, key rotation, and the
//! refusals at start. Test names carry `postgres` (`scripts/test --no-services` skips them).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use leasehold_backend::{BackendError, Messages, QueueAdmin};
use leasehold_engine::{AttributeData, MessageAttribute, NewMessage, ReceiveRequest};
use leasehold_postgres::{Options, Postgres, StartError};

mod common;
use common::{naming, Schema, URL};

const SECRET_BODY: &str = "the secret body 7f3a9c";
const SECRET_ATTRIBUTE: &str = "a secret attribute 91c2e";

fn key_file(dir: &Path, lines: &[(u32, u8)]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("encryption.key");
    let text: String = lines
        .iter()
        .map(|(number, byte)| format!("{number} {}\n", format!("{byte:02x}").repeat(32)))
        .collect();
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    path
}

async fn keyed(schema: &Schema, key_file: Option<&Path>) -> Result<Postgres, StartError> {
    let options = Options {
        schema: Some(schema.0.clone()),
        encryption_key_file: key_file.map(Path::to_path_buf),
        ..Options::default()
    };
    Postgres::connect(URL, naming(), options).await
}

fn receive(max: u32, visibility_s: Option<u32>) -> ReceiveRequest {
    ReceiveRequest {
        max_messages: max,
        visibility_s,
        attempt_id: None,
    }
}

fn secret_message(body: &str) -> NewMessage {
    let mut message = NewMessage::new(body);
    message.attributes.insert(
        "note".into(),
        MessageAttribute {
            data_type: "String".into(),
            data: AttributeData::Text(SECRET_ATTRIBUTE.into()),
        },
    );
    message
}

/// The schema's rows of `leasehold_messages`, each whole as text (`m::text`).
async fn rows_as_text(schema: &Schema) -> Vec<String> {
    let client = client(schema).await;
    let rows = client
        .query("SELECT m::text FROM leasehold_messages m", &[])
        .await
        .unwrap();
    rows.iter().map(|row| row.get(0)).collect()
}

async fn client(schema: &Schema) -> tokio_postgres::Client {
    let url = format!("{URL}?options=-c%20search_path%3D{}", schema.0);
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// `text` as the bytea hex PostgreSQL shows (`\x...`) holds it.
fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn holds(rows: &[String], text: &str) -> bool {
    rows.iter()
        .any(|row| row.contains(text) || row.contains(&hex(text)))
}

/// Queue `src`, whose messages go to queue `dlq` after one receive.
async fn src_with_dead_letter_queue(server: &Postgres) {
    server.create_queue("dlq", vec![], vec![]).await.unwrap();
    let policy =
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":"1"}"#;
    let redrive = vec![("RedrivePolicy".to_string(), policy.to_string())];
    server.create_queue("src", redrive, vec![]).await.unwrap();
}

async fn sse_of(server: &Postgres, queue: &str) -> String {
    let pairs = server
        .get_attributes(queue, vec!["SqsManagedSseEnabled".into()])
        .await
        .unwrap();
    pairs[0].1.clone()
}

#[tokio::test]
async fn postgres_an_encrypted_queue_s_bodies_and_attributes_are_not_in_the_table_and_read_back_whole(
) {
    let dir = tempfile::tempdir().unwrap();
    let keys = key_file(dir.path(), &[(1, 7)]);
    let schema = Schema::new().await;
    let server = keyed(&schema, Some(&keys)).await.unwrap();
    server.create_queue("sealed", vec![], vec![]).await.unwrap();
    let fifo = vec![
        ("FifoQueue".to_string(), "true".to_string()),
        ("ContentBasedDeduplication".to_string(), "true".to_string()),
    ];
    server
        .create_queue("sealed.fifo", fifo, vec![])
        .await
        .unwrap();
    let clear = vec![("SqsManagedSseEnabled".to_string(), "false".to_string())];
    server.create_queue("clear", clear, vec![]).await.unwrap();
    assert_eq!(
        sse_of(&server, "sealed").await,
        "true",
        "on by default, as on AWS"
    );
    assert_eq!(sse_of(&server, "clear").await, "false");

    server
        .send("sealed", secret_message(SECRET_BODY))
        .await
        .unwrap();
    let batch = vec![secret_message(&format!("{SECRET_BODY} two"))];
    server.send_batch("sealed", batch).await.unwrap();
    let mut fifo_message = secret_message(&format!("{SECRET_BODY} fifo"));
    fifo_message.group_id = Some("g".into());
    server.send("sealed.fifo", fifo_message).await.unwrap();
    server
        .send("clear", NewMessage::new("a plain body"))
        .await
        .unwrap();

    let rows = rows_as_text(&schema).await;
    assert_eq!(rows.len(), 4);
    assert!(!holds(&rows, SECRET_BODY), "{rows:?}");
    assert!(!holds(&rows, SECRET_ATTRIBUTE), "{rows:?}");
    assert!(holds(&rows, "a plain body"), "the clear queue is as asked");

    for (queue, bodies) in [
        (
            "sealed",
            vec![SECRET_BODY.to_string(), format!("{SECRET_BODY} two")],
        ),
        ("sealed.fifo", vec![format!("{SECRET_BODY} fifo")]),
    ] {
        let got = server.receive(queue, receive(10, None)).await.unwrap();
        let mut read: Vec<String> = got.deliveries.iter().map(|d| d.body.to_string()).collect();
        read.sort();
        assert_eq!(read, bodies);
        for delivery in &got.deliveries {
            let note = &delivery.attributes.as_ref().expect("attributes")["note"];
            assert_eq!(note.data, AttributeData::Text(SECRET_ATTRIBUTE.into()));
        }
    }
    let peeked = server.peek("clear", 10).await.unwrap();
    assert_eq!(&*peeked[0].body, "a plain body");
    schema.drop_all([server]).await;
}

/// Collects what the backend logs, to read back.
#[derive(Clone, Default)]
struct Logged(Arc<Mutex<Vec<u8>>>);

/// What this test binary's backends log, from the first call on: the process's subscriber
/// (one set for a test's thread alone misses events when tests run side by side, as
/// tracing caches which call sites are enabled process-wide).
fn logged() -> Logged {
    static LOGGED: std::sync::OnceLock<Logged> = std::sync::OnceLock::new();
    LOGGED
        .get_or_init(|| {
            let logged = Logged::default();
            let writer = logged.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .finish();
            tracing::subscriber::set_global_default(subscriber).unwrap();
            logged
        })
        .clone()
}

impl Write for Logged {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn postgres_a_sealed_row_changed_swapped_or_moved_by_hand_is_reported_by_queue_and_id_and_removed_never_served(
) {
    let logged = logged();
    let dir = tempfile::tempdir().unwrap();
    let keys = key_file(dir.path(), &[(1, 7)]);
    let schema = Schema::new().await;
    let server = keyed(&schema, Some(&keys)).await.unwrap();
    server.create_queue("q", vec![], vec![]).await.unwrap();
    server.create_queue("other", vec![], vec![]).await.unwrap();
    let mut ids = Vec::new();
    for n in 0..5 {
        let sent = server.send("q", NewMessage::new(format!("m{n}"))).await;
        ids.push(sent.unwrap().message_id);
    }
    let db = client(&schema).await;
    let seqs: Vec<i64> = (db.query("SELECT seq FROM leasehold_messages ORDER BY seq", &[]))
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    // m0: a byte flipped; m1 and m2: their sealed contents swapped; m3: moved to another
    // queue by hand; m4 left alone.
    db.batch_execute(&format!(
        "UPDATE leasehold_messages SET sealed = set_byte(sealed, 40, get_byte(sealed, 40) # 64)
             WHERE seq = {s0};
         UPDATE leasehold_messages m SET sealed = o.sealed
             FROM leasehold_messages o
             WHERE (m.seq, o.seq) IN (({s1}, {s2}), ({s2}, {s1}));
         UPDATE leasehold_messages SET queue_id = (SELECT id FROM leasehold_queues
                                                   WHERE key = 'other')
             WHERE seq = {s3};",
        s0 = seqs[0],
        s1 = seqs[1],
        s2 = seqs[2],
        s3 = seqs[3],
    ))
    .await
    .unwrap();

    let got = server.receive("q", receive(10, None)).await.unwrap();
    let bodies: Vec<&str> = got.deliveries.iter().map(|d| &*d.body).collect();
    assert_eq!(bodies, ["m4"], "only the untouched one is served");
    let moved = server.receive("other", receive(10, None)).await.unwrap();
    assert!(
        moved.deliveries.is_empty(),
        "a row moved by hand does not open"
    );
    let left: Vec<i64> = (db.query("SELECT seq FROM leasehold_messages", &[]))
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(left, [seqs[4]], "the damaged ones are removed");

    let log = String::from_utf8(logged.0.lock().unwrap().clone()).unwrap();
    for id in &ids[..3] {
        let line = log
            .lines()
            .find(|line| line.contains(id.as_str()))
            .unwrap_or_else(|| panic!("{id} is reported: {log}"));
        assert!(line.contains("integrity check"), "{line}");
        assert!(line.contains("queue=q "), "{line}");
    }
    // Moved by hand, it has the id its new place gives, and is reported there.
    let moved_line = log.lines().filter(|line| line.contains("queue=other "));
    assert_eq!(moved_line.count(), 1, "{log}");
    assert!(!log.contains(&ids[4]), "{log}");
    schema.drop_all([server]).await;
}

#[tokio::test]
async fn postgres_sealed_messages_move_to_the_dead_letter_queue_and_back_and_open_there() {
    let dir = tempfile::tempdir().unwrap();
    let keys = key_file(dir.path(), &[(1, 7)]);
    let schema = Schema::new().await;
    let server = keyed(&schema, Some(&keys)).await.unwrap();
    server.freeze_clock(Some(1_000_000)).await.unwrap();
    src_with_dead_letter_queue(&server).await;
    server
        .send("src", secret_message(SECRET_BODY))
        .await
        .unwrap();
    let first = server.receive("src", receive(1, Some(1))).await.unwrap();
    assert_eq!(first.deliveries.len(), 1);
    server.freeze_clock(Some(1_005_000)).await.unwrap();
    let none = server.receive("src", receive(1, None)).await.unwrap();
    assert!(none.deliveries.is_empty(), "moved to the dead-letter queue");
    let dead = server.receive("dlq", receive(1, Some(1))).await.unwrap();
    assert_eq!(dead.deliveries.len(), 1);
    assert_eq!(&*dead.deliveries[0].body, SECRET_BODY);
    assert!(!holds(&rows_as_text(&schema).await, SECRET_BODY));

    server.freeze_clock(Some(1_010_000)).await.unwrap();
    let back = common::redriven(&server, "src").await;
    assert_eq!(back.len(), 1, "redriven");
    assert_eq!(&*back[0].body, SECRET_BODY);
    let note = &back[0].attributes.as_ref().expect("attributes")["note"];
    assert_eq!(note.data, AttributeData::Text(SECRET_ATTRIBUTE.into()));
    schema.drop_all([server]).await;
}

#[tokio::test]
async fn postgres_keys_rotate_by_a_line_added_and_a_missing_or_wrong_key_file_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new().await;
    let keys = dir.path().join("encryption.key");
    let first = keyed(&schema, Some(&keys)).await.unwrap();
    assert!(
        keys.exists(),
        "made on the database's first start with a key file"
    );
    first.create_queue("q", vec![], vec![]).await.unwrap();
    first
        .send("q", NewMessage::new("under key 1"))
        .await
        .unwrap();
    drop(first);

    let original = std::fs::read_to_string(&keys).unwrap();
    let second_key = format!("2 {}\n", "ab".repeat(32));
    std::fs::write(&keys, format!("{original}{second_key}")).unwrap();
    let rotated = keyed(&schema, Some(&keys)).await.unwrap();
    rotated
        .send("q", NewMessage::new("under key 2"))
        .await
        .unwrap();
    let got = rotated.receive("q", receive(10, None)).await.unwrap();
    let mut bodies: Vec<&str> = got.deliveries.iter().map(|d| &*d.body).collect();
    bodies.sort();
    assert_eq!(bodies, ["under key 1", "under key 2"]);
    let db = client(&schema).await;
    let numbers: Vec<i64> = (db.query("SELECT number FROM leasehold_seals ORDER BY 1", &[]))
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(numbers, [1, 2]);
    let sealed_with: Vec<i32> = (db.query(
        "SELECT get_byte(sealed, 4) FROM leasehold_messages ORDER BY seq",
        &[],
    ))
    .await
    .unwrap()
    .iter()
    .map(|row| row.get(0))
    .collect();
    assert_eq!(sealed_with, [1, 2], "each under the newest key of its time");
    drop(rotated);

    let refused = |text: Option<String>| {
        let (schema, keys) = (&schema, &keys);
        async move {
            match text {
                Some(text) => std::fs::write(keys, text).unwrap(),
                None => std::fs::remove_file(keys).unwrap(),
            }
            match keyed(schema, Some(keys)).await {
                Err(StartError::Keys(why)) => why,
                Err(other) => panic!("refused for another reason: {other}"),
                Ok(_) => panic!("started"),
            }
        }
    };
    let why = refused(Some(second_key.clone())).await;
    assert!(
        why.contains("has no key 1") && why.contains("this database"),
        "{why}"
    );
    let other_first = format!("1 {}\n{second_key}", "00".repeat(32));
    assert!(refused(Some(other_first))
        .await
        .contains("different key numbered 1"));
    assert!(refused(None).await.contains("is missing"));
    assert!(
        !keys.exists(),
        "a database that sealed something never gets a new key"
    );
    let Err(StartError::Keys(why)) = keyed(&schema, None).await else {
        panic!("a server without keys started on encrypted messages");
    };
    assert!(why.contains("no encryption key file"), "{why}");
    schema.drop_all([]).await;
}

/// A server started without keys before another recorded its keys: it refuses to send to
/// an encrypted queue rather than store in the clear, and leaves the sealed messages it
/// cannot open for a server that can.
#[tokio::test]
async fn postgres_a_server_without_keys_refuses_encrypted_sends_and_leaves_what_it_cannot_open() {
    let dir = tempfile::tempdir().unwrap();
    let keys = key_file(dir.path(), &[(1, 7)]);
    let schema = Schema::new().await;
    let keyless = keyed(&schema, None).await.unwrap();
    let keyed_server = keyed(&schema, Some(&keys)).await.unwrap();
    keyed_server
        .create_queue("q", vec![], vec![])
        .await
        .unwrap();
    keyed_server
        .send("q", NewMessage::new("sealed"))
        .await
        .unwrap();

    let refused = keyless.send("q", NewMessage::new("would be clear")).await;
    assert!(
        matches!(&refused, Err(BackendError::Failed(why)) if why.contains("no encryption key file")),
        "{refused:?}"
    );
    let batch = keyless
        .send_batch("q", vec![NewMessage::new("clear")])
        .await;
    assert!(batch.is_err(), "{batch:?}");
    let got = keyless.receive("q", receive(10, Some(1))).await.unwrap();
    assert!(got.deliveries.is_empty());
    keyed_server.advance_clock(2_000).await.unwrap();
    let got = keyed_server.receive("q", receive(10, None)).await.unwrap();
    let bodies: Vec<&str> = got.deliveries.iter().map(|d| &*d.body).collect();
    assert_eq!(
        bodies,
        ["sealed"],
        "left, not removed, and nothing stored in the clear"
    );
    schema.drop_all([keyless, keyed_server]).await;
}

/// A rotation done on one server first: a server whose file has another key under the new
/// number (or none) gives back what it cannot open, leaves a FIFO group's later messages
/// behind it, refuses to move such a message (503) rather than lose it, and the server with
/// the key hands them all out, in order, their receives not counted.
#[tokio::test]
async fn postgres_a_server_lacking_the_newest_key_gives_back_what_it_cannot_open_and_moves_nothing()
{
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new().await;
    // B sees key 2 as a reader's line, but of another key; A seals with the real key 2.
    let lagging = key_file(&dir.path().join("b"), &[(2, 9), (1, 7)]);
    let rotated = key_file(&dir.path().join("a"), &[(1, 7), (2, 8)]);
    let b = keyed(&schema, Some(&lagging)).await.unwrap();
    let a = keyed(&schema, Some(&rotated)).await.unwrap();
    a.freeze_clock(Some(1_000_000)).await.unwrap();
    let fifo = vec![
        ("FifoQueue".to_string(), "true".to_string()),
        ("ContentBasedDeduplication".to_string(), "true".to_string()),
    ];
    a.create_queue("q.fifo", fifo, vec![]).await.unwrap();
    let in_group = |body: &str| {
        let mut message = NewMessage::new(body);
        message.group_id = Some("g".into());
        message
    };
    a.send("q.fifo", in_group("first, key 2")).await.unwrap();
    b.send("q.fifo", in_group("second, key 1")).await.unwrap();

    let got = b.receive("q.fifo", receive(10, Some(30))).await.unwrap();
    assert!(
        got.deliveries.is_empty(),
        "nothing out of order, nothing it cannot open"
    );
    assert!(
        got.next_due_in_ms.is_some_and(|ms| ms <= 25),
        "{:?}",
        got.next_due_in_ms
    );
    let got = a.receive("q.fifo", receive(10, Some(30))).await.unwrap();
    let bodies: Vec<&str> = got.deliveries.iter().map(|d| &*d.body).collect();
    assert_eq!(bodies, ["first, key 2", "second, key 1"]);
    let counts: Vec<u32> = got.deliveries.iter().map(|d| d.receive_count).collect();
    assert_eq!(counts, [1, 1], "the given-back receive is not counted");

    // A dead-letter move of such a message through the lagging server is refused.
    src_with_dead_letter_queue(&a).await;
    a.send("src", NewMessage::new("key 2 again")).await.unwrap();
    assert_eq!(
        a.receive("src", receive(1, Some(1)))
            .await
            .unwrap()
            .deliveries
            .len(),
        1
    );
    a.freeze_clock(Some(1_005_000)).await.unwrap();
    let refused = b.receive("src", receive(1, None)).await;
    assert!(
        matches!(&refused, Err(BackendError::Unavailable(why)) if why.contains("same encryption key file")),
        "{refused:?}"
    );
    assert!(a
        .receive("src", receive(1, None))
        .await
        .unwrap()
        .deliveries
        .is_empty());
    let dead = a.receive("dlq", receive(1, None)).await.unwrap();
    assert_eq!(
        &*dead.deliveries[0].body, "key 2 again",
        "moved whole by the server with the key"
    );
    schema.drop_all([a, b]).await;
}

/// A damaged message first in line: removed, and the receive that found nothing because of
/// it looks again at once rather than at the end of its wait.
#[tokio::test]
async fn postgres_a_receive_that_met_only_a_damaged_message_looks_again_soon() {
    let dir = tempfile::tempdir().unwrap();
    let keys = key_file(dir.path(), &[(1, 7)]);
    let schema = Schema::new().await;
    let server = keyed(&schema, Some(&keys)).await.unwrap();
    server.create_queue("q", vec![], vec![]).await.unwrap();
    server.send("q", NewMessage::new("damaged")).await.unwrap();
    server.send("q", NewMessage::new("whole")).await.unwrap();
    let db = client(&schema).await;
    db.batch_execute(
        "UPDATE leasehold_messages SET sealed = set_byte(sealed, 40, get_byte(sealed, 40) # 1)
         WHERE seq = (SELECT min(seq) FROM leasehold_messages)",
    )
    .await
    .unwrap();
    let got = server.receive("q", receive(1, None)).await.unwrap();
    assert!(got.deliveries.is_empty());
    assert!(
        got.next_due_in_ms.is_some_and(|ms| ms <= 25),
        "{:?}",
        got.next_due_in_ms
    );
    let got = server.receive("q", receive(1, None)).await.unwrap();
    assert_eq!(&*got.deliveries[0].body, "whole");
    schema.drop_all([server]).await;
}

/// Without keys, a queue with a KMS key id is kept and shown as on AWS and its messages are
/// stored in the clear, as before keys existed; SSE-SQS is refused.
#[tokio::test]
async fn postgres_without_keys_a_kms_queue_takes_sends_in_the_clear_and_sse_sqs_is_refused() {
    let schema = Schema::new().await;
    let server = keyed(&schema, None).await.unwrap();
    let kms = vec![("KmsMasterKeyId".to_string(), "alias/aws/sqs".to_string())];
    server.create_queue("kms", kms, vec![]).await.unwrap();
    server
        .send("kms", NewMessage::new("kms body"))
        .await
        .unwrap();
    let got = server.receive("kms", receive(1, None)).await.unwrap();
    assert_eq!(&*got.deliveries[0].body, "kms body");
    assert!(holds(&rows_as_text(&schema).await, "kms body"));
    assert_eq!(sse_of(&server, "kms").await, "false");
    let sse = vec![("SqsManagedSseEnabled".to_string(), "true".to_string())];
    let refused = server.create_queue("sse", sse, vec![]).await;
    assert!(refused.is_err(), "{refused:?}");
    schema.drop_all([server]).await;
}

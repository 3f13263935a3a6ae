//! Upgrades keep the data (issue 35): a data file written by a release is kept under
//! `fixtures/store-format-N/` with what that release read back from it (`expected.json`), and
//! every later build must read it back the same: every queue, attribute, tag, permission,
//! message (in flight, delayed, dead-lettered, FIFO with its deduplication entries), lease
//! measurement and move task. The real binary serves it; a file of a newer format is refused
//! at start with one line and left byte for byte as it was.
//!
//! The PostgreSQL fixture, `fixtures/postgres-schema-N/`, is a dump of a schema the same
//! writing made, with what that release read back from it; a test restores it into a schema
//! of its own and reads it back the same way.
//!
//! Regenerate a fixture only when its format changes on purpose (then add a directory beside
//! the old one, which must keep passing):
//! `cargo test -p leasehold --test upgrade -- --ignored write_the_`

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use leasehold_backend::{Backend, MoveTaskStart, Page, Permission, QueueListing};
use leasehold_embedded::{Embedded, EngineSetup};
use leasehold_engine::{
    AttributeData, Clock, EngineConfig, ManualClock, MessageAttribute, NewMessage, ReceiveRequest,
};
use leasehold_server::LeaseReportDoc;
use leasehold_store::{Durability, SqliteStore};
use serde_json::{json, Value};

/// The fixture's clock: every read of it happens at this instant (and the write before it).
const WRITTEN_AT_MS: u64 = 1_796_000_000_000;
const QUEUES: [&str; 5] = [
    "events.fifo",
    "orders",
    "orders-dlq",
    "scratch",
    "tasks.fifo",
];

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/store-format-1")
}

fn postgres_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/postgres-schema-8")
}

/// The schema the PostgreSQL fixture's dump names; a test restores it under a name of its own.
const DUMPED_SCHEMA: &str = "leasehold_upgrade_fixture";
const POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A node of either backend, and how its clock is set.
enum Node {
    Embedded(Box<Embedded>, Arc<ManualClock>),
    Postgres(Box<leasehold_postgres::Postgres>),
}

impl Node {
    fn backend(&self) -> &dyn Backend {
        match self {
            Node::Embedded(node, _) => &**node,
            Node::Postgres(node) => &**node,
        }
    }

    async fn set_time(&self, ms: u64) {
        match self {
            Node::Embedded(_, clock) => clock.advance_ms(ms - clock.now_ms()),
            Node::Postgres(node) => node.freeze_clock(Some(ms)).await.unwrap(),
        }
    }
}

fn embedded_node(dir: &Path, at_ms: u64) -> Node {
    let clock = Arc::new(ManualClock::new(at_ms));
    Node::Embedded(Box::new(open(dir, clock.clone())), clock)
}

async fn postgres_node(schema: &str, at_ms: u64) -> Node {
    let naming = leasehold_engine::Naming {
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
    };
    let options = leasehold_postgres::Options {
        schema: Some(schema.to_string()),
        ..leasehold_postgres::Options::default()
    };
    let node = leasehold_postgres::Postgres::connect(POSTGRES_URL, naming, options)
        .await
        .expect("the schema opens");
    node.freeze_clock(Some(at_ms)).await.unwrap();
    Node::Postgres(Box::new(node))
}

fn arn(queue: &str) -> String {
    format!("arn:aws:sqs:us-east-1:000000000000:{queue}")
}

fn open(dir: &Path, clock: Arc<ManualClock>) -> Embedded {
    let setup = EngineSetup {
        clock,
        config: EngineConfig {
            stripes: 2,
            seed: 7,
            ..EngineConfig::default()
        },
    };
    let store = SqliteStore::open(dir).expect("the data file opens");
    Embedded::durable(setup, Box::new(store), Durability::Always).expect("the data restores")
}

fn attributes(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn message(body: &str) -> NewMessage {
    let mut message = NewMessage::new(body);
    let text = |data_type: &str, value: &str| MessageAttribute {
        data_type: data_type.into(),
        data: AttributeData::Text(value.into()),
    };
    message
        .attributes
        .insert("kind".into(), text("String", "order"));
    message
        .attributes
        .insert("price".into(), text("Number.eur", "12.50"));
    message.attributes.insert(
        "blob".into(),
        MessageAttribute {
            data_type: "Binary".into(),
            data: AttributeData::Binary(vec![0, 1, 2, 255]),
        },
    );
    message
}

fn receive(max: u32, visibility_s: u32) -> ReceiveRequest {
    ReceiveRequest {
        max_messages: max,
        visibility_s: Some(visibility_s),
        attempt_id: None,
    }
}

/// Every kind of state a release keeps, made through the backend as a server makes it, from
/// `WRITTEN_AT_MS - 120 s` to a second before `WRITTEN_AT_MS`.
async fn write(clocked: &Node) {
    clocked.set_time(WRITTEN_AT_MS - 120_000).await;
    let node = clocked.backend();
    node.create_queue("orders-dlq", vec![], vec![])
        .await
        .unwrap();
    let redrive = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":2}}"#,
        arn("orders-dlq")
    );
    let orders = attributes(&[
        ("VisibilityTimeout", "60"),
        ("MessageRetentionPeriod", "1209600"),
        ("RedrivePolicy", &redrive),
    ]);
    node.create_queue("orders", orders, attributes(&[("team", "payments")]))
        .await
        .unwrap();
    let fifo = attributes(&[("FifoQueue", "true"), ("ContentBasedDeduplication", "true")]);
    node.create_queue("events.fifo", fifo, vec![])
        .await
        .unwrap();
    let per_group = attributes(&[
        ("FifoQueue", "true"),
        ("DeduplicationScope", "messageGroup"),
        ("FifoThroughputLimit", "perMessageGroupId"),
    ]);
    node.create_queue("tasks.fifo", per_group, vec![])
        .await
        .unwrap();
    node.create_queue("scratch", vec![], vec![]).await.unwrap();
    node.create_queue("gone", vec![], vec![]).await.unwrap();
    node.add_permission(
        "orders",
        Permission {
            label: "partner".into(),
            accounts: vec!["111111111111".into()],
            actions: vec!["SendMessage".into()],
        },
    )
    .await
    .unwrap();
    for i in 0..6 {
        node.send("orders", message(&format!("order {i}")))
            .await
            .unwrap();
    }
    let mut delayed = message("order later");
    delayed.delay_s = Some(900);
    node.send("orders", delayed).await.unwrap();
    // Two leased, one of them deleted after 1.5 s: a lease measured.
    let leased = node.receive("orders", receive(2, 600)).await.unwrap();
    clocked.set_time(WRITTEN_AT_MS - 118_500).await;
    let handle = leased.deliveries[0].receipt_handle.clone();
    node.delete("orders", vec![handle]).await.unwrap();
    // Three received twice and let go: the next receive moves them to the dead-letter queue.
    for _ in 0..2 {
        node.receive("orders", receive(3, 0)).await.unwrap();
    }
    node.receive("orders", receive(3, 30)).await.unwrap();
    node.record_empty_receive("orders").await;
    for (group, body) in [("g1", "e1"), ("g1", "e2"), ("g2", "e3"), ("g1", "e4")] {
        let mut event = NewMessage::new(body);
        event.group_id = Some(group.into());
        node.send("events.fifo", event).await.unwrap();
    }
    node.receive("events.fifo", receive(1, 300)).await.unwrap();
    for (group, dedup) in [("a", "same"), ("b", "same"), ("a", "other")] {
        let mut task = NewMessage::new(format!("{group}/{dedup}"));
        task.group_id = Some(group.into());
        task.deduplication_id = Some(dedup.into());
        node.send("tasks.fifo", task).await.unwrap();
    }
    node.send("scratch", NewMessage::new("purged"))
        .await
        .unwrap();
    node.purge("scratch").await.unwrap();
    node.send("scratch", NewMessage::new("after the purge"))
        .await
        .unwrap();
    // A second before the read: the move task still runs, and "gone" cannot be made again.
    clocked.set_time(WRITTEN_AT_MS - 1_000).await;
    node.delete_queue("gone").await.unwrap();
    node.start_move_task(MoveTaskStart {
        source_arn: arn("orders-dlq"),
        destination_arn: Some(arn("scratch")),
        per_second: Some(1),
    })
    .await
    .unwrap();
    node.flush().await;
}

/// What a build reads back from a node at `WRITTEN_AT_MS`, as JSON: every queue's
/// attributes, tags, messages and lease report, the move tasks, and what a receive hands out
/// (bodies, attributes, their MD5s, FIFO sequence numbers).
async fn read_back(clocked: &Node) -> Value {
    clocked.set_time(WRITTEN_AT_MS).await;
    let node = clocked.backend();
    let listed = node.list_queues(QueueListing::default()).await.unwrap();
    let mut queues = BTreeMap::new();
    for name in QUEUES {
        let attributes: BTreeMap<_, _> = node
            .get_attributes(name, vec!["All".into()])
            .await
            .unwrap()
            .into_iter()
            .collect();
        let tags: BTreeMap<_, _> = node.list_tags(name).await.unwrap().into_iter().collect();
        let messages: Vec<Value> = node
            .peek(name, 1_000)
            .await
            .unwrap()
            .iter()
            .map(|p| {
                json!({
                    "id": p.message_id, "sent_ms": p.sent_ms, "receives": p.receive_count,
                    "state": format!("{:?}", p.state), "until_ms": p.until_ms,
                    "group": p.group_id.as_deref(), "body": &*p.body,
                })
            })
            .collect();
        let report = node.lease_report(name).await.unwrap();
        queues.insert(
            name,
            json!({
                "attributes": attributes, "tags": tags, "messages": messages,
                "lease_report": serde_json::to_value(LeaseReportDoc::of(name, &report)).unwrap(),
            }),
        );
    }
    let tasks: Vec<Value> = node
        .list_move_tasks(&arn("orders-dlq"), None)
        .await
        .unwrap()
        .iter()
        .map(|t| {
            json!({
                "status": format!("{:?}", t.status), "source": t.source_arn,
                "destination": t.destination_arn, "per_second": t.max_per_second,
                "moved": t.moved, "to_move": t.to_move, "started_ms": t.started_ms,
            })
        })
        .collect();
    let sources = node
        .list_dead_letter_source_queues("orders-dlq", Page::default())
        .await
        .unwrap();
    let mut received = Vec::new();
    for name in ["orders", "events.fifo", "tasks.fifo"] {
        let got = node.receive(name, receive(10, 30)).await.unwrap();
        received.extend(got.deliveries.iter().map(|d| {
            let attributes: BTreeMap<_, _> = d
                .attributes
                .iter()
                .flat_map(|a| a.iter())
                .map(|(k, v)| (k.clone(), format!("{} {:?}", v.data_type, v.data)))
                .collect();
            json!({
                "queue": name, "id": d.message_id, "body": &*d.body, "attributes": attributes,
                "receives": d.receive_count, "sent_ms": d.sent_ms,
                "first_receive_ms": d.first_receive_ms, "group": d.group_id.as_deref(),
                "deduplication_id": d.deduplication_id.as_deref(),
                "sequence_number": d.sequence_number,
                "dead_letter_source": d.dead_letter_source_arn.as_deref(),
            })
        }));
    }
    let gone = node
        .create_queue("gone", vec![], vec![])
        .await
        .map_err(|e| e.to_string());
    json!({
        "listed": listed.names, "queues": queues, "move_tasks": tasks,
        "dead_letter_sources": sources.names, "received": received,
        "creating_gone_again": format!("{gone:?}"),
    })
}

/// A copy of the fixture's data file in a directory of its own.
fn copy_of_fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::copy(fixture().join("leasehold.db"), data.join("leasehold.db")).unwrap();
    dir
}

#[test]
#[ignore = "writes the fixture: run it only when the data format changes on purpose"]
fn write_the_store_fixture() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    runtime.block_on(async {
        write(&embedded_node(dir.path(), WRITTEN_AT_MS - 120_000)).await;
    });
    let copy = copy_in(dir.path());
    let read = runtime.block_on(read_back(&embedded_node(&copy, WRITTEN_AT_MS)));
    std::fs::create_dir_all(fixture()).unwrap();
    std::fs::copy(
        dir.path().join("leasehold.db"),
        fixture().join("leasehold.db"),
    )
    .unwrap();
    let text = serde_json::to_string_pretty(&read).unwrap() + "\n";
    std::fs::write(fixture().join("expected.json"), text).unwrap();
}

/// A copy of the data file in `dir` (reading back changes what it reads).
fn copy_in(dir: &Path) -> PathBuf {
    let copy = dir.join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(dir.join("leasehold.db"), copy.join("leasehold.db")).unwrap();
    copy
}

#[tokio::test]
async fn this_build_reads_the_last_releases_data_file_as_that_release_did() {
    let dir = copy_of_fixture();
    let read = read_back(&embedded_node(&dir.path().join("data"), WRITTEN_AT_MS)).await;
    same_as_written(read, &fixture());
}

fn same_as_written(mut read: Value, fixture: &Path) {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("expected.json")).unwrap())
            .unwrap();
    without_fields_added_since(&mut read, &expected);
    if read != expected {
        panic!(
            "the fixture reads back differently:\n{}",
            serde_json::to_string_pretty(&read).unwrap()
        );
    }
}

/// Takes out of `read` the object fields `expected` lacks: what this build reports and the last
/// release did not (a lease report's fair-queue figures) is no different reading of the file.
/// A field the release read and this build lost still fails the comparison.
fn without_fields_added_since(read: &mut Value, expected: &Value) {
    match (read, expected) {
        (Value::Object(read), Value::Object(expected)) => {
            read.retain(|key, _| expected.contains_key(key));
            for (key, value) in read.iter_mut() {
                without_fields_added_since(value, &expected[key]);
            }
        }
        (Value::Array(read), Value::Array(expected)) => {
            for (value, expected) in read.iter_mut().zip(expected) {
                without_fields_added_since(value, expected);
            }
        }
        _ => {}
    }
}

#[test]
#[ignore = "writes the fixture: run it only when the schema changes on purpose"]
fn write_the_postgres_fixture() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let read = runtime.block_on(async {
        let admin = common::postgres_admin().await;
        admin
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {DUMPED_SCHEMA} CASCADE; CREATE SCHEMA {DUMPED_SCHEMA}"
            ))
            .await
            .unwrap();
        write(&postgres_node(DUMPED_SCHEMA, WRITTEN_AT_MS - 120_000).await).await;
        let dump = Command::new("pg_dump")
            .args([
                "--schema",
                DUMPED_SCHEMA,
                "--inserts",
                "--no-owner",
                "--no-privileges",
            ])
            .arg(POSTGRES_URL)
            .output()
            .unwrap();
        assert!(
            dump.status.success(),
            "{}",
            String::from_utf8_lossy(&dump.stderr)
        );
        admin
            .batch_execute(&format!("DROP SCHEMA {DUMPED_SCHEMA} CASCADE"))
            .await
            .unwrap();
        std::fs::create_dir_all(postgres_fixture()).unwrap();
        std::fs::write(postgres_fixture().join("dump.sql"), &dump.stdout).unwrap();
        read_back_the_postgres_fixture().await
    });
    let text = serde_json::to_string_pretty(&read).unwrap() + "\n";
    std::fs::write(postgres_fixture().join("expected.json"), text).unwrap();
}

/// The fixture's dump restored into a schema of its own, read back, and dropped.
async fn read_back_the_postgres_fixture() -> Value {
    let admin = common::postgres_admin().await;
    let name = format!("upgrade_{}", rand::random::<u32>());
    let dump = std::fs::read_to_string(postgres_fixture().join("dump.sql")).unwrap();
    // What psql alone reads (pg_dump's `\restrict` lines) is not SQL.
    let sql: Vec<&str> = dump.lines().filter(|l| !l.starts_with('\\')).collect();
    admin
        .batch_execute(&sql.join("\n").replace(DUMPED_SCHEMA, &name))
        .await
        .unwrap();
    let node = postgres_node(&name, WRITTEN_AT_MS).await;
    let read = read_back(&node).await;
    drop(node);
    admin
        .batch_execute(&format!("DROP SCHEMA {name} CASCADE"))
        .await
        .unwrap();
    read
}

#[tokio::test]
async fn this_build_reads_the_last_releases_postgres_schema_as_that_release_did() {
    same_as_written(read_back_the_postgres_fixture().await, &postgres_fixture());
}

#[tokio::test]
async fn the_binary_serves_the_last_releases_data_file() {
    let dir = copy_of_fixture();
    let port = common::free_port();
    let _server = common::Running::new(
        Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args([
                "serve",
                "--bind",
                &format!("127.0.0.1:{port}"),
                "--data-dir",
            ])
            .arg(dir.path().join("data"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    common::wait_until_listening(port);
    let sqs = common::client(port);
    let listed = sqs.list_queues().send().await.unwrap();
    assert_eq!(listed.queue_urls().len(), QUEUES.len(), "{listed:?}");
    let url = common::queue_url(&sqs, "orders").await;
    let tags = sqs.list_queue_tags().queue_url(&url).send().await.unwrap();
    assert_eq!(tags.tags().unwrap()["team"], "payments");
}

#[test]
fn a_data_file_of_a_newer_format_is_refused_at_start_and_left_as_it_was() {
    let dir = copy_of_fixture();
    let file = dir.path().join("data").join("leasehold.db");
    mark_newer_format(&file);
    let before = std::fs::read(&file).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<_> = stderr
        .lines()
        .filter(|l| l.starts_with("leasehold:"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("written by a newer Leasehold"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the file was changed"
    );
    assert!(!dir.path().join("data").join("leasehold.db-wal").exists());
}

/// Marks the data file as written in format 3: the format lives in its `meta` table.
fn mark_newer_format(file: &Path) {
    let conn = rusqlite::Connection::open(file).unwrap();
    conn.execute("UPDATE meta SET v = 3 WHERE k = 'format'", [])
        .unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    conn.close().unwrap();
}

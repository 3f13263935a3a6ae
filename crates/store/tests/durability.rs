//! The store through its public seam: round trips through SQLite, damage detection, group
//! commit and injected faults.

use std::sync::Arc;

use leasehold_engine::{Engine, EngineConfig, ManualClock, NewMessage, ReceiveRequest};
use leasehold_store::{
    codec, load, Committer, Durability, FaultyStore, MemoryStore, SqliteStore, Store, StoreError,
    WriteBatch,
};

fn config() -> EngineConfig {
    EngineConfig {
        track_changes: true,
        receipt_key: [3; 16],
        ..EngineConfig::default()
    }
}

fn busy_engine(clock: &ManualClock) -> (Engine, Vec<String>) {
    let mut engine = Engine::new(Arc::new(clock.clone()), config());
    engine
        .create_queue(
            "q",
            &[("VisibilityTimeout".into(), "60".into())],
            &[("team".into(), "a".into())],
        )
        .unwrap();
    engine
        .create_queue(
            "f.fifo",
            &[
                ("FifoQueue".into(), "true".into()),
                ("ContentBasedDeduplication".into(), "true".into()),
            ],
            &[],
        )
        .unwrap();
    for i in 0..20 {
        engine.send("q", NewMessage::new(format!("m{i}"))).unwrap();
        let mut m = NewMessage::new(format!("f{i}"));
        m.group_id = Some(format!("g{}", i % 3));
        engine.send("f.fifo", m).unwrap();
    }
    let handles = engine
        .receive("q", &ReceiveRequest::up_to(5))
        .unwrap()
        .into_iter()
        .map(|d| d.receipt_handle)
        .collect::<Vec<_>>();
    engine.delete_message("q", &handles[0]).unwrap();
    engine.receive("f.fifo", &ReceiveRequest::up_to(4)).unwrap();
    (engine, handles)
}

fn observe(engine: &mut Engine) -> String {
    ["q", "f.fifo"]
        .iter()
        .map(|q| {
            format!(
                "{:?} {:?}",
                engine.get_attributes(q, &["All".into()]),
                engine.list_tags(q)
            )
        })
        .collect()
}

#[tokio::test]
async fn state_committed_to_sqlite_comes_back_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let (mut engine, handles) = busy_engine(&clock);
    {
        let committer = Committer::start(
            Box::new(SqliteStore::open(dir.path()).unwrap()),
            Durability::Always,
        );
        committer
            .submit(codec::encode(&engine.take_changes()))
            .await
            .unwrap();
        committer.close();
    }
    let mut store = SqliteStore::open(dir.path()).unwrap();
    let snapshot = load(&mut store).unwrap();
    let mut restored = Engine::restore(
        Arc::new(clock.clone()),
        EngineConfig {
            receipt_key: [0; 16],
            ..config()
        },
        snapshot,
    );
    assert_eq!(observe(&mut restored), observe(&mut engine));
    // A handle issued before the restart still works, and the deleted one stays deleted.
    restored.change_visibility("q", &handles[1], 0).unwrap();
    assert!(restored.change_visibility("q", &handles[0], 0).is_err());
    let request = ReceiveRequest::up_to(10);
    assert_eq!(
        restored.receive("q", &request).unwrap(),
        engine_after(&mut engine, &handles[1], &request)
    );
}

fn engine_after(
    engine: &mut Engine,
    handle: &str,
    request: &ReceiveRequest,
) -> Vec<leasehold_engine::Delivery> {
    engine.change_visibility("q", handle, 0).unwrap();
    engine.receive("q", request).unwrap()
}

#[test]
fn a_second_server_cannot_open_a_data_directory_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = SqliteStore::open(dir.path()).unwrap();
    first.write(&[WriteBatch::default()], true).unwrap();
    match SqliteStore::open(dir.path()) {
        Err(StoreError::Open { reason, .. }) => assert!(reason.contains("in use"), "{reason}"),
        other => panic!("expected an in-use error, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn a_data_directory_removed_under_a_running_server_stops_acknowledgements_and_stays_locked() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut first = SqliteStore::open(&data).unwrap();
    let mut batch = WriteBatch::default();
    batch.put(b"k".to_vec(), b"v".to_vec());
    first.write(std::slice::from_ref(&batch), true).unwrap();
    std::fs::remove_dir_all(&data).unwrap();
    match first.write(&[batch], true) {
        Err(StoreError::Write { reason, .. }) => {
            assert!(reason.contains("removed or replaced"), "{reason}")
        }
        other => panic!("a write to a removed file was acknowledged: {other:?}"),
    }
    match SqliteStore::open(&data) {
        Err(StoreError::Open { reason, .. }) => assert!(reason.contains("in use"), "{reason}"),
        other => panic!(
            "a second server opened a directory in use: {:?}",
            other.map(|_| ())
        ),
    }
    drop(first);
    assert!(SqliteStore::open(&data).is_ok());
}

#[test]
fn data_files_are_readable_by_their_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut store = SqliteStore::open(&data).unwrap();
    store.write(&[WriteBatch::default()], true).unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode(&path), 0o600, "{}", path.display());
    }
}

fn damaged(setup: impl FnOnce(&std::path::Path)) -> String {
    let dir = tempfile::tempdir().unwrap();
    {
        let clock = ManualClock::new(1_000_000);
        let (mut engine, _) = busy_engine(&clock);
        let mut store = SqliteStore::open(dir.path()).unwrap();
        store
            .write(&[codec::encode(&engine.take_changes())], true)
            .unwrap();
    }
    setup(&dir.path().join("leasehold.db"));
    match SqliteStore::open(dir.path()).and_then(|mut s| load(&mut s)) {
        Ok(_) => panic!("damage went unnoticed"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn an_empty_file_is_refused_by_name() {
    let message = damaged(|path| std::fs::write(path, b"").unwrap());
    assert!(
        message.contains("leasehold.db") && message.contains("empty"),
        "{message}"
    );
}

#[test]
fn a_foreign_file_is_refused_by_name() {
    let message = damaged(|path| std::fs::write(path, vec![7u8; 8192]).unwrap());
    assert!(message.contains("leasehold.db"), "{message}");
}

#[test]
fn a_truncated_file_is_refused_by_name() {
    let message = damaged(|path| {
        let len = std::fs::metadata(path).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        file.set_len(len / 2).unwrap();
    });
    assert!(message.contains("leasehold.db"), "{message}");
}

#[test]
fn a_damaged_record_is_reported_not_misread() {
    let mut store = MemoryStore::default();
    let mut batch = WriteBatch::default();
    batch.put(b"Q\0\0\0\0\0\0\0\x01".to_vec(), vec![1, 0, 0, 0, 99]);
    store.write(&[batch], true).unwrap();
    let error = load(&mut store).unwrap_err().to_string();
    assert!(error.contains("truncated"), "{error}");
}

#[tokio::test]
async fn a_failed_write_is_an_error_to_its_request_and_to_every_later_one() {
    let mut faulty = FaultyStore::new(MemoryStore::default());
    faulty.fail_write = Some(3);
    let committer = Committer::start(Box::new(faulty), Durability::Always);
    let mut results = Vec::new();
    for i in 0..5u8 {
        let mut batch = WriteBatch::default();
        batch.put(vec![b'x', i], vec![i]);
        results.push(committer.submit(batch).await);
    }
    assert!(results[0].is_ok() && results[1].is_ok());
    assert!(
        matches!(results[2], Err(StoreError::Injected(_))),
        "{:?}",
        results[2]
    );
    assert!(
        matches!(results[3], Err(StoreError::Failed(_))),
        "{:?}",
        results[3]
    );
    assert!(matches!(results[4], Err(StoreError::Failed(_))));
}

#[tokio::test]
async fn a_failed_sync_is_never_an_acknowledgement() {
    let mut faulty = FaultyStore::new(MemoryStore::default());
    faulty.fail_sync = Some(1);
    let committer = Committer::start(Box::new(faulty), Durability::Always);
    assert!(committer.submit(WriteBatch::default()).await.is_err());
}

#[tokio::test]
async fn concurrent_submissions_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let committer = Arc::new(Committer::start(
        Box::new(SqliteStore::open(dir.path()).unwrap()),
        Durability::Always,
    ));
    let waits: Vec<_> = (0..200u32)
        .map(|i| {
            let mut batch = WriteBatch::default();
            batch.put(i.to_be_bytes().to_vec(), vec![0; 100]);
            committer.submit(batch)
        })
        .collect();
    for wait in waits {
        wait.await.unwrap();
    }
    drop(committer);
    let mut store = SqliteStore::open(dir.path()).unwrap();
    let mut n = 0;
    store
        .scan(&mut |_, _| {
            n += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(n, 200);
}

#[tokio::test]
async fn a_full_disk_refuses_its_write_and_those_behind_it_until_the_store_is_read_back() {
    let mut faulty = FaultyStore::new(MemoryStore::default());
    faulty.full_at_write = Some(2);
    let committer = Committer::start(Box::new(faulty), Durability::Always);
    // Message contents: records a load does not read.
    let put = |seq: u64| {
        let at = leasehold_engine::ContentKey {
            queue_id: 1,
            key: leasehold_engine::MsgKey { sent_ms: 0, seq },
        };
        let mut batch = leasehold_store::WriteBatch::default();
        batch.put(codec::content_key(at), b"v".to_vec());
        batch
    };
    committer.submit(put(1)).await.unwrap();
    let full = committer.submit(put(2)).await;
    assert!(matches!(full, Err(StoreError::Full { .. })), "{full:?}");
    // Made on top of the refused one: refused too, though the disk would take it.
    let behind = committer.submit(put(3)).await;
    assert!(matches!(behind, Err(StoreError::Full { .. })), "{behind:?}");
    let clock = Arc::new(leasehold_engine::ManualClock::new(0));
    committer
        .rebuild(clock, leasehold_engine::EngineConfig::default())
        .await
        .unwrap();
    committer.submit(put(4)).await.unwrap();
    committer.close();
}

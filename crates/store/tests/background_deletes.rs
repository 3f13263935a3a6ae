//! Purges and queue deletions leave their records to range deletes that the committer applies
//! in steps, in the background; a restart in the middle skips what is dead and finishes the
//! job. Later writes are never touched.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_engine::{Engine, EngineConfig, ManualClock, NewMessage, ReceiveRequest};
use leasehold_store::{
    codec, load, read_contents, Committer, Durability, MemoryStore, Op, RangeDelete, Reader, Store,
    StoreError, Visitor, WriteBatch,
};

fn engine(clock: &ManualClock) -> Engine {
    Engine::new(
        Arc::new(clock.clone()),
        EngineConfig {
            track_changes: true,
            ..EngineConfig::default()
        },
    )
}

fn send(engine: &mut Engine, queue: &str, bodies: impl IntoIterator<Item = String>) {
    for body in bodies {
        engine.send(queue, NewMessage::new(body)).unwrap();
    }
}

/// Bodies a restored engine hands out from `queue`, read back from `store` as the server does.
fn bodies(engine: &mut Engine, queue: &str, store: &dyn Store) -> Vec<String> {
    let reader = store.reader().unwrap();
    let mut out = Vec::new();
    loop {
        let got = engine.receive(queue, &ReceiveRequest::up_to(10)).unwrap();
        if got.is_empty() {
            out.sort();
            return out;
        }
        let at: Vec<_> = got.iter().filter_map(|d| d.unread).collect();
        assert_eq!(at.len(), got.len(), "a restored engine holds no content");
        let contents = read_contents(&*reader, None, &at).unwrap();
        out.extend(contents.into_iter().map(|c| match c {
            leasehold_store::ReadContent::Found(content) => content.body.to_string(),
            other => panic!("a content not read back: {other:?}"),
        }));
    }
}

fn restore(clock: &ManualClock, store: &mut dyn Store) -> Engine {
    Engine::restore(
        Arc::new(clock.clone()),
        EngineConfig::default(),
        load(store).unwrap(),
    )
}

/// What the engine did to a store that applied only puts and deletes: as if the server had
/// stopped before any background delete ran.
fn before_any_sweep(changes: &[WriteBatch]) -> MemoryStore {
    let mut store = MemoryStore::default();
    store.write(changes, true).unwrap();
    store
}

#[test]
fn a_restart_before_the_background_deletes_skips_purged_messages_and_finishes_the_job() {
    let clock = ManualClock::new(1_000_000);
    let mut e = engine(&clock);
    e.create_queue("kept", &[], &[]).unwrap();
    e.create_queue("gone", &[], &[]).unwrap();
    send(&mut e, "kept", (0..50).map(|i| format!("old{i}")));
    send(&mut e, "gone", (0..20).map(|i| format!("g{i}")));
    let mut batches = vec![codec::encode(&e.take_changes())];
    e.purge("kept").unwrap();
    e.delete_queue("gone").unwrap();
    send(&mut e, "kept", ["new".to_string()]);
    batches.push(codec::encode(&e.take_changes()));

    let mut store = before_any_sweep(&batches);
    let stale = store.records().len();
    let mut restored = restore(&clock, &mut store);
    assert_eq!(bodies(&mut restored, "kept", &store), ["new"]);
    assert!(restored.queue_exists("gone").is_err());

    let leftovers = codec::leftovers(&load(&mut store).unwrap());
    assert!(!leftovers.is_empty());
    for op in &leftovers.ops {
        let Op::DeleteRange(range) = op else {
            panic!("leftovers are range deletes only")
        };
        while store.delete_some(range, 7).unwrap() == 7 {}
    }
    assert!(store.records().len() < stale);
    assert!(codec::leftovers(&load(&mut store).unwrap()).is_empty());
    let mut again = restore(&clock, &mut store);
    assert_eq!(bodies(&mut again, "kept", &store), ["new"]);
}

/// A store the test can look into while the committer owns it.
#[derive(Clone, Default)]
struct Shared {
    inner: Arc<Mutex<MemoryStore>>,
    steps: Arc<Mutex<usize>>,
    /// While set, range deletes find the file system full.
    full: Arc<std::sync::atomic::AtomicBool>,
}

impl Store for Shared {
    fn scan_range(
        &mut self,
        start: &[u8],
        end: &[u8],
        visit: &mut Visitor,
    ) -> Result<(), StoreError> {
        self.inner.lock().unwrap().scan_range(start, end, visit)
    }
    fn write(&mut self, batches: &[WriteBatch], sync: bool) -> Result<(), StoreError> {
        self.inner.lock().unwrap().write(batches, sync)
    }
    fn delete_some(&mut self, range: &RangeDelete, limit: usize) -> Result<usize, StoreError> {
        *self.steps.lock().unwrap() += 1;
        if self.full.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::Full {
                path: "(shared)".into(),
                reason: "no space left (test)".into(),
            });
        }
        self.inner.lock().unwrap().delete_some(range, limit)
    }
    fn sync(&mut self) -> Result<(), StoreError> {
        self.inner.lock().unwrap().sync()
    }
    fn describe(&self) -> String {
        "(shared)".into()
    }
    fn reader(&self) -> Result<Arc<dyn Reader>, StoreError> {
        self.inner.lock().unwrap().reader()
    }

    fn seal_with(&mut self, keyring: Arc<leasehold_store::keyring::Keyring>) {
        self.inner.lock().unwrap().seal_with(keyring);
    }
}

/// A queue `big` of `count` messages, written through a committer to a `Shared` store.
async fn big_queue_written(count: usize) -> (ManualClock, Engine, Shared, Committer) {
    let clock = ManualClock::new(1_000_000);
    let mut e = engine(&clock);
    e.create_queue("big", &[], &[]).unwrap();
    send(&mut e, "big", (0..count).map(|i| format!("m{i}")));
    let shared = Shared::default();
    let committer = Committer::start(Box::new(shared.clone()), Durability::Always);
    committer
        .submit(codec::encode(&e.take_changes()))
        .await
        .unwrap();
    (clock, e, shared, committer)
}

#[tokio::test]
async fn the_committer_deletes_a_purged_queue_in_steps_and_keeps_later_sends() {
    let (clock, mut e, shared, committer) = big_queue_written(5_000).await;
    e.purge("big").unwrap();
    send(&mut e, "big", ["after".to_string()]);
    committer
        .submit(codec::encode(&e.take_changes()))
        .await
        .unwrap();
    let records = |s: &Shared| -> BTreeMap<Vec<u8>, Vec<u8>> { s.inner.lock().unwrap().records() };
    let deadline = Instant::now() + Duration::from_secs(10);
    // Left: the engine's and the queue's records, and the later message's record and content.
    while records(&shared).len() > 4 {
        assert!(Instant::now() < deadline, "the purge was never swept");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    committer.close();
    // A step deletes at most a few thousand records: more than one step for 5,000.
    assert!(*shared.steps.lock().unwrap() >= 3);
    let mut restored = restore(&clock, &mut shared.clone());
    assert_eq!(bodies(&mut restored, "big", &shared), ["after"]);
}

/// A restart streams message records into the engine (`restore`): it finds the same
/// leftovers, and the engine the same messages, as reading everything into a snapshot first.
#[test]
fn a_streamed_restore_finds_what_a_snapshot_finds() {
    let clock = ManualClock::new(1_000_000);
    let mut e = engine(&clock);
    e.create_queue("kept", &[], &[]).unwrap();
    e.create_queue("gone", &[], &[]).unwrap();
    send(&mut e, "kept", (0..30).map(|i| format!("old{i}")));
    send(&mut e, "gone", (0..10).map(|i| format!("g{i}")));
    let mut batches = vec![codec::encode(&e.take_changes())];
    e.purge("kept").unwrap();
    e.delete_queue("gone").unwrap();
    send(&mut e, "kept", ["new".to_string(), "newer".to_string()]);
    batches.push(codec::encode(&e.take_changes()));
    let mut store = before_any_sweep(&batches);

    let (mut streamed, leftovers) =
        leasehold_store::restore(&mut store, Arc::new(clock.clone()), EngineConfig::default())
            .unwrap();
    assert_eq!(leftovers, codec::leftovers(&load(&mut store).unwrap()));
    assert!(!leftovers.is_empty());
    let mut snapshotted = restore(&clock, &mut store);
    assert_eq!(
        bodies(&mut streamed, "kept", &store),
        bodies(&mut snapshotted, "kept", &store)
    );
    assert!(streamed.queue_exists("gone").is_err());
}

/// Issue 46, defect 3: a purge on a full disk (the remedy an operator reaches for) paused its
/// range deletes instead of trying them again at once: one second of a full file system costs
/// a handful of tries, not a core; once space returns, the purge finishes by itself.
#[tokio::test]
async fn a_purge_on_a_full_disk_waits_for_space_without_spinning_and_then_finishes() {
    let (_clock, mut e, shared, committer) = big_queue_written(2_000).await;
    shared.full.store(true, std::sync::atomic::Ordering::SeqCst);
    e.purge("big").unwrap();
    committer
        .submit(codec::encode(&e.take_changes()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let tries = *shared.steps.lock().unwrap();
    assert!(
        (1..=10).contains(&tries),
        "{tries} tries in a second of a full disk"
    );
    shared
        .full
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(10);
    // Left once swept: the engine's and the queue's records.
    while shared.inner.lock().unwrap().records().len() > 2 {
        assert!(
            Instant::now() < deadline,
            "the purge never finished once space returned"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    committer.close();
}

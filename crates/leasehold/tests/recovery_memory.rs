//! What going back to the store costs in memory (issue 46, defect 4): after a write found the
//! file system full, the engine is rebuilt from what the store holds while the old one still
//! stands. It loaded every record into one list first, beside both engines (about 4 GB at
//! ten million messages), in the cgroup the memory budget keeps clear of the OOM killer.
//! Counted here by a global allocator of this test binary's own (a test of the embedded
//! backend that lives here: this crate may allow the unsafe code an allocator needs).

#![allow(unsafe_code)] // the counting global allocator below

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use leasehold_backend::{BackendError, Messages, QueueAdmin};
use leasehold_embedded::{Embedded, EngineSetup, StoreOptions};
use leasehold_engine::{EngineConfig, ManualClock, NewMessage};
use leasehold_store::{Durability, FaultyStore, MemoryStore};

/// The system allocator, counting the bytes allocated now and the most ever since `reset`.
struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = NOW.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MESSAGES: usize = 100_000;

#[tokio::test(flavor = "current_thread")]
async fn going_back_to_the_store_holds_no_list_of_every_message() {
    let clock = ManualClock::new(1_000_000);
    let full = Arc::new(AtomicBool::new(false));
    let mut store = FaultyStore::new(MemoryStore::default());
    store.full_while = Some(full.clone());
    let setup = EngineSetup {
        clock: Arc::new(clock.clone()),
        config: EngineConfig::default(),
    };
    let options = StoreOptions {
        body_cache_bytes: 0,
        ..StoreOptions::from(Durability::Never)
    };
    let backend = Embedded::durable(setup, Box::new(store), options).unwrap();
    backend.create_queue("q", vec![], vec![]).await.unwrap();
    let before = NOW.load(Ordering::SeqCst);
    for n in 0..MESSAGES / 10 {
        let batch = (0..10)
            .map(|i| NewMessage::new(format!("{n}-{i}")))
            .collect();
        backend.send_batch("q", batch).await.unwrap();
    }
    // The engine's messages and the store's records.
    let grown = NOW.load(Ordering::SeqCst) - before;

    full.store(true, Ordering::SeqCst);
    let at_failure = NOW.load(Ordering::SeqCst);
    PEAK.store(at_failure, Ordering::SeqCst);
    let refused = backend.send("q", NewMessage::new("refused")).await;
    assert!(
        matches!(refused, Err(BackendError::Unavailable(_))),
        "{refused:?}"
    );
    let extra = PEAK.load(Ordering::SeqCst) - at_failure;
    full.store(false, Ordering::SeqCst);
    println!(
        "{MESSAGES} messages: {} MiB grown by sending, {} MiB more at the peak of going back",
        grown >> 20,
        extra >> 20
    );
    let counts = backend
        .get_attributes("q", vec!["ApproximateNumberOfMessages".into()])
        .await
        .unwrap();
    assert_eq!(counts[0].1, MESSAGES.to_string());
    assert!(
        extra < grown / 2,
        "going back took {} MiB beside the live engine, of {} MiB grown",
        extra >> 20,
        grown >> 20
    );
}

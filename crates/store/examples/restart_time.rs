//! Measures a restart: opening the data file, reading every record but the bodies and
//! rebuilding the engine with 1,000,000 stored messages of 200 bytes (a tenth of them in
//! flight), and the memory the rebuilt engine holds per message (bodies stay on disk).
//!
//! Run: `cargo run --release -p leasehold-store --example restart_time [MESSAGES]`

use std::sync::Arc;
use std::time::Instant;

use leasehold_engine::{Engine, EngineConfig, ManualClock, NewMessage, ReceiveRequest};
use leasehold_store::{codec, load, SqliteStore, Store};

// The server's allocator, so the memory a message costs is the server's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let messages: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let clock = ManualClock::new(1_700_000_000_000);
    let config = EngineConfig {
        track_changes: true,
        ..EngineConfig::default()
    };
    {
        let mut engine = Engine::new(Arc::new(clock.clone()), config.clone());
        let mut store = SqliteStore::open(dir.path()).unwrap();
        engine.create_queue("q", &[], &[]).unwrap();
        let body = "x".repeat(200);
        let started = Instant::now();
        for chunk in 0..messages.div_ceil(10_000) {
            for _ in 0..10_000.min(messages - chunk * 10_000) {
                engine.send("q", NewMessage::new(body.clone())).unwrap();
            }
            if chunk % 10 == 0 {
                engine.receive("q", &ReceiveRequest::up_to(10)).unwrap();
            }
            store
                .write(&[codec::encode(&engine.take_changes())], false)
                .unwrap();
        }
        for _ in 0..messages / 100 {
            engine
                .receive(
                    "q",
                    &ReceiveRequest {
                        max_messages: 10,
                        visibility_s: Some(3600),
                        attempt_id: None,
                    },
                )
                .unwrap();
        }
        store
            .write(&[codec::encode(&engine.take_changes())], true)
            .unwrap();
        println!(
            "wrote {messages} messages in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    let size = std::fs::metadata(dir.path().join("leasehold.db"))
        .map(|m| m.len())
        .unwrap_or(0);
    let before = resident_bytes();
    let started = Instant::now();
    let mut store = SqliteStore::open(dir.path()).unwrap();
    let snapshot = load(&mut store).unwrap();
    let loaded = started.elapsed();
    let mut engine = Engine::restore(Arc::new(clock), config, snapshot);
    let total = started.elapsed();
    let counts = engine.counts("q").unwrap();
    drop(store);
    let held = resident_bytes().saturating_sub(before);
    println!(
        "restart with {} messages ({} visible, {} in flight), data file {} MiB: read {:.2} s, rebuilt in {:.2} s total; the engine holds {:.0} bytes a message",
        counts.visible + counts.not_visible + counts.delayed,
        counts.visible,
        counts.not_visible,
        size / (1 << 20),
        loaded.as_secs_f64(),
        total.as_secs_f64(),
        held as f64 / messages as f64
    );
}

/// Resident memory, from `/proc/self/status`.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

//! Measures a restart: opening the data file, reading every record but the bodies and
//! rebuilding the engine with 1,000,000 stored messages of 200 bytes (a tenth of them in
//! flight).
//!
//! Run: `cargo run --release -p leasehold-store --example restart_time [MESSAGES] [DIR]`; with
//! DIR the data file is written there and kept, for `leasehold serve --data-dir DIR` to start
//! on (the server's own restart and memory, measured by the server).

use std::sync::Arc;
use std::time::Instant;

use leasehold_engine::{Engine, EngineConfig, ManualClock, NewMessage, ReceiveRequest};
use leasehold_store::{codec, load, SqliteStore, Store};

// The server's allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let messages: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let kept = std::env::args().nth(2).map(std::path::PathBuf::from);
    let temporary = tempfile::tempdir().expect("a temporary directory");
    let dir = kept.as_deref().unwrap_or(temporary.path());
    // Sent now, so a server started on the kept file finds them within their retention.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1_700_000_000_000, |d| d.as_millis() as u64);
    let clock = ManualClock::new(now);
    let config = EngineConfig {
        track_changes: true,
        ..EngineConfig::default()
    };
    {
        let mut engine = Engine::new(Arc::new(clock.clone()), config.clone());
        let mut store = SqliteStore::open(dir).unwrap();
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
    let size = std::fs::metadata(dir.join("leasehold.db"))
        .map(|m| m.len())
        .unwrap_or(0);
    let started = Instant::now();
    let mut store = SqliteStore::open(dir).unwrap();
    let snapshot = load(&mut store).unwrap();
    let loaded = started.elapsed();
    let mut engine = Engine::restore(Arc::new(clock), config, snapshot);
    let total = started.elapsed();
    let counts = engine.counts("q").unwrap();
    println!(
        "restart with {} messages ({} visible, {} in flight), data file {} MiB: read {:.2} s, rebuilt in {:.2} s total",
        counts.visible + counts.not_visible + counts.delayed,
        counts.visible,
        counts.not_visible,
        size / (1 << 20),
        loaded.as_secs_f64(),
        total.as_secs_f64()
    );
}

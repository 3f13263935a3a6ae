//! Bytes per stored message: resident memory before and after storing 1,000,000 messages of
//! 200 bytes, less the bodies themselves.
//!
//! Run: `cargo run --release -p leasehold-engine --example memory [MESSAGES]`

use std::sync::Arc;

use leasehold_engine::{Engine, EngineConfig, ManualClock, NewMessage};

// The allocator the server runs on, so that these figures are the server's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|d| d.parse().ok())
        .unwrap_or(1_000_000);
    let clock = ManualClock::new(1_700_000_000_000);
    let mut engine = Engine::new(Arc::new(clock), EngineConfig::default());
    engine.create_queue("q", &[], &[]).unwrap();
    let body = "x".repeat(200);
    let before = resident_bytes();
    for _ in 0..n {
        engine.send("q", NewMessage::new(body.clone())).unwrap();
    }
    let after = resident_bytes();
    let per_message = (after - before) as f64 / n as f64;
    println!(
        "{n} messages of 200 bytes: {:.0} bytes each resident, {:.0} bytes of overhead beyond the body",
        per_message,
        per_message - 200.0
    );
    assert_eq!(engine.counts("q").unwrap().visible as u64, n);
}

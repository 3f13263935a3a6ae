//! Receive and delete latency (p50, p99) on an almost empty queue and on one holding
//! 10,000,000 messages, with per-operation HDR histograms.
//!
//! Run: `cargo run --release -p leasehold-engine --example depth [DEPTH]`

use std::sync::Arc;
use std::time::Instant;

use hdrhistogram::Histogram;
use leasehold_engine::{Engine, EngineConfig, ManualClock, NewMessage, ReceiveRequest};

// The allocator the server runs on, so that these figures are the server's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn measure(depth: u64) -> (Histogram<u64>, Histogram<u64>) {
    let clock = ManualClock::new(1_700_000_000_000);
    let mut engine = Engine::new(Arc::new(clock), EngineConfig::default());
    engine
        .create_queue("q", &[("VisibilityTimeout".into(), "3600".into())], &[])
        .unwrap();
    let body = "x".repeat(200);
    for _ in 0..depth.max(1000) {
        engine.send("q", NewMessage::new(body.clone())).unwrap();
    }
    let (mut receive, mut delete) = (Histogram::new(3).unwrap(), Histogram::new(3).unwrap());
    let one = ReceiveRequest::up_to(1);
    for _ in 0..200_000 {
        let t = Instant::now();
        let d = engine.receive("q", &one).unwrap().pop().unwrap();
        receive.record(t.elapsed().as_nanos() as u64).unwrap();
        let t = Instant::now();
        engine.delete_message("q", &d.receipt_handle).unwrap();
        delete.record(t.elapsed().as_nanos() as u64).unwrap();
        engine.send("q", NewMessage::new(body.clone())).unwrap();
    }
    (receive, delete)
}

fn main() {
    let deep: u64 = std::env::args()
        .nth(1)
        .and_then(|d| d.parse().ok())
        .unwrap_or(10_000_000);
    for depth in [1_000, deep] {
        let (r, d) = measure(depth);
        println!(
            "depth {depth:>10}: receive p50 {:>5} ns p99 {:>6} ns | delete p50 {:>5} ns p99 {:>6} ns",
            r.value_at_quantile(0.5),
            r.value_at_quantile(0.99),
            d.value_at_quantile(0.5),
            d.value_at_quantile(0.99)
        );
    }
}

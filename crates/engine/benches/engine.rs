//! The engine alone: send, receive + delete, and lease expiry, at queue depths from 1e3 to
//! 1e7, and with 1e5 leases in flight; and a FIFO queue's send, receive + delete over 1,000
//! groups. Cost per operation should not grow with depth.
//!
//! Run: `cargo bench -p leasehold-engine` (depth 1e7 needs about 4 GB of memory and a minute
//! to build; `LEASEHOLD_BENCH_MAX_DEPTH=1000000` stops earlier).

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use leasehold_engine::{Clock, Engine, EngineConfig, ManualClock, NewMessage, ReceiveRequest};

fn engine_with_depth(depth: u64) -> (Engine, ManualClock) {
    let clock = ManualClock::new(1_700_000_000_000);
    let mut engine = Engine::new(Arc::new(clock.clone()), EngineConfig::default());
    engine
        .create_queue("q", &[("VisibilityTimeout".into(), "3600".into())], &[])
        .unwrap();
    let body = "x".repeat(200);
    for _ in 0..depth {
        engine.send("q", NewMessage::new(body.clone())).unwrap();
    }
    (engine, clock)
}

fn depths() -> Vec<u64> {
    let max: u64 = std::env::var("LEASEHOLD_BENCH_MAX_DEPTH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    [1_000, 100_000, 1_000_000, 10_000_000]
        .into_iter()
        .filter(|d| *d <= max)
        .collect()
}

fn by_depth(c: &mut Criterion) {
    let mut group = c.benchmark_group("depth");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    let body = "x".repeat(200);
    let one = ReceiveRequest::up_to(1);
    for depth in depths() {
        let (mut engine, _clock) = engine_with_depth(depth);
        group.bench_with_input(BenchmarkId::new("send", depth), &depth, |b, _| {
            b.iter(|| engine.send("q", NewMessage::new(body.clone())).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("receive+delete", depth), &depth, |b, _| {
            b.iter(|| {
                let d = engine.receive("q", &one).unwrap().pop().unwrap();
                engine.delete_message("q", &d.receipt_handle).unwrap();
                // Keep the depth: put one back.
                engine.send("q", NewMessage::new(body.clone())).unwrap();
            })
        });
    }
    group.finish();
}

fn lease_expiry(c: &mut Criterion) {
    let mut group = c.benchmark_group("lease-expiry");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    let in_flight = 100_000u64;
    let (mut engine, clock) = engine_with_depth(in_flight);
    // Leases end one millisecond apart.
    let request = ReceiveRequest {
        max_messages: 1,
        visibility_s: Some(100),
        attempt_id: None,
    };
    for _ in 0..in_flight {
        engine.receive("q", &request).unwrap();
        clock.advance_ms(1);
    }
    group.bench_function("expire one of 1e5 leases and lease it again", |b| {
        b.iter(|| {
            clock.advance_ms(1);
            // The tick inside receive ends the lease due now; the receive takes it again.
            let got = engine.receive("q", &request).unwrap();
            assert!(got.len() <= 1);
        })
    });
    let _ = clock.now_ms();
    group.finish();
}

fn fifo_groups(c: &mut Criterion) {
    let mut group = c.benchmark_group("fifo");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    let clock = ManualClock::new(1_700_000_000_000);
    let mut engine = Engine::new(Arc::new(clock.clone()), EngineConfig::default());
    let attributes = [
        ("FifoQueue".to_string(), "true".to_string()),
        ("VisibilityTimeout".to_string(), "3600".to_string()),
    ];
    engine.create_queue("q.fifo", &attributes, &[]).unwrap();
    let mut n = 0u64;
    let mut send = |engine: &mut Engine| {
        n += 1;
        let mut message = NewMessage::new("x".repeat(200));
        message.group_id = Some(format!("g{}", n % 1_000));
        message.deduplication_id = Some(n.to_string());
        engine.send("q.fifo", message).unwrap();
    };
    for _ in 0..100_000 {
        send(&mut engine);
    }
    let ten = ReceiveRequest::up_to(10);
    group.bench_function(
        "receive 10 + delete + send 10, 1e5 messages in 1e3 groups",
        |b| {
            b.iter(|| {
                for d in engine.receive("q.fifo", &ten).unwrap() {
                    engine.delete_message("q.fifo", &d.receipt_handle).unwrap();
                    send(&mut engine);
                }
            })
        },
    );
    group.finish();
}

criterion_group!(benches, by_depth, lease_expiry, fifo_groups);
criterion_main!(benches);

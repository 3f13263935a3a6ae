//! A panic while a queue is locked never lets another thread see the queue it may have left
//! half changed: the lock is not let go (a queue's lock is not poisoned by a panic).

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use leasehold_engine::{Engine, EngineConfig, ManualClock, NewMessage};

#[test]
fn a_panic_under_a_queues_lock_never_lets_the_lock_go() {
    let mut engine = Engine::new(Arc::new(ManualClock::new(0)), EngineConfig::default());
    engine.create_queue("torn", &[], &[]).unwrap();
    engine.create_queue("other", &[], &[]).unwrap();
    let engine = Arc::new(engine);
    let panicking = engine.clone();
    let ended = std::thread::spawn(move || {
        let mut locked = panicking.lock_queue("torn").unwrap();
        locked.send(NewMessage::new("half").checked()).unwrap();
        panic!("a bug while the queue is half changed");
    })
    .join();
    assert!(ended.is_err(), "the thread panicked");
    // Another thread asking for the queue waits for good: it is never handed the torn queue.
    let (took, taken) = mpsc::channel();
    let waiting = engine.clone();
    std::thread::spawn(move || {
        let locked = waiting.lock_queue("torn");
        let _ = took.send(locked.is_ok());
    });
    assert!(
        taken.recv_timeout(Duration::from_millis(500)).is_err(),
        "the torn queue's lock was let go"
    );
    // The other queues go on (a server aborts instead; the engine only keeps the lock).
    let mut other = engine.lock_queue("other").unwrap();
    other.send(NewMessage::new("fine").checked()).unwrap();
}

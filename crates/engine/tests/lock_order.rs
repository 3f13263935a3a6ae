//! The queue locks' order under shuttle's scheduler, which runs the threads below in many
//! interleavings and fails on a deadlock: receives that dead-letter lock their queue and its
//! dead-letter queue in queue id order, letting go of the first and taking both again when the
//! dead-letter queue has the lower id. Two queues are each other's dead-letter queue, and a
//! third feeds one of them, so every receive below moves messages across, in both orders;
//! and again with every queue in two stripes.
//! Nothing is lost whatever the interleaving. Receives on two stripes of one queue never
//! lease past its in-flight quota together, nor beside a visibility change on another. Two
//! receives beside deletes on a fair queue with a noisy tenant hand out every quiet tenant's
//! message between them, and the shared tenant table stays each stripe's exact count.
//!
//! `cargo test -p leasehold-engine --features shuttle --test lock_order`

use std::sync::Arc;

use leasehold_engine::{
    Delivery, Engine, EngineConfig, ManualClock, NewMessage, ReceiptSealer, ReceiveRequest,
};

const QUEUES: [&str; 3] = ["a", "b", "c"];
const PER_QUEUE: usize = 2;

fn redrive(target: &str) -> Vec<(String, String)> {
    let arn = format!("arn:aws:sqs:us-east-1:000000000000:{target}");
    let policy = format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":1}}"#);
    vec![("RedrivePolicy".to_string(), policy)]
}

/// Queues a (id 1), b (2) and c (3): a and b each other's dead-letter queue, c's is a. Every
/// message has been received once, so the next receive of it moves it on. In `stripes`
/// stripes, the messages spread over them.
fn engine(stripes: usize) -> Engine {
    let config = EngineConfig {
        stripes,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(Arc::new(ManualClock::new(1_000)), config);
    engine.create_queue("a", &[], &[]).unwrap();
    engine.create_queue("b", &redrive("a"), &[]).unwrap();
    engine.set_attributes("a", &redrive("b")).unwrap();
    engine.create_queue("c", &redrive("a"), &[]).unwrap();
    for queue in QUEUES {
        for i in 0..PER_QUEUE {
            let message = NewMessage::new(format!("{queue}{i}")).checked();
            engine
                .on_stripe(queue, Some(i), &mut |_| {}, |q| q.send(message))
                .unwrap()
                .unwrap();
        }
    }
    for queue in QUEUES {
        let leased = engine.receive(queue, &bounce()).unwrap();
        assert_eq!(leased.len(), PER_QUEUE);
    }
    engine
}

/// A receive whose lease ends at once, so its messages are due to move on the next.
fn bounce() -> ReceiveRequest {
    ReceiveRequest {
        max_messages: 10,
        visibility_s: Some(0),
        attempt_id: None,
    }
}

fn held(engine: &Engine) -> usize {
    QUEUES
        .iter()
        .map(|queue| {
            let counts = engine.counts_striped(queue, &mut |_| {}).unwrap();
            counts.visible + counts.not_visible + counts.delayed
        })
        .sum()
}

fn receives_in_both_lock_orders(stripes: usize) {
    let engine = Arc::new(engine(stripes));
    let threads: Vec<_> = QUEUES
        .iter()
        .map(|queue| {
            let engine = engine.clone();
            shuttle::thread::spawn(move || {
                for _ in 0..2 {
                    let mut sink = |changes: Vec<_>| assert!(changes.is_empty(), "untracked");
                    engine.receive_striped(queue, &bounce(), &mut sink).unwrap();
                }
            })
        })
        .collect();
    // A send beside them takes one stripe's lock alone.
    let sender = engine.clone();
    let sending = shuttle::thread::spawn(move || {
        let mut locked = sender.lock_queue("b").unwrap();
        locked.send(NewMessage::new("late").checked()).unwrap();
    });
    for thread in threads {
        thread.join().unwrap();
    }
    sending.join().unwrap();
    assert_eq!(held(&engine), QUEUES.len() * PER_QUEUE + 1);
    engine.check_invariants().unwrap();
}

#[test]
fn receives_that_dead_letter_in_both_lock_orders_never_deadlock_or_lose_a_message() {
    shuttle::check_random(|| receives_in_both_lock_orders(1), 2_000);
}

#[test]
fn the_same_under_shuttle_s_probabilistic_priority_scheduler() {
    shuttle::check_pct(|| receives_in_both_lock_orders(1), 2_000, 3);
}

/// The same with every queue in two stripes, a message in each: a receive goes from stripe
/// to stripe, locking a stripe of the dead-letter queue beside each, and a send takes a free
/// stripe; never two stripes of one queue at once.
#[test]
fn striped_queues_never_deadlock_or_lose_a_message_either() {
    shuttle::check_random(|| receives_in_both_lock_orders(2), 2_000);
    shuttle::check_pct(|| receives_in_both_lock_orders(2), 2_000, 3);
}

/// Queue "q" in two stripes holding at most `quota` messages in flight, with `per_stripe`
/// messages sent to each stripe.
fn quota_engine(quota: usize, per_stripe: usize) -> Engine {
    let config = EngineConfig {
        stripes: 2,
        max_in_flight_per_queue: quota,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(Arc::new(ManualClock::new(1_000)), config);
    engine.create_queue("q", &[], &[]).unwrap();
    for stripe in 0..2 {
        for i in 0..per_stripe {
            let message = NewMessage::new(format!("{stripe}{i}")).checked();
            engine
                .on_stripe("q", Some(stripe), &mut |_| {}, |q| q.send(message))
                .unwrap()
                .unwrap();
        }
    }
    engine
}

/// A receive of up to `max` on "q" in a thread of its own: what it leased.
fn receive_apart(engine: &Arc<Engine>, max: u32) -> shuttle::thread::JoinHandle<Vec<Delivery>> {
    let engine = engine.clone();
    shuttle::thread::spawn(move || {
        let received = engine
            .receive_striped("q", &ReceiveRequest::up_to(max), &mut |_| {})
            .unwrap();
        received.handout.finish()
    })
}

/// Queue "q" holds `not_visible` messages in flight and `visible` to receive, and every
/// invariant holds (its in-flight count among them).
fn assert_held(engine: &Engine, not_visible: usize, visible: usize) {
    let counts = engine.counts_striped("q", &mut |_| {}).unwrap();
    assert_eq!((counts.not_visible, counts.visible), (not_visible, visible));
    engine.check_invariants().unwrap();
}

/// Two receives on two stripes of one queue at once never lease past its in-flight quota
/// together: each reserves its places in the queue's one count before it leases.
fn receives_share_the_in_flight_quota() {
    let engine = quota_engine(3, 2);
    let engine = Arc::new(engine);
    let threads: Vec<_> = (0..2).map(|_| receive_apart(&engine, 10)).collect();
    let leased: usize = threads.into_iter().map(|t| t.join().unwrap().len()).sum();
    assert_eq!(leased, 3);
    assert_held(&engine, 3, 1);
}

#[test]
fn receives_on_two_stripes_never_pass_the_in_flight_quota_together() {
    shuttle::check_random(receives_share_the_in_flight_quota, 2_000);
    shuttle::check_pct(receives_share_the_in_flight_quota, 2_000, 3);
}

/// A visibility change of a lease on one stripe while a receive on another finds the queue at
/// its quota: the change never lets the lease's place go for a moment the receive could take.
fn a_visibility_change_keeps_its_lease_s_place() {
    let mut engine = quota_engine(1, 1);
    let leased = engine.receive("q", &ReceiveRequest::up_to(1)).unwrap();
    let handle = leased[0].receipt_handle.clone();
    let engine = Arc::new(engine);
    let changer = {
        let engine = engine.clone();
        shuttle::thread::spawn(move || {
            let opened = vec![ReceiptSealer::new([0; 16]).open(&handle)];
            let changed = engine
                .on_handles("q", opened, &mut |_| {}, |q, _, receipt| {
                    q.change_visibility_opened(&handle, receipt, 60)
                })
                .unwrap();
            assert!(changed[0].is_ok());
        })
    };
    let receiver = receive_apart(&engine, 10);
    changer.join().unwrap();
    assert_eq!(receiver.join().unwrap().len(), 0);
    assert_held(&engine, 1, 1);
}

#[test]
fn a_visibility_change_never_lets_a_receive_pass_the_quota() {
    shuttle::check_random(a_visibility_change_keeps_its_lease_s_place, 2_000);
    shuttle::check_pct(a_visibility_change_keeps_its_lease_s_place, 2_000, 3);
}

/// Queue "q" in two stripes: tenant "n" with 31 of its 40 messages in flight (noisy; the 9
/// waiting are on stripe 1), then two messages of tenant "q" on stripe 0. Returns the
/// handles of n's leases.
fn fair_engine() -> (Engine, Vec<String>) {
    let config = EngineConfig {
        stripes: 2,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(Arc::new(ManualClock::new(1_000)), config);
    engine.create_queue("q", &[], &[]).unwrap();
    let send = |engine: &Engine, tenant: &str, stripe: usize| {
        let mut message = NewMessage::new(tenant);
        message.group_id = Some(tenant.to_string());
        let message = message.checked();
        engine
            .on_stripe("q", Some(stripe), &mut |_| {}, |q| q.send(message))
            .unwrap()
            .unwrap();
    };
    for i in 0..40 {
        send(&engine, "n", i % 2);
    }
    let mut handles = Vec::new();
    while handles.len() < 31 {
        let wanted = (31 - handles.len()).min(10) as u32;
        let leased = engine.receive("q", &ReceiveRequest::up_to(wanted)).unwrap();
        handles.extend(leased.into_iter().map(|d| d.receipt_handle));
    }
    send(&engine, "q", 0);
    send(&engine, "q", 0);
    (engine, handles)
}

/// Two receives of two, each on its own thread (both start at stripe 1: shuttle numbers
/// them 1 and 3), beside a thread deleting three of the noisy tenant's leases: between them
/// the receives take both quiet messages, however they interleave, and every count stays
/// exact.
fn quiet_messages_go_first_across_stripes() {
    let (engine, handles) = fair_engine();
    let engine = Arc::new(engine);
    let first = receive_apart(&engine, 2);
    let deleter = {
        let engine = engine.clone();
        shuttle::thread::spawn(move || {
            let sealer = ReceiptSealer::new([0; 16]);
            for handle in handles.into_iter().take(3) {
                let opened = vec![sealer.open(&handle)];
                engine
                    .on_handles("q", opened, &mut |_| {}, |q, _, receipt| {
                        q.delete_opened(&handle, receipt)
                    })
                    .unwrap();
            }
        })
    };
    let second = receive_apart(&engine, 2);
    let received: Vec<_> = [first, second]
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    deleter.join().unwrap();
    let quiet = received.iter().filter(|d| &*d.body == "q").count();
    assert_eq!((received.len(), quiet), (4, 2));
    assert_held(&engine, 32, 7);
}

#[test]
fn fair_receives_on_two_stripes_take_quiet_tenants_first_and_keep_counts_exact() {
    shuttle::check_random(quiet_messages_go_first_across_stripes, 1_000);
    shuttle::check_pct(quiet_messages_go_first_across_stripes, 1_000, 3);
}

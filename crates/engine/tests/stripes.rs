//! A standard queue split into stripes behaves as one queue: a receive fills up from every
//! stripe, handles find their stripe, counts, counters and measurements add up, settings and
//! purges reach every stripe, the stripe that waited longest is served first, and a move task
//! takes the oldest message of any stripe.

use std::sync::Arc;

use leasehold_engine::{Change, Engine, EngineConfig, ManualClock, NewMessage, ReceiveRequest};

const ARN: &str = "arn:aws:sqs:us-east-1:000000000000:";

fn engine(clock: &ManualClock) -> Engine {
    let config = EngineConfig {
        stripes: 2,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(Arc::new(clock.clone()), config);
    engine.create_queue("q", &[], &[]).unwrap();
    engine
}

/// Sends `bodies` to stripe `stripe` of `queue`, whichever thread this is.
fn send_to(engine: &mut Engine, queue: &str, stripe: usize, bodies: &[&str]) {
    let mut ignore = |_: Vec<Change>| {};
    for body in bodies {
        engine
            .on_stripe(queue, Some(stripe), &mut ignore, |q| {
                q.send(NewMessage::new(*body).checked())
            })
            .unwrap()
            .unwrap();
    }
}

fn bodies(engine: &mut Engine, queue: &str, max: u32) -> Vec<(String, String)> {
    let received = engine.receive(queue, &ReceiveRequest::up_to(max)).unwrap();
    received
        .into_iter()
        .map(|d| (d.body.to_string(), d.receipt_handle))
        .collect()
}

fn count(engine: &mut Engine, queue: &str, name: &str) -> String {
    let attributes = engine.get_attributes(queue, &[name.to_string()]).unwrap();
    attributes[0].1.clone()
}

#[test]
fn a_receive_fills_up_from_every_stripe_and_every_handle_finds_its_own() {
    let clock = ManualClock::new(1_000_000);
    let mut engine = engine(&clock);
    assert_eq!(engine.stripe_count("q").unwrap(), 2);
    send_to(&mut engine, "q", 0, &["a0", "a1", "a2"]);
    send_to(&mut engine, "q", 1, &["b0", "b1", "b2"]);
    assert_eq!(count(&mut engine, "q", "ApproximateNumberOfMessages"), "6");

    let received = bodies(&mut engine, "q", 10);
    let mut got: Vec<&str> = received.iter().map(|(b, _)| b.as_str()).collect();
    got.sort();
    assert_eq!(got, ["a0", "a1", "a2", "b0", "b1", "b2"]);
    assert_eq!(
        count(&mut engine, "q", "ApproximateNumberOfMessagesNotVisible"),
        "6"
    );
    for (_, handle) in &received {
        engine.delete_message("q", handle).unwrap();
    }
    assert_eq!(count(&mut engine, "q", "ApproximateNumberOfMessages"), "0");
    assert_eq!(
        count(&mut engine, "q", "ApproximateNumberOfMessagesNotVisible"),
        "0"
    );
    let stats = engine.stats("q").unwrap();
    assert_eq!((stats.sent, stats.received, stats.deleted), (6, 6, 6));
    let report = engine.lease_report("q").unwrap();
    assert_eq!(report.hold_total.map(|h| h.count), Some(6));
    assert_eq!(report.receive_count_histogram.get(&1), Some(&6));
    assert_eq!(engine.check_invariants(), Ok(()));
}

#[test]
fn the_stripe_that_waited_longest_is_served_first() {
    let clock = ManualClock::new(1_000_000);
    let mut engine = engine(&clock);
    for old in 0..2 {
        let new = 1 - old;
        let queue = format!("q{old}");
        engine.create_queue(&queue, &[], &[]).unwrap();
        send_to(&mut engine, &queue, old, &["old"]);
        clock.advance_ms(2_000);
        send_to(&mut engine, &queue, new, &["new"]);
        // Whichever stripe is this thread's own, the older message comes first.
        let first = bodies(&mut engine, &queue, 1);
        assert_eq!(first[0].0, "old", "old message in stripe {old}");
        assert_eq!(bodies(&mut engine, &queue, 1)[0].0, "new");
    }
}

#[test]
fn settings_and_purges_reach_every_stripe() {
    let clock = ManualClock::new(1_000_000);
    let mut engine = engine(&clock);
    let visibility = [("VisibilityTimeout".to_string(), "5".to_string())];
    engine.set_attributes("q", &visibility).unwrap();
    send_to(&mut engine, "q", 0, &["a"]);
    send_to(&mut engine, "q", 1, &["b"]);
    assert_eq!(bodies(&mut engine, "q", 10).len(), 2);
    clock.advance_ms(4_999);
    assert!(
        bodies(&mut engine, "q", 10).is_empty(),
        "5 s leases on both"
    );
    clock.advance_ms(1);
    assert_eq!(bodies(&mut engine, "q", 10).len(), 2);

    clock.advance_ms(60_000);
    engine.purge("q").unwrap();
    assert_eq!(
        count(&mut engine, "q", "ApproximateNumberOfMessagesNotVisible"),
        "0"
    );
    assert!(bodies(&mut engine, "q", 10).is_empty());
    send_to(&mut engine, "q", 1, &["after"]);
    assert_eq!(bodies(&mut engine, "q", 10)[0].0, "after");
    assert_eq!(engine.check_invariants(), Ok(()));
}

#[test]
fn a_move_task_takes_the_oldest_message_of_any_stripe_and_spreads_them() {
    let clock = ManualClock::new(1_000_000);
    let mut engine = engine(&clock);
    engine.create_queue("dlq", &[], &[]).unwrap();
    send_to(&mut engine, "dlq", 1, &["first"]);
    clock.advance_ms(10);
    send_to(&mut engine, "dlq", 0, &["second"]);
    clock.advance_ms(10);
    send_to(&mut engine, "dlq", 1, &["third"]);
    let policy = format!(r#"{{"deadLetterTargetArn":"{ARN}dlq","maxReceiveCount":3}}"#);
    engine
        .set_attributes("q", &[("RedrivePolicy".to_string(), policy)])
        .unwrap();
    let destination = format!("{ARN}q");
    engine
        .start_move_task(&format!("{ARN}dlq"), Some(&destination), Some(1))
        .unwrap();
    // One a second: the oldest of both stripes first.
    let mut moved = Vec::new();
    for _ in 0..3 {
        clock.advance_ms(1_000);
        engine.run_move_tasks();
        moved.extend(bodies(&mut engine, "q", 10).into_iter().map(|(b, _)| b));
    }
    assert_eq!(moved, ["first", "second", "third"]);
    assert_eq!(engine.check_invariants(), Ok(()));
}

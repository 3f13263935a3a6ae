//! The in-flight quota (AWS's 120,000 messages received and not yet deleted, per queue): a
//! standard queue's receive past it hands out nothing and says `over_limit` (a short poll's
//! OverLimit), whichever stripe it starts at; a FIFO queue's hands out nothing and says
//! nothing; a delete, a release or a lease that runs out makes room again.

use std::sync::Arc;

use leasehold_engine::{
    Change, Delivery, Engine, EngineConfig, ManualClock, NewMessage, ReceiveRequest,
    MAX_IN_FLIGHT_PER_QUEUE,
};

fn engine(clock: &ManualClock, stripes: usize, quota: usize) -> Engine {
    let config = EngineConfig {
        stripes,
        max_in_flight_per_queue: quota,
        ..EngineConfig::default()
    };
    Engine::new(Arc::new(clock.clone()), config)
}

fn send_to(engine: &Engine, queue: &str, stripe: usize, count: usize) {
    let mut ignore = |_: Vec<Change>| {};
    for i in 0..count {
        let message = NewMessage::new(format!("{stripe}-{i}")).checked();
        engine
            .on_stripe(queue, Some(stripe), &mut ignore, |q| q.send(message))
            .unwrap()
            .unwrap();
    }
}

/// A receive of up to `max` over every stripe: what it handed out, and whether it said
/// OverLimit.
fn receive(engine: &Engine, queue: &str, max: u32) -> (Vec<Delivery>, bool) {
    let mut ignore = |_: Vec<Change>| {};
    let received = engine
        .receive_striped(queue, &ReceiveRequest::up_to(max), &mut ignore)
        .unwrap();
    (received.handout.finish(), received.over_limit)
}

fn not_visible(engine: &mut Engine, queue: &str) -> String {
    let name = "ApproximateNumberOfMessagesNotVisible".to_string();
    engine.get_attributes(queue, &[name]).unwrap()[0].1.clone()
}

#[test]
fn a_standard_queue_in_two_stripes_stops_at_the_quota_and_says_over_limit() {
    let clock = ManualClock::new(1_000_000);
    let mut engine = engine(&clock, 2, 5);
    engine.create_queue("q", &[], &[]).unwrap();
    send_to(&engine, "q", 0, 4);
    send_to(&engine, "q", 1, 4);

    let (first, over) = receive(&engine, "q", 10);
    assert_eq!(
        (first.len(), over),
        (5, false),
        "the quota fills, and says nothing yet"
    );
    let (none, over) = receive(&engine, "q", 10);
    assert_eq!((none.len(), over), (0, true));
    assert_eq!(not_visible(&mut engine, "q"), "5");

    // A delete makes room for one, a release for one more.
    engine
        .delete_message("q", &first[0].receipt_handle)
        .unwrap();
    let (one, over) = receive(&engine, "q", 10);
    assert_eq!((one.len(), over), (1, false));
    engine
        .change_visibility("q", &first[1].receipt_handle, 0)
        .unwrap();
    let (again, _) = receive(&engine, "q", 10);
    assert_eq!(again.len(), 1);
    assert_eq!(receive(&engine, "q", 10), (Vec::new(), true));

    // Leases that run out make room for the rest.
    clock.advance_secs(31);
    let (after, over) = receive(&engine, "q", 10);
    assert_eq!((after.len(), over), (5, false));
    assert_eq!(not_visible(&mut engine, "q"), "5");
    assert_eq!(engine.check_invariants(), Ok(()));
}

#[test]
fn an_empty_queue_is_not_over_the_limit() {
    let clock = ManualClock::new(1_000_000);
    let engine = engine(&clock, 2, 2);
    let mut engine = engine;
    engine.create_queue("q", &[], &[]).unwrap();
    send_to(&engine, "q", 0, 2);
    assert_eq!(receive(&engine, "q", 10).0.len(), 2);
    // At the quota, but nothing is held back: an empty answer, no error.
    assert_eq!(receive(&engine, "q", 10), (Vec::new(), false));
}

#[test]
fn a_fifo_queue_at_the_quota_hands_out_nothing_and_no_error() {
    let clock = ManualClock::new(1_000_000);
    let mut engine = engine(&clock, 2, 3);
    let fifo = [("FifoQueue".to_string(), "true".to_string())];
    engine.create_queue("q.fifo", &fifo, &[]).unwrap();
    for (i, group) in ["a", "b", "c", "d"].iter().enumerate() {
        let mut message = NewMessage::new(format!("m{i}"));
        message.group_id = Some(group.to_string());
        message.deduplication_id = Some(format!("d{i}"));
        engine.send("q.fifo", message).unwrap();
    }
    let (first, over) = receive(&engine, "q.fifo", 10);
    assert_eq!((first.len(), over), (3, false));
    assert_eq!(receive(&engine, "q.fifo", 10), (Vec::new(), false));
    engine
        .delete_message("q.fifo", &first[0].receipt_handle)
        .unwrap();
    let (last, _) = receive(&engine, "q.fifo", 10);
    assert_eq!(
        last.iter()
            .map(|d| d.group_id.as_deref())
            .collect::<Vec<_>>(),
        [Some("d")]
    );
    assert_eq!(engine.check_invariants(), Ok(()));
}

#[test]
fn by_default_the_quota_is_aws_s_120_000() {
    let clock = ManualClock::new(1_000_000);
    let mut engine = engine(&clock, 1, MAX_IN_FLIGHT_PER_QUEUE);
    engine.create_queue("q", &[], &[]).unwrap();
    let batch: Vec<NewMessage> = (0..10).map(|i| NewMessage::new(format!("m{i}"))).collect();
    for _ in 0..MAX_IN_FLIGHT_PER_QUEUE / 10 + 1 {
        engine.send_batch("q", batch.clone()).unwrap();
    }
    let mut leased = 0;
    while leased < MAX_IN_FLIGHT_PER_QUEUE {
        let (got, over) = receive(&engine, "q", 10);
        assert!(!over && !got.is_empty());
        leased += got.len();
    }
    assert_eq!(leased, 120_000);
    assert_eq!(receive(&engine, "q", 10), (Vec::new(), true));
    assert_eq!(not_visible(&mut engine, "q"), "120000");
}

/// The count holds a lease of another stripe until that stripe is brought up to the present:
/// a receive that stops at the quota on its first stripe looks again once the others ticked.
/// Here the only lease ran out on stripe 1 and its message goes to the dead-letter queue, so
/// stripe 0's message is the one to hand out, not an OverLimit.
#[test]
fn a_stripe_stopped_by_a_lease_that_ran_out_elsewhere_is_looked_at_again() {
    let clock = ManualClock::new(1_000_000);
    let mut engine = engine(&clock, 2, 1);
    engine.create_queue("dlq", &[], &[]).unwrap();
    let policy =
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1}"#;
    let redrive = [("RedrivePolicy".to_string(), policy.to_string())];
    engine.create_queue("q", &redrive, &[]).unwrap();
    send_to(&engine, "q", 1, 1);
    assert_eq!(receive(&engine, "q", 10).0.len(), 1);
    send_to(&engine, "q", 0, 1);
    clock.advance_secs(31);

    let (got, over) = receive(&engine, "q", 10);
    let bodies: Vec<&str> = got.iter().map(|d| &*d.body).collect();
    assert_eq!((bodies, over), (vec!["0-0"], false));
    assert_eq!(engine.check_invariants(), Ok(()));
}

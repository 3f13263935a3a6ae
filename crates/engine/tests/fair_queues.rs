//! Fair queues (AWS, July 2025): on a standard queue a message group id names a tenant; a
//! tenant holding more than a tenth of the queue's messages in flight and at least 30 of its
//! own, or more than a tenth of the recent processing time, is noisy, and receives hand out
//! quiet tenants' messages first, then the noisy tenant's with the fewest in flight. It is
//! quiet again when its backlog is gone or it sent nothing for five minutes. Every test runs
//! on a queue of two stripes, its messages spread over both.

use std::collections::BTreeMap;
use std::sync::Arc;

use leasehold_engine::{
    Change, Delivery, Engine, EngineConfig, ManualClock, NewMessage, ReceiveRequest, QUIET_AFTER_MS,
};

fn engine(clock: &ManualClock) -> Engine {
    let config = EngineConfig {
        stripes: 2,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(Arc::new(clock.clone()), config);
    engine.create_queue("q", &[], &[]).unwrap();
    engine
}

/// Sends `count` messages of `tenant` ("" for none), alternating between the two stripes.
fn send(engine: &Engine, tenant: &str, count: usize) {
    let mut ignore = |_: Vec<Change>| {};
    for i in 0..count {
        let mut message = NewMessage::new(format!("{tenant}-{i}"));
        message.group_id = (!tenant.is_empty()).then(|| tenant.to_string());
        let message = message.checked();
        engine
            .on_stripe("q", Some(i % 2), &mut ignore, |q| q.send(message))
            .unwrap()
            .unwrap();
    }
}

/// A receive of up to `max` over both stripes, with a lease of an hour.
fn receive(engine: &Engine, max: u32) -> Vec<Delivery> {
    let mut ignore = |_: Vec<Change>| {};
    let request = ReceiveRequest {
        visibility_s: Some(3600),
        ..ReceiveRequest::up_to(max)
    };
    let received = engine.receive_striped("q", &request, &mut ignore).unwrap();
    received.handout.finish()
}

fn receive_all(engine: &Engine, count: usize) -> Vec<Delivery> {
    let mut all = Vec::new();
    while all.len() < count {
        let got = receive(engine, 10.min((count - all.len()) as u32));
        assert!(!got.is_empty(), "ran dry after {}", all.len());
        all.extend(got);
    }
    all
}

/// How many of `deliveries` each tenant had ("" for messages without a group).
fn by_tenant(deliveries: &[Delivery]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for d in deliveries {
        let tenant = d.group_id.as_deref().unwrap_or("").to_string();
        *counts.entry(tenant).or_insert(0) += 1;
    }
    counts
}

fn noisy_groups(engine: &mut Engine) -> Vec<String> {
    let report = engine.lease_report("q").unwrap();
    let fairness = report.fairness.expect("a standard queue reports fairness");
    assert_eq!(fairness.noisy_groups, fairness.noisy.len());
    fairness.noisy.into_iter().map(|t| t.group).collect()
}

/// One tenant with 60 messages in flight and 540 waiting, the case.
fn flooded(clock: &ManualClock) -> Engine {
    let engine = engine(clock);
    send(&engine, "flood", 600);
    clock.advance_ms(1000);
    assert_eq!(by_tenant(&receive_all(&engine, 60))["flood"], 60);
    engine
}

#[test]
fn quiet_tenants_go_before_a_tenant_with_sixty_in_flight_and_540_waiting() {
    let clock = ManualClock::new(1_000_000);
    let mut engine = flooded(&clock);
    assert_eq!(noisy_groups(&mut engine), ["flood"]);
    clock.advance_ms(1000);
    for tenant in ["a", "b", "c"] {
        send(&engine, tenant, 5);
    }
    send(&engine, "", 2);
    let next = receive(&engine, 10);
    assert_eq!(next.len(), 10);
    assert_eq!(
        by_tenant(&next).get("flood"),
        None,
        "{:?}",
        by_tenant(&next)
    );
    let rest = receive_all(&engine, 17);
    let rest = by_tenant(&rest);
    assert_eq!(
        rest["flood"], 10,
        "the quiet 17 first, then the noisy: {rest:?}"
    );

    let fairness = engine.lease_report("q").unwrap().fairness.unwrap();
    assert_eq!(fairness.noisy_groups, 1);
    assert_eq!(fairness.noisy[0].counts.in_flight, 70);
    assert_eq!(fairness.noisy[0].counts.visible, 530);
    assert_eq!(
        (
            fairness.quiet.visible,
            fairness.quiet.not_visible,
            fairness.quiet.delayed
        ),
        (0, 17, 0)
    );
    // The oldest quiet message was sent a second after the flood, a second before now... and
    // is in flight: the age counts every message not deleted, as AWS's does.
    assert_eq!(fairness.oldest_quiet_age_ms, Some(0));
}

#[test]
fn with_no_noisy_tenant_the_oldest_message_goes_first_whatever_its_tenant() {
    let clock = ManualClock::new(1_000_000);
    let mut engine = engine(&clock);
    send(&engine, "big", 20);
    clock.advance_ms(1000);
    send(&engine, "small", 5);
    let first = receive_all(&engine, 20);
    assert_eq!(by_tenant(&first)["big"], 20, "20 in flight is not noisy");
    assert!(noisy_groups(&mut engine).is_empty());
}

#[test]
fn a_noisy_tenant_is_quiet_again_once_its_backlog_is_gone() {
    let clock = ManualClock::new(1_000_000);
    let engine = engine(&clock);
    send(&engine, "flood", 100);
    receive_all(&engine, 60);
    let mut engine = engine;
    assert_eq!(noisy_groups(&mut engine), ["flood"]);
    clock.advance_ms(1000);
    send(&engine, "quiet", 30);
    // The quiet tenant's 30 go first, then the flood's 40 waiting: its backlog is gone.
    let drained = receive_all(&engine, 70);
    assert_eq!(by_tenant(&drained[..30])["quiet"], 30);
    assert!(noisy_groups(&mut engine).is_empty());
    // Quiet again, its next message goes before a newer one of another tenant.
    clock.advance_ms(1000);
    send(&engine, "flood", 1);
    clock.advance_ms(1000);
    send(&engine, "other", 1);
    let next = receive(&engine, 1);
    assert_eq!(next[0].group_id.as_deref(), Some("flood"));
}

#[test]
fn a_noisy_tenant_that_sent_nothing_for_five_minutes_is_quiet_again() {
    let clock = ManualClock::new(1_000_000);
    let mut engine = flooded(&clock);
    assert_eq!(noisy_groups(&mut engine), ["flood"]);
    clock.advance_ms(QUIET_AFTER_MS - 2_000);
    send(&engine, "other", 1);
    assert_eq!(noisy_groups(&mut engine), ["flood"], "not five minutes yet");
    clock.advance_ms(1_000);
    assert!(noisy_groups(&mut engine).is_empty());
    // Its oldest waiting message goes before the other tenant's newer one.
    let next = receive(&engine, 1);
    assert_eq!(next[0].group_id.as_deref(), Some("flood"));
}

#[test]
fn among_noisy_tenants_the_one_with_fewest_in_flight_goes_first() {
    let clock = ManualClock::new(1_000_000);
    let mut engine = engine(&clock);
    send(&engine, "a", 100);
    receive_all(&engine, 60);
    clock.advance_ms(1000);
    send(&engine, "b", 100);
    // b is quiet until it holds 30 in flight (and a tenth of the queue's).
    let b_first = receive_all(&engine, 30);
    assert_eq!(by_tenant(&b_first)["b"], 30);
    assert_eq!(noisy_groups(&mut engine), ["a", "b"]);
    // Both noisy: b, with 30 in flight against a's 60, gets the next 30, then they share.
    let next = receive_all(&engine, 30);
    assert_eq!(by_tenant(&next)["b"], 30, "{:?}", by_tenant(&next));
    let shared = by_tenant(&receive_all(&engine, 20));
    assert!((9..=11).contains(&shared["a"]), "{shared:?}");
}

#[test]
fn a_tenant_with_more_than_a_tenth_of_the_recent_processing_time_is_noisy() {
    let clock = ManualClock::new(1_000_000);
    let mut engine = engine(&clock);
    // A slow tenant: five messages, held a minute each; never 30 in flight.
    send(&engine, "slow", 5);
    let slow = receive_all(&engine, 5);
    clock.advance_ms(60_000);
    // Others' messages, each held a tenth of a second: the rule judges no one before 30
    // leases ended lately.
    send(&engine, "", 40);
    for d in receive_all(&engine, 40) {
        clock.advance_ms(100);
        engine.delete_message("q", &d.receipt_handle).unwrap();
    }
    assert!(
        noisy_groups(&mut engine).is_empty(),
        "nothing of slow's ended yet"
    );
    send(&engine, "slow", 5);
    for d in &slow {
        engine.delete_message("q", &d.receipt_handle).unwrap();
    }
    assert_eq!(noisy_groups(&mut engine), ["slow"]);
    let fairness = engine.lease_report("q").unwrap().fairness.unwrap();
    let slow = &fairness.noisy[0];
    assert!(slow.processing_permille > 700, "{slow:?}");
    assert_eq!(slow.mean_hold_ms, Some(64_000));
    clock.advance_ms(1000);
    send(&engine, "", 3);
    let next = by_tenant(&receive(&engine, 4));
    assert_eq!((next[""], next["slow"]), (3, 1), "{next:?}");
}

#[test]
fn tenant_counts_stay_true_through_expiry_release_delete_and_purge() {
    let clock = ManualClock::new(1_000_000);
    let mut engine = flooded(&clock);
    send(&engine, "x", 10);
    let taken = receive_all(&engine, 20);
    engine
        .change_visibility("q", &taken[0].receipt_handle, 0)
        .unwrap();
    engine
        .delete_message("q", &taken[1].receipt_handle)
        .unwrap();
    engine.check_invariants().unwrap();
    clock.advance_ms(3_601_000);
    receive(&engine, 10);
    engine.check_invariants().unwrap();
    engine.purge("q").unwrap();
    engine.check_invariants().unwrap();
    assert!(noisy_groups(&mut engine).is_empty());
    let fairness = engine.lease_report("q").unwrap().fairness.unwrap();
    assert_eq!(fairness.oldest_quiet_age_ms, None);
}

/// A quiet message that becomes receivable by a timer on another stripe (a delay ending) is
/// counted nowhere until that stripe is next locked: a lone noisy tenant's backlog on the
/// first stripe a receive visits must not keep it waiting.
#[test]
fn a_quiet_message_whose_delay_ends_on_another_stripe_goes_before_a_lone_noisy_tenant() {
    let clock = ManualClock::new(1_000_000);
    let engine = engine(&clock);
    let mut ignore = |_: Vec<Change>| {};
    let on = |stripe: usize, message: NewMessage, ignore: &mut dyn FnMut(Vec<Change>)| {
        let message = message.checked();
        engine
            .on_stripe("q", Some(stripe), ignore, |q| q.send(message))
            .unwrap()
            .unwrap();
    };
    for i in 0..100 {
        let mut flood = NewMessage::new(format!("flood-{i}"));
        flood.group_id = Some("flood".into());
        on(0, flood, &mut ignore);
    }
    receive_all(&engine, 60);
    clock.advance_ms(1000);
    let mut quiet = NewMessage::new("quiet");
    quiet.delay_s = Some(1);
    on(1, quiet, &mut ignore);
    clock.advance_ms(2000);
    let next = by_tenant(&receive(&engine, 10));
    assert_eq!(next.get(""), Some(&1), "{next:?}");
}

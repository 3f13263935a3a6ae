//! The seed module's worked examples, as tests.

use super::*;

/// Seed 000 section 13: the video transcoding service.
fn transcoding() -> Distribution {
    Distribution::from_quantiles(22.0, 95.0, 310.0, 540.0, 480.0)
}

#[test]
fn the_transcoding_service_gets_the_seeds_answer() {
    let advice = advise(&transcoding(), &Inputs::default());
    assert_eq!(advice.visibility_timeout_s, 120.0);
    assert_eq!(advice.heartbeat_interval_s, Some(40.0));
    assert_eq!(advice.max_receive_count, 3);
    assert_eq!(advice.time_to_dlq_s, 360.0, "about 6 minutes");
    assert_eq!(advice.crash_recovery_s, 120.0, "about 2 minutes");
    assert!(
        advice.reasons.iter().any(|r| r.contains("long tail")),
        "{:?}",
        advice.reasons
    );
}

#[test]
fn thirty_seconds_fails_the_transcoding_service_with_about_half_processed_twice() {
    let d = transcoding();
    let e = evaluate(&d, 30.0, None, 5, &Inputs::default());
    assert!(
        (0.40..0.50).contains(&e.overrun_fraction),
        "{}",
        e.overrun_fraction
    );
    assert!(
        e.verdict.starts_with("fails") && e.verdict.contains("processed at least twice"),
        "{}",
        e.verdict
    );
}

#[test]
fn ten_minutes_fails_the_transcoding_service_on_recovery_and_time_to_dlq() {
    let d = transcoding();
    let e = evaluate(&d, 600.0, None, 5, &Inputs::default());
    assert_eq!(e.overrun_fraction, 0.0, "no duplicates from overrun");
    assert_eq!(e.crash_recovery_s, 600.0);
    assert_eq!(e.time_to_dlq_s, 3000.0, "50 minutes");
    assert!(
        e.verdict.contains("frozen for 10 min") && e.verdict.contains("50 min to reach the DLQ"),
        "{}",
        e.verdict
    );
}

#[test]
fn a_short_tight_distribution_gets_a_constant_lease_without_heartbeat() {
    let durations: Vec<f64> = (0..1000).map(|i| 1.0 + (i % 10) as f64 * 0.5).collect();
    let d = Distribution::from_durations(&durations).unwrap();
    let advice = advise(&d, &Inputs::default());
    assert_eq!(advice.heartbeat_interval_s, None);
    assert_eq!(advice.visibility_timeout_s, nice_ceil(d.p99 * 2.0));
    assert!(advice.visibility_timeout_s >= d.max);
}

#[test]
fn lambda_needs_six_times_the_function_timeout() {
    let d = Distribution::from_quantiles(2.0, 5.0, 8.0, 9.0, 10.0);
    let inputs = Inputs {
        lambda_timeout_s: Some(30.0),
        current_visibility_s: Some(30.0),
        ..Inputs::default()
    };
    let advice = advise(&d, &inputs);
    assert_eq!(advice.visibility_timeout_s, 180.0);
    assert!(
        advice
            .warnings
            .iter()
            .any(|w| w.contains("6 x the Lambda timeout")),
        "{:?}",
        advice.warnings
    );
}

#[test]
fn work_past_twelve_hours_is_sent_to_a_job_record() {
    let d = Distribution::from_quantiles(600.0, 3600.0, 20_000.0, 40_000.0, 50_000.0);
    let advice = advise(&d, &Inputs::default());
    assert!(
        advice.warnings.iter().any(|w| w.contains("12 hours")),
        "{:?}",
        advice.warnings
    );
}

#[test]
fn retention_and_shutdown_grace_are_checked() {
    let inputs = Inputs {
        retention_s: Some(1800.0),
        shutdown_grace_s: Some(200.0),
        ..Inputs::default()
    };
    let advice = advise(&transcoding(), &inputs);
    assert!(
        advice.warnings.iter().any(|w| w.contains("retention")),
        "{:?}",
        advice.warnings
    );
    assert!(
        advice
            .warnings
            .iter()
            .any(|w| w.contains("graceful-shutdown")),
        "{:?}",
        advice.warnings
    );
    assert!(advice.shutdown_grace_s < advice.visibility_timeout_s);
}

#[test]
fn both_seeds_base_timeouts_are_shown_with_their_trade_off() {
    let advice = advise(&transcoding(), &Inputs::default());
    let seed_004 = advice
        .alternatives
        .iter()
        .find(|a| a.name.starts_with("seed 004"))
        .unwrap();
    assert_eq!(seed_004.evaluation.visibility_timeout_s, 1860.0);
    assert!(seed_004.trade_off.contains("crashed consumer"));
}

#[test]
fn raw_durations_give_exact_overrun_fractions() {
    let d = Distribution::from_durations(&[1.0, 2.0, 3.0, 40.0]).unwrap();
    assert_eq!(d.fraction_above(30.0), 0.25);
    assert_eq!(d.fraction_above(40.0), 0.0);
}

fn said(advice: &Advice) -> String {
    [advice.reasons.clone(), advice.warnings.clone()]
        .concat()
        .join("\n")
}

#[test]
fn lambda_gets_no_heartbeat_even_for_a_long_tail() {
    let d = Distribution::from_quantiles(1.0, 2.0, 4.0, 20.0, 25.0);
    let inputs = Inputs {
        lambda_timeout_s: Some(30.0),
        ..Inputs::default()
    };
    let advice = advise(&d, &inputs);
    assert_eq!(advice.heartbeat_interval_s, None);
    assert_eq!(advice.visibility_timeout_s, 180.0);
    assert!(
        !said(&advice).contains("Heartbeat every"),
        "{}",
        said(&advice)
    );
}

#[test]
fn a_short_heartbeat_lease_is_floored_with_its_reason() {
    let d = Distribution::from_quantiles(1.1, 3.0, 19.0, 60.0, 70.0);
    let advice = advise(&d, &Inputs::default());
    assert_eq!(advice.visibility_timeout_s, MIN_HEARTBEAT_LEASE_S);
    assert_eq!(advice.heartbeat_interval_s, Some(10.0));
    assert!(said(&advice).contains("fragile"), "{}", said(&advice));
    // Heartbeats run during the drain: the drain is not called pointless.
    assert!(!said(&advice).contains("pointless"), "{}", said(&advice));
}

#[test]
fn work_past_twelve_hours_is_not_said_to_be_covered_by_the_lease() {
    let d = Distribution::from_quantiles(30_000.0, 50_000.0, 60_000.0, 90_000.0, 100_000.0);
    let text = said(&advise(&d, &Inputs::default()));
    assert!(!text.contains("covers p90"), "{text}");
    assert!(text.contains("12-hour ceiling"), "{text}");
}

#[test]
fn a_time_to_dlq_beyond_retention_is_said_the_right_way_round() {
    let inputs = Inputs {
        retention_s: Some(60.0),
        ..Inputs::default()
    };
    let d = Distribution::from_quantiles(10.0, 20.0, 40.0, 45.0, 50.0);
    let text = said(&advise(&d, &inputs));
    assert!(
        text.contains("is longer than the retention period (60 s)"),
        "{text}"
    );
    assert!(!text.contains("not far below"), "{text}");
}

#[test]
fn a_tiny_constant_lease_is_floored() {
    let d = Distribution::from_quantiles(0.1, 0.2, 0.3, 0.35, 0.4);
    let advice = advise(&d, &Inputs::default());
    assert_eq!(advice.visibility_timeout_s, MIN_LEASE_S);
    assert!(
        said(&advice).contains("no shorter than"),
        "{}",
        said(&advice)
    );
}

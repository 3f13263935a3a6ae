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
        warned(&advice, "6 x the Lambda timeout"),
        "{:?}",
        advice.warnings
    );
}

#[test]
fn work_past_twelve_hours_is_sent_to_a_job_record() {
    let d = Distribution::from_quantiles(600.0, 3600.0, 20_000.0, 40_000.0, 50_000.0);
    let advice = advise(&d, &Inputs::default());
    assert!(warned(&advice, "12 hours"), "{:?}", advice.warnings);
}

#[test]
fn retention_and_shutdown_grace_are_checked() {
    let inputs = Inputs {
        retention_s: Some(1800.0),
        shutdown_grace_s: Some(200.0),
        ..Inputs::default()
    };
    let advice = advise(&transcoding(), &inputs);
    assert!(warned(&advice, "retention"), "{:?}", advice.warnings);
    assert!(
        warned(&advice, "graceful-shutdown"),
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

/// Whether one of the advice's warnings says `words`.
fn warned(advice: &Advice, words: &str) -> bool {
    advice.warnings.iter().any(|w| w.contains(words))
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

/// Issue 50: work of 600 s every time against a 300 s crash budget. Heartbeating was advised
/// for the budget's sake, so the base lease stays inside it.
#[test]
fn a_heartbeat_lease_stays_inside_the_crash_budget() {
    let durations = vec![600.0; 1_000];
    let d = Distribution::from_durations(&durations).unwrap();
    let advice = advise(&d, &Inputs::default());
    assert!(advice.heartbeat_interval_s.is_some());
    assert!(advice.visibility_timeout_s <= 300.0, "{advice:?}");
    assert!(!said(&advice).contains("frozen"), "{}", said(&advice));
}

/// Work of 50,000 s: a heartbeat that renews by the 12-hour ceiling extends nothing; the base
/// lease stays short enough for each beat to extend it, and the job record is named.
#[test]
fn a_heartbeat_always_extends_and_work_past_twelve_hours_gets_a_job_record() {
    let d = Distribution::from_quantiles(50_000.0, 50_000.0, 50_000.0, 50_000.0, 50_000.0);
    for budget in [300.0, 86_400.0] {
        let inputs = Inputs {
            max_crash_recovery_s: budget,
            max_outage_s: 300.0,
            ..Inputs::default()
        };
        let advice = advise(&d, &inputs);
        let beat = advice.heartbeat_interval_s.unwrap();
        assert!(advice.visibility_timeout_s <= MAX_HEARTBEAT_LEASE_S);
        assert!(beat < advice.visibility_timeout_s);
        assert!(
            !said(&advice).contains("extends nothing"),
            "{}",
            said(&advice)
        );
        assert!(
            advice.warnings.iter().any(|w| w.contains("job")),
            "{:?}",
            advice.warnings
        );
    }
    let lone = evaluate(&d, TWELVE_HOURS_S, Some(14_400.0), 3, &Inputs::default());
    assert!(lone.verdict.contains("extends nothing"), "{}", lone.verdict);
}

/// A 30 s lease for a Lambda function of 30 s is below AWS's 6 x: never "fits".
#[test]
fn a_lease_below_six_lambda_timeouts_never_fits() {
    let d = Distribution::from_quantiles(2.0, 5.0, 8.0, 9.0, 10.0);
    let inputs = Inputs {
        lambda_timeout_s: Some(30.0),
        current_visibility_s: Some(30.0),
        ..Inputs::default()
    };
    let advice = advise(&d, &inputs);
    let current = &advice.evaluations[0];
    assert_eq!(current.visibility_timeout_s, 30.0);
    assert!(
        current.verdict.contains("6 x the Lambda"),
        "{}",
        current.verdict
    );
    for alternative in &advice.alternatives {
        let e = &alternative.evaluation;
        if e.visibility_timeout_s < 180.0 {
            assert!(e.verdict.starts_with("fails"), "{e:?}");
        }
    }
}

/// 9,991 jobs of 5-10 s and 9 of 600 s: p99.9 shows no tail, but the slowest would outlive
/// a 20 s lease and land in the DLQ while still running (seed 004's mirage).
#[test]
fn a_few_jobs_past_the_constant_get_a_heartbeat_and_the_constant_names_the_mirage() {
    let mut durations: Vec<f64> = (0..9_991).map(|i| 5.0 + (i % 6) as f64).collect();
    durations.extend([600.0; 9]);
    let d = Distribution::from_durations(&durations).unwrap();
    let advice = advise(&d, &Inputs::default());
    assert!(advice.heartbeat_interval_s.is_some(), "{}", said(&advice));
    let constant = &advice.alternatives[0].evaluation;
    assert!(
        constant.verdict.contains("DLQ mirage"),
        "{}",
        constant.verdict
    );
}

/// Near-zero work: a 10 s lease x 3 dead-letters healthy messages 30 s into an outage; the
/// advice raises maxReceiveCount to outlast the outage budget, and the seeds' 3 fails.
#[test]
fn lease_times_receive_count_outlasts_the_outage_budget() {
    let d = Distribution::from_quantiles(0.01, 0.02, 0.05, 0.06, 0.08);
    let advice = advise(&d, &Inputs::default());
    assert_eq!(advice.visibility_timeout_s, MIN_LEASE_S);
    assert!(advice.time_to_dlq_s >= 300.0, "{advice:?}");
    assert_eq!(advice.max_receive_count, 30);
    let three = evaluate(&d, 10.0, None, 3, &Inputs::default());
    assert!(three.verdict.contains("outage"), "{}", three.verdict);
}

/// A safety factor below 1 is refused as input; asked anyway, the advice holds it to 1.
#[test]
fn a_safety_factor_below_one_is_refused_and_never_used() {
    let inputs = Inputs {
        safety_factor: 0.5,
        ..Inputs::default()
    };
    assert!(inputs.check().unwrap_err().contains("safety factor"));
    let d = Distribution::from_quantiles(1.0, 2.0, 4.0, 4.5, 5.0);
    let advice = advise(&d, &inputs);
    assert!(advice.visibility_timeout_s >= d.max, "{advice:?}");
    assert!(
        advice.warnings[0].contains("safety factor"),
        "{:?}",
        advice.warnings
    );
}

/// The queue's own maxReceiveCount x lease past its retention is flagged.
#[test]
fn the_queues_own_time_to_dlq_past_retention_is_flagged() {
    let inputs = Inputs {
        current_visibility_s: Some(43_200.0),
        max_receive_count: Some(10),
        retention_s: Some(345_600.0),
        ..Inputs::default()
    };
    let advice = advise(&transcoding(), &inputs);
    assert!(
        advice
            .warnings
            .iter()
            .any(|w| w.starts_with("The queue as it is set now")),
        "{:?}",
        advice.warnings
    );
}

/// Whatever the inputs, the advice keeps its own budgets or says which it cannot keep: the
/// lease within the crash budget (or a warning naming it), a heartbeat below the lease and
/// short of the ceiling, the time to DLQ past the outage budget (or a warning naming it).
#[test]
fn the_advice_keeps_its_budgets_or_names_the_one_it_cannot() {
    use proptest::prelude::*;
    let quantiles = (
        0.01f64..50_000.0,
        1.0f64..4.0,
        1.0f64..4.0,
        1.0f64..5.0,
        1.0f64..3.0,
    );
    let budgets = (
        5.0f64..100_000.0,
        5.0f64..100_000.0,
        proptest::option::of(1.0f64..900.0),
    );
    proptest!(|((p50, a, b, c, e) in quantiles, (crash, outage, lambda) in budgets)| {
        let d = Distribution::from_quantiles(p50, p50 * a, p50 * a * b, p50 * a * b * c, p50 * a * b * c * e);
        let inputs = Inputs {
            max_crash_recovery_s: crash,
            max_outage_s: outage,
            lambda_timeout_s: lambda,
            ..Inputs::default()
        };
        let advice = advise(&d, &inputs);
        let warned = |word: &str| advice.warnings.iter().any(|w| w.contains(word));
        prop_assert!(advice.visibility_timeout_s <= crash.max(1.0) || warned("crash budget"), "{advice:?}");
        prop_assert!(advice.time_to_dlq_s >= outage || warned("outage budget"), "{advice:?}");
        if let Some(beat) = advice.heartbeat_interval_s {
            prop_assert!(beat < advice.visibility_timeout_s && advice.visibility_timeout_s < TWELVE_HOURS_S);
        }
        let own = evaluate(&d, advice.visibility_timeout_s, advice.heartbeat_interval_s, advice.max_receive_count, &inputs);
        let warned_of_problems = problems(&d, &Setting { visibility_s: own.visibility_timeout_s, heartbeat_s: own.heartbeat_interval_s, max_receive_count: own.max_receive_count }, &inputs).len();
        prop_assert_eq!(own.verdict == "fits", warned_of_problems == 0);
    });
}

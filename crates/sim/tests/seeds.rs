//! What the lab must show, on the scenarios that ship in `scenarios/`, with their fixed seeds.

use leasehold_sim::{run, Scenario, Summary};

fn scenario(name: &str) -> Scenario {
    let path = format!("{}/../../scenarios/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    Scenario::from_toml(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
        .unwrap()
}

fn summary(s: &Scenario) -> Summary {
    run(s, &mut |_| {}).unwrap().summary
}

#[test]
fn seed_004_naive_consumers_spiral_at_least_fivefold_and_stay_there() {
    let s = summary(&scenario("seed-004-death-spiral-naive"));
    assert!(s.peak_amplification >= 5.0, "{s:#?}");
    assert_eq!(s.recovered, Some(false), "{s:#?}");
    assert!(s.late_deletes > 0);
}

#[test]
fn seed_004_with_heartbeat_idempotency_and_a_ceiling_stays_flat_and_recovers_in_minutes() {
    let s = summary(&scenario("seed-004-death-spiral-resilient"));
    assert!(s.peak_amplification < 1.05, "{s:#?}");
    assert_eq!(s.recovered, Some(true), "{s:#?}");
    assert!(s.recovery_s.unwrap() <= 300.0, "{s:#?}");
    assert!(s.peak_db_running <= 6);
}

#[test]
fn seed_000_at_30_seconds_processes_about_half_the_messages_at_least_twice() {
    let s = summary(&scenario("seed-000-transcoding-30s"));
    assert!((0.35..0.60).contains(&s.duplicate_fraction), "{s:#?}");
}

#[test]
fn seed_000_at_10_minutes_recovers_crashes_slowly_and_takes_50_minutes_to_the_dlq() {
    let s = summary(&scenario("seed-000-transcoding-10min"));
    assert!(s.duplicate_fraction < 0.01, "{s:#?}");
    let crash = s.crash_recovery_s.unwrap();
    assert!(
        (450.0..=600.0).contains(&crash),
        "crash recovery near 10 minutes: {crash}"
    );
    let dlq = s.time_to_dlq_s.unwrap();
    assert!(
        (2700.0..=3300.0).contains(&dlq),
        "time to DLQ near 50 minutes: {dlq}"
    );
}

#[test]
fn seed_000_with_the_heartbeat_has_no_duplicates_two_minute_recovery_and_six_minutes_to_the_dlq() {
    let s = summary(&scenario("seed-000-transcoding-heartbeat"));
    assert!(s.duplicate_fraction < 0.01, "{s:#?}");
    let crash = s.crash_recovery_s.unwrap();
    assert!(
        (60.0..=130.0).contains(&crash),
        "crash recovery near 2 minutes: {crash}"
    );
    let dlq = s.time_to_dlq_s.unwrap();
    assert!(
        (300.0..=480.0).contains(&dlq),
        "time to DLQ near 6 minutes: {dlq}"
    );
}

#[test]
fn the_dlq_mirage_fills_the_dlq_with_work_that_succeeded() {
    let s = summary(&scenario("dlq-mirage"));
    assert!(s.dlq_messages > 100, "{s:#?}");
    assert_eq!(s.dlq_messages_already_succeeded, s.dlq_messages);
    // No trigger: nothing to recover from, and a run that duplicates all along is not stable
    // (it once read "recovered 0 s after the trigger").
    assert_eq!(s.recovered, None, "{s:#?}");
    assert_eq!(s.stable, Some(false), "{s:#?}");
    assert!(s.steady_amplification > 2.0, "{s:#?}");
    let line = leasehold_sim::outcome_line(&s);
    assert!(line.starts_with("no trigger, and not stable"), "{line}");
}

#[test]
fn lambda_scales_into_the_database_and_does_not_recover() {
    let sc = scenario("lambda-concurrency-runaway");
    let s = summary(&sc);
    assert!(s.peak_workers >= 10 * sc.scaling.workers, "{s:#?}");
    assert!(s.peak_db_running > 5 * sc.database.capacity, "{s:#?}");
    assert_ne!(s.recovered, Some(true), "{s:#?}");
    assert_ne!(s.stable, Some(true), "{s:#?}");
}

#[test]
fn a_drain_longer_than_the_lease_without_heartbeats_duplicates_work_and_heartbeats_fix_it() {
    let sc = scenario("deploy-grace-longer-than-lease");
    let drained = summary(&sc);
    assert!(
        drained.duplicate_executions > 0 && drained.late_deletes > 0,
        "{drained:#?}"
    );
    let mut fixed = sc.clone();
    fixed.consumers.heartbeat_stops_on_shutdown = false;
    let fixed = summary(&fixed);
    assert_eq!(fixed.duplicate_executions, 0, "{fixed:#?}");
}

#[test]
fn the_same_seed_gives_identical_output_and_another_seed_does_not() {
    let sc = scenario("seed-004-death-spiral-naive");
    let a = run(&sc, &mut |_| {}).unwrap();
    let b = run(&sc, &mut |_| {}).unwrap();
    let strip = |mut s: Summary| {
        s.wall_clock_s = 0.0;
        s
    };
    assert_eq!(strip(a.summary.clone()), strip(b.summary));
    assert_eq!(a.rows, b.rows);
    let mut other = sc.clone();
    other.seed += 1;
    let c = run(&other, &mut |_| {}).unwrap();
    assert_ne!(a.rows, c.rows);
}

#[test]
fn every_shipped_scenario_parses() {
    let dir = format!("{}/../../scenarios", env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            Scenario::from_toml(&std::fs::read_to_string(&path).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            n += 1;
        }
    }
    assert!(n >= 8);
}

#[test]
fn arrivals_can_come_from_a_file_and_a_token_bucket_caps_starts() {
    let dir = std::env::temp_dir().join(format!("leasehold-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("arrivals.txt");
    // 300 messages in the first second.
    let times: String = (0..300)
        .map(|i| format!("{}\n", i as f64 / 300.0))
        .collect();
    std::fs::write(&file, format!("# arrival times in seconds\n{times}")).unwrap();
    let text = format!(
        r#"
        name = "file-and-bucket"
        duration_s = 120
        step_s = 1
        [arrivals]
        kind = "file"
        file = "{}"
        [work]
        kind = "fixed"
        mean_s = 0.1
        [consumers]
        rate_limit_per_s = 5
        [scaling]
        workers = 50
        "#,
        file.display()
    );
    let s = Scenario::from_toml(&text).unwrap();
    let outcome = run(&s, &mut |_| {}).unwrap();
    assert_eq!(outcome.summary.unique_messages, 300);
    let per_second: Vec<u64> = outcome.rows.iter().map(|r| r.executions).collect();
    // A full bucket (5) plus its refill in the first second, then the refill rate.
    assert!(per_second[0] <= 10, "{per_second:?}");
    assert!(
        per_second[1..].iter().all(|n| *n <= 6),
        "the bucket holds starts to about 5 per second: {per_second:?}"
    );
    assert_eq!(outcome.summary.executions, 300);
    let last_busy = per_second.iter().rposition(|n| *n > 0).unwrap();
    assert!(
        (55..=62).contains(&last_busy),
        "300 starts at 5 per second take about a minute: {last_busy}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn the_trigger_sweep_draws_the_boundary_between_blips_shaken_off_and_blips_that_tip_it() {
    let dir = std::env::temp_dir().join(format!("leasehold-trigger-sweep-{}", std::process::id()));
    let cells = leasehold_sim::sweep_triggers(
        &scenario("seed-004-death-spiral-naive"),
        &[1.2, 2.6],
        &[60.0, 300.0],
        &dir,
        &mut |_| {},
    )
    .unwrap();
    let recovered = |factor: f64, duration: f64| {
        cells
            .iter()
            .find(|c| c.factor == factor && c.duration_s == duration)
            .unwrap()
            .recovered
    };
    assert!(
        recovered(1.2, 60.0),
        "a small short blip is shaken off: {cells:?}"
    );
    assert!(
        recovered(1.2, 300.0),
        "a small blip is shaken off however long: {cells:?}"
    );
    assert!(
        recovered(2.6, 60.0),
        "a large blip shorter than the backlog it needs: {cells:?}"
    );
    assert!(
        !recovered(2.6, 300.0),
        "a large long blip tips it for good: {cells:?}"
    );
    for file in [
        "trigger-sweep.json",
        "trigger-sweep.png",
        "trigger-sweep.svg",
    ] {
        assert!(dir.join(file).exists(), "{file}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_retry_budget_caps_the_naive_spirals_amplification() {
    let naive = scenario("seed-004-death-spiral-naive");
    let unbudgeted = summary(&naive);
    let mut budgeted = naive.clone();
    budgeted.consumers.retry_budget = 0.1;
    let s = summary(&budgeted);
    assert!(s.retries_refused > 0, "{s:#?}");
    assert!(
        s.peak_amplification <= 1.3 && s.peak_amplification < unbudgeted.peak_amplification / 3.0,
        "budgeted {:.2}x against {:.2}x: {s:#?}",
        s.peak_amplification,
        unbudgeted.peak_amplification
    );
    eprintln!(
        "retry budget 0.1: peak {:.2}x, {} duplicates, {} retries refused; without: peak {:.2}x, {} duplicates",
        s.peak_amplification, s.duplicate_executions, s.retries_refused,
        unbudgeted.peak_amplification, unbudgeted.duplicate_executions
    );
}

#[test]
fn the_spiral_outlives_its_load_and_ends_only_when_arrivals_fall_below_it() {
    // Hysteresis: at 0.3/s the naive fleet is healthy before the blip and still spiralling
    // long after it; the ramp-down scenario recovers only once arrivals are lower.
    let naive = summary(&scenario("seed-004-death-spiral-naive"));
    assert_eq!(naive.recovered, Some(false), "{naive:?}");
    let ramp = scenario("hysteresis-seed-004");
    let s = summary(&ramp);
    assert_eq!(s.recovered, Some(true), "{s:?}");
    let rate = s.arrival_rate_at_recovery.expect("the load changes");
    assert!(rate < ramp.arrivals.rate_per_s, "{s:?}");
    // The spiral did not end while the load was what tipped it.
    let end = ramp.triggers_end_s().expect("a trigger");
    let first_change = ramp.arrivals.rate_changes[0].at_s;
    assert!(
        end + s.recovery_s.expect("recovered") > first_change,
        "{s:?}"
    );
}

#[test]
fn a_table_lock_stalls_writes_and_a_long_one_leaves_a_spiral_behind() {
    let long = scenario("lab-seed-004-table-lock");
    let s = summary(&long);
    assert_eq!(s.recovered, Some(false), "{s:#?}");
    assert!(s.duplicate_executions > 0 && s.late_deletes > 0, "{s:#?}");
    // A 4 s lock is shaken off.
    let mut short = long.clone();
    short.triggers[0].end_s = short.triggers[0].start_s + 4.0;
    let s = summary(&short);
    assert_eq!(s.recovered, Some(true), "{s:#?}");
    // An execution that starts while the rows are locked ends only after the lock lifts.
    let rows = run(&long, &mut |_| {}).unwrap().rows;
    let lifted = long.triggers[0].end_s;
    let during: Vec<_> = rows
        .iter()
        .filter(|r| r.t_s > 31.0 && r.t_s <= lifted - 2.0 && r.executions > 0)
        .collect();
    assert!(!during.is_empty());
    for r in during {
        assert!(r.db_latency_s >= lifted - r.t_s, "{r:?}");
    }
}

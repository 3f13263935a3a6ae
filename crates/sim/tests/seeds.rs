//! What the lab must show, on the scenarios that ship in `scenarios/`, with their fixed seeds.

use leasehold_sim::{over_seeds, run, Scenario, SeedsSummary, Summary};

fn scenario(name: &str) -> Scenario {
    let path = format!("{}/../../scenarios/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    Scenario::from_toml(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
        .unwrap()
}

fn summary(s: &Scenario) -> Summary {
    run(s, &mut |_| {}).unwrap().summary
}

/// The scenario over seeds 1..=6: a claim here holds in each of them, not in one seed's run.
fn across_seeds(s: &Scenario) -> SeedsSummary {
    let runs = (1..=6)
        .map(|seed| {
            let mut one = s.clone();
            one.seed = seed;
            summary(&one)
        })
        .collect();
    over_seeds(s, runs)
}

/// Seed 004's naive fleet, in every one of six seeds: the load on the database (executions
/// over arrivals, 60 s) at least doubles, each message runs five to seven times at the peak,
/// late deletes do nothing, and the fleet takes at least 20 minutes after the blip to be
/// healthy again, if it is within the hour at all. What the model shows is a slowly draining
/// backlog, not a spiral that never ends: five of the six seeds recover within the hour.
/// The playbook's fleet recovers within five minutes in every seed.
#[test]
fn seed_004_naive_consumers_double_the_load_and_drain_for_twenty_minutes_in_every_seed() {
    let naive = across_seeds(&scenario("seed-004-death-spiral-naive"));
    assert!(naive.peak_load_multiple.min.unwrap() >= 2.0, "{naive:#?}");
    assert!(naive.peak_amplification.min.unwrap() >= 5.0, "{naive:#?}");
    for run in &naive.runs {
        assert!(
            run.late_deletes > 0 && run.duplicate_executions > 0,
            "{run:#?}"
        );
        assert!(run.recovery_s.is_none_or(|r| r >= 1200.0), "{run:#?}");
    }
    let resilient = across_seeds(&scenario("seed-004-death-spiral-resilient"));
    assert_eq!(resilient.recovered_share, Some(1.0), "{resilient:#?}");
    assert!(resilient.recovery_s.max.unwrap() <= 300.0, "{resilient:#?}");
    assert!(resilient.runs.iter().all(|r| r.duplicate_executions == 0));
}

#[test]
fn seed_004_with_heartbeat_idempotency_and_a_ceiling_stays_flat_and_recovers_in_minutes() {
    let s = summary(&scenario("seed-004-death-spiral-resilient"));
    assert!(s.peak_amplification < 1.05, "{s:#?}");
    assert_eq!(s.recovered, Some(true), "{s:#?}");
    assert!(s.recovery_s.unwrap() <= 300.0, "{s:#?}");
    assert!(s.peak_db_running <= 6);
}

/// Seed 000's three attempts, each claim in every one of six seeds.
#[test]
fn seed_000_at_30_seconds_processes_about_half_the_messages_at_least_twice() {
    let seeds = across_seeds(&scenario("seed-000-transcoding-30s"));
    for s in &seeds.runs {
        assert!((0.35..0.60).contains(&s.duplicate_fraction), "{s:#?}");
    }
}

/// A crashed worker's message waits up to the 10-minute lease (a crash mid-lease waits the
/// rest of it: 7 to 10 minutes across the seeds); a poison message takes 50 minutes.
#[test]
fn seed_000_at_10_minutes_recovers_crashes_slowly_and_takes_50_minutes_to_the_dlq() {
    let seeds = across_seeds(&scenario("seed-000-transcoding-10min"));
    for s in &seeds.runs {
        assert!(s.duplicate_fraction < 0.01, "{s:#?}");
        let crash = s.crash_recovery_s.unwrap();
        assert!(
            (400.0..=600.0).contains(&crash),
            "crash recovery up to 10 minutes: {crash}"
        );
        let dlq = s.time_to_dlq_s.unwrap();
        assert!(
            (2700.0..=3300.0).contains(&dlq),
            "time to DLQ near 50 minutes: {dlq}"
        );
    }
}

/// With the heartbeat: no duplicates, a crash recovered within about two minutes, a poison
/// message in the DLQ after three 2-minute leases plus its waits behind busy workers (6 to 11
/// minutes across the seeds), against 50 minutes at a 10-minute lease.
#[test]
fn seed_000_with_the_heartbeat_has_no_duplicates_two_minute_recovery_and_six_minutes_to_the_dlq() {
    let seeds = across_seeds(&scenario("seed-000-transcoding-heartbeat"));
    for s in &seeds.runs {
        assert!(s.duplicate_fraction < 0.01, "{s:#?}");
        let crash = s.crash_recovery_s.unwrap();
        assert!(
            (60.0..=130.0).contains(&crash),
            "crash recovery near 2 minutes: {crash}"
        );
        let dlq = s.time_to_dlq_s.unwrap();
        assert!(
            (360.0..=660.0).contains(&dlq),
            "time to DLQ 6 to 11 minutes: {dlq}"
        );
    }
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

/// In every seed: Lambda scales to 10 x its start on the inflated depth, runs 20 x the
/// database's capacity at once, and does not recover within the hour.
#[test]
fn lambda_scales_into_the_database_and_does_not_recover() {
    let sc = scenario("lambda-concurrency-runaway");
    let seeds = across_seeds(&sc);
    assert_eq!(seeds.recovered_share, Some(0.0), "{seeds:#?}");
    for s in &seeds.runs {
        assert!(s.peak_workers >= 10 * sc.scaling.workers, "{s:#?}");
        assert!(s.peak_db_running >= 20 * sc.database.capacity, "{s:#?}");
    }
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

/// The trigger sweep over six seeds: a blip making work 1.2 times longer is shaken off in
/// every seed whatever its length; one making it 2.6 times longer is shaken off when it
/// lasts a minute, and lasting five minutes it takes longer to recover from, or is not
/// recovered from within the hour (in four of the six seeds).
#[test]
fn the_trigger_sweep_draws_the_boundary_between_blips_shaken_off_and_blips_that_tip_it() {
    let dir = std::env::temp_dir().join(format!("leasehold-trigger-sweep-{}", std::process::id()));
    let mut tipped = 0;
    for seed in 1..=6 {
        let mut base = scenario("seed-004-death-spiral-naive");
        base.seed = seed;
        let cells =
            leasehold_sim::sweep_triggers(&base, &[1.2, 2.6], &[60.0, 300.0], &dir, &mut |_| {})
                .unwrap();
        let cell = |factor: f64, duration: f64| {
            cells
                .iter()
                .find(|c| c.factor == factor && c.duration_s == duration)
                .unwrap()
                .clone()
        };
        assert!(
            cell(1.2, 60.0).recovered && cell(1.2, 300.0).recovered,
            "{cells:?}"
        );
        let (short, long) = (cell(2.6, 60.0), cell(2.6, 300.0));
        assert!(short.recovered, "{cells:?}");
        match long.recovery_s {
            Some(r) => assert!(r > short.recovery_s.unwrap(), "{cells:?}"),
            None => tipped += 1,
        }
    }
    assert!(
        tipped >= 3,
        "a long large blip tips most seeds: {tipped} of 6"
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

/// At 0.3/s the fleet ran healthy for ten minutes before the blip; after it, at the same
/// 0.3/s, it is still in the spiral when the load is first lowered, 15 minutes later, in
/// every seed. Lowering the load does not clearly shorten the spiral in this model: at the
/// constant load five of six seeds recover within the hour too (the test above).
#[test]
fn the_spiral_outlives_its_trigger_at_the_load_it_ran_healthy_at_in_every_seed() {
    let ramp = scenario("hysteresis-seed-004");
    let seeds = across_seeds(&ramp);
    let end = ramp.triggers_end_s().expect("a trigger");
    let first_change = ramp.arrivals.rate_changes[0].at_s;
    for s in &seeds.runs {
        let recovered_at = end + s.recovery_s.expect("the ramp ends it");
        assert!(recovered_at > first_change, "{s:?}");
        assert!(s.arrival_rate_at_recovery.unwrap() < ramp.arrivals.rate_per_s);
    }
}

/// A 10 s table lock leaves the fleet still duplicating when the 100 s run ends, in every
/// seed; a 4 s one is shaken off.
#[test]
fn a_table_lock_stalls_writes_and_a_long_one_is_not_shaken_off_within_the_run() {
    let long = scenario("lab-seed-004-table-lock");
    let seeds = across_seeds(&long);
    assert_eq!(seeds.recovered_share, Some(0.0), "{seeds:#?}");
    for s in &seeds.runs {
        assert!(s.duplicate_executions > 0 && s.late_deletes > 0, "{s:#?}");
    }
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

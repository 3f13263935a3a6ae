//! `leasehold lab` for real, on the machine's PostgreSQL: the shipped scenarios make the spiral
//! happen (measured from the downstream table), the runtime stop it, the DLQ mirage fill the
//! dead-letter queue with finished work, a fair queue keep a flooding tenant's wait its own,
//! poison messages reach the DLQ after their leases or backoffs, a crashed consumer's
//! messages wait out their lease, a deploy's drain keep or cut its work by its grace, and the
//! report set each beside the simulator. The runs take the machine for a minute or
//! two each, so they take turns.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs a shipped scenario and returns its summary.json, after checking what every run
/// writes and that it left no schema behind.
fn lab(scenario: &str, out: &Path) -> Value {
    lab_with(scenario, &[], out)
}

/// `lab` with more arguments.
fn lab_with(scenario: &str, extra: &[&str], out: &Path) -> Value {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let path = format!(
        "{}/../../scenarios/{scenario}.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "lab",
            &path,
            "--quiet",
            "--postgres",
            common::POSTGRES_URL,
            "--out",
        ])
        .arg(out)
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let run = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    println!("{stdout}");
    for file in [
        "summary.json",
        "measured.csv",
        "predicted.csv",
        "comparison.svg",
        "comparison.png",
        "server.log",
    ] {
        assert!(out.join(file).exists(), "{file} missing");
    }
    assert!(no_schema_left(pid), "the run's schema outlived it");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["execution_failures"], 0, "{summary:#}");
    assert_eq!(summary["sending"]["failed_sends"], 0, "{summary:#}");
    for side in ["measured", "predicted"] {
        for key in [
            "peak_amplification",
            "duplicate_executions",
            "recovered",
            "unique_messages",
        ] {
            assert!(summary[side].get(key).is_some(), "{side} lacks {key}");
        }
    }
    summary
}

fn no_schema_left(pid: u32) -> bool {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (client, connection) =
            tokio_postgres::connect(common::POSTGRES_URL, tokio_postgres::NoTls)
                .await
                .unwrap();
        tokio::spawn(connection);
        let row = client
            .query_one(
                "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
                &[&format!("leasehold_lab_{pid}")],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0) == 0
    })
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Seed 004's naive fleet, live, through a pool of 6 connections: the slow query leaves a
/// backlog that drains slowly (not before 15 minutes of the story, if within the run), the
/// load on the database nearly doubles, each message runs at least three times at the peak,
/// and the late deletes do nothing. Nothing on the database computes the model: the load
/// past capacity is the wait for a pooled connection, and the model's load slope agrees
/// with it, measured over hundreds of executions.
#[test]
fn the_naive_seed_004_fleet_spirals_live_on_postgres_as_the_simulator_predicts() {
    let out = tempfile::tempdir().unwrap();
    let s = lab("lab-seed-004-naive", out.path());
    let (measured, predicted) = (&s["measured"], &s["predicted"]);
    // Measured from the downstream table: executions per distinct message over the window,
    // and executions over arrivals over the story's minute.
    assert!(f(&measured["peak_amplification"]) >= 3.0, "{s:#}");
    assert!(f(&measured["peak_load_multiple"]) >= 1.8, "{s:#}");
    assert!(f(&measured["duplicate_executions"]) > 0.0, "{s:#}");
    assert!(f(&measured["late_deletes"]) > 0.0, "{s:#}");
    let trigger_end = 50.0;
    assert!(
        measured["recovery_s"].is_null() || f(&measured["recovery_s"]) >= 60.0,
        "drained slowly, if at all: {s:#}"
    );
    assert!(f(&measured["simulated_s"]) >= trigger_end + 200.0);
    assert!(f(&predicted["peak_amplification"]) >= 3.0, "{s:#}");
    assert_eq!(s["consumers"], "naive");
    let comparison = s["comparison"].as_array().unwrap();
    assert!(comparison.len() >= 8);
    for c in comparison {
        assert!(
            f(&c["predicted_min"]) <= f(&c["predicted"])
                && f(&c["predicted"]) <= f(&c["predicted_max"]),
            "{c:#}"
        );
    }
    let slope = s["model_check"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["parameter"] == "database.load_slope")
        .unwrap();
    assert!(f(&slope["executions"]) >= 100.0, "{slope:#}");
    assert_eq!(
        slope["off"], false,
        "the pool's wait is the model's slope: {slope:#}"
    );
    assert!(s["tolerance"].as_str().unwrap().contains("10 predictions"));
    assert!(s["scaling"].as_str().unwrap().contains("15x"), "{s:#}");
}

#[test]
fn the_runtime_keeps_seed_004_flat_with_no_duplicate_execution_on_postgres() {
    let out = tempfile::tempdir().unwrap();
    let s = lab("lab-seed-004-resilient", out.path());
    let measured = &s["measured"];
    assert!(f(&measured["peak_amplification"]) < 1.05, "{s:#}");
    assert_eq!(measured["duplicate_executions"], 0, "{s:#}");
    assert_eq!(measured["recovered"], true, "{s:#}");
    assert!(f(&measured["peak_db_running"]) <= 6.0, "{s:#}");
    assert_eq!(s["consumers"], "runtime");
    assert_eq!(s["worker_stats"]["lost_leases"], 0, "{s:#}");
}

#[test]
fn the_dlq_mirage_holds_finished_work_and_only_a_blind_redrive_repeats_it_on_postgres() {
    let out = tempfile::tempdir().unwrap();
    let s = lab("lab-dlq-mirage", out.path());
    let measured = &s["measured"];
    let dead = f(&measured["dlq_messages"]);
    assert!(dead >= 10.0, "{s:#}");
    // Every execution succeeds: what the DLQ holds is finished work.
    assert_eq!(
        measured["dlq_messages_already_succeeded"], measured["dlq_messages"],
        "{s:#}"
    );
    let (blind, leasehold) = (&s["redrive"]["blind"], &s["redrive"]["leasehold"]);
    assert!(
        f(&blind["re_executions_of_finished_work"]) >= f(&blind["already_succeeded"]),
        "{s:#}"
    );
    assert_eq!(leasehold["re_executions_of_finished_work"], 0, "{s:#}");
    assert_eq!(
        leasehold["skipped_as_done"], leasehold["already_succeeded"],
        "{s:#}"
    );
    assert!(f(&leasehold["messages"]) >= 5.0, "{s:#}");
}

/// A tenant's dwell times in a lab summary's `measured` or `predicted` (p50, p99).
fn dwell(summary: &Value, side: &str, tenant: &str) -> (f64, f64) {
    let tenants = summary[side]["tenants"].as_array().expect("tenants");
    let t = tenants
        .iter()
        .find(|t| t["tenant"] == tenant)
        .expect(tenant);
    (f(&t["p50_s"]), f(&t["p99_s"]))
}

/// One tenant floods the queue for real: on a fair queue (its messages carry MessageGroupId)
/// the others' messages wait no longer than a fraction of a second; without the group id they
/// wait behind the flood for seconds (minutes of the story); and the simulator predicts both.
#[test]
fn a_flood_delays_only_itself_on_a_fair_queue_live_as_predicted() {
    let dir = tempfile::tempdir().unwrap();
    let fair = lab("lab-noisy-tenant-flood", &dir.path().join("fair"));
    let unfair = lab_with(
        "lab-noisy-tenant-flood",
        &["--fair", "false"],
        &dir.path().join("unfair"),
    );
    for side in ["measured", "predicted"] {
        let (_, others_fair) = dwell(&fair, side, "others");
        let (_, others_unfair) = dwell(&unfair, side, "others");
        assert!(others_fair < 2.0, "{side}: {fair:#}");
        assert!(others_unfair > 8.0, "{side}: {unfair:#}");
        let (flood_fair, _) = dwell(&fair, side, "flood");
        let (flood_unfair, _) = dwell(&unfair, side, "flood");
        assert!(flood_fair > flood_unfair, "{side}: the flood waits instead");
    }
}

/// The comparison row of a lab summary whose measure starts with `name`.
fn comparison<'a>(summary: &'a Value, name: &str) -> &'a Value {
    let rows = summary["comparison"].as_array().expect("comparison");
    rows.iter()
        .find(|c| c["measure"].as_str().is_some_and(|m| m.starts_with(name)))
        .unwrap_or_else(|| panic!("no {name} in {summary:#}"))
}

/// Seed 000's poison transcode live: three messages that always fail, maxReceiveCount 5. On
/// a long lease the naive fleet gets them to the dead-letter queue only after five leases;
/// the runtime, on a short lease kept alive by heartbeats, after its backoffs, sooner. In
/// both each ran exactly five times (the downstream table's only duplicates), and the
/// simulator predicts the time to the DLQ.
#[test]
fn a_poison_message_reaches_the_dlq_after_five_leases_or_the_backoffs_live_as_predicted() {
    let dir = tempfile::tempdir().unwrap();
    let long_lease = lab("lab-poison-long-lease", &dir.path().join("long"));
    let runtime = lab("lab-poison-runtime", &dir.path().join("runtime"));
    for s in [&long_lease, &runtime] {
        let measured = &s["measured"];
        assert_eq!(measured["dlq_messages"], 3, "{s:#}");
        assert_eq!(measured["dlq_messages_already_succeeded"], 0, "{s:#}");
        assert_eq!(measured["duplicate_executions"], 3 * 4, "{s:#}");
    }
    // Nothing but the lease decides the long lease's: five of them, to the prediction.
    let agrees = &comparison(&long_lease, "time_to_dlq_s")["agree"];
    assert_eq!(agrees, true, "{long_lease:#}");
    let to_dlq = |s: &Value| f(&s["measured"]["time_to_dlq_s"]);
    assert!(
        (19.9..21.0).contains(&to_dlq(&long_lease)),
        "{long_lease:#}"
    );
    // The runtime's is five executions and five drawn backoffs: at least 1, 1, 1, 2 and 4 s
    // (a mean over three messages, too few to hold to the predictions' spread every time).
    assert!((9.0..19.9).contains(&to_dlq(&runtime)), "{runtime:#}");
    let predicted = f(&runtime["predicted"]["time_to_dlq_s"]);
    assert!((9.0..19.9).contains(&predicted), "{runtime:#}");
}

/// The lab's consumer processes now alive (`leasehold lab-consumer`), from /proc.
fn consumer_processes() -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|cmdline| cmdline.split(|b| *b == 0).any(|arg| arg == b"lab-consumer"))
        .count()
}

/// Seed 000's out-of-memory kill live, on consumer processes: three busy consumers are
/// SIGKILLed at 15 s and started again 3 s later. On a long lease the messages they held
/// wait out what is left of it; with the runtime's heartbeats on a short lease they are back
/// within it. The downstream table holds the killed executions and their messages' next
/// runs, and no consumer process outlives the run.
#[test]
fn a_crashed_consumers_messages_wait_out_their_lease_live_as_predicted() {
    let dir = tempfile::tempdir().unwrap();
    let long_lease = lab("lab-crash-long-lease", &dir.path().join("long"));
    assert_eq!(
        consumer_processes(),
        0,
        "a consumer process outlived its run"
    );
    let runtime = lab("lab-crash-runtime", &dir.path().join("runtime"));
    assert_eq!(
        consumer_processes(),
        0,
        "a consumer process outlived its run"
    );
    for (s, lease_s) in [(&long_lease, 4.0), (&runtime, 2.0)] {
        // Three busy consumers killed, from the table, and every message they held ran again.
        assert_eq!(s["kills"]["killed_executions"], 3, "{s:#}");
        assert_eq!(s["kills"]["messages_ran_again"], 3, "{s:#}");
        for side in ["measured", "predicted"] {
            // Back once the lease a killed worker held runs out: not at the kill, never
            // after a lease, and (one of the three just received) most of a lease later.
            let recovery = f(&s[side]["crash_recovery_s"]);
            let expected = lease_s * 0.5..lease_s + 1.0;
            assert!(expected.contains(&recovery), "{side}: {s:#}");
            assert!(f(&s[side]["lost_work_s"]) > 0.0, "{side}: {s:#}");
        }
        let agrees = &comparison(s, "crash_recovery_s")["agree"];
        assert_eq!(agrees, true, "{s:#}");
    }
    // The heartbeat's lease is short, so no transcode outlives it: the killed work runs
    // again, and little else twice (a heartbeat late on a busy machine may add one).
    assert!(
        f(&runtime["measured"]["duplicate_executions"]) <= 5.0,
        "{runtime:#}"
    );
}

/// Seed 000's deploy live against the runtime: a rolling restart of consumer processes whose
/// grace outlasts the lease loses nothing and runs nothing twice (the heartbeats carry each
/// drain past the lease); one whose grace is shorter than the work cuts drains short, and
/// what they held runs again; and the seed's bug, a heartbeat torn down at shutdown, runs
/// drained work twice with late deletes. From the downstream table, and predicted alike.
#[test]
fn a_deploy_drains_within_its_grace_and_cuts_what_outlasts_it_live_as_predicted() {
    let dir = tempfile::tempdir().unwrap();
    let long = lab("lab-deploy-runtime-long-grace", &dir.path().join("long"));
    let short = lab("lab-deploy-runtime-short-grace", &dir.path().join("short"));
    let buggy = lab("lab-deploy-heartbeat-bug", &dir.path().join("bug"));
    assert_eq!(
        consumer_processes(),
        0,
        "a consumer process outlived its run"
    );
    // Seed 000's bug: a heartbeat torn down at shutdown lets the drain's lease run out, so
    // another consumer runs the message again and the drain's delete comes late.
    assert_eq!(
        buggy["consumers"],
        "naive, with a heartbeat that stops at shutdown"
    );
    for side in ["measured", "predicted"] {
        assert!(f(&buggy[side]["late_deletes"]) >= 1.0, "{side}: {buggy:#}");
        assert!(
            f(&buggy[side]["duplicate_executions"]) >= 1.0,
            "{side}: {buggy:#}"
        );
    }
    let agrees = &comparison(&buggy, "duplicate_executions")["agree"];
    assert_eq!(agrees, true, "{buggy:#}");
    for side in ["measured", "predicted"] {
        assert_eq!(long[side]["duplicate_executions"], 0, "{side}: {long:#}");
        assert_eq!(f(&long[side]["lost_work_s"]), 0.0, "{side}: {long:#}");
        assert!(
            f(&short[side]["duplicate_executions"]) >= 1.0,
            "{side}: {short:#}"
        );
        assert!(f(&short[side]["lost_work_s"]) > 0.0, "{side}: {short:#}");
    }
    assert_eq!(long["kills"]["killed_executions"], 0, "{long:#}");
    let cut = &short["kills"];
    assert!(f(&cut["killed_executions"]) >= 1.0, "{short:#}");
    assert_eq!(
        cut["messages_ran_again"], cut["killed_executions"],
        "{short:#}"
    );
}

/// Seed 004's Lambda black hole live: a controller scales consumer processes on the queue's
/// visible count. After a slow query the duplicates raise the count, the fleet grows to its
/// limit of 30 against a database of 10 slots, and it never comes back, as predicted; with
/// the event source's maximum concurrency at the database's capacity the fleet stays within
/// ten and recovers, as predicted. From the downstream table; no consumer outlives a run.
#[test]
fn a_lambda_fleet_runs_away_on_its_duplicates_and_a_ceiling_holds_it_live_as_predicted() {
    let dir = tempfile::tempdir().unwrap();
    let runaway = lab("lab-lambda-runaway", &dir.path().join("runaway"));
    assert_eq!(
        consumer_processes(),
        0,
        "a consumer process outlived its run"
    );
    let held = lab("lab-lambda-ceiling", &dir.path().join("held"));
    assert_eq!(
        consumer_processes(),
        0,
        "a consumer process outlived its run"
    );
    for side in ["measured", "predicted"] {
        let (r, h) = (&runaway[side], &held[side]);
        assert_eq!(f(&r["peak_workers"]), 30.0, "{side}: {runaway:#}");
        assert_eq!(r["recovered"], false, "{side}: {runaway:#}");
        assert!(f(&r["duplicate_executions"]) > 150.0, "{side}: {runaway:#}");
        assert!(f(&h["peak_workers"]) <= 10.0, "{side}: {held:#}");
        assert_eq!(h["recovered"], true, "{side}: {held:#}");
        assert!(f(&h["duplicate_executions"]) < 60.0, "{side}: {held:#}");
    }
    for measure in ["peak_workers", "time_to_recover_s", "function_timeouts"] {
        assert_eq!(comparison(&runaway, measure)["agree"], true, "{runaway:#}");
        assert_eq!(comparison(&held, measure)["agree"], true, "{held:#}");
    }
    assert_eq!(
        comparison(&held, "duplicate_executions")["agree"],
        true,
        "{held:#}"
    );
}

#[test]
fn a_scenario_the_lab_cannot_run_is_one_line_and_exit_2_before_anything_starts() {
    let out = tempfile::tempdir().unwrap();
    let deploy = format!(
        "{}/../../scenarios/deploy-grace-longer-than-lease.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let lambda = format!(
        "{}/../../scenarios/lambda-concurrency-runaway.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let naive = format!(
        "{}/../../scenarios/lab-seed-004-naive.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    for (scenario, postgres, expected) in [
        (
            deploy.as_str(),
            common::POSTGRES_URL,
            "a lab run is bounded: at most 600 s",
        ),
        (
            lambda.as_str(),
            common::POSTGRES_URL,
            "a lambda fleet's max_concurrency too",
        ),
        (
            "no-such-scenario.toml",
            common::POSTGRES_URL,
            "cannot read no-such-scenario.toml",
        ),
        (naive.as_str(), "postgres://:::", "is not a PostgreSQL URL"),
    ] {
        let run = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(["lab", scenario, "--postgres", postgres, "--out"])
            .arg(out.path().join("x"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            !out.path().join("x").exists(),
            "nothing is started or written"
        );
    }
}

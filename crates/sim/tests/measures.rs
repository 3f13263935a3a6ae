//! The measures mean what they say: the load multiple is the time series' executions over
//! its arrivals, a run over seeds agrees with the seeds run one by one, slowness kept with a
//! message and Lambda's function timeout do what the scenario says.

use leasehold_sim::{load_multiples, rows_csv, run, run_seeds, Scenario};

fn scenario(name: &str) -> Scenario {
    let path = format!("{}/../../scenarios/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    Scenario::from_toml(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
        .unwrap()
}

fn temp_dir(what: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("leasehold-{what}-{}", std::process::id()))
}

/// `peak_load_multiple` is the largest, over every 60 s of timeseries.csv, of the executions
/// started divided by the messages that arrived, recomputed here from the CSV's own columns.
#[test]
fn the_peak_load_multiple_is_executions_over_arrivals_in_the_timeseries() {
    let sc = scenario("seed-004-death-spiral-naive");
    let outcome = run(&sc, &mut |_| {}).unwrap();
    let csv = rows_csv(&outcome.rows, sc.load_window_s);
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (t, arrivals, executions, load) = (
        column("t_s"),
        column("arrivals"),
        column("executions"),
        column("load_multiple"),
    );
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    let per_window = (sc.load_window_s / sc.step_s).round() as usize;
    let mut peak: f64 = 0.0;
    for end in per_window - 1..rows.len() {
        let window = &rows[end + 1 - per_window..=end];
        let sum = |c: usize| {
            window
                .iter()
                .map(|r| r[c].parse::<f64>().unwrap())
                .sum::<f64>()
        };
        if sum(arrivals) > 0.0 {
            let multiple = sum(executions) / sum(arrivals);
            let written: f64 = rows[end][load].parse().unwrap();
            assert!(
                (written - multiple).abs() < 1e-4,
                "at {}: {written}",
                rows[end][t]
            );
            peak = peak.max(multiple);
        }
    }
    let reported = outcome.summary.peak_load_multiple.unwrap();
    assert!((reported - peak).abs() < 1e-9, "{reported} against {peak}");
    // The first rows have less than 60 s behind them: no multiple.
    assert!(rows[0][load].is_empty());
    assert_eq!(
        load_multiples(&outcome.rows, sc.load_window_s).len(),
        outcome.rows.len()
    );
}

/// `--seeds 6` agrees with six single-seed runs: the share that recovered and the spread.
#[test]
fn a_run_over_seeds_matches_the_seeds_run_one_by_one() {
    let mut sc = scenario("seed-004-death-spiral-naive");
    sc.duration_s = 2400.0;
    let dir = temp_dir("seeds");
    let over = run_seeds(&sc, 6, &dir, &mut |_| {}).unwrap();
    let mut recovered = 0;
    let mut peaks = Vec::new();
    for seed in 1..=6 {
        let mut one = sc.clone();
        one.seed = seed;
        let s = run(&one, &mut |_| {}).unwrap().summary;
        recovered += usize::from(s.recovered == Some(true));
        peaks.push(s.peak_load_multiple.unwrap());
        assert!(dir.join(format!("seed-{seed}/timeseries.csv")).exists());
    }
    assert_eq!(over.recovered_share, Some(recovered as f64 / 6.0));
    assert_eq!(over.recovered_seeds.len(), recovered);
    let max = peaks.iter().copied().fold(0.0, f64::max);
    assert_eq!(over.peak_load_multiple.max, Some(max));
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(written["recovered_share"], recovered as f64 / 6.0);
    assert_eq!(written["runs"].as_array().unwrap().len(), 6);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Mostly quick work with a few documents slower than the lease (up to 80 s, so each run of
/// one ends before its third lease does). Drawn afresh on every
/// execution, a slow document is quick the second time and almost nothing reaches the DLQ;
/// kept with its message (`per_message`), the slow ones are slow every time and land in the
/// DLQ after three receives although each run succeeded: seed 004's mirage.
#[test]
fn slowness_kept_with_a_message_sends_the_slow_ones_to_the_dlq_though_they_succeed() {
    let text = r#"
        name = "slow-documents"
        seed = 3
        duration_s = 3600
        [queue]
        visibility_timeout_s = 30
        max_receive_count = 3
        lease_mode = "strict"
        [arrivals]
        rate_per_s = 0.5
        [work]
        kind = "quantiles"
        p50_s = 4
        p90_s = 8
        p99_s = 12
        p999_s = 60
        max_s = 80
        [database]
        capacity = 100
        load_slope = 0
        contention = 0
        [scaling]
        workers = 40
    "#;
    let fresh = Scenario::from_toml(text).unwrap();
    let mut kept = fresh.clone();
    kept.work.per_message = true;
    let fresh = run(&fresh, &mut |_| {}).unwrap().summary;
    let kept = run(&kept, &mut |_| {}).unwrap().summary;
    assert!(kept.dlq_messages >= 5, "{kept:#?}");
    assert_eq!(kept.dlq_messages_already_succeeded, kept.dlq_messages);
    assert!(
        kept.dlq_messages >= 5 * fresh.dlq_messages.max(1),
        "kept {} against fresh {}",
        kept.dlq_messages,
        fresh.dlq_messages
    );
}

/// Work of 40 s under a 30 s function timeout: Lambda kills every invocation, so no message
/// is ever completed, however long its lease.
#[test]
fn work_longer_than_the_function_timeout_never_completes() {
    let text = r#"
        name = "too-long-for-lambda"
        duration_s = 600
        [queue]
        visibility_timeout_s = 180
        [arrivals]
        rate_per_s = 0.2
        [work]
        kind = "fixed"
        mean_s = 40
        [database]
        capacity = 1000
        load_slope = 0
        contention = 0
        [scaling]
        kind = "lambda"
        workers = 5
        function_timeout_s = 30
    "#;
    let s = run(&Scenario::from_toml(text).unwrap(), &mut |_| {})
        .unwrap()
        .summary;
    assert!(s.executions > 20, "{s:#?}");
    assert_eq!(s.completed, 0, "{s:#?}");
    // All but those started in the run's last 30 s.
    assert!(s.function_timeouts * 10 >= s.executions * 8, "{s:#?}");
}

/// Lambda ends an invocation at its function timeout: no execution runs past it, and the
/// killed ones are counted.
#[test]
fn lambdas_function_timeout_ends_every_execution_that_outlives_it() {
    let mut sc = scenario("lambda-concurrency-runaway");
    sc.duration_s = 1800.0;
    sc.scaling.function_timeout_s = 25.0;
    let outcome = run(&sc, &mut |_| {}).unwrap();
    assert!(
        outcome.summary.function_timeouts > 0,
        "{:#?}",
        outcome.summary
    );
    assert!(
        outcome.rows.iter().all(|r| r.db_latency_s <= 25.0 + 1e-9),
        "no execution outlives the timeout"
    );
}

/// The scenario of the ceiling tests: work longer than the lease, so that leases run out
/// while the consumers are held at a ceiling of three.
const HELD: &str = r#"
    name = "held"
    duration_s = 120
    step_s = 1
    [queue]
    visibility_timeout_s = 2
    [arrivals]
    rate_per_s = 2
    [work]
    kind = "fixed"
    mean_s = 3
    [database]
    capacity = 1000
    load_slope = 0
    contention = 0
    [consumers]
    concurrency_ceiling = 3
"#;

/// Runs a scenario on a thread of its own, failing if it does not end within a minute.
fn run_within_a_minute(sc: Scenario) -> leasehold_sim::Summary {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(run(&sc, &mut |_| {}).map(|o| o.summary));
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("the run ends")
        .unwrap()
}

/// Idle consumers held back by the ceiling while a lease has run out unseen: the dispatcher
/// waits for a completion, where it once woke itself at the same instant forever.
#[test]
fn leases_that_run_out_while_idle_consumers_wait_at_the_ceiling_do_not_stall_the_run() {
    let text = format!("{HELD}\n[scaling]\nkind = \"fixed\"\nworkers = 10\n");
    let summary = run_within_a_minute(Scenario::from_toml(&text).unwrap());
    assert!(summary.peak_db_running <= 3, "{summary:#?}");
    assert!(summary.duplicate_executions > 10, "{summary:#?}");
}

/// A ceiling on a Lambda fleet is the event source's maximum concurrency: the fleet never
/// grows past it however deep the queue, and executions stay within it.
#[test]
fn a_ceiling_caps_a_lambda_fleet_however_deep_the_queue() {
    let scaling = "[scaling]\nkind = \"lambda\"\nworkers = 1\nmax_concurrency = 40\nramp_per_minute = 600\ninterval_s = 1\n";
    let summary = run_within_a_minute(Scenario::from_toml(&format!("{HELD}\n{scaling}")).unwrap());
    assert_eq!(summary.peak_workers, 3, "{summary:#?}");
    assert!(summary.peak_db_running <= 3, "{summary:#?}");
}

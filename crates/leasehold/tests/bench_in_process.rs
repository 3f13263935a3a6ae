//! `leasehold bench in-process`: the full cycle on the embedded backend itself, in memory and
//! durable, reported as the other scenarios report (one JSON object); a mistake in the
//! scenario's name is one line and exit 2.

use std::process::Command;

use serde_json::Value;

fn bench(extra: &[&str]) -> Value {
    let run = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["bench", "in-process", "--seconds", "1", "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_slice(&run.stdout).unwrap()
}

fn assert_cycled(report: &Value, threads: u64) {
    assert_eq!(report["scenario"], "in-process", "{report}");
    assert_eq!(report["clients"], threads, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    let (sent, deleted) = (
        report["sent_per_second"].as_f64().unwrap(),
        report["deleted_per_second"].as_f64().unwrap(),
    );
    // Every cycle deletes what it received: nearly all that was sent, none that was not.
    assert!(deleted > 100.0 && deleted <= sent, "{report}");
    for action in ["SendMessageBatch", "ReceiveMessage", "DeleteMessageBatch"] {
        assert!(
            report["latency"][action]["calls"].as_u64().unwrap() > 0,
            "{report}"
        );
    }
    assert!(
        report["server_cpu_percent"].as_f64().unwrap() > 0.0,
        "{report}"
    );
}

#[test]
fn in_process_cycles_threads_over_queues_in_memory() {
    let report = bench(&["--threads", "2", "--queues", "3"]);
    assert_cycled(&report, 2);
}

#[test]
fn in_process_cycles_on_a_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let report = bench(&["--threads", "1", "--queues", "1", "--data-dir", data]);
    assert_cycled(&report, 1);
    assert!(dir.path().join("leasehold.db").exists());
}

#[test]
fn an_unknown_scenario_is_one_line_naming_in_process_and_exit_2() {
    let run = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["bench", "in-proces"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("in-process"), "{stderr}");
}

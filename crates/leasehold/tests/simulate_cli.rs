//! `leasehold simulate` as tools call it: the summary's contract, the series and the plots.

use std::process::Command;

use serde_json::Value;

#[test]
fn simulate_writes_the_summary_series_and_plots_and_sweeps() {
    let out = tempfile::tempdir().unwrap();
    let scenario = format!(
        "{}/../../scenarios/seed-004-death-spiral-naive.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let run = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["simulate", &scenario, "--out"])
        .arg(out.path())
        .args(["--quiet", "--seed", "4"])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("summary.json")).unwrap())
            .unwrap();
    for key in [
        "unique_messages",
        "executions",
        "peak_amplification",
        "duplicate_executions",
        "dlq_messages",
        "dlq_messages_already_succeeded",
        "recovered",
        "recovery_s",
    ] {
        assert!(
            summary.get(key).is_some(),
            "summary.json lacks {key}: {summary}"
        );
    }
    assert_eq!(summary["recovered"], false);
    assert!(summary["recovery_s"].is_null());
    for file in ["timeseries.csv", "timeseries.json", "plot.svg", "plot.png"] {
        let len = std::fs::metadata(out.path().join(file))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(len > 1000, "{file} is missing or empty");
    }
    let png = std::fs::read(out.path().join("plot.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");

    let sweep = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "simulate", &scenario, "--sweep", "--leases", "20,60", "--loads", "0.4,0.7", "--quiet",
            "--out",
        ])
        .arg(out.path().join("sweep"))
        .output()
        .unwrap();
    assert!(
        sweep.status.success(),
        "{}",
        String::from_utf8_lossy(&sweep.stderr)
    );
    let cells: Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("sweep/sweep.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(cells.as_array().unwrap().len(), 4);
    assert!(out.path().join("sweep/sweep.png").exists());
}

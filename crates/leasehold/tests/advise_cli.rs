//! `leasehold advise` as users and tools run it: the JSON contract from a durations file, and
//! advice from a live server's measurements.

mod common;

use std::process::Command;

use common::Server;
use serde_json::Value;

fn leasehold(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn json_advice_from_a_durations_file_keeps_its_contract() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("durations.csv");
    let mut csv = String::from("job,seconds\n");
    for i in 0..1000 {
        // The seed's transcoding shape: mostly short, a long tail to 9 minutes.
        let s = match i % 100 {
            0..=49 => 10.0 + (i % 50) as f64 * 0.5,
            50..=89 => 40.0 + (i % 40) as f64 * 1.5,
            90..=98 => 100.0 + (i % 9) as f64 * 25.0,
            _ => 300.0 + (i / 100) as f64 * 24.0,
        };
        csv.push_str(&format!("j{i},{s}\n"));
    }
    std::fs::write(&file, csv).unwrap();
    let (ok, out, err) = leasehold(&[
        "advise",
        "--durations",
        file.to_str().unwrap(),
        "--column",
        "seconds",
        "--json",
        "--retention",
        "3600",
    ]);
    assert!(ok, "{err}");
    let advice: Value = serde_json::from_str(&out).unwrap();
    assert!(advice["visibility_timeout_s"].as_f64().unwrap() > 0.0);
    assert!(
        advice["heartbeat_interval_s"].is_number(),
        "a long tail calls for a heartbeat: {advice}"
    );
    assert_eq!(advice["max_receive_count"], 3);
    assert_eq!(
        advice["time_to_dlq_s"].as_f64().unwrap(),
        3.0 * advice["visibility_timeout_s"].as_f64().unwrap()
    );
    assert!(advice["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .all(Value::is_string));

    let (ok, out, _) = leasehold(&[
        "advise",
        "--durations",
        file.to_str().unwrap(),
        "--column",
        "seconds",
    ]);
    assert!(ok);
    assert!(
        out.contains("Visibility timeout") && out.contains("Heartbeat") && out.contains("Why:"),
        "{out}"
    );
    let (ok, _, err) = leasehold(&["advise", "--durations", "/nonexistent/file"]);
    assert!(!ok && err.contains("/nonexistent/file"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advice_from_a_live_queue_reads_its_measurements_and_settings() {
    let server = Server::start(&["--time-travel"]);
    let sqs = server.client();
    let http = reqwest::Client::new();
    let url = sqs
        .create_queue()
        .queue_name("live")
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            "20",
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    for i in 0..20u64 {
        sqs.send_message()
            .queue_url(&url)
            .message_body(format!("m{i}"))
            .send()
            .await
            .unwrap();
        let got = sqs.receive_message().queue_url(&url).send().await.unwrap();
        // The consumer works 2..6 s: the server's clock jumps instead of the test waiting.
        http.post(format!("{}/_leasehold/clock/advance", server.endpoint()))
            .json(&serde_json::json!({"seconds": 2 + i % 5}))
            .send()
            .await
            .unwrap();
        let handle = got.messages.unwrap()[0].receipt_handle.clone().unwrap();
        sqs.delete_message()
            .queue_url(&url)
            .receipt_handle(handle)
            .send()
            .await
            .unwrap();
    }
    let (ok, out, err) = leasehold(&["advise", "--queue-url", &url, "--json"]);
    assert!(ok, "{err}");
    let advice: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(advice["measured"]["count"], 20);
    assert!(
        advice["heartbeat_interval_s"].is_null(),
        "short, tight work needs no heartbeat: {advice}"
    );
    let visibility = advice["visibility_timeout_s"].as_f64().unwrap();
    assert!(
        (6.0..=20.0).contains(&visibility),
        "2 x p99 of 2..6 s work: {visibility}"
    );
    assert_eq!(
        advice["evaluations"][0]["visibility_timeout_s"], 20.0,
        "the queue's own setting is judged"
    );
    let apply: Vec<&str> = advice["apply"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(apply[0].starts_with(&format!(
        "aws sqs set-queue-attributes --queue-url {url} --attributes VisibilityTimeout="
    )));
    assert!(apply[1].contains("no dead-letter queue"), "{apply:?}");
    assert!(apply[2].starts_with(&format!("leasehold work --queue-url {url} --lease ")));
    // The same through --endpoint-url and a name; an unknown queue is a clear mistake.
    let (ok, _, err) = leasehold(&[
        "advise",
        "--endpoint-url",
        &server.endpoint(),
        "--queue",
        "live",
    ]);
    assert!(ok, "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "advise",
            "--endpoint-url",
            &server.endpoint(),
            "--queue",
            "nope",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("there is no queue \"nope\""), "{err}");
}

#[test]
fn a_durations_file_names_its_column_and_its_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jobs.csv");
    std::fs::write(&file, "job_id,seconds\n1001,2.0\n1002,3.0\n1003,4.0\n").unwrap();
    let (ok, out, err) = leasehold(&["advise", "--durations", file.to_str().unwrap(), "--json"]);
    assert!(ok, "{err}");
    assert!(err.contains("durations from column \"seconds\""), "{err}");
    assert!(err.contains("only 3 durations"), "{err}");
    let advice: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        advice["measured"]["max_s"], 4.0,
        "not the job ids: {advice}"
    );
    std::fs::write(&file, "job_id,attempts\n1001,2\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["advise", "--durations", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--column"));
    std::fs::write(&file, "seconds\n1\n-3\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["advise", "--durations", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 3"));
}

#[test]
fn printing_to_a_closed_pipe_ends_quietly_not_with_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("durations.csv");
    let rows: String = (1..=200).map(|i| format!("{i}\n")).collect();
    std::fs::write(&file, format!("seconds\n{rows}")).unwrap();
    // `leasehold advise ... | head -0`: the reader is gone before anything is written.
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["advise", "--durations", file.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
}

/// Inputs that make no sense to advise from are refused at start, in one line, exit 2.
#[test]
fn a_safety_factor_below_one_or_a_budget_of_nothing_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("durations.txt");
    std::fs::write(&file, "1\n2\n3\n").unwrap();
    for (flag, value, expected) in [
        ("--safety-factor", "0.5", "safety factor"),
        ("--max-outage", "0", "outage budget"),
        ("--max-crash-recovery=-5", "", "crash budget"),
    ] {
        let mut args = vec!["advise", "--durations", file.to_str().unwrap(), flag];
        args.extend((!value.is_empty()).then_some(value));
        let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(&args)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(out.stdout.is_empty());
    }
}

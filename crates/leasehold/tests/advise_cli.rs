//! `leasehold advise` as users and tools run it: the JSON contract from a durations file, and
//! advice from a live server's measurements.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

#[test]
fn advice_from_a_live_queue_reads_its_measurements_and_settings() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut server = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "serve",
            "--in-memory",
            "--time-travel",
            "--bind",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let call = |target: &str, body: Value| -> Value {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            reqwest::Client::new()
                .post(format!("{endpoint}/"))
                .header("content-type", "application/x-amz-json-1.0")
                .header("x-amz-target", format!("AmazonSQS.{target}"))
                .body(body.to_string())
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        })
    };
    let advance = |seconds: u64| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            reqwest::Client::new()
                .post(format!("{endpoint}/_leasehold/clock/advance"))
                .json(&serde_json::json!({"seconds": seconds}))
                .send()
                .await
                .unwrap();
        })
    };
    let url = call(
        "CreateQueue",
        serde_json::json!({"QueueName": "live", "Attributes": {"VisibilityTimeout": "20"}}),
    )["QueueUrl"]
        .as_str()
        .unwrap()
        .to_string();
    for i in 0..20u64 {
        call(
            "SendMessage",
            serde_json::json!({"QueueUrl": url, "MessageBody": format!("m{i}")}),
        );
        let got = call("ReceiveMessage", serde_json::json!({"QueueUrl": url}));
        advance(2 + i % 5);
        let handle = got["Messages"][0]["ReceiptHandle"]
            .as_str()
            .unwrap()
            .to_string();
        call(
            "DeleteMessage",
            serde_json::json!({"QueueUrl": url, "ReceiptHandle": handle}),
        );
    }
    let (ok, out, err) = leasehold(&[
        "advise",
        "--endpoint",
        &endpoint,
        "--queue",
        "live",
        "--json",
    ]);
    server.kill().unwrap();
    let _ = server.wait();
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
}

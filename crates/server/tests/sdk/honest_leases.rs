//! End to end: consumers with known processing times, some slower than the lease. The server's
//! measurements must match what they did, and the advisor's answer from those measurements
//! must be one that would have avoided the duplicates.

use leasehold_advisor::{advise, Distribution, Inputs};
use serde_json::Value;

use crate::harness::TestServer;

async fn leases(s: &TestServer, queue: &str) -> Value {
    reqwest::get(format!("{}/_leasehold/queues/{queue}/leases", s.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn measurements_match_what_consumers_did_and_the_advice_avoids_their_duplicates() {
    let s = TestServer::start().await;
    let url = s.queue("work", &[("VisibilityTimeout", "30")]).await;
    // Thirty messages take 5..=19 s; ten take 35..=53 s, longer than the 30 s lease.
    let durations: Vec<u64> = (0..40)
        .map(|i| {
            if i % 4 == 3 {
                35 + 2 * (i / 4)
            } else {
                5 + i % 15
            }
        })
        .collect();
    for i in 0..durations.len() {
        s.send(&url, &format!("job-{i}")).await;
    }
    for &d in &durations {
        // Consumer A takes a message and works on it for d seconds.
        let a = s.receive(&url, 1).await.remove(0);
        s.advance(d).await;
        if d >= 30 {
            // The lease ran out: consumer B gets the same message and works on it too.
            let b = s.receive(&url, 1).await.remove(0);
            assert_eq!(b.message_id, a.message_id);
            s.delete(&url, a.receipt_handle.unwrap()).await;
            s.advance(5).await;
            s.delete(&url, b.receipt_handle.unwrap()).await;
        } else {
            s.delete(&url, a.receipt_handle.unwrap()).await;
        }
    }

    let report = leases(&s, "work").await;
    let slow = durations.iter().filter(|d| **d >= 30).count() as u64;
    let fast = durations.len() as u64 - slow;
    assert_eq!(report["late_deletes"], slow, "{report}");
    assert_eq!(
        report["repeat_deletes"], slow,
        "B finished work A had already deleted"
    );
    assert_eq!(report["expired_leases"], slow);
    assert_eq!(
        report["deleted_within_lease"], fast,
        "B's deletes of the slow ones were late too: {report}"
    );
    assert_eq!(report["receive_count_histogram"]["1"], fast);
    assert_eq!(report["receive_count_histogram"]["2"], slow);
    let hold = &report["lease_hold_ms"];
    assert_eq!(hold["count"], durations.len() as u64 + slow);
    let max_ms = *durations.iter().max().unwrap() as f64 * 1000.0;
    let measured_max = hold["max"].as_f64().unwrap();
    assert!(
        (measured_max - max_ms).abs() <= max_ms * 0.01 + 50.0,
        "max {measured_max} vs {max_ms}"
    );
    let p50_ms = hold["p50"].as_f64().unwrap();
    assert!((4_900.0..20_500.0).contains(&p50_ms), "p50 {p50_ms}");
    assert_eq!(report["settings"]["visibility_timeout_s"], 30);

    // The advisor, from what the server measured.
    let secs = |k: &str| hold[k].as_f64().unwrap() / 1000.0;
    let measured = Distribution::from_quantiles(
        secs("p50"),
        secs("p90"),
        secs("p99"),
        secs("p999"),
        secs("max"),
    );
    let inputs = Inputs {
        current_visibility_s: Some(30.0),
        ..Inputs::default()
    };
    let advice = advise(&measured, &inputs);
    let current = &advice.evaluations[0];
    assert!(
        current.overrun_fraction > 0.0 && current.verdict.starts_with("fails"),
        "{current:?}"
    );
    for &d in &durations {
        let covered = (d as f64) < advice.visibility_timeout_s
            || advice
                .heartbeat_interval_s
                .is_some_and(|h| h < advice.visibility_timeout_s);
        assert!(covered, "a {d} s job would still outlive {advice:?}");
    }
    assert!(advice.visibility_timeout_s > 30.0);
}

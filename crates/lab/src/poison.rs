//! Poison messages live: when each reached the dead-letter queue, seen by a watcher on it,
//! and the workers' time their executions took, counted as the simulator counts them.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry;
use aws_sdk_sqs::Client;
use leasehold_worker::CancellationToken;
use tokio::time::Instant;

use crate::downstream::ExecutionRow;
use crate::load::{is_poison, key_of};

/// Watches the dead-letter queue until `stop`: when each unit of work first arrived there,
/// in seconds from `start`. Every message it took is hidden while it watches (so that it
/// sees each once) and put back at the end (visibility 0), so that the run's end reads the
/// queue whole; the end waits for the poll in progress (at most a second).
pub async fn watch(
    client: Client,
    dlq_url: String,
    start: Instant,
    stop: CancellationToken,
) -> HashMap<String, f64> {
    let mut arrived = HashMap::new();
    let mut handles = Vec::new();
    while !stop.is_cancelled() {
        // Never dropped half-way: a long poll the client gave up on still waits on the
        // server, and would take (for 900 s) what the end puts back below.
        let received = client
            .receive_message()
            .queue_url(&dlq_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .visibility_timeout(900)
            .message_attribute_names("All")
            .send()
            .await;
        let Ok(received) = received else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let now = start.elapsed().as_secs_f64();
        for m in received.messages.unwrap_or_default() {
            let id = m.message_id.clone().unwrap_or_default();
            arrived
                .entry(key_of(m.message_attributes.as_ref(), &id))
                .or_insert(now);
            handles.extend(m.receipt_handle);
        }
    }
    for chunk in handles.chunks(10) {
        let entries = chunk.iter().enumerate().filter_map(|(i, handle)| {
            ChangeMessageVisibilityBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(handle)
                .visibility_timeout(0)
                .build()
                .ok()
        });
        let released = client
            .change_message_visibility_batch()
            .queue_url(&dlq_url)
            .set_entries(Some(entries.collect()))
            .send()
            .await;
        match released {
            Err(e) => {
                tracing::warn!("the dead-letter queue's watcher could not put messages back: {e}")
            }
            Ok(answer) if !answer.failed.is_empty() => tracing::warn!(
                "the dead-letter queue's watcher could not put {} messages back: the queue's count at the end misses them",
                answer.failed.len()
            ),
            Ok(_) => {}
        }
    }
    arrived
}

/// The poison messages' times from first receive (their first execution's start) to the
/// dead-letter queue, in ms; and the workers' time their executions took until they failed.
pub fn measure(arrived: &HashMap<String, f64>, executions: &[ExecutionRow]) -> (Vec<u64>, u64) {
    let mut first_start: HashMap<&str, f64> = HashMap::new();
    let mut work_s = 0.0;
    for e in executions.iter().filter(|e| is_poison(&e.message_id)) {
        let first = first_start.entry(&e.message_id).or_insert(e.started_s);
        *first = first.min(e.started_s);
        if let Some(failed) = e.failed_s {
            work_s += (failed - e.started_s).max(0.0);
        }
    }
    let mut to_dlq: Vec<u64> = arrived
        .iter()
        .filter(|(key, _)| is_poison(key))
        .filter_map(|(key, at)| {
            let first = first_start.get(key.as_str())?;
            Some(((at - first).max(0.0) * 1000.0).round() as u64)
        })
        .collect();
    to_dlq.sort_unstable();
    (to_dlq, (work_s * 1000.0).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(id: &str, started_s: f64, failed_s: Option<f64>) -> ExecutionRow {
        ExecutionRow {
            message_id: id.into(),
            unloaded_s: 0.5,
            started_s,
            finished_s: None,
            failed_s,
            killed_s: None,
            timed_out: false,
        }
    }

    #[test]
    fn time_to_dlq_runs_from_the_first_execution_and_only_poison_counts() {
        let executions = [
            exec("poison-0", 5.0, Some(5.5)),
            exec("w1", 5.1, None),
            exec("poison-0", 7.0, Some(7.25)),
            exec("poison-1", 6.0, None),
        ];
        let arrived = HashMap::from([
            ("poison-0".to_string(), 11.0),
            ("poison-1".to_string(), 12.5),
            ("w9".to_string(), 3.0),
        ]);
        let (to_dlq, work_ms) = measure(&arrived, &executions);
        assert_eq!(to_dlq, vec![6_000, 6_500]);
        assert_eq!(work_ms, 750);
    }
}

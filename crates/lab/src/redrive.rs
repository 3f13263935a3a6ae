//! After a DLQ mirage: the dead-letter queue split in two halves, one redriven blind (a move
//! task, as the console's "redrive" button does) and one by `leasehold redrive` (the worker
//! crate's redrive, which skips work recorded as done), then the fleet run again, and the
//! downstream asked how much finished work each half executed a second time.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use aws_sdk_sqs::Client;
use leasehold_worker::idempotency::MemoryStore;
use leasehold_worker::redrive::RedrivePlan;
use leasehold_worker::{Begin, CancellationToken, IdempotencyStore};
use serde::Serialize;

use crate::downstream::ExecutionRow;
use crate::LabError;

/// One half of the dead-letter queue and what its redrive did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RedriveHalf {
    pub messages: u64,
    /// Messages whose work the downstream had finished before the redrive.
    pub already_succeeded: u64,
    /// Messages the redrive sent back to the queue.
    pub moved: u64,
    /// Messages the redrive removed as done instead.
    pub skipped_as_done: u64,
    /// Executions, after the redrive, of work that had already succeeded: duplicates the
    /// redrive caused.
    pub re_executions_of_finished_work: u64,
    /// Messages of this half whose work was finished for the first time after the redrive.
    pub finished_after_redrive: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct RedriveComparison {
    pub blind: RedriveHalf,
    pub leasehold: RedriveHalf,
    /// How long the fleet ran after the redrives, in seconds.
    pub ran_s: f64,
}

/// Receives every message of `url` once and returns their idempotency keys; with `restore`,
/// makes them visible again, else deletes them.
pub async fn drain_keys(
    client: &Client,
    url: &str,
    restore: bool,
) -> Result<Vec<String>, LabError> {
    Ok(drain(client, url, restore)
        .await?
        .into_iter()
        .map(|m| m.0)
        .collect())
}

/// (key, body, attributes) of every message of `url`, each received once.
type Drained = Vec<(
    String,
    String,
    HashMap<String, aws_sdk_sqs::types::MessageAttributeValue>,
)>;

/// Receives until the queue shows nothing (every message hidden for a minute), then releases
/// them all (`restore`) or deletes them.
async fn drain(client: &Client, url: &str, restore: bool) -> Result<Drained, LabError> {
    let mut out = Vec::new();
    let mut handles = Vec::new();
    loop {
        let received = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(60)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| LabError::sqs("reading the dead-letter queue", e))?;
        let messages = received.messages.unwrap_or_default();
        if messages.is_empty() {
            break;
        }
        for m in messages {
            let id = m.message_id.clone().unwrap_or_default();
            let key = crate::load::key_of(m.message_attributes.as_ref(), &id);
            handles.push(m.receipt_handle.unwrap_or_default());
            out.push((
                key,
                m.body.unwrap_or_default(),
                m.message_attributes.unwrap_or_default(),
            ));
        }
    }
    for handle in handles {
        if restore {
            client
                .change_message_visibility()
                .queue_url(url)
                .receipt_handle(handle)
                .visibility_timeout(0)
                .send()
                .await
                .map_err(|e| LabError::sqs("releasing a dead letter", e))?;
        } else {
            client
                .delete_message()
                .queue_url(url)
                .receipt_handle(handle)
                .send()
                .await
                .map_err(|e| LabError::sqs("deleting a dead letter", e))?;
        }
    }
    Ok(out)
}

/// The two halves, ready to redrive: the dead-letter queue keeps one, the other moves to a
/// second dead-letter queue (same bodies and keys).
pub struct Split {
    pub blind_keys: Vec<String>,
    pub leasehold_keys: Vec<String>,
    pub second_dlq_url: String,
}

pub async fn split(client: &Client, dlq_url: &str, dlq_name: &str) -> Result<Split, LabError> {
    let second = client
        .create_queue()
        .queue_name(format!("{dlq_name}-b"))
        .send()
        .await
        .map_err(|e| LabError::sqs("creating the second dead-letter queue", e))?
        .queue_url
        .unwrap_or_default();
    let all = drain(client, dlq_url, false).await?;
    let mut split = Split {
        blind_keys: Vec::new(),
        leasehold_keys: Vec::new(),
        second_dlq_url: second.clone(),
    };
    for (i, (key, body, attributes)) in all.into_iter().enumerate() {
        let (target, keys) = if i % 2 == 0 {
            (dlq_url, &mut split.blind_keys)
        } else {
            (second.as_str(), &mut split.leasehold_keys)
        };
        client
            .send_message()
            .queue_url(target)
            .message_body(body)
            .set_message_attributes(Some(attributes))
            .send()
            .await
            .map_err(|e| LabError::sqs("splitting the dead-letter queue", e))?;
        keys.push(key);
    }
    Ok(split)
}

/// A move task from the dead-letter queue to the source: everything goes back, done or not.
pub async fn blind(client: &Client, dlq_arn: &str, source_arn: &str) -> Result<(), LabError> {
    client
        .start_message_move_task()
        .source_arn(dlq_arn)
        .destination_arn(source_arn)
        .send()
        .await
        .map_err(|e| LabError::sqs("starting the blind move task", e))?;
    Ok(())
}

/// `leasehold redrive` from the second dead-letter queue to the source, knowing what the
/// downstream finished (as the workers' idempotency store would: the lab's naive consumers
/// record nothing themselves, so the record is filled from the downstream's table).
pub async fn leasehold(
    client: &Client,
    from: &str,
    to: &str,
    finished: &HashSet<String>,
    budget: u64,
) -> Result<(u64, u64), LabError> {
    let store = MemoryStore::default();
    for key in finished {
        if let Ok(Begin::Started(claim)) = store.begin(key, Duration::from_secs(60)).await {
            let _ = store.complete(key, &claim, Duration::from_secs(3600)).await;
        }
    }
    let plan = RedrivePlan {
        from: from.to_string(),
        to: to.to_string(),
        to_fifo: false,
        budget,
        dry_run: false,
    };
    let report =
        leasehold_worker::redrive::redrive(client, &store, &plan, &CancellationToken::new())
            .await
            .map_err(|e| LabError::Server(e.to_string()))?;
    Ok((
        report.count(&["moved"]) as u64,
        report.count(&["skipped_already_done"]) as u64,
    ))
}

/// What one half's redrive did, from the executions the downstream recorded.
pub fn half(
    keys: &[String],
    moved: u64,
    skipped: u64,
    executions: &[ExecutionRow],
    redrive_at_s: f64,
) -> RedriveHalf {
    let keys: HashSet<&str> = keys.iter().map(String::as_str).collect();
    let finished_before: HashSet<&str> = executions
        .iter()
        .filter(|e| e.finished_s.is_some_and(|f| f <= redrive_at_s))
        .map(|e| e.message_id.as_str())
        .collect();
    let after = executions
        .iter()
        .filter(|e| e.started_s > redrive_at_s && keys.contains(e.message_id.as_str()));
    RedriveHalf {
        messages: keys.len() as u64,
        already_succeeded: keys.iter().filter(|k| finished_before.contains(*k)).count() as u64,
        moved,
        skipped_as_done: skipped,
        re_executions_of_finished_work: after
            .clone()
            .filter(|e| finished_before.contains(e.message_id.as_str()))
            .count() as u64,
        finished_after_redrive: after
            .filter(|e| e.finished_s.is_some() && !finished_before.contains(e.message_id.as_str()))
            .map(|e| e.message_id.as_str())
            .collect::<HashSet<_>>()
            .len() as u64,
    }
}

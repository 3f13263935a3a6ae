//! Redrive: moves a dead-letter queue's messages back to a queue, except the work the
//! idempotency store records as done, which it removes instead of replaying. It considers each
//! message once, keeps FIFO groups in order, and never holds a message longer than it needs.
//! `leasehold redrive` is the command around it; it checks the queues and prints the report.

use std::collections::HashSet;

use aws_sdk_sqs::types::{
    Message as SqsMessage, MessageAttributeValue, MessageSystemAttributeName,
};
use aws_sdk_sqs::Client;
use tokio_util::sync::CancellationToken;

use crate::idempotency::{with_causes, IdempotencyStore};
use crate::IDEMPOTENCY_KEY_ATTRIBUTE;

/// What to move, and where.
#[derive(Clone, Debug)]
pub struct RedrivePlan {
    /// The dead-letter queue's URL.
    pub from: String,
    /// The URL of the queue to send the messages back to.
    pub to: String,
    /// Whether `to` is a FIFO queue: its sends need a group and a deduplication id.
    pub to_fifo: bool,
    /// At most this many messages are considered: what the dead-letter queue held at start.
    pub budget: u64,
    /// Decide what would happen to each message; move and delete nothing.
    pub dry_run: bool,
}

/// What became of one message.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Outcome {
    pub message_id: String,
    pub receive_count: u32,
    pub idempotency_key: String,
    /// `moved`, `skipped_already_done`, `failed`, or in a dry run `would_move` and
    /// `would_skip_already_done`.
    pub verdict: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Every message considered, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedriveReport {
    pub outcomes: Vec<Outcome>,
}

impl RedriveReport {
    /// How many messages ended with one of these verdicts.
    pub fn count(&self, verdicts: &[&str]) -> usize {
        self.outcomes
            .iter()
            .filter(|o| verdicts.contains(&o.verdict))
            .count()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RedriveError {
    #[error("cannot receive from {url}: {cause}")]
    Receive { url: String, cause: String },
}

/// Moves what `plan` says until the dead-letter queue has nothing new, the budget is spent
/// or `stop` is cancelled. A message that fails stays in the dead-letter queue (released
/// at once), and on a FIFO target the rest of its group stays with it.
pub async fn redrive(
    client: &Client,
    store: &dyn IdempotencyStore,
    plan: &RedrivePlan,
    stop: &CancellationToken,
) -> Result<RedriveReport, RedriveError> {
    move_messages(client, store, plan, stop)
        .await
        .map(|outcomes| RedriveReport { outcomes })
}

/// Considers each message of the dead-letter queue once: at most the number it held at
/// start, and never a message seen already (a released one coming round again). Every
/// message not moved or removed is released at once, never held for a lease.
async fn move_messages(
    client: &Client,
    store: &dyn IdempotencyStore,
    plan: &RedrivePlan,
    stop: &CancellationToken,
) -> Result<Vec<Outcome>, RedriveError> {
    let mut outcomes = Vec::new();
    let mut seen = HashSet::new();
    // FIFO groups with a message that failed: their later messages must not overtake it.
    let mut blocked_groups = HashSet::new();
    let mut empty_polls = 0;
    while (outcomes.len() as u64) < plan.budget && empty_polls < 2 && !stop.is_cancelled() {
        let messages = receive(client, &plan.from).await?;
        if messages.is_empty() {
            empty_polls += 1;
            continue;
        }
        let mut fresh = false;
        for m in messages {
            let id = m.message_id.clone().unwrap_or_default();
            if !seen.insert(id) || stop.is_cancelled() {
                release(client, &plan.from, &m).await;
                continue;
            }
            fresh = true;
            let outcome = one(client, store, plan, &m, &mut blocked_groups).await;
            if outcome.verdict != "moved" && outcome.verdict != "skipped_already_done" {
                release(client, &plan.from, &m).await;
            }
            outcomes.push(outcome);
        }
        // Only messages already considered came back: what is left has been seen.
        empty_polls = if fresh { 0 } else { empty_polls + 1 };
    }
    Ok(outcomes)
}

async fn receive(client: &Client, url: &str) -> Result<Vec<SqsMessage>, RedriveError> {
    let out = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .visibility_timeout(60)
        .message_attribute_names("All")
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .map_err(|e| RedriveError::Receive {
            url: url.to_string(),
            cause: with_causes(&e),
        })?;
    Ok(out.messages.unwrap_or_default())
}

async fn release(client: &Client, url: &str, m: &SqsMessage) {
    if let Some(handle) = &m.receipt_handle {
        let _ = client
            .change_message_visibility()
            .queue_url(url)
            .receipt_handle(handle)
            .visibility_timeout(0)
            .send()
            .await;
    }
}

fn system_attribute(m: &SqsMessage, name: MessageSystemAttributeName) -> Option<String> {
    m.attributes.as_ref().and_then(|a| a.get(&name)).cloned()
}

/// Decides and does what becomes of one message.
async fn one(
    client: &Client,
    store: &dyn IdempotencyStore,
    plan: &RedrivePlan,
    m: &SqsMessage,
    blocked_groups: &mut HashSet<String>,
) -> Outcome {
    let id = m.message_id.clone().unwrap_or_default();
    let attributes = m.message_attributes.clone().unwrap_or_default();
    let key = attributes
        .get(IDEMPOTENCY_KEY_ATTRIBUTE)
        .and_then(|a| a.string_value.clone())
        .unwrap_or_else(|| id.clone());
    let group = system_attribute(m, MessageSystemAttributeName::MessageGroupId);
    let mut outcome = Outcome {
        message_id: id.clone(),
        receive_count: system_attribute(m, MessageSystemAttributeName::ApproximateReceiveCount)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
        idempotency_key: key.clone(),
        verdict: "failed",
        reason: None,
    };
    if let Some(group) = group.as_ref().filter(|g| blocked_groups.contains(*g)) {
        outcome.reason = Some(format!("an earlier message of group {group} was not moved"));
        return outcome;
    }
    let failed = |mut outcome: Outcome, reason: String, blocked: &mut HashSet<String>| {
        if let Some(group) = &group {
            blocked.insert(group.clone());
        }
        outcome.reason = Some(reason);
        outcome
    };
    let done = match store.is_completed(&key).await {
        Ok(done) => done,
        Err(e) => return failed(outcome, format!("idempotency store: {e}"), blocked_groups),
    };
    outcome.verdict = match (done, plan.dry_run) {
        (true, true) => "would_skip_already_done",
        (false, true) => "would_move",
        (true, false) => "skipped_already_done",
        (false, false) => "moved",
    };
    if plan.dry_run {
        return outcome;
    }
    if !done {
        let mut attributes = attributes;
        if let Ok(value) = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(&key)
            .build()
        {
            attributes.insert(IDEMPOTENCY_KEY_ATTRIBUTE.to_string(), value);
        }
        let mut send = client
            .send_message()
            .queue_url(&plan.to)
            .message_body(m.body.clone().unwrap_or_default())
            .set_message_attributes(Some(attributes));
        if plan.to_fifo {
            // The group keeps its order; the original's id as the deduplication id makes a
            // retried redrive of the same message within five minutes a no-op.
            send = send
                .message_group_id(group.clone().unwrap_or_else(|| "redriven".into()))
                .message_deduplication_id(&id);
        }
        if let Err(e) = send.send().await {
            outcome.verdict = "failed";
            return failed(
                outcome,
                format!("send to {}: {}", plan.to, with_causes(&e)),
                blocked_groups,
            );
        }
    }
    let handle = m.receipt_handle.clone().unwrap_or_default();
    if let Err(e) = client
        .delete_message()
        .queue_url(&plan.from)
        .receipt_handle(handle)
        .send()
        .await
    {
        outcome.verdict = "failed";
        return failed(
            outcome,
            format!("delete from {}: {}", plan.from, with_causes(&e)),
            blocked_groups,
        );
    }
    outcome
}

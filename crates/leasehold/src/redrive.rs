//! `leasehold redrive`: moves a dead-letter queue's messages back to their source queue,
//! except the work the idempotency store records as done, which it removes instead of
//! replaying. It checks at start that the move makes sense, considers each message once,
//! keeps FIFO groups in order, and never holds a message longer than it needs.

use std::collections::HashSet;

use aws_sdk_sqs::types::{
    Message as SqsMessage, MessageAttributeValue, MessageSystemAttributeName,
    QueueAttributeName as A,
};
use aws_sdk_sqs::Client;
use leasehold_worker::idempotency::with_causes;
use leasehold_worker::{IdempotencyStore, IDEMPOTENCY_KEY_ATTRIBUTE};
use tokio_util::sync::CancellationToken;

use crate::consume::{open_store, queue_attributes, sqs_client, usage, SqsArgs};

#[derive(clap::Args)]
pub struct RedriveArgs {
    #[command(flatten)]
    sqs: SqsArgs,
    /// The dead-letter queue to empty.
    #[arg(long)]
    from: String,
    /// The queue to send messages back to: the one whose RedrivePolicy names `--from`.
    #[arg(long)]
    to: String,
    /// postgres://... or redis://...: where workers record completed work (`memory` knows
    /// nothing of it, and needs `--blind`).
    #[arg(long)]
    idempotency: String,
    /// Report each message and what would happen to it; move and delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Move even though `--from` is not the dead-letter queue of `--to`.
    #[arg(long)]
    force: bool,
    /// Allow `--idempotency memory`, which moves every message, done or not.
    #[arg(long)]
    blind: bool,
}

/// What became of one message.
#[derive(serde::Serialize)]
struct Outcome {
    message_id: String,
    receive_count: u32,
    idempotency_key: String,
    /// `moved`, `skipped_already_done`, `failed`, or with `--dry-run` what would happen.
    verdict: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// What the two queues are, read at start.
struct Queues {
    to_fifo: bool,
    /// Visible messages of the dead-letter queue at start: at most this many are considered.
    budget: u64,
}

pub async fn redrive(args: RedriveArgs) -> anyhow::Result<()> {
    if args.idempotency == "memory" && !args.blind {
        return Err(usage(
            "--idempotency memory cannot know what workers recorded as done, so it would replay \
             finished work: name the store your workers use, or add --blind to move everything",
        ));
    }
    if args.from.trim_end_matches('/') == args.to.trim_end_matches('/') {
        return Err(usage(
            "--from and --to name the same queue: a redrive would never end",
        ));
    }
    let client = sqs_client(&args.sqs, &args.from).await?;
    let queues = check_queues(&client, &args).await?;
    let store = open_store(&args.idempotency).await?;
    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            crate::shutdown_signal().await;
            stop.cancel();
        }
    });
    let outcomes = move_messages(&client, &*store, &args, &queues, &stop).await?;
    report(&args, &outcomes);
    let failed = outcomes.iter().filter(|o| o.verdict == "failed").count();
    if failed > 0 {
        anyhow::bail!(
            "{failed} message(s) could not be moved; they are back in {}",
            args.from
        );
    }
    Ok(())
}

/// Both queues exist, `--from` is `--to`'s dead-letter queue (unless `--force`), and how
/// many messages the dead-letter queue holds now.
async fn check_queues(client: &Client, args: &RedriveArgs) -> anyhow::Result<Queues> {
    let from = queue_attributes(
        client,
        &args.from,
        &[A::QueueArn, A::ApproximateNumberOfMessages],
    )
    .await?;
    let to = queue_attributes(client, &args.to, &[A::RedrivePolicy]).await?;
    let from_arn = from.get(&A::QueueArn).cloned().unwrap_or_default();
    let target = to
        .get(&A::RedrivePolicy)
        .and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok())
        .and_then(|p| p["deadLetterTargetArn"].as_str().map(str::to_string));
    if target.as_deref() != Some(from_arn.as_str()) && !args.force {
        let names = target.unwrap_or_else(|| "no dead-letter queue".to_string());
        return Err(usage(format!(
            "{} is not the dead-letter queue of {} (its RedrivePolicy names {names}); add --force to move anyway",
            args.from, args.to
        )));
    }
    Ok(Queues {
        // By its name, as SQS requires of FIFO queues: AWS refuses to report FifoQueue for a
        // standard queue.
        to_fifo: args.to.trim_end_matches('/').ends_with(".fifo"),
        budget: from
            .get(&A::ApproximateNumberOfMessages)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
    })
}

/// Considers each message of the dead-letter queue once: at most the number it held at
/// start, and never a message seen already (a released one coming round again). Every
/// message not moved or removed is released at once, never held for a lease.
async fn move_messages(
    client: &Client,
    store: &dyn IdempotencyStore,
    args: &RedriveArgs,
    queues: &Queues,
    stop: &CancellationToken,
) -> anyhow::Result<Vec<Outcome>> {
    let mut outcomes = Vec::new();
    let mut seen = HashSet::new();
    // FIFO groups with a message that failed: their later messages must not overtake it.
    let mut blocked_groups = HashSet::new();
    let mut empty_polls = 0;
    while (outcomes.len() as u64) < queues.budget && empty_polls < 2 && !stop.is_cancelled() {
        let messages = receive(client, &args.from).await?;
        if messages.is_empty() {
            empty_polls += 1;
            continue;
        }
        let mut fresh = false;
        for m in messages {
            let id = m.message_id.clone().unwrap_or_default();
            if !seen.insert(id) || stop.is_cancelled() {
                release(client, &args.from, &m).await;
                continue;
            }
            fresh = true;
            let outcome = one(client, store, args, queues, &m, &mut blocked_groups).await;
            if outcome.verdict != "moved" && outcome.verdict != "skipped_already_done" {
                release(client, &args.from, &m).await;
            }
            outcomes.push(outcome);
        }
        // Only messages already considered came back: what is left has been seen.
        empty_polls = if fresh { 0 } else { empty_polls + 1 };
    }
    Ok(outcomes)
}

async fn receive(client: &Client, url: &str) -> anyhow::Result<Vec<SqsMessage>> {
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
        .map_err(|e| anyhow::anyhow!("cannot receive from {url}: {}", with_causes(&e)))?;
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
    args: &RedriveArgs,
    queues: &Queues,
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
    outcome.verdict = match (done, args.dry_run) {
        (true, true) => "would_skip_already_done",
        (false, true) => "would_move",
        (true, false) => "skipped_already_done",
        (false, false) => "moved",
    };
    if args.dry_run {
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
            .queue_url(&args.to)
            .message_body(m.body.clone().unwrap_or_default())
            .set_message_attributes(Some(attributes));
        if queues.to_fifo {
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
                format!("send to {}: {}", args.to, with_causes(&e)),
                blocked_groups,
            );
        }
    }
    let handle = m.receipt_handle.clone().unwrap_or_default();
    if let Err(e) = client
        .delete_message()
        .queue_url(&args.from)
        .receipt_handle(handle)
        .send()
        .await
    {
        outcome.verdict = "failed";
        return failed(
            outcome,
            format!("delete from {}: {}", args.from, with_causes(&e)),
            blocked_groups,
        );
    }
    outcome
}

fn report(args: &RedriveArgs, outcomes: &[Outcome]) {
    let count = |verdicts: &[&str]| {
        outcomes
            .iter()
            .filter(|o| verdicts.contains(&o.verdict))
            .count()
    };
    let moved = count(&["moved", "would_move"]);
    let skipped = count(&["skipped_already_done", "would_skip_already_done"]);
    let failed = count(&["failed"]);
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "moved": moved, "skipped_already_done": skipped, "failed": failed,
                "dry_run": args.dry_run, "messages": outcomes,
            })
        );
        return;
    }
    for o in outcomes
        .iter()
        .filter(|o| args.dry_run || o.verdict == "failed")
    {
        println!(
            "{}  received {}  key {}  {}{}",
            o.message_id,
            o.receive_count,
            o.idempotency_key,
            o.verdict.replace('_', " "),
            o.reason
                .as_ref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        );
    }
    let verb = if args.dry_run { "would move" } else { "moved" };
    println!("{verb} {moved}, skipped as already done {skipped}, failed {failed}");
}

//! `leasehold redrive`: moves a dead-letter queue's messages back to their source queue,
//! except the work the idempotency store records as done (the worker crate's `redrive`). The
//! command checks at start that the move makes sense, and prints the report.

use aws_sdk_sqs::types::QueueAttributeName as A;
use aws_sdk_sqs::Client;
use leasehold_worker::redrive::{self, RedrivePlan, RedriveReport};

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
    let stop = crate::cancelled_on_shutdown();
    let plan = RedrivePlan {
        from: args.from.clone(),
        to: args.to.clone(),
        to_fifo: queues.to_fifo,
        budget: queues.budget,
        dry_run: args.dry_run,
    };
    let report = redrive::redrive(&client, &*store, &plan, &stop).await?;
    print_report(&args, &report);
    let failed = report.count(&["failed"]);
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

fn print_report(args: &RedriveArgs, report: &RedriveReport) {
    let outcomes = &report.outcomes;
    let moved = report.count(&["moved", "would_move"]);
    let skipped = report.count(&["skipped_already_done", "would_skip_already_done"]);
    let failed = report.count(&["failed"]);
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

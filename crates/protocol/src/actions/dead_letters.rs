//! Dead-letter sources and message move tasks.

use leasehold_backend::{Backend, MoveTaskStart};

use super::queues::{page, urls};
use super::{checked, Context};
use crate::convert::optional_u32;
use crate::error::Result;
use crate::shapes::*;

pub(crate) async fn list_dead_letter_source_queues(
    backend: &dyn Backend,
    ctx: &Context,
    input: ListDeadLetterSourceQueuesInput,
) -> Result<DeadLetterSourcesOutput> {
    let queue = ctx.queue(backend, input.queue_url)?;
    let page = checked(backend, &queue, page(input.max_results, input.next_token)).await?;
    let listed = backend.list_dead_letter_source_queues(&queue, page).await?;
    let (queue_urls, next_token) = urls(ctx, backend, listed);
    Ok(DeadLetterSourcesOutput {
        queue_urls,
        next_token,
    })
}

pub(crate) async fn start_message_move_task(
    backend: &dyn Backend,
    _ctx: &Context,
    input: StartMessageMoveTaskInput,
) -> Result<StartMoveTaskOutput> {
    let per_second = optional_u32(
        input.max_number_of_messages_per_second,
        "MaxNumberOfMessagesPerSecond",
        "Must be between 1 and 500.",
    )?;
    let task = MoveTaskStart {
        source_arn: required(input.source_arn, "SourceArn")?,
        destination_arn: input.destination_arn,
        per_second,
    };
    Ok(StartMoveTaskOutput {
        task_handle: backend.start_move_task(task).await?,
    })
}

pub(crate) async fn cancel_message_move_task(
    backend: &dyn Backend,
    _ctx: &Context,
    input: CancelMessageMoveTaskInput,
) -> Result<CancelMoveTaskOutput> {
    let handle = required(input.task_handle, "TaskHandle")?;
    Ok(CancelMoveTaskOutput {
        approximate_number_of_messages_moved: backend.cancel_move_task(&handle).await?,
    })
}

pub(crate) async fn list_message_move_tasks(
    backend: &dyn Backend,
    _ctx: &Context,
    input: ListMessageMoveTasksInput,
) -> Result<ListMoveTasksOutput> {
    let max = optional_u32(
        input.max_results,
        "MaxResults",
        "You must enter a number that's between 1 and 10.",
    )?;
    let source_arn = required(input.source_arn, "SourceArn")?;
    let tasks = backend.list_move_tasks(&source_arn, max).await?;
    let results = tasks
        .into_iter()
        .map(|t| MoveTaskResult {
            task_handle: t.task_handle,
            status: t.status.as_str().to_string(),
            source_arn: t.source_arn,
            destination_arn: t.destination_arn,
            max_number_of_messages_per_second: t.max_per_second,
            approximate_number_of_messages_moved: t.moved,
            approximate_number_of_messages_to_move: t.to_move,
            failure_reason: t.failure_reason,
            started_timestamp: t.started_ms,
        })
        .collect();
    Ok(ListMoveTasksOutput { results })
}

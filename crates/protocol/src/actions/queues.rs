//! The queue life cycle, attributes, tags and permissions.

use leasehold_backend::{Backend, Page, Pairs, Permission, QueueListing};
use leasehold_engine::QueuePage;

use super::{checked, Context};
use crate::convert::to_u32;
use crate::error::Result;
use crate::shapes::*;

fn pairs(map: Option<StringMap>) -> Pairs {
    map.unwrap_or_default().into_iter().collect()
}

pub(crate) async fn create_queue(
    backend: &dyn Backend,
    ctx: &Context,
    input: CreateQueueInput,
) -> Result<QueueUrlOutput> {
    let queue = ctx.queue_named(backend, &required(input.queue_name, "QueueName")?);
    backend
        .create_queue(&queue, pairs(input.attributes), pairs(input.tags))
        .await?;
    Ok(QueueUrlOutput {
        queue_url: ctx.url(backend, &queue),
    })
}

pub(crate) async fn get_queue_url(
    backend: &dyn Backend,
    ctx: &Context,
    input: GetQueueUrlInput,
) -> Result<QueueUrlOutput> {
    let name = required(input.queue_name, "QueueName")?;
    // Another account's queue, when the owner is named (`access` has checked the caller may).
    let queue = match &input.queue_owner_aws_account_id {
        Some(owner) => backend
            .naming()
            .queue_key_in(Some(owner), ctx.region.as_deref(), &name),
        None => ctx.queue_named(backend, &name),
    };
    backend.queue_exists(&queue).await?;
    Ok(QueueUrlOutput {
        queue_url: ctx.url(backend, &queue),
    })
}

pub(crate) async fn delete_queue(
    backend: &dyn Backend,
    ctx: &Context,
    input: QueueUrlInput,
) -> Result<NoOutput> {
    backend
        .delete_queue(&ctx.queue(backend, input.queue_url)?)
        .await?;
    Ok(NoOutput {})
}

pub(crate) async fn purge_queue(
    backend: &dyn Backend,
    ctx: &Context,
    input: QueueUrlInput,
) -> Result<NoOutput> {
    backend.purge(&ctx.queue(backend, input.queue_url)?).await?;
    Ok(NoOutput {})
}

/// A listing's MaxResults, held to AWS's range.
pub(super) fn max_results(value: Option<i64>) -> Result<Option<usize>> {
    value
        .map(|n| {
            to_u32(
                n,
                "MaxResults",
                "MaxResults must be an integer between 1 and 1000.",
            )
            .map(|n| n as usize)
        })
        .transpose()
}

/// A listing's page: its MaxResults, and its NextToken unless empty.
pub(super) fn page(max: Option<i64>, next_token: Option<String>) -> Result<Page> {
    Ok(Page {
        max: max_results(max)?,
        next_token: next_token.filter(|t| !t.is_empty()),
    })
}

/// A page of queue keys as URLs, and the token of the next page.
pub(super) fn urls(
    ctx: &Context,
    backend: &dyn Backend,
    page: QueuePage,
) -> (Vec<String>, Option<String>) {
    let urls = page.names.iter().map(|n| ctx.url(backend, n)).collect();
    (urls, page.next_token)
}

pub(crate) async fn list_queues(
    backend: &dyn Backend,
    ctx: &Context,
    input: ListQueuesInput,
) -> Result<ListQueuesOutput> {
    let listing = QueueListing {
        account: ctx.account.clone(),
        region: ctx.region.clone(),
        prefix: input.queue_name_prefix,
        page: page(input.max_results, input.next_token)?,
    };
    let (queue_urls, next_token) = urls(ctx, backend, backend.list_queues(listing).await?);
    Ok(ListQueuesOutput {
        queue_urls,
        next_token,
    })
}

pub(crate) async fn get_queue_attributes(
    backend: &dyn Backend,
    ctx: &Context,
    input: GetQueueAttributesInput,
) -> Result<AttributesOutput> {
    let queue = ctx.queue(backend, input.queue_url)?;
    let names = input.attribute_names.unwrap_or_default();
    let attributes = backend.get_attributes(&queue, names).await?;
    Ok(AttributesOutput {
        attributes: attributes.into_iter().collect(),
    })
}

pub(crate) async fn set_queue_attributes(
    backend: &dyn Backend,
    ctx: &Context,
    input: SetQueueAttributesInput,
) -> Result<NoOutput> {
    let queue = ctx.queue(backend, input.queue_url)?;
    backend
        .set_attributes(&queue, pairs(input.attributes))
        .await?;
    Ok(NoOutput {})
}

pub(crate) async fn tag_queue(
    backend: &dyn Backend,
    ctx: &Context,
    input: TagQueueInput,
) -> Result<NoOutput> {
    let queue = ctx.queue(backend, input.queue_url)?;
    let tags = checked(backend, &queue, required(input.tags, "Tags")).await?;
    backend.tag(&queue, pairs(Some(tags))).await?;
    Ok(NoOutput {})
}

pub(crate) async fn untag_queue(
    backend: &dyn Backend,
    ctx: &Context,
    input: UntagQueueInput,
) -> Result<NoOutput> {
    let queue = ctx.queue(backend, input.queue_url)?;
    let keys = checked(backend, &queue, required(input.tag_keys, "TagKeys")).await?;
    backend.untag(&queue, keys).await?;
    Ok(NoOutput {})
}

pub(crate) async fn list_queue_tags(
    backend: &dyn Backend,
    ctx: &Context,
    input: QueueUrlInput,
) -> Result<TagsOutput> {
    let queue = ctx.queue(backend, input.queue_url)?;
    let tags = backend.list_tags(&queue).await?;
    Ok(TagsOutput {
        tags: tags.into_iter().collect(),
    })
}

pub(crate) async fn add_permission(
    backend: &dyn Backend,
    ctx: &Context,
    input: AddPermissionInput,
) -> Result<NoOutput> {
    let queue = ctx.queue(backend, input.queue_url)?;
    let permission = (|| {
        Ok(Permission {
            label: required(input.label, "Label")?,
            accounts: required(input.aws_account_ids, "AWSAccountIds")?,
            actions: required(input.actions, "Actions")?,
        })
    })();
    let permission = checked(backend, &queue, permission).await?;
    backend.add_permission(&queue, permission).await?;
    Ok(NoOutput {})
}

pub(crate) async fn remove_permission(
    backend: &dyn Backend,
    ctx: &Context,
    input: RemovePermissionInput,
) -> Result<NoOutput> {
    let queue = ctx.queue(backend, input.queue_url)?;
    let label = checked(backend, &queue, required(input.label, "Label")).await?;
    backend.remove_permission(&queue, &label).await?;
    Ok(NoOutput {})
}

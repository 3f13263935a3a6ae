//! Queues declared in the config file, made so at start: a missing queue is created, one that
//! exists with other attributes or tags is updated and each change logged, one that matches
//! is left alone, so applying the same declarations twice changes nothing. Queues whose
//! RedrivePolicy names another declared queue come after it.

use std::collections::BTreeMap;

use leasehold_backend::{Backend, BackendError};
use leasehold_engine::EngineError;

/// One `[[queues]]` table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeclaredQueue {
    pub name: String,
    /// The owning account; None: the server's own.
    pub account: Option<String>,
    /// SQS attribute names and values, as CreateQueue takes them.
    pub attributes: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
}

/// What applying one declaration did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    Created,
    Unchanged,
    /// The attributes and tags that were changed, each as `name: old -> new`.
    Updated(Vec<String>),
}

#[derive(Debug, thiserror::Error)]
#[error("queue `{queue}`: {source}")]
pub struct DeclareError {
    pub queue: String,
    pub source: BackendError,
}

/// Makes every declared queue so, in an order where dead-letter targets come first, and
/// logs what changed. Answers what was done to each, in the declarations' order.
pub async fn declare_queues(
    backend: &dyn Backend,
    declared: &[DeclaredQueue],
) -> Result<Vec<(String, Applied)>, DeclareError> {
    let mut done = BTreeMap::new();
    for queue in in_dependency_order(backend, declared) {
        let applied = declare(backend, queue)
            .await
            .map_err(|source| DeclareError {
                queue: queue.name.clone(),
                source,
            })?;
        match &applied {
            Applied::Created => tracing::info!(queue = %queue.name, "declared queue created"),
            Applied::Updated(changes) => {
                for change in changes {
                    tracing::info!(queue = %queue.name, %change, "declared queue updated");
                }
            }
            Applied::Unchanged => {
                tracing::debug!(queue = %queue.name, "declared queue as declared")
            }
        }
        done.insert(queue.name.clone(), applied);
    }
    Ok(declared
        .iter()
        .filter_map(|q| Some((q.name.clone(), done.remove(&q.name)?)))
        .collect())
}

fn key_of(backend: &dyn Backend, queue: &DeclaredQueue) -> String {
    backend
        .naming()
        .queue_key_in(queue.account.as_deref(), None, &queue.name)
}

/// Declarations ordered so that a queue comes after the declared queue its RedrivePolicy
/// targets; a cycle (which the engine refuses anyway) keeps the declared order.
fn in_dependency_order<'a>(
    backend: &dyn Backend,
    declared: &'a [DeclaredQueue],
) -> Vec<&'a DeclaredQueue> {
    let naming = backend.naming();
    let target = |q: &DeclaredQueue| {
        let policy = q.attributes.get("RedrivePolicy")?;
        let json: serde_json::Value = serde_json::from_str(policy).ok()?;
        naming.key_of_arn(json["deadLetterTargetArn"].as_str()?)
    };
    let mut left: Vec<&DeclaredQueue> = declared.iter().collect();
    let mut ordered = Vec::with_capacity(left.len());
    while !left.is_empty() {
        let waiting_on_another = |q: &DeclaredQueue, left: &[&DeclaredQueue]| {
            target(q).is_some_and(|t| {
                left.iter()
                    .any(|other| key_of(backend, other) == t && other.name != q.name)
            })
        };
        let ready = left.iter().position(|q| !waiting_on_another(q, &left));
        ordered.push(left.remove(ready.unwrap_or(0)));
    }
    ordered
}

async fn declare(backend: &dyn Backend, queue: &DeclaredQueue) -> Result<Applied, BackendError> {
    let key = key_of(backend, queue);
    let pairs = |map: &BTreeMap<String, String>| {
        map.iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    match backend.queue_exists(&key).await {
        Err(BackendError::Engine(EngineError::QueueDoesNotExist)) => {
            backend
                .create_queue(&key, pairs(&queue.attributes), pairs(&queue.tags))
                .await?;
            return Ok(Applied::Created);
        }
        other => other?,
    }
    let mut changes = Vec::new();
    let current: BTreeMap<String, String> = backend
        .get_attributes(&key, vec!["All".to_string()])
        .await?
        .into_iter()
        .collect();
    let changed: Vec<(String, String)> = queue
        .attributes
        .iter()
        .filter(|(name, value)| !same_value(current.get(*name), value))
        .map(|(name, value)| {
            let old = current.get(name).map_or("(unset)", String::as_str);
            changes.push(format!("{name}: {old} -> {value}"));
            (name.clone(), value.clone())
        })
        .collect();
    if !changed.is_empty() {
        backend.set_attributes(&key, changed).await?;
    }
    let tags: BTreeMap<String, String> = backend.list_tags(&key).await?.into_iter().collect();
    let retagged: Vec<(String, String)> = queue
        .tags
        .iter()
        .filter(|(name, value)| tags.get(*name) != Some(*value))
        .map(|(name, value)| {
            let old = tags.get(name).map_or("(unset)", String::as_str);
            changes.push(format!("tag {name}: {old} -> {value}"));
            (name.clone(), value.clone())
        })
        .collect();
    if !retagged.is_empty() {
        backend.tag(&key, retagged).await?;
    }
    Ok(if changes.is_empty() {
        Applied::Unchanged
    } else {
        Applied::Updated(changes)
    })
}

/// Whether an attribute's current value is the declared one: the same text, or the same JSON
/// document once every number and boolean is read as text (`"maxReceiveCount": "5"` is `5`).
fn same_value(current: Option<&String>, declared: &str) -> bool {
    let Some(current) = current else {
        return false;
    };
    if current == declared {
        return true;
    }
    let parse = |text: &str| {
        serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .map(textual)
    };
    matches!((parse(current), parse(declared)), (Some(a), Some(b)) if a == b && a.is_object())
}

fn textual(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Number(n) => Value::String(n.to_string()),
        Value::Bool(b) => Value::String(b.to_string()),
        Value::Array(items) => Value::Array(items.into_iter().map(textual).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, textual(v))).collect())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::same_value;

    #[test]
    fn a_redrive_policy_written_with_a_string_count_is_the_same_policy() {
        let current = r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":5}"#.to_string();
        assert!(same_value(
            Some(&current),
            r#"{"maxReceiveCount":"5","deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq"}"#
        ));
        assert!(!same_value(
            Some(&current),
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":6}"#
        ));
        assert!(same_value(Some(&"30".to_string()), "30"));
        assert!(!same_value(Some(&"30".to_string()), "31"));
        assert!(!same_value(None, "30"));
    }
}

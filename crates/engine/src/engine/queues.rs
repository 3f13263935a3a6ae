//! Queue life cycle, attributes, tags and permissions.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::regions::name_of;
use super::Change;
use super::{paginate, Engine, Naming, QueueCell, QueuePage};
use crate::error::{EngineError, Result};
use crate::queue::{Queue, QueueCounts, QueueStats, Removed};
use crate::settings::{parse_bool, QueueSettings};

/// A deleted queue's name cannot be reused for this long.
const QUEUE_NAME_COOLDOWN_MS: u64 = 60_000;
/// PurgeQueue may run once per this period per queue.
const PURGE_COOLDOWN_MS: u64 = 60_000;
const MAX_TAGS: usize = 50;
const MAX_TAG_KEY_CHARS: usize = 128;
const MAX_TAG_VALUE_CHARS: usize = 256;

/// Queue names: 1..80 of `[A-Za-z0-9_-]`, and a FIFO queue's ends in `.fifo`.
pub fn validate_queue_name(name: &str) -> Result<()> {
    let base = name.strip_suffix(".fifo").unwrap_or(name);
    let ok = !base.is_empty()
        && name.len() <= 80
        && base
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(EngineError::InvalidParameterValue(
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
                .into(),
        ))
    }
}

/// The per-account queue quota: a new queue is refused once its account holds `limit`.
/// The PostgreSQL backend, whose engines hold only the queues a command touches, counts in
/// the database and asks the same question.
pub fn check_queue_room(account: &str, held: usize, limit: usize) -> Result<()> {
    if held < limit {
        Ok(())
    } else {
        Err(EngineError::OverLimit(format!(
            "Account {account} already has {held} queues, the most this server allows ({limit})."
        )))
    }
}

/// AWS's quotas for a queue's tags: at most 50, keys of 1 to 128 characters, values of at
/// most 256.
fn check_tags(name: &str, tags: &[(String, String)], count: usize) -> Result<()> {
    if count > MAX_TAGS {
        return Err(EngineError::InvalidParameterValue(format!(
            "Too many tags added for queue {name}."
        )));
    }
    for (key, value) in tags {
        let key_chars = key.chars().count();
        if key_chars == 0 || key_chars > MAX_TAG_KEY_CHARS {
            return Err(EngineError::InvalidParameterValue(format!(
                "Tag keys must be 1 to {MAX_TAG_KEY_CHARS} characters long; one is {key_chars}."
            )));
        }
        let value_chars = value.chars().count();
        if value_chars > MAX_TAG_VALUE_CHARS {
            return Err(EngineError::InvalidParameterValue(format!(
                "Tag values can be at most {MAX_TAG_VALUE_CHARS} characters long; the one of {key} is {value_chars}."
            )));
        }
    }
    Ok(())
}

/// What ListQueues asks for.
#[derive(Clone, Copy, Debug, Default)]
pub struct QueueListing<'a> {
    /// None: the own account.
    pub account: Option<&'a str>,
    /// None: the own region.
    pub region: Option<&'a str>,
    pub prefix: Option<&'a str>,
    pub max_results: Option<usize>,
    pub next_token: Option<&'a str>,
}

/// ListQueues over any set of queue keys: those in the listing's region whose name starts
/// with its prefix, one page of them. The engine lists its own keys with it; a backend that
/// keeps keys elsewhere lists them by the same rules.
pub fn list_queue_keys<'k>(
    naming: &Naming,
    keys: impl Iterator<Item = &'k String>,
    listing: QueueListing,
) -> Result<QueuePage> {
    let region = naming.region_or_own(listing.region);
    let account = listing.account.unwrap_or(&naming.account_id);
    let names = keys
        .filter(|key| {
            let (r, name) = naming.key_parts(key);
            r == region
                && naming.key_account(key) == account
                && listing.prefix.is_none_or(|p| name.starts_with(p))
        })
        .cloned()
        .collect();
    paginate(names, listing.max_results, listing.next_token)
}

impl Engine {
    pub fn create_queue(
        &mut self,
        name: &str,
        attributes: &[(String, String)],
        tags: &[(String, String)],
    ) -> Result<()> {
        validate_queue_name(name_of(name))?;
        let mut fifo = false;
        let mut said_not_fifo = false;
        let mut requested = Vec::with_capacity(attributes.len());
        for (key, value) in attributes {
            match key.as_str() {
                "FifoQueue" if parse_bool(key, value)? => fifo = true,
                "FifoQueue" => said_not_fifo = true,
                _ => requested.push((key.as_str(), value.as_str())),
            }
        }
        if fifo != name.ends_with(".fifo") {
            return Err(EngineError::InvalidParameterValue(
                "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length."
                    .into(),
            ));
        }
        if said_not_fifo {
            // A standard queue knows no FifoQueue attribute, not even "false".
            return Err(EngineError::InvalidAttributeName("FifoQueue".into()));
        }
        let mut defaults = QueueSettings::new(fifo);
        defaults.sqs_managed_sse = self.config.encrypts_at_rest;
        let settings = defaults.with_applied(requested.iter().copied())?;
        self.check_encryption(&settings)?;
        let now = self.clock.now_ms();
        if let Some(existing) = self.queues.get(name) {
            let existing = existing.head();
            // CreateQueue is idempotent only for the attributes the caller names.
            for (key, _) in &requested {
                if existing.meta.settings.get(key) != settings.get(key) {
                    return Err(EngineError::QueueAlreadyExists(key.to_string()));
                }
            }
            return Ok(());
        }
        self.deleted_at
            .retain(|_, at| now < *at + QUEUE_NAME_COOLDOWN_MS);
        if self.deleted_at.contains_key(name) {
            return Err(EngineError::QueueDeletedRecently);
        }
        check_tags(name_of(name), tags, tags.len())?;
        self.check_redrive(name, &settings)?;
        let account = self.naming.key_account(name);
        let held = self.queues_per_account.get(account).copied().unwrap_or(0);
        check_queue_room(account, held, self.config.max_queues_per_account)?;
        let fifo = settings.fifo;
        let mut head = Queue::new(self.next_queue_id, settings, now, self.sealer.clone());
        self.next_queue_id += 1;
        head.meta.tags = tags.iter().cloned().collect();
        head.meta.stripes = if fifo {
            1
        } else {
            self.config.stripes.clamp(1, super::MAX_STRIPES) as u32
        };
        head.changes.enabled = self.config.track_changes;
        // The other stripes are made when first needed, their records written then.
        head.touch();
        self.insert_queue(name.to_string(), QueueCell::new(head, Vec::new()));
        self.note(name);
        self.engine_changed();
        Ok(())
    }

    /// Adds a queue to the table and to its account's count.
    pub(super) fn insert_queue(&mut self, name: String, cell: QueueCell) {
        let account = self.naming.key_account(&name).to_string();
        *self.queues_per_account.entry(account).or_default() += 1;
        self.queues.insert(name, cell);
    }

    pub fn delete_queue(&mut self, name: &str) -> Result<()> {
        let queue = self
            .queues
            .remove(name)
            .ok_or(EngineError::QueueDoesNotExist)?;
        let account = self.naming.key_account(name);
        if let Some(held) = self.queues_per_account.get_mut(account) {
            *held -= 1;
            if *held == 0 {
                self.queues_per_account.remove(account);
            }
        }
        self.deleted_at
            .insert(name.to_string(), self.clock.now_ms());
        if self.config.track_changes {
            self.dirty_queues.remove(name);
            self.pending.push(Change::QueueDeleted {
                queue_id: queue.id,
                stripes: queue.count() as u32,
            });
        }
        self.engine_changed();
        self.discard(Removed::new(queue.into_inner()));
        Ok(())
    }

    pub fn queue_exists(&self, name: &str) -> Result<()> {
        self.queue(name).map(|_| ())
    }

    /// The `limit` oldest messages of a queue (of all its stripes), changing nothing (the
    /// dashboard's peek).
    pub fn peek(&self, name: &str, limit: usize) -> Result<Vec<crate::Peeked>> {
        let now = self.clock.now_ms();
        let cell = self.cell(name)?;
        let mut peeked: Vec<crate::Peeked> = cell
            .made_stripes()
            .flat_map(|stripe| cell.lock(stripe).peek(now, limit))
            .collect();
        peeked.sort_by_key(|p| p.sent_ms);
        peeked.truncate(limit);
        Ok(peeked)
    }

    /// ListQueues: the keys of the queues of the listing's account and region whose name
    /// starts with its prefix, in order, paginated by an opaque token.
    pub fn list_queues(&self, listing: QueueListing) -> Result<QueuePage> {
        list_queue_keys(&self.naming, self.queues.keys(), listing)
    }

    /// The id of the queue's current incarnation.
    pub fn queue_id(&self, name: &str) -> Result<u64> {
        self.queue(name).map(|q| q.meta.id)
    }

    pub fn settings(&self, name: &str) -> Result<QueueSettings> {
        self.queue(name).map(|q| q.meta.settings.clone())
    }

    /// The queue's counters: its stripes' added up.
    pub fn stats(&self, name: &str) -> Result<QueueStats> {
        let cell = self.cell(name)?;
        let mut stats = QueueStats::default();
        for stripe in cell.made_stripes() {
            stats.add(&cell.lock(stripe).meta.stats);
        }
        Ok(stats)
    }

    pub fn counts(&mut self, name: &str) -> Result<QueueCounts> {
        self.with_sink(|e, sink| e.counts_striped(name, sink))
    }

    /// The next instant at which a message of this queue becomes receivable by itself.
    pub fn next_due(&self, name: &str) -> Option<u64> {
        let cell = self.cell(name).ok()?;
        cell.made_stripes()
            .filter_map(|stripe| cell.lock(stripe).next_due())
            .min()
    }

    /// GetQueueAttributes: see `Engine::attributes`.
    pub fn get_attributes(
        &mut self,
        name: &str,
        names: &[String],
    ) -> Result<Vec<(String, String)>> {
        self.with_sink(|e, sink| e.attributes(name, names, sink))
    }

    pub fn set_attributes(&mut self, name: &str, attributes: &[(String, String)]) -> Result<()> {
        let now = self.clock.now_ms();
        let queue = self.queue(name)?;
        let fifo = queue.meta.settings.fifo;
        let mut changed = Vec::with_capacity(attributes.len());
        for (key, value) in attributes {
            match key.as_str() {
                // Fixed at creation: saying again what a FIFO queue is changes nothing.
                "FifoQueue" if fifo && parse_bool(key, value)? => {}
                // A FIFO queue cannot stop being one; a standard queue has no such attribute.
                "FifoQueue" if fifo => {
                    return Err(EngineError::InvalidAttributeValueReason(
                        "Invalid value for the parameter FifoQueue. Reason: Modifying queue type \
                         is not supported."
                            .into(),
                    ))
                }
                "FifoQueue" => return Err(EngineError::InvalidAttributeName(key.clone())),
                _ => changed.push((key.as_str(), value.as_str())),
            }
        }
        let redrive_set = changed.iter().any(|(key, _)| *key == "RedrivePolicy");
        let sse_set = changed
            .iter()
            .any(|(key, _)| *key == "SqsManagedSseEnabled");
        let settings = queue.meta.settings.with_applied(changed)?;
        drop(queue);
        // Only when asked now: a queue restored with it on (from a server that encrypted)
        // keeps taking changes of its other attributes.
        if sse_set {
            self.check_encryption(&settings)?;
        }
        // Only a RedrivePolicy being set is checked against its target: one set before
        // stands (its target may since be gone, which turns dead-lettering off), and a
        // change of any other attribute must not fail because of it.
        if redrive_set {
            self.check_redrive(name, &settings)?;
        }
        let (mut queue, _) = self.queue_mut(name)?;
        queue.meta.settings = settings;
        queue.meta.modified_ms = now;
        Ok(())
    }

    /// Refuses SSE-SQS where the store cannot encrypt at rest (`EngineConfig::
    /// encrypts_at_rest`). SSE-KMS is kept as asked there, as before: its key id is a
    /// reference to a key outside the server, which Leasehold records and shows.
    fn check_encryption(&self, settings: &QueueSettings) -> Result<()> {
        if settings.sqs_managed_sse && !self.config.encrypts_at_rest {
            return Err(EngineError::InvalidAttributeValueReason(
                "Invalid value for the parameter SqsManagedSseEnabled. Reason: this server's store does not encrypt messages at rest, so it cannot honour true.".into(),
            ));
        }
        Ok(())
    }

    pub fn purge(&mut self, name: &str) -> Result<()> {
        let (cell, now) = self.stripes_now(name)?;
        let queue_id = cell.id;
        if cell
            .stripe_mut(0)
            .meta
            .last_purge_ms
            .is_some_and(|at| now < at + PURGE_COOLDOWN_MS)
        {
            return Err(EngineError::PurgeQueueInProgress(name_of(name).to_string()));
        }
        // Past every stripe's numbers: what is below is gone, whichever stripe held it.
        let below_seq = cell.stripes_mut().map(|q| q.next_seq()).max().unwrap_or(1);
        let removed: Vec<Removed> = cell
            .stripes_mut()
            .map(|queue| {
                queue.touch();
                queue.purge(now, below_seq)
            })
            .collect();
        cell.refresh();
        if self.config.track_changes {
            self.pending.push(Change::Purged {
                queue_id,
                below_seq,
            });
        }
        removed.into_iter().for_each(|r| self.discard(r));
        Ok(())
    }

    pub fn tag_queue(&mut self, name: &str, tags: &[(String, String)]) -> Result<()> {
        let (mut queue, _) = self.queue_mut(name)?;
        let mut next = queue.meta.tags.clone();
        next.extend(tags.iter().cloned());
        check_tags(name_of(name), tags, next.len())?;
        queue.meta.tags = next;
        Ok(())
    }

    pub fn untag_queue(&mut self, name: &str, keys: &[String]) -> Result<()> {
        let (mut queue, _) = self.queue_mut(name)?;
        for key in keys {
            queue.meta.tags.remove(key);
        }
        Ok(())
    }

    pub fn list_tags(&self, name: &str) -> Result<BTreeMap<String, String>> {
        self.queue(name).map(|q| q.meta.tags.clone())
    }

    /// AddPermission: adds a statement to the queue's Policy, as AWS builds it.
    pub fn add_permission(
        &mut self,
        name: &str,
        label: &str,
        accounts: &[String],
        actions: &[String],
    ) -> Result<()> {
        let arn = self.queue_arn(name);
        let (mut queue, _) = self.queue_mut(name)?;
        let invalid = |param: &str, value: &str, reason: &str| {
            EngineError::out_of_range(param, value, reason)
        };
        let label_ok = !label.is_empty()
            && label.len() <= 80
            && label
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !label_ok {
            return Err(invalid("Label", label, "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"));
        }
        if accounts.is_empty() {
            return Err(EngineError::MissingParameter("AWSAccountIds".into()));
        }
        if actions.is_empty() {
            return Err(EngineError::MissingParameter("Actions".into()));
        }
        if let Some(bad) = actions
            .iter()
            .find(|a| !PERMISSION_ACTIONS.contains(&a.as_str()))
        {
            return Err(invalid(
                "Actions",
                bad,
                "Only the queue owner is allowed to invoke this action.",
            ));
        }
        let mut policy: Value = match &queue.meta.settings.policy {
            Some(raw) => serde_json::from_str(raw).unwrap_or_else(|_| json!({})),
            // The policy version AWS writes for AddPermission (its recorded answers).
            None => json!({"Version": "2008-10-17", "Id": format!("{arn}/SQSDefaultPolicy")}),
        };
        let statements = policy
            .as_object_mut()
            .map(|o| o.entry("Statement").or_insert_with(|| json!([])))
            .and_then(Value::as_array_mut)
            .ok_or_else(|| EngineError::InvalidAttributeValue("Policy".into()))?;
        if statements.iter().any(|s| s["Sid"] == label) {
            return Err(invalid("Label", label, "Already exists."));
        }
        let one_or_many = |items: Vec<String>| {
            if items.len() == 1 {
                json!(items[0])
            } else {
                json!(items)
            }
        };
        statements.push(json!({
            "Sid": label,
            "Effect": "Allow",
            "Principal": {"AWS": one_or_many(accounts.iter().map(|a| format!("arn:aws:iam::{a}:root")).collect())},
            "Action": one_or_many(actions.iter().map(|a| format!("SQS:{a}")).collect()),
            "Resource": arn,
        }));
        let policy = policy.to_string();
        if policy.len() > crate::settings::MAX_POLICY_BYTES {
            return Err(EngineError::OverLimit(format!(
                "The queue's policy would grow past {} bytes.",
                crate::settings::MAX_POLICY_BYTES
            )));
        }
        queue.meta.settings.policy = Some(policy);
        Ok(())
    }

    /// RemovePermission: drops the statement with this label from the queue's Policy.
    pub fn remove_permission(&mut self, name: &str, label: &str) -> Result<()> {
        let (mut queue, _) = self.queue_mut(name)?;
        let not_found = || EngineError::out_of_range("Label", label, "can't find label.");
        let mut policy: Value = queue
            .meta
            .settings
            .policy
            .as_deref()
            .and_then(|raw| serde_json::from_str(raw).ok())
            .ok_or_else(not_found)?;
        let statements = policy["Statement"].as_array_mut().ok_or_else(not_found)?;
        let before = statements.len();
        statements.retain(|s| s["Sid"] != label);
        if statements.len() == before {
            return Err(not_found());
        }
        let empty = statements.is_empty();
        queue.meta.settings.policy = (!empty).then(|| policy.to_string());
        Ok(())
    }
}

/// Actions that AddPermission may grant.
const PERMISSION_ACTIONS: &[&str] = &[
    "*",
    "SendMessage",
    "ReceiveMessage",
    "DeleteMessage",
    "ChangeMessageVisibility",
    "GetQueueAttributes",
    "GetQueueUrl",
    "ListDeadLetterSourceQueues",
    "PurgeQueue",
    "ListQueueTags",
];

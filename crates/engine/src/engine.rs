//! The engine: every queue of one account and region, and the SQS operations on them.
//!
//! Synchronous and deterministic: given the same clock readings, seed and commands, it gives
//! the same replies. Callers serialise access (the server holds it behind a mutex).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::clock::Clock;
use crate::error::{EngineError, Result};
use crate::message::{Delivery, NewMessage};
use crate::queue::{DeleteOutcome, LeaseMode, Queue, QueueCounts, QueueStats, ReceiveParams};
use crate::receipt::{Receipt, ReceiptSealer};
use crate::settings::{QueueSettings, MAX_VISIBILITY_TIMEOUT_S};

/// A deleted queue's name cannot be reused for this long.
const QUEUE_NAME_COOLDOWN_MS: u64 = 60_000;
/// PurgeQueue may run once per this period per queue.
const PURGE_COOLDOWN_MS: u64 = 60_000;
const MAX_TAGS: usize = 50;
pub const MAX_LIST_RESULTS: usize = 1000;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub lease_mode: LeaseMode,
    pub region: String,
    pub account_id: String,
    /// Seals receipt handles; must stay the same for handles to outlive a restart.
    pub receipt_key: [u8; 16],
    /// Seeds message ids, so a simulation replays exactly.
    pub seed: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            lease_mode: LeaseMode::Aws,
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
            receipt_key: [0; 16],
            seed: 0,
        }
    }
}

pub struct Engine {
    clock: Arc<dyn Clock>,
    config: EngineConfig,
    sealer: ReceiptSealer,
    rng: StdRng,
    queues: HashMap<String, Queue>,
    deleted_at: HashMap<String, u64>,
    next_queue_id: u64,
}

/// One page of ListQueues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuePage {
    pub names: Vec<String>,
    pub next_token: Option<String>,
}

/// Queue names: 1..80 of `[A-Za-z0-9_-]`.
pub fn validate_queue_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 80
        && name
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

impl Engine {
    pub fn new(clock: Arc<dyn Clock>, config: EngineConfig) -> Self {
        Engine {
            clock,
            sealer: ReceiptSealer::new(config.receipt_key),
            rng: StdRng::seed_from_u64(config.seed),
            config,
            queues: HashMap::new(),
            deleted_at: HashMap::new(),
            next_queue_id: 1,
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    pub fn queue_arn(&self, name: &str) -> String {
        format!(
            "arn:aws:sqs:{}:{}:{}",
            self.config.region, self.config.account_id, name
        )
    }

    fn queue(&self, name: &str) -> Result<&Queue> {
        self.queues.get(name).ok_or(EngineError::QueueDoesNotExist)
    }

    /// The queue, brought up to the present.
    fn queue_now(&mut self, name: &str) -> Result<(&mut Queue, u64)> {
        let now = self.clock.now_ms();
        let queue = self
            .queues
            .get_mut(name)
            .ok_or(EngineError::QueueDoesNotExist)?;
        queue.tick(now);
        Ok((queue, now))
    }

    /// Opens a handle and checks it was issued by this incarnation of the queue.
    fn open_receipt(&self, queue: &Queue, handle: &str) -> Result<Receipt> {
        match self.sealer.open(handle) {
            Some(receipt) if receipt.queue_id == queue.id => Ok(receipt),
            _ => Err(EngineError::ReceiptHandleIsInvalid(handle.to_string())),
        }
    }

    pub fn create_queue(
        &mut self,
        name: &str,
        attributes: &[(String, String)],
        tags: &[(String, String)],
    ) -> Result<()> {
        validate_queue_name(name)?;
        let mut requested = Vec::with_capacity(attributes.len());
        for (key, value) in attributes {
            match key.as_str() {
                "FifoQueue" if value == "false" => {}
                "FifoQueue" if value == "true" => {
                    return Err(EngineError::InvalidParameterValue(
                        "FIFO queues are not supported by this server yet.".into(),
                    ))
                }
                "FifoQueue" => return Err(EngineError::InvalidAttributeValue(key.clone())),
                _ => requested.push((key.as_str(), value.as_str())),
            }
        }
        let settings = QueueSettings::default().with_applied(requested.iter().copied())?;
        let now = self.clock.now_ms();
        if let Some(existing) = self.queues.get(name) {
            // CreateQueue is idempotent only for the attributes the caller names.
            for (key, _) in &requested {
                if existing.settings.get(key) != settings.get(key) {
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
        check_tags(name, tags.len())?;
        let mut queue = Queue::new(self.next_queue_id, settings, now);
        self.next_queue_id += 1;
        queue.tags = tags.iter().cloned().collect();
        self.queues.insert(name.to_string(), queue);
        Ok(())
    }

    pub fn delete_queue(&mut self, name: &str) -> Result<()> {
        self.queues
            .remove(name)
            .ok_or(EngineError::QueueDoesNotExist)?;
        self.deleted_at
            .insert(name.to_string(), self.clock.now_ms());
        Ok(())
    }

    pub fn queue_exists(&self, name: &str) -> Result<()> {
        self.queue(name).map(|_| ())
    }

    /// Names in order, optionally by prefix, paginated by an opaque token.
    pub fn list_queues(
        &self,
        prefix: Option<&str>,
        max_results: Option<usize>,
        next_token: Option<&str>,
    ) -> Result<QueuePage> {
        if let Some(max) = max_results {
            if !(1..=MAX_LIST_RESULTS).contains(&max) {
                return Err(EngineError::out_of_range(
                    "MaxResults",
                    max,
                    "MaxResults must be an integer between 1 and 1000.",
                ));
            }
        }
        let after = match next_token {
            None => None,
            Some(token) => Some(
                URL_SAFE_NO_PAD
                    .decode(token)
                    .ok()
                    .and_then(|bytes| String::from_utf8(bytes).ok())
                    .ok_or_else(|| {
                        EngineError::InvalidParameterValue("Invalid NextToken value.".into())
                    })?,
            ),
        };
        let mut names: Vec<&String> = self
            .queues
            .keys()
            .filter(|n| prefix.is_none_or(|p| n.starts_with(p)))
            .filter(|n| after.as_ref().is_none_or(|a| n.as_str() > a.as_str()))
            .collect();
        names.sort();
        let limit = max_results.unwrap_or(MAX_LIST_RESULTS);
        let more = names.len() > limit && max_results.is_some();
        names.truncate(limit);
        let next_token = more
            .then(|| {
                names
                    .last()
                    .map(|last| URL_SAFE_NO_PAD.encode(last.as_bytes()))
            })
            .flatten();
        Ok(QueuePage {
            names: names.into_iter().cloned().collect(),
            next_token,
        })
    }

    pub fn settings(&self, name: &str) -> Result<&QueueSettings> {
        self.queue(name).map(|q| &q.settings)
    }

    pub fn stats(&self, name: &str) -> Result<QueueStats> {
        self.queue(name).map(|q| q.stats.clone())
    }

    pub fn counts(&mut self, name: &str) -> Result<QueueCounts> {
        self.queue_now(name).map(|(q, _)| q.counts())
    }

    /// The next instant at which a message of this queue becomes receivable by itself.
    pub fn next_due(&self, name: &str) -> Option<u64> {
        self.queues.get(name).and_then(Queue::next_due)
    }

    /// GetQueueAttributes: `All`, or the names asked for, in a stable order.
    pub fn get_attributes(
        &mut self,
        name: &str,
        names: &[String],
    ) -> Result<Vec<(String, String)>> {
        let all = names.is_empty() || names.iter().any(|n| n == "All");
        if !all {
            if let Some(unknown) = names
                .iter()
                .find(|n| !QueueSettings::known_names().any(|k| k == n.as_str()))
            {
                return Err(EngineError::InvalidAttributeName(unknown.clone()));
            }
        }
        let arn = self.queue_arn(name);
        let (queue, _) = self.queue_now(name)?;
        let counts = queue.counts();
        let mut out = Vec::new();
        for key in QueueSettings::known_names() {
            if !all && !names.iter().any(|n| n == key) {
                continue;
            }
            let value = match key {
                "ApproximateNumberOfMessages" => Some(counts.visible.to_string()),
                "ApproximateNumberOfMessagesNotVisible" => Some(counts.not_visible.to_string()),
                "ApproximateNumberOfMessagesDelayed" => Some(counts.delayed.to_string()),
                "CreatedTimestamp" => Some((queue.created_ms / 1000).to_string()),
                "LastModifiedTimestamp" => Some((queue.modified_ms / 1000).to_string()),
                "QueueArn" => Some(arn.clone()),
                settable => queue.settings.get(settable),
            };
            if let Some(value) = value {
                out.push((key.to_string(), value));
            }
        }
        out.sort();
        Ok(out)
    }

    pub fn set_attributes(&mut self, name: &str, attributes: &[(String, String)]) -> Result<()> {
        let now = self.clock.now_ms();
        let queue = self
            .queues
            .get_mut(name)
            .ok_or(EngineError::QueueDoesNotExist)?;
        let settings = queue
            .settings
            .with_applied(attributes.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        queue.settings = settings;
        queue.modified_ms = now;
        Ok(())
    }

    pub fn purge(&mut self, name: &str) -> Result<()> {
        let (queue, now) = self.queue_now(name)?;
        if queue
            .last_purge_ms
            .is_some_and(|at| now < at + PURGE_COOLDOWN_MS)
        {
            return Err(EngineError::PurgeQueueInProgress(name.to_string()));
        }
        queue.purge(now);
        Ok(())
    }

    fn next_message_id(&mut self) -> [u8; 16] {
        self.rng.random()
    }

    /// SendMessage: validates against the queue's limits, then stores. Returns the message id.
    pub fn send(&mut self, name: &str, message: NewMessage) -> Result<String> {
        let max_size = self.queue(name)?.settings.max_message_size;
        message.validate(max_size)?;
        let id = self.next_message_id();
        let (queue, now) = self.queue_now(name)?;
        Ok(queue.send(now, message, id))
    }

    /// SendMessageBatch: the batch's total size is checked first; then each entry on its own.
    pub fn send_batch(
        &mut self,
        name: &str,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<Result<String>>> {
        let max_size = self.queue(name)?.settings.max_message_size as usize;
        let total: usize = messages.iter().map(NewMessage::size).sum();
        if total > max_size {
            return Err(EngineError::BatchRequestTooLong(max_size, total));
        }
        Ok(messages.into_iter().map(|m| self.send(name, m)).collect())
    }

    /// ReceiveMessage without waiting: leases what is ready now.
    pub fn receive(
        &mut self,
        name: &str,
        max_messages: u32,
        visibility_s: Option<u32>,
    ) -> Result<Vec<Delivery>> {
        if !(1..=10).contains(&max_messages) {
            return Err(EngineError::out_of_range(
                "MaxNumberOfMessages",
                max_messages,
                "Must be between 1 and 10, if provided.",
            ));
        }
        if let Some(v) = visibility_s.filter(|v| *v > MAX_VISIBILITY_TIMEOUT_S) {
            return Err(EngineError::out_of_range(
                "VisibilityTimeout",
                v,
                "Must be >= 0 and <= 43200, if provided.",
            ));
        }
        let sealer = self.sealer.clone();
        let (queue, now) = self.queue_now(name)?;
        let params = ReceiveParams {
            max_messages: max_messages as usize,
            visibility_s: visibility_s.unwrap_or(queue.settings.visibility_timeout_s),
        };
        Ok(queue.receive(now, params, &sealer))
    }

    /// Counts a ReceiveMessage request that returned nothing. Kept apart from `receive`
    /// because a long poll tries several times but is one request.
    pub fn record_empty_receive(&mut self, name: &str) {
        if let Some(queue) = self.queues.get_mut(name) {
            queue.stats.empty_receives += 1;
        }
    }

    pub fn delete_message(&mut self, name: &str, handle: &str) -> Result<DeleteOutcome> {
        let mode = self.config.lease_mode;
        let receipt = self.open_receipt(self.queue(name)?, handle)?;
        let (queue, _) = self.queue_now(name)?;
        Ok(queue.delete(&receipt, mode))
    }

    pub fn change_visibility(&mut self, name: &str, handle: &str, timeout_s: u32) -> Result<()> {
        let mode = self.config.lease_mode;
        let receipt = self.open_receipt(self.queue(name)?, handle)?;
        let (queue, now) = self.queue_now(name)?;
        queue.change_visibility(now, &receipt, handle, timeout_s, mode)
    }

    pub fn tag_queue(&mut self, name: &str, tags: &[(String, String)]) -> Result<()> {
        let queue = self
            .queues
            .get_mut(name)
            .ok_or(EngineError::QueueDoesNotExist)?;
        let mut next = queue.tags.clone();
        next.extend(tags.iter().cloned());
        check_tags(name, next.len())?;
        queue.tags = next;
        Ok(())
    }

    pub fn untag_queue(&mut self, name: &str, keys: &[String]) -> Result<()> {
        let queue = self
            .queues
            .get_mut(name)
            .ok_or(EngineError::QueueDoesNotExist)?;
        for key in keys {
            queue.tags.remove(key);
        }
        Ok(())
    }

    pub fn list_tags(&self, name: &str) -> Result<BTreeMap<String, String>> {
        self.queue(name).map(|q| q.tags.clone())
    }
}

fn check_tags(name: &str, count: usize) -> Result<()> {
    if count > MAX_TAGS {
        return Err(EngineError::InvalidParameterValue(format!(
            "Too many tags added for queue {name}."
        )));
    }
    Ok(())
}

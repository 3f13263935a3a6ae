//! Queue settings: the typed form of SQS's string-named queue attributes, with AWS's ranges.

use crate::error::{EngineError, Result};
use crate::redrive::{RedriveAllowPolicy, RedrivePolicy};

/// The largest queue policy AWS takes, in bytes.
pub const MAX_POLICY_BYTES: usize = 8_192;

/// AWS's default quota of queues in one account, and the most a server may be set to hold.
pub const MAX_QUEUES_PER_ACCOUNT: usize = 1_000_000;

/// The longest a single receive's lease may run, in total, from that receive.
pub const MAX_VISIBILITY_TIMEOUT_S: u32 = 43_200;
pub const MAX_DELAY_S: u32 = 900;
pub const MAX_WAIT_TIME_S: u32 = 20;
pub const MAX_MESSAGE_SIZE: u32 = 1_048_576;
pub const MIN_MESSAGE_SIZE: u32 = 1_024;
pub const MIN_RETENTION_S: u32 = 60;
pub const MAX_RETENTION_S: u32 = 1_209_600;

/// Attributes a client may set, in the order `GetQueueAttributes(All)` lists them.
const SETTABLE: &[&str] = &[
    "DelaySeconds",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "Policy",
    "ReceiveMessageWaitTimeSeconds",
    "VisibilityTimeout",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
    "RedrivePolicy",
    "RedriveAllowPolicy",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
];

/// Settable on FIFO queues only; a standard queue does not know these names.
const FIFO_ONLY: &[&str] = &[
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
];

/// Attributes the queue reports but nobody sets.
pub const READ_ONLY: &[&str] = &[
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
    "FifoQueue",
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSettings {
    pub visibility_timeout_s: u32,
    pub delay_s: u32,
    pub retention_s: u32,
    pub max_message_size: u32,
    pub receive_wait_s: u32,
    pub policy: Option<String>,
    pub kms_master_key_id: Option<String>,
    pub kms_data_key_reuse_s: u32,
    pub sqs_managed_sse: bool,
    /// Fixed at creation: `FifoQueue=true` with a `.fifo` name.
    pub fifo: bool,
    pub content_based_dedup: bool,
    /// DeduplicationScope=messageGroup (else queue).
    pub dedup_per_group: bool,
    /// FifoThroughputLimit=perMessageGroupId (else perQueue).
    pub throughput_per_group: bool,
    pub redrive: Option<RedrivePolicy>,
    pub redrive_allow: Option<RedriveAllowPolicy>,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            visibility_timeout_s: 30,
            delay_s: 0,
            retention_s: 345_600,
            max_message_size: MAX_MESSAGE_SIZE,
            receive_wait_s: 0,
            policy: None,
            kms_master_key_id: None,
            kms_data_key_reuse_s: 300,
            sqs_managed_sse: false,
            fifo: false,
            content_based_dedup: false,
            dedup_per_group: false,
            throughput_per_group: false,
            redrive: None,
            redrive_allow: None,
        }
    }
}

fn parse_in_range(name: &str, value: &str, min: u32, max: u32) -> Result<u32> {
    match value.trim().parse::<u32>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(EngineError::InvalidAttributeValue(name.to_string())),
    }
}

/// A boolean attribute value: `true` or `false` in any case, as AWS reads them (Python's
/// `str(True)` is `"True"`).
pub fn parse_bool(name: &str, value: &str) -> Result<bool> {
    if value.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if value.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(EngineError::InvalidAttributeValue(name.to_string()))
    }
}

impl QueueSettings {
    /// Whether `name` is an attribute that SetQueueAttributes / CreateQueue accept.
    pub fn is_settable(name: &str) -> bool {
        SETTABLE.contains(&name)
    }

    /// Every attribute name `GetQueueAttributes` knows, settable ones first.
    pub fn known_names() -> impl Iterator<Item = &'static str> {
        SETTABLE.iter().chain(READ_ONLY.iter()).copied()
    }

    /// Default settings of a new FIFO or standard queue.
    pub fn new(fifo: bool) -> Self {
        QueueSettings {
            fifo,
            ..QueueSettings::default()
        }
    }

    /// Applies one attribute, validating it as AWS does. Nothing changes on error.
    pub fn apply(&mut self, name: &str, value: &str) -> Result<()> {
        if !self.fifo && FIFO_ONLY.contains(&name) {
            // AWS's recorded words: ContentBasedDeduplication is unknown to a standard queue,
            // the high-throughput pair needs FifoQueue.
            return Err(match name {
                "ContentBasedDeduplication" => EngineError::InvalidAttributeName(name.to_string()),
                _ => EngineError::InvalidAttributeNameReason(format!(
                    "You can specify the {name} only when FifoQueue is set to true."
                )),
            });
        }
        let one_of = |options: [&str; 2]| -> Result<bool> {
            match options.iter().position(|o| *o == value) {
                Some(i) => Ok(i == 1),
                None => Err(EngineError::InvalidAttributeValue(name.to_string())),
            }
        };
        match name {
            "ContentBasedDeduplication" => self.content_based_dedup = parse_bool(name, value)?,
            "DeduplicationScope" => self.dedup_per_group = one_of(["queue", "messageGroup"])?,
            "FifoThroughputLimit" => {
                self.throughput_per_group = one_of(["perQueue", "perMessageGroupId"])?
            }
            "RedrivePolicy" => {
                self.redrive = match value.trim() {
                    "" | "{}" => None,
                    raw => Some(RedrivePolicy::parse(raw)?),
                }
            }
            "RedriveAllowPolicy" => {
                self.redrive_allow = match value.trim() {
                    "" => None,
                    raw => Some(RedriveAllowPolicy::parse(raw)?),
                }
            }
            "VisibilityTimeout" => {
                self.visibility_timeout_s =
                    parse_in_range(name, value, 0, MAX_VISIBILITY_TIMEOUT_S)?
            }
            "DelaySeconds" => self.delay_s = parse_in_range(name, value, 0, MAX_DELAY_S)?,
            "MessageRetentionPeriod" => {
                self.retention_s = parse_in_range(name, value, MIN_RETENTION_S, MAX_RETENTION_S)?
            }
            "MaximumMessageSize" => {
                self.max_message_size =
                    parse_in_range(name, value, MIN_MESSAGE_SIZE, MAX_MESSAGE_SIZE)?
            }
            "ReceiveMessageWaitTimeSeconds" => {
                self.receive_wait_s = parse_in_range(name, value, 0, MAX_WAIT_TIME_S)?
            }
            "KmsDataKeyReusePeriodSeconds" => {
                self.kms_data_key_reuse_s = parse_in_range(name, value, 60, 86_400)?
            }
            "SqsManagedSseEnabled" => {
                // One kind of server-side encryption at a time, as on AWS: SSE-SQS replaces
                // SSE-KMS (whether the server can honour it is `Engine::check_encryption`'s).
                self.sqs_managed_sse = parse_bool(name, value)?;
                if self.sqs_managed_sse {
                    self.kms_master_key_id = None;
                }
            }
            "Policy" => {
                self.policy = if value.is_empty() {
                    None
                } else {
                    // AWS's quota for a queue policy: 8,192 bytes.
                    if value.len() > MAX_POLICY_BYTES {
                        return Err(EngineError::InvalidAttributeValueReason(format!(
                            "Invalid value for the parameter Policy. Reason: A queue policy can be at most {MAX_POLICY_BYTES} bytes; this one is {}.",
                            value.len()
                        )));
                    }
                    serde_json::from_str::<serde_json::Value>(value)
                        .map_err(|_| EngineError::InvalidAttributeValue(name.to_string()))?;
                    Some(value.to_string())
                }
            }
            "KmsMasterKeyId" => {
                self.kms_master_key_id = (!value.is_empty()).then(|| value.to_string());
                if self.kms_master_key_id.is_some() {
                    self.sqs_managed_sse = false;
                }
            }
            other => return Err(EngineError::InvalidAttributeName(other.to_string())),
        }
        Ok(())
    }

    /// Whether the queue's messages are to be encrypted at rest: SSE-SQS, or SSE-KMS (which
    /// Leasehold, having no KMS, honours with its own keys; the key id is kept and shown).
    pub fn encrypted_at_rest(&self) -> bool {
        self.sqs_managed_sse || self.kms_master_key_id.is_some()
    }

    /// Applies a whole map atomically: all attributes are valid, or nothing changes.
    pub fn with_applied<'a>(
        &self,
        attributes: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<QueueSettings> {
        let mut next = self.clone();
        let (mut sse_asked, mut kms_asked) = (false, false);
        for (name, value) in attributes {
            next.apply(name, value)?;
            match name {
                "SqsManagedSseEnabled" => sse_asked = next.sqs_managed_sse,
                "KmsMasterKeyId" => kms_asked = !value.is_empty(),
                _ => {}
            }
        }
        if sse_asked && kms_asked {
            return Err(EngineError::InvalidAttributeValueReason(
                "Invalid value for the parameter SqsManagedSseEnabled. Reason: You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or SQS SSE.".into(),
            ));
        }
        if next.throughput_per_group && !next.dedup_per_group {
            // High-throughput FIFO needs deduplication scoped to the message group.
            return Err(EngineError::InvalidAttributeValue(
                "FifoThroughputLimit".into(),
            ));
        }
        Ok(next)
    }

    /// The string value of a settable attribute, or None when it is unset.
    pub fn get(&self, name: &str) -> Option<String> {
        Some(match name {
            "VisibilityTimeout" => self.visibility_timeout_s.to_string(),
            "DelaySeconds" => self.delay_s.to_string(),
            "MessageRetentionPeriod" => self.retention_s.to_string(),
            "MaximumMessageSize" => self.max_message_size.to_string(),
            "ReceiveMessageWaitTimeSeconds" => self.receive_wait_s.to_string(),
            "SqsManagedSseEnabled" => self.sqs_managed_sse.to_string(),
            "Policy" => self.policy.clone()?,
            "KmsMasterKeyId" => self.kms_master_key_id.clone()?,
            "KmsDataKeyReusePeriodSeconds" => {
                self.kms_master_key_id.as_ref()?;
                self.kms_data_key_reuse_s.to_string()
            }
            "RedrivePolicy" => self.redrive.as_ref()?.to_json(),
            "RedriveAllowPolicy" => self.redrive_allow.as_ref()?.to_json(),
            "FifoQueue" if self.fifo => "true".into(),
            "ContentBasedDeduplication" if self.fifo => self.content_based_dedup.to_string(),
            "DeduplicationScope" if self.fifo => if self.dedup_per_group {
                "messageGroup"
            } else {
                "queue"
            }
            .into(),
            "FifoThroughputLimit" if self.fifo => if self.throughput_per_group {
                "perMessageGroupId"
            } else {
                "perQueue"
            }
            .into(),
            _ => return None,
        })
    }
}

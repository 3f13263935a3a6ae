//! Queue settings: the typed form of SQS's string-named queue attributes, with AWS's ranges.

use crate::error::{EngineError, Result};

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
];

/// Attributes the queue reports but nobody sets.
pub const READ_ONLY: &[&str] = &[
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
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
            sqs_managed_sse: true,
        }
    }
}

fn parse_in_range(name: &str, value: &str, min: u32, max: u32) -> Result<u32> {
    match value.trim().parse::<u32>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(EngineError::InvalidAttributeValue(name.to_string())),
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

    /// Applies one attribute, validating it as AWS does. Nothing changes on error.
    pub fn apply(&mut self, name: &str, value: &str) -> Result<()> {
        match name {
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
                self.sqs_managed_sse = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(EngineError::InvalidAttributeValue(name.to_string())),
                }
            }
            "Policy" => {
                self.policy = if value.is_empty() {
                    None
                } else {
                    serde_json::from_str::<serde_json::Value>(value)
                        .map_err(|_| EngineError::InvalidAttributeValue(name.to_string()))?;
                    Some(value.to_string())
                }
            }
            "KmsMasterKeyId" => {
                self.kms_master_key_id = (!value.is_empty()).then(|| value.to_string())
            }
            other => return Err(EngineError::InvalidAttributeName(other.to_string())),
        }
        Ok(())
    }

    /// Applies a whole map atomically: all attributes are valid, or nothing changes.
    pub fn with_applied<'a>(
        &self,
        attributes: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<QueueSettings> {
        let mut next = self.clone();
        for (name, value) in attributes {
            next.apply(name, value)?;
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
            _ => return None,
        })
    }
}

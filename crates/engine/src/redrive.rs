//! Dead-letter policies: RedrivePolicy on a source queue, RedriveAllowPolicy on a DLQ.

use serde_json::{json, Map, Value};

use crate::error::{EngineError, Result};

pub const MAX_RECEIVE_COUNT: u32 = 1000;
const MAX_ALLOWED_SOURCES: usize = 10;

/// `{"deadLetterTargetArn": ..., "maxReceiveCount": N}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedrivePolicy {
    pub dead_letter_target_arn: String,
    pub max_receive_count: u32,
}

/// Which source queues may name a queue as their dead-letter queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedriveAllowPolicy {
    AllowAll,
    DenyAll,
    ByQueue(Vec<String>),
}

fn invalid(param: &str, raw: &str, reason: &str) -> EngineError {
    EngineError::InvalidParameterValue(format!(
        "Value {raw} for parameter {param} is invalid. Reason: {reason}"
    ))
}

fn json_map(param: &str, raw: &str, what: &str) -> Result<Map<String, Value>> {
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(invalid(
            param,
            raw,
            &format!("{what} is not a valid JSON map."),
        )),
    }
}

impl RedrivePolicy {
    pub fn parse(raw: &str) -> Result<RedrivePolicy> {
        let p = "RedrivePolicy";
        let map = json_map(p, raw, "Redrive policy")?;
        let missing = |attr: &str| {
            invalid(
                p,
                raw,
                &format!("Redrive policy does not contain mandatory attribute: {attr}."),
            )
        };
        let arn = map
            .get("deadLetterTargetArn")
            .ok_or_else(|| missing("deadLetterTargetArn"))?
            .as_str()
            .ok_or_else(|| invalid(p, raw, "deadLetterTargetArn must be a string."))?;
        let count = match map
            .get("maxReceiveCount")
            .ok_or_else(|| missing("maxReceiveCount"))?
        {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        let count = count
            .filter(|c| (1..=u64::from(MAX_RECEIVE_COUNT)).contains(c))
            .ok_or_else(|| {
                invalid(
                    p,
                    raw,
                    "Invalid value for maxReceiveCount, valid values are from 1 to 1000 both inclusive.",
                )
            })?;
        if map
            .keys()
            .any(|k| k != "deadLetterTargetArn" && k != "maxReceiveCount")
        {
            return Err(invalid(
                p,
                raw,
                "Only deadLetterTargetArn and maxReceiveCount are allowed.",
            ));
        }
        Ok(RedrivePolicy {
            dead_letter_target_arn: arn.to_string(),
            max_receive_count: count as u32,
        })
    }

    pub fn to_json(&self) -> String {
        json!({
            "deadLetterTargetArn": self.dead_letter_target_arn,
            "maxReceiveCount": self.max_receive_count,
        })
        .to_string()
    }
}

impl RedriveAllowPolicy {
    pub fn parse(raw: &str) -> Result<RedriveAllowPolicy> {
        let p = "RedriveAllowPolicy";
        let map = json_map(p, raw, "Redrive allow policy")?;
        let sources: Option<Vec<String>> = match map.get("sourceQueueArns") {
            None => None,
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| invalid(p, raw, "sourceQueueArns must be a list of ARNs."))?,
            ),
            Some(_) => return Err(invalid(p, raw, "sourceQueueArns must be a list of ARNs.")),
        };
        let permission = map.get("redrivePermission").and_then(Value::as_str);
        match (permission, sources) {
            (Some("allowAll"), None) => Ok(RedriveAllowPolicy::AllowAll),
            (Some("denyAll"), None) => Ok(RedriveAllowPolicy::DenyAll),
            (Some("byQueue"), Some(arns)) if !arns.is_empty() && arns.len() <= MAX_ALLOWED_SOURCES => {
                Ok(RedriveAllowPolicy::ByQueue(arns))
            }
            (Some("byQueue"), _) => Err(invalid(
                p,
                raw,
                "Amazon SQS can't create the redrive allow policy. To specify one or more source queues, you must set redrivePermission to byQueue and list 1 to 10 sourceQueueArns.",
            )),
            (Some("allowAll" | "denyAll"), Some(_)) => Err(invalid(
                p,
                raw,
                "Amazon SQS can't create the redrive allow policy. To specify one or more source queues, you must set redrivePermission to byQueue.",
            )),
            _ => Err(invalid(
                p,
                raw,
                "Amazon SQS can't create the redrive allow policy, as it's in an unsupported format.",
            )),
        }
    }

    /// Whether the queue with `source_arn` may use this queue as its DLQ.
    pub fn allows(&self, source_arn: &str) -> bool {
        match self {
            RedriveAllowPolicy::AllowAll => true,
            RedriveAllowPolicy::DenyAll => false,
            RedriveAllowPolicy::ByQueue(arns) => arns.iter().any(|a| a == source_arn),
        }
    }

    pub fn to_json(&self) -> String {
        match self {
            RedriveAllowPolicy::AllowAll => json!({"redrivePermission": "allowAll"}),
            RedriveAllowPolicy::DenyAll => json!({"redrivePermission": "denyAll"}),
            RedriveAllowPolicy::ByQueue(arns) => {
                json!({"redrivePermission": "byQueue", "sourceQueueArns": arns})
            }
        }
        .to_string()
    }
}

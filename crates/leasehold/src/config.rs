//! `leasehold serve --config leasehold.toml`: every `serve` flag is a key of the same name
//! (`data-dir = "..."`), `LEASEHOLD_*` environment variables and flags override the file, and
//! `[[queues]]` tables declare queues to make so at start; `[[access-keys]]` tables add
//! credentials beside a `credentials` file. An invalid file is one error naming the key and
//! its line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use leasehold_server::DeclaredQueue;
use serde::{Deserialize, Serialize};

/// The file: the flags' values, then the tables.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConfigFile {
    pub bind: Option<String>,
    pub in_memory: Option<bool>,
    pub postgres: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub fsync: Option<String>,
    pub region: Option<String>,
    pub account_id: Option<String>,
    pub time_travel: Option<bool>,
    pub lease_mode: Option<String>,
    pub idle_timeout: Option<u64>,
    pub credentials: Option<PathBuf>,
    pub admin_token: Option<String>,
    pub admin_bind: Option<String>,
    pub allow_anonymous: Option<bool>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub public_url: Option<String>,
    /// `allowed-host = ["queue.internal", "leasehold"]`.
    pub allowed_host: Option<Vec<String>>,
    pub otlp_endpoint: Option<String>,
    pub trace_sample_ratio: Option<f64>,
    pub memory_limit: Option<String>,
    pub body_cache_mb: Option<u64>,
    pub disk_reserve_mb: Option<u64>,
    pub encryption_key_file: Option<PathBuf>,
    pub max_queues_per_account: Option<u64>,
    pub max_in_flight_per_queue: Option<u64>,
    pub stripes: Option<u64>,
    /// The one flag of `leasehold` itself rather than of `serve`.
    pub log_format: Option<String>,
    #[serde(default, skip_serializing)]
    pub access_keys: Vec<AccessKey>,
    #[serde(default, skip_serializing)]
    pub queues: Vec<QueueTable>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct AccessKey {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub account_id: Option<String>,
}

/// A `[[queues]]` table. Attribute values may be written as TOML strings, numbers, booleans,
/// or (for the JSON-valued RedrivePolicy, RedriveAllowPolicy and Policy) tables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueTable {
    pub name: String,
    pub account: Option<String>,
    #[serde(default)]
    pub attributes: BTreeMap<String, toml::Value>,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// toml's own message names the line, the column and the key.
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl ConfigFile {
    pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        ConfigFile::parse(&text).map_err(|message| ConfigError::Invalid {
            path: shown,
            message,
        })
    }

    pub fn parse(text: &str) -> Result<ConfigFile, String> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| one_line(&e.to_string()))?;
        for (i, queue) in file.queues.iter().enumerate() {
            for (name, value) in &queue.attributes {
                attribute_text(value).map_err(|why| {
                    format!(
                        "line {}: queues[{i}] ({}): attribute {name}: {why}",
                        line_of(text, name),
                        queue.name
                    )
                })?;
            }
        }
        Ok(file)
    }

    /// Every flag the file sets, as `(argument id, value)`: the ids are the flags' own
    /// (`data_dir` for `--data-dir`), so clap takes them as defaults. `log_format` belongs to
    /// the `leasehold` command, the rest to `serve`.
    pub fn flag_defaults(&self) -> Vec<(String, String)> {
        let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(self) else {
            return Vec::new();
        };
        fields
            .into_iter()
            .filter_map(|(key, value)| {
                let text = match value {
                    serde_json::Value::Null => return None,
                    serde_json::Value::String(s) => s,
                    // A repeatable flag's list, as its comma-separated form.
                    serde_json::Value::Array(items) => items
                        .iter()
                        .filter_map(|item| item.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                    other => other.to_string(),
                };
                Some((key.replace('-', "_"), text))
            })
            .collect()
    }

    /// The declared queues, attribute values as CreateQueue takes them; a RedrivePolicy's
    /// `deadLetterTargetArn` may be a bare queue name, read as that queue's ARN in `naming`.
    pub fn declared_queues(&self, naming: &leasehold_engine::Naming) -> Vec<DeclaredQueue> {
        self.queues
            .iter()
            .map(|table| {
                let attributes = table
                    .attributes
                    .iter()
                    .map(|(name, value)| {
                        let text = attribute_text(value).unwrap_or_default();
                        let text = if name == "RedrivePolicy" {
                            target_as_arn(&text, naming, table.account.as_deref())
                        } else {
                            text
                        };
                        (name.clone(), text)
                    })
                    .collect();
                DeclaredQueue {
                    name: table.name.clone(),
                    account: table.account.clone(),
                    attributes,
                    tags: table.tags.clone(),
                }
            })
            .collect()
    }
}

/// An attribute's value as SQS takes it: text, a number, a boolean, or a table as JSON.
fn attribute_text(value: &toml::Value) -> Result<String, String> {
    match value {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        toml::Value::Table(_) => serde_json::to_string(value).map_err(|e| e.to_string()),
        other => Err(format!(
            "expected a string, number, boolean or table, found {}",
            other.type_str()
        )),
    }
}

fn target_as_arn(policy: &str, naming: &leasehold_engine::Naming, account: Option<&str>) -> String {
    let Ok(mut json) = serde_json::from_str::<serde_json::Value>(policy) else {
        return policy.to_string();
    };
    let Some(target) = json["deadLetterTargetArn"].as_str() else {
        return policy.to_string();
    };
    if target.starts_with("arn:") {
        return policy.to_string();
    }
    let key = naming.queue_key_in(account, None, target);
    json["deadLetterTargetArn"] = naming.queue_arn(&key).into();
    json.to_string()
}

/// toml's messages span several lines (a caret under the key); one line keeps the CLI's
/// rule of one readable line per error.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter_map(|line| match line.split_once(" | ") {
            // `3 | data_dri = "x"`: the offending line itself, which names the key.
            Some((number, text)) if number.chars().all(|c| c.is_ascii_digit()) => {
                Some(format!("`{}`", text.trim()))
            }
            _ if line.is_empty() || line.chars().all(|c| matches!(c, '|' | '^' | ' ')) => None,
            _ => Some(line.to_string()),
        })
        .collect::<Vec<_>>()
        .join(": ")
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|line| line.contains(needle))
        .map_or(0, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_become_defaults_under_their_own_ids() {
        let file = ConfigFile::parse(
            "bind = \"0.0.0.0:9324\"\ndata-dir = \"/var/lib/leasehold\"\nidle-timeout = 30\nallow-anonymous = true\n",
        )
        .unwrap();
        let mut defaults = file.flag_defaults();
        defaults.sort();
        assert_eq!(
            defaults,
            [
                ("allow_anonymous".to_string(), "true".to_string()),
                ("bind".into(), "0.0.0.0:9324".into()),
                ("data_dir".into(), "/var/lib/leasehold".into()),
                ("idle_timeout".into(), "30".into()),
            ]
        );
    }

    #[test]
    fn an_unknown_key_or_a_wrong_type_is_named_with_its_line() {
        let error = ConfigFile::parse("bind = \"127.0.0.1:1\"\ndata_dri = \"x\"\n").unwrap_err();
        assert!(error.contains("line 2"), "{error}");
        assert!(error.contains("data_dri"), "{error}");
        assert!(!error.contains('\n'), "{error}");
        let error = ConfigFile::parse("idle-timeout = \"soon\"\n").unwrap_err();
        assert!(
            error.contains("line 1") && error.contains("idle-timeout"),
            "{error}"
        );
        let error = ConfigFile::parse(
            "[[queues]]\nname = \"q\"\nattributes = { VisibilityTimeout = [1, 2] }\n",
        )
        .unwrap_err();
        assert!(
            error.contains("line 3") && error.contains("VisibilityTimeout"),
            "{error}"
        );
    }

    #[test]
    fn queues_take_numbers_booleans_and_a_redrive_policy_naming_its_target() {
        let file = ConfigFile::parse(
            r#"
[[queues]]
name = "orders-dlq"

[[queues]]
name = "orders"
attributes = { VisibilityTimeout = 60, RedrivePolicy = { deadLetterTargetArn = "orders-dlq", maxReceiveCount = 5 } }
tags = { team = "payments" }

[[queues]]
name = "events.fifo"
attributes = { FifoQueue = true }
"#,
        )
        .unwrap();
        let naming = leasehold_engine::Naming {
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
        };
        let queues = file.declared_queues(&naming);
        assert_eq!(queues.len(), 3);
        assert_eq!(queues[1].attributes["VisibilityTimeout"], "60");
        assert_eq!(
            queues[1].attributes["RedrivePolicy"],
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:orders-dlq","maxReceiveCount":5}"#
        );
        assert_eq!(queues[1].tags["team"], "payments");
        assert_eq!(queues[2].attributes["FifoQueue"], "true");
    }
}

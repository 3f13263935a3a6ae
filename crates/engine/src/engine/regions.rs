//! Regions: one engine holds the queues of every region it is asked about. A queue's key is
//! its bare name in the engine's own region (`EngineConfig::region`), and `region/name` in any
//! other; no queue name contains a `/`, so keys never collide, and a store written before
//! regions existed reads as the engine's own region.

use super::Engine;

/// Between a region and a queue name in a key.
const SEPARATOR: char = '/';

/// Whether `region` may name a region: what SDKs put in a credential scope, `us-east-1` or a
/// made-up `local`. Anything else is not taken as a region.
pub fn is_region(region: &str) -> bool {
    (1..=40).contains(&region.len())
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The queue name a key stands for, without its region.
pub(super) fn name_of(key: &str) -> &str {
    key.split_once(SEPARATOR).map_or(key, |(_, name)| name)
}

/// Where queues live: the engine's own region and its account. Turns names, regions, keys
/// and ARNs into one another without the engine, so a protocol can name queues before it
/// reaches a backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Naming {
    pub region: String,
    pub account_id: String,
}

impl Naming {
    /// The region a request names, or the own one when it names none it can use.
    pub fn region_or_own<'a>(&'a self, region: Option<&'a str>) -> &'a str {
        region.filter(|r| is_region(r)).unwrap_or(&self.region)
    }

    /// The key of queue `name` in `region` (None or an unusable region: the own one).
    /// A name that itself holds a `/` (no valid name does) keeps its region prefix, so it can
    /// neither pass for a queue of another region nor be created.
    pub fn queue_key(&self, region: Option<&str>, name: &str) -> String {
        let region = self.region_or_own(region);
        if region == self.region && !name.contains(SEPARATOR) {
            name.to_string()
        } else {
            format!("{region}{SEPARATOR}{name}")
        }
    }

    /// The region and the name a queue key stands for.
    pub fn key_parts<'a>(&'a self, key: &'a str) -> (&'a str, &'a str) {
        key.split_once(SEPARATOR)
            .unwrap_or((self.region.as_str(), key))
    }

    pub fn queue_arn(&self, key: &str) -> String {
        let (region, name) = self.key_parts(key);
        format!("arn:aws:sqs:{region}:{}:{name}", self.account_id)
    }

    /// The key an ARN of this account names, whether or not such a queue exists.
    pub fn key_of_arn(&self, arn: &str) -> Option<String> {
        let rest = arn.strip_prefix("arn:aws:sqs:")?;
        let (region, rest) = rest.split_once(':')?;
        let name = rest
            .strip_prefix(self.account_id.as_str())?
            .strip_prefix(':')?;
        is_region(region).then(|| self.queue_key(Some(region), name))
    }
}

impl Engine {
    /// How this engine names its queues.
    pub fn naming(&self) -> &Naming {
        &self.naming
    }

    pub fn region_or_own<'a>(&'a self, region: Option<&'a str>) -> &'a str {
        self.naming.region_or_own(region)
    }

    pub fn queue_key(&self, region: Option<&str>, name: &str) -> String {
        self.naming.queue_key(region, name)
    }

    pub fn key_parts<'a>(&'a self, key: &'a str) -> (&'a str, &'a str) {
        self.naming.key_parts(key)
    }

    pub fn queue_arn(&self, key: &str) -> String {
        self.naming.queue_arn(key)
    }

    /// The key of the queue an ARN names, if it is one of this engine's.
    pub fn queue_key_from_arn(&self, arn: &str) -> Option<String> {
        let key = self.naming.key_of_arn(arn)?;
        self.queues.contains_key(&key).then_some(key)
    }

    /// Whether two keys are queues of one region.
    pub(super) fn same_region(&self, a: &str, b: &str) -> bool {
        self.key_parts(a).0 == self.key_parts(b).0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{EngineConfig, ManualClock};

    fn engine() -> Engine {
        Engine::new(Arc::new(ManualClock::new(0)), EngineConfig::default())
    }

    #[test]
    fn the_engines_own_region_keeps_bare_names_and_others_are_prefixed() {
        let e = engine();
        assert_eq!(e.queue_key(None, "q"), "q");
        assert_eq!(e.queue_key(Some("us-east-1"), "q"), "q");
        assert_eq!(e.queue_key(Some("eu-central-1"), "q"), "eu-central-1/q");
        assert_eq!(e.queue_key(Some("Not A Region"), "q"), "q");
        // A name posing as a key of another region stays in its own.
        assert_eq!(
            e.queue_key(None, "eu-central-1/q"),
            "us-east-1/eu-central-1/q"
        );
        assert_eq!(e.key_parts("eu-central-1/q"), ("eu-central-1", "q"));
        assert_eq!(e.key_parts("q"), ("us-east-1", "q"));
        assert_eq!(
            e.queue_arn("eu-central-1/q"),
            "arn:aws:sqs:eu-central-1:000000000000:q"
        );
    }
}

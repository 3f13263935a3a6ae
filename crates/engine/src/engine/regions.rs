//! Regions and accounts: one engine holds the queues of every region and account it is asked
//! about. A queue's key is its bare name in the engine's own region (`EngineConfig::region`)
//! and account, `region/name` in any other region, and `ACCOUNT:` before either for any other
//! account (twelve digits). No queue name contains a `/` or a `:`, so keys never collide, and
//! a store written before regions and accounts existed reads as the engine's own.

use super::Engine;

/// Between a region and a queue name in a key.
const SEPARATOR: char = '/';
/// After another account's id, at the start of a key.
const ACCOUNT_SEPARATOR: char = ':';

/// Whether `region` may name a region: what SDKs put in a credential scope, `us-east-1` or a
/// made-up `local`. Anything else is not taken as a region.
pub fn is_region(region: &str) -> bool {
    (1..=40).contains(&region.len())
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Whether `account` is an account id: twelve digits.
pub fn is_account_id(account: &str) -> bool {
    account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit())
}

/// The queue name a key stands for, without its account and region.
pub fn name_of(key: &str) -> &str {
    let (_, rest) = split_account(key);
    rest.split_once(SEPARATOR).map_or(rest, |(_, name)| name)
}

/// Another account's id and the rest of the key, or None and the whole key.
fn split_account(key: &str) -> (Option<&str>, &str) {
    match key.split_once(ACCOUNT_SEPARATOR) {
        Some((account, rest)) if is_account_id(account) => (Some(account), rest),
        _ => (None, key),
    }
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

    /// The key of queue `name` of the own account in `region` (None or an unusable region:
    /// the own one).
    pub fn queue_key(&self, region: Option<&str>, name: &str) -> String {
        self.queue_key_in(None, region, name)
    }

    /// The key of queue `name` of `account` (None: the own one) in `region`. A name that
    /// itself holds a `/` or a `:` (no valid name does) keeps its region prefix, so it can pass
    /// for a queue of no other region or account, nor be created.
    pub fn queue_key_in(&self, account: Option<&str>, region: Option<&str>, name: &str) -> String {
        let region = self.region_or_own(region);
        let local = if region == self.region && !name.contains([SEPARATOR, ACCOUNT_SEPARATOR]) {
            name.to_string()
        } else {
            format!("{region}{SEPARATOR}{name}")
        };
        match account.filter(|a| *a != self.account_id) {
            Some(account) => format!("{account}{ACCOUNT_SEPARATOR}{local}"),
            None => local,
        }
    }

    /// The account a queue key belongs to.
    pub fn key_account<'a>(&'a self, key: &'a str) -> &'a str {
        split_account(key).0.unwrap_or(&self.account_id)
    }

    /// The region and the name a queue key stands for.
    pub fn key_parts<'a>(&'a self, key: &'a str) -> (&'a str, &'a str) {
        let (_, rest) = split_account(key);
        rest.split_once(SEPARATOR)
            .unwrap_or((self.region.as_str(), rest))
    }

    pub fn queue_arn(&self, key: &str) -> String {
        let (region, name) = self.key_parts(key);
        let account = self.key_account(key);
        format!("arn:aws:sqs:{region}:{account}:{name}")
    }

    /// The key an ARN names, whether or not such a queue exists.
    pub fn key_of_arn(&self, arn: &str) -> Option<String> {
        let rest = arn.strip_prefix("arn:aws:sqs:")?;
        let (region, rest) = rest.split_once(':')?;
        let (account, name) = rest.split_once(':')?;
        (is_region(region) && is_account_id(account))
            .then(|| self.queue_key_in(Some(account), Some(region), name))
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

    /// Whether two keys are queues of one region and one account.
    pub(super) fn same_region(&self, a: &str, b: &str) -> bool {
        self.key_parts(a).0 == self.key_parts(b).0
            && self.naming.key_account(a) == self.naming.key_account(b)
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

    #[test]
    fn other_accounts_keys_start_with_the_account_and_names_cannot_pose_as_them() {
        let n = engine().naming().clone();
        let other = Some("111111111111");
        assert_eq!(n.queue_key_in(other, None, "q"), "111111111111:q");
        assert_eq!(
            n.queue_key_in(other, Some("eu-central-1"), "q"),
            "111111111111:eu-central-1/q"
        );
        assert_eq!(n.queue_key_in(Some("000000000000"), None, "q"), "q");
        assert_eq!(n.key_account("111111111111:eu-central-1/q"), "111111111111");
        assert_eq!(
            n.key_parts("111111111111:eu-central-1/q"),
            ("eu-central-1", "q")
        );
        assert_eq!(
            n.queue_arn("111111111111:q"),
            "arn:aws:sqs:us-east-1:111111111111:q"
        );
        assert_eq!(
            n.key_of_arn("arn:aws:sqs:eu-central-1:111111111111:q")
                .as_deref(),
            Some("111111111111:eu-central-1/q")
        );
        assert_eq!(
            n.key_of_arn("arn:aws:sqs:us-east-1:000000000000:q")
                .as_deref(),
            Some("q")
        );
        // A name holding the separator stays the own account's, and is no valid name.
        let posing = n.queue_key(None, "111111111111:q");
        assert_eq!(posing, "us-east-1/111111111111:q");
        assert_eq!(n.key_account(&posing), "000000000000");
        assert_eq!(name_of(&posing), "111111111111:q");
    }
}

//! FIFO queue state: message groups, the deduplication window and receive-attempt replay.
//!
//! Invariants:
//! - a group is listed in `ready_groups` exactly when its head (oldest member) is Ready, under
//!   the head's ready rank and key. As on AWS, a receive hands out the group's messages from
//!   the head up to the first one that is not Ready; messages in flight further back do not
//!   hold the head. The rank orders groups by when their head last became Ready, so a group
//!   served and released goes behind groups that waited, as AWS serves them;
//! - `dedup` and `attempts` hold only entries younger than five minutes once `expire` ran.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use crate::message::MsgKey;

/// The deduplication id content-based deduplication gives a body: its SHA-256, in hex.
pub fn content_deduplication_id(body: &str) -> String {
    use sha2::Digest;
    use std::fmt::Write;
    let mut out = String::with_capacity(64);
    for b in sha2::Sha256::digest(body.as_bytes()) {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// How long a deduplication id, or a receive attempt id, is remembered.
pub const FIFO_WINDOW_MS: u64 = 5 * 60 * 1000;

#[derive(Default, Debug)]
struct Group {
    members: BTreeSet<MsgKey>,
    listed: Option<Listing>,
}

/// Where a group stands in line: its head's ready rank, then the head's key.
type Listing = (u64, MsgKey);

/// A deduplication key: the group when DeduplicationScope is messageGroup, and the id.
pub type DedupKey = (Option<Arc<str>>, Arc<str>);

/// What a deduplicated send answers with: the original's id and sequence number, remembered
/// until `expires_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Original {
    pub message_id: [u8; 16],
    pub seq: u64,
    pub expires_ms: u64,
}

#[derive(Default, Debug)]
pub(crate) struct FifoState {
    groups: HashMap<Arc<str>, Group>,
    ready_groups: BTreeSet<(Listing, Arc<str>)>,
    dedup: HashMap<DedupKey, Original>,
    dedup_expiry: VecDeque<(u64, DedupKey)>,
    attempts: HashMap<String, Vec<(MsgKey, u32)>>,
    attempt_expiry: VecDeque<(u64, String)>,
}

impl FifoState {
    pub fn add_member(&mut self, group: &Arc<str>, key: MsgKey) {
        self.groups
            .entry(group.clone())
            .or_default()
            .members
            .insert(key);
    }

    pub fn remove_member(&mut self, group: &Arc<str>, key: MsgKey) {
        if let Some(g) = self.groups.get_mut(group) {
            g.members.remove(&key);
        }
    }

    /// The group's oldest message.
    pub fn head(&self, group: &Arc<str>) -> Option<MsgKey> {
        self.groups.get(group)?.members.first().copied()
    }

    /// Lists the group under `head`, or unlists it when `head` is None; drops empty groups.
    pub fn list(&mut self, group: &Arc<str>, head: Option<Listing>) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        if g.listed != head {
            if let Some(old) = g.listed.take() {
                self.ready_groups.remove(&(old, group.clone()));
            }
            if let Some(new) = head {
                self.ready_groups.insert((new, group.clone()));
                g.listed = Some(new);
            }
        }
        // Checked whether or not the listing changed: a group whose last message goes while
        // it is unlisted (in flight) must not linger.
        if g.members.is_empty() {
            self.groups.remove(group);
        }
    }

    /// The deliverable group whose head has been Ready longest, unlisted.
    pub fn pop_ready_group(&mut self) -> Option<Arc<str>> {
        let (_, group) = self.ready_groups.pop_first()?;
        if let Some(g) = self.groups.get_mut(&group) {
            g.listed = None;
        }
        Some(group)
    }

    /// The group's next member after `after` (or its first), in order.
    pub fn next_member(&self, group: &Arc<str>, after: Option<MsgKey>) -> Option<MsgKey> {
        let members = &self.groups.get(group)?.members;
        match after {
            None => members.first().copied(),
            Some(key) => members
                .range((std::ops::Bound::Excluded(key), std::ops::Bound::Unbounded))
                .next()
                .copied(),
        }
    }

    /// Forgets deduplication ids and receive attempts older than the window; returns the
    /// deduplication keys it forgot.
    pub fn expire(&mut self, now: u64) -> Vec<DedupKey> {
        let mut forgotten = Vec::new();
        while self.dedup_expiry.front().is_some_and(|(at, _)| *at <= now) {
            let (_, key) = self.dedup_expiry.pop_front().expect("front exists");
            // A key remembered again after it expired has a later entry; keep that one.
            if self.dedup.get(&key).is_some_and(|o| o.expires_ms <= now) {
                self.dedup.remove(&key);
                forgotten.push(key);
            }
        }
        while self
            .attempt_expiry
            .front()
            .is_some_and(|(at, _)| *at <= now)
        {
            let (_, id) = self.attempt_expiry.pop_front().expect("front exists");
            self.attempts.remove(&id);
        }
        forgotten
    }

    /// Forgets every deduplication id and receive attempt (a purge); returns the
    /// deduplication keys it forgot, in order.
    pub fn forget_all(&mut self) -> Vec<DedupKey> {
        self.dedup_expiry.clear();
        self.attempts.clear();
        self.attempt_expiry.clear();
        let mut forgotten: Vec<DedupKey> = self.dedup.drain().map(|(key, _)| key).collect();
        forgotten.sort();
        forgotten
    }

    pub fn original(&self, key: &DedupKey) -> Option<Original> {
        self.dedup.get(key).copied()
    }

    pub fn remember(&mut self, key: DedupKey, original: Original) {
        self.dedup.insert(key.clone(), original);
        self.dedup_expiry.push_back((original.expires_ms, key));
    }

    pub fn attempt(&self, id: &str) -> Option<&[(MsgKey, u32)]> {
        self.attempts.get(id).map(Vec::as_slice)
    }

    pub fn record_attempt(&mut self, now: u64, id: &str, items: Vec<(MsgKey, u32)>) {
        if self.attempts.insert(id.to_string(), items).is_none() {
            self.attempt_expiry
                .push_back((now + FIFO_WINDOW_MS, id.to_string()));
        }
    }

    /// The group rules, given each member's group, whether it is Ready, and its ready rank
    /// (`lookup`), and how many messages the queue stores: every stored message is a member of
    /// its own group, no group is empty, and a group is listed, under its head's rank and key,
    /// exactly when its head is Ready.
    pub fn check_invariants(
        &self,
        stored: usize,
        lookup: impl Fn(MsgKey) -> Option<(Option<Arc<str>>, bool, u64)>,
    ) -> Result<(), String> {
        let mut members = 0;
        let mut listed = 0;
        for (name, group) in &self.groups {
            let Some(&head) = group.members.first() else {
                return Err(format!("group {name} is empty but kept"));
            };
            for &key in &group.members {
                match lookup(key) {
                    Some((Some(g), _, _)) if g == *name => members += 1,
                    other => return Err(format!("{key:?} of group {name} is {other:?}")),
                }
            }
            let (_, head_ready, rank) = lookup(head).expect("checked above");
            let expected = head_ready.then_some((rank, head));
            if group.listed != expected {
                return Err(format!(
                    "group {name} is listed as {:?}, not {expected:?}",
                    group.listed
                ));
            }
            if let Some(listing) = expected {
                listed += 1;
                if !self.ready_groups.contains(&(listing, name.clone())) {
                    return Err(format!("group {name} is missing from ready_groups"));
                }
            }
        }
        if members != stored || listed != self.ready_groups.len() {
            return Err(format!(
                "groups hold {members} of {stored} messages; {listed} groups listed, {} in ready_groups",
                self.ready_groups.len()
            ));
        }
        Ok(())
    }

    /// Purge: every message is gone, so are the groups. Deduplication ids stay remembered.
    /// Takes every group out, leaving none.
    pub fn take_groups(&mut self) -> impl Send + 'static {
        (
            std::mem::take(&mut self.groups),
            std::mem::take(&mut self.ready_groups),
        )
    }
}

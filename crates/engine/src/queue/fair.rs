//! A standard queue's stripe as a fair queue (`tenants.rs`): counting its tenants' messages
//! in the queue's shared table as they change state, and handing out quiet tenants' ready
//! messages before noisy ones'.
//!
//! A noisy tenant's ready messages are not sought out when it turns noisy: a receive that
//! meets one at the front of `ready` moves it to `noisy_ready` (each message moves at most
//! once a turn), and a receive first moves back every set whose tenant is quiet again. So a
//! queue whose tenants are all quiet receives as it always did, and one with a noisy tenant
//! pays a lock of the tenant table per message of a tenant it meets, but only while a quiet
//! tenant may have a message to hand out: otherwise a lone noisy tenant's messages go as
//! anyone's (`next_ready`).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use super::{Pick, Queue};
use crate::message::{MsgKey, State, StoredMessage};
use crate::tenants::{FairnessReport, Move, TenantCounts, Tenants};

/// How many of a stripe's oldest messages the look for the oldest quiet one walks (under the
/// stripe's lock, at every scrape): past it, the last one walked stands in for it (the oldest
/// quiet one is at most as old).
const OLDEST_QUIET_WALK: usize = 10_000;

impl Queue {
    /// The tenant a message belongs to: its group, on a standard queue.
    pub(super) fn tenant_of<'m>(&self, message: &'m StoredMessage) -> Option<&'m Arc<str>> {
        (!self.meta.settings.fifo)
            .then(|| message.group())
            .flatten()
    }

    /// Tells the queue's tenant table that a message of `tenant` (None: of no group) went
    /// from `from` (its state and the instant it ended) to `to`; `lease_start_ms`: when its
    /// lease began, if it was leased.
    pub(super) fn tenant_moved(
        &self,
        tenant: Option<&Arc<str>>,
        from: Option<(State, u64)>,
        to: Option<State>,
        lease_start_ms: u64,
    ) {
        self.count_tenant(tenant, from, to, lease_start_ms, false);
    }

    /// `tenant_moved` for a message just stored, of `tenant`.
    pub(super) fn tenant_arrived(&self, tenant: Option<&Arc<str>>, state: State, sent: bool) {
        self.count_tenant(tenant, None, Some(state), 0, sent);
    }

    /// `tenant_moved` for a message just taken out of the stripe.
    pub(super) fn tenant_left(&self, message: &StoredMessage) {
        let from = Some((message.state, message.until_ms));
        self.count_tenant(
            self.tenant_of(message),
            from,
            None,
            message.lease_start_ms,
            false,
        );
    }

    fn count_tenant(
        &self,
        group: Option<&Arc<str>>,
        from: Option<(State, u64)>,
        to: Option<State>,
        lease_start_ms: u64,
        sent: bool,
    ) {
        if from.map(|f| f.0) == to {
            return;
        }
        let held_ms = match from {
            Some((State::InFlight, until)) => {
                Some(self.now_ms.min(until).saturating_sub(lease_start_ms))
            }
            _ => None,
        };
        // A message without a group is a tenant of its own: only its processing time counts,
        // and only once the queue has tenants to share it with.
        if group.is_none() && (held_ms.is_none() || !self.tenants.active()) {
            return;
        }
        self.tenants.moved(Move {
            group,
            stripe: self.stripe_index(),
            from: from.map(|f| f.0),
            to,
            now: self.now_ms,
            sent,
            held_ms,
            queue_in_flight: self.flying.get(),
        });
    }

    /// Counts a message without a group leaving or entering Ready.
    pub(super) fn count_plain(&mut self, plain: bool, from: Option<State>, to: Option<State>) {
        if plain {
            let ready = |s: Option<State>| usize::from(s == Some(State::Ready));
            self.plain_ready = (self.plain_ready + ready(to)).saturating_sub(ready(from));
        }
    }

    /// Whether a quiet tenant may have a message to hand out on this stripe: one without a
    /// group here, or a quiet tenant's anywhere (the table counts them, not by stripe).
    pub(crate) fn quiet_may_wait(&self) -> bool {
        self.plain_ready > 0 || self.tenants.quiet_visible() > 0
    }

    /// Takes a ready message out of the noisy tenants' sets (it is not in `ready`).
    pub(super) fn forget_noisy_ready(&mut self, key: MsgKey) {
        let mut emptied = None;
        for (group, ready) in self.noisy_ready.iter_mut() {
            if ready.remove(&key) {
                if ready.is_empty() {
                    emptied = Some(group.clone());
                }
                break;
            }
        }
        if let Some(group) = emptied {
            self.noisy_ready.remove(&group);
        }
    }

    /// The oldest ready message of a standard queue, noisy tenants' too.
    pub(super) fn first_ready(&self) -> Option<&MsgKey> {
        let noisy = self.noisy_ready.values().filter_map(BTreeSet::first);
        noisy.chain(self.ready.first()).min()
    }

    /// Before a receive: every noisy tenant's set whose tenant is quiet now goes back to
    /// `ready`.
    pub(super) fn requiet(&mut self) {
        if self.noisy_ready.is_empty() {
            return;
        }
        let now = self.now_ms;
        let quiet: Vec<Arc<str>> = self
            .noisy_ready
            .keys()
            .filter(|group| !self.tenants.is_noisy(group, now))
            .cloned()
            .collect();
        for group in quiet {
            if let Some(ready) = self.noisy_ready.remove(&group) {
                self.ready.extend(ready);
            }
        }
    }

    /// The ready message a standard queue's receive takes next: the oldest of a quiet
    /// tenant's, then (as `pick` allows) the oldest of the noisy tenant with the fewest in
    /// flight.
    pub(super) fn next_ready(&mut self, pick: Pick) -> Option<MsgKey> {
        if self.tenants.any_noisy() && !self.quiet_may_wait() {
            // No quiet tenant has a message here: a lone noisy tenant's oldest goes, as if
            // no one were noisy (no move to its set, no look at the table per message).
            return match pick {
                Pick::Quiet => None,
                _ if self.tenants.noisy_count() == 1 => self.first_ready().copied(),
                _ => self.fewest_noisy(pick),
            };
        }
        while let Some(&key) = self.ready.first() {
            let noisy = match self.tenants.any_noisy() {
                true => self
                    .messages
                    .get(&key)
                    .and_then(|m| self.tenant_of(m))
                    .filter(|group| self.tenants.is_noisy(group, self.now_ms))
                    .cloned(),
                false => None,
            };
            let Some(group) = noisy else {
                return Some(key);
            };
            self.ready.remove(&key);
            self.noisy_ready.entry(group).or_default().insert(key);
        }
        if pick == Pick::Quiet {
            return None;
        }
        self.fewest_noisy(pick)
    }

    /// The oldest ready message of the noisy tenant with the fewest in flight (`Fewest`: if
    /// none on any stripe has fewer), every one of this stripe's noisy messages moved to its
    /// tenant's set first.
    fn fewest_noisy(&mut self, pick: Pick) -> Option<MsgKey> {
        while let Some(&key) = self.ready.first() {
            let group = self
                .messages
                .get(&key)
                .and_then(|m| self.tenant_of(m))
                .cloned();
            // With no quiet message, every ready one has a noisy tenant; one that had none
            // (counts gone wrong) is handed out rather than stranded.
            let Some(group) = group else {
                return Some(key);
            };
            self.ready.remove(&key);
            self.noisy_ready.entry(group).or_default().insert(key);
        }
        let everywhere = pick == Pick::Fewest;
        let group =
            self.tenants
                .fewest_in_flight(self.noisy_ready.keys(), everywhere, self.now_ms)?;
        self.noisy_ready.get(group)?.first().copied()
    }

    /// The queue's tenant table, shared by its stripes.
    pub(crate) fn tenants(&self) -> &Arc<Tenants> {
        &self.tenants
    }

    /// The noisy tenants, the whole queue's (`Tenants::report`).
    pub(crate) fn fairness(&self) -> FairnessReport {
        self.tenants.report(self.now_ms)
    }

    /// When this stripe's oldest message of a quiet tenant was sent: the noisy tenants are
    /// `noisy`'s groups. Walks at most `OLDEST_QUIET_WALK` messages from the oldest.
    pub(crate) fn oldest_quiet_sent_ms(&self, noisy: &HashSet<&str>) -> Option<u64> {
        if noisy.is_empty() {
            return self.oldest_sent_ms();
        }
        let mut last = None;
        for (key, message) in self.messages.iter().take(OLDEST_QUIET_WALK) {
            let tenant = self.tenant_of(message);
            if !tenant.is_some_and(|group| noisy.contains(&**group)) {
                return Some(key.sent_ms);
            }
            last = Some(key.sent_ms);
        }
        last.filter(|_| self.messages.len() > OLDEST_QUIET_WALK)
    }

    /// Each tenant's messages on this stripe, counted by walking them: for the invariant
    /// checks.
    pub(super) fn walked_tenant_counts(&self) -> std::collections::HashMap<Arc<str>, TenantCounts> {
        let mut counts = std::collections::HashMap::<Arc<str>, TenantCounts>::new();
        for (_, message) in self.messages.iter() {
            if let Some(group) = self.tenant_of(message) {
                let entry = counts.entry(group.clone()).or_default();
                match message.state {
                    State::Ready => entry.visible += 1,
                    State::InFlight => entry.in_flight += 1,
                    State::Delayed => entry.delayed += 1,
                }
            }
        }
        counts
    }

    /// Whether this stripe's tenant counts in the shared table are the ones its messages
    /// make, and its noisy sets hold only their tenants' messages.
    pub(super) fn check_tenants(&self) -> Result<(), String> {
        if self.tenants.active() {
            self.tenants.check()?;
            let walked = self.walked_tenant_counts();
            let table = self.tenants.on_stripe(self.stripe_index());
            if walked != table {
                return Err(format!(
                    "the tenant table holds {table:?} for this stripe; its messages make {walked:?}"
                ));
            }
        }
        for (group, ready) in &self.noisy_ready {
            let strays = ready.iter().filter(|key| {
                self.messages
                    .get(key)
                    .and_then(|m| self.tenant_of(m))
                    .is_none_or(|g| g != group)
            });
            if let Some(stray) = strays.clone().next() {
                return Err(format!(
                    "{stray:?} is in {group}'s noisy set, not its tenant's"
                ));
            }
            if ready.is_empty() {
                return Err(format!("{group}'s noisy set is empty but kept"));
            }
        }
        Ok(())
    }
}

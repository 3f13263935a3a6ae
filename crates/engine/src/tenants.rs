//! Fair queues: a standard queue's tenants, and which of them are noisy, as AWS has them since
//! July 2025 ("How Amazon SQS fair queues work").
//!
//! A tenant is a message group id; a message without one is a tenant of its own, which never
//! holds enough to be noisy and is not tracked here. A tenant is noisy when it holds more than
//! a tenth of the queue's messages in flight and at least 30 of its own, or more than a tenth
//! of the consumers' recent processing time (the time its leases were held, decayed with a
//! one-minute half-life). It stays noisy until its backlog (visible and delayed messages) is
//! gone or it sent nothing for five minutes. While a quiet tenant has a message to hand out,
//! receives take quiet tenants' messages first; among noisy tenants, the one with the fewest in
//! flight first (`queue/fair.rs`). Nothing is dropped or held back otherwise.
//!
//! One table per queue, shared by its stripes like the in-flight count (`quota.rs`): a leaf
//! lock, taken under a stripe's lock and never the other way round, and only once the queue
//! has seen a message with a group (`active`), so a queue without tenants pays one atomic
//! load. Each tenant's counts are kept per stripe as well, so a stripe's purge takes out
//! exactly its own and `Engine::check_invariants` can hold every stripe to its share. What is
//! noisy is not stored: after a restart every tenant starts quiet.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

#[cfg(feature = "shuttle")]
use shuttle::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
#[cfg(not(feature = "shuttle"))]
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::message::State;

/// A tenant holding more than 1/`NOISY_SHARE` of the queue's leases (or of its recent
/// processing time) is noisy...
const NOISY_SHARE: usize = 10;
/// ...by its leases only when it holds at least this many.
const NOISY_MIN_IN_FLIGHT: usize = 30;
/// A noisy tenant that sent nothing for this long is quiet again.
pub const QUIET_AFTER_MS: u64 = 5 * 60 * 1000;
/// Processing time counts half as much after this long.
const PROCESSING_HALF_LIFE_MS: f64 = 60_000.0;
/// A tenant with nothing stored and less recent processing time than this is forgotten.
const FORGET_BELOW_MS: f64 = 1_000.0;
/// The processing-time rule judges no one until the queue ended this many leases lately
/// (decayed like the time itself): the first lease to end would otherwise make its tenant
/// the owner of all the queue's processing time.
const NOISY_MIN_ENDED: f64 = 30.0;
/// A table smaller than this is not looked over for tenants to forget.
const PRUNE_AT_LEAST: usize = 1024;

#[cfg(not(feature = "shuttle"))]
type TableMutex = parking_lot::Mutex<TenantTable>;
#[cfg(feature = "shuttle")]
type TableMutex = shuttle::sync::Mutex<TenantTable>;

/// How many of a tenant's messages are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TenantCounts {
    pub visible: usize,
    pub in_flight: usize,
    pub delayed: usize,
}

impl TenantCounts {
    /// What waits to be handed out: AWS's backlog.
    fn backlog(&self) -> usize {
        self.visible + self.delayed
    }

    fn is_empty(&self) -> bool {
        *self == TenantCounts::default()
    }

    fn slot(&mut self, state: State) -> &mut usize {
        match state {
            State::Ready => &mut self.visible,
            State::InFlight => &mut self.in_flight,
            State::Delayed => &mut self.delayed,
        }
    }

    fn shift(&mut self, from: Option<State>, to: Option<State>) {
        if let Some(from) = from {
            let slot = self.slot(from);
            *slot = slot.saturating_sub(1);
        }
        if let Some(to) = to {
            *self.slot(to) += 1;
        }
    }

    fn take_away(&mut self, other: TenantCounts) {
        self.visible = self.visible.saturating_sub(other.visible);
        self.in_flight = self.in_flight.saturating_sub(other.in_flight);
        self.delayed = self.delayed.saturating_sub(other.delayed);
    }

    fn add(&mut self, other: TenantCounts) {
        self.visible += other.visible;
        self.in_flight += other.in_flight;
        self.delayed += other.delayed;
    }
}

/// A sum that halves every `PROCESSING_HALF_LIFE_MS`: "recent" processing time.
#[derive(Clone, Copy, Debug, Default)]
struct Recent {
    value: f64,
    at_ms: u64,
}

impl Recent {
    fn at(&self, now: u64) -> f64 {
        let passed = now.saturating_sub(self.at_ms) as f64;
        self.value * (-passed / PROCESSING_HALF_LIFE_MS).exp2()
    }

    fn add(&mut self, now: u64, amount: f64) {
        let now = now.max(self.at_ms);
        *self = Recent {
            value: self.at(now) + amount,
            at_ms: now,
        };
    }
}

#[derive(Debug, Default)]
struct Tenant {
    counts: TenantCounts,
    /// The same, stripe by stripe.
    per_stripe: Vec<TenantCounts>,
    last_send_ms: u64,
    noisy: bool,
    /// Recent processing time (ms) and leases ended: their ratio is the recent mean hold.
    busy: Recent,
    ended: Recent,
}

#[derive(Debug, Default)]
struct TenantTable {
    tenants: HashMap<Arc<str>, Tenant, foldhash::quality::RandomState>,
    /// The queue's recent processing time, every tenant's (those without a group too).
    busy: Recent,
    /// Leases ended lately, every tenant's: the processing-time rule judges no one before
    /// `NOISY_MIN_ENDED` of them.
    ended: Recent,
    /// The tenants whose `noisy` is set.
    noisy: BTreeSet<Arc<str>>,
    /// Visible messages of the tenants not noisy.
    quiet_visible: usize,
    /// The table is looked over for tenants to forget when it holds this many.
    prune_at: usize,
    /// The five-minute rule is next applied to the noisy tenants at this instant (once a
    /// second at most: `moved` runs for every change).
    expire_at: u64,
}

impl TenantTable {
    /// `moved` for a message of tenant `group`.
    fn count(&mut self, group: &Arc<str>, change: &Move) {
        let now = change.now;
        // Looked at only when a lease ends: two exponentials fewer for every other change.
        let queue_recent = change
            .held_ms
            .map(|_| (self.busy.at(now), self.ended.at(now)));
        let tenant = self.tenants.entry(group.clone()).or_default();
        tenant.counts.shift(change.from, change.to);
        if !tenant.noisy {
            let visible = |s: Option<State>| usize::from(s == Some(State::Ready));
            self.quiet_visible =
                (self.quiet_visible + visible(change.to)).saturating_sub(visible(change.from));
        }
        let stripe = change.stripe as usize;
        if tenant.per_stripe.len() <= stripe {
            tenant
                .per_stripe
                .resize(stripe + 1, TenantCounts::default());
        }
        tenant.per_stripe[stripe].shift(change.from, change.to);
        if change.sent {
            tenant.last_send_ms = now;
        }
        let mut noisy_now = false;
        if change.to == Some(State::InFlight) && change.from != Some(State::InFlight) {
            let own = tenant.counts.in_flight;
            noisy_now |= own >= NOISY_MIN_IN_FLIGHT && own * NOISY_SHARE > change.queue_in_flight;
        }
        if let (Some(held), Some((queue_busy, queue_ended))) = (change.held_ms, queue_recent) {
            tenant.busy.add(now, held as f64);
            tenant.ended.add(now, 1.0);
            let share = tenant.busy.at(now) * NOISY_SHARE as f64 > queue_busy;
            noisy_now |= share && queue_ended >= NOISY_MIN_ENDED;
        }
        // A tenant that sent nothing for five minutes, or has nothing waiting, is quiet.
        let sending = now.saturating_sub(tenant.last_send_ms) < QUIET_AFTER_MS;
        let noisy = (tenant.noisy || noisy_now) && sending && tenant.counts.backlog() > 0;
        let forget = !noisy && tenant.counts.is_empty() && tenant.busy.at(now) < FORGET_BELOW_MS;
        if noisy != tenant.noisy {
            self.set_noisy(group, noisy);
        }
        if forget {
            self.tenants.remove(group);
        }
    }

    /// Forgets every tenant with nothing stored, not noisy, whose recent processing time
    /// has faded below `FORGET_BELOW_MS`; looks again when the table has doubled since.
    fn prune(&mut self, now: u64) {
        self.tenants
            .retain(|_, t| t.noisy || !t.counts.is_empty() || t.busy.at(now) >= FORGET_BELOW_MS);
        self.prune_at = (2 * self.tenants.len()).max(PRUNE_AT_LEAST);
    }

    /// Marks a tenant noisy or quiet, keeping `noisy` true.
    fn set_noisy(&mut self, group: &Arc<str>, noisy: bool) {
        let Some(tenant) = self.tenants.get_mut(group) else {
            return;
        };
        if tenant.noisy != noisy {
            let visible = tenant.counts.visible;
            self.quiet_visible = match noisy {
                true => self.quiet_visible.saturating_sub(visible),
                false => self.quiet_visible + visible,
            };
        }
        tenant.noisy = noisy;
        if noisy {
            self.noisy.insert(group.clone());
        } else {
            self.noisy.remove(group);
        }
    }

    /// Makes quiet every noisy tenant that sent nothing for `QUIET_AFTER_MS` by `now`.
    fn expire(&mut self, now: u64) {
        let lapsed: Vec<Arc<str>> = self
            .noisy
            .iter()
            .filter(|g| {
                self.tenants
                    .get(*g)
                    .is_none_or(|t| now.saturating_sub(t.last_send_ms) >= QUIET_AFTER_MS)
            })
            .cloned()
            .collect();
        for group in lapsed {
            self.set_noisy(&group, false);
        }
    }
}

/// One change to one message, as `Tenants::moved` is told it.
pub(crate) struct Move<'a> {
    /// The message's tenant: None for one without a group.
    pub group: Option<&'a Arc<str>>,
    pub stripe: u32,
    /// Its state before (None: it arrives) and after (None: it leaves).
    pub from: Option<State>,
    pub to: Option<State>,
    pub now: u64,
    /// It is a send.
    pub sent: bool,
    /// A lease that ended, and how long it was held.
    pub held_ms: Option<u64>,
    /// The queue's messages in flight, all stripes (`InFlightCount`), after the change.
    pub queue_in_flight: usize,
}

/// A noisy tenant as the lease report shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoisyTenant {
    pub group: String,
    pub counts: TenantCounts,
    /// Its recent leases' mean hold time, if any ended lately.
    pub mean_hold_ms: Option<u64>,
    /// Its share of the queue's recent processing time, in thousandths.
    pub processing_permille: u32,
}

/// The noisy tenants of a queue, and their messages together.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FairnessReport {
    pub noisy: Vec<NoisyTenant>,
    /// The noisy tenants' messages, all of them together.
    pub noisy_counts: TenantCounts,
}

/// A queue's tenants, shared by its stripes.
#[derive(Debug, Default)]
pub(crate) struct Tenants {
    table: TableMutex,
    active: AtomicBool,
    noisy: AtomicUsize,
    /// `TenantTable::quiet_visible`, for a look without the lock.
    quiet_visible: AtomicUsize,
}

impl Tenants {
    /// Whether the queue ever held a message with a group since it was made or restored.
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Whether some tenant is noisy now (a look without the lock).
    pub fn any_noisy(&self) -> bool {
        self.noisy_count() > 0
    }

    /// How many tenants are noisy now (a look without the lock).
    pub fn noisy_count(&self) -> usize {
        self.noisy.load(Ordering::Relaxed)
    }

    /// How many messages quiet tenants have to hand out now, all stripes (a look without the
    /// lock; messages without a group are not among them).
    pub fn quiet_visible(&self) -> usize {
        self.quiet_visible.load(Ordering::Relaxed)
    }

    /// Publishes what the table holds for looks without the lock.
    /// Stored only when changed: every stripe reads these at each receive, and a store
    /// would take their cache line from each of them.
    fn publish(&self, table: &TenantTable) {
        let store = |atomic: &AtomicUsize, value: usize| {
            if atomic.load(Ordering::Relaxed) != value {
                atomic.store(value, Ordering::Relaxed);
            }
        };
        store(&self.noisy, table.noisy.len());
        store(&self.quiet_visible, table.quiet_visible);
    }

    #[cfg(not(feature = "shuttle"))]
    fn lock(&self) -> parking_lot::MutexGuard<'_, TenantTable> {
        self.table.lock()
    }

    #[cfg(feature = "shuttle")]
    fn lock(&self) -> shuttle::sync::MutexGuard<'_, TenantTable> {
        self.table
            .lock()
            .expect("never poisoned: nothing panics under it")
    }

    /// Counts a message's change of state (arrival, lease, expiry, delete...), and decides
    /// who is noisy on what it changed.
    pub fn moved(&self, change: Move) {
        if change.group.is_some() && !self.active() {
            self.active.store(true, Ordering::Relaxed);
        }
        let mut table = self.lock();
        let table = &mut *table;
        let now = change.now;
        if let Some(held) = change.held_ms {
            table.busy.add(now, held as f64);
            table.ended.add(now, 1.0);
        }
        if now >= table.expire_at {
            table.expire(now);
            table.expire_at = now + 1000;
        }
        if let Some(group) = change.group {
            table.count(group, &change);
        }
        if table.tenants.len() >= table.prune_at {
            table.prune(now);
        }
        self.publish(table);
    }

    /// Whether the tenant is noisy at `now`: one that sent nothing for `QUIET_AFTER_MS` is
    /// made quiet here.
    pub fn is_noisy(&self, group: &Arc<str>, now: u64) -> bool {
        let mut table = self.lock();
        let Some(tenant) = table.tenants.get(group).filter(|t| t.noisy) else {
            return false;
        };
        if now.saturating_sub(tenant.last_send_ms) < QUIET_AFTER_MS {
            return true;
        }
        table.set_noisy(group, false);
        self.publish(&table);
        false
    }

    /// Of `groups` (a stripe's noisy tenants with ready messages), the one with the fewest
    /// messages in flight (the first of equals). `everywhere`: only if no noisy tenant with
    /// a visible message on any stripe has fewer.
    pub fn fewest_in_flight<'g>(
        &self,
        groups: impl Iterator<Item = &'g Arc<str>>,
        everywhere: bool,
        now: u64,
    ) -> Option<&'g Arc<str>> {
        let mut table = self.lock();
        table.expire(now);
        self.publish(&table);
        let in_flight = |g: &Arc<str>| table.tenants.get(g).map_or(0, |t| t.counts.in_flight);
        let (group, fewest) = groups.map(|g| (g, in_flight(g))).min_by_key(|(_, n)| *n)?;
        let elsewhere = table.noisy.iter().filter_map(|g| {
            let tenant = table.tenants.get(g)?;
            (tenant.counts.visible > 0).then_some(tenant.counts.in_flight)
        });
        match everywhere && elsewhere.min().is_some_and(|least| least < fewest) {
            true => None,
            false => Some(group),
        }
    }

    /// Takes out everything stripe `stripe` held: it was purged.
    pub fn purged(&self, stripe: u32) {
        let mut table = self.lock();
        let table = &mut *table;
        for tenant in table.tenants.values_mut() {
            if let Some(held) = tenant.per_stripe.get_mut(stripe as usize) {
                let held = std::mem::take(held);
                if !tenant.noisy {
                    table.quiet_visible = table.quiet_visible.saturating_sub(held.visible);
                }
                tenant.counts.take_away(held);
            }
        }
        let drained: Vec<Arc<str>> = table
            .noisy
            .iter()
            .filter(|g| {
                table
                    .tenants
                    .get(*g)
                    .is_none_or(|t| t.counts.backlog() == 0)
            })
            .cloned()
            .collect();
        for group in drained {
            table.set_noisy(&group, false);
        }
        table.tenants.retain(|_, t| !t.counts.is_empty() || t.noisy);
        self.publish(table);
    }

    /// Each tenant's counts on stripe `stripe`, as this table holds them: for the invariant
    /// checks.
    pub fn on_stripe(&self, stripe: u32) -> HashMap<Arc<str>, TenantCounts> {
        let table = self.lock();
        table
            .tenants
            .iter()
            .filter_map(|(group, t)| {
                let counts = *t.per_stripe.get(stripe as usize)?;
                (!counts.is_empty()).then(|| (group.clone(), counts))
            })
            .collect()
    }

    /// The table agrees with itself: its noisy set and count are the tenants marked noisy,
    /// its quiet visible count theirs who are not.
    pub fn check(&self) -> Result<(), String> {
        let table = self.lock();
        let marked: BTreeSet<&Arc<str>> = table
            .tenants
            .iter()
            .filter(|(_, t)| t.noisy)
            .map(|(g, _)| g)
            .collect();
        if marked != table.noisy.iter().collect() {
            return Err(format!("noisy set {:?}, marked {marked:?}", table.noisy));
        }
        let quiet: usize = table
            .tenants
            .values()
            .filter(|t| !t.noisy)
            .map(|t| t.counts.visible)
            .sum();
        if quiet != table.quiet_visible {
            return Err(format!(
                "quiet tenants hold {quiet} visible; the count says {}",
                table.quiet_visible
            ));
        }
        Ok(())
    }

    /// The noisy tenants at `now`, most in flight first, and their messages together.
    pub fn report(&self, now: u64) -> FairnessReport {
        // A queue that never saw a group id has no tenant to report (a scrape asks every
        // queue, most of them ungrouped).
        if !self.active() {
            return FairnessReport::default();
        }
        let mut table = self.lock();
        table.expire(now);
        self.publish(&table);
        let total_busy = table.busy.at(now);
        let mut report = FairnessReport::default();
        let noisy = table
            .noisy
            .iter()
            .filter_map(|g| Some((g, table.tenants.get(g)?)));
        for (group, tenant) in noisy {
            report.noisy_counts.add(tenant.counts);
            let (busy, ended) = (tenant.busy.at(now), tenant.ended.at(now));
            report.noisy.push(NoisyTenant {
                group: group.to_string(),
                counts: tenant.counts,
                mean_hold_ms: (ended >= 0.5).then(|| (busy / ended).round() as u64),
                processing_permille: if total_busy > 0.0 {
                    (busy / total_busy * 1000.0).round() as u32
                } else {
                    0
                },
            });
        }
        report
            .noisy
            .sort_by(|a, b| (b.counts.in_flight, &a.group).cmp(&(a.counts.in_flight, &b.group)));
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(group: &Arc<str>, from: Option<State>, to: Option<State>, now: u64) -> Move<'_> {
        Move {
            group: Some(group),
            stripe: 0,
            from,
            to,
            now,
            sent: from.is_none(),
            held_ms: None,
            queue_in_flight: 0,
        }
    }

    #[test]
    fn tenants_with_nothing_stored_are_forgotten_once_their_processing_time_fades() {
        let tenants = Tenants::default();
        let names: Vec<Arc<str>> = (0..3000).map(|i| Arc::from(format!("t{i}"))).collect();
        for group in &names {
            tenants.moved(change(group, None, Some(State::InFlight), 0));
            tenants.moved(Move {
                held_ms: Some(2_000),
                ..change(group, Some(State::InFlight), None, 2_000)
            });
        }
        // Held two seconds each a moment ago: kept, for the processing-time rule.
        assert!(tenants.lock().tenants.len() >= 2048);
        let later = 20 * 60 * 1000;
        // Looked over once the table has doubled: the faded ones go, the fresh stay.
        let fresh: Vec<Arc<str>> = (0..1100).map(|i| Arc::from(format!("n{i}"))).collect();
        for group in &fresh {
            tenants.moved(change(group, None, Some(State::Ready), later));
        }
        let held = tenants.lock().tenants.len();
        assert_eq!(
            held, 1100,
            "the faded tenants are forgotten, the fresh kept"
        );
    }

    #[test]
    fn recent_processing_time_halves_every_half_life() {
        let mut recent = Recent::default();
        recent.add(0, 1000.0);
        assert!((recent.at(60_000) - 500.0).abs() < 1e-6);
        recent.add(60_000, 500.0);
        assert!((recent.at(120_000) - 500.0).abs() < 1e-6);
    }

    #[test]
    fn a_tenant_with_thirty_leases_and_a_tenth_of_the_queue_is_noisy_until_its_backlog_goes() {
        let tenants = Tenants::default();
        let a: Arc<str> = Arc::from("a");
        let lease = |queue_in_flight| Move {
            queue_in_flight,
            ..change(&a, Some(State::Ready), Some(State::InFlight), 0)
        };
        for _ in 0..40 {
            tenants.moved(change(&a, None, Some(State::Ready), 0));
        }
        for n in 1..=30 {
            tenants.moved(lease(n * 10));
        }
        assert!(
            !tenants.is_noisy(&a, 0),
            "30 of 300 in flight is not more than a tenth"
        );
        tenants.moved(lease(31));
        assert!(tenants.is_noisy(&a, 0));
        assert!(tenants.any_noisy());
        for _ in 0..8 {
            tenants.moved(lease(40));
        }
        assert!(tenants.is_noisy(&a, 0), "one message still waits");
        tenants.moved(lease(40));
        assert!(!tenants.is_noisy(&a, 0), "backlog gone, quiet again");
        assert!(!tenants.any_noisy());
    }

    #[test]
    fn a_noisy_tenant_that_sent_nothing_for_five_minutes_is_quiet() {
        let tenants = Tenants::default();
        let a: Arc<str> = Arc::from("a");
        for _ in 0..40 {
            tenants.moved(change(&a, None, Some(State::Ready), 0));
        }
        for _ in 0..30 {
            tenants.moved(Move {
                queue_in_flight: 30,
                ..change(&a, Some(State::Ready), Some(State::InFlight), 1)
            });
        }
        assert!(tenants.is_noisy(&a, QUIET_AFTER_MS - 1));
        assert!(!tenants.is_noisy(&a, QUIET_AFTER_MS));
        assert!(!tenants.any_noisy());
    }
}

//! The model: what the node acknowledged, and the promises checked against it. Messages are
//! told apart by their bodies, each sent once (a redrive gives a message a new id, not a new
//! body). Times are the manual clock's, read before and after each call: the engine's
//! instant for a call lies between them, so a lease granted by a receive that began at `cb`
//! with a visibility of `v` lasts at least until `cb + v`, and two leases are certainly live
//! at once when the later of their receives ended before the earlier of those ends.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

/// Queues whose messages can move between them are one family: a purge or a deletion of one
/// frees the model from finding the family's earlier messages.
pub fn family(queue: &str) -> usize {
    match queue {
        "a" | "b" | "c" => 0,
        "f.fifo" => 1,
        "g.fifo" | "h.fifo" => 2,
        _ => 3,
    }
}
const FAMILIES: usize = 4;

/// The FIFO queue whose first deliveries must come in send order (nothing moves into it).
pub const ORDERED: &str = "f.fifo";

/// The families of one queue, which nothing moves into or out of (`f.fifo`, `tmp`).
const ALONE: [usize; 2] = [1, 3];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Sent {
    Pending,
    Acked,
    /// Answered with an error, or not answered before a crash: stored or not.
    Unknown,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Deleted {
    No,
    /// A delete was acknowledged with a handle whose lease may have ended, or was not answered.
    Maybe,
    /// Acknowledged while its lease was certainly live: the message is gone for good.
    Certain,
}

#[derive(Clone, Debug)]
struct Lease {
    queue: String,
    handle: String,
    /// The receive (or visibility change) that granted it ended at `ended`.
    ended: u64,
    /// It lasts at least until then (cut short when its holder starts to delete or change it).
    until: u64,
}

struct Body {
    family: usize,
    group: Option<String>,
    seq: u64,
    sent: Sent,
    /// The family's removals begun when the send began, and whether one was under way: a
    /// message is sure to be there only if neither a removal under way nor a later one could
    /// have taken it.
    removals: u64,
    removal_under_way: bool,
    deleted: Deleted,
    leases: Vec<Lease>,
    delivered_from_origin: bool,
    /// Visibility changes begun on it with any handle: under AWS's rules on a standard queue
    /// one may release the message to another receive while a delete of it runs.
    changes_begun: u64,
    /// The model's event count when its send was acknowledged.
    acked_at: u64,
    /// Visibility changes on it under way, and the event the last one was answered at: a
    /// receive that overlapped one (under AWS's rules on a standard queue) got a lease that
    /// change may have ended before the receive's answer was seen.
    changes_under_way: u32,
    last_change_answered: u64,
}

#[derive(Default, Debug, Clone, Copy)]
pub struct Stats {
    pub sends_acked: u64,
    pub deliveries: u64,
    pub deletes_certain: u64,
    pub checks: u64,
}

#[derive(Default)]
struct Inner {
    /// The engine runs `LeaseMode::Aws`: on a standard queue any handle of a message,
    /// superseded or expired, changes its visibility, whoever holds it now (as AWS does).
    aws_leases: bool,
    bodies: HashMap<String, Body>,
    removals: [u64; FAMILIES],
    removals_done: [u64; FAMILIES],
    /// Counts events, to order acknowledgements and removals.
    events: u64,
    /// Per family, the event at which each acknowledged removal began.
    removed_at: [Vec<u64>; FAMILIES],
    /// Per queue, purges and deletions under way, and the event the last one was answered at
    /// (a receive that overlapped one may have leased what it removed).
    removals_under_way: HashMap<String, u32>,
    last_removal_answered: HashMap<String, u64>,
    /// The highest send number delivered so far per group of `ORDERED`.
    ordered_high: HashMap<String, u64>,
    trace: VecDeque<String>,
    trace_at_first: Vec<String>,
    violations: Vec<String>,
    stats: Stats,
}

pub struct Model(Mutex<Inner>);

const TRACE: usize = 120;

/// What a receive handed out, as the model sees it.
pub struct Seen {
    pub body: String,
    pub handle: String,
    pub group: Option<String>,
}

impl Model {
    pub fn new(aws_leases: bool) -> Model {
        Model(Mutex::new(Inner {
            aws_leases,
            ..Inner::default()
        }))
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn note(&self, line: String) {
        let mut inner = self.inner();
        if inner.trace.len() == TRACE {
            inner.trace.pop_front();
        }
        inner.trace.push_back(line);
    }

    pub fn violate(&self, what: String) {
        let mut inner = self.inner();
        if inner.violations.is_empty() {
            // What led to the first violation, not what came after.
            inner.trace_at_first = inner.trace.iter().cloned().collect();
        }
        inner.violations.push(what);
    }

    pub fn violations(&self) -> Vec<String> {
        self.inner().violations.clone()
    }

    pub fn trace(&self) -> Vec<String> {
        let inner = self.inner();
        match inner.violations.is_empty() {
            true => inner.trace.iter().cloned().collect(),
            false => inner.trace_at_first.clone(),
        }
    }

    pub fn stats(&self) -> Stats {
        self.inner().stats
    }

    pub fn send_started(&self, body: &str, queue: &str, group: Option<&str>, seq: u64) {
        let mut inner = self.inner();
        let f = family(queue);
        let removals = inner.removals[f];
        let removal_under_way = inner.removals_done[f] < removals;
        inner.bodies.insert(
            body.to_string(),
            Body {
                family: family(queue),
                group: group.map(str::to_string),
                seq,
                sent: Sent::Pending,
                removals,
                removal_under_way,
                deleted: Deleted::No,
                leases: Vec::new(),
                delivered_from_origin: false,
                changes_begun: 0,
                acked_at: 0,
                changes_under_way: 0,
                last_change_answered: 0,
            },
        );
    }

    pub fn send_answered(&self, body: &str, acked: bool) {
        let mut inner = self.inner();
        inner.events += 1;
        let now = inner.events;
        if let Some(b) = inner.bodies.get_mut(body) {
            b.sent = if acked { Sent::Acked } else { Sent::Unknown };
            b.acked_at = now;
        }
        if acked {
            inner.stats.sends_acked += 1;
        }
    }

    /// A purge or deletion of `queue` begins at `began`: its family's earlier messages may
    /// go, and the leases it granted with them. Answers the event it began at.
    pub fn removal_started(&self, queue: &str, began: u64) -> u64 {
        let mut inner = self.inner();
        inner.events += 1;
        let event = inner.events;
        inner.removals[family(queue)] += 1;
        *inner
            .removals_under_way
            .entry(queue.to_string())
            .or_default() += 1;
        for body in inner.bodies.values_mut() {
            for lease in body.leases.iter_mut().filter(|l| l.queue == queue) {
                lease.until = lease.until.min(began);
            }
        }
        event
    }

    /// A receive from `queue` that began at `began` and ended at `ended`, with a visibility
    /// of `visibility_ms`, handed out `seen`.
    /// A receive begins: the event it began at, for `delivered`.
    pub fn receive_begun(&self) -> u64 {
        let mut inner = self.inner();
        inner.events += 1;
        inner.events
    }

    pub fn delivered(
        &self,
        queue: &str,
        seen: &[Seen],
        (began, ended, event): (u64, u64, u64),
        visibility_ms: u64,
    ) {
        let mut inner = self.inner();
        let until = began + visibility_ms;
        let removal_overlapped = inner.removals_under_way.get(queue).is_some_and(|n| *n > 0)
            || inner
                .last_removal_answered
                .get(queue)
                .is_some_and(|e| *e > event);
        let any_handle = inner.aws_leases && !queue.ends_with(".fifo");
        let mut found = Vec::new();
        for s in seen {
            inner.stats.deliveries += 1;
            let Some(body) = inner.bodies.get(&s.body) else {
                found.push(format!(
                    "{queue} handed out {:?}, which nobody sent",
                    s.body
                ));
                continue;
            };
            if body.deleted == Deleted::Certain {
                found.push(format!(
                    "{queue} handed out {:?} after a delete acknowledged under its live lease",
                    s.body
                ));
            }
            for lease in &body.leases {
                if ended.max(lease.ended) < until.min(lease.until) {
                    found.push(format!(
                        "{queue} handed out {:?} at [{began}, {ended}] under a live lease from {} (granted by {}, live to at least {})",
                        s.body, lease.queue, lease.ended, lease.until
                    ));
                }
            }
            // As on AWS (see `fifo.rs`), a message in flight holds back the messages of its
            // group behind it, not those before it; only in `ORDERED` is "behind" the send order.
            if queue == ORDERED {
                if let Some(group) = &s.group {
                    for (other, b) in &inner.bodies {
                        if b.seq >= body.seq || b.group.as_ref() != Some(group) {
                            continue;
                        }
                        for lease in b.leases.iter().filter(|l| l.queue == queue) {
                            if ended.max(lease.ended) < until.min(lease.until) {
                                found.push(format!(
                                    "{queue} handed out {:?} of group {group} while {other:?} of that group was in flight (live to at least {})",
                                    s.body, lease.until
                                ));
                            }
                        }
                    }
                }
            }
            if queue == ORDERED {
                let seq = body.seq;
                let first = !body.delivered_from_origin;
                let group = s.group.clone().unwrap_or_default();
                let high = inner.ordered_high.get(&group).copied().unwrap_or(0);
                if first && seq < high {
                    found.push(format!(
                        "{queue} handed out {:?} (send {seq} of group {group}) first after send {high}",
                        s.body
                    ));
                }
                inner.ordered_high.insert(group, high.max(seq));
            }
            if queue == ORDERED {
                let body = inner.bodies.get_mut(&s.body).expect("looked up above");
                body.delivered_from_origin = true;
            }
        }
        // One receive may hand out several messages of a group, in order: their leases count
        // against later receives only. A lease a concurrent change or removal may have ended
        // counts for nothing.
        for s in seen.iter().filter(|_| visibility_ms > 0) {
            if let Some(body) = inner.bodies.get_mut(&s.body) {
                let change_overlapped =
                    any_handle && (body.changes_under_way > 0 || body.last_change_answered > event);
                let until = match removal_overlapped || change_overlapped {
                    true => ended,
                    false => until,
                };
                body.leases.push(Lease {
                    queue: queue.to_string(),
                    handle: s.handle.clone(),
                    ended,
                    until,
                });
            }
        }
        drop(inner);
        for what in found {
            self.violate(what);
        }
    }

    /// Its holder begins to delete `body` with `handle` at `began`: the message may be gone
    /// from then on. Answers until when its lease was certainly live, and how many visibility
    /// changes had begun on it (for `delete_answered`).
    pub fn delete_begun(&self, body: &str, handle: &str, began: u64) -> (u64, u64) {
        let mut changes = 0;
        if let Some(b) = self.inner().bodies.get_mut(body) {
            if b.deleted == Deleted::No {
                b.deleted = Deleted::Maybe;
            }
            changes = b.changes_begun;
        }
        (self.lease_touched(body, handle, began), changes)
    }

    /// Its holder begins to delete or change the lease of `handle` at `began`: from then on
    /// the model no longer counts on it. Answers until when it was certainly live.
    pub fn lease_touched(&self, body: &str, handle: &str, began: u64) -> u64 {
        let mut inner = self.inner();
        let Some(b) = inner.bodies.get_mut(body) else {
            return 0;
        };
        let mut live_until = 0;
        for lease in b.leases.iter_mut().filter(|l| l.handle == handle) {
            live_until = live_until.max(lease.until);
            lease.until = lease.until.min(began);
        }
        live_until
    }

    /// A delete of `body`'s `handle` was answered at `ended` (`acked`: with success), its
    /// lease certainly live until `live_until` unless a visibility change began on it since
    /// (`changes`, as `delete_begun` answered).
    pub fn delete_answered(&self, body: &str, acked: bool, ended: u64, begun: (u64, u64)) {
        let (live_until, changes) = begun;
        let mut inner = self.inner();
        let unchanged = inner
            .bodies
            .get(body)
            .is_some_and(|b| b.changes_begun == changes);
        let certain = acked && ended < live_until && unchanged;
        if certain {
            inner.stats.deletes_certain += 1;
        }
        if let Some(b) = inner.bodies.get_mut(body) {
            if certain {
                b.deleted = Deleted::Certain;
            } else if b.deleted == Deleted::No {
                b.deleted = Deleted::Maybe;
            }
        }
    }

    /// A visibility change of `body` on `queue` with `handle` begins at `began`. Under AWS's
    /// rules on a standard queue it may change the lease of whoever holds the message now.
    pub fn visibility_change_begun(&self, queue: &str, body: &str, handle: &str, began: u64) {
        let mut inner = self.inner();
        let any_lease = inner.aws_leases && !queue.ends_with(".fifo");
        if let Some(b) = inner.bodies.get_mut(body) {
            b.changes_begun += 1;
            b.changes_under_way += 1;
            for lease in b
                .leases
                .iter_mut()
                .filter(|l| any_lease || l.handle == handle)
            {
                lease.until = lease.until.min(began);
            }
        }
    }

    /// A visibility change of `handle` to `visibility_ms`, begun at `began`, was answered at
    /// `ended`. Acknowledged where only the live handle changes a lease (a FIFO queue, or
    /// strict leases), it is a lease from then on. Under AWS's rules on a standard queue it
    /// may have ended, at any moment until its answer, a lease granted while it ran too.
    #[allow(clippy::too_many_arguments)]
    pub fn visibility_change_answered(
        &self,
        queue: &str,
        body: &str,
        handle: &str,
        acked: bool,
        began: u64,
        ended: u64,
        visibility_ms: u64,
    ) {
        let mut inner = self.inner();
        inner.events += 1;
        let event = inner.events;
        let any_lease = inner.aws_leases && !queue.ends_with(".fifo");
        let Some(b) = inner.bodies.get_mut(body) else {
            return;
        };
        b.changes_under_way = b.changes_under_way.saturating_sub(1);
        b.last_change_answered = event;
        if any_lease {
            for lease in &mut b.leases {
                lease.until = lease.until.min(began.max(lease.ended));
            }
        } else if acked && visibility_ms > 0 {
            b.leases.push(Lease {
                queue: queue.to_string(),
                handle: handle.to_string(),
                ended,
                until: began + visibility_ms,
            });
        }
    }

    /// Checks what the node holds, counted by body over every queue, while nothing runs:
    /// every acknowledged send there unless something may have removed it, nothing twice,
    /// nothing certainly deleted, nothing never sent.
    pub fn check_held(&self, held: &HashMap<String, usize>, when: &str) {
        let mut inner = self.inner();
        inner.stats.checks += 1;
        let mut found = Vec::new();
        for (body, count) in held {
            match inner.bodies.get(body) {
                None => found.push(format!(
                    "{when}: the node holds {body:?}, which nobody sent"
                )),
                Some(b) if b.deleted == Deleted::Certain => found.push(format!(
                    "{when}: the node holds {body:?}, deleted under a live lease"
                )),
                Some(_) if *count > 1 => {
                    found.push(format!("{when}: the node holds {body:?} {count} times"))
                }
                Some(b) if b.sent == Sent::Pending => found.push(format!(
                    "{when}: the node holds {body:?}, whose send is still unanswered"
                )),
                // Nothing moves into or out of these queues: a message acknowledged before a
                // purge or deletion of its queue that succeeded is gone for good.
                Some(b)
                    if b.sent == Sent::Acked
                        && ALONE.contains(&b.family)
                        && inner.removed_at[b.family].iter().any(|&at| at > b.acked_at) =>
                {
                    found.push(format!(
                        "{when}: the node holds {body:?}, acknowledged before a purge or deletion of its queue that succeeded"
                    ))
                }
                Some(_) => {}
            }
        }
        for (body, b) in &inner.bodies {
            let protected = !b.removal_under_way && b.removals == inner.removals[b.family];
            if b.sent == Sent::Acked
                && b.deleted == Deleted::No
                && protected
                && !held.contains_key(body)
            {
                found.push(format!("{when}: {body:?} is lost: its send was acknowledged, nothing deleted or purged it (removals {} of family {})", b.removals, b.family));
            }
        }
        drop(inner);
        for what in found {
            self.violate(what);
        }
    }

    /// A purge or deletion of `queue`, begun at `began` (the clock) and `event`, was
    /// answered (`acked`: with success): what its family held when it began is gone for
    /// good, and so may be what `queue` leased while it ran.
    pub fn removal_answered(&self, queue: &str, (began, event): (u64, u64), acked: bool) {
        let mut inner = self.inner();
        inner.events += 1;
        let answered = inner.events;
        inner
            .last_removal_answered
            .insert(queue.to_string(), answered);
        if let Some(n) = inner.removals_under_way.get_mut(queue) {
            *n = n.saturating_sub(1);
        }
        inner.removals_done[family(queue)] += 1;
        if acked {
            inner.removed_at[family(queue)].push(event);
        }
        for body in inner.bodies.values_mut() {
            for lease in body.leases.iter_mut().filter(|l| l.queue == queue) {
                lease.until = lease.until.min(began.max(lease.ended));
            }
        }
    }

    /// Sends not answered before the node stopped: stored or not; removals under way: done
    /// or not.
    pub fn crashed(&self) {
        let mut inner = self.inner();
        inner.removals_done = inner.removals;
        inner.removals_under_way.clear();
        for b in inner.bodies.values_mut() {
            b.changes_under_way = 0;
        }
        for b in inner.bodies.values_mut() {
            if b.sent == Sent::Pending {
                b.sent = Sent::Unknown;
            }
        }
    }
}

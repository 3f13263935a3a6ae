//! One group's transaction: the queues read once, then the deletes, the sends and the
//! receives, each kind in as few statements as its rules allow, then one commit; each
//! request answered only after it.
//!
//! The order inside the transaction is the lock order's: the deletes come first, since they
//! are the only statement that waits for a row's lock (rows locked in (queue, sequence)
//! order); the sends insert rows nobody else sees and the receives claim with `SKIP
//! LOCKED`, so a group never waits while it holds a row another group's deletes wait for.
//! The deletes, the sends, the receives and the sends' notifications go together
//! (pipelined, executed in the order sent: one round trip, and a few more only when a
//! claim routes dead letters or a delete finds its message gone), so a group's receives see its
//! sends and not the messages it deleted: as if its requests came one by one, deletes, then
//! sends, then receives (`tests/model.rs` holds it to that).

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::future::{join, try_join4, try_join_all};
use leasehold_backend::{BackendError, Received};
use leasehold_engine::{check_batch, Delivery, EngineError, Sent};

use super::{Job, Result};
use crate::dead_letters::ROUTE_SQL;
use crate::handles::{answer_deletes, ToDelete, DELETE_SKIPPING};
use crate::messages::{Lease, NewRow, Opened, ReceiveTally, CLAIM_SQL, INSERT_SQL};
use crate::notify::{notify_many, NOTIFY_SQL};
use crate::queues::decode;
use crate::recent_deletes::removed;
use crate::tx::Tx;
use crate::{cached, to_u64, Core};

use super::work::{
    DeleteWork, Deleted, Group, Handles, Queues, ReceiveWork, SendAnswer, SendWork, Work,
};

impl Core {
    /// Commits a group of requests in one transaction and answers each: its own answer once
    /// the commit is done, or, if the transaction failed, the reason (nothing acknowledged).
    pub(crate) async fn run_group(self: Arc<Self>, jobs: Vec<Job>) {
        let mut group = Group::of(jobs);
        match self.commit_group(&mut group).await {
            Ok((now, woken)) => {
                for (queue, moved) in woken {
                    self.waiters.wake_some(&queue, moved);
                }
                self.measure_group(now, &mut group);
                self.finish_busy_deletes(&mut group.deletes);
                answer_all(group, None);
            }
            Err(error) => answer_all(group, Some(error)),
        }
    }

    /// The deletes that met a busy message: each, once its group committed, deletes those
    /// in a transaction of its own, which waits for them, and is answered then, whole.
    fn finish_busy_deletes(self: &Arc<Self>, works: &mut Vec<DeleteWork>) {
        let (waiting, done): (Vec<DeleteWork>, Vec<DeleteWork>) = std::mem::take(works)
            .into_iter()
            .partition(|w| !w.measured.busy.is_empty() && matches!(w.answer, Some(Ok(_))));
        *works = done;
        for work in waiting {
            let core = self.clone();
            tokio::spawn(async move {
                // A bounded share of the pool: each waits for its rows holding a connection,
                // and the groups must always find one.
                let _turn = core.busy_deletes.acquire().await;
                let (places, handles): (Vec<usize>, Vec<String>) =
                    work.measured.busy.into_iter().unzip();
                let later = core.delete_all(&work.queue, handles).await;
                let answer = match (work.answer, later) {
                    (Some(Ok(mut results)), Ok(finished)) => {
                        for (place, result) in places.into_iter().zip(finished) {
                            results[place] = result;
                        }
                        Ok(results)
                    }
                    (_, Err(error)) | (Some(Err(error)), _) => Err(error),
                    (None, _) => Err(BackendError::Failed("a delete was left unanswered".into())),
                };
                let _ = work.reply.send(answer);
            });
        }
    }

    /// The transaction; answers the group's instant and the dead-letter queues that
    /// received messages (how many), whose waiting receives are woken. After the queues are
    /// read, the group's statements are sent together (pipelined: one round trip for all
    /// of them, executed in the order sent), then one commit.
    async fn commit_group(&self, group: &mut Group) -> Result<(u64, Vec<(String, usize)>)> {
        let (tx, queues) = self.begin_at_queues(&group.keys()).await?;
        let (opened_handles, receipts) = self.open_deletes(&queues, &mut group.deletes);
        let classes = receive_classes(&queues, &mut group.receives);
        let checked = check_sends(self, &queues, &mut group.sends);
        let rows = rows_to_insert(self, &queues, &group.sends, &checked);
        let mut ready = sent_counts(&group.sends, &checked);
        // A receipt naming a message again is deleted in a later statement, after the first
        // one's answer (`delete_receipts`): then the deletes go alone, before the rest.
        let deleted_first = match names_a_message_twice(&receipts) {
            true => Some(
                self.delete_receipts(&tx, queues.now, &receipts, false)
                    .await?,
            ),
            false => None,
        };
        // Then every statement sent together (pipelined: executed in the order sent, one
        // round trip; more when a claim routes dead letters or a delete finds its message
        // gone), each prepared so that it is sent when first polled: the deletes,
        // passing over the rows another transaction holds (a group never waits: every
        // request of the server's groups would wait with it); the insert, so that the
        // group's receives see its sends; the claims; and, when no claim can move a message
        // to a dead-letter queue, the notifications of the sends.
        prepare(
            &tx,
            &[
                DELETE_SKIPPING,
                INSERT_SQL,
                CLAIM_SQL,
                ROUTE_SQL,
                NOTIFY_SQL,
            ],
        )
        .await?;
        let deletes = async {
            match deleted_first {
                Some(found) => Ok(found),
                None => {
                    self.delete_receipts(&tx, queues.now, &receipts, false)
                        .await
                }
            }
        };
        // The classes one after the other: a class's claim may take several statements (a
        // route, the exhausted messages passed), and the next class's sees all of them.
        let receives = &group.receives;
        let claims = async {
            let mut claimed = Vec::with_capacity(classes.len());
            for class in &classes {
                claimed.push(self.claim_class(&tx, &queues, class, receives).await?);
            }
            Ok(claimed)
        };
        let may_move = classes.iter().any(|class| {
            let opened = queues.by_key.get(&class.queue);
            opened.is_some_and(|o| o.settings.redrive.is_some())
        });
        let notified_sends = async {
            match may_move {
                true => Ok(()),
                false => notify_many(&tx, self.server_id, &counted(&ready)).await,
            }
        };
        let (found, stored, claimed, ()) = try_join4(
            deletes,
            self.insert_many(&tx, queues.now, &rows),
            claims,
            notified_sends,
        )
        .await?;
        drop(rows);
        let removed = removed(&receipts, &found);
        answer_deletes_of(&mut group.deletes, opened_handles, found);
        answer_sends(&mut group.sends, checked, stored)?;
        let mut moved = Vec::new();
        for (class, outcome) in classes.into_iter().zip(claimed) {
            moved.extend(outcome.moved.clone());
            answer_class(&queues, &mut group.receives, class, outcome);
        }
        // One notification a queue (PostgreSQL delivers a transaction's identical ones
        // once): the sends' and the dead-letter moves' together, when there can be moves.
        if may_move {
            for (queue, count) in &moved {
                add_to(&mut ready, queue, *count);
            }
            notify_many(&tx, self.server_id, &counted(&ready)).await?;
        }
        // The deletes' memory for their retries, written while the group commits
        // (`recent_deletes.rs`).
        let (committed, ()) = join(tx.commit(), self.remember_deletes(queues.now, &removed)).await;
        committed?;
        Ok((queues.now, moved))
    }

    /// A transaction, and in the same round trip every queue the group names and the
    /// cluster's instant, read in one statement. The rows are not locked, as `begin_at`
    /// explains.
    async fn begin_at_queues(&self, keys: &[&str]) -> Result<(Tx, Queues)> {
        let sql = "SELECT n.now, q.key, q.record
                   FROM (SELECT leasehold_now() AS now) n
                   LEFT JOIN leasehold_queues q ON q.key = ANY($1::text[])";
        let (tx, rows) = Tx::begin_with_query(self.client().await?, sql, &[&keys]).await?;
        let now = rows.first().map_or(0, |row| to_u64(row.get(0)));
        let mut by_key = HashMap::with_capacity(rows.len());
        for row in &rows {
            let Some(key) = row.get::<_, Option<String>>(1) else {
                continue;
            };
            let record = decode(row.get(2))?;
            let (id, settings) = (record.meta.id, record.meta.settings);
            let opened = Opened {
                key: key.clone(),
                id,
                settings,
                now,
            };
            by_key.insert(key, opened);
        }
        Ok((tx, Queues { now, by_key }))
    }

    /// The deletes' handles, opened against their queues, each delete's apart; and the
    /// receipts of those that opened, all together, for one statement.
    fn open_deletes(
        &self,
        queues: &Queues,
        works: &mut [DeleteWork],
    ) -> (Vec<Handles>, Vec<ToDelete>) {
        let mut opened_handles = Vec::with_capacity(works.len());
        let mut receipts = Vec::new();
        for work in works.iter_mut() {
            let Some(opened) = queues.of(work) else {
                opened_handles.push(Vec::new());
                continue;
            };
            let handles = self.open_all(opened, std::mem::take(&mut work.asked));
            receipts.extend(self.to_delete(opened, &handles));
            opened_handles.push(handles);
        }
        (opened_handles, receipts)
    }

    /// One class of receives: one claim for all of their messages, shared out in arrival
    /// order (each takes up to its own maximum, oldest messages first), the exhausted
    /// messages it passed moved to the dead-letter queue, and, if one of them is left
    /// without a message, when the queue's next delay or lease ends.
    async fn claim_class(
        &self,
        tx: &Tx,
        queues: &Queues,
        class: &Class,
        works: &[ReceiveWork],
    ) -> Result<ClassOutcome> {
        let opened = queues
            .by_key
            .get(&class.queue)
            .ok_or_else(|| BackendError::Failed("a receive's queue was not read".into()))?;
        let lease_s = class
            .visibility_s
            .unwrap_or(opened.settings.visibility_timeout_s);
        let route = self
            .dead_letter_route(tx, &class.queue, &opened.settings)
            .await?;
        let maxes: Vec<usize> = (class.members.iter())
            .map(|&i| works[i].asked.max_messages as usize)
            .collect();
        let max = u32::try_from(maxes.iter().sum::<usize>()).unwrap_or(u32::MAX);
        let lease = Lease::new(opened, lease_s, max, route);
        let mut tally = ReceiveTally::default();
        let claimed = self.claim_standard(tx, opened, &lease, &mut tally).await?;
        let moved = lease.dead_lettered(&class.queue, &tally);
        let mut claimed = claimed.into_iter();
        let shares: Vec<Vec<Delivery>> = (maxes.iter())
            .map(|&take| claimed.by_ref().take(take).collect())
            .collect();
        let next_due = match shares.iter().any(Vec::is_empty) {
            true => tally.next_due(self.next_due(tx, opened).await?),
            false => None,
        };
        Ok(ClassOutcome {
            shares,
            next_due,
            tally,
            moved,
        })
    }

    /// What the group's requests measured, once it committed.
    fn measure_group(&self, now: u64, group: &mut Group) {
        for work in &group.sends {
            let stored = work.measured;
            self.measurements
                .record(&work.queue, |m| m.stats.sent += stored);
        }
        for work in &mut group.receives {
            if let (Some(Ok(received)), Some(tally)) = (&work.answer, work.measured.take()) {
                self.measure_receive(&work.queue, now, &received.deliveries, tally);
            }
        }
        for work in &group.deletes {
            self.measure_deletes(&work.queue, now, &work.measured.seen);
        }
    }
}

/// A class of receives: those of one queue asking one visibility (the group's indexes),
/// claimed together.
struct Class {
    queue: String,
    visibility_s: Option<u32>,
    members: Vec<usize>,
}

/// What a class's claim gave: each member's deliveries, in order; when the queue's next
/// delay or lease ends, for members left without a message; what the claim did besides
/// its deliveries (measured once, with the first member); the dead-letter queue it moved
/// messages into, and how many.
struct ClassOutcome {
    shares: Vec<Vec<Delivery>>,
    next_due: Option<u64>,
    tally: ReceiveTally,
    moved: Option<(String, usize)>,
}

/// Classes by queue and the visibility asked (not yet the queue's default: two that name
/// it differently are two claims), in the order each class first came. A lease of 0 s
/// leaves its messages receivable to the next receive, as one by one: such a receive
/// claims alone.
fn receive_classes(queues: &Queues, works: &mut [ReceiveWork]) -> Vec<Class> {
    let mut classes: Vec<Class> = Vec::new();
    for (i, work) in works.iter_mut().enumerate() {
        if queues.of(work).is_none() {
            continue;
        }
        let visibility_s = work.asked.visibility_s;
        let alone = visibility_s == Some(0)
            || (visibility_s.is_none() && opened_lease_s(queues, &work.queue) == Some(0));
        match (classes.iter_mut())
            .filter(|_| !alone)
            .find(|c| c.queue == work.queue && c.visibility_s == visibility_s)
        {
            Some(class) => class.members.push(i),
            None => classes.push(Class {
                queue: work.queue.clone(),
                visibility_s,
                members: vec![i],
            }),
        }
    }
    classes
}

/// Each member of a class answered its share.
fn answer_class(queues: &Queues, works: &mut [ReceiveWork], class: Class, outcome: ClassOutcome) {
    let queue_wait_s = (queues.by_key.get(&class.queue)).map_or(0, |q| q.settings.receive_wait_s);
    let mut tally = Some(outcome.tally);
    for (&i, deliveries) in class.members.iter().zip(outcome.shares) {
        let work = &mut works[i];
        let next_due_in_ms = outcome.next_due.filter(|_| deliveries.is_empty());
        work.measured = Some(tally.take().unwrap_or_default());
        work.answer = Some(Ok(Received {
            deliveries,
            queue_wait_s,
            next_due_in_ms,
            over_limit: false,
        }));
    }
}

/// Each delete answered, handle by handle, from what the statement found for the handles
/// that opened (in order).
fn answer_deletes_of(
    works: &mut [DeleteWork],
    opened_handles: Vec<Handles>,
    found: Vec<crate::handles::Found>,
) {
    let mut found = found.into_iter();
    for (work, handles) in works.iter_mut().zip(opened_handles) {
        if work.answer.is_some() {
            continue;
        }
        let opened = handles.iter().filter(|(r, _)| r.is_ok()).count();
        let (results, seen, busy) = answer_deletes(handles, found.by_ref().take(opened).collect());
        work.answer = Some(Ok(results));
        work.measured = Deleted { seen, busy };
    }
}

/// Each send's checks: refused whole (its queue is missing, or a batch fails as a whole:
/// answered now, nothing checked), or each message's.
fn check_sends(
    core: &Core,
    queues: &Queues,
    works: &mut [SendWork],
) -> Vec<Vec<std::result::Result<(), EngineError>>> {
    let mut checked = Vec::with_capacity(works.len());
    for work in works.iter_mut() {
        let Some(opened) = queues.of(work) else {
            checked.push(Vec::new());
            continue;
        };
        if let Err(error) = core.refuse_unsealable(&opened.settings) {
            work.answer = Some(Err(error));
            checked.push(Vec::new());
            continue;
        }
        let (messages, batch) = &work.asked;
        if let (true, Err(error)) = (*batch, check_batch(&opened.settings, messages)) {
            work.answer = Some(Err(error.into()));
            checked.push(Vec::new());
            continue;
        }
        let checks = messages.iter().map(|m| m.validate(&opened.settings));
        checked.push(checks.collect());
    }
    checked
}

/// The messages that passed their checks, of every send, in order: one insert for all.
fn rows_to_insert<'a>(
    core: &Core,
    queues: &Queues,
    works: &'a [SendWork],
    checked: &[Vec<std::result::Result<(), EngineError>>],
) -> Vec<NewRow<'a>> {
    let mut rows = Vec::new();
    for (work, checks) in works.iter().zip(checked) {
        let Some(opened) = queues.by_key.get(&work.queue) else {
            continue;
        };
        for (message, check) in work.asked.0.iter().zip(checks) {
            if check.is_ok() && work.answer.is_none() {
                rows.push(NewRow {
                    queue_id: opened.id,
                    delay_s: message.delay_s.unwrap_or(opened.settings.delay_s),
                    message,
                    sealed: core.seals(&opened.settings),
                });
            }
        }
    }
    rows
}

/// How many messages each queue will have received once the group commits, for the
/// other servers' waiting receives.
fn sent_counts(
    works: &[SendWork],
    checked: &[Vec<std::result::Result<(), EngineError>>],
) -> Vec<(String, usize)> {
    let mut sent: Vec<(String, usize)> = Vec::new();
    for (work, checks) in works.iter().zip(checked) {
        let count = checks.iter().filter(|c| c.is_ok()).count();
        if work.answer.is_some() || count == 0 {
            continue;
        }
        add_to(&mut sent, &work.queue, count);
    }
    sent
}

/// Adds `count` to a queue's entry of `counts`.
fn add_to(counts: &mut Vec<(String, usize)>, queue: &str, count: usize) {
    match counts.iter_mut().find(|(q, _)| q == queue) {
        Some((_, total)) => *total += count,
        None => counts.push((queue.to_string(), count)),
    }
}

/// Each send answered, message by message: the stored ones (in the insert's order) or
/// their refusals.
fn answer_sends(
    works: &mut [SendWork],
    checked: Vec<Vec<std::result::Result<(), EngineError>>>,
    stored: Vec<Sent>,
) -> Result<()> {
    let mut stored = stored.into_iter();
    for (work, checks) in works.iter_mut().zip(checked) {
        if work.answer.is_some() {
            continue;
        }
        let mut results: SendAnswer = Vec::with_capacity(checks.len());
        for check in checks {
            // `insert_many` answers as many messages as it was given, or fails.
            results.push(match check {
                Ok(()) => Ok(stored.next().ok_or_else(|| {
                    BackendError::Failed("a send answered fewer messages than it sent".into())
                })?),
                Err(error) => Err(error),
            });
        }
        work.measured = results.iter().filter(|r| r.is_ok()).count() as u64;
        work.answer = Some(Ok(results));
    }
    Ok(())
}

/// Statements prepared on the transaction's connection, if they were not yet (once per
/// connection: then nothing is sent).
async fn prepare(tx: &Tx, statements: &[&str]) -> Result<()> {
    try_join_all(statements.iter().map(|sql| cached(tx, sql))).await?;
    Ok(())
}

/// Whether two receipts name one message: `delete_receipts` then needs two statements.
fn names_a_message_twice(receipts: &[ToDelete]) -> bool {
    let mut named = std::collections::HashSet::with_capacity(receipts.len());
    !receipts
        .iter()
        .all(|r| named.insert((r.receipt.queue_id, r.receipt.key.seq)))
}

/// Notification counts, by queue.
fn counted(ready: &[(String, usize)]) -> Vec<(&str, usize)> {
    ready.iter().map(|(q, n)| (q.as_str(), *n)).collect()
}

/// A queue's own VisibilityTimeout.
fn opened_lease_s(queues: &Queues, queue: &str) -> Option<u32> {
    queues
        .by_key
        .get(queue)
        .map(|opened| opened.settings.visibility_timeout_s)
}

/// Answers every request of the group: its own answer, or `failed` (the transaction's
/// failure) for all. A caller that has gone is not waited for.
fn answer_all(group: Group, failed: Option<BackendError>) {
    fn answer<A, B, M>(work: Work<A, B, M>, failed: &Option<BackendError>) {
        let answer = match (failed, work.answer) {
            // Refused for what it asked, before anything ran: its own answer, whatever the
            // transaction did.
            (_, Some(Err(BackendError::Engine(refusal)))) => Err(refusal.into()),
            (Some(error), _) => Err(error.clone()),
            (None, Some(answer)) => answer,
            (None, None) => Err(BackendError::Failed(
                "the group's transaction left a request unanswered".into(),
            )),
        };
        let _ = work.reply.send(answer);
    }
    group.sends.into_iter().for_each(|w| answer(w, &failed));
    group.receives.into_iter().for_each(|w| answer(w, &failed));
    group.deletes.into_iter().for_each(|w| answer(w, &failed));
}

//! One group's transaction: the queues read once, then the deletes, the receives and the
//! sends, each kind in as few statements as its rules allow, then one commit; each request
//! answered only after it.
//!
//! The order inside the transaction is the lock order's: the deletes come first, since they
//! are the only statement that waits for a row's lock (rows locked in (queue, sequence)
//! order); the receives claim with `SKIP LOCKED` and the sends insert rows nobody else sees,
//! so a group never waits while it holds a row another group's deletes wait for.

use std::collections::HashMap;

use deadpool_postgres::Transaction;
use leasehold_backend::{BackendError, Received};
use leasehold_engine::{check_batch, Delivery, EngineError, ReceiveRequest, Sent};

use super::{Job, Reply, Result};
use crate::handles::{answer_deletes, Seen, ToDelete};
use crate::messages::{Lease, NewRow, Opened, ReceiveTally};
use crate::notify::notify_many;
use crate::queues::decode;
use crate::{cached, storable, to_u64, unavailable, Core};

type SendAnswer = Vec<std::result::Result<Sent, EngineError>>;
type DeleteAnswer = Vec<std::result::Result<(), EngineError>>;

/// A request of the group, its answer once decided, and what it measured.
struct Work<Asked, Answer, Measured> {
    queue: String,
    asked: Asked,
    reply: Reply<Answer>,
    answer: Option<Result<Answer>>,
    measured: Measured,
}

impl<Asked, Answer, Measured: Default> Work<Asked, Answer, Measured> {
    fn new(queue: String, asked: Asked, reply: Reply<Answer>) -> Self {
        Work {
            queue,
            asked,
            reply,
            answer: None,
            measured: Measured::default(),
        }
    }
}

/// Sends: the messages, whether a batch; measured: how many were stored.
type SendWork = Work<(Vec<leasehold_engine::NewMessage>, bool), SendAnswer, u64>;
type ReceiveWork = Work<ReceiveRequest, Received, Option<ReceiveTally>>;
type DeleteWork = Work<Vec<String>, DeleteAnswer, Vec<Seen>>;

/// A group's requests by kind, each kind in arrival order.
#[derive(Default)]
struct Group {
    sends: Vec<SendWork>,
    receives: Vec<ReceiveWork>,
    deletes: Vec<DeleteWork>,
}

impl Group {
    fn of(jobs: Vec<Job>) -> Group {
        let mut group = Group::default();
        for job in jobs {
            match job {
                Job::Send {
                    queue,
                    messages,
                    batch,
                    reply,
                } => group.sends.push(Work::new(queue, (messages, batch), reply)),
                Job::Receive {
                    queue,
                    request,
                    reply,
                } => group.receives.push(Work::new(queue, request, reply)),
                Job::Delete {
                    queue,
                    handles,
                    reply,
                } => group.deletes.push(Work::new(queue, handles, reply)),
            }
        }
        group
    }

    /// The queues the group names, each once.
    fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = (self.sends.iter().map(|w| w.queue.as_str()))
            .chain(self.receives.iter().map(|w| w.queue.as_str()))
            .chain(self.deletes.iter().map(|w| w.queue.as_str()))
            .filter(|key| storable(key))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }
}

/// The queues a group names, as they were when it began, and the cluster's instant for it.
struct Queues {
    now: u64,
    by_key: HashMap<String, Opened>,
}

impl Queues {
    /// The queue a request names, or its refusal: it does not exist.
    fn of<A, B, M>(&self, work: &mut Work<A, B, M>) -> Option<&Opened> {
        let opened = self.by_key.get(&work.queue);
        if opened.is_none() {
            work.answer = Some(Err(EngineError::QueueDoesNotExist.into()));
        }
        opened
    }
}

impl Core {
    /// Commits a group of requests in one transaction and answers each: its own answer once
    /// the commit is done, or, if the transaction failed, the reason (nothing acknowledged).
    pub(crate) async fn run_group(&self, jobs: Vec<Job>) {
        let mut group = Group::of(jobs);
        match self.commit_group(&mut group).await {
            Ok((now, woken)) => {
                for (queue, moved) in woken {
                    self.waiters.wake_some(&queue, moved);
                }
                self.measure_group(now, &mut group);
                answer_all(group, None);
            }
            Err(error) => answer_all(group, Some(error)),
        }
    }

    /// The transaction; answers the group's instant and the dead-letter queues that
    /// received messages (how many), whose waiting receives are woken.
    async fn commit_group(&self, group: &mut Group) -> Result<(u64, Vec<(String, usize)>)> {
        let mut client = self.client().await?;
        let tx = Self::begin(&mut client).await?;
        let queues = self.open_queues(&tx, &group.keys()).await?;
        self.group_deletes(&tx, &queues, &mut group.deletes).await?;
        let moved = self
            .group_receives(&tx, &queues, &mut group.receives)
            .await?;
        let sent = self.group_sends(&tx, &queues, &mut group.sends).await?;
        let notified: Vec<(&str, usize)> = (sent.iter().chain(&moved))
            .map(|(queue, count)| (queue.as_str(), *count))
            .collect();
        notify_many(&tx, self.server_id, &notified).await?;
        tx.commit().await.map_err(|e| unavailable(&e))?;
        Ok((queues.now, moved))
    }

    /// Every queue the group names, and the cluster's instant, in one statement. The rows
    /// are not locked, as `open_queue` explains.
    async fn open_queues(&self, tx: &Transaction<'_>, keys: &[&str]) -> Result<Queues> {
        let sql = "SELECT n.now, q.key, q.record
                   FROM (SELECT leasehold_now() AS now) n
                   LEFT JOIN leasehold_queues q ON q.key = ANY($1::text[])";
        let rows = tx
            .query(&cached(tx, sql).await?, &[&keys])
            .await
            .map_err(|e| unavailable(&e))?;
        let now = rows.first().map_or(0, |row| to_u64(row.get(0)));
        let mut by_key = HashMap::with_capacity(rows.len());
        for row in &rows {
            let Some(key) = row.get::<_, Option<String>>(1) else {
                continue;
            };
            let record = decode(row.get(2))?;
            let (id, settings) = (record.meta.id, record.meta.settings);
            by_key.insert(key, Opened { id, settings, now });
        }
        Ok(Queues { now, by_key })
    }

    /// Every delete of the group: one statement (more only for handles naming a message
    /// again).
    async fn group_deletes(
        &self,
        tx: &Transaction<'_>,
        queues: &Queues,
        works: &mut [DeleteWork],
    ) -> Result<()> {
        let mut opened_handles = Vec::with_capacity(works.len());
        let mut receipts = Vec::new();
        for work in works.iter_mut() {
            let Some(opened) = queues.of(work) else {
                opened_handles.push(Vec::new());
                continue;
            };
            let handles = self.open_all(opened, std::mem::take(&mut work.asked));
            let handling = self.handling(&opened.settings);
            receipts.extend(
                handles
                    .iter()
                    .filter_map(|(receipt, _)| receipt.as_ref().ok())
                    .map(|&receipt| ToDelete { receipt, handling }),
            );
            opened_handles.push(handles);
        }
        let mut found = self
            .delete_receipts(tx, queues.now, &receipts)
            .await?
            .into_iter();
        for (work, handles) in works.iter_mut().zip(opened_handles) {
            if work.answer.is_some() {
                continue;
            }
            let opened = handles.iter().filter(|(r, _)| r.is_ok()).count();
            let (results, seen) = answer_deletes(handles, found.by_ref().take(opened).collect());
            work.answer = Some(Ok(results));
            work.measured = seen;
        }
        Ok(())
    }

    /// Every receive of the group: one claim per queue and visibility asked, for all of
    /// their messages, shared out in arrival order (each takes up to its own maximum, oldest
    /// messages first). Answers the dead-letter queues that received messages.
    async fn group_receives(
        &self,
        tx: &Transaction<'_>,
        queues: &Queues,
        works: &mut [ReceiveWork],
    ) -> Result<Vec<(String, usize)>> {
        let mut moved = Vec::new();
        // Classes by queue and the visibility asked (not yet the queue's default: two that
        // name it differently are two claims), in the order each class first came.
        let mut classes: Vec<(String, Option<u32>, Vec<usize>)> = Vec::new();
        for (i, work) in works.iter_mut().enumerate() {
            if queues.of(work).is_none() {
                continue;
            }
            let visibility_s = work.asked.visibility_s;
            // A lease of 0 s leaves its messages receivable to the next receive, as one by
            // one: such a receive claims alone.
            let alone = visibility_s == Some(0)
                || (visibility_s.is_none() && opened_lease_s(queues, &work.queue) == Some(0));
            match classes
                .iter_mut()
                .filter(|_| !alone)
                .find(|(queue, v, _)| *queue == work.queue && *v == visibility_s)
            {
                Some((_, _, members)) => members.push(i),
                None => classes.push((work.queue.clone(), visibility_s, vec![i])),
            }
        }
        for (queue, visibility_s, members) in classes {
            let Some(opened) = queues.by_key.get(&queue) else {
                continue;
            };
            let lease_s = visibility_s.unwrap_or(opened.settings.visibility_timeout_s);
            let route = self.dead_letter_route(tx, &queue, &opened.settings).await?;
            let max = members.iter().map(|&i| works[i].asked.max_messages).sum();
            let lease = Lease::new(opened, lease_s, max, route);
            let mut tally = ReceiveTally::default();
            let claimed = self.claim_standard(tx, opened, &lease, &mut tally).await?;
            moved.extend(lease.dead_lettered(&queue, &tally));
            let mut claimed = claimed.into_iter();
            let mut next_due = None;
            for (n, &i) in members.iter().enumerate() {
                let work = &mut works[i];
                let take = work.asked.max_messages as usize;
                let deliveries: Vec<Delivery> = claimed.by_ref().take(take).collect();
                let next_due_in_ms = match deliveries.is_empty() {
                    true => *match &next_due {
                        Some(due) => due,
                        None => next_due.insert(self.next_due(tx, opened).await?),
                    },
                    false => None,
                };
                // What the claim did besides its deliveries is measured once, with the first.
                work.measured = Some(match n {
                    0 => std::mem::take(&mut tally),
                    _ => ReceiveTally::default(),
                });
                work.answer = Some(Ok(Received {
                    deliveries,
                    queue_wait_s: opened.settings.receive_wait_s,
                    next_due_in_ms,
                }));
            }
        }
        Ok(moved)
    }

    /// Every send of the group: one statement for all their messages, of any queues; a
    /// batch that fails whole (`check_batch`) or a message the rules refuse takes nothing
    /// from the others. Answers how many were stored in each queue.
    async fn group_sends(
        &self,
        tx: &Transaction<'_>,
        queues: &Queues,
        works: &mut [SendWork],
    ) -> Result<Vec<(String, usize)>> {
        let mut checked = Vec::with_capacity(works.len());
        for work in works.iter_mut() {
            let Some(opened) = queues.of(work) else {
                checked.push(Vec::new());
                continue;
            };
            let (messages, batch) = &work.asked;
            if let (true, Err(error)) = (*batch, check_batch(&opened.settings, messages)) {
                work.answer = Some(Err(error.into()));
                checked.push(Vec::new());
                continue;
            }
            checked.push(
                messages
                    .iter()
                    .map(|m| m.validate(&opened.settings))
                    .collect(),
            );
        }
        let mut rows = Vec::new();
        for (work, checks) in works.iter().zip(&checked) {
            let Some(opened) = queues.by_key.get(&work.queue) else {
                continue;
            };
            for (message, check) in work.asked.0.iter().zip(checks) {
                if check.is_ok() {
                    rows.push(NewRow {
                        queue_id: opened.id,
                        delay_s: message.delay_s.unwrap_or(opened.settings.delay_s),
                        message,
                    });
                }
            }
        }
        let mut stored = match rows.is_empty() {
            true => Vec::new(),
            false => self.insert_many(tx, queues.now, &rows).await?,
        }
        .into_iter();
        let mut sent: Vec<(String, usize)> = Vec::new();
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
            let count = results.iter().filter(|r| r.is_ok()).count();
            work.measured = count as u64;
            match sent.iter_mut().find(|(queue, _)| *queue == work.queue) {
                Some((_, total)) => *total += count,
                None => sent.push((work.queue.clone(), count)),
            }
            work.answer = Some(Ok(results));
        }
        Ok(sent)
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
            self.measure_deletes(&work.queue, now, &work.measured);
        }
    }
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

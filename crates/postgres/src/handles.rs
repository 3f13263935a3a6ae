//! Commands by receipt handle on PostgreSQL: delete and change visibility. A handle is opened
//! with the cluster's key, so any server takes any server's handles. What a handle may still
//! do once its lease is over is the rulebook's (`leasehold_engine::rules`): this file locks
//! the rows, asks the rules, and stores what they decided.

use std::collections::{HashMap, HashSet};

use futures_util::future::join;

use leasehold_backend::BackendError;
use leasehold_engine::rules::{self, ChangeKind, Handling, MessageLease};
use leasehold_engine::{DeleteSeen, EngineError, Receipt, RECENT_DELETES_MS};

use crate::messages::Opened;
use crate::notify::notify;
use crate::recent_deletes::{removed, slot};
use crate::tx::Tx;
use crate::{cached, to_i64, to_u64, unavailable, Core};

type Result<T> = std::result::Result<T, BackendError>;

/// What a delete found of its message: its row, or nothing (and whether a delete with the
/// same receive's handle removed it in the last minutes, on any server: a retry).
pub(crate) enum Found {
    Row(FoundForDelete),
    Gone {
        retried: bool,
    },
    /// Held by another transaction, and passed over: deleted later, in a transaction of
    /// its own that waits for it (`group/`).
    Busy,
}

impl Found {
    pub(crate) fn row(&self) -> Option<&FoundForDelete> {
        match self {
            Found::Row(found) => Some(found),
            Found::Gone { .. } | Found::Busy => None,
        }
    }
}

/// A handle that opened, and what its delete found of the message.
pub(crate) type Seen = (Receipt, Found);

/// A receipt to delete by, and how its queue treats a handle whose lease is over.
pub(crate) struct ToDelete {
    pub(crate) receipt: Receipt,
    pub(crate) handling: Handling,
}

/// A delete's answers, handle by handle in its order (`found`: what `delete_receipts` found
/// for each handle that opened, in order); what each opened handle saw, for the
/// measurements; and the handles whose message was busy (their places in the answers, which
/// hold `Ok(())` until they are deleted in a transaction of their own).
pub(crate) fn answer_deletes(
    opened_handles: Vec<(std::result::Result<Receipt, EngineError>, String)>,
    found: Vec<Found>,
) -> (DeleteResults, Vec<Seen>, Vec<(usize, String)>) {
    let mut found = found.into_iter();
    let mut results = Vec::with_capacity(opened_handles.len());
    let (mut seen, mut busy) = (Vec::new(), Vec::new());
    for (receipt, handle) in opened_handles {
        results.push(match receipt {
            Ok(receipt) => {
                let found = found.next().unwrap_or(Found::Gone { retried: false });
                let result = match found.row().and_then(|f| f.seen.deletion.refusal) {
                    Some(refusal) => Err(refusal.error(&handle)),
                    None => Ok(()),
                };
                match found {
                    Found::Busy => busy.push((results.len(), handle)),
                    found => seen.push((receipt, found)),
                }
                result
            }
            Err(error) => Err(error),
        });
    }
    (results, seen, busy)
}

/// A delete's answers, handle by handle.
pub(crate) type DeleteResults = Vec<std::result::Result<(), EngineError>>;

/// What a delete found of its message, for its answer and the lease measurements.
pub(crate) struct FoundForDelete {
    pub(crate) seen: DeleteSeen,
    /// Removed after its last lease ran out, which no receive had counted yet.
    pub(crate) expired_unseen: bool,
}

/// The delete statement (`Core::delete_once`), its rows locked by `$lock`: waiting for them
/// (a FIFO queue's delete, a transaction of its own) or passing over those another
/// transaction holds (a group's, which must never wait: every request of the server's groups
/// would wait with it), answered busy.
macro_rules! delete_sql {
    ($lock:literal) => {
        concat!(
            "WITH locked AS MATERIALIZED (
                 -- In (queue, sequence) order, the one order every batch locks rows in.
                 SELECT m.queue_id, m.seq, m.receive_count, m.visible_ms, m.extensions,
                        m.released
                 FROM leasehold_messages m
                 WHERE (m.queue_id, m.seq) IN
                       (SELECT * FROM unnest($1::bigint[], $2::bigint[]))
                 ORDER BY m.queue_id, m.seq
                 ",
            $lock,
            "),
             target AS (
                 SELECT m.queue_id, m.seq, m.receive_count, m.visible_ms, m.extensions,
                        m.released,
                        leasehold_lease_live(m.receive_count, h.receive_no,
                                     m.visible_ms, $5) AS live,
                        h.live_only, h.n
                 FROM unnest($1::bigint[], $2::bigint[], $3::integer[], $4::boolean[])
                      WITH ORDINALITY AS h(queue_id, seq, receive_no, live_only, n)
                 JOIN locked m ON m.queue_id = h.queue_id AND m.seq = h.seq),
             gone AS (
                 DELETE FROM leasehold_messages m USING target
                 WHERE m.queue_id = target.queue_id AND m.seq = target.seq
                   AND (NOT target.live_only OR target.live)
                 RETURNING m.queue_id, m.seq),
             -- Run whether or not read: a data-modifying WITH always is.
             marked AS (
                 UPDATE leasehold_messages m SET late_deleted = true FROM target
                 WHERE m.queue_id = target.queue_id AND m.seq = target.seq
                   AND NOT target.live
                   AND (target.queue_id, target.seq) NOT IN (SELECT queue_id, seq FROM gone))
             SELECT n, receive_count, visible_ms, extensions,
                    (queue_id, seq) IN (SELECT queue_id, seq FROM gone), released, false
             FROM target
             -- A message another transaction holds, passed over (SKIP LOCKED): busy.
             UNION ALL
             SELECT h.n, NULL, NULL, NULL, NULL, NULL, true
             FROM unnest($1::bigint[], $2::bigint[]) WITH ORDINALITY AS h(queue_id, seq, n)
             WHERE h.n NOT IN (SELECT n FROM target)
               AND EXISTS (SELECT 1 FROM leasehold_messages m
                   WHERE m.queue_id = h.queue_id AND m.seq = h.seq)"
        )
    };
}
const DELETE_WAITING: &str = delete_sql!("FOR UPDATE");
pub(crate) const DELETE_SKIPPING: &str = delete_sql!("FOR UPDATE SKIP LOCKED");

impl Core {
    /// Opens a handle and checks it was issued by this incarnation of the queue.
    fn open(&self, queue_id: u64, handle: &str) -> std::result::Result<Receipt, EngineError> {
        match self.sealer.open(handle) {
            Some(receipt) if receipt.queue_id == queue_id => Ok(receipt),
            _ => Err(EngineError::ReceiptHandleIsInvalid(handle.to_string())),
        }
    }

    /// Deletes the message each handle names as `rules::delete` decides (a FIFO queue's
    /// deletes: a standard queue's are grouped, `group/`). Deleting twice, or after
    /// retention dropped the message, succeeds, as on AWS; a FIFO delete makes the group's
    /// next message receivable.
    pub(crate) async fn delete_all(
        &self,
        queue: &str,
        handles: Vec<String>,
    ) -> Result<Vec<std::result::Result<(), EngineError>>> {
        let (tx, opened) = self.begin_at(queue).await?;
        let opened_handles = self.open_all(&opened, handles);
        let receipts: Vec<ToDelete> = self.to_delete(&opened, &opened_handles).collect();
        let found = self
            .delete_receipts(&tx, opened.now, &receipts, true)
            .await?;
        // Waiting for its rows, a delete of its own finds none busy (`delete_once`).
        let removed = removed(&receipts, &found);
        let (results, seen, _) = answer_deletes(opened_handles, found);
        let fifo = opened.settings.fifo;
        let unblocked = if fifo {
            results.iter().filter(|r| r.is_ok()).count()
        } else {
            0
        };
        notify(&tx, self.server_id, queue, unblocked).await?;
        let (committed, ()) = join(tx.commit(), self.remember_deletes(opened.now, &removed)).await;
        committed?;
        self.waiters.wake_some(queue, unblocked);
        self.measure_deletes(queue, opened.now, &seen);
        Ok(results)
    }

    /// The receipts of the handles that opened, each with how its queue treats a lease
    /// that is over.
    pub(crate) fn to_delete<'h>(
        &self,
        opened: &Opened,
        handles: &'h [(std::result::Result<Receipt, EngineError>, String)],
    ) -> impl Iterator<Item = ToDelete> + 'h {
        let handling = self.handling(&opened.settings);
        (handles.iter())
            .filter_map(|(receipt, _)| receipt.as_ref().ok())
            .map(move |&receipt| ToDelete { receipt, handling })
    }

    /// Each handle opened against the queue (a handle of another queue, or of this queue's
    /// earlier incarnation, is invalid), beside the handle itself.
    pub(crate) fn open_all(
        &self,
        opened: &Opened,
        handles: Vec<String>,
    ) -> Vec<(std::result::Result<Receipt, EngineError>, String)> {
        handles
            .into_iter()
            .map(|handle| (self.open(opened.id, &handle), handle))
            .collect()
    }

    /// Deletes the message each receipt names (of any queues) if the rules let its lease
    /// (`rules::delete`); answers, in order, what each found (None: the message was already
    /// gone). A statement for all of them; receipts naming a message again go in a later
    /// statement, in their order, as the engine takes them one by one.
    pub(crate) async fn delete_receipts(
        &self,
        tx: &Tx,
        now: u64,
        receipts: &[ToDelete],
        wait: bool,
    ) -> Result<Vec<Found>> {
        let mut times_named: HashMap<(u64, u64), usize> = HashMap::new();
        let rounds: Vec<usize> = receipts
            .iter()
            .map(|r| {
                let named = times_named
                    .entry((r.receipt.queue_id, r.receipt.key.seq))
                    .or_default();
                *named += 1;
                *named - 1
            })
            .collect();
        let mut found: Vec<Found> = (receipts.iter())
            .map(|_| Found::Gone { retried: false })
            .collect();
        for round in 0..rounds.iter().max().map_or(0, |last| last + 1) {
            let picked: Vec<usize> = (0..receipts.len())
                .filter(|&i| rounds[i] == round)
                .collect();
            let these: Vec<&ToDelete> = picked.iter().map(|&i| &receipts[i]).collect();
            let answers = self.delete_once(tx, now, &these, wait).await?;
            for (i, answer) in picked.into_iter().zip(answers) {
                found[i] = answer;
            }
        }
        // A receipt naming a message again that an earlier one here removed: a retry (the
        // ring learns of this call's deletes only as it commits).
        let key = |r: &Receipt| (r.queue_id, r.key.seq, r.receive_no);
        let removed_here: HashSet<_> = removed(receipts, &found).iter().map(key).collect();
        for (asked, found) in receipts.iter().zip(&mut found) {
            if let Found::Gone { retried } = found {
                *retried |= removed_here.contains(&key(&asked.receipt));
            }
        }
        self.find_retries(tx, now, receipts, &mut found).await?;
        Ok(found)
    }

    /// Marks the receipts whose message was gone that a delete with the same receive's
    /// handle removed in the last minutes, on any server: retries. One statement, and only
    /// when a message was gone.
    async fn find_retries(
        &self,
        tx: &Tx,
        now: u64,
        receipts: &[ToDelete],
        found: &mut [Found],
    ) -> Result<()> {
        let gone: Vec<usize> = (0..found.len())
            .filter(|&i| matches!(found[i], Found::Gone { retried: false }))
            .collect();
        if gone.is_empty() {
            return Ok(());
        }
        let column = |f: &dyn Fn(&Receipt) -> i64| -> Vec<i64> {
            gone.iter().map(|&i| f(&receipts[i].receipt)).collect()
        };
        let (queue_ids, seqs) = (
            column(&|r| to_i64(r.queue_id)),
            column(&|r| to_i64(r.key.seq)),
        );
        let receive_nos: Vec<i32> = (gone.iter())
            .map(|&i| i32::try_from(receipts[i].receipt.receive_no).unwrap_or(i32::MAX))
            .collect();
        let slots: Vec<i32> = gone.iter().map(|&i| slot(&receipts[i].receipt)).collect();
        let since = to_i64(now.saturating_sub(RECENT_DELETES_MS));
        let rows = tx
            .query(
                &cached(
                    tx,
                    "SELECT k.n FROM unnest($1::bigint[], $2::bigint[], $3::integer[], $4::integer[])
                          WITH ORDINALITY AS k(queue_id, seq, receive_no, slot, n)
                     JOIN leasehold_recent_deletes r ON r.slot = k.slot
                      AND r.queue_id = k.queue_id AND r.seq = k.seq
                      AND r.receive_no = k.receive_no AND r.deleted_ms > $5",
                )
                .await?,
                &[&queue_ids, &seqs, &receive_nos, &slots, &since],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        for row in rows {
            let n = usize::try_from(row.get::<_, i64>(0)).unwrap_or_default();
            if let Some(&i) = gone.get(n.wrapping_sub(1)) {
                found[i] = Found::Gone { retried: true };
            }
        }
        Ok(())
    }

    /// `delete_receipts` for receipts that each name a different message: one statement,
    /// which locks their rows in the one order every batch locks rows in.
    async fn delete_once(
        &self,
        tx: &Tx,
        now: u64,
        receipts: &[&ToDelete],
        wait: bool,
    ) -> Result<Vec<Found>> {
        let column = |f: &dyn Fn(&ToDelete) -> i64| receipts.iter().map(|r| f(r)).collect();
        let queue_ids: Vec<i64> = column(&|r| to_i64(r.receipt.queue_id));
        let seqs: Vec<i64> = column(&|r| to_i64(r.receipt.key.seq));
        let receive_nos: Vec<i32> = receipts
            .iter()
            .map(|r| i32::try_from(r.receipt.receive_no).unwrap_or(i32::MAX))
            .collect();
        let live_only: Vec<bool> = receipts
            .iter()
            .map(|r| !r.handling.late_delete_removes())
            .collect();
        let rows = tx
            .query(
                &cached(
                    tx,
                    if wait {
                        DELETE_WAITING
                    } else {
                        DELETE_SKIPPING
                    },
                )
                .await?,
                &[&queue_ids, &seqs, &receive_nos, &live_only, &to_i64(now)],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let mut found: Vec<Found> = (receipts.iter())
            .map(|_| Found::Gone { retried: false })
            .collect();
        for row in rows {
            let n = usize::try_from(row.get::<_, i64>(0)).unwrap_or_default();
            if row.get::<_, bool>(6) {
                // Waiting for its rows, a statement meets none held: what it did not lock, a
                // transaction it waited for removed (its snapshot still saw the row): gone.
                if let (false, Some(slot)) = (wait, found.get_mut(n.wrapping_sub(1))) {
                    *slot = Found::Busy;
                }
                continue;
            }
            let lease = MessageLease {
                receive_count: row.get::<_, i32>(1).unsigned_abs(),
                started_ms: 0,
                hidden_until_ms: to_u64(row.get(2)),
                released: row.get(5),
            };
            let removed: bool = row.get(4);
            if let (Some(slot), Some(asked)) = (
                found.get_mut(n.wrapping_sub(1)),
                receipts.get(n.wrapping_sub(1)),
            ) {
                let receipt = &asked.receipt;
                let deletion = rules::delete(asked.handling, &lease, receipt.receive_no, now);
                // The statement removed by the same rule (`live_only`, `leasehold_lease_live`).
                debug_assert_eq!(deletion.removes, removed, "{lease:?} {receipt:?}");
                let extensions = row.get::<_, i32>(3).unsigned_abs();
                *slot = Found::Row(FoundForDelete {
                    seen: DeleteSeen {
                        deletion,
                        receive_count: lease.receive_count,
                        extensions: u16::try_from(extensions).unwrap_or(u16::MAX),
                    },
                    expired_unseen: removed && lease.ran_out(now),
                });
            }
        }
        Ok(found)
    }

    /// Gives each handle's message a new visibility timeout from now, held to the 12-hour
    /// ceiling counted from the start of its lease.
    pub(crate) async fn change_all(
        &self,
        queue: &str,
        changes: Vec<(String, u32)>,
    ) -> Result<Vec<std::result::Result<(), EngineError>>> {
        let (tx, opened) = self.begin_at(queue).await?;
        self.lock_in_order(&tx, &opened, &changes).await?;
        let mut results = Vec::with_capacity(changes.len());
        for (handle, timeout_s) in changes {
            let outcome = match self.open(opened.id, &handle) {
                Ok(receipt) => {
                    self.change_one(&tx, &opened, &receipt, &handle, timeout_s)
                        .await?
                }
                Err(error) => Err(error),
            };
            results.push(outcome);
        }
        let changed = results.iter().filter(|r| r.is_ok()).count();
        notify(&tx, self.server_id, queue, changed).await?;
        tx.commit().await?;
        let changes: Vec<(ChangeKind, bool)> = results
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .copied()
            .collect();
        self.measure_changes(queue, &changes);
        Ok(results.into_iter().map(|r| r.map(drop)).collect())
    }

    /// Locks the rows a batch of visibility changes names, in sequence order, before they
    /// are changed one by one in the batch's order: locking each as its turn came, two
    /// batches (or a batch and a purge) could each hold a row the other waited for.
    async fn lock_in_order(
        &self,
        tx: &Tx,
        opened: &Opened,
        changes: &[(String, u32)],
    ) -> Result<()> {
        if changes.len() < 2 {
            return Ok(());
        }
        let seqs: Vec<i64> = changes
            .iter()
            .filter_map(|(handle, _)| self.open(opened.id, handle).ok())
            .map(|receipt| to_i64(receipt.key.seq))
            .collect();
        self.lock_rows(tx, opened, &seqs).await
    }

    /// Locks the queue's rows `seqs` names, in sequence order.
    async fn lock_rows(&self, tx: &Tx, opened: &Opened, seqs: &[i64]) -> Result<()> {
        tx.execute(
            &cached(
                tx,
                "SELECT 1 FROM leasehold_messages
                 WHERE queue_id = $1 AND seq = ANY($2::bigint[])
                 ORDER BY seq FOR UPDATE",
            )
            .await?,
            &[&to_i64(opened.id), &seqs],
        )
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(())
    }

    async fn change_one(
        &self,
        tx: &Tx,
        opened: &Opened,
        receipt: &Receipt,
        handle: &str,
        timeout_s: u32,
    ) -> Result<std::result::Result<(ChangeKind, bool), EngineError>> {
        let now = opened.now;
        let key = [&to_i64(receipt.queue_id), &to_i64(receipt.key.seq)];
        let row = tx
            .query_opt(
                &cached(tx, "SELECT received_ms, receive_count, visible_ms, released FROM leasehold_messages WHERE queue_id = $1 AND seq = $2 FOR UPDATE").await?,
                &[key[0], key[1]],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let lease = row.map(|row| MessageLease {
            receive_count: row.get::<_, i32>(1).unsigned_abs(),
            started_ms: row.get::<_, Option<i64>>(0).map_or(now, to_u64),
            hidden_until_ms: to_u64(row.get(2)),
            released: row.get(3),
        });
        let handling = self.handling(&opened.settings);
        let change = match rules::change_visibility(
            handling,
            lease.as_ref(),
            receipt.receive_no,
            now,
            timeout_s,
        ) {
            Ok(change) => change,
            Err(refusal) => return Ok(Err(refusal.error(handle))),
        };
        // A FIFO message released is ranked by its release (V3__fifo.sql).
        let ranked = opened.settings.fifo && change.released_now;
        tx.execute(
            &cached(
                tx,
                "UPDATE leasehold_messages
                 SET visible_ms = $3,
                     ready_order = CASE WHEN $4 THEN nextval('leasehold_message_seqs') END,
                     released = $5, extensions = extensions + $6
                 WHERE queue_id = $1 AND seq = $2",
            )
            .await?,
            &[
                key[0],
                key[1],
                &to_i64(change.until_ms),
                &ranked,
                &change.released_now,
                &i32::from(change.kind == ChangeKind::Extended),
            ],
        )
        .await
        .map_err(|e| unavailable(&e))?;
        // A lease that ran out, seen for the first time.
        let expired_unseen = lease.is_some_and(|l| l.ran_out(now));
        Ok(Ok((change.kind, expired_unseen)))
    }

    /// How this server's queues treat handles whose lease is over.
    pub(crate) fn handling(&self, settings: &leasehold_engine::QueueSettings) -> Handling {
        Handling::of(settings, self.lease_mode)
    }
}

//! Commands by receipt handle on PostgreSQL: delete and change visibility. A handle is opened
//! with the cluster's key, so any server takes any server's handles. What a handle may still
//! do once its lease is over is the rulebook's (`leasehold_engine::rules`): this file locks
//! the rows, asks the rules, and stores what they decided.

use deadpool_postgres::Transaction;
use leasehold_backend::BackendError;
use leasehold_engine::rules::{self, ChangeKind, Handling, MessageLease};
use leasehold_engine::{DeleteSeen, EngineError, Receipt};

use crate::messages::Opened;
use crate::notify::notify;
use crate::{cached, to_i64, to_u64, unavailable, Postgres};

type Result<T> = std::result::Result<T, BackendError>;

/// What a delete found of its message, for its answer and the lease measurements.
pub(crate) struct FoundForDelete {
    pub(crate) seen: DeleteSeen,
    /// Removed after its last lease ran out, which no receive had counted yet.
    pub(crate) expired_unseen: bool,
}

impl Postgres {
    /// Opens a handle and checks it was issued by this incarnation of the queue.
    fn open(&self, queue_id: u64, handle: &str) -> std::result::Result<Receipt, EngineError> {
        match self.sealer.open(handle) {
            Some(receipt) if receipt.queue_id == queue_id => Ok(receipt),
            _ => Err(EngineError::ReceiptHandleIsInvalid(handle.to_string())),
        }
    }

    /// Deletes the message each handle names as `rules::delete` decides. Deleting twice, or
    /// after retention dropped the message, succeeds, as on AWS; a FIFO delete makes the
    /// group's next message receivable.
    pub(crate) async fn delete_all(
        &self,
        queue: &str,
        handles: Vec<String>,
    ) -> Result<Vec<std::result::Result<(), EngineError>>> {
        let mut client = self.client().await?;
        let tx = Self::begin(&mut client).await?;
        let opened = self.open_queue(&tx, queue).await?;
        let opened_handles: Vec<_> = handles
            .into_iter()
            .map(|handle| (self.open(opened.id, &handle), handle))
            .collect();
        let receipts: Vec<Receipt> = opened_handles
            .iter()
            .filter_map(|(receipt, _)| receipt.as_ref().ok().copied())
            .collect();
        let mut found = self.delete_many(&tx, &opened, &receipts).await?.into_iter();
        let (mut results, mut seen) = (Vec::with_capacity(opened_handles.len()), Vec::new());
        for (receipt, handle) in opened_handles {
            results.push(match receipt {
                Ok(receipt) => {
                    let found = found.next().flatten();
                    let result = match found.as_ref().and_then(|f| f.seen.deletion.refusal) {
                        Some(refusal) => Err(refusal.error(&handle)),
                        None => Ok(()),
                    };
                    seen.push((receipt, found));
                    result
                }
                Err(error) => Err(error),
            });
        }
        let fifo = opened.settings.fifo;
        let unblocked = if fifo {
            results.iter().filter(|r| r.is_ok()).count()
        } else {
            0
        };
        notify(&tx, self.server_id, queue, unblocked).await?;
        tx.commit().await.map_err(|e| unavailable(&e))?;
        self.waiters.wake_some(queue, unblocked);
        self.measure_deletes(queue, opened.now, &seen);
        Ok(results)
    }

    /// Deletes the message each receipt names if the rules let its lease (`rules::delete`),
    /// in one statement; answers, in order, what each found (None: the message was already
    /// gone). Receipts naming one message twice go one by one, as the engine takes them.
    async fn delete_many(
        &self,
        tx: &Transaction<'_>,
        opened: &Opened,
        receipts: &[Receipt],
    ) -> Result<Vec<Option<FoundForDelete>>> {
        let mut seqs: Vec<i64> = receipts.iter().map(|r| to_i64(r.key.seq)).collect();
        seqs.sort_unstable();
        seqs.dedup();
        if seqs.len() < receipts.len() {
            // One by one in the batch's order, their rows locked first in sequence order.
            self.lock_rows(tx, opened, &seqs).await?;
            let mut found = Vec::with_capacity(receipts.len());
            for receipt in receipts {
                found.extend(
                    Box::pin(self.delete_many(tx, opened, std::slice::from_ref(receipt))).await?,
                );
            }
            return Ok(found);
        }
        let seqs: Vec<i64> = receipts.iter().map(|r| to_i64(r.key.seq)).collect();
        let receive_nos: Vec<i32> = receipts
            .iter()
            .map(|r| i32::try_from(r.receive_no).unwrap_or(i32::MAX))
            .collect();
        let handling = self.handling(&opened.settings);
        let live_only = !handling.late_delete_removes();
        let rows = tx
            .query(
                &cached(
                    tx,
                    "WITH locked AS MATERIALIZED (
                         -- In sequence order, the one order every batch locks rows in.
                         SELECT m.seq, m.receive_count, m.visible_ms, m.extensions, m.released
                         FROM leasehold_messages m
                         WHERE m.queue_id = $1 AND m.seq = ANY($2::bigint[])
                         ORDER BY m.seq
                         FOR UPDATE),
                     target AS (
                         SELECT m.seq, m.receive_count, m.visible_ms, m.extensions, m.released,
                                leasehold_lease_live(m.receive_count, h.receive_no,
                                                     m.visible_ms, $5) AS live,
                                h.n
                         FROM unnest($2::bigint[], $3::integer[]) WITH ORDINALITY
                              AS h(seq, receive_no, n)
                         JOIN locked m ON m.seq = h.seq),
                     gone AS (
                         DELETE FROM leasehold_messages m USING target
                         WHERE m.queue_id = $1 AND m.seq = target.seq
                           AND (NOT $4 OR target.live)
                         RETURNING m.seq),
                     -- Run whether or not read: a data-modifying WITH always is.
                     marked AS (
                         UPDATE leasehold_messages m SET late_deleted = true FROM target
                         WHERE m.queue_id = $1 AND m.seq = target.seq AND NOT target.live
                           AND target.seq NOT IN (SELECT seq FROM gone))
                     SELECT n, receive_count, visible_ms, extensions,
                            seq IN (SELECT seq FROM gone), released
                     FROM target",
                )
                .await?,
                &[
                    &to_i64(opened.id),
                    &seqs,
                    &receive_nos,
                    &live_only,
                    &to_i64(opened.now),
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let mut found: Vec<Option<FoundForDelete>> = receipts.iter().map(|_| None).collect();
        for row in rows {
            let n = usize::try_from(row.get::<_, i64>(0)).unwrap_or_default();
            let lease = MessageLease {
                receive_count: row.get::<_, i32>(1).unsigned_abs(),
                started_ms: 0,
                hidden_until_ms: to_u64(row.get(2)),
                released: row.get(5),
            };
            let removed: bool = row.get(4);
            if let (Some(slot), Some(receipt)) = (
                found.get_mut(n.wrapping_sub(1)),
                receipts.get(n.wrapping_sub(1)),
            ) {
                let deletion = rules::delete(handling, &lease, receipt.receive_no, opened.now);
                // The statement removed by the same rule (`live_only`, `leasehold_lease_live`).
                debug_assert_eq!(deletion.removes, removed, "{lease:?} {receipt:?}");
                let extensions = row.get::<_, i32>(3).unsigned_abs();
                *slot = Some(FoundForDelete {
                    seen: DeleteSeen {
                        deletion,
                        receive_count: lease.receive_count,
                        extensions: u16::try_from(extensions).unwrap_or(u16::MAX),
                    },
                    expired_unseen: removed && lease.ran_out(opened.now),
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
        let mut client = self.client().await?;
        let tx = Self::begin(&mut client).await?;
        let opened = self.open_queue(&tx, queue).await?;
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
        tx.commit().await.map_err(|e| unavailable(&e))?;
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
        tx: &Transaction<'_>,
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
    async fn lock_rows(&self, tx: &Transaction<'_>, opened: &Opened, seqs: &[i64]) -> Result<()> {
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
        tx: &Transaction<'_>,
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

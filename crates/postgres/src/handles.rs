//! Commands by receipt handle on PostgreSQL: delete and change visibility. A handle is opened
//! with the cluster's key, so any server takes any server's handles. Handles whose lease is
//! over, as the engine's lease modes treat them: on a standard queue under `LeaseMode::Aws`
//! any issued handle deletes, and a visibility change needs the message, not the current
//! lease; under `LeaseMode::Strict` such a delete removes nothing (and succeeds) and such a
//! change is refused as not in flight. FIFO queues refuse them in either mode.

use deadpool_postgres::Transaction;
use leasehold_backend::BackendError;
use leasehold_engine::{EngineError, LeaseMode, Receipt, MAX_VISIBILITY_TIMEOUT_S};

use crate::messages::Opened;
use crate::notify::notify;
use crate::{cached, to_i64, to_u64, unavailable, Postgres};

type Result<T> = std::result::Result<T, BackendError>;

/// What a visibility change did, for the lease measurements.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Ended or shortened a live lease, or made the message receivable at once.
    Released,
    /// A heartbeat: a live lease made longer.
    Extended,
    /// A new timeout on a message not in flight (AWS mode allows it).
    Other,
}

/// What a delete found of its message, for its answer and the lease measurements.
pub(crate) struct FoundForDelete {
    pub(crate) receive_count: u32,
    /// The handle's lease was the message's current, live one.
    pub(crate) live: bool,
    pub(crate) extensions: u32,
    pub(crate) removed: bool,
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

    /// Deletes the message each handle names. Deleting twice, or after retention dropped
    /// the message, succeeds, as on AWS; on a FIFO queue, or in strict mode, only the
    /// message's current, live lease deletes it (a FIFO delete makes the group's next message
    /// receivable).
    pub(crate) async fn delete_all(
        &self,
        queue: &str,
        handles: Vec<String>,
    ) -> Result<Vec<std::result::Result<(), EngineError>>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| unavailable(&e))?;
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
                    let result = match found {
                        Some(ref f) if !f.removed && opened.settings.fifo => {
                            Err(EngineError::ReceiptHandleExpired(handle))
                        }
                        _ => Ok(()),
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

    /// Deletes the message each receipt names if its lease allows (any lease on a standard
    /// queue in AWS mode; only the current, live one on a FIFO queue or in strict mode), in
    /// one statement; answers, in order, what each found (None: the message was already
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
        let live_only = opened.settings.fifo || self.lease_mode == LeaseMode::Strict;
        let rows = tx
            .query(
                &cached(
                    tx,
                    "WITH target AS (
                         SELECT m.seq, m.receive_count, m.visible_ms, m.extensions, m.released,
                                m.receive_count = h.receive_no AND m.visible_ms > $5 AS live,
                                h.n
                         FROM unnest($2::bigint[], $3::integer[]) WITH ORDINALITY
                              AS h(seq, receive_no, n)
                         JOIN leasehold_messages m ON m.queue_id = $1 AND m.seq = h.seq
                         FOR UPDATE OF m),
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
                     SELECT n, receive_count, visible_ms, extensions, live,
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
            let receive_count = row.get::<_, i32>(1);
            let visible = to_u64(row.get(2)) <= opened.now;
            let removed: bool = row.get(5);
            if let Some(slot) = found.get_mut(n.wrapping_sub(1)) {
                *slot = Some(FoundForDelete {
                    receive_count: receive_count.unsigned_abs(),
                    live: row.get(4),
                    extensions: row.get::<_, i32>(3).unsigned_abs(),
                    removed,
                    expired_unseen: removed
                        && visible
                        && receive_count > 0
                        && !row.get::<_, bool>(6),
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
        let tx = client.transaction().await.map_err(|e| unavailable(&e))?;
        let opened = self.open_queue(&tx, queue).await?;
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
        let changes: Vec<(Change, bool)> = results
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .copied()
            .collect();
        self.measure_changes(queue, &changes);
        Ok(results.into_iter().map(|r| r.map(drop)).collect())
    }

    async fn change_one(
        &self,
        tx: &Transaction<'_>,
        opened: &Opened,
        receipt: &Receipt,
        handle: &str,
        timeout_s: u32,
    ) -> Result<std::result::Result<(Change, bool), EngineError>> {
        let now = opened.now;
        let key = [&to_i64(receipt.queue_id), &to_i64(receipt.key.seq)];
        let row = tx
            .query_opt(
                &cached(tx, "SELECT received_ms, receive_count, visible_ms, released FROM leasehold_messages WHERE queue_id = $1 AND seq = $2 FOR UPDATE").await?,
                &[key[0], key[1]],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let Some(row) = row else {
            return Ok(Err(EngineError::MessageNotAvailable(handle.to_string())));
        };
        let live = i64::from(row.get::<_, i32>(1)) == i64::from(receipt.receive_no)
            && to_u64(row.get(2)) > now;
        if opened.settings.fifo && !live {
            return Ok(Err(EngineError::ReceiptHandleExpired(handle.to_string())));
        }
        if self.lease_mode == LeaseMode::Strict && !live {
            return Ok(Err(EngineError::MessageNotInflight(handle.to_string())));
        }
        // SQS counts in whole seconds: the lease so far, rounded down, plus the new timeout.
        let lease_start = row.get::<_, Option<i64>>(0).map_or(now, to_u64);
        let held_s = now.saturating_sub(lease_start) / 1000;
        if held_s + u64::from(timeout_s) > u64::from(MAX_VISIBILITY_TIMEOUT_S) {
            return Ok(Err(EngineError::out_of_range(
                "VisibilityTimeout",
                timeout_s,
                "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]",
            )));
        }
        let until = now + u64::from(timeout_s) * 1000;
        // A lease brought to an end sooner (a backoff put-back) is a release, not a
        // heartbeat, as the engine counts them.
        let change = if timeout_s == 0 || (live && until < to_u64(row.get(2))) {
            Change::Released
        } else if live {
            Change::Extended
        } else {
            Change::Other
        };
        // A FIFO message released is ranked by its release (V3__fifo.sql).
        let ranked = opened.settings.fifo && timeout_s == 0;
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
                &to_i64(until),
                &ranked,
                &(timeout_s == 0),
                &i32::from(change == Change::Extended),
            ],
        )
        .await
        .map_err(|e| unavailable(&e))?;
        // A lease that ran out, seen for the first time.
        let expired_unseen =
            row.get::<_, i32>(1) > 0 && to_u64(row.get(2)) <= now && !row.get::<_, bool>(3);
        Ok(Ok((change, expired_unseen)))
    }
}

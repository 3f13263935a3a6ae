//! The in-flight quota on PostgreSQL (issue 34; the engine's is `quota.rs` there): how many
//! messages of a queue are leased now, over every server of the cluster. Triggers on the
//! message table count each lease under the second it ends in (`leasehold_in_flight`,
//! V12__in_flight_quota.sql), whatever statement started or ended it; a claim leases no more
//! than the quota leaves (`CLAIM_SQL`, `leasehold_fifo_claim`'s `max_n`).
//!
//! Exact across servers: before it claims, a transaction takes each queue's quota lock, in
//! queue id order (`leasehold_quota_lock`): shared while the queue is `MARGIN` or more below
//! its quota, so claims of several servers go side by side, and alone nearer than that, when
//! it waits for the shared holders to commit and its claim then counts what they leased.
//! Claims that run side by side under shared locks take far fewer than `MARGIN` messages
//! together: a server claims for a queue in one group transaction at a time (at most 64
//! receives of 10) and in FIFO receives of 10.

use leasehold_backend::BackendError;

use crate::messages::{Lease, Opened};
use crate::tx::Tx;
use crate::{cached, to_i64, unavailable, Core};

type Result<T> = std::result::Result<T, BackendError>;

/// How far below its quota a queue's claims take its lock shared.
const MARGIN: i64 = 10_000;

/// The quota locks of a transaction's queues (`Core::lock_quotas`).
pub(crate) const QUOTA_LOCK_SQL: &str = "SELECT leasehold_quota_lock($1, $2, $3, $4, $5)";

impl Core {
    /// The quota as the database counts it.
    pub(crate) fn quota(&self) -> i64 {
        i64::try_from(self.max_in_flight_per_queue).unwrap_or(i64::MAX)
    }

    /// Takes the quota locks of the queues a transaction is about to claim from (queue id,
    /// messages wanted), in queue id order, at `now`.
    pub(crate) async fn lock_quotas(&self, tx: &Tx, now: u64, wanted: &[(u64, i64)]) -> Result<()> {
        if wanted.is_empty() {
            return Ok(());
        }
        let queues: Vec<i64> = wanted.iter().map(|(q, _)| to_i64(*q)).collect();
        let counts: Vec<i64> = wanted.iter().map(|(_, w)| *w).collect();
        tx.execute(
            &cached(tx, QUOTA_LOCK_SQL).await?,
            &[&queues, &counts, &self.quota(), &MARGIN, &to_i64(now)],
        )
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(())
    }

    /// How many more messages the queue may lease now (after its quota lock).
    pub(crate) async fn room(&self, tx: &Tx, opened: &Opened) -> Result<i64> {
        let row = tx
            .query_one(
                &cached(
                    tx,
                    "SELECT greatest(0, $3 - leasehold_in_flight_of($1, $2))",
                )
                .await?,
                &[&to_i64(opened.id), &to_i64(opened.now), &self.quota()],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(row.get(0))
    }

    /// For a standard receive that got nothing: whether the queue is at its quota with a
    /// message it would otherwise have leased (a short poll's OverLimit, as the engine's
    /// `StripedReceive::over_limit`). The queue's rows are looked at only at the quota.
    pub(crate) async fn held_back(&self, tx: &Tx, opened: &Opened, lease: &Lease) -> Result<bool> {
        let sql = "SELECT CASE WHEN leasehold_in_flight_of($1, $2) >= $3 THEN EXISTS (
                       SELECT 1 FROM leasehold_messages
                       WHERE queue_id = $1 AND visible_ms <= $2 AND sent_ms > $4
                         AND NOT leasehold_exhausted(receive_count, $5))
                   ELSE false END";
        let row = tx
            .query_one(
                &cached(tx, sql).await?,
                &[
                    &to_i64(opened.id),
                    &to_i64(opened.now),
                    &self.quota(),
                    &to_i64(lease.oldest_kept),
                    &lease.max_receives,
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(row.get(0))
    }
}

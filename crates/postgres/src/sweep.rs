//! Background work, once in the cluster: whichever server takes the sweep's advisory lock
//! first in a round does it, and a server that dies simply stops taking it. Today: messages
//! past their queue's MessageRetentionPeriod are deleted (receives and counts already skip
//! them), FIFO deduplication ids and receive attempts past their window, lease
//! measurements' windows past the last 15 minutes, and deleted queues' rows, a bounded number
//! per round.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use leasehold_backend::BackendError;

use crate::tx::Tx;
use crate::{cached, unavailable, Core};

/// Any constant: the advisory lock of the cluster's sweep.
const SWEEP_LOCK: i64 = 0x6c65_6173_6573_7765;
/// How often one server tries to sweep.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// The tables whose rows name a queue by id: a deleted queue's go in the background.
const DROPPED_TABLES: [&str; 5] = [
    "leasehold_messages",
    "leasehold_dedup",
    "leasehold_receive_attempts",
    "leasehold_queue_stats",
    "leasehold_lease_counts",
];
/// Rows deleted at most per round, so one round is a short transaction.
const SWEEP_ROWS: i64 = 10_000;

/// When this server last did a round of background work, and how often it does it.
pub(crate) struct SweepClock {
    last: Mutex<Option<Instant>>,
    every: Duration,
}

impl Default for SweepClock {
    fn default() -> Self {
        SweepClock::every(SWEEP_EVERY)
    }
}

impl SweepClock {
    pub(crate) fn every(every: Duration) -> SweepClock {
        SweepClock {
            last: Mutex::new(None),
            every,
        }
    }

    /// Whether a round is due, marking it taken.
    pub(crate) fn due(&self) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|at| at.elapsed() < self.every) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }
}

impl Core {
    /// One round of the sweep, if due here and no other server is doing it; answers how
    /// many messages it deleted.
    pub(crate) async fn sweep(&self) -> Result<u64, BackendError> {
        if !self.sweep_clock.due() {
            return Ok(0);
        }
        let tx = self.begin().await?;
        let taken = tx
            .query_one(
                &cached(&tx, "SELECT pg_try_advisory_xact_lock($1)").await?,
                &[&SWEEP_LOCK],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        if !taken.get::<_, bool>(0) {
            return Ok(0);
        }
        let deleted = tx
            .execute(
                &cached(
                    &tx,
                    "DELETE FROM leasehold_messages m USING (
                     SELECT m.queue_id, m.seq
                     FROM leasehold_messages m JOIN leasehold_queues q ON q.id = m.queue_id
                     WHERE m.sent_ms <= leasehold_now() - q.retention_ms
                     LIMIT $1
                     FOR UPDATE OF m SKIP LOCKED) expired
                 WHERE m.queue_id = expired.queue_id AND m.seq = expired.seq",
                )
                .await?,
                &[&SWEEP_ROWS],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        // FIFO deduplication ids and receive attempts past their five minutes: lookups
        // already ignore them. Rows another transaction holds are left for a later round
        // (the sweep waits for no row, so it is in no cycle of waits), and a row's expiry is
        // checked on the version the sweep locked, not on what its first look saw: one
        // renewed by a send or a receive meanwhile stays, else a resend within the window
        // would be taken as new.
        for sql in [
            "DELETE FROM leasehold_dedup d USING (
                 SELECT queue_id, scope, dedup_id FROM leasehold_dedup
                 WHERE expires_ms <= leasehold_now() LIMIT $1 FOR UPDATE SKIP LOCKED) old
             WHERE (d.queue_id, d.scope, d.dedup_id) = (old.queue_id, old.scope, old.dedup_id)
               AND d.expires_ms <= leasehold_now()",
            "DELETE FROM leasehold_receive_attempts a USING (
                 SELECT queue_id, attempt_id FROM leasehold_receive_attempts
                 WHERE expires_ms <= leasehold_now() LIMIT $1 FOR UPDATE SKIP LOCKED) old
             WHERE (a.queue_id, a.attempt_id) = (old.queue_id, old.attempt_id)
               AND a.expires_ms <= leasehold_now()",
            // Lease measurements' recent windows once past the last 15 minutes.
            "DELETE FROM leasehold_lease_counts c USING (
                 SELECT queue_id, series, window_ms, value_ms FROM leasehold_lease_counts
                 WHERE window_ms >= 0 AND window_ms < leasehold_now() - 1080000 LIMIT $1
                 FOR UPDATE SKIP LOCKED) old
             WHERE (c.queue_id, c.series, c.window_ms, c.value_ms)
                 = (old.queue_id, old.series, old.window_ms, old.value_ms)",
        ] {
            tx.execute(&cached(&tx, sql).await?, &[&SWEEP_ROWS])
                .await
                .map_err(|e| unavailable(&e))?;
        }
        let dropped = self.sweep_dropped(&tx).await?;
        tx.commit().await?;
        Ok(deleted + dropped)
    }

    /// Deletes the rows of deleted queues, a bounded number per table and queue; forgets a
    /// queue a minute after its last row went.
    async fn sweep_dropped(&self, tx: &Tx) -> Result<u64, BackendError> {
        let dropped = tx
            .query(
                &cached(
                    tx,
                    "SELECT queue_id, dropped_ms < leasehold_now() - 60000
                     FROM leasehold_dropped_queues ORDER BY queue_id LIMIT 10",
                )
                .await?,
                &[],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let mut deleted = 0;
        for row in dropped {
            let (queue_id, old): (i64, bool) = (row.get(0), row.get(1));
            let mut left = 0;
            for table in DROPPED_TABLES {
                // Rows a command still in flight holds are left for a later round.
                let sql = format!(
                    "DELETE FROM {table} WHERE ctid IN (
                         SELECT ctid FROM {table} WHERE queue_id = $1 LIMIT $2
                         FOR UPDATE SKIP LOCKED)"
                );
                let gone = tx
                    .execute(&cached(tx, &sql).await?, &[&queue_id, &SWEEP_ROWS])
                    .await
                    .map_err(|e| unavailable(&e))?;
                left += gone;
                deleted += gone;
            }
            if left == 0 && old {
                tx.execute(
                    &cached(
                        tx,
                        "DELETE FROM leasehold_dropped_queues WHERE queue_id = $1",
                    )
                    .await?,
                    &[&queue_id],
                )
                .await
                .map_err(|e| unavailable(&e))?;
            }
        }
        Ok(deleted)
    }
}

//! Queue metadata on PostgreSQL, by the engine's own rules: a command runs on a transient
//! engine restored from just the queue records it touches (locked for the transaction), and
//! what the engine changed is written back before the commit. Metadata commands are rare, so
//! loading a record or two per command is cheap, and no rule is written twice.

use std::sync::Arc;

use leasehold_backend::BackendError;
use leasehold_engine::{
    check_queue_room, Change, Engine, EngineConfig, EngineError, EngineRecord, ManualClock,
    QueueRecord, Snapshot,
};
use leasehold_store::codec;

use crate::tx::Tx;
use crate::{cached, storable, to_i64, to_u64, unavailable, Core};

type Result<T> = std::result::Result<T, BackendError>;

/// The instant of the cluster's clock, read in the transaction.
pub(crate) async fn now(tx: &Tx) -> Result<u64> {
    let row = tx
        .query_one(&cached(tx, "SELECT leasehold_now()").await?, &[])
        .await
        .map_err(|e| unavailable(&e))?;
    Ok(to_u64(row.get(0)))
}

impl Core {
    /// Runs `command` on a transient engine holding the queues `keys` name (those that
    /// exist), under a transaction that holds every one of those names, existing or not, so
    /// two servers' commands on one queue take turns.
    pub(crate) async fn on_queues<T>(
        &self,
        keys: &[String],
        command: impl FnOnce(&mut Engine) -> std::result::Result<T, EngineError>,
    ) -> Result<T> {
        self.on_queues_making(keys, None, command).await
    }

    /// `on_queues` for a command that may make the queue `made`: then, under a lock on its
    /// account taken before any queue's (so two servers' creations in one account take turns
    /// and nothing waits in the other order), the account's queues are counted in the
    /// database and a new one past the quota is refused.
    pub(crate) async fn on_queues_making<T>(
        &self,
        keys: &[String],
        made: Option<&str>,
        command: impl FnOnce(&mut Engine) -> std::result::Result<T, EngineError>,
    ) -> Result<T> {
        let tx = self.begin().await?;
        let db = |e: tokio_postgres::Error| unavailable(&e);
        let account = made.map(|key| self.naming.key_account(key));
        if let Some(account) = account {
            // A space is in no queue key: this lock is the account's alone.
            tx.execute(
                &cached(&tx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))").await?,
                &[&format!("quota {account}")],
            )
            .await
            .map_err(db)?;
        }
        // A name PostgreSQL cannot hold names no queue: the engine's rules answer for it.
        let mut sorted: Vec<String> = keys.iter().filter(|k| storable(k)).cloned().collect();
        sorted.sort();
        sorted.dedup();
        for key in &sorted {
            tx.execute(
                &cached(&tx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))").await?,
                &[key],
            )
            .await
            .map_err(db)?;
        }
        let now = now(&tx).await?;
        let records = tx
            .query(
                &cached(
                    &tx,
                    "SELECT record FROM leasehold_queues WHERE key = ANY($1)",
                )
                .await?,
                &[&sorted],
            )
            .await
            .map_err(db)?
            .iter()
            .map(|row| decode(row.get(0)))
            .collect::<Result<Vec<QueueRecord>>>()?;
        let deleted_at = tx
            .query(
                &cached(
                    &tx,
                    "SELECT key, deleted_ms FROM leasehold_deleted_queues WHERE key = ANY($1)",
                )
                .await?,
                &[&sorted],
            )
            .await
            .map_err(db)?
            .iter()
            .map(|row| (row.get(0), to_u64(row.get(1))))
            .collect();
        let next_queue_id = if records.len() < sorted.len() {
            let row = tx
                .query_one(
                    &cached(&tx, "SELECT nextval('leasehold_queue_ids')").await?,
                    &[],
                )
                .await
                .map_err(db)?;
            to_u64(row.get(0))
        } else {
            0
        };
        let new_queue = made.filter(|made| !records.iter().any(|r| r.name == *made));
        let names: Vec<(u64, String)> = records
            .iter()
            .map(|r| (r.meta.id, r.name.clone()))
            .collect();
        let mut engine = self.transient_engine(now, next_queue_id, deleted_at, records);
        let value = command(&mut engine)?;
        // After the engine's own checks (a bad name, a name deleted recently), as the
        // embedded engine orders them: the quota is the last word on a new queue.
        if let (Some(_), Some(account)) = (new_queue, account) {
            self.check_queue_room(&tx, account).await?;
        }
        let mut purged = Vec::new();
        for change in engine.take_changes() {
            purged.extend(write_change(&tx, change, now).await?);
        }
        tx.commit().await?;
        // A purge ends leases that ran out unseen: counted now, as the engine had.
        for (queue_id, expired) in purged {
            if let Some((_, name)) = names.iter().find(|(id, _)| *id == queue_id) {
                self.measurements
                    .record(name, |m| m.stats.leases_expired += expired);
            }
        }
        Ok(value)
    }

    /// Refuses a new queue in `account` once the database holds its quota of them. A key
    /// without an account part is the server's own account's.
    async fn check_queue_room(&self, tx: &Tx, account: &str) -> Result<()> {
        let sql = "SELECT count(*) FROM leasehold_queues
                   WHERE CASE WHEN strpos(key, ':') = 0 THEN $2 ELSE split_part(key, ':', 1) END = $1";
        let row = tx
            .query_one(
                &cached(tx, sql).await?,
                &[&account, &self.naming.account_id],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let held = usize::try_from(row.get::<_, i64>(0)).unwrap_or(usize::MAX);
        Ok(check_queue_room(
            account,
            held,
            self.max_queues_per_account,
        )?)
    }

    fn transient_engine(
        &self,
        now: u64,
        next_queue_id: u64,
        deleted_at: Vec<(String, u64)>,
        queues: Vec<QueueRecord>,
    ) -> Engine {
        let config = EngineConfig {
            region: self.naming.region.clone(),
            account_id: self.naming.account_id.clone(),
            track_changes: true,
            // Without keys rows hold bodies in the clear: SSE-SQS is refused, not claimed.
            encrypts_at_rest: self.keyring.is_some(),
            ..EngineConfig::default()
        };
        let snapshot = Snapshot {
            engine: Some(EngineRecord {
                receipt_key: self.receipt_key,
                next_queue_id,
                deleted_at,
                tasks: Vec::new(),
            }),
            queues,
            ..Snapshot::default()
        };
        Engine::restore(Arc::new(ManualClock::new(now)), config, snapshot)
    }
}

pub(crate) fn decode(bytes: &[u8]) -> Result<QueueRecord> {
    codec::decode_queue(bytes).map_err(|e| {
        BackendError::Failed(format!("a queue record in the database is damaged: {e}"))
    })
}

/// Writes what the engine changed; a purge answers its queue and how many of the messages it
/// removed had a lease run out unseen.
async fn write_change(tx: &Tx, change: Change, now: u64) -> Result<Option<(u64, u64)>> {
    let db = |e: tokio_postgres::Error| unavailable(&e);
    match change {
        Change::Queue(record) => {
            let target = record
                .meta
                .settings
                .redrive
                .as_ref()
                .map(|r| r.dead_letter_target_arn.clone());
            let retention_ms = i64::from(record.meta.settings.retention_s) * 1000;
            tx.execute(
                &cached(tx, "INSERT INTO leasehold_queues (key, id, record, dead_letter_target_arn, retention_ms)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (key) DO UPDATE
                 SET record = excluded.record,
                     dead_letter_target_arn = excluded.dead_letter_target_arn,
                     retention_ms = excluded.retention_ms").await?,
                &[
                    &record.name,
                    &to_i64(record.meta.id),
                    &codec::queue_value(&record),
                    &target,
                    &retention_ms,
                ],
            )
            .await
            .map_err(db)?;
            tx.execute(
                &cached(tx, "DELETE FROM leasehold_deleted_queues WHERE key = $1").await?,
                &[&record.name],
            )
            .await
            .map_err(db)?;
        }
        Change::QueueDeleted { queue_id, .. } => {
            let id = to_i64(queue_id);
            let gone = tx
                .query_opt(
                    &cached(
                        tx,
                        "DELETE FROM leasehold_queues WHERE id = $1 RETURNING key",
                    )
                    .await?,
                    &[&id],
                )
                .await
                .map_err(db)?;
            if let Some(row) = gone {
                let key: String = row.get(0);
                tx.execute(
                    &cached(
                        tx,
                        "INSERT INTO leasehold_deleted_queues (key, deleted_ms) VALUES ($1, $2)
                     ON CONFLICT (key) DO UPDATE SET deleted_ms = excluded.deleted_ms",
                    )
                    .await?,
                    &[&key, &to_i64(now)],
                )
                .await
                .map_err(db)?;
            }
            // Its messages and the rest go in the background (sweep.rs).
            tx.execute(
                &cached(
                    tx,
                    "INSERT INTO leasehold_dropped_queues (queue_id, dropped_ms) VALUES ($1, $2)
                     ON CONFLICT (queue_id) DO NOTHING",
                )
                .await?,
                &[&id, &to_i64(now)],
            )
            .await
            .map_err(db)?;
        }
        Change::Purged { queue_id, .. } => {
            // The engine numbers messages per queue; here every message the purge's
            // transaction sees goes.
            let expired = forget_messages(tx, queue_id, now).await?;
            return Ok(Some((queue_id, expired)));
        }
        // The receipt key never changes; deletions are kept by QueueDeleted above; a
        // transient engine holds no messages, deduplication ids or measurements.
        // A metadata command's engine holds no messages: these never arise.
        Change::Engine(_)
        | Change::Content { .. }
        | Change::ContentMoved { .. }
        | Change::Message { .. }
        | Change::Dedup { .. }
        | Change::Metrics { .. } => {}
    }
    Ok(None)
}

/// Deletes a queue's messages, deduplication ids and receive attempts in one statement, so
/// in one snapshot (in two, a send committing between them kept its message and lost its
/// deduplication id). AWS forgets the deduplication window with the messages, so a purged id
/// may be sent again. The messages are locked in sequence order, the one order every batch
/// locks them in; deduplication ids and attempts a send or a receive holds at that moment are
/// theirs, after the purge, and are left (waiting for them, in whatever order the table is
/// read, could close a cycle with a batch send). Answers how many of the messages had a lease
/// run out that no receive had counted.
async fn forget_messages(tx: &Tx, queue_id: u64, now: u64) -> Result<u64> {
    let row = tx
        .query_one(
            &cached(
                tx,
                "WITH locked AS MATERIALIZED (
                     SELECT seq FROM leasehold_messages WHERE queue_id = $1
                     ORDER BY seq FOR UPDATE),
                 gone AS (
                     DELETE FROM leasehold_messages m USING locked
                     WHERE m.queue_id = $1 AND m.seq = locked.seq
                     RETURNING leasehold_lease_ran_out(receive_count, released, visible_ms, $2)
                               AS expired),
                 dedup AS (
                     DELETE FROM leasehold_dedup d USING (
                         SELECT scope, dedup_id FROM leasehold_dedup WHERE queue_id = $1
                         FOR UPDATE SKIP LOCKED) free
                     WHERE d.queue_id = $1 AND (d.scope, d.dedup_id) = (free.scope, free.dedup_id)),
                 attempts AS (
                     DELETE FROM leasehold_receive_attempts a USING (
                         SELECT attempt_id FROM leasehold_receive_attempts WHERE queue_id = $1
                         FOR UPDATE SKIP LOCKED) free
                     WHERE a.queue_id = $1 AND a.attempt_id = free.attempt_id)
                 SELECT count(*) FILTER (WHERE expired) FROM gone",
            )
            .await?,
            &[&to_i64(queue_id), &to_i64(now)],
        )
        .await
        .map_err(|e| unavailable(&e))?;
    Ok(to_u64(row.get(0)))
}

//! The cluster's memory of recent deletes (the ring of V10), written beside a delete's
//! commit on a connection of its own rather than by the delete's statement.
//!
//! A delete that finds its message gone asks the ring whether a delete with the same
//! receive's handle removed it in the last minutes, on any server: a retry, not a repeat
//! delete. Written inside the delete's statement, the ring took about half of that
//! statement's time (an upsert a message) on the one backend a server's groups run on, in
//! line with everything else. Here it runs on another backend while the delete's transaction
//! commits, and the deletes are answered when both are done, so a retry sent after the
//! answer finds it. (A retry sent before the answer that waited for the message's row lock,
//! a FIFO queue's delete, may look in the ring in the instant between the two commits and
//! count as a repeat delete; the ring inside the delete's transaction had no such instant.)
//! The ring is unlogged: its transaction writes no WAL, so its commit waits for no flush.
//! It takes a second connection of the pool for that instant (the group's own goes back as
//! its commit ends, so even a pool of one serves both, one after the other).
//! Should it fail, the deletes still stand, and a retry of them counts as a repeat delete,
//! as after a crash of the database (which empties the ring) or past the window.

use leasehold_backend::BackendError;
use leasehold_engine::Receipt;

use tokio_postgres::types::ToSql;

use crate::handles::{Found, ToDelete};
use crate::tx::Tx;
use crate::{to_i64, Core};

/// The slot of `leasehold_recent_deletes` a message's delete is remembered in (V10): 65,536
/// of them, shared by every queue (about 5 MB, in cache): a busy queue's last few seconds
/// of deletes, as the engine remembers a queue's last 16,384.
pub(crate) fn slot(receipt: &Receipt) -> i32 {
    const SLOTS: u64 = 1 << 16;
    let mixed = receipt.key.seq ^ receipt.queue_id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    i32::try_from(mixed % SLOTS).unwrap_or_default()
}

/// Writes the removed messages' receipts into their slots, the last of a slot's keeping
/// it; a slot another transaction holds is passed over rather than waited for (that
/// delete's retry counts as a repeat). A slot missing (the ring emptied by a crash) is
/// inserted again.
const REMEMBER_SQL: &str = "WITH g AS MATERIALIZED (
         SELECT DISTINCT ON (slot) slot, queue_id, seq, receive_no
         FROM unnest($1::integer[], $2::bigint[], $3::bigint[], $4::integer[])
              WITH ORDINALITY AS g(slot, queue_id, seq, receive_no, n)
         ORDER BY slot, n DESC),
     free AS MATERIALIZED (
         SELECT slot FROM leasehold_recent_deletes WHERE slot = ANY($1::integer[])
         FOR UPDATE SKIP LOCKED),
     kept AS (
         UPDATE leasehold_recent_deletes r
         SET queue_id = g.queue_id, seq = g.seq, receive_no = g.receive_no, deleted_ms = $5
         FROM g
         WHERE r.slot = ANY(ARRAY(SELECT slot FROM free)) AND g.slot = r.slot)
     INSERT INTO leasehold_recent_deletes (slot, queue_id, seq, receive_no, deleted_ms)
     SELECT slot, queue_id, seq, receive_no, $5 FROM g
     -- Looked for only when a slot was not found free: held, or missing.
     WHERE (SELECT count(*) FROM free) < (SELECT count(*) FROM g)
       AND NOT EXISTS (SELECT 1 FROM leasehold_recent_deletes x WHERE x.slot = g.slot)
     ON CONFLICT (slot) DO NOTHING";

/// The receipts whose delete removed their message, of `receipts` and what each `found`.
pub(crate) fn removed(receipts: &[ToDelete], found: &[Found]) -> Vec<Receipt> {
    (receipts.iter().zip(found))
        .filter(|(_, found)| found.row().is_some_and(|row| row.seen.deletion.removes))
        .map(|(asked, _)| asked.receipt)
        .collect()
}

impl Core {
    /// Remembers `removed` (deleted at `now`) for their retries, in a statement of its own
    /// on another connection. Never fails: see the module's comment.
    pub(crate) async fn remember_deletes(&self, now: u64, removed: &[Receipt]) {
        if removed.is_empty() {
            return;
        }
        if let Err(error) = self.write_ring(now, removed).await {
            tracing::warn!(%error, deletes = removed.len(), "recent deletes not remembered: their retries count as repeat deletes");
        }
    }

    async fn write_ring(&self, now: u64, removed: &[Receipt]) -> Result<(), BackendError> {
        let slots: Vec<i32> = removed.iter().map(slot).collect();
        let queue_ids: Vec<i64> = removed.iter().map(|r| to_i64(r.queue_id)).collect();
        let seqs: Vec<i64> = removed.iter().map(|r| to_i64(r.key.seq)).collect();
        let receive_nos: Vec<i32> = (removed.iter())
            .map(|r| i32::try_from(r.receive_no).unwrap_or(i32::MAX))
            .collect();
        let params: [&(dyn ToSql + Sync); 5] =
            [&slots, &queue_ids, &seqs, &receive_nos, &to_i64(now)];
        Tx::run_alone(self.client().await?, REMEMBER_SQL, &params).await?;
        Ok(())
    }
}

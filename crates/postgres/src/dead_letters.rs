//! Dead-lettering on PostgreSQL: inside a receive's transaction, the receivable messages
//! already received maxReceiveCount times that the receive passes move to the dead-letter
//! queue, keeping their ids, bodies, attributes, send times and receive counts, and naming
//! their source, as the engine's `Queue::accept_dead_letter` does.

use leasehold_backend::BackendError;
use leasehold_engine::{rules, QueueSettings};

use crate::encryption;
use crate::messages::{DeadLetterRoute, Lease, Opened};
use crate::tx::Tx;
use crate::{cached, to_i64, to_u64, unavailable, Core};

type Result<T> = std::result::Result<T, BackendError>;

/// At most this many exhausted messages are dead-lettered by one receive: bounded work per
/// request; the next receive takes the next ones, and none is ever leased meanwhile.
const DEAD_LETTERS_PER_RECEIVE: i64 = 100;

/// A route's statement (`Core::dead_letter_route`): the dead-letter queue's id.
pub(crate) const ROUTE_SQL: &str = "SELECT id FROM leasehold_queues WHERE key = $1";

impl Core {
    /// The dead-letter queue a RedrivePolicy sends to, if it still exists: a target that
    /// no longer exists turns dead-lettering off rather than dropping messages, as the
    /// engine does.
    pub(crate) async fn dead_letter_route(
        &self,
        tx: &Tx,
        queue: &str,
        settings: &QueueSettings,
    ) -> Result<Option<DeadLetterRoute>> {
        let Some(policy) = &settings.redrive else {
            return Ok(None);
        };
        let Some(target) = self.naming.key_of_arn(&policy.dead_letter_target_arn) else {
            return Ok(None);
        };
        let row = tx
            .query_opt(&cached(tx, ROUTE_SQL).await?, &[&target])
            .await
            .map_err(|e| unavailable(&e))?;
        // A queue is FIFO exactly when its name ends in .fifo (creation holds them together).
        let target_fifo = row.is_some().then(|| target.ends_with(".fifo"));
        let max_receive_count =
            rules::dead_letter_after(Some(policy.max_receive_count), settings.fifo, target_fifo);
        Ok(row
            .zip(max_receive_count)
            .map(|(row, max_receive_count)| DeadLetterRoute {
                target_id: to_u64(row.get(0)),
                target_key: target,
                source_arn: self.naming.queue_arn(queue),
                max_receive_count,
            }))
    }

    /// The receivable messages of a standard queue the rules call exhausted (and whether
    /// their last lease ran out), oldest first, up to the key `before` (excluded), other than
    /// those this receive just leased (a lease of 0 s leaves them receivable).
    pub(crate) async fn exhausted(
        &self,
        tx: &Tx,
        queue_id: u64,
        lease: &Lease,
        before: (u64, u64),
        leased: &[i64],
    ) -> Result<Vec<(i64, bool)>> {
        let rows = tx
            .query(
                &cached(
                    tx,
                    "SELECT seq, leasehold_lease_ran_out(receive_count, released, visible_ms, $2)
                 FROM leasehold_messages
                 WHERE queue_id = $1 AND visible_ms <= $2 AND sent_ms > $3
                   AND leasehold_exhausted(receive_count, $4)
                   AND (sent_ms, seq) < ($5, $6) AND seq <> ALL($8)
                 ORDER BY sent_ms, seq
                 LIMIT $7
                 FOR UPDATE SKIP LOCKED",
                )
                .await?,
                &[
                    &to_i64(queue_id),
                    &to_i64(lease.now),
                    &to_i64(lease.oldest_kept),
                    &lease.max_receives,
                    &to_i64(before.0),
                    &to_i64(before.1),
                    &DEAD_LETTERS_PER_RECEIVE,
                    &leased,
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }

    /// Moves the messages `seqs` names, in that order, to the dead-letter queue in the
    /// receive's transaction, keeping their receive counts and saying where they came from;
    /// answers each one's receive count and whether a delete came late for it.
    pub(crate) async fn dead_letter(
        &self,
        tx: &Tx,
        opened: &Opened,
        route: &DeadLetterRoute,
        seqs: &[i64],
    ) -> Result<Vec<(u32, bool)>> {
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        // The target, held until the receive commits: a DeleteQueue of it on another server
        // waits, rather than commit while the messages are on their way to it. Gone since
        // the route was read: dead-lettering is off, and the messages stay where they are.
        // Only when something moves: a lock is a write, which a plain receive need not make.
        let target = tx
            .query_opt(
                &cached(
                    tx,
                    "SELECT 1 FROM leasehold_queues WHERE id = $1 FOR KEY SHARE",
                )
                .await?,
                &[&to_i64(route.target_id)],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        if target.is_none() {
            return Ok(Vec::new());
        }
        let to = Destination {
            id: route.target_id,
            fifo: opened.settings.fifo,
            dead_letter_source: Some(&route.source_arn),
        };
        self.transfer(tx, opened.id, &to, seqs, opened.now).await
    }

    /// Moves the messages `seqs` names from one queue to another, in that order, keeping
    /// their bodies, attributes and groups. A dead-lettered message keeps its id, receive
    /// count and (into a standard queue) send time, and names its source; a FIFO destination
    /// stamps it anew, after what its groups already hold, as AWS does. A moved one (a move
    /// task) is a new message, as AWS's redrive makes it: sent now, with an id of its own
    /// (derived from its new place), no receives.
    pub(crate) async fn transfer(
        &self,
        tx: &Tx,
        from: u64,
        to: &Destination<'_>,
        seqs: &[i64],
        now: u64,
    ) -> Result<Vec<(u32, bool)>> {
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let kept_ids = tx
            .query(
                &cached(
                    tx,
                    "SELECT seq, message_id, sealed, content_id FROM leasehold_messages
                     WHERE queue_id = $1 AND seq = ANY($2)",
                )
                .await?,
                &[&to_i64(from), &seqs],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let (mut seqs_with_ids, mut ids, mut contents) = (Vec::new(), Vec::new(), Vec::new());
        for row in &kept_ids {
            let seq: i64 = row.get(0);
            let id = row
                .get::<_, Option<Vec<u8>>>(1)
                .unwrap_or_else(|| self.sealer.message_id(from, to_u64(seq)).to_vec());
            // A sealed content is bound to its queue: sealed again for the one it moves to.
            // One sealed with a key this server lacks fails the command: moved as it is it
            // would never open again, and left behind it would break a move's order.
            let sealed = match row.get::<_, Option<Vec<u8>>>(2) {
                None => None,
                Some(sealed) => {
                    let content_id = row.get::<_, Option<i64>>(3);
                    let keys = self.keyring.as_deref();
                    let resealed = encryption::rebound(keys, from, to.id, content_id, sealed);
                    Some(resealed.map_err(|why| {
                        BackendError::Unavailable(format!(
                            "a message to move cannot be encrypted for its new queue here: {why}; give every server the same encryption key file"
                        ))
                    })?)
                }
            };
            seqs_with_ids.push(seq);
            ids.push(id);
            contents.push(sealed);
        }
        if to.fifo {
            tx.execute(
                &cached(
                    tx,
                    "SELECT pg_advisory_xact_lock(hashtextextended('send ' || g, $1))
                     FROM (SELECT DISTINCT group_id AS g FROM leasehold_messages
                           WHERE queue_id = $2 AND seq = ANY($3) ORDER BY 1) groups",
                )
                .await?,
                &[&to_i64(to.id), &to_i64(from), &seqs],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        }
        let dead_lettered = to.dead_letter_source.is_some();
        let moved = tx
            .query(
                &cached(
                    tx,
                    "WITH moved AS (
                 DELETE FROM leasehold_messages WHERE queue_id = $1 AND seq = ANY($2)
                 RETURNING *)
             INSERT INTO leasehold_messages
                 (queue_id, seq, sent_ms, visible_ms, receive_count, first_receive_ms, body,
                  attributes, system_attributes, message_id, dead_letter_source_arn,
                  group_id, deduplication_id, ready_order, late_deleted, released, sealed,
                  content_id)
             SELECT $3, nextval('leasehold_message_seqs'),
                    CASE WHEN $8 OR NOT $9 THEN $4 ELSE moved.sent_ms END, $4,
                    CASE WHEN $9 THEN moved.receive_count ELSE 0 END,
                    CASE WHEN $9 THEN moved.first_receive_ms END,
                    moved.body, moved.attributes, moved.system_attributes,
                    CASE WHEN $9 THEN ids.id END, $5,
                    moved.group_id, moved.deduplication_id,
                    CASE WHEN $8 THEN nextval('leasehold_message_seqs') END,
                    $9 AND moved.late_deleted,
                    -- Receivable, with no lease of this queue's to run out: its last ran out
                    -- (and was counted) where it was, as the engine makes it Ready.
                    true,
                    ids.sealed, moved.content_id
             FROM moved
             JOIN unnest($6::bigint[], $7::bytea[], $10::bytea[]) AS ids(seq, id, sealed)
                  ON ids.seq = moved.seq
             JOIN unnest($2::bigint[]) WITH ORDINALITY AS walk(seq, n) ON walk.seq = moved.seq
             ORDER BY walk.n
             RETURNING receive_count, late_deleted",
                )
                .await?,
                &[
                    &to_i64(from),
                    &seqs,
                    &to_i64(to.id),
                    &to_i64(now),
                    &to.dead_letter_source,
                    &seqs_with_ids,
                    &ids,
                    &to.fifo,
                    &dead_lettered,
                    &contents,
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(moved
            .iter()
            .map(|row| (row.get::<_, i32>(0).unsigned_abs(), row.get(1)))
            .collect())
    }
}

/// Where `transfer` moves messages: a queue's id, whether it is FIFO, and for a
/// dead-letter queue the ARN of the queue they come from.
pub(crate) struct Destination<'a> {
    pub(crate) id: u64,
    pub(crate) fifo: bool,
    pub(crate) dead_letter_source: Option<&'a str>,
}

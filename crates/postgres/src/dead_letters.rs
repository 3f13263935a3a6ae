//! Dead-lettering on PostgreSQL: inside a receive's transaction, before it claims, the
//! receivable messages already received maxReceiveCount times move to the dead-letter queue,
//! keeping their ids, bodies, attributes, send times and receive counts, and naming their
//! source, as the engine's `Queue::accept_dead_letter` does.

use deadpool_postgres::Transaction;
use leasehold_backend::BackendError;
use leasehold_engine::QueueSettings;

use crate::{cached, to_i64, to_u64, unavailable, Postgres};

type Result<T> = std::result::Result<T, BackendError>;

/// At most this many exhausted messages are dead-lettered by one receive: bounded work per
/// request; the next receive takes the next ones, and none is ever leased meanwhile.
const DEAD_LETTERS_PER_RECEIVE: i64 = 100;

/// Where a queue's exhausted messages go: the dead-letter queue's id, the source's ARN,
/// and after how many receives.
pub(crate) struct DeadLetterRoute {
    pub(crate) target_id: u64,
    pub(crate) source_arn: String,
    pub(crate) max_receive_count: u32,
}

impl Postgres {
    /// The dead-letter queue a RedrivePolicy sends to, if it still exists: a target that
    /// no longer exists turns dead-lettering off rather than dropping messages, as the
    /// engine does.
    pub(crate) async fn dead_letter_route(
        &self,
        tx: &Transaction<'_>,
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
            .query_opt(
                &cached(
                    tx,
                    "SELECT id FROM leasehold_queues WHERE key = $1 FOR KEY SHARE",
                )
                .await?,
                &[&target],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(row.map(|row| DeadLetterRoute {
            target_id: to_u64(row.get(0)),
            source_arn: self.naming.queue_arn(queue),
            max_receive_count: policy.max_receive_count,
        }))
    }

    /// Moves the receivable messages already received `max_receive_count` times to the
    /// dead-letter queue, in the receive's transaction, keeping their ids, bodies,
    /// attributes, send times and receive counts, and saying where they came from.
    pub(crate) async fn dead_letter(
        &self,
        tx: &Transaction<'_>,
        queue_id: u64,
        route: &DeadLetterRoute,
        now: u64,
        oldest_kept: u64,
    ) -> Result<()> {
        let max = i32::try_from(route.max_receive_count).unwrap_or(i32::MAX);
        let exhausted = tx
            .query(
                &cached(
                    tx,
                    "SELECT seq, message_id FROM leasehold_messages
                 WHERE queue_id = $1 AND visible_ms <= $2 AND sent_ms > $3
                   AND receive_count >= $4
                 ORDER BY sent_ms, seq
                 LIMIT $5
                 FOR UPDATE SKIP LOCKED",
                )
                .await?,
                &[
                    &to_i64(queue_id),
                    &to_i64(now),
                    &to_i64(oldest_kept),
                    &max,
                    &DEAD_LETTERS_PER_RECEIVE,
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        if exhausted.is_empty() {
            return Ok(());
        }
        let (seqs, ids): (Vec<i64>, Vec<Vec<u8>>) = exhausted
            .iter()
            .map(|row| {
                let seq: i64 = row.get(0);
                let id = row
                    .get::<_, Option<Vec<u8>>>(1)
                    .unwrap_or_else(|| self.sealer.message_id(queue_id, to_u64(seq)).to_vec());
                (seq, id)
            })
            .unzip();
        tx.execute(
            &cached(
                tx,
                "WITH moved AS (
                 DELETE FROM leasehold_messages WHERE queue_id = $1 AND seq = ANY($2)
                 RETURNING *)
             INSERT INTO leasehold_messages
                 (queue_id, seq, sent_ms, visible_ms, receive_count, first_receive_ms, body,
                  attributes, system_attributes, message_id, dead_letter_source_arn)
             SELECT $3, nextval('leasehold_message_seqs'), moved.sent_ms, $4,
                    moved.receive_count, moved.first_receive_ms, moved.body, moved.attributes,
                    moved.system_attributes, ids.id, $5
             FROM moved JOIN unnest($2::bigint[], $6::bytea[]) AS ids(seq, id)
                 ON ids.seq = moved.seq
             ORDER BY moved.seq",
            )
            .await?,
            &[
                &to_i64(queue_id),
                &seqs,
                &to_i64(route.target_id),
                &to_i64(now),
                &route.source_arn,
                &ids,
            ],
        )
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(())
    }
}

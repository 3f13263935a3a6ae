//! FIFO queues on PostgreSQL, by the engine's rules (`fifo.rs` and `Queue::receive` there):
//! a send reserves its sequence number under its deduplication id (a duplicate within five
//! minutes answers the original); a receive replays a ReceiveRequestAttemptId it answered in
//! the last five minutes, or walks the groups whose oldest message is receivable, in the
//! order they became so, taking each group's messages in order. The walk and the reservation
//! are functions in the schema (`V3__fifo.sql`, the walk as `V9__lock_order.sql` has it): one
//! round trip each, and group locks that keep two servers from serving one group out of
//! order.

use leasehold_backend::BackendError;
use leasehold_engine::{
    content_deduplication_id, format_message_id, Delivery, NewMessage, Sent, FIFO_WINDOW_MS,
};

use crate::messages::{delivery_columns, encoded, Lease, Opened, ReceiveTally, DELIVERY_COLUMNS};
use crate::tx::Tx;
use crate::{cached, storable, to_i64, to_u64, unavailable, Core};

type Result<T> = std::result::Result<T, BackendError>;

/// Where a FIFO message's deduplication id counts (its group, or '' for the whole queue: a
/// group id is never empty), and the id: the explicit one, or its body's hash.
fn deduplication_key(opened: &Opened, message: &NewMessage) -> (String, String) {
    let scope = match opened.settings.dedup_per_group {
        true => message.group_id.clone().unwrap_or_default(),
        false => String::new(),
    };
    let id = match &message.deduplication_id {
        Some(explicit) => explicit.clone(),
        None => content_deduplication_id(&message.body),
    };
    (scope, id)
}

impl Core {
    /// Takes the send locks of a batch's groups in one order (`leasehold_fifo_reserve` takes
    /// each again, which holds no longer), so two batches naming the same groups in other
    /// orders wait for each other instead of deadlocking; then, in one order too, a lock on
    /// each deduplication id the batch reserves: two batches of other groups naming the same
    /// ids in other orders (identical bodies under content-based deduplication, say) would
    /// otherwise each hold one id's row while waiting for the other's.
    pub(crate) async fn lock_groups(
        &self,
        tx: &Tx,
        opened: &Opened,
        messages: &[NewMessage],
    ) -> Result<()> {
        if messages.len() < 2 {
            return Ok(());
        }
        let groups: Vec<&str> = messages
            .iter()
            .filter_map(|m| m.group_id.as_deref())
            .filter(|g| storable(g))
            .collect();
        let (scopes, ids): (Vec<String>, Vec<String>) = messages
            .iter()
            .map(|m| deduplication_key(opened, m))
            .filter(|(scope, id)| storable(scope) && storable(id))
            .unzip();
        // One statement, the groups' locks first, then the ids', each set sorted.
        tx.execute(
            &cached(
                tx,
                "SELECT pg_advisory_xact_lock(hashtextextended(
                     CASE WHEN part = 1 THEN 'send ' || a ELSE 'dedup ' || a || ' ' || b END, $1))
                 FROM (SELECT 1 AS part, g AS a, '' AS b FROM unnest($2::text[]) AS g
                       UNION
                       SELECT 2, s, d FROM unnest($3::text[], $4::text[]) AS k(s, d)
                       ORDER BY 1, 2, 3) sorted",
            )
            .await?,
            &[&to_i64(opened.id), &groups, &scopes, &ids],
        )
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(())
    }

    /// Sends one validated message to a FIFO queue, or answers the original of a duplicate
    /// (false: nothing was stored).
    pub(crate) async fn send_fifo(
        &self,
        tx: &Tx,
        opened: &Opened,
        message: NewMessage,
    ) -> Result<(Sent, bool)> {
        let group = message.group_id.clone().unwrap_or_default();
        let (scope, dedup) = deduplication_key(opened, &message);
        let row = tx
            .query_one(
                &cached(
                    tx,
                    "SELECT reserved_seq, fresh FROM leasehold_fifo_reserve($1, $2, $3, $4, $5, $6)",
                )
                .await?,
                &[
                    &to_i64(opened.id),
                    &group,
                    &scope,
                    &dedup,
                    &to_i64(opened.now),
                    &to_i64(FIFO_WINDOW_MS),
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let seq: i64 = row.get(0);
        if !row.get::<_, bool>(1) {
            let original = Sent {
                message_id: format_message_id(self.sealer.message_id(opened.id, to_u64(seq))),
                sequence_number: Some(to_u64(seq)),
            };
            return Ok((original, false));
        }
        let sent = self.insert(tx, opened, message, seq, &dedup).await?;
        Ok((sent, true))
    }

    /// Stores one FIFO message under the sequence number and deduplication id reserved for
    /// it. FIFO queues have no per-message delay: the queue's applies.
    async fn insert(
        &self,
        tx: &Tx,
        opened: &Opened,
        message: NewMessage,
        seq: i64,
        dedup: &str,
    ) -> Result<Sent> {
        let delay_s = opened.settings.delay_s;
        let visible = opened.now + u64::from(delay_s) * 1000;
        let sealed = self.seals(&opened.settings);
        let content = self.stored_content(opened.id, &message, sealed)?;
        tx.execute(
            &cached(
                tx,
                "INSERT INTO leasehold_messages
                     (queue_id, seq, sent_ms, visible_ms, body, attributes, system_attributes,
                      group_id, deduplication_id, ready_order, sealed, content_id)
                 VALUES ($1, $7, $2, $3, $4, $5, $6, $8, $9, CASE WHEN $10 THEN $7::bigint END,
                         $11, $12)",
            )
            .await?,
            &[
                &to_i64(opened.id),
                &to_i64(opened.now),
                &to_i64(visible),
                &content.body,
                &content.attributes,
                &encoded(&message.system_attributes),
                &seq,
                &message.group_id,
                &dedup,
                // A message receivable at once is ranked by its send (V3__fifo.sql).
                &(delay_s == 0),
                &content.sealed,
                &content.content_id,
            ],
        )
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(Sent {
            message_id: format_message_id(self.sealer.message_id(opened.id, to_u64(seq))),
            sequence_number: Some(to_u64(seq)),
        })
    }

    /// A FIFO queue's receive: the replay of its attempt id, or the group walk, whose
    /// exhausted messages move to the dead-letter queue; an attempt that leased something is
    /// remembered for five minutes.
    pub(crate) async fn claim_fifo(
        &self,
        tx: &Tx,
        opened: &Opened,
        lease: &Lease,
        attempt: Option<&str>,
        tally: &mut ReceiveTally,
    ) -> Result<Vec<Delivery>> {
        if let Some(id) = attempt {
            if let Some(replayed) = self.replay(tx, opened, lease, id).await? {
                tally.replayed = true;
                return Ok(replayed);
            }
        }
        let walked = tx
            .query(
                &cached(
                    tx,
                    "SELECT claimed_seq, exhausted, expired FROM leasehold_fifo_claim($1, $2, $3, $4, $5, $6)",
                )
                .await?,
                &[
                    &to_i64(opened.id),
                    &to_i64(lease.now),
                    &i32::try_from(lease.max).unwrap_or(i32::MAX),
                    &to_i64(lease.until),
                    &to_i64(lease.oldest_kept),
                    &lease.max_receives,
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let (mut claimed, mut exhausted) = (Vec::new(), Vec::new());
        for row in &walked {
            let seq: i64 = row.get(0);
            tally.leases_expired += u64::from(row.get::<_, bool>(2));
            match row.get::<_, bool>(1) {
                true => exhausted.push(seq),
                false => claimed.push(seq),
            }
        }
        if let Some(route) = &lease.route {
            tally.dead_lettered = self.dead_letter(tx, opened, route, &exhausted).await?;
        }
        let deliveries = self.in_order(tx, opened, &claimed, tally).await?;
        if let (Some(id), false) = (attempt, deliveries.is_empty()) {
            self.remember_attempt(tx, opened, id, &deliveries).await?;
        }
        Ok(deliveries)
    }

    /// The deliveries of the messages `seqs` names, in that order.
    async fn in_order(
        &self,
        tx: &Tx,
        opened: &Opened,
        seqs: &[i64],
        tally: &mut ReceiveTally,
    ) -> Result<Vec<Delivery>> {
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let sql = concat!(
            "SELECT ",
            delivery_columns!(),
            " FROM leasehold_messages m
              JOIN unnest($2::bigint[]) WITH ORDINALITY AS walk(seq, n) ON walk.seq = m.seq
              WHERE m.queue_id = $1
              ORDER BY walk.n"
        );
        let rows = tx
            .query(&cached(tx, sql).await?, &[&to_i64(opened.id), &seqs])
            .await
            .map_err(|e| unavailable(&e))?;
        let openings = rows
            .iter()
            .map(|row| self.opening(opened, row))
            .collect::<Result<Vec<_>>>()?;
        self.deliverable(tx, opened, openings, tally).await
    }

    /// A receive retried with the attempt id of one that leased messages within five
    /// minutes gets them back with the same handles, the lease restarted, for each message
    /// still at the receive count it was handed out with. None: no such attempt.
    async fn replay(
        &self,
        tx: &Tx,
        opened: &Opened,
        lease: &Lease,
        attempt: &str,
    ) -> Result<Option<Vec<Delivery>>> {
        let remembered = tx
            .query_opt(
                &cached(
                    tx,
                    "SELECT seqs, receive_counts FROM leasehold_receive_attempts
                     WHERE queue_id = $1 AND attempt_id = $2 AND expires_ms > $3",
                )
                .await?,
                &[&to_i64(opened.id), &attempt.as_bytes(), &to_i64(lease.now)],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let Some(remembered) = remembered else {
            return Ok(None);
        };
        let (seqs, counts): (Vec<i64>, Vec<i32>) = (remembered.get(0), remembered.get(1));
        // The rows locked first in sequence order, the one order every batch locks them in
        // (the attempt remembers them in the walk's order, by group).
        let sql = concat!(
            "WITH locked AS MATERIALIZED (
                 SELECT seq FROM leasehold_messages
                 WHERE queue_id = $1 AND seq = ANY($4::bigint[])
                 ORDER BY seq FOR UPDATE)
             UPDATE leasehold_messages m
             SET visible_ms = $3,
                 ready_order = CASE WHEN $3::bigint <= $6::bigint THEN nextval('leasehold_message_seqs') END
             FROM unnest($4::bigint[], $5::integer[]) WITH ORDINALITY AS a(seq, receive_count, n)
             WHERE m.queue_id = $1 AND m.seq = a.seq AND m.receive_count = a.receive_count
               AND m.sent_ms > $2 AND m.seq IN (SELECT seq FROM locked)
             RETURNING ",
            delivery_columns!(),
            ", a.n"
        );
        let rows = tx
            .query(
                &cached(tx, sql).await?,
                &[
                    &to_i64(opened.id),
                    &to_i64(lease.oldest_kept),
                    &to_i64(lease.until),
                    &seqs,
                    &counts,
                    &to_i64(lease.now),
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let mut replayed = rows
            .iter()
            .map(|row| {
                Ok((
                    row.get::<_, i64>(DELIVERY_COLUMNS),
                    self.opening(opened, row)?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        replayed.sort_by_key(|(n, _)| *n);
        let openings = replayed.into_iter().map(|(_, d)| d).collect();
        let mut tally = ReceiveTally::default();
        Ok(Some(
            self.deliverable(tx, opened, openings, &mut tally).await?,
        ))
    }

    /// Remembers the messages handed out (not those claimed whose content did not open, which
    /// were released or removed) with the receive count each was handed out with.
    async fn remember_attempt(
        &self,
        tx: &Tx,
        opened: &Opened,
        attempt: &str,
        deliveries: &[Delivery],
    ) -> Result<()> {
        let seqs: Vec<i64> = (deliveries.iter())
            .filter_map(|d| d.sequence_number)
            .map(to_i64)
            .collect();
        let counts: Vec<i32> = deliveries
            .iter()
            .map(|d| i32::try_from(d.receive_count).unwrap_or(i32::MAX))
            .collect();
        tx.execute(
            &cached(
                tx,
                "INSERT INTO leasehold_receive_attempts
                     (queue_id, attempt_id, seqs, receive_counts, expires_ms)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (queue_id, attempt_id) DO UPDATE
                 SET seqs = excluded.seqs, receive_counts = excluded.receive_counts,
                     expires_ms = excluded.expires_ms",
            )
            .await?,
            &[
                &to_i64(opened.id),
                &attempt.as_bytes(),
                &seqs,
                &counts,
                &to_i64(opened.now + FIFO_WINDOW_MS),
            ],
        )
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(())
    }
}

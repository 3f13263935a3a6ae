//! Messages on PostgreSQL: rows of `leasehold_messages`. A send inserts; a receive claims the
//! oldest receivable rows with `FOR UPDATE SKIP LOCKED` and starts their leases in the same
//! statement, so concurrent receivers on any server never share a message under a live
//! lease; a delete or a visibility change opens the receipt handle with the cluster's key.
//! Standard queues, as the engine's `LeaseMode::Aws` treats them (any issued handle
//! deletes; a visibility change needs the message, not the current lease).

use std::sync::Arc;

use deadpool_postgres::Transaction;
use leasehold_backend::{BackendError, Received};
use leasehold_engine::{
    format_message_id, Delivery, EngineError, MsgKey, NewMessage, QueueSettings, Receipt,
    ReceiveRequest, Sent, MAX_VISIBILITY_TIMEOUT_S,
};
use leasehold_store::codec;

use crate::notify::notify;
use crate::queues::{decode, now};
use crate::{cached, to_i64, to_u64, unavailable, Postgres};

type Result<T> = std::result::Result<T, BackendError>;

/// The queue a message command works on, and the cluster's instant for it.
struct Opened {
    id: u64,
    settings: QueueSettings,
    now: u64,
}

fn encoded(attributes: &leasehold_engine::MessageAttributes) -> Option<Vec<u8>> {
    (!attributes.is_empty()).then(|| codec::attributes_value(attributes))
}

impl Postgres {
    /// The queue's id and settings and the cluster's instant, read in one statement; the
    /// queue is held against deletion until the transaction ends. What only the engine's
    /// FIFO rules do is not on PostgreSQL yet: refused plainly rather than answered by other
    /// rules.
    async fn open_queue(&self, tx: &Transaction<'_>, key: &str) -> Result<Opened> {
        let sql =
            "SELECT record, leasehold_now() FROM leasehold_queues WHERE key = $1 FOR KEY SHARE";
        let row = tx
            .query_opt(&cached(tx, sql).await?, &[&key])
            .await
            .map_err(|e| unavailable(&e))?
            .ok_or(EngineError::QueueDoesNotExist)?;
        let record = decode(row.get(0))?;
        if record.meta.settings.fifo {
            return Err(BackendError::Unsupported(
                "FIFO queues are not yet served by the PostgreSQL backend".into(),
            ));
        }
        Ok(Opened {
            id: record.meta.id,
            settings: record.meta.settings,
            now: to_u64(row.get(1)),
        })
    }

    /// Sends each message, checked by the engine's own rules against the queue's settings,
    /// in one transaction.
    pub(crate) async fn send_all(
        &self,
        queue: &str,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<std::result::Result<Sent, EngineError>>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| unavailable(&e))?;
        let Opened {
            id: queue_id,
            settings,
            now,
        } = self.open_queue(&tx, queue).await?;
        let mut results = Vec::with_capacity(messages.len());
        for message in messages {
            results.push(match message.validate(&settings) {
                Ok(()) => Ok(self.insert(&tx, queue_id, &settings, now, message).await?),
                Err(error) => Err(error),
            });
        }
        let sent = results.iter().filter(|r| r.is_ok()).count();
        notify(&tx, self.server_id, queue, sent).await?;
        tx.commit().await.map_err(|e| unavailable(&e))?;
        Ok(results)
    }

    async fn insert(
        &self,
        tx: &Transaction<'_>,
        queue_id: u64,
        settings: &QueueSettings,
        now: u64,
        message: NewMessage,
    ) -> Result<Sent> {
        let delay_s = message.delay_s.unwrap_or(settings.delay_s);
        let visible = now + u64::from(delay_s) * 1000;
        let row = tx
            .query_one(
                &cached(
                    tx,
                    "INSERT INTO leasehold_messages
                     (queue_id, seq, sent_ms, visible_ms, body, attributes, system_attributes)
                 VALUES ($1, nextval('leasehold_message_seqs'), $2, $3, $4, $5, $6)
                 RETURNING seq",
                )
                .await?,
                &[
                    &to_i64(queue_id),
                    &to_i64(now),
                    &to_i64(visible),
                    &message.body,
                    &encoded(&message.attributes),
                    &encoded(&message.system_attributes),
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let seq = to_u64(row.get(0));
        Ok(Sent {
            message_id: format_message_id(self.sealer.message_id(queue_id, seq)),
            sequence_number: None,
        })
    }

    /// One receive: claims up to `max_messages` receivable messages, oldest first, and
    /// starts their leases.
    pub(crate) async fn claim(&self, queue: &str, request: ReceiveRequest) -> Result<Received> {
        request.check()?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| unavailable(&e))?;
        let Opened {
            id: queue_id,
            settings,
            now,
        } = self.open_queue(&tx, queue).await?;
        let lease_s = request
            .visibility_s
            .unwrap_or(settings.visibility_timeout_s);
        let until = now + u64::from(lease_s) * 1000;
        let oldest_kept = now.saturating_sub(u64::from(settings.retention_s) * 1000);
        let route = self.dead_letter_route(&tx, queue, &settings).await?;
        if let Some(route) = &route {
            self.dead_letter(&tx, queue_id, route, now, oldest_kept)
                .await?;
        }
        // Exhausted messages are never leased, even past what one receive dead-letters.
        let max_receives = route.map_or(i32::MAX, |r| {
            i32::try_from(r.max_receive_count).unwrap_or(i32::MAX)
        });
        let rows = tx
            .query(
                &cached(
                    &tx,
                    "WITH picked AS (
                     SELECT seq FROM leasehold_messages
                     WHERE queue_id = $1 AND visible_ms <= $2 AND sent_ms > $5
                       AND receive_count < $6
                     ORDER BY sent_ms, seq
                     LIMIT $3
                     FOR UPDATE SKIP LOCKED)
                 UPDATE leasehold_messages m
                 SET visible_ms = $4, receive_count = m.receive_count + 1,
                     first_receive_ms = coalesce(m.first_receive_ms, $2), received_ms = $2
                 FROM picked
                 WHERE m.queue_id = $1 AND m.seq = picked.seq
                 RETURNING m.seq, m.sent_ms, m.receive_count, m.first_receive_ms, m.body,
                           m.attributes, m.system_attributes, m.message_id,
                           m.dead_letter_source_arn",
                )
                .await?,
                &[
                    &to_i64(queue_id),
                    &to_i64(now),
                    &i64::from(request.max_messages),
                    &to_i64(until),
                    &to_i64(oldest_kept),
                    &max_receives,
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let mut claimed = rows
            .iter()
            .map(|row| Ok((row.get::<_, i64>(0), self.delivery(queue_id, now, row)?)))
            .collect::<Result<Vec<_>>>()?;
        // RETURNING keeps no order: oldest first, as claimed.
        claimed.sort_by_key(|(seq, d)| (d.sent_ms, *seq));
        let deliveries: Vec<Delivery> = claimed.into_iter().map(|(_, d)| d).collect();
        let next_due = if deliveries.is_empty() {
            tx.query_one(
                &cached(&tx, "SELECT min(visible_ms) FROM leasehold_messages WHERE queue_id = $1 AND visible_ms > $2").await?,
                &[&to_i64(queue_id), &to_i64(now)],
            )
            .await
            .map_err(|e| unavailable(&e))?
            .get::<_, Option<i64>>(0)
        } else {
            None
        };
        tx.commit().await.map_err(|e| unavailable(&e))?;
        Ok(Received {
            deliveries,
            queue_wait_s: settings.receive_wait_s,
            next_due_in_ms: next_due.map(|due| to_u64(due).saturating_sub(now)),
        })
    }

    fn delivery(&self, queue_id: u64, now: u64, row: &tokio_postgres::Row) -> Result<Delivery> {
        let seq = to_u64(row.get(0));
        let sent_ms = to_u64(row.get(1));
        let receive_count: i32 = row.get(2);
        let receive_no = u32::try_from(receive_count).unwrap_or_default();
        let attributes = |index: usize| -> Result<_> {
            row.get::<_, Option<Vec<u8>>>(index)
                .map(|bytes| codec::decode_attributes(&bytes))
                .transpose()
                .map_err(|e| {
                    BackendError::Failed(format!("a message in the database is damaged: {e}"))
                })
        };
        let receipt = Receipt {
            queue_id,
            key: MsgKey { sent_ms, seq },
            receive_no,
            received_ms: now,
        };
        let body: String = row.get(4);
        let id = match row.get::<_, Option<Vec<u8>>>(7) {
            Some(kept) => kept.try_into().map_err(|_| {
                BackendError::Failed("a message id in the database is damaged".into())
            })?,
            None => self.sealer.message_id(queue_id, seq),
        };
        Ok(Delivery {
            message_id: format_message_id(id),
            receipt_handle: self.sealer.seal(receipt),
            body: Arc::from(body),
            attributes: attributes(5)?,
            system_attributes: attributes(6)?,
            sent_ms,
            first_receive_ms: row.get::<_, Option<i64>>(3).map_or(now, to_u64),
            receive_count: receive_no,
            group_id: None,
            deduplication_id: None,
            sequence_number: None,
            dead_letter_source_arn: row.get::<_, Option<String>>(8).map(Arc::from),
        })
    }

    /// Opens a handle and checks it was issued by this incarnation of the queue.
    fn open(&self, queue_id: u64, handle: &str) -> std::result::Result<Receipt, EngineError> {
        match self.sealer.open(handle) {
            Some(receipt) if receipt.queue_id == queue_id => Ok(receipt),
            _ => Err(EngineError::ReceiptHandleIsInvalid(handle.to_string())),
        }
    }

    /// Deletes the message each handle names. Deleting twice, or after retention dropped
    /// the message, succeeds, as on AWS.
    pub(crate) async fn delete_all(
        &self,
        queue: &str,
        handles: Vec<String>,
    ) -> Result<Vec<std::result::Result<(), EngineError>>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| unavailable(&e))?;
        let queue_id = self.open_queue(&tx, queue).await?.id;
        let mut results = Vec::with_capacity(handles.len());
        for handle in handles {
            let receipt = match self.open(queue_id, &handle) {
                Ok(receipt) => receipt,
                Err(error) => {
                    results.push(Err(error));
                    continue;
                }
            };
            tx.execute(
                &cached(&tx, "DELETE FROM leasehold_messages WHERE queue_id = $1 AND seq = $2 AND sent_ms = $3").await?,
                &[
                    &to_i64(queue_id),
                    &to_i64(receipt.key.seq),
                    &to_i64(receipt.key.sent_ms),
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
            results.push(Ok(()));
        }
        tx.commit().await.map_err(|e| unavailable(&e))?;
        Ok(results)
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
        let Opened {
            id: queue_id, now, ..
        } = self.open_queue(&tx, queue).await?;
        let mut results = Vec::with_capacity(changes.len());
        for (handle, timeout_s) in changes {
            let outcome = match self.open(queue_id, &handle) {
                Ok(receipt) => {
                    self.change_one(&tx, &receipt, &handle, now, timeout_s)
                        .await?
                }
                Err(error) => Err(error),
            };
            results.push(outcome);
        }
        let changed = results.iter().filter(|r| r.is_ok()).count();
        notify(&tx, self.server_id, queue, changed).await?;
        tx.commit().await.map_err(|e| unavailable(&e))?;
        Ok(results)
    }

    async fn change_one(
        &self,
        tx: &Transaction<'_>,
        receipt: &Receipt,
        handle: &str,
        now: u64,
        timeout_s: u32,
    ) -> Result<std::result::Result<(), EngineError>> {
        let key = [&to_i64(receipt.queue_id), &to_i64(receipt.key.seq)];
        let row = tx
            .query_opt(
                &cached(tx, "SELECT received_ms FROM leasehold_messages WHERE queue_id = $1 AND seq = $2 FOR UPDATE").await?,
                &[key[0], key[1]],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let Some(row) = row else {
            return Ok(Err(EngineError::MessageNotAvailable(handle.to_string())));
        };
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
        tx.execute(
            &cached(
                tx,
                "UPDATE leasehold_messages SET visible_ms = $3 WHERE queue_id = $1 AND seq = $2",
            )
            .await?,
            &[key[0], key[1], &to_i64(until)],
        )
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(Ok(()))
    }

    /// The queue's messages by state: receivable, in flight (leased), delayed; none past
    /// the queue's retention, even before the sweep deletes it.
    pub(crate) async fn counts(&self, queue_id: u64, settings: &QueueSettings) -> Result<[u64; 3]> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| unavailable(&e))?;
        let now = now(&tx).await?;
        let row = tx
            .query_one(
                &cached(
                    &tx,
                    "SELECT count(*) FILTER (WHERE visible_ms <= $2),
                        count(*) FILTER (WHERE visible_ms > $2 AND received_ms IS NOT NULL),
                        count(*) FILTER (WHERE visible_ms > $2 AND received_ms IS NULL)
                 FROM leasehold_messages WHERE queue_id = $1 AND sent_ms > $3",
                )
                .await?,
                &[
                    &to_i64(queue_id),
                    &to_i64(now),
                    &to_i64(now.saturating_sub(u64::from(settings.retention_s) * 1000)),
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        tx.commit().await.map_err(|e| unavailable(&e))?;
        Ok([0, 1, 2].map(|i| to_u64(row.get(i))))
    }
}

//! Messages on PostgreSQL: rows of `leasehold_messages`. A send inserts; a receive claims the
//! oldest receivable rows with `FOR UPDATE SKIP LOCKED` and starts their leases in the same
//! statement, so concurrent receivers on any server never share a message under a live
//! lease. FIFO queues' sends and receives are in `fifo.rs`, commands by receipt handle
//! (delete, visibility change) in `handles.rs`.

use std::sync::Arc;

use leasehold_backend::{BackendError, Received};
use leasehold_engine::{
    check_batch, format_message_id, rules, Delivery, EngineError, MessageState, NewMessage, Peeked,
    QueueSettings, ReceiveRequest, Sent,
};
use leasehold_store::codec;

use crate::deliveries::ContentColumns;
use crate::encryption;
use crate::notify::notify;
use crate::queues::{decode, now};
use crate::tx::Tx;
use crate::{cached, storable, to_i64, to_u64, unavailable, Core};

type Result<T> = std::result::Result<T, BackendError>;

/// The queue a message command works on, and the cluster's instant for it.
pub(crate) struct Opened {
    /// The queue's key (its account and name), to name it in the log.
    pub(crate) key: String,
    pub(crate) id: u64,
    pub(crate) settings: QueueSettings,
    pub(crate) now: u64,
}

/// Where a queue's exhausted messages go: the dead-letter queue's id, the source's ARN,
/// and after how many receives.
pub(crate) struct DeadLetterRoute {
    pub(crate) target_id: u64,
    /// The dead-letter queue's key: its waiting receives are woken when messages arrive.
    pub(crate) target_key: String,
    pub(crate) source_arn: String,
    pub(crate) max_receive_count: u32,
}

/// What one receive leases: up to `max` messages, from `now` until `until`; messages sent at
/// or before `oldest_kept` are past retention; a message received `max_receives` times is
/// exhausted, and goes by `route` to the dead-letter queue.
pub(crate) struct Lease {
    pub(crate) max: i64,
    pub(crate) now: u64,
    pub(crate) until: u64,
    pub(crate) oldest_kept: u64,
    pub(crate) max_receives: i32,
    pub(crate) route: Option<DeadLetterRoute>,
}

impl Lease {
    /// A receive's lease of `lease_s` seconds from the queue's instant, for up to `max`
    /// messages.
    pub(crate) fn new(
        opened: &Opened,
        lease_s: u32,
        max: u32,
        route: Option<DeadLetterRoute>,
    ) -> Lease {
        let (now, settings) = (opened.now, &opened.settings);
        let max_receives = rules::max_receives_for_sql(route.as_ref().map(|r| r.max_receive_count));
        Lease {
            max: i64::from(max),
            now,
            until: rules::lease_end(now, lease_s),
            oldest_kept: now.saturating_sub(u64::from(settings.retention_s) * 1000),
            // Exhausted messages are never leased, even past what one receive dead-letters.
            max_receives: i32::try_from(max_receives).unwrap_or(i32::MAX),
            route,
        }
    }

    /// The dead-letter queue this receive moved messages into, and how many: its polls, on
    /// every server, are woken. A queue that is its own dead-letter queue wakes nobody: its
    /// polls would spin.
    pub(crate) fn dead_lettered(
        &self,
        queue: &str,
        tally: &ReceiveTally,
    ) -> Option<(String, usize)> {
        self.route
            .as_ref()
            .map(|route| (route.target_key.clone(), tally.dead_lettered.len()))
            .filter(|(target, moved)| *moved > 0 && target != queue)
    }
}

/// The content's columns in the peek's rows.
const PEEK_CONTENT: ContentColumns = ContentColumns {
    body: 5,
    attributes: 8,
    sealed: 9,
    content_id: 10,
};

/// A standard message to store: its queue, its delay (its own, or the queue's), and whether
/// its queue keeps contents encrypted at rest.
pub(crate) struct NewRow<'a> {
    pub(crate) queue_id: u64,
    pub(crate) delay_s: u32,
    pub(crate) message: &'a NewMessage,
    pub(crate) sealed: bool,
}

/// A message's content as a row holds it: in the clear (`body`, `attributes`), or sealed
/// (`encryption.rs`), with the body empty.
pub(crate) struct StoredContent<'a> {
    pub(crate) body: &'a str,
    pub(crate) attributes: Option<Vec<u8>>,
    pub(crate) sealed: Option<Vec<u8>>,
    pub(crate) content_id: Option<i64>,
}

/// What one receive did besides its deliveries, for the lease measurements.
#[derive(Default)]
pub(crate) struct ReceiveTally {
    /// Messages whose last lease had run out (not been released).
    pub(crate) leases_expired: u64,
    /// Messages moved to the dead-letter queue: their receive counts and whether a delete
    /// had come late for them.
    pub(crate) dead_lettered: Vec<(u32, bool)>,
    /// A receive attempt answered again: nothing new was received.
    pub(crate) replayed: bool,
    /// A claimed message's content did not open (`deliveries.rs`): it was removed or
    /// released, and a receive that found too little looks again soon.
    pub(crate) unreadable: bool,
}

/// How soon a receive that met contents that did not open looks again (as the embedded
/// store's after a lost content): the messages behind them are receivable now.
const LOOK_AGAIN_AFTER_UNREADABLE_MS: u64 = 25;

impl ReceiveTally {
    /// When the queue's next message is due, for a receive that found too little: soon, if
    /// it passed contents that did not open.
    pub(crate) fn next_due(&self, due: Option<u64>) -> Option<u64> {
        match self.unreadable {
            true => Some(due.map_or(LOOK_AGAIN_AFTER_UNREADABLE_MS, |due| {
                due.min(LOOK_AGAIN_AFTER_UNREADABLE_MS)
            })),
            false => due,
        }
    }
}

/// The columns a delivery is made from (`Postgres::delivery`), of `leasehold_messages m`.
macro_rules! delivery_columns {
    () => {
        "m.seq, m.sent_ms, m.receive_count, m.first_receive_ms, m.body, m.attributes,
         m.system_attributes, m.message_id, m.dead_letter_source_arn, m.received_ms,
         m.group_id, m.deduplication_id, m.sealed, m.content_id"
    };
}
pub(crate) use delivery_columns;
/// How many columns `delivery_columns!()` names.
pub(crate) const DELIVERY_COLUMNS: usize = 14;

/// A standard send's statement (`Core::insert_many`): messages of any queues, numbered in
/// the order given.
pub(crate) const INSERT_SQL: &str = "INSERT INTO leasehold_messages
         (queue_id, seq, sent_ms, visible_ms, body, attributes, system_attributes,
          group_id, sealed, content_id)
     SELECT u.queue_id, nextval('leasehold_message_seqs'), $2, u.visible, u.body,
            u.attributes, u.system_attributes, u.group_id, u.sealed, u.content_id
     FROM unnest($1::bigint[], $3::bigint[], $4::text[], $5::bytea[], $6::bytea[],
                 $7::text[], $8::bytea[], $9::bigint[])
          WITH ORDINALITY AS u(queue_id, visible, body, attributes,
               system_attributes, group_id, sealed, content_id, n)
     ORDER BY u.n
     RETURNING seq";

/// A standard queue's claim (`Core::claim_standard`): the oldest receivable messages that
/// are not exhausted, leased in the same statement.
pub(crate) const CLAIM_SQL: &str = concat!(
    "WITH picked AS (
         SELECT seq, leasehold_lease_ran_out(receive_count, released, visible_ms, $2)
                    AS expired
         FROM leasehold_messages
         WHERE queue_id = $1 AND visible_ms <= $2 AND sent_ms > $5
           AND NOT leasehold_exhausted(receive_count, $6)
         ORDER BY sent_ms, seq
         LIMIT $3
         FOR UPDATE SKIP LOCKED)
     UPDATE leasehold_messages m
     SET visible_ms = $4, receive_count = m.receive_count + 1,
         first_receive_ms = coalesce(m.first_receive_ms, $2), received_ms = $2,
         extensions = 0, released = false
     -- By the primary key, as arrays: a join with `picked` (a CTE, estimated at a row)
     -- is planned as a nested loop over every row of the queue.
     WHERE m.queue_id = $1 AND m.seq = ANY(ARRAY(SELECT seq FROM picked))
     RETURNING ",
    delivery_columns!(),
    ", m.seq = ANY(ARRAY(SELECT seq FROM picked WHERE expired))"
);

fn no_keys() -> BackendError {
    BackendError::Failed(
        "the queue keeps its messages encrypted at rest, and this server was given no encryption key file".into(),
    )
}

pub(crate) fn encoded(attributes: &leasehold_engine::MessageAttributes) -> Option<Vec<u8>> {
    (!attributes.is_empty()).then(|| codec::attributes_value(attributes))
}

impl Core {
    /// A transaction, and in the same round trip the queue's id and settings and the
    /// cluster's instant, read in one statement. The queue's row is not locked (a lock on it
    /// would be a write by every command, and a multixact among concurrent ones): a row a
    /// command adds to a queue deleted meanwhile is swept with the queue's others
    /// (V7__background_deletes.sql).
    pub(crate) async fn begin_at(&self, key: &str) -> Result<(Tx, Opened)> {
        if !storable(key) {
            return Err(EngineError::QueueDoesNotExist.into());
        }
        let sql = "SELECT record, leasehold_now() FROM leasehold_queues WHERE key = $1";
        let (tx, rows) = Tx::begin_with_query(self.client().await?, sql, &[&key]).await?;
        let row = rows.first().ok_or(EngineError::QueueDoesNotExist)?;
        let record = decode(row.get(0))?;
        let opened = Opened {
            key: key.to_string(),
            id: record.meta.id,
            settings: record.meta.settings,
            now: to_u64(row.get(1)),
        };
        Ok((tx, opened))
    }

    /// Sends each message to a FIFO queue (a standard queue's sends are grouped, `group/`),
    /// checked by the engine's own rules against the queue's settings, in one transaction; a
    /// batch first passes the checks that fail it whole.
    pub(crate) async fn send_all(
        &self,
        queue: &str,
        messages: Vec<NewMessage>,
        batch: bool,
    ) -> Result<Vec<std::result::Result<Sent, EngineError>>> {
        let (tx, opened) = self.begin_at(queue).await?;
        self.refuse_unsealable(&opened.settings)?;
        if batch {
            check_batch(&opened.settings, &messages)?;
        }
        let (mut results, mut stored) = (Vec::with_capacity(messages.len()), 0);
        self.lock_groups(&tx, &opened, &messages).await?;
        for message in messages {
            let (result, fresh) = match message.validate(&opened.settings) {
                Ok(()) => {
                    let (sent, fresh) = self.send_fifo(&tx, &opened, message).await?;
                    (Ok(sent), fresh)
                }
                Err(error) => (Err(error), false),
            };
            stored += u64::from(fresh);
            results.push(result);
        }
        let sent = results.iter().filter(|r| r.is_ok()).count();
        notify(&tx, self.server_id, queue, sent).await?;
        tx.commit().await?;
        self.measurements.record(queue, |m| m.stats.sent += stored);
        Ok(results)
    }

    /// Stores standard messages, of any queues, in one statement; answers them in order.
    pub(crate) async fn insert_many(
        &self,
        tx: &Tx,
        now: u64,
        rows: &[NewRow<'_>],
    ) -> Result<Vec<Sent>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let queue_ids: Vec<i64> = rows.iter().map(|r| to_i64(r.queue_id)).collect();
        let visible: Vec<i64> = rows
            .iter()
            .map(|r| to_i64(now + u64::from(r.delay_s) * 1000))
            .collect();
        let mut bodies = Vec::with_capacity(rows.len());
        let mut attributes = Vec::with_capacity(rows.len());
        let mut sealed = Vec::with_capacity(rows.len());
        let mut content_ids = Vec::with_capacity(rows.len());
        for row in rows {
            let stored = self.stored_content(row.queue_id, row.message, row.sealed)?;
            bodies.push(stored.body);
            attributes.push(stored.attributes);
            sealed.push(stored.sealed);
            content_ids.push(stored.content_id);
        }
        let system: Vec<Option<Vec<u8>>> = rows
            .iter()
            .map(|r| encoded(&r.message.system_attributes))
            .collect();
        let groups: Vec<Option<&str>> =
            rows.iter().map(|r| r.message.group_id.as_deref()).collect();
        let answered = tx
            .query(
                &cached(tx, INSERT_SQL).await?,
                &[
                    &queue_ids,
                    &to_i64(now),
                    &visible,
                    &bodies,
                    &attributes,
                    &system,
                    &groups,
                    &sealed,
                    &content_ids,
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        // Numbered in the statement's order: ascending is the messages' order.
        let mut seqs: Vec<u64> = answered.iter().map(|row| to_u64(row.get(0))).collect();
        seqs.sort_unstable();
        if seqs.len() != rows.len() {
            return Err(BackendError::Failed(
                "a send answered fewer messages than it sent".into(),
            ));
        }
        Ok(rows
            .iter()
            .zip(seqs)
            .map(|(row, seq)| Sent {
                message_id: format_message_id(self.sealer.message_id(row.queue_id, seq)),
                sequence_number: None,
            })
            .collect())
    }

    /// How a message's content is stored: sealed when its queue asks (`sealed`), in the
    /// clear otherwise. A server without keys refuses to store one that must be sealed
    /// (its sends are refused before, `Core::refuse_unsealable`).
    pub(crate) fn stored_content<'a>(
        &self,
        queue_id: u64,
        message: &'a NewMessage,
        sealed: bool,
    ) -> Result<StoredContent<'a>> {
        if !sealed {
            return Ok(StoredContent {
                body: &message.body,
                attributes: encoded(&message.attributes),
                sealed: None,
                content_id: None,
            });
        }
        let keyring = self.keyring.as_deref().ok_or_else(no_keys)?;
        let content = encryption::seal(keyring, queue_id, &message.body, &message.attributes);
        Ok(StoredContent {
            body: "",
            attributes: None,
            sealed: Some(content.bytes),
            content_id: Some(content.content_id),
        })
    }

    /// Whether this server stores the contents of a queue with these settings sealed: it
    /// asks (SSE-SQS, or a KMS key id), and the server has keys. Without keys a KMS key id is
    /// kept and shown as on AWS, its contents in the clear, as before keys existed.
    pub(crate) fn seals(&self, settings: &QueueSettings) -> bool {
        self.keyring.is_some() && settings.encrypted_at_rest()
    }

    /// A send to a queue with SSE-SQS, refused by a server given no encryption keys (one
    /// started before another server recorded its keys in the database: it is refused at its
    /// next start) rather than stored in the clear.
    pub(crate) fn refuse_unsealable(&self, settings: &QueueSettings) -> Result<()> {
        match settings.sqs_managed_sse && self.keyring.is_none() {
            true => Err(no_keys()),
            false => Ok(()),
        }
    }

    /// One receive of a FIFO queue (a standard queue's receives are grouped, `group/`):
    /// leases up to `max_messages` receivable messages, by group, in order, and moves those
    /// already received maxReceiveCount times that it passes on the way to the dead-letter
    /// queue, as the engine's receive does.
    pub(crate) async fn claim(&self, queue: &str, request: ReceiveRequest) -> Result<Received> {
        let (tx, opened) = self.begin_at(queue).await?;
        let settings = &opened.settings;
        let route = self.dead_letter_route(&tx, queue, settings).await?;
        let lease_s = request
            .visibility_s
            .unwrap_or(settings.visibility_timeout_s);
        let lease = Lease::new(&opened, lease_s, request.max_messages, route);
        let mut tally = ReceiveTally::default();
        let attempt = request.attempt_id.as_deref();
        let deliveries = self
            .claim_fifo(&tx, &opened, &lease, attempt, &mut tally)
            .await?;
        let next_due = match deliveries.is_empty() {
            true => tally.next_due(self.next_due(&tx, &opened).await?),
            false => None,
        };
        let dead_lettered = lease.dead_lettered(queue, &tally);
        if let Some((target, moved)) = &dead_lettered {
            notify(&tx, self.server_id, target, *moved).await?;
        }
        tx.commit().await?;
        if let Some((target, moved)) = &dead_lettered {
            self.waiters.wake_some(target, *moved);
        }
        self.measure_receive(queue, opened.now, &deliveries, tally);
        Ok(Received {
            deliveries,
            queue_wait_s: settings.receive_wait_s,
            next_due_in_ms: next_due,
            over_limit: false,
        })
    }

    /// For a receive that found nothing: in how many milliseconds a delay or a lease of the
    /// queue ends by itself (None: none will).
    pub(crate) async fn next_due(&self, tx: &Tx, opened: &Opened) -> Result<Option<u64>> {
        let due = tx
            .query_one(
                &cached(tx, "SELECT min(visible_ms) FROM leasehold_messages WHERE queue_id = $1 AND visible_ms > $2").await?,
                &[&to_i64(opened.id), &to_i64(opened.now)],
            )
            .await
            .map_err(|e| unavailable(&e))?
            .get::<_, Option<i64>>(0);
        Ok(due.map(|due| to_u64(due).saturating_sub(opened.now)))
    }

    /// A standard queue's receive: one statement claims the oldest receivable messages that
    /// are not exhausted; then the exhausted ones older than the last claimed (all of them if
    /// the receive is not full) move to the dead-letter queue.
    pub(crate) async fn claim_standard(
        &self,
        tx: &Tx,
        opened: &Opened,
        lease: &Lease,
        tally: &mut ReceiveTally,
    ) -> Result<Vec<Delivery>> {
        let max = lease.max;

        let rows = tx
            .query(
                &cached(tx, CLAIM_SQL).await?,
                &[
                    &to_i64(opened.id),
                    &to_i64(lease.now),
                    &max,
                    &to_i64(lease.until),
                    &to_i64(lease.oldest_kept),
                    &lease.max_receives,
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        tally.leases_expired += rows
            .iter()
            .filter(|row| row.get::<_, bool>(DELIVERY_COLUMNS))
            .count() as u64;
        let mut claimed = rows
            .iter()
            .map(|row| {
                Ok((
                    (to_u64(row.get(1)), to_u64(row.get(0))),
                    self.opening(opened, row)?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        // RETURNING keeps no order: oldest first, as claimed.
        claimed.sort_by_key(|(key, _)| *key);
        if let Some(route) = &lease.route {
            // A full receive stops at its last message; one that is not full passed them all.
            let bound = match claimed.last() {
                Some((key, _)) if claimed.len() as i64 == max => *key,
                _ => (u64::MAX, u64::MAX),
            };
            let leased: Vec<i64> = claimed.iter().map(|((_, seq), _)| to_i64(*seq)).collect();
            let exhausted = self.exhausted(tx, opened.id, lease, bound, &leased).await?;
            tally.leases_expired += exhausted.iter().filter(|(_, expired)| *expired).count() as u64;
            let seqs: Vec<i64> = exhausted.iter().map(|(seq, _)| *seq).collect();
            tally.dead_lettered = self.dead_letter(tx, opened, route, &seqs).await?;
        }
        let openings = claimed.into_iter().map(|(_, d)| d).collect();
        self.deliverable(tx, opened, openings, tally).await
    }

    /// The queue's messages by state: receivable, in flight (leased), delayed; none past
    /// the queue's retention, even before the sweep deletes it.
    /// ... then the oldest one's send time (0: none), and how many receivable ones got there
    /// by a lease running out (counted as expired when they are received or deleted again).
    pub(crate) async fn counts(&self, queue_id: u64, settings: &QueueSettings) -> Result<[u64; 5]> {
        let tx = self.begin().await?;
        let now = now(&tx).await?;
        let row = tx
            .query_one(
                &cached(
                    &tx,
                    "SELECT count(*) FILTER (WHERE visible_ms <= $2),
                        count(*) FILTER (WHERE visible_ms > $2 AND received_ms IS NOT NULL),
                        count(*) FILTER (WHERE visible_ms > $2 AND received_ms IS NULL),
                        coalesce(min(sent_ms), 0),
                        count(*) FILTER (WHERE leasehold_lease_ran_out(receive_count, released,
                                                                       visible_ms, $2))
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
        tx.commit().await?;
        Ok([0, 1, 2, 3, 4].map(|i| to_u64(row.get(i))))
    }

    /// The `limit` oldest messages, changing nothing (the dashboard's peek); none past the
    /// queue's retention, as the counts.
    pub(crate) async fn peek(&self, queue: &str, limit: usize) -> Result<Vec<Peeked>> {
        let (tx, opened) = self.begin_at(queue).await?;
        let oldest_kept = opened
            .now
            .saturating_sub(u64::from(opened.settings.retention_s) * 1000);
        let rows = tx
            .query(
                &cached(
                    &tx,
                    "SELECT seq, sent_ms, visible_ms, receive_count, received_ms IS NOT NULL,
                        body, message_id, group_id, attributes, sealed, content_id
                 FROM leasehold_messages WHERE queue_id = $1 AND sent_ms > $2
                 ORDER BY sent_ms, seq LIMIT $3",
                )
                .await?,
                &[
                    &to_i64(opened.id),
                    &to_i64(oldest_kept),
                    &i64::try_from(limit).unwrap_or(i64::MAX),
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        tx.commit().await?;
        rows.iter()
            .map(|row| {
                let seq = to_u64(row.get(0));
                let visible_ms = to_u64(row.get(2));
                let state = match (visible_ms > opened.now, row.get::<_, bool>(4)) {
                    (false, _) => MessageState::Ready,
                    (true, true) => MessageState::InFlight,
                    (true, false) => MessageState::Delayed,
                };
                let id = self.message_id(opened.id, seq, row.get(6))?;
                // One whose content does not open shows none (a receive reports it).
                let body = match self.content(opened.id, row, &PEEK_CONTENT) {
                    Ok(content) => content.body,
                    Err(_) => Arc::from(""),
                };
                Ok(Peeked {
                    message_id: format_message_id(id),
                    sent_ms: to_u64(row.get(1)),
                    receive_count: u32::try_from(row.get::<_, i32>(3)).unwrap_or(0),
                    until_ms: (state != MessageState::Ready).then_some(visible_ms),
                    state,
                    group_id: row.get::<_, Option<String>>(7).map(Arc::from),
                    body,
                    unread: None,
                })
            })
            .collect()
    }
}

//! Rows into what a receive hands out: a delivery of each row of `delivery_columns!()`,
//! its content read from the clear columns or opened (`encryption.rs`). A row whose content
//! does not open is never handed out, and is said in the log with its queue and message id:
//! damaged (it never will open), it is removed in the receive's transaction; sealed with a
//! key this server lacks, it is given back as it was, for a server that has the key.

use std::collections::HashSet;
use std::sync::Arc;

use leasehold_backend::BackendError;
use leasehold_engine::{format_message_id, Content, Delivery, MsgKey, Receipt};
use leasehold_store::codec;
use tokio_postgres::Row;

use crate::encryption::{self, Unopened};
use crate::messages::{Opened, ReceiveTally};
use crate::tx::Tx;
use crate::{cached, to_i64, to_u64, unavailable, Core};

type Result<T> = std::result::Result<T, BackendError>;

/// A claimed row: its delivery, or why it cannot be one.
pub(crate) type Opening = std::result::Result<Delivery, Unreadable>;

/// A claimed row whose content did not open.
pub(crate) struct Unreadable {
    seq: u64,
    message_id: String,
    group_id: Option<Arc<str>>,
    why: Unopened,
}

/// Where a content is in a row: the clear body and attributes, the sealed bytes and the
/// content id.
pub(crate) struct ContentColumns {
    pub(crate) body: usize,
    pub(crate) attributes: usize,
    pub(crate) sealed: usize,
    pub(crate) content_id: usize,
}

/// The content's columns in `delivery_columns!()`.
const DELIVERY_CONTENT: ContentColumns = ContentColumns {
    body: 4,
    attributes: 5,
    sealed: 12,
    content_id: 13,
};

impl Core {
    /// A delivery from a row of `delivery_columns!()`, its receipt naming the lease the row
    /// holds now; or, when its content does not open, why.
    pub(crate) fn opening(&self, opened: &Opened, row: &Row) -> Result<Opening> {
        let queue_id = opened.id;
        let seq = to_u64(row.get(0));
        let id = self.message_id(queue_id, seq, row.get(7))?;
        let content = match self.content(queue_id, row, &DELIVERY_CONTENT) {
            Ok(content) => content,
            Err(why) => {
                return Ok(Err(Unreadable {
                    seq,
                    message_id: format_message_id(id),
                    group_id: row.get::<_, Option<String>>(10).map(Arc::from),
                    why,
                }));
            }
        };
        let sent_ms = to_u64(row.get(1));
        let receive_no = u32::try_from(row.get::<_, i32>(2)).unwrap_or_default();
        let received_ms = row.get::<_, Option<i64>>(9).map_or(opened.now, to_u64);
        let receipt = Receipt {
            queue_id,
            key: MsgKey { sent_ms, seq },
            receive_no,
            received_ms,
        };
        let system_attributes = match row.get::<_, Option<Vec<u8>>>(6) {
            Some(bytes) => Some(codec::decode_attributes(&bytes).map_err(|e| {
                BackendError::Failed(format!("a message in the database is damaged: {e}"))
            })?),
            None => None,
        };
        let text = |index: usize| row.get::<_, Option<String>>(index).map(Arc::from);
        Ok(Ok(Delivery {
            message_id: format_message_id(id),
            receipt_handle: self.sealer.seal(receipt),
            body: content.body,
            attributes: content.attributes,
            unread: None,
            system_attributes,
            sent_ms,
            first_receive_ms: row.get::<_, Option<i64>>(3).map_or(opened.now, to_u64),
            receive_count: receive_no,
            group_id: text(10),
            deduplication_id: text(11),
            sequence_number: opened.settings.fifo.then_some(seq),
            dead_letter_source_arn: text(8),
        }))
    }

    /// The deliveries among `openings`, in their order. The rest are logged. A damaged one
    /// is removed in `tx`: each receive would lease it and count a receive, and in a FIFO
    /// queue it would hold its group, yet it could never be handed out. One sealed with a key
    /// this server lacks is given back as it was before this receive (receivable, its receive
    /// not counted) for a server that holds the key, and in a FIFO queue so are the messages
    /// of its group claimed after it, which must not go before it.
    pub(crate) async fn deliverable(
        &self,
        tx: &Tx,
        opened: &Opened,
        openings: Vec<Opening>,
        tally: &mut ReceiveTally,
    ) -> Result<Vec<Delivery>> {
        let mut deliveries = Vec::with_capacity(openings.len());
        let (mut removed, mut given_back) = (Vec::new(), Vec::new());
        let mut held_groups: HashSet<Arc<str>> = HashSet::new();
        for opening in openings {
            let unreadable = match opening {
                Ok(delivery) => {
                    let held =
                        (delivery.group_id.as_ref()).is_some_and(|g| held_groups.contains(g));
                    match (opened.settings.fifo && held, delivery.sequence_number) {
                        (true, Some(seq)) => given_back.push(to_i64(seq)),
                        _ => deliveries.push(delivery),
                    }
                    continue;
                }
                Err(unreadable) => unreadable,
            };
            tally.unreadable = true;
            let damaged = matches!(unreadable.why, Unopened::Damaged(_));
            let (queue, message_id) = (&opened.key, &unreadable.message_id);
            let why = unreadable.why.why();
            match damaged {
                true => {
                    tracing::error!(%queue, %message_id, why, "a message's content is damaged: removed, never handed out");
                    removed.push(to_i64(unreadable.seq));
                }
                // A key this server lacks: a rotation not yet on every server, which a
                // server with the key serves meanwhile. Said at each meeting, as a warning.
                false => {
                    tracing::warn!(%queue, %message_id, why, "a message is sealed with a key this server's key file lacks: given back for a server that has it");
                    given_back.push(to_i64(unreadable.seq));
                    held_groups.extend(unreadable.group_id);
                }
            }
        }
        if !removed.is_empty() {
            tx.execute(
                &cached(
                    tx,
                    "DELETE FROM leasehold_messages WHERE queue_id = $1 AND seq = ANY($2)",
                )
                .await?,
                &[&to_i64(opened.id), &removed],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        }
        if !given_back.is_empty() {
            self.give_back(tx, opened, &given_back).await?;
        }
        Ok(deliveries)
    }

    /// Undoes this receive's lease of `seqs`: receivable now, the receive not counted (a
    /// FIFO message ranked as a released one is, V3__fifo.sql).
    async fn give_back(&self, tx: &Tx, opened: &Opened, seqs: &[i64]) -> Result<()> {
        tx.execute(
            &cached(
                tx,
                "UPDATE leasehold_messages
                 SET visible_ms = $3, receive_count = receive_count - 1,
                     first_receive_ms = CASE WHEN receive_count = 1 THEN NULL
                                             ELSE first_receive_ms END,
                     ready_order = CASE WHEN $4 THEN nextval('leasehold_message_seqs') END,
                     released = true
                 WHERE queue_id = $1 AND seq = ANY($2)",
            )
            .await?,
            &[
                &to_i64(opened.id),
                &seqs,
                &to_i64(opened.now),
                &opened.settings.fifo,
            ],
        )
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(())
    }

    /// A message's id: the one its row keeps (a dead-letter move keeps the id it had), or
    /// the one its queue and number give.
    pub(crate) fn message_id(
        &self,
        queue_id: u64,
        seq: u64,
        kept: Option<Vec<u8>>,
    ) -> Result<[u8; 16]> {
        match kept {
            Some(kept) => kept.try_into().map_err(|_| {
                BackendError::Failed("a message id in the database is damaged".into())
            }),
            None => Ok(self.sealer.message_id(queue_id, seq)),
        }
    }

    /// A row's content, from its clear columns or opened from its sealed one.
    pub(crate) fn content(
        &self,
        queue_id: u64,
        row: &Row,
        at: &ContentColumns,
    ) -> std::result::Result<Content, Unopened> {
        if let Some(sealed) = row.get::<_, Option<&[u8]>>(at.sealed) {
            let content_id = row.get::<_, Option<i64>>(at.content_id);
            return encryption::open(self.keyring.as_deref(), queue_id, content_id, sealed);
        }
        let attributes = match row.get::<_, Option<&[u8]>>(at.attributes) {
            Some(bytes) => Some(
                codec::decode_attributes(bytes)
                    .map_err(|e| Unopened::Damaged(format!("its attributes do not decode: {e}")))?,
            ),
            None => None,
        };
        Ok(Content {
            body: Arc::from(row.get::<_, &str>(at.body)),
            attributes,
        })
    }
}

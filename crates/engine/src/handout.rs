//! What a command on a queue hands back once the queue's lock is let go: a send's answer
//! (`Accepted` -> `Sent`) and a receive's deliveries (`Handout`), whose ids and receipt
//! handles are hashed and written out then, with no lock held.

use crate::message::{format_message_id, Delivery};
use crate::receipt::{Receipt, ReceiptSealer};

/// A send's answer: the id, and on FIFO queues the sequence number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    pub message_id: String,
    pub sequence_number: Option<u64>,
}

/// A send the queue took: its id is written out (`sent`) once the queue's lock is let go.
#[derive(Clone, Copy, Debug)]
pub struct Accepted {
    /// Known already (a FIFO queue remembers it for deduplication); None: derived.
    pub(crate) id: Option<[u8; 16]>,
    pub(crate) queue_id: u64,
    pub(crate) seq: u64,
    pub(crate) fifo: bool,
}

impl Accepted {
    /// The answer to the send: the message's id, and on FIFO queues its sequence number.
    pub fn sent(&self, sealer: &ReceiptSealer) -> Sent {
        let id = self
            .id
            .unwrap_or_else(|| sealer.message_id(self.queue_id, self.seq));
        Sent {
            message_id: format_message_id(id),
            sequence_number: self.fifo.then_some(self.seq),
        }
    }
}

/// A delivery whose id and receipt handle are still to be written out: hashing and encoding
/// them is most of what a receive costs, and needs nothing of the queue, so it is done after
/// the queue's lock is let go (`Handout::finish`).
#[derive(Debug)]
pub(crate) struct Drafted {
    pub delivery: Delivery,
    /// The id it kept from the queue it was first sent to; None: derived from its key.
    pub id: Option<[u8; 16]>,
    pub receipt: Receipt,
}

/// What one receive leased, to be handed out (`finish`) once the queue's lock is let go.
#[derive(Debug, Default)]
pub struct Handout {
    drafts: Vec<Drafted>,
    sealer: Option<ReceiptSealer>,
}

impl Handout {
    pub(crate) fn new(drafts: Vec<Drafted>, sealer: ReceiptSealer) -> Handout {
        Handout {
            drafts,
            sealer: Some(sealer),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.drafts.is_empty()
    }

    pub fn len(&self) -> usize {
        self.drafts.len()
    }

    /// Adds what another receive leased (of another stripe of the same engine's queue).
    pub fn extend(&mut self, other: Handout) {
        self.drafts.extend(other.drafts);
        self.sealer = self.sealer.take().or(other.sealer);
    }

    /// The deliveries, with their ids and sealed receipt handles.
    pub fn finish(self) -> Vec<Delivery> {
        let Some(sealer) = self.sealer else {
            return Vec::new();
        };
        self.drafts
            .into_iter()
            .map(|draft| {
                let Receipt { queue_id, key, .. } = draft.receipt;
                let id = draft
                    .id
                    .unwrap_or_else(|| sealer.message_id(queue_id, key.seq));
                Delivery {
                    message_id: format_message_id(id),
                    receipt_handle: sealer.seal(draft.receipt),
                    ..draft.delivery
                }
            })
            .collect()
    }
}

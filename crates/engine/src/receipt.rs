//! Receipt handles: opaque, unforgeable tokens naming one receive of one message.
//!
//! A handle carries the queue's incarnation, the message's key (send time and sequence
//! number) and the receive number, sealed with a keyed SipHash. The server can tell a handle it issued (even for a
//! message since deleted) from one it never issued, without remembering every handle.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use siphasher::sip::SipHasher13;
use siphasher::sip128::{Hasher128, SipHasher13 as SipHasher13x128};
use std::hash::Hasher;

use crate::message::MsgKey;

const BODY_LEN: usize = 8 + 8 + 8 + 4 + 8;
const LEN: usize = BODY_LEN + 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// Which incarnation of the queue issued it: a recreated queue refuses old handles.
    pub queue_id: u64,
    /// The message's key within the queue.
    pub key: MsgKey,
    /// Which receive of the message issued it (1 for the first).
    pub receive_no: u32,
    /// When that receive happened: the start of the lease, for measuring how long it was held.
    pub received_ms: u64,
}

/// Seals and opens receipt handles with a secret key.
#[derive(Clone, Debug)]
pub struct ReceiptSealer {
    key: [u8; 16],
}

impl ReceiptSealer {
    pub fn new(key: [u8; 16]) -> Self {
        ReceiptSealer { key }
    }

    fn mac(&self, body: &[u8]) -> u64 {
        let mut hasher = SipHasher13::new_with_key(&self.key);
        hasher.write(body);
        hasher.finish()
    }

    /// The id of the message sent to queue `queue_id` as its number `seq`: a keyed hash, so
    /// that a stored message need not keep its id (16 bytes of every message). Distinct for
    /// every message of every queue, stable across restarts (the key is stored), and no
    /// clue to the key or to other ids.
    pub fn message_id(&self, queue_id: u64, seq: u64) -> [u8; 16] {
        let mut hasher = SipHasher13x128::new_with_key(&self.key);
        hasher.write(b"message id");
        hasher.write(&queue_id.to_be_bytes());
        hasher.write(&seq.to_be_bytes());
        hasher.finish128().as_bytes()
    }

    pub fn seal(&self, receipt: Receipt) -> String {
        let mut bytes = [0u8; LEN];
        bytes[0..8].copy_from_slice(&receipt.queue_id.to_be_bytes());
        bytes[8..16].copy_from_slice(&receipt.key.sent_ms.to_be_bytes());
        bytes[16..24].copy_from_slice(&receipt.key.seq.to_be_bytes());
        bytes[24..28].copy_from_slice(&receipt.receive_no.to_be_bytes());
        bytes[28..36].copy_from_slice(&receipt.received_ms.to_be_bytes());
        let mac = self.mac(&bytes[..BODY_LEN]);
        bytes[BODY_LEN..].copy_from_slice(&mac.to_be_bytes());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The receipt inside `handle`, or None if this server never issued it.
    pub fn open(&self, handle: &str) -> Option<Receipt> {
        let bytes = URL_SAFE_NO_PAD.decode(handle).ok()?;
        if bytes.len() != LEN {
            return None;
        }
        let mac = u64::from_be_bytes(bytes[BODY_LEN..].try_into().ok()?);
        if mac != self.mac(&bytes[..BODY_LEN]) {
            return None;
        }
        Some(Receipt {
            queue_id: u64::from_be_bytes(bytes[0..8].try_into().ok()?),
            key: MsgKey {
                sent_ms: u64::from_be_bytes(bytes[8..16].try_into().ok()?),
                seq: u64::from_be_bytes(bytes[16..24].try_into().ok()?),
            },
            receive_no: u32::from_be_bytes(bytes[24..28].try_into().ok()?),
            received_ms: u64::from_be_bytes(bytes[28..36].try_into().ok()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_handle_opens_to_the_same_receipt() {
        let sealer = ReceiptSealer::new([7; 16]);
        let receipt = Receipt {
            queue_id: 3,
            key: MsgKey {
                sent_ms: 1_700_000_000_000,
                seq: 99,
            },
            receive_no: 2,
            received_ms: 1_700_000_001_000,
        };
        assert_eq!(sealer.open(&sealer.seal(receipt)), Some(receipt));
    }

    #[test]
    fn message_ids_differ_by_queue_and_number_and_by_key() {
        let sealer = ReceiptSealer::new([7; 16]);
        let id = sealer.message_id(1, 1);
        assert_eq!(id, ReceiptSealer::new([7; 16]).message_id(1, 1));
        assert_ne!(id, sealer.message_id(1, 2));
        assert_ne!(id, sealer.message_id(2, 1));
        assert_ne!(id, ReceiptSealer::new([8; 16]).message_id(1, 1));
    }

    #[test]
    fn forged_or_foreign_handles_do_not_open() {
        let sealer = ReceiptSealer::new([7; 16]);
        let handle = sealer.seal(Receipt {
            queue_id: 1,
            key: MsgKey { sent_ms: 5, seq: 1 },
            receive_no: 1,
            received_ms: 6,
        });
        assert_eq!(ReceiptSealer::new([8; 16]).open(&handle), None);
        let mut tampered = handle.clone().into_bytes();
        tampered[3] = if tampered[3] == b'A' { b'B' } else { b'A' };
        assert_eq!(sealer.open(std::str::from_utf8(&tampered).unwrap()), None);
        assert_eq!(sealer.open("garbage"), None);
        assert_eq!(sealer.open(""), None);
    }
}

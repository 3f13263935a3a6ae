//! Message contents encrypted at rest on PostgreSQL (issue 30): a message of a queue that
//! asks for it (`QueueSettings::encrypted_at_rest`) is stored with an empty `body`, no
//! `attributes`, and its body and attributes sealed together in `sealed` (the store's
//! keyring, AES-256-GCM-SIV), bound to its queue's id and `content_id`, a random number of
//! its own. A sealed content moved or swapped into another row, or changed, does not open:
//! it is reported with its queue and message id and removed, never served. A move to
//! another queue (a dead-letter move, a move task) seals it again, bound to the new queue;
//! a content keeps what it was when it moves (a clear one stays clear, as on the embedded
//! store). Copying a row's sealed value together with its content id into another row of
//! the same queue is not detected: the binding must survive the moves a message makes.
//!
//! The keys are a key file every server of the cluster shares; `leasehold_seals` records
//! which keys sealed anything, and each server's file is checked against it at start, as
//! the embedded store checks its data directory's.

use std::path::Path;
use std::sync::Arc;

use leasehold_engine::{Content, MessageAttributes};
use leasehold_store::codec;
use leasehold_store::keyring::{Keyring, OpenError};
use leasehold_store::sealing::{checked_keyring, Seal};
use tokio_postgres::Client;

use crate::{cause, to_i64, StartError};

/// What a sealed content is bound to, besides its queue and content id: a label of its own,
/// so no record sealed for another purpose opens as one.
const BINDING: &[u8] = b"leasehold-pg-content\0";

/// The keys that seal the database's contents, from `key_file`, checked against the keys
/// that sealed what the database holds (`leasehold_seals`); the sealing key recorded there
/// when it is new, before anything is sealed with it. Without a key file, a database that
/// holds sealed contents is refused: this server could not read them.
pub(crate) async fn open_keys(
    client: &Client,
    key_file: Option<&Path>,
) -> Result<Option<Arc<Keyring>>, StartError> {
    let seals = recorded(client).await?;
    let Some(path) = key_file else {
        if !seals.is_empty() {
            return Err(StartError::Keys(
                "this database's messages are encrypted at rest (its servers were given a key file), and this one was given no encryption key file (--encryption-key-file)".into(),
            ));
        }
        return Ok(None);
    };
    let (keyring, new) = checked_keyring(&seals, path, "this database")
        .map_err(|e| StartError::Keys(e.to_string()))?;
    if let Some((number, check)) = new {
        client
            .execute(
                "INSERT INTO leasehold_seals (number, key_check) VALUES ($1, $2)
                 ON CONFLICT (number) DO NOTHING",
                &[&i64::from(number), &check.as_slice()],
            )
            .await
            .map_err(|e| StartError::Schema(cause(&e)))?;
        // Another server may have recorded a key of that number first, from another file.
        checked_keyring(&recorded(client).await?, path, "this database")
            .map_err(|e| StartError::Keys(e.to_string()))?;
    }
    Ok(Some(keyring))
}

/// The keys that sealed anything in the database, as recorded.
async fn recorded(client: &Client) -> Result<Vec<Seal>, StartError> {
    let rows = client
        .query(
            "SELECT number, key_check FROM leasehold_seals ORDER BY number",
            &[],
        )
        .await
        .map_err(|e| StartError::Schema(cause(&e)))?;
    rows.iter()
        .map(|row| {
            let number = u32::try_from(row.get::<_, i64>(0)).ok();
            let check = row.get::<_, Vec<u8>>(1).try_into().ok();
            number.zip(check).ok_or_else(|| {
                StartError::Schema("the record of the keys that sealed messages is damaged".into())
            })
        })
        .collect()
}

/// A sealed content: its random id and the sealed bytes.
pub(crate) struct Sealed {
    pub(crate) content_id: i64,
    pub(crate) bytes: Vec<u8>,
}

/// A message's body and attributes, sealed for its queue under the newest key.
pub(crate) fn seal(
    keyring: &Keyring,
    queue_id: u64,
    body: &str,
    attributes: &MessageAttributes,
) -> Sealed {
    let content_id: i64 = rand::random();
    let attributes = Some(attributes).filter(|a| !a.is_empty());
    let plain = codec::content_value_of(body, attributes);
    Sealed {
        content_id,
        bytes: keyring.seal(&bound_to(queue_id, content_id), &plain),
    }
}

/// Why a sealed content was not opened.
#[derive(Debug)]
pub(crate) enum Unopened {
    /// Changed, or put in another's place: it never will open, and is removed.
    Damaged(String),
    /// Sealed with a key this server does not hold, or holds another key under its number
    /// (a rotation done on another server first): left for a server that has it.
    KeyMissing(String),
}

impl Unopened {
    pub(crate) fn why(&self) -> &str {
        match self {
            Unopened::Damaged(why) | Unopened::KeyMissing(why) => why,
        }
    }
}

/// A sealed content of `queue_id`, opened.
pub(crate) fn open(
    keyring: Option<&Keyring>,
    queue_id: u64,
    content_id: Option<i64>,
    sealed: &[u8],
) -> Result<Content, Unopened> {
    let damaged = |why: String| Unopened::Damaged(why);
    let content_id = content_id.ok_or_else(|| damaged("its content id is missing".into()))?;
    let plain = match keyring.map(|k| k.open(&bound_to(queue_id, content_id), sealed)) {
        Some(Ok(plain)) => plain,
        None => return Err(Unopened::KeyMissing(OpenError::NoKeys.to_string())),
        Some(Err(error @ (OpenError::UnknownKey(_) | OpenError::WrongKey(_)))) => {
            return Err(Unopened::KeyMissing(error.to_string()))
        }
        Some(Err(error)) => return Err(damaged(error.to_string())),
    };
    codec::decode_content(&plain).map_err(|e| damaged(format!("its content does not decode: {e}")))
}

/// A sealed content of `from` sealed again for `to` (under the newest key), its content id
/// kept; as it is when it is damaged (it stays damaged, and is reported where it is read).
/// Err, why, when this server lacks the key that sealed it: it cannot be moved from here
/// without being lost.
pub(crate) fn rebound(
    keyring: Option<&Keyring>,
    from: u64,
    to: u64,
    content_id: Option<i64>,
    sealed: Vec<u8>,
) -> Result<Vec<u8>, String> {
    let Some(content_id) = content_id else {
        return Ok(sealed);
    };
    let keyring = keyring.ok_or_else(|| OpenError::NoKeys.to_string())?;
    match keyring.open(&bound_to(from, content_id), &sealed) {
        Ok(plain) => Ok(keyring.seal(&bound_to(to, content_id), &plain)),
        Err(error @ (OpenError::UnknownKey(_) | OpenError::WrongKey(_))) => Err(error.to_string()),
        Err(_) => Ok(sealed),
    }
}

fn bound_to(queue_id: u64, content_id: i64) -> Vec<u8> {
    [
        BINDING,
        &to_i64(queue_id).to_be_bytes(),
        &content_id.to_be_bytes(),
    ]
    .concat()
}

//! Durable storage under the engine.
//!
//! The seam is the narrow [`Store`] trait: ordered key-value batches in, a full scan out. The
//! [`codec`] turns engine records into keys and values; [`SqliteStore`] keeps them in one
//! SQLite file (chosen by the spike in `spikes/store-engines`); [`MemoryStore`] keeps them in
//! a map for tests; [`FaultyStore`] fails on purpose. The [`Committer`] is group commit:
//! concurrent requests share one write and one fsync, and nobody is answered before theirs.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod backup;
mod ballast;
mod batch;
pub mod codec;
mod committer;
mod faulty;
mod guard;
pub mod keyring;
mod memory;
pub mod sealing;
mod sqlite;

use std::sync::Arc;

use leasehold_engine::{Clock, Content, ContentKey, Engine, EngineConfig, Snapshot};
use thiserror::Error;

use keyring::Keyring;

pub use backup::{backup, BackupSummary};
pub use batch::{Op, RangeDelete, WriteBatch};
pub use committer::{Committer, Durability, MAX_GROUP_BYTES};
pub use faulty::FaultyStore;
pub use memory::MemoryStore;
pub use sqlite::SqliteStore;

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum StoreError {
    #[error("cannot open the data file {path}: {reason}")]
    Open { path: String, reason: String },
    #[error("the data file {path} is damaged: {reason}")]
    Corrupt { path: String, reason: String },
    #[error("writing to {path} failed: {reason}")]
    Write { path: String, reason: String },
    /// The file system is full: the write changed nothing and may succeed once space is
    /// freed, unlike a failed write or fsync, after which the disk's state is unknown.
    #[error("writing to {path} failed: the file system is full ({reason})")]
    Full { path: String, reason: String },
    #[error("reading {path} failed: {reason}")]
    Read { path: String, reason: String },
    #[error("the store failed earlier and takes no more writes until a restart: {0}")]
    Failed(String),
    /// The encryption key file does not fit the store (`sealing::KeyError`): its line.
    #[error("{0}")]
    Keys(String),
    #[error("injected fault: {0}")]
    Injected(String),
}

/// What a scan calls for every key and value; an error stops the scan as damage.
pub type Visitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), String> + 'a;

/// Where the engine's records live between restarts.
pub trait Store: Send {
    /// Visits every stored key in `[start, end)` and its value but message contents
    /// (`codec::is_content`), in key order: what a restart reads, whose time grows with the
    /// number of messages, not their bytes.
    fn scan_range(
        &mut self,
        start: &[u8],
        end: &[u8],
        visit: &mut Visitor,
    ) -> Result<(), StoreError>;
    /// `scan_range` over every key.
    fn scan(&mut self, visit: &mut Visitor) -> Result<(), StoreError> {
        self.scan_range(&[], &[u8::MAX], visit)
    }
    /// Applies the batches' puts and deletes in order as one atomic write; durable on return
    /// when `sync`. Their range deletes are left for `delete_some`.
    fn write(&mut self, batches: &[WriteBatch], sync: bool) -> Result<(), StoreError>;
    /// Deletes at most `limit` records of `range` in one write of its own, so a range of a
    /// million records is deleted in steps between other writes; answers how many it
    /// deleted (fewer than `limit`: the range is empty). Not synced: a later sync covers it,
    /// and until then the engine skips what it would have deleted.
    fn delete_some(&mut self, range: &RangeDelete, limit: usize) -> Result<usize, StoreError>;
    /// Makes every earlier write durable.
    fn sync(&mut self) -> Result<(), StoreError>;
    /// Names the store in messages: the data file's path.
    fn describe(&self) -> String;
    /// A reader of what this store holds, for any number of threads while it writes.
    fn reader(&self) -> Result<Arc<dyn Reader>, StoreError>;
    /// From now on the contents marked for it (`Op::PutSealed`) are sealed with `keyring`'s
    /// newest key, bound to their store key, and a copy (`Op::Copy`: a content moving with
    /// its message) of a sealed record is sealed again to its new key (`sealing::rebound`).
    /// Without it contents are stored as they come.
    fn seal_with(&mut self, keyring: Arc<Keyring>);
}

/// Reads a store while its committer writes: message contents as a receive hands them out,
/// and the space left for writes.
pub trait Reader: Send + Sync {
    /// The values under `keys` as of the last committed write (None where there is none).
    fn get(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StoreError>;
    /// The space its writes may still use; None for a store that keeps no file.
    fn space(&self) -> Option<Space>;
}

/// What a store's writes may still use: free space on its file system, and pages inside its
/// file that deletes freed (SQLite reuses them before it grows the file).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Space {
    pub file_system_size: u64,
    pub file_system_free: u64,
    pub reusable_in_file: u64,
    /// The write-ahead log's length: after a checkpoint a write reuses it before growing it.
    pub write_ahead_log: u64,
}

/// What the write-ahead log must be able to hold: the pages written between two checkpoints
/// (SQLite checkpoints every 1,000 pages of 4 KiB) and a whole group commit on top.
pub const WRITE_AHEAD_LOG_ROOM: u64 = (4 << 20) + committer::MAX_GROUP_BYTES as u64;

impl Space {
    /// Bytes new writes may use. Every write goes to the write-ahead log first, and only at
    /// a checkpoint into the data file, where free pages are reused: those pages count only
    /// once the file system has room for the log to grow to what it must hold.
    pub fn available(&self) -> u64 {
        let log_growth = WRITE_AHEAD_LOG_ROOM.saturating_sub(self.write_ahead_log);
        self.file_system_free
            .checked_sub(log_growth)
            .map_or(0, |rest| rest.saturating_add(self.reusable_in_file))
    }
}

/// Reads everything a store kept back into a snapshot for `Engine::restore`.
pub fn load(store: &mut dyn Store) -> Result<Snapshot, StoreError> {
    let mut snapshot = Snapshot::default();
    scan_into(store, &[], &[u8::MAX], &mut |key, value| {
        codec::decode_into(&mut snapshot, key, value)
    })?;
    Ok(snapshot)
}

/// Rebuilds an engine from what `store` kept, and the range deletes that finish what a stop
/// cut short (`codec::leftovers`). Message records go into the engine as they are read, so a
/// restart holds no list of them beside the engine: the records but messages first, then the
/// messages.
pub fn restore(
    store: &mut dyn Store,
    clock: Arc<dyn Clock>,
    config: EngineConfig,
) -> Result<(Engine, WriteBatch), StoreError> {
    let mut head = Snapshot::default();
    let (first, past) = codec::MESSAGES;
    for (start, end) in [(&[][..], first), (past, &[u8::MAX][..])] {
        scan_into(store, start, end, &mut |key, value| {
            codec::decode_into(&mut head, key, value)
        })?;
    }
    let mut leftovers = codec::Leftovers::new(&head);
    let mut restoring = Engine::restoring(clock, config, head);
    scan_into(store, first, past, &mut |key, value| {
        let (queue_id, key, id, message) = codec::decode_message(key, value)?;
        leftovers.note(queue_id, key);
        restoring.message(queue_id, key, id, message);
        Ok(())
    })?;
    Ok((restoring.finish(), leftovers.batch()))
}

/// A scan of `[start, end)` whose failures say which record and which file.
fn scan_into(
    store: &mut dyn Store,
    start: &[u8],
    end: &[u8],
    decode: &mut Visitor,
) -> Result<(), StoreError> {
    let path = store.describe();
    store
        .scan_range(start, end, &mut |key, value| {
            decode(key, value).map_err(|reason| format!("record {}: {reason}", printable(key)))
        })
        .map_err(|e| match e {
            StoreError::Corrupt { .. } | StoreError::Open { .. } => e,
            other => StoreError::Corrupt {
                path: path.clone(),
                reason: other.to_string(),
            },
        })
}

/// A message's content as read back.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadContent {
    Found(Content),
    /// The store holds none: the message is gone.
    Gone,
    /// The record does not open or decode (changed on disk, moved from another record's
    /// place, sealed with a key the server lacks): why. Never served as if it were valid.
    Damaged(String),
}

/// The contents kept under `at`, read through `reader`, the sealed ones opened with
/// `keyring`: each on its own, so one damaged record fails nothing else.
pub fn read_contents(
    reader: &dyn Reader,
    keyring: Option<&Keyring>,
    at: &[ContentKey],
) -> Result<Vec<ReadContent>, StoreError> {
    let keys: Vec<Vec<u8>> = at.iter().map(|a| codec::content_key(*a)).collect();
    let values = reader.get(&keys)?;
    Ok(values
        .into_iter()
        .zip(&keys)
        .map(|(value, key)| {
            let Some(value) = value else {
                return ReadContent::Gone;
            };
            let opened = sealing::opened(keyring, key, value).map_err(|e| e.to_string());
            match opened.and_then(|plain| codec::decode_content(&plain)) {
                Ok(content) => ReadContent::Found(content),
                Err(reason) => ReadContent::Damaged(reason),
            }
        })
        .collect())
}

fn printable(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 46, defect 2: free pages inside the data file counted as room though a write
    /// needs the write-ahead log to grow first: with the file system full they are no room.
    #[test]
    fn free_pages_in_the_file_count_only_while_the_log_has_room_to_grow() {
        let space = |free: u64, log: u64| Space {
            file_system_size: 1 << 30,
            file_system_free: free,
            reusable_in_file: 100 << 20,
            write_ahead_log: log,
        };
        assert_eq!(space(0, 0).available(), 0);
        assert_eq!(space(WRITE_AHEAD_LOG_ROOM - 1, 0).available(), 0);
        assert_eq!(space(WRITE_AHEAD_LOG_ROOM, 0).available(), 100 << 20);
        // A log already as long as it must be needs no more of the file system.
        assert_eq!(space(0, WRITE_AHEAD_LOG_ROOM).available(), 100 << 20);
        assert_eq!(
            space(1 << 20, WRITE_AHEAD_LOG_ROOM - (1 << 20)).available(),
            100 << 20
        );
    }
}

//! Message contents sealed at rest (issue 30): a content whose queue asks for encryption is
//! written sealed to its store key (`Op::PutSealed`, sealed by the store on the committer's
//! thread), sealed again to its new key when
//! it moves with its message (`rebound`), and opened when read (`opened`). The store records
//! which keys sealed anything, and the key file is checked against that record at start
//! (`keyring_for`): a missing or wrong key file is one line then, never a message that does
//! not open later.

use std::path::Path;
use std::sync::Arc;

use thiserror::Error;

use crate::batch::WriteBatch;
use crate::keyring::{is_sealed, KeyFileError, Keyring, OpenError, CHECK_LEN};
use crate::{Store, StoreError};

/// The key of the record of the keys that sealed this store's contents (before every
/// message record in key order; the engine's restore passes over it).
pub const SEALS_KEY: &[u8] = b"K";
const SEALS_VERSION: u8 = 1;

/// A key that sealed something: its number and its check.
pub type Seal = (u32, [u8; CHECK_LEN]);

/// Why a store cannot be opened with a key file: one line, said at start.
#[derive(Debug, Error)]
pub enum KeyError {
    #[error(transparent)]
    File(#[from] KeyFileError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the encryption key file {path} has no key {number}, which messages in {holder} were encrypted with: put its line back (a rotation adds a line and keeps the old ones)")]
    Lacks {
        path: String,
        number: u32,
        holder: String,
    },
    #[error("the encryption key file {path} has a different key numbered {number} from the one messages in {holder} were encrypted with (another store's key file?)")]
    Differs {
        path: String,
        number: u32,
        holder: String,
    },
}

/// The keys that sealed anything in `store`, as it recorded them.
pub fn recorded(store: &mut dyn Store) -> Result<Vec<Seal>, StoreError> {
    let mut found = Vec::new();
    let end = [SEALS_KEY, &[0]].concat();
    store.scan_range(SEALS_KEY, &end, &mut |key, value| {
        if key == SEALS_KEY {
            found = decode(value).ok_or("the record of the keys that sealed contents")?;
        }
        Ok(())
    })?;
    Ok(found)
}

/// The keyring for `store`, from `key_file`: created there when the store has sealed nothing
/// yet (its first start, or its first since contents are sealed); otherwise the file must
/// hold every key that sealed something, as it was. With it, when the key that seals is new
/// to the store, the write that records it: to be made durable before anything is sealed.
pub fn keyring_for(
    store: &mut dyn Store,
    key_file: &Path,
) -> Result<(Arc<Keyring>, Option<WriteBatch>), KeyError> {
    let mut seals = recorded(store)?;
    let (keyring, new) = checked_keyring(&seals, key_file, "this data directory")?;
    let record = new.map(|sealing| {
        seals.push(sealing);
        let mut batch = WriteBatch::default();
        batch.put(SEALS_KEY.to_vec(), encode(&seals));
        batch
    });
    Ok((keyring, record))
}

/// The keyring in `key_file`, checked against `seals`, the keys that sealed what `holder`
/// ("this data directory", "this database") holds: created when nothing was sealed yet;
/// otherwise it must hold each of them, as it was. With it, the seal of the key that seals
/// when `seals` lacks it: the holder records it before anything is sealed with it.
pub fn checked_keyring(
    seals: &[Seal],
    key_file: &Path,
    holder: &str,
) -> Result<(Arc<Keyring>, Option<Seal>), KeyError> {
    let keyring = Keyring::load_or_create(key_file, seals.is_empty())?;
    let path = || key_file.display().to_string();
    for &(number, check) in seals {
        match keyring.check(number) {
            None => {
                return Err(KeyError::Lacks {
                    path: path(),
                    number,
                    holder: holder.to_string(),
                })
            }
            Some(held) if held != check => {
                return Err(KeyError::Differs {
                    path: path(),
                    number,
                    holder: holder.to_string(),
                })
            }
            Some(_) => {}
        }
    }
    let number = keyring.sealing_key();
    let sealing = (number, keyring.check(number).unwrap_or_default());
    let new = (!seals.contains(&sealing)).then_some(sealing);
    Ok((Arc::new(keyring), new))
}

/// A content's stored value, opened if it is sealed (bound to `key`, its store key); a
/// plain one (a queue stored in the clear, or written before contents were sealed) as it is.
pub fn opened(keyring: Option<&Keyring>, key: &[u8], value: Vec<u8>) -> Result<Vec<u8>, OpenError> {
    if !is_sealed(&value) {
        return Ok(value);
    }
    keyring.ok_or(OpenError::NoKeys)?.open(key, &value)
}

/// A value copied from `from` to `to`: sealed again, to `to` (and under the newest key), if
/// it was sealed; as it is otherwise, and when it does not open (a damaged record stays
/// damaged, and is reported when read).
pub fn rebound(keyring: &Keyring, from: &[u8], to: &[u8], value: Vec<u8>) -> Vec<u8> {
    if !is_sealed(&value) {
        return value;
    }
    match keyring.open(from, &value) {
        Ok(plain) => keyring.seal(to, &plain),
        Err(_) => value,
    }
}

fn encode(seals: &[Seal]) -> Vec<u8> {
    let mut value = vec![SEALS_VERSION];
    for (number, check) in seals {
        value.extend_from_slice(&number.to_be_bytes());
        value.extend_from_slice(check);
    }
    value
}

fn decode(value: &[u8]) -> Option<Vec<Seal>> {
    let (&version, rest) = value.split_first()?;
    if version != SEALS_VERSION || rest.len() % (4 + CHECK_LEN) != 0 {
        return None;
    }
    rest.chunks_exact(4 + CHECK_LEN)
        .map(|seal| {
            let number = u32::from_be_bytes(seal[..4].try_into().ok()?);
            Some((number, seal[4..].try_into().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use leasehold_engine::{Change, Content, ContentKey, MsgKey};

    use super::*;
    use crate::codec::{content_key, encode};
    use crate::{read_contents, MemoryStore, ReadContent};

    fn at(queue_id: u64, seq: u64) -> ContentKey {
        ContentKey {
            queue_id,
            key: MsgKey { sent_ms: 1, seq },
        }
    }

    fn content(body: &str) -> Content {
        Content {
            body: body.into(),
            attributes: None,
        }
    }

    fn sent(at: ContentKey, body: &str, sealed: bool) -> Change {
        Change::Content {
            at,
            content: content(body),
            sealed,
        }
    }

    fn read(store: &MemoryStore, keyring: &Keyring, at: &[ContentKey]) -> Vec<ReadContent> {
        read_contents(store, Some(keyring), at).unwrap()
    }

    fn keyring(byte: u8) -> Arc<Keyring> {
        Arc::new(Keyring::from_keys(&[(1, [byte; 32])]).unwrap())
    }

    #[test]
    fn a_sealed_content_reads_back_whole_and_a_clear_one_is_stored_as_it_is() {
        let keys = keyring(3);
        let mut store = MemoryStore::default();
        let changes = [
            sent(at(1, 1), "secret body", true),
            sent(at(2, 1), "plain body", false),
        ];
        store.seal_with(keys.clone());
        store.write(&[encode(&changes)], true).unwrap();
        let raw: Vec<u8> = store.records().into_values().flatten().collect();
        let holds = |text: &str| raw.windows(text.len()).any(|w| w == text.as_bytes());
        assert!(!holds("secret body"));
        assert!(holds("plain body"));
        assert_eq!(
            read(&store, &keys, &[at(1, 1), at(2, 1), at(3, 1)]),
            vec![
                ReadContent::Found(content("secret body")),
                ReadContent::Found(content("plain body")),
                ReadContent::Gone,
            ]
        );
    }

    #[test]
    fn a_record_changed_or_put_in_another_s_place_is_damaged_and_fails_nothing_else() {
        let keys = keyring(3);
        let mut store = MemoryStore::default();
        let changes = [
            sent(at(1, 1), "one", true),
            sent(at(1, 2), "two", true),
            sent(at(1, 3), "three", true),
        ];
        store.seal_with(keys.clone());
        store.write(&[encode(&changes)], true).unwrap();
        let mut records = store.records();
        let (one, two) = (content_key(at(1, 1)), content_key(at(1, 2)));
        let mut flipped = records[&one].clone();
        flipped[30] ^= 0x40;
        let moved = records[&one].clone();
        records.insert(one, flipped);
        records.insert(two, moved);
        let store = MemoryStore::from_records(records);
        let got = read(&store, &keys, &[at(1, 1), at(1, 2), at(1, 3)]);
        assert!(matches!(&got[0], ReadContent::Damaged(why) if why.contains("integrity")));
        assert!(matches!(&got[1], ReadContent::Damaged(why) if why.contains("integrity")));
        assert_eq!(got[2], ReadContent::Found(content("three")));
    }

    #[test]
    fn a_copied_sealed_content_opens_at_its_new_key_only_where_the_store_rebinds_copies() {
        let keys = keyring(3);
        let sealed_at = |at: ContentKey| {
            let mut store = MemoryStore::default();
            store.seal_with(keys.clone());
            store
                .write(&[encode(&[sent(at, "moving", true)])], true)
                .unwrap();
            store.records()
        };
        let moved = |store: &mut MemoryStore| {
            let mut batch = WriteBatch::default();
            batch.copy(content_key(at(1, 1)), content_key(at(2, 7)));
            store.write(&[batch], true).unwrap();
            read(store, &keys, &[at(2, 7)]).remove(0)
        };
        let mut rebinding = MemoryStore::from_records(sealed_at(at(1, 1)));
        rebinding.seal_with(keys.clone());
        assert_eq!(moved(&mut rebinding), ReadContent::Found(content("moving")));
        // Bound to its key: copied as it is, it no longer opens there.
        let mut plain_copier = MemoryStore::from_records(sealed_at(at(1, 1)));
        assert!(matches!(moved(&mut plain_copier), ReadContent::Damaged(_)));
    }

    #[test]
    fn the_key_file_is_checked_against_the_keys_that_sealed_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("encryption.key");
        let mut store = MemoryStore::default();
        // A store that sealed nothing: the file is made, its key to be recorded.
        let (keys, record) = keyring_for(&mut store, &file).unwrap();
        let record = record.expect("a new sealing key is recorded");
        store.write(&[record], true).unwrap();
        assert_eq!(recorded(&mut store).unwrap().len(), 1);
        let (_, again) = keyring_for(&mut store, &file).unwrap();
        assert!(
            again.is_none(),
            "a key already recorded is not written again"
        );
        let first = std::fs::read_to_string(&file).unwrap();
        drop(keys);

        // A key added: it seals from now on, and is recorded beside the first.
        let added = format!("{first}2 {}\n", "ab".repeat(32));
        std::fs::write(&file, &added).unwrap();
        let (keys, record) = keyring_for(&mut store, &file).unwrap();
        assert_eq!(keys.sealing_key(), 2);
        store.write(&[record.unwrap()], true).unwrap();
        assert_eq!(recorded(&mut store).unwrap().len(), 2);

        let refused = |text: Option<String>| {
            match text {
                Some(text) => std::fs::write(&file, text).unwrap(),
                None => std::fs::remove_file(&file).unwrap(),
            }
            keyring_for(&mut store.clone(), &file)
                .unwrap_err()
                .to_string()
        };
        let second_only = format!("2 {}\n", "ab".repeat(32));
        assert!(refused(Some(second_only)).contains("has no key 1"));
        let other_first = format!("1 {}\n2 {}\n", "00".repeat(32), "ab".repeat(32));
        assert!(refused(Some(other_first)).contains("different key numbered 1"));
        assert!(refused(None).contains("is missing"));
        assert!(
            !file.exists(),
            "a store that sealed something never gets a new key"
        );
    }
}

//! Keys that seal message contents at rest (issue 30): a key file of numbered AES-256 keys,
//! and records sealed with AES-256-GCM-SIV under the newest, bound to their place.
//!
//! A sealed record is `SEALED`, the key's number (4 bytes), a random 12-byte nonce, then the
//! ciphertext and its 16-byte tag. The record's store key is the associated data, so a record
//! copied under another key, or swapped with another, fails to open, as does a flipped byte.
//! GCM-SIV rather than GCM: a nonce drawn twice under one key (a queue's billions of
//! records) reveals only that two contents were equal, where GCM's would reveal the key's
//! authentication secret.
//!
//! The key file holds one key a line, `<number> <64 hex digits>`, `#` comments allowed; the
//! last line's key seals, every line's opens, so rotation is a line added at the end (and a
//! restart), and an old key is removed only once no record it sealed is left.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM_SIV, NONCE_LEN};
use thiserror::Error;

/// The first byte of a sealed record: no plain record starts with it (theirs is a small
/// format version).
pub const SEALED: u8 = 0xA5;
const KEY_LEN: usize = 32;
const TAG_LEN: usize = 16;
const HEADER_LEN: usize = 1 + 4 + NONCE_LEN;

/// Why a key file cannot be used: each a line a person can act on.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum KeyFileError {
    #[error("cannot read the encryption key file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("cannot create the encryption key file {path}: {reason}")]
    Create { path: String, reason: String },
    #[error("the encryption key file {path}, line {line}: {reason}")]
    Malformed {
        path: String,
        line: usize,
        reason: String,
    },
    #[error("the encryption key file {path} holds no key")]
    Empty { path: String },
}

/// Why a sealed record does not open.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum OpenError {
    #[error("sealed with key {0}, which the encryption key file does not hold")]
    UnknownKey(u32),
    #[error("it fails its integrity check (changed on disk, or moved from another record)")]
    Damaged,
    #[error("it is {0} bytes, too short to be a sealed record")]
    Truncated(usize),
}

/// The keys of a key file: every one opens, the newest seals.
pub struct Keyring {
    keys: HashMap<u32, LessSafeKey>,
    sealing: u32,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys themselves.
        let mut numbers: Vec<u32> = self.keys.keys().copied().collect();
        numbers.sort_unstable();
        f.debug_struct("Keyring")
            .field("keys", &numbers)
            .field("sealing", &self.sealing)
            .finish()
    }
}

impl Keyring {
    /// The keys given, by number; the last seals. None when there are none.
    pub fn from_keys(keys: &[(u32, [u8; KEY_LEN])]) -> Option<Keyring> {
        let sealing = keys.last()?.0;
        let keys = keys
            .iter()
            .map(|(number, bytes)| (*number, aead_key(bytes)))
            .collect();
        Some(Keyring { keys, sealing })
    }

    /// The keys of the file at `path`.
    pub fn load(path: &Path) -> Result<Keyring, KeyFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| KeyFileError::Read {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(
                    path = %shown,
                    "the encryption key file can be read by others than its owner (chmod 600 it)"
                );
            }
        }
        let keys = parse(&text, &shown)?;
        Keyring::from_keys(&keys).ok_or(KeyFileError::Empty { path: shown })
    }

    /// The keys of the file at `path`, which is created (readable by its owner only, one
    /// fresh key numbered 1) when it does not exist: an embedded store's first start.
    pub fn load_or_create(path: &Path) -> Result<Keyring, KeyFileError> {
        if !path.exists() {
            create(path)?;
        }
        Keyring::load(path)
    }

    /// The number of the key that seals.
    pub fn sealing_key(&self) -> u32 {
        self.sealing
    }

    /// `plain` sealed under the newest key, bound to `place` (the record's store key).
    pub fn seal(&self, place: &[u8], plain: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).expect("the system's random source failed");
        let mut sealed = Vec::with_capacity(HEADER_LEN + plain.len() + TAG_LEN);
        sealed.push(SEALED);
        sealed.extend_from_slice(&self.sealing.to_be_bytes());
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(plain);
        let key = &self.keys[&self.sealing];
        let tag = key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(place),
                &mut sealed[HEADER_LEN..],
            )
            .expect("sealing fails only for inputs of more than 64 GiB");
        sealed.extend_from_slice(tag.as_ref());
        sealed
    }

    /// The plain bytes of a record `seal` made for `place`.
    pub fn open(&self, place: &[u8], sealed: &[u8]) -> Result<Vec<u8>, OpenError> {
        if sealed.len() < HEADER_LEN + TAG_LEN || sealed[0] != SEALED {
            return Err(OpenError::Truncated(sealed.len()));
        }
        let number = u32::from_be_bytes(sealed[1..5].try_into().expect("four bytes"));
        let key = self
            .keys
            .get(&number)
            .ok_or(OpenError::UnknownKey(number))?;
        let nonce = Nonce::try_assume_unique_for_key(&sealed[5..HEADER_LEN])
            .map_err(|_| OpenError::Truncated(sealed.len()))?;
        let mut buffer = sealed[HEADER_LEN..].to_vec();
        let plain_len = key
            .open_in_place(nonce, Aad::from(place), &mut buffer)
            .map_err(|_| OpenError::Damaged)?
            .len();
        buffer.truncate(plain_len);
        Ok(buffer)
    }
}

/// Whether a stored value is a sealed record.
pub fn is_sealed(value: &[u8]) -> bool {
    value.first() == Some(&SEALED)
}

fn aead_key(bytes: &[u8; KEY_LEN]) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM_SIV, bytes).expect("a 32-byte key"))
}

fn parse(text: &str, path: &str) -> Result<Vec<(u32, [u8; KEY_LEN])>, KeyFileError> {
    let mut keys: Vec<(u32, [u8; KEY_LEN])> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let malformed = |reason: String| KeyFileError::Malformed {
            path: path.to_string(),
            line: index + 1,
            reason,
        };
        let (number, hex) = line
            .split_once(char::is_whitespace)
            .ok_or_else(|| malformed("expected '<number> <64 hex digits>'".into()))?;
        let number: u32 = number
            .parse()
            .map_err(|_| malformed(format!("'{number}' is not a key number (0 to 4294967295)")))?;
        let bytes = decode_hex(hex.trim()).ok_or_else(|| {
            malformed("a key is 64 hex digits (32 bytes; `openssl rand -hex 32` makes one)".into())
        })?;
        if keys.iter().any(|(seen, _)| *seen == number) {
            return Err(malformed(format!("key number {number} is used twice")));
        }
        keys.push((number, bytes));
    }
    Ok(keys)
}

fn decode_hex(hex: &str) -> Option<[u8; KEY_LEN]> {
    if hex.len() != KEY_LEN * 2 || !hex.is_ascii() {
        return None;
    }
    let mut bytes = [0u8; KEY_LEN];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(bytes)
}

/// A new key file with one fresh key, readable and writable by its owner only; never
/// replaces a file (`create_new`), so two first starts cannot each write a key.
fn create(path: &Path) -> Result<(), KeyFileError> {
    let failed = |e: std::io::Error| KeyFileError::Create {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let mut key = [0u8; KEY_LEN];
    aws_lc_rs::rand::fill(&mut key)
        .map_err(|_| failed(std::io::Error::other("the system's random source failed")))?;
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let text = format!(
        "# Leasehold's encryption keys: '<number> <64 hex digits>' a line. The last line's key\n\
         # seals new messages; every line's opens old ones. Keep a copy: without it the\n\
         # messages stored are unreadable.\n1 {hex}\n"
    );
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(failed)?;
    file.write_all(text.as_bytes()).map_err(failed)?;
    file.sync_all().map_err(failed)
}

/// Where an embedded store keeps its key file when none is named: beside its data file.
pub fn default_key_file(data_dir: &Path) -> PathBuf {
    data_dir.join("encryption.key")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(keys: &[(u32, u8)]) -> Keyring {
        let keys: Vec<(u32, [u8; KEY_LEN])> = keys.iter().map(|(n, b)| (*n, [*b; 32])).collect();
        Keyring::from_keys(&keys).unwrap()
    }

    #[test]
    fn a_sealed_record_opens_for_its_place_and_holds_no_plain_text() {
        let keys = ring(&[(1, 7)]);
        let sealed = keys.seal(b"place", b"a known body");
        assert!(is_sealed(&sealed));
        assert!(!sealed.windows(5).any(|w| w == b"known"));
        assert_eq!(keys.open(b"place", &sealed).unwrap(), b"a known body");
        // A fresh nonce each time: the same body twice seals differently.
        assert_ne!(sealed, keys.seal(b"place", b"a known body"));
    }

    #[test]
    fn a_record_moved_to_another_place_or_changed_by_a_byte_does_not_open() {
        let keys = ring(&[(1, 7)]);
        let sealed = keys.seal(b"place", b"body");
        assert_eq!(keys.open(b"other", &sealed), Err(OpenError::Damaged));
        for at in HEADER_LEN..sealed.len() {
            let mut flipped = sealed.clone();
            flipped[at] ^= 0x01;
            assert_eq!(
                keys.open(b"place", &flipped),
                Err(OpenError::Damaged),
                "{at}"
            );
        }
        let mut nonce_flipped = sealed.clone();
        nonce_flipped[6] ^= 0x80;
        assert_eq!(keys.open(b"place", &nonce_flipped), Err(OpenError::Damaged));
        assert_eq!(
            keys.open(b"place", &sealed[..HEADER_LEN + 3]),
            Err(OpenError::Truncated(HEADER_LEN + 3))
        );
    }

    #[test]
    fn a_key_added_seals_new_records_and_the_old_one_still_opens_old_ones() {
        let old = ring(&[(1, 7)]);
        let before = old.seal(b"p", b"old body");
        let rotated = ring(&[(1, 7), (2, 9)]);
        assert_eq!(rotated.sealing_key(), 2);
        assert_eq!(rotated.open(b"p", &before).unwrap(), b"old body");
        let after = rotated.seal(b"p", b"new body");
        assert_eq!(after[1..5], 2u32.to_be_bytes());
        assert_eq!(old.open(b"p", &after), Err(OpenError::UnknownKey(2)));
        // The same number with other bytes is the wrong key: it fails, never misreads.
        assert_eq!(ring(&[(1, 8)]).open(b"p", &before), Err(OpenError::Damaged));
    }

    #[test]
    fn a_missing_key_file_is_created_for_its_owner_only_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = default_key_file(dir.path());
        let first = Keyring::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = Keyring::load_or_create(&path).unwrap();
        let sealed = first.seal(b"p", b"body");
        assert_eq!(again.open(b"p", &sealed).unwrap(), b"body");
    }

    #[test]
    fn a_malformed_key_file_says_which_line_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        let shown = path.display().to_string();
        let good = "ab".repeat(32);
        let cases = [
            ("1\n", 1, "expected '<number> <64 hex digits>'"),
            (&*format!("# c\n\nx {good}\n"), 3, "'x' is not a key number"),
            ("1 abcd\n", 1, "a key is 64 hex digits"),
            (
                &*format!("1 {good}\n1 {good}\n"),
                2,
                "key number 1 is used twice",
            ),
        ];
        for (text, line, reason) in cases {
            std::fs::write(&path, text).unwrap();
            match Keyring::load(&path) {
                Err(KeyFileError::Malformed {
                    line: l, reason: r, ..
                }) => assert!(l == line && r.starts_with(reason), "{text:?}: {l} {r}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        std::fs::write(&path, "# nothing\n").unwrap();
        assert_eq!(
            Keyring::load(&path).unwrap_err(),
            KeyFileError::Empty { path: shown }
        );
        let missing = dir.path().join("absent");
        let error = Keyring::load(&missing).unwrap_err().to_string();
        assert!(
            error.starts_with("cannot read the encryption key file"),
            "{error}"
        );
    }
}

//! Keys that seal message contents at rest (issue 30): a key file of numbered AES-256 keys,
//! and records sealed with AES-256-GCM-SIV under the newest.
//!
//! A sealed record is `SEALED`, the key's number (4 bytes), the key's check (4 bytes: which
//! key of that number sealed it), a random 12-byte nonce, then the ciphertext and its 16-byte
//! tag. The header and what the caller binds the record to are the associated data: a record
//! opened with other binding data, or with a byte changed anywhere, fails to open. What to
//! bind to is the caller's choice and must survive the record's legitimate moves: the store
//! copies a content record to a new key when its message moves to another queue, and a
//! redrive gives the message a new id, so neither the store key nor the message id can be it.
//! GCM-SIV rather than GCM: a nonce drawn twice under one key (a queue's billions of
//! records) reveals only that two contents were equal, where GCM's would reveal the key's
//! authentication secret.
//!
//! The key file holds one key a line, `<number> <64 hex digits>`, `#` comments allowed; the
//! last line's key seals, every line's opens, so rotation is a line added at the end (and a
//! restart), and an old key is removed only once no record it sealed is left.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM_SIV, NONCE_LEN};
use aws_lc_rs::digest::{digest, SHA256};
use thiserror::Error;

/// The first byte of a sealed record: no plain record starts with it (theirs is a small
/// format version).
pub const SEALED: u8 = 0xA5;
const KEY_LEN: usize = 32;
const TAG_LEN: usize = 16;
/// The length of a key's check (`Keyring::check`).
pub const CHECK_LEN: usize = 4;
const HEADER_LEN: usize = 1 + 4 + CHECK_LEN + NONCE_LEN;

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
    #[error("the encryption key file {path} is missing, and the data it sealed cannot be read without it: restore it (a new key would not open what is stored)")]
    Missing { path: String },
}

/// Why a sealed record does not open.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum OpenError {
    #[error("sealed with key {0}, which the encryption key file does not hold")]
    UnknownKey(u32),
    #[error("sealed with another key numbered {0} than the encryption key file's (a different key file?)")]
    WrongKey(u32),
    #[error("it is not a sealed record")]
    NotSealed,
    #[error("it fails its integrity check (changed on disk, or moved from another record)")]
    Damaged,
    #[error("it is {0} bytes, too short to be a sealed record")]
    Truncated(usize),
    #[error("it is sealed, and this server was given no encryption keys")]
    NoKeys,
}

/// The keys of a key file: every one opens, the newest seals.
pub struct Keyring {
    keys: HashMap<u32, (LessSafeKey, [u8; CHECK_LEN])>,
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
            .map(|(number, bytes)| (*number, (aead_key(bytes), check_of(bytes))))
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

    /// The keys of the file at `path`. When it does not exist and `new_store` says nothing
    /// was sealed yet (a store's first start), it is created, readable by its owner only, with
    /// one fresh key numbered 1; when something may have been sealed, a missing file is an
    /// error, never a new key that would not open it.
    pub fn load_or_create(path: &Path, new_store: bool) -> Result<Keyring, KeyFileError> {
        if !path.exists() {
            if !new_store {
                return Err(KeyFileError::Missing {
                    path: path.display().to_string(),
                });
            }
            create(path)?;
        }
        Keyring::load(path)
    }

    /// The number of the key that seals.
    pub fn sealing_key(&self) -> u32 {
        self.sealing
    }

    /// Which key the ring holds under `number` (a few bytes of a hash of it, as every record
    /// it seals carries), if it holds one.
    pub fn check(&self, number: u32) -> Option<[u8; CHECK_LEN]> {
        self.keys.get(&number).map(|(_, check)| *check)
    }

    /// `plain` sealed under the newest key, bound to `bound_to`.
    pub fn seal(&self, bound_to: &[u8], plain: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).expect("the system's random source failed");
        let (key, check) = &self.keys[&self.sealing];
        let mut sealed = Vec::with_capacity(HEADER_LEN + plain.len() + TAG_LEN);
        sealed.push(SEALED);
        sealed.extend_from_slice(&self.sealing.to_be_bytes());
        sealed.extend_from_slice(check);
        sealed.extend_from_slice(&nonce);
        let aad = associated(&sealed[..HEADER_LEN - NONCE_LEN], bound_to);
        sealed.extend_from_slice(plain);
        let tag = key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad),
                &mut sealed[HEADER_LEN..],
            )
            .expect("sealing fails only for inputs of more than 64 GiB");
        sealed.extend_from_slice(tag.as_ref());
        sealed
    }

    /// The plain bytes of a record `seal` made with the same `bound_to`.
    pub fn open(&self, bound_to: &[u8], sealed: &[u8]) -> Result<Vec<u8>, OpenError> {
        if !is_sealed(sealed) {
            return Err(OpenError::NotSealed);
        }
        if sealed.len() < HEADER_LEN + TAG_LEN {
            return Err(OpenError::Truncated(sealed.len()));
        }
        let number = u32::from_be_bytes(sealed[1..5].try_into().expect("four bytes"));
        let (key, check) = self
            .keys
            .get(&number)
            .ok_or(OpenError::UnknownKey(number))?;
        if sealed[5..5 + CHECK_LEN] != check[..] {
            return Err(OpenError::WrongKey(number));
        }
        let nonce = Nonce::try_assume_unique_for_key(&sealed[HEADER_LEN - NONCE_LEN..HEADER_LEN])
            .map_err(|_| OpenError::Truncated(sealed.len()))?;
        let aad = associated(&sealed[..HEADER_LEN - NONCE_LEN], bound_to);
        let mut buffer = sealed[HEADER_LEN..].to_vec();
        let plain_len = key
            .open_in_place(nonce, Aad::from(&aad), &mut buffer)
            .map_err(|_| OpenError::Damaged)?
            .len();
        buffer.truncate(plain_len);
        Ok(buffer)
    }
}

/// The associated data: the header before the nonce (format, key number, key check), then
/// what the caller binds the record to.
fn associated(header: &[u8], bound_to: &[u8]) -> Vec<u8> {
    [header, bound_to].concat()
}

/// Which key of a number sealed a record, without saying anything of the key: the first
/// bytes of a hash of it under a label of its own.
fn check_of(key: &[u8; KEY_LEN]) -> [u8; CHECK_LEN] {
    let hashed = digest(
        &SHA256,
        &[b"leasehold key check\0".as_slice(), key].concat(),
    );
    hashed.as_ref()[..CHECK_LEN]
        .try_into()
        .expect("a SHA-256 is 32 bytes")
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
    for (index, line) in text.trim_start_matches('\u{feff}').lines().enumerate() {
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
    if hex.len() != KEY_LEN * 2 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut bytes = [0u8; KEY_LEN];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(bytes)
}

/// A new key file with one fresh key, readable and writable by its owner only, made whole
/// beside it and linked into place, so that a crash leaves the whole file or none, and a
/// second first start finds the first's file rather than writing a key of its own.
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
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let draft = directory.join(format!(".encryption-key.{}.new", std::process::id()));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&draft)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()
    })();
    let linked = written.and_then(|()| std::fs::hard_link(&draft, path));
    let _ = std::fs::remove_file(&draft);
    match linked {
        Ok(()) => File::open(directory)
            .and_then(|d| d.sync_all())
            .map_err(failed),
        // Another first start linked its file first: that one is the key.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(failed(e)),
    }
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
    fn a_sealed_record_opens_with_its_binding_and_holds_no_plain_text() {
        let keys = ring(&[(1, 7)]);
        let sealed = keys.seal(b"bound", b"a known body");
        assert!(is_sealed(&sealed));
        assert!(!sealed.windows(5).any(|w| w == b"known"));
        assert_eq!(keys.open(b"bound", &sealed).unwrap(), b"a known body");
        // A fresh nonce each time: the same body twice seals differently.
        assert_ne!(sealed, keys.seal(b"bound", b"a known body"));
        assert_eq!(keys.open(b"bound", b"\x01plain"), Err(OpenError::NotSealed));
    }

    #[test]
    fn a_record_opened_with_other_binding_or_changed_by_a_byte_does_not_open() {
        let keys = ring(&[(1, 7)]);
        let sealed = keys.seal(b"bound", b"body");
        assert_eq!(keys.open(b"other", &sealed), Err(OpenError::Damaged));
        for at in 1..sealed.len() {
            let mut flipped = sealed.clone();
            flipped[at] ^= 0x01;
            let opened = keys.open(b"bound", &flipped);
            match at {
                1..=4 => assert_eq!(
                    opened,
                    Err(OpenError::UnknownKey(1 ^ (1 << (8 * (4 - at))))),
                    "{at}"
                ),
                5..=8 => assert_eq!(opened, Err(OpenError::WrongKey(1)), "{at}"),
                _ => assert_eq!(opened, Err(OpenError::Damaged), "{at}"),
            }
        }
        assert_eq!(
            keys.open(b"bound", &sealed[..HEADER_LEN + 3]),
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
        // The same number with other bytes is another key: said so, never misread.
        assert_eq!(
            ring(&[(1, 8)]).open(b"p", &before),
            Err(OpenError::WrongKey(1))
        );
    }

    #[test]
    fn a_missing_key_file_is_created_for_its_owner_only_on_a_new_store_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = default_key_file(dir.path());
        assert_eq!(
            Keyring::load_or_create(&path, false).unwrap_err(),
            KeyFileError::Missing {
                path: path.display().to_string()
            }
        );
        assert!(!path.exists());
        let first = Keyring::load_or_create(&path, true).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = Keyring::load_or_create(&path, false).unwrap();
        let sealed = first.seal(b"p", b"body");
        assert_eq!(again.open(b"p", &sealed).unwrap(), b"body");
        // Nothing is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_second_first_start_reads_the_key_the_first_made() {
        let dir = tempfile::tempdir().unwrap();
        let path = default_key_file(dir.path());
        let first = Keyring::load_or_create(&path, true).unwrap();
        // As if it had checked before the first linked its file.
        create(&path).unwrap();
        let second = Keyring::load(&path).unwrap();
        assert_eq!(second.open(b"p", &first.seal(b"p", b"x")).unwrap(), b"x");
    }

    #[test]
    fn a_malformed_key_file_says_which_line_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        let shown = path.display().to_string();
        let good = "ab".repeat(32);
        let signed = format!("+a{}", "b".repeat(62));
        let cases = [
            ("1\n", 1, "expected '<number> <64 hex digits>'"),
            (&*format!("# c\n\nx {good}\n"), 3, "'x' is not a key number"),
            ("1 abcd\n", 1, "a key is 64 hex digits"),
            (&*format!("1 {signed}\n"), 1, "a key is 64 hex digits"),
            (
                &*format!("1 {good}\r\n1 {good}\r\n"),
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
        // A byte-order mark before the first line is no part of it.
        std::fs::write(&path, format!("\u{feff}7 {good}\n")).unwrap();
        assert_eq!(Keyring::load(&path).unwrap().sealing_key(), 7);
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

//! A ballast file beside the data file: space held back, given up at start when the file
//! system is full. SQLite's recovery of the write-ahead log after a crash writes its index
//! through a memory map, and on a file system with no block left that write kills the process
//! (SIGBUS) instead of failing: a server stopped on a full disk could never start again to let
//! its consumers drain. With the ballast removed first, the recovery has room.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

const FILE_NAME: &str = "leasehold.ballast";
/// What the ballast holds back: far more than the recovery's index needs.
const SIZE: u64 = 1 << 20;

/// Bytes free for this process on the file system of `dir`.
fn free(dir: &Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(dir).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// Before SQLite opens the data file: when the file system has less free than the ballast,
/// gives the ballast up.
pub fn release_if_full(dir: &Path) {
    let path = dir.join(FILE_NAME);
    if path.exists() && free(dir).is_some_and(|f| f < SIZE) {
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::warn!("the file system of {} is full: its ballast ({} KiB) is given up so that the data file can open", dir.display(), SIZE >> 10),
            Err(error) => tracing::warn!(%error, "cannot remove the ballast {}", path.display()),
        }
    }
}

/// After the data file opened: lays the ballast down again where there is room for it and
/// more, its blocks written (not a sparse file) so that removing it frees them.
pub fn restore(dir: &Path) {
    let path = dir.join(FILE_NAME);
    if path.exists() || free(dir).is_none_or(|f| f < 8 * SIZE) {
        return;
    }
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path);
    let written = created.and_then(|mut file| {
        file.write_all(&vec![0; SIZE as usize])?;
        file.sync_all()
    });
    if let Err(error) = written {
        tracing::warn!(%error, "cannot lay down the ballast {}", path.display());
        let _ = std::fs::remove_file(&path);
    }
}

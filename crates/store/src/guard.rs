//! What keeps one data directory to one server and notices when its file is taken away: a
//! lock a second server sees even after the directory was removed and made again, the data
//! file's identity checked at every commit, and files readable by their owner only.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use md5::{Digest, Md5};

/// Creates `dir` (owner only) if it is missing.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Checks at start that this process may write the data directory and its files: a
/// read-only directory, file or file system, or files of another user, is a permission
/// problem to say as one, not a damaged file (SQLite's own words for it mislead).
pub fn check_writable(dir: &Path, path: &Path) -> Result<(), String> {
    let denied = |what: &str, e: std::io::Error| {
        let why = match e.raw_os_error() {
            Some(30) => "the file system is mounted read-only".to_string(),
            _ => e.to_string(),
        };
        format!(
            "permission problem: {what} is not writable by this user ({why}); Leasehold writes the data file, its -wal and -shm files beside it in {}",
            dir.display()
        )
    };
    let is_permission = |e: &std::io::Error| {
        matches!(
            e.kind(),
            std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
        ) || e.raw_os_error() == Some(1)
    };
    let probe = dir.join(".leasehold-write-check");
    match OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
        }
        Err(e) if is_permission(&e) => return Err(denied("the data directory", e)),
        Err(_) => {}
    }
    for file in [path.to_path_buf(), wal_path(path)] {
        match OpenOptions::new().read(true).write(true).open(&file) {
            Err(e) if is_permission(&e) => {
                return Err(denied(&format!("{}", file.display()), e));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Creates the data file with owner-only permissions before SQLite opens it, so SQLite's
/// write-ahead log (which copies the database file's mode) is owner-only too; an existing
/// file readable by others is tightened.
pub fn make_private(path: &Path) -> std::io::Result<()> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            for file in [path.to_path_buf(), wal_path(path)] {
                if let Ok(meta) = std::fs::metadata(&file) {
                    if meta.permissions().mode() & 0o077 != 0 {
                        tracing::warn!(file = %file.display(), "data file readable by others; restricting it to its owner");
                        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?;
                    }
                }
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

pub fn wal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// A lock on a data directory, named by the directory's canonical path in the abstract
/// socket namespace: the kernel releases it when the server dies, and it outlives the
/// directory itself, so a directory removed and made again under a running server is still
/// seen as taken. (SQLite's own exclusive lock lives on the file and dies with it.)
pub struct DirLock {
    #[cfg(target_os = "linux")]
    _socket: std::os::unix::net::UnixListener,
}

impl DirLock {
    /// Takes the lock, or says another server holds it.
    pub fn acquire(dir: &Path) -> Result<DirLock, String> {
        let canonical = dir
            .canonicalize()
            .map_err(|e| format!("cannot resolve the data directory: {e}"))?;
        Self::acquire_name(&lock_name(&canonical))
    }

    #[cfg(target_os = "linux")]
    fn acquire_name(name: &str) -> Result<DirLock, String> {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr, UnixListener};
        let address = SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(|e| format!("cannot name the directory lock: {e}"))?;
        match UnixListener::bind_addr(&address) {
            Ok(socket) => Ok(DirLock { _socket: socket }),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                Err("it is in use by another Leasehold server".into())
            }
            Err(e) => Err(format!("cannot lock the data directory: {e}")),
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn acquire_name(_name: &str) -> Result<DirLock, String> {
        Ok(DirLock {})
    }
}

fn lock_name(canonical: &Path) -> String {
    let digest = Md5::digest(canonical.as_os_str().as_encoded_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("leasehold-data-dir:{hex}")
}

/// The data file as it was opened: checked after every commit, so a write that went to a
/// file since removed or replaced is never acknowledged.
pub struct FileIdentity {
    path: PathBuf,
    opened: File,
    device: u64,
    inode: u64,
}

impl FileIdentity {
    pub fn of(path: &Path) -> std::io::Result<FileIdentity> {
        let opened = File::open(path)?;
        let meta = opened.metadata()?;
        Ok(FileIdentity {
            path: path.to_path_buf(),
            opened,
            device: meta.dev(),
            inode: meta.ino(),
        })
    }

    /// Err with the reason when the file was removed, or another file now has its name.
    pub fn check(&self) -> Result<(), String> {
        let links = self
            .opened
            .metadata()
            .map(|m| m.nlink())
            .map_err(|e| format!("cannot check the data file: {e}"))?;
        let named = std::fs::metadata(&self.path).map(|m| (m.dev(), m.ino()));
        match named {
            Ok(id) if links > 0 && id == (self.device, self.inode) => Ok(()),
            _ => Err(
                "the data file was removed or replaced while the server was running; what this server holds can no longer be made durable"
                    .into(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_is_held_until_dropped_and_outlives_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        create_private_dir(&data).unwrap();
        let lock = DirLock::acquire(&data).unwrap();
        std::fs::remove_dir_all(&data).unwrap();
        create_private_dir(&data).unwrap();
        let again = DirLock::acquire(&data);
        assert!(again.is_err(), "a second server took a directory in use");
        drop(lock);
        assert!(DirLock::acquire(&data).is_ok());
    }

    #[test]
    fn a_removed_or_replaced_file_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        make_private(&path).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let identity = FileIdentity::of(&path).unwrap();
        assert_eq!(identity.check(), Ok(()));
        std::fs::remove_file(&path).unwrap();
        assert!(identity
            .check()
            .unwrap_err()
            .contains("removed or replaced"));
        make_private(&path).unwrap();
        let identity = FileIdentity::of(&path).unwrap();
        let other = dir.path().join("g");
        std::fs::write(&other, b"x").unwrap();
        std::fs::hard_link(&path, dir.path().join("kept")).unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert!(identity
            .check()
            .unwrap_err()
            .contains("removed or replaced"));
    }
}

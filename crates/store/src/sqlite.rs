//! The durable backend: one SQLite file in write-ahead-log mode, `leasehold.db` in the data
//! directory (with its `-wal` and `-shm` files), written by one server (the directory lock)
//! and readable by `leasehold backup` while it runs.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension};

use crate::batch::{effective_ops, Op, RangeDelete, WriteBatch};
use crate::codec::CONTENT_KEY;
use crate::guard::{create_private_dir, make_private, wal_path, DirLock, FileIdentity};
use crate::keyring::Keyring;
use crate::sealing::{rebound, SEALS_KEY};
use crate::{Reader, Space, Store, StoreError, Visitor};

pub const FILE_NAME: &str = "leasehold.db";
/// The data format this release writes: 2 since contents may be sealed (issue 30), which a
/// file becomes when its first sealing key is recorded (`sealing::SEALS_KEY`), so a release
/// that cannot open sealed contents refuses the file at start rather than reading it as
/// damaged. Format 1 files are read as they are.
const FORMAT: i64 = 2;
const FORMAT_BEFORE_SEALING: i64 = 1;
/// Bytes the write-ahead log keeps after a checkpoint.
const WAL_SIZE_LIMIT: i64 = 16 << 20;

/// A failed write's error: `Full` when the file system had no room (nothing was written, and
/// the same write may succeed later), else `Write`.
fn write_error(path: &str, e: rusqlite::Error) -> StoreError {
    let full = matches!(&e, rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::DiskFull);
    let (path, reason) = (path.to_string(), e.to_string());
    if full {
        StoreError::Full { path, reason }
    } else {
        StoreError::Write { path, reason }
    }
}

pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    synchronous_full: bool,
    identity: FileIdentity,
    /// Seals the contents marked for it, and a copied sealed record again to its new key
    /// (`Store::seal_with`).
    rebind: Option<Arc<Keyring>>,
    _lock: DirLock,
}

impl SqliteStore {
    /// Opens (or creates) the data file in `dir`. An existing file that is not a Leasehold
    /// data file, is empty, or is damaged is an error naming it: the server never starts
    /// empty over data it cannot read.
    pub fn open(dir: &Path) -> Result<SqliteStore, StoreError> {
        let path = dir.join(FILE_NAME);
        let shown = path.display().to_string();
        let open_err = |reason: String| StoreError::Open {
            path: shown.clone(),
            reason,
        };
        let corrupt = |reason: String| StoreError::Corrupt {
            path: shown.clone(),
            reason,
        };
        create_private_dir(dir)
            .map_err(|e| open_err(format!("cannot create the data directory: {e}")))?;
        crate::guard::check_writable(dir, &path).map_err(&open_err)?;
        let lock = DirLock::acquire(dir).map_err(&open_err)?;
        let existed = path.exists();
        let wal = wal_path(&path);
        if !existed && wal.exists() {
            return Err(corrupt(format!(
                "{} exists without its database file",
                wal.display()
            )));
        }
        if existed && std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) == 0 {
            return Err(corrupt("the file is empty (truncated?)".into()));
        }
        make_private(&path).map_err(|e| open_err(e.to_string()))?;
        let identity = FileIdentity::of(&path).map_err(|e| open_err(e.to_string()))?;
        crate::ballast::release_if_full(dir);
        let conn = Connection::open(&path).map_err(|e| open_err(e.to_string()))?;
        let sql_err = |e: rusqlite::Error| -> StoreError {
            let text = e.to_string();
            if text.contains("locked") || text.contains("busy") {
                StoreError::Open {
                    path: shown.clone(),
                    reason: "it is in use by another Leasehold server".into(),
                }
            } else {
                StoreError::Corrupt {
                    path: shown.clone(),
                    reason: text,
                }
            }
        };
        // Another server holding the file answers at once instead of after a long wait.
        conn.busy_timeout(std::time::Duration::from_millis(200))
            .map_err(sql_err)?;
        if existed {
            // Before anything that could write to it: a file this build cannot read is left
            // exactly as it was.
            match stored_format(&conn).map_err(sql_err)? {
                None => {
                    return Err(corrupt(
                        "it holds no Leasehold data (a foreign or truncated file)".into(),
                    ))
                }
                Some(format) if format > FORMAT => {
                    return Err(open_err(format!(
                        "it was written by a newer Leasehold (data format {format}; this release reads format {FORMAT}) and is left as it is: run that release or a newer one, or restore a backup this release made"
                    )))
                }
                Some(FORMAT | FORMAT_BEFORE_SEALING) => {}
                Some(format) => return Err(corrupt(format!("unknown data format {format}"))),
            }
        }
        // Normal locking, not exclusive: a backup may read a consistent snapshot while the
        // server writes. One writer is the directory lock's to ensure.
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(sql_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(open_err(format!(
                "write-ahead logging is unavailable (journal mode {mode})"
            )));
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sql_err)?;
        // A large transaction grows the write-ahead log; after the checkpoint that follows,
        // it is cut back to this instead of keeping its high-water mark on disk.
        conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
            .map_err(sql_err)?;
        if !existed {
            conn.execute_batch(&format!(
                "CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID;
                 CREATE TABLE meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
                 INSERT INTO meta (k, v) VALUES ('format', {FORMAT});"
            ))
            .map_err(sql_err)?;
        }
        crate::ballast::restore(dir);
        Ok(SqliteStore {
            conn,
            path,
            synchronous_full: true,
            identity,
            rebind: None,
            _lock: lock,
        })
    }

    fn err(&self, e: rusqlite::Error) -> StoreError {
        write_error(&self.describe(), e)
    }

    /// Called after every write, so nothing written to a file that is gone is answered.
    fn check_identity(&self) -> Result<(), StoreError> {
        self.identity.check().map_err(|reason| StoreError::Write {
            path: self.describe(),
            reason,
        })
    }

    fn set_synchronous(&mut self, full: bool) -> Result<(), StoreError> {
        if self.synchronous_full != full {
            let level = if full { "FULL" } else { "NORMAL" };
            self.conn
                .pragma_update(None, "synchronous", level)
                .map_err(|e| self.err(e))?;
            self.synchronous_full = full;
        }
        Ok(())
    }
}

impl Store for SqliteStore {
    fn scan_range(
        &mut self,
        start: &[u8],
        end: &[u8],
        visit: &mut Visitor,
    ) -> Result<(), StoreError> {
        let path = self.describe();
        let corrupt = |reason: String| StoreError::Corrupt {
            path: path.clone(),
            reason,
        };
        let mut stmt = self
            .conn
            // `codec::is_content` in SQL: a content's value is never loaded.
            .prepare(
                "SELECT k, v FROM kv WHERE k >= ?1 AND k < ?2 \
                 AND NOT (length(k) = ?3 AND substr(k, 1, 1) = ?4) ORDER BY k",
            )
            .map_err(|e| corrupt(e.to_string()))?;
        let (len, kind) = CONTENT_KEY;
        let mut rows = stmt
            .query((start, end, len as i64, [kind]))
            .map_err(|e| corrupt(e.to_string()))?;
        while let Some(row) = rows.next().map_err(|e| corrupt(e.to_string()))? {
            let key = row
                .get_ref(0)
                .and_then(|v| v.as_blob().map_err(Into::into))
                .map_err(|e| corrupt(e.to_string()))?;
            let value = row
                .get_ref(1)
                .and_then(|v| v.as_blob().map_err(Into::into))
                .map_err(|e| corrupt(e.to_string()))?;
            visit(key, value).map_err(&corrupt)?;
        }
        Ok(())
    }

    fn write(&mut self, batches: &[WriteBatch], sync: bool) -> Result<(), StoreError> {
        self.set_synchronous(sync)?;
        let path = self.describe();
        let err = |e: rusqlite::Error| write_error(&path, e);
        let tx = self.conn.transaction().map_err(err)?;
        {
            let mut put = tx
                .prepare_cached("INSERT INTO kv (k, v) VALUES (?1, ?2) ON CONFLICT (k) DO UPDATE SET v = excluded.v")
                .map_err(err)?;
            let mut delete = tx
                .prepare_cached("DELETE FROM kv WHERE k = ?1")
                .map_err(err)?;
            let mut copy = tx
                .prepare_cached(
                    "INSERT INTO kv (k, v) SELECT ?2, v FROM kv WHERE k = ?1 \
                     ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                )
                .map_err(err)?;
            let mut get = tx
                .prepare_cached("SELECT v FROM kv WHERE k = ?1")
                .map_err(err)?;
            let ops = batches.iter().flat_map(|b| &b.ops);
            if ops.map(Op::key).any(|key| key == Some(SEALS_KEY)) {
                // Idempotent, and in the same transaction as the record.
                tx.execute(
                    "UPDATE meta SET v = ?1 WHERE k = 'format' AND v < ?1",
                    [FORMAT],
                )
                .map_err(err)?;
            }
            for op in effective_ops(batches) {
                match (op, &self.rebind) {
                    (Op::Put(k, v), _) | (Op::PutSealed(k, v), None) => {
                        put.execute((k, v)).map(|_| ())
                    }
                    (Op::PutSealed(k, v), Some(keyring)) => {
                        put.execute((k, keyring.seal(k, v))).map(|_| ())
                    }
                    (Op::Delete(k), _) => delete.execute([k]).map(|_| ()),
                    (Op::Copy { from, to }, None) => copy.execute((from, to)).map(|_| ()),
                    // Through this process, to be sealed again to its new key: the write of
                    // a move, which is rare beside sends and deletes.
                    (Op::Copy { from, to }, Some(keyring)) => get
                        .query_row([from], |row| row.get::<_, Vec<u8>>(0))
                        .optional()
                        .and_then(|value| match value {
                            Some(value) => put
                                .execute((to, rebound(keyring, from, to, value)))
                                .map(|_| ()),
                            None => Ok(()),
                        }),
                    (Op::DeleteRange(_), _) => Ok(()),
                }
                .map_err(err)?;
            }
        }
        tx.commit().map_err(err)?;
        self.check_identity()
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        // A commit under synchronous=FULL syncs the write-ahead log, and with it every
        // earlier unsynced commit. It must really write something: SQLite turns a statement
        // that changes nothing (`SET v = v`) into no write and so no sync at all.
        let was_full = self.synchronous_full;
        self.set_synchronous(true)?;
        self.conn
            .execute(
                "INSERT INTO meta (k, v) VALUES ('syncs', 1) ON CONFLICT (k) DO UPDATE SET v = v + 1",
                [],
            )
            .map_err(|e| self.err(e))?;
        self.set_synchronous(was_full)
    }

    fn delete_some(&mut self, range: &RangeDelete, limit: usize) -> Result<usize, StoreError> {
        self.set_synchronous(false)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let deleted = match &range.below {
            None => self
                .conn
                .prepare_cached(
                    "DELETE FROM kv WHERE k IN (SELECT k FROM kv WHERE k >= ?1 AND k < ?2 LIMIT ?3)",
                )
                .and_then(|mut s| s.execute((&range.start, &range.end, limit))),
            // SQLite compares blobs bytewise, as `RangeDelete::covers` does.
            Some((offset, bound)) => self
                .conn
                .prepare_cached(
                    "DELETE FROM kv WHERE k IN (SELECT k FROM kv WHERE k >= ?1 AND k < ?2 \
                     AND substr(k, ?3, ?4) < ?5 LIMIT ?6)",
                )
                .and_then(|mut s| {
                    s.execute((
                        &range.start,
                        &range.end,
                        *offset as i64 + 1,
                        bound.len() as i64,
                        bound,
                        limit,
                    ))
                }),
        }
        .map_err(|e| self.err(e))?;
        self.check_identity()?;
        Ok(deleted)
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn reader(&self) -> Result<Arc<dyn Reader>, StoreError> {
        Ok(Arc::new(SqliteReader {
            path: self.path.clone(),
            idle: Mutex::new(Vec::new()),
        }))
    }

    fn seal_with(&mut self, keyring: Arc<Keyring>) {
        self.rebind = Some(keyring);
    }
}

/// Connections of their own that read while the committer writes (write-ahead logging lets
/// readers see the last commit without waiting), kept for reuse.
struct SqliteReader {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

/// Readers kept open for reuse; more may read at once, opening connections of their own.
const IDLE_READERS: usize = 8;

impl SqliteReader {
    fn error(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Read {
            path: self.path.display().to_string(),
            reason: e.to_string(),
        }
    }

    fn connection(&self) -> Result<Connection, StoreError> {
        if let Some(conn) = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            return Ok(conn);
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&self.path, flags).map_err(|e| self.error(e))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .and_then(|()| conn.pragma_update(None, "query_only", true))
            .map_err(|e| self.error(e))?;
        Ok(conn)
    }

    fn give_back(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < IDLE_READERS {
            idle.push(conn);
        }
    }

    fn with<T>(
        &self,
        read: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let conn = self.connection()?;
        let value = read(&conn).map_err(|e| self.error(e))?;
        self.give_back(conn);
        Ok(value)
    }
}

impl Reader for SqliteReader {
    fn get(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        self.with(|conn| {
            // One read transaction, so every value is of the same commit.
            conn.execute_batch("BEGIN")?;
            let values = {
                let mut stmt = conn.prepare_cached("SELECT v FROM kv WHERE k = ?1")?;
                keys.iter()
                    .map(|k| stmt.query_row([k], |r| r.get(0)).optional())
                    .collect::<rusqlite::Result<Vec<_>>>()
            };
            conn.execute_batch("COMMIT")?;
            values
        })
    }

    fn space(&self) -> Option<Space> {
        let dir = self.path.parent()?;
        let stat = rustix::fs::statvfs(dir).ok()?;
        let file_system_free = stat.f_bavail.saturating_mul(stat.f_frsize);
        let reusable_in_file = self
            .with(|conn| {
                let pages: u64 = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
                let size: u64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
                Ok(pages.saturating_mul(size))
            })
            .unwrap_or(0);
        let write_ahead_log = std::fs::metadata(wal_path(&self.path)).map_or(0, |m| m.len());
        Some(Space {
            file_system_size: stat.f_blocks.saturating_mul(stat.f_frsize),
            file_system_free,
            reusable_in_file,
            write_ahead_log,
        })
    }
}

/// The data format a file's `meta` table names; None when it has no `meta` table or no
/// format in it (not a Leasehold file). Reads only.
fn stored_format(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    let has_meta: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
        [],
        |r| r.get(0),
    )?;
    if has_meta == 0 {
        return Ok(None);
    }
    conn.query_row("SELECT v FROM meta WHERE k = 'format'", [], |r| r.get(0))
        .optional()
}

//! `leasehold backup`: a consistent copy of the data file while a server runs, by SQLite's
//! online backup in one step (one read transaction: the copy is the file as of one commit,
//! and the server's writes go on meanwhile, the write-ahead log growing until it ends). The
//! copy is one self-contained file (no -wal) that a server opens as its `leasehold.db`.

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use crate::sqlite::FILE_NAME;
use crate::StoreError;

/// What a backup copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupSummary {
    pub bytes: u64,
    pub pages: u64,
    pub took: Duration,
}

/// Copies `dir`'s data file to `to` (which must not exist yet), then checks the copy.
pub fn backup(dir: &Path, to: &Path) -> Result<BackupSummary, StoreError> {
    let started = Instant::now();
    let source_path = dir.join(FILE_NAME);
    let shown = source_path.display().to_string();
    let open_err = |reason: String| StoreError::Open {
        path: shown.clone(),
        reason,
    };
    if !source_path.exists() {
        return Err(open_err("there is no data file to back up".into()));
    }
    if to.exists() {
        return Err(StoreError::Write {
            path: to.display().to_string(),
            reason: "it exists already; a backup never overwrites a file".into(),
        });
    }
    let source = Connection::open_with_flags(
        &source_path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| open_err(e.to_string()))?;
    source
        .busy_timeout(Duration::from_secs(10))
        .map_err(|e| open_err(e.to_string()))?;
    let partial = to.with_extension("partial");
    let _ = std::fs::remove_file(&partial);
    let write_err = |e: &dyn std::fmt::Display| StoreError::Write {
        path: to.display().to_string(),
        reason: e.to_string(),
    };
    let pages = {
        let mut target = Connection::open(&partial).map_err(|e| write_err(&e))?;
        {
            let backup =
                rusqlite::backup::Backup::new(&source, &mut target).map_err(|e| write_err(&e))?;
            copy_in_one_step(&backup)
                .map_err(|e| open_err(format!("the online backup failed: {e}")))?;
        }
        target
            .pragma_update(None, "journal_mode", "DELETE")
            .map_err(|e| write_err(&e))?;
        check_copy(&target).map_err(|e| write_err(&e))?
    };
    std::fs::File::open(&partial)
        .and_then(|f| f.sync_all())
        .map_err(|e| write_err(&e))?;
    std::fs::rename(&partial, to).map_err(|e| write_err(&e))?;
    let bytes = std::fs::metadata(to).map_err(|e| write_err(&e))?.len();
    Ok(BackupSummary {
        bytes,
        pages,
        took: started.elapsed(),
    })
}

/// All pages in one step: one read transaction, so a busy server cannot make the copy start
/// over. A moment's lock (a checkpoint) is waited out, for ten seconds at most.
fn copy_in_one_step(backup: &rusqlite::backup::Backup<'_, '_>) -> Result<(), String> {
    use rusqlite::backup::StepResult;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match backup.step(-1).map_err(|e| e.to_string())? {
            StepResult::Done => return Ok(()),
            StepResult::More | StepResult::Busy | StepResult::Locked
                if Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return Err(format!("the data file stayed busy ({other:?})")),
        }
    }
}

/// The copy passes SQLite's integrity check and holds Leasehold's data; answers its pages.
fn check_copy(copy: &Connection) -> Result<u64, String> {
    let verdict: String = copy
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .map_err(|e| e.to_string())?;
    if verdict != "ok" {
        return Err(format!(
            "the copy fails SQLite's integrity check: {verdict}"
        ));
    }
    copy.query_row("SELECT v FROM meta WHERE k = 'format'", [], |r| {
        r.get::<_, i64>(0)
    })
    .map_err(|e| format!("the copy holds no Leasehold data: {e}"))?;
    copy.query_row("PRAGMA page_count", [], |r| r.get::<_, i64>(0))
        .map(|n| n as u64)
        .map_err(|e| e.to_string())
}

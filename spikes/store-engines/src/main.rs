//! Leasehold's storage write pattern on three embedded engines: every message is written three
//! times (send, receive, delete) and every group commit is made durable before its answers go
//! out. Prints durable mutations per second and the time to scan 1,000,000 live records.

use std::time::Instant;

const MESSAGES: u64 = 100_000;
const GROUP: u64 = 320; // 32 clients x batches of 10, sharing one commit
const SCAN_RECORDS: u64 = 1_000_000;
const BODY: usize = 200;

fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&7u64.to_be_bytes());
    k[8..].copy_from_slice(&i.to_be_bytes());
    k
}

fn value(i: u64, receives: u8) -> Vec<u8> {
    let mut v = vec![b'x'; BODY + 40];
    v[0] = receives;
    v[1..9].copy_from_slice(&i.to_be_bytes());
    v
}

/// One group: send GROUP new messages, receive (update) the previous group's, delete the one
/// before. Each message ends up inserted, updated and deleted.
fn rounds() -> impl Iterator<Item = (Vec<u64>, Vec<u64>, Vec<u64>)> {
    (0..MESSAGES / GROUP + 2).map(|g| {
        let range = |g: u64| -> Vec<u64> {
            if g * GROUP >= MESSAGES { vec![] } else { (g * GROUP..((g + 1) * GROUP).min(MESSAGES)).collect() }
        };
        let inserts = range(g);
        let updates = if g >= 1 { range(g - 1) } else { vec![] };
        let deletes = if g >= 2 { range(g - 2) } else { vec![] };
        (inserts, updates, deletes)
    })
}

fn report(name: &str, started: Instant, scan: f64) {
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{name:8} {:>9.0} durable mutations/s ({:.2} s for {} messages x 3), scan of 1M records {:.2} s",
        (MESSAGES * 3) as f64 / secs,
        secs,
        MESSAGES,
        scan
    );
}

fn redb_spike(dir: &std::path::Path) {
    use redb::{Database, ReadableTable, TableDefinition};
    const T: TableDefinition<&[u8], &[u8]> = TableDefinition::new("m");
    let db = Database::create(dir.join("redb")).unwrap();
    let started = Instant::now();
    for (ins, upd, del) in rounds() {
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(T).unwrap();
            for i in ins { t.insert(&key(i)[..], &value(i, 0)[..]).unwrap(); }
            for i in upd { t.insert(&key(i)[..], &value(i, 1)[..]).unwrap(); }
            for i in del { t.remove(&key(i)[..]).unwrap(); }
        }
        tx.commit().unwrap();
    }
    let run = started;
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(T).unwrap();
        for i in 0..SCAN_RECORDS { t.insert(&key(i)[..], &value(i, 0)[..]).unwrap(); }
    }
    tx.commit().unwrap();
    drop(db);
    let db = Database::open(dir.join("redb")).unwrap();
    let scan_started = Instant::now();
    let rx = db.begin_read().unwrap();
    let t = rx.open_table(T).unwrap();
    let n = t.iter().unwrap().count();
    assert_eq!(n as u64, SCAN_RECORDS);
    report("redb", run, scan_started.elapsed().as_secs_f64());
}

fn fjall_spike(dir: &std::path::Path) {
    use fjall::{Config, PartitionCreateOptions, PersistMode};
    let ks = Config::new(dir.join("fjall")).open().unwrap();
    let p = ks.open_partition("m", PartitionCreateOptions::default()).unwrap();
    let started = Instant::now();
    for (ins, upd, del) in rounds() {
        let mut b = ks.batch();
        for i in ins { b.insert(&p, key(i), value(i, 0)); }
        for i in upd { b.insert(&p, key(i), value(i, 1)); }
        for i in del { b.remove(&p, key(i)); }
        b.commit().unwrap();
        ks.persist(PersistMode::SyncAll).unwrap();
    }
    let run = started;
    let mut b = ks.batch();
    for i in 0..SCAN_RECORDS { b.insert(&p, key(i), value(i, 0)); }
    b.commit().unwrap();
    ks.persist(PersistMode::SyncAll).unwrap();
    drop(p);
    drop(ks);
    let scan_started = Instant::now();
    let ks = Config::new(dir.join("fjall")).open().unwrap();
    let p = ks.open_partition("m", PartitionCreateOptions::default()).unwrap();
    let n = p.iter().count();
    assert_eq!(n as u64, SCAN_RECORDS);
    report("fjall", run, scan_started.elapsed().as_secs_f64());
}

fn sqlite_spike(dir: &std::path::Path) {
    let c = rusqlite::Connection::open(dir.join("sqlite")).unwrap();
    c.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE m (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID;").unwrap();
    let started = Instant::now();
    for (ins, upd, del) in rounds() {
        let tx = c.unchecked_transaction().unwrap();
        {
            let mut put = tx.prepare_cached("INSERT OR REPLACE INTO m (k, v) VALUES (?1, ?2)").unwrap();
            for i in ins { put.execute((&key(i)[..], &value(i, 0)[..])).unwrap(); }
            for i in upd { put.execute((&key(i)[..], &value(i, 1)[..])).unwrap(); }
            let mut rm = tx.prepare_cached("DELETE FROM m WHERE k = ?1").unwrap();
            for i in del { rm.execute([&key(i)[..]]).unwrap(); }
        }
        tx.commit().unwrap();
    }
    let run = started;
    let tx = c.unchecked_transaction().unwrap();
    {
        let mut put = tx.prepare_cached("INSERT OR REPLACE INTO m (k, v) VALUES (?1, ?2)").unwrap();
        for i in 0..SCAN_RECORDS { put.execute((&key(i)[..], &value(i, 0)[..])).unwrap(); }
    }
    tx.commit().unwrap();
    drop(c);
    let c = rusqlite::Connection::open(dir.join("sqlite")).unwrap();
    let scan_started = Instant::now();
    let mut s = c.prepare("SELECT k, v FROM m").unwrap();
    let n = s.query_map([], |r| Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, Vec<u8>>(1)?))).unwrap().count();
    assert_eq!(n as u64, SCAN_RECORDS);
    report("sqlite", run, scan_started.elapsed().as_secs_f64());
}

fn main() {
    let base = tempfile::tempdir_in(".").unwrap();
    redb_spike(base.path());
    fjall_spike(base.path());
    sqlite_spike(base.path());
}

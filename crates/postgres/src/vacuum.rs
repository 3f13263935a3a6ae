//! Vacuum of the churning tables, by the cluster itself: every message is an insert, an update
//! per receive and a delete, and a database whose autovacuum is off (or lags behind the
//! churn) would let dead rows pile up until every claim wades through them, and keep the
//! statistics of an empty table the claims are planned by. Every second one server (a
//! session advisory lock, taken without waiting) reads the tables' dead and changed rows and
//! runs a plain `VACUUM (ANALYZE)` or `ANALYZE` (neither blocks commands) on those past a
//! threshold, on a task of its own so nothing waits for it.

use std::time::Duration;

use deadpool_postgres::Pool;

use crate::sweep::SweepClock;
use crate::{cause, Core};

/// Any constant: the advisory lock of the cluster's vacuum.
const VACUUM_LOCK: i64 = 0x6c65_6173_7661_6375;
/// The tables rows churn through.
const CHURNING: [&str; 2] = ["leasehold_messages", "leasehold_dedup"];
/// A table is vacuumed once it has this many dead rows and they are a fifth of its live ones.
/// Low, and looked at every second: a receive's claim walks the oldest messages' index
/// entries, and every deleted message leaves one there until a vacuum takes it (the full
/// cycle on one queue: 13,900 messages/s with 10,000 looked at every 5 s, 17,900 with 2,000
/// every second; 1,000 every half second gained nothing more).
const DEAD_ROWS: i64 = 2_000;

/// When this server last looked.
pub(crate) struct VacuumClock(SweepClock);

impl Default for VacuumClock {
    fn default() -> Self {
        VacuumClock(SweepClock::every(Duration::from_secs(1)))
    }
}

impl Core {
    /// Starts a look at the churning tables, if one is due here.
    pub(crate) fn vacuum_if_due(&self) {
        if !self.vacuum_clock.0.due() {
            return;
        }
        let pool = self.pool.clone();
        tokio::spawn(async move {
            if let Err(why) = vacuum_churned(&pool).await {
                tracing::warn!(%why, "the vacuum of the message tables did not run");
            }
        });
    }
}

async fn vacuum_churned(pool: &Pool) -> Result<(), String> {
    let client = pool.get().await.map_err(|e| cause(&e))?;
    let db = |e: tokio_postgres::Error| cause(&e);
    let taken: bool = client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&VACUUM_LOCK])
        .await
        .map_err(db)?
        .get(0);
    if !taken {
        return Ok(());
    }
    let mut outcome = Ok(());
    for table in CHURNING {
        let row = client
            .query_one(
                "SELECT coalesce(n_dead_tup, 0), coalesce(n_live_tup, 0),
                        coalesce(n_mod_since_analyze, 0)
                 FROM pg_stat_user_tables WHERE relid = to_regclass($1)",
                &[&table],
            )
            .await;
        let (dead, live, changed): (i64, i64, i64) = match row {
            Ok(row) => (row.get(0), row.get(1), row.get(2)),
            Err(e) => {
                outcome = Err(db(e));
                break;
            }
        };
        // Statistics matter as much: a claim planned on an empty table's numbers scans the
        // whole table once it is full.
        let analyze = changed >= DEAD_ROWS && changed * 5 >= live;
        let vacuum = dead >= DEAD_ROWS && dead * 5 >= live;
        let command = match (vacuum, analyze) {
            (true, _) => format!("VACUUM (ANALYZE) {table}"),
            (false, true) => format!("ANALYZE {table}"),
            (false, false) => continue,
        };
        if let Err(e) = client.batch_execute(&command).await {
            outcome = Err(db(e));
            break;
        }
        tracing::debug!(table, dead, changed, "vacuumed");
    }
    client
        .execute("SELECT pg_advisory_unlock($1)", &[&VACUUM_LOCK])
        .await
        .map_err(db)?;
    outcome
}

//! A transaction on a pooled connection whose `BEGIN` can go out with its first statement.
//!
//! tokio-postgres' own `Transaction` awaits its `BEGIN` before anything else is sent: a
//! round trip of its own for every command, and for every group of requests (one of the
//! four a group took). Requests on a connection are executed in the order they are first
//! polled (tokio-postgres' documented behaviour), so `BEGIN` polled first and the read that
//! opens every command polled next travel together and are answered together.
//!
//! Like tokio-postgres' `Transaction`, a `Tx` dropped before its commit (an error, a
//! cancelled request, a panic) rolls back: the `ROLLBACK` is queued on the connection
//! before the connection goes back to the pool, so whoever takes it next finds no
//! transaction open, and nothing of this one.

use std::ops::Deref;

use deadpool_postgres::{ClientWrapper, Object};
use futures_util::future::{join, join3};
use futures_util::FutureExt;
use leasehold_backend::BackendError;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::unavailable;

/// Every statement here is written for READ COMMITTED (each sees what committed before it; a
/// row lock waits for its holder, then takes the newest version), whatever the database's
/// default: a stricter one would turn every contention into a serialization failure. One
/// statement, and no startup parameter a connection pooler might refuse.
const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// A transaction in progress on a connection it holds; statements run on it through
/// `Deref` (the connection's statement cache included).
pub(crate) struct Tx {
    client: Object,
    /// Committed, or the commit was sent: nothing to roll back.
    done: bool,
}

impl Tx {
    /// Begins a transaction on `client`, on its own round trip.
    pub(crate) async fn begin(client: Object) -> Result<Tx, BackendError> {
        let tx = Tx {
            client,
            done: false,
        };
        tx.client
            .batch_execute(BEGIN)
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(tx)
    }

    /// Begins a transaction on `client` whose first statement, `sql` (prepared once per
    /// connection), is sent with the `BEGIN`: one round trip for both. Its rows come back
    /// with the transaction.
    pub(crate) async fn begin_with_query(
        client: Object,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<(Tx, Vec<Row>), BackendError> {
        let tx = Tx {
            client,
            done: false,
        };
        let first = async {
            let statement = tx.client.prepare_cached(sql).await?;
            tx.client.query(&statement, params).await
        };
        // `join` polls the `BEGIN` first, so it is sent, and executed, first.
        let (began, rows) = join(tx.client.batch_execute(BEGIN), first).await;
        // Either failing fails the command, and the dropped `Tx` rolls back. A BEGIN that
        // fails while its statement succeeds would have run the statement alone: every
        // first statement here only reads (or locks a row its own implicit transaction
        // then releases), so nothing of it stands.
        began.map_err(|e| unavailable(&e))?;
        let rows = rows.map_err(|e| unavailable(&e))?;
        Ok((tx, rows))
    }

    /// Runs `sql` (prepared once per connection) in a transaction of its own on `client`,
    /// its `BEGIN` and `COMMIT` sent with it: one round trip, at READ COMMITTED whatever the
    /// database's default. Answers how many rows it changed; a statement that fails
    /// changes nothing (the `COMMIT` of a failed transaction rolls it back).
    pub(crate) async fn run_alone(
        client: Object,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, BackendError> {
        let mut tx = Tx {
            client,
            done: false,
        };
        let statement = (tx.client.prepare_cached(sql).await).map_err(|e| unavailable(&e))?;
        // `join3` polls them in this order, so they are sent, and executed, in it.
        let (began, changed, committed) = join3(
            tx.client.batch_execute(BEGIN),
            tx.client.execute(&statement, params),
            tx.client.batch_execute("COMMIT"),
        )
        .await;
        tx.done = true;
        began.map_err(|e| unavailable(&e))?;
        let changed = changed.map_err(|e| unavailable(&e))?;
        committed.map_err(|e| unavailable(&e))?;
        Ok(changed)
    }

    /// Commits. Whatever the answer the transaction is over (committed, or ended by the
    /// error), so a failed commit rolls nothing back.
    pub(crate) async fn commit(mut self) -> Result<(), BackendError> {
        self.done = true;
        self.client
            .batch_execute("COMMIT")
            .await
            .map_err(|e| unavailable(&e))
    }
}

impl Deref for Tx {
    type Target = ClientWrapper;

    fn deref(&self) -> &ClientWrapper {
        &self.client
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Polled once, the `ROLLBACK` is on the connection's queue (requests go out in the
        // order first polled), ahead of whatever the connection's next holder sends; its
        // answer is not awaited. A connection already broken is dropped by the pool's check.
        let _ = self.client.batch_execute("ROLLBACK").now_or_never();
    }
}

#[cfg(test)]
mod tests {
    //! On the real database (`postgres://postgres@127.0.0.1:5432/test`), one connection in
    //! the pool, so each test sees what a `Tx` left on it; a temporary table each, which
    //! the connection alone sees and which goes with it.

    use std::time::Duration;

    use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
    use tokio_postgres::NoTls;

    use super::Tx;

    /// A pool of one connection (a `Tx` that kept it would make the next `get` time out,
    /// not hang), `t` made on it, and `sql` already prepared there: a statement in the
    /// cache is sent at once, which is where the order of `BEGIN` and it matters.
    async fn one_connection(sql: &str) -> Pool {
        let config: tokio_postgres::Config =
            "postgres://postgres@127.0.0.1:5432/test".parse().unwrap();
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(1)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(5)))
            .build()
            .unwrap();
        let client = pool.get().await.unwrap();
        client
            .batch_execute("CREATE TEMPORARY TABLE t (x integer)")
            .await
            .unwrap();
        client.prepare_cached(sql).await.unwrap();
        pool
    }

    /// How many rows `t` holds, and whether the connection is still inside a transaction
    /// block (only there does a SAVEPOINT not fail).
    async fn rows_and_open_transaction(pool: &Pool) -> (i64, bool) {
        let client = pool.get().await.unwrap();
        let open = client.batch_execute("SAVEPOINT probe").await.is_ok();
        let row = client
            .query_one("SELECT count(*) FROM t", &[])
            .await
            .unwrap();
        (row.get(0), open)
    }

    #[tokio::test]
    async fn the_first_statement_runs_inside_the_transaction_it_is_sent_with() {
        let sql = "INSERT INTO t VALUES (7) RETURNING x";
        let pool = one_connection(sql).await;
        let (tx, rows) = Tx::begin_with_query(pool.get().await.unwrap(), sql, &[])
            .await
            .unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].get::<_, i32>(0), 7);
        drop(tx);
        // Rolled back with the transaction: it was inside it, not committed on its own.
        assert_eq!(rows_and_open_transaction(&pool).await, (0, false));
    }

    #[tokio::test]
    async fn a_transaction_that_only_read_is_not_left_open_when_dropped() {
        let sql = "SELECT count(*) FROM t";
        let pool = one_connection(sql).await;
        let (tx, _) = Tx::begin_with_query(pool.get().await.unwrap(), sql, &[])
            .await
            .unwrap();
        drop(tx);
        assert_eq!(rows_and_open_transaction(&pool).await, (0, false));
    }

    #[tokio::test]
    async fn a_committed_transaction_keeps_its_writes() {
        let pool = one_connection("SELECT 1").await;
        let tx = Tx::begin(pool.get().await.unwrap()).await.unwrap();
        tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(rows_and_open_transaction(&pool).await, (1, false));
    }

    #[tokio::test]
    async fn a_statement_run_alone_commits_and_leaves_no_transaction_open() {
        let sql = "INSERT INTO t VALUES (1), (2)";
        let pool = one_connection(sql).await;
        let changed = Tx::run_alone(pool.get().await.unwrap(), sql, &[]).await;
        assert_eq!(changed.unwrap(), 2);
        assert_eq!(rows_and_open_transaction(&pool).await, (2, false));
    }

    #[tokio::test]
    async fn a_statement_run_alone_that_fails_leaves_nothing_and_no_transaction_open() {
        let sql = "INSERT INTO t SELECT 1 / (x - x) FROM (VALUES (1)) v(x)";
        let pool = one_connection(sql).await;
        let failed = Tx::run_alone(pool.get().await.unwrap(), sql, &[]).await;
        assert!(failed.is_err());
        assert_eq!(rows_and_open_transaction(&pool).await, (0, false));
    }

    #[tokio::test]
    async fn a_transaction_dropped_uncommitted_leaves_nothing_on_its_connection() {
        let pool = one_connection("SELECT 1").await;
        let tx = Tx::begin(pool.get().await.unwrap()).await.unwrap();
        tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
        drop(tx);
        assert_eq!(rows_and_open_transaction(&pool).await, (0, false));
    }

    #[tokio::test]
    async fn a_transaction_cancelled_while_its_statement_runs_is_rolled_back_after_it() {
        let sql = "INSERT INTO t SELECT 1 FROM pg_sleep(0.3) RETURNING x";
        let pool = one_connection(sql).await;
        let slow = Tx::begin_with_query(pool.get().await.unwrap(), sql, &[]);
        // The caller gives up while the insert runs: the future, and the Tx in it, dropped.
        let gave_up = tokio::time::timeout(Duration::from_millis(50), slow).await;
        assert!(gave_up.is_err());
        assert_eq!(rows_and_open_transaction(&pool).await, (0, false));
    }
}

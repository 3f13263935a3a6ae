//! One consumer's way to the downstream: its executions, each a row in the ledger and the
//! work on a connection of the pool (a consumer process: its own, and a slot of the
//! database's), ended cleanly however it ends (cancelled, failed, timed out).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_postgres::{Client, NoTls};

use super::{connect, fleet_pool, parse_url, Reach, POISON_STATE};
use crate::LabError;

/// One consumer's way to the downstream. Its execution is stopped by dropping the future
/// of `execute` (a lost lease, the run's end): the query is cancelled on the database and
/// its connection leaves the pool, so no other execution ever queues behind it or has its
/// own query cancelled in its place.
pub struct Executor {
    ledger: Arc<Client>,
    pool: Pool,
    in_progress: Arc<AtomicU32>,
    /// The consumer process this executor belongs to, in a fleet of processes: its work
    /// waits for one of the database's slots (its capacity) rather than for the pool.
    worker: Option<i32>,
    /// A Lambda function's timeout: an execution still running then is ended (its query
    /// cancelled), marked timed out, and answered `LabError::TimedOut`.
    limit: Option<Duration>,
}

/// Counts an execution in progress for as long as it lives, however it ends.
struct InProgress(Arc<AtomicU32>);

impl InProgress {
    fn start(count: &Arc<AtomicU32>) -> InProgress {
        count.fetch_add(1, Ordering::Relaxed);
        InProgress(count.clone())
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An execution's row while it runs. Dropped before the end is recorded (its lease was lost
/// and the future cancelled, or the database failed it), the row is marked failed, so that
/// only a row whose consumer was killed stays open: a crash takes only busy consumers.
struct Open {
    ledger: Option<Arc<Client>>,
    id: i64,
}

impl Drop for Open {
    fn drop(&mut self) {
        let (Some(ledger), Ok(runtime)) =
            (self.ledger.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let id = self.id;
        runtime.spawn(async move {
            let _ = ledger
                .execute(
                    "UPDATE executions SET failed_at = clock_timestamp()
                     WHERE id = $1 AND finished_at IS NULL AND failed_at IS NULL",
                    &[&id],
                )
                .await;
        });
    }
}

/// A pooled connection whose statement is on its way. Dropped before `finished`, the
/// statement is cancelled and the connection taken out of the pool (closed), never handed
/// to the next execution with an abandoned query still running on it.
struct Checkout {
    connection: Option<deadpool_postgres::Object>,
    token: tokio_postgres::CancelToken,
}

impl Checkout {
    fn finished(mut self) -> deadpool_postgres::Object {
        self.connection.take().expect("held until finished")
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if let Some(connection) = self.connection.take() {
            drop(deadpool_postgres::Object::take(connection));
            let token = self.token.clone();
            tokio::spawn(async move {
                let _ = token.cancel_query(NoTls).await;
            });
        }
    }
}

impl Executor {
    /// A consumer task's: its ledger, and the fleet's pool and count of executions.
    pub(super) fn for_task(
        ledger: Arc<Client>,
        pool: Pool,
        in_progress: Arc<AtomicU32>,
    ) -> Executor {
        Executor {
            ledger,
            pool,
            in_progress,
            worker: None,
            limit: None,
        }
    }

    /// A consumer process's way to the downstream: its own ledger, and a connection of its
    /// own to work through. The database ends a statement whose client is gone
    /// (`client_connection_check_interval`), so a killed process's work stops with it.
    pub async fn for_process(
        reach: &Reach,
        worker: i32,
        limit: Option<Duration>,
    ) -> Result<Executor, LabError> {
        let mut config = parse_url(&reach.postgres_url)?;
        config.options(format!(
            "-c search_path={} -c client_connection_check_interval=100",
            reach.schema
        ));
        let mut ledger_config = config.clone();
        ledger_config.application_name(format!("{}_ledger", reach.app));
        Ok(Executor {
            ledger: Arc::new(connect(&ledger_config).await?),
            pool: fleet_pool(&config, &reach.app, 1)?,
            in_progress: Arc::new(AtomicU32::new(0)),
            worker: Some(worker),
            limit,
        })
    }

    /// One execution of a message: a row in `executions` first (on the ledger, committed at
    /// once, so an execution cut short is still counted), then the work (`work`), within the
    /// function's timeout if there is one; then the execution is marked finished, failed (a
    /// poison message) or timed out.
    pub async fn execute(&self, message_id: &str, unloaded_s: f64) -> Result<(), LabError> {
        let row = self
            .ledger
            .query_one(
                "INSERT INTO executions (message_id, unloaded_s, worker) VALUES ($1, $2, $3) RETURNING id",
                &[&message_id, &unloaded_s, &self.worker],
            )
            .await
            .map_err(LabError::postgres)?;
        let id: i64 = row.get(0);
        let mut open = Open {
            ledger: Some(self.ledger.clone()),
            id,
        };
        let _counted = InProgress::start(&self.in_progress);
        // Past a Lambda's timeout the work's future is dropped: its query is cancelled.
        let worked = match self.limit {
            Some(limit) => tokio::time::timeout(limit, self.work(message_id, unloaded_s))
                .await
                .ok(),
            None => Some(self.work(message_id, unloaded_s).await),
        };
        let (column, answer) = match worked {
            None => (
                "failed_at = clock_timestamp(), timed_out = true",
                Err(LabError::TimedOut),
            ),
            Some(Err(LabError::Poison)) => ("failed_at = clock_timestamp()", Err(LabError::Poison)),
            Some(Err(e)) => return Err(e),
            Some(Ok(())) => ("finished_at = clock_timestamp()", Ok(())),
        };
        open.ledger = None;
        self.ledger
            .execute(
                &format!("UPDATE executions SET {column} WHERE id = $1"),
                &[&id],
            )
            .await
            .map_err(LabError::postgres)?;
        answer
    }

    /// The work of one execution: a connection from the pool (waiting, when the fleet holds
    /// them all) and one statement; in a fleet of processes, that statement waits for one of
    /// the database's slots first. A poison message's failure is `LabError::Poison`.
    async fn work(&self, message_id: &str, unloaded_s: f64) -> Result<(), LabError> {
        let connection = self
            .pool
            .get()
            .await
            .map_err(|e| LabError::Postgres(format!("no connection from the pool: {e}")))?;
        let checkout = Checkout {
            token: connection.cancel_token(),
            connection: Some(connection),
        };
        let statement = match self.worker {
            Some(_) => "SELECT execute_gated($1, $2)",
            None => "SELECT execute($1, $2)",
        };
        let worked = checkout
            .connection
            .as_ref()
            .expect("held until finished")
            .execute(statement, &[&message_id, &unloaded_s])
            .await;
        let connection = checkout.finished();
        match worked {
            Ok(_) => Ok(()),
            Err(e) if e.code().is_some_and(|code| code.code() == POISON_STATE) => {
                Err(LabError::Poison)
            }
            Err(e) => {
                // Out of the pool: a statement that failed inside `take_slot` may leave the
                // session holding the line's advisory lock, which only its end lets go.
                drop(deadpool_postgres::Object::take(connection));
                Err(LabError::postgres(e))
            }
        }
    }
}

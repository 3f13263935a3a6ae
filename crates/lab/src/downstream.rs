//! The downstream: a real PostgreSQL database that every execution writes to, through a
//! pool of `database.capacity` connections shared by the whole fleet, as an application's
//! pool is. Nothing here computes the simulator's formulas: an execution past capacity waits
//! for a connection for real, copies of one message upsert the same row and wait on its lock
//! for real (held for the last `contention` share of their work), and a slow-query trigger
//! stretches the work. Each run lives in a schema of its own, dropped at the end.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

use leasehold_sim::Scenario;
use tokio_postgres::{Client, Config, NoTls};

use crate::LabError;

/// One execution as the downstream table recorded it, in seconds since the run began (by the
/// database's clock).
#[derive(Clone, Debug)]
pub struct ExecutionRow {
    pub message_id: String,
    /// The processing time drawn for it, before the database's slowdowns.
    pub unloaded_s: f64,
    pub started_s: f64,
    pub finished_s: Option<f64>,
    /// When it failed, as a poison message's executions do.
    pub failed_s: Option<f64>,
    /// When a crash killed the consumer process running it (a fleet of processes only).
    pub killed_s: Option<f64>,
    /// Ended by a Lambda function's timeout (a `lambda` fleet only).
    pub timed_out: bool,
}

/// The SQLSTATE the downstream's `execute` raises for a poison message.
const POISON_STATE: &str = "LHPSN";

pub struct Downstream {
    admin: Client,
    config: Config,
    url: String,
    /// The database's URL as given, without this run's schema.
    base_url: String,
    schema: String,
    /// The application name of the consumers' connections.
    app: String,
    /// The fleet's connections to the database: `database.capacity` of them.
    pool: Pool,
    /// Executions started and not yet ended (waiting for a connection, or running): the
    /// lab's own count, sampled each step as the simulator's `db_running`.
    in_progress: Arc<AtomicU32>,
}

/// The tables and functions of one run. `work(unloaded)` sleeps in slices, each stretched by
/// the slow-query trigger's `slow_factor` (1 outside it); the database's load shows as the
/// wait for a pool connection and for a row lock, never as a formula.
const SCHEMA_SQL: &str = r#"
CREATE TABLE settings (contention float8 NOT NULL, slow_factor float8 NOT NULL);
CREATE TABLE executions (id bigserial PRIMARY KEY, message_id text NOT NULL,
                         unloaded_s float8 NOT NULL,
                         started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                         finished_at timestamptz, failed_at timestamptz,
                         worker int, killed_at timestamptz,
                         timed_out boolean NOT NULL DEFAULT false);
CREATE INDEX executions_by_message ON executions (message_id);
CREATE TABLE records (key text PRIMARY KEY, executions int NOT NULL);
-- The database's capacity for a fleet of processes, each with a connection of its own:
-- `database.capacity` rows, one locked by each execution for as long as it runs.
CREATE TABLE slots (id int PRIMARY KEY);
CREATE FUNCTION work(unloaded float8) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  done float8 := 0; factor float8; slice float8;
BEGIN
  WHILE done < unloaded LOOP
    SELECT slow_factor INTO factor FROM settings;
    slice := least(0.025, (unloaded - done) * factor);
    PERFORM pg_sleep(slice);
    done := done + slice / factor;
  END LOOP;
END $$;
CREATE FUNCTION execute(work_key text, unloaded float8)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE c float8;
BEGIN
  SELECT contention INTO c FROM settings;
  PERFORM work(unloaded * (1 - c));
  INSERT INTO records VALUES (work_key, 1)
    ON CONFLICT (key) DO UPDATE SET executions = records.executions + 1;
  PERFORM work(unloaded * c);
  -- A poison message (the scenario's `poison` trigger) does all its work, row lock and
  -- all, as the simulator has it, and then fails: its write is undone.
  IF work_key LIKE 'poison-%' THEN
    RAISE EXCEPTION USING ERRCODE = 'LHPSN', MESSAGE = 'a poison message failed';
  END IF;
END $$;
-- Takes a free slot, or waits for one in line: the line is an advisory lock (granted in
-- the order asked), and only its head looks for a free slot (SKIP LOCKED), every 5 ms, so
-- executions get slots in the order they came, as from a pool. The slot is held until the
-- statement's transaction ends, however it ends; the line's lock is the session's, let go
-- once a slot is taken, and with the connection (which a cancelled execution's executor
-- closes, as a killed consumer's dies).
CREATE FUNCTION take_slot() RETURNS void LANGUAGE plpgsql AS $$
DECLARE taken int;
BEGIN
  PERFORM pg_advisory_lock(hashtext(current_schema()));
  LOOP
    SELECT id INTO taken FROM slots ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;
    EXIT WHEN FOUND;
    PERFORM pg_sleep(0.005);
  END LOOP;
  PERFORM pg_advisory_unlock(hashtext(current_schema()));
END $$;
CREATE FUNCTION execute_gated(work_key text, unloaded float8)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM take_slot();
  PERFORM execute(work_key, unloaded);
END $$;
"#;

async fn connect(config: &Config) -> Result<Client, LabError> {
    let (client, connection) = config.connect(NoTls).await.map_err(LabError::postgres)?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Reads a PostgreSQL URL, or says in one line why it is not one.
pub fn parse_url(url: &str) -> Result<Config, LabError> {
    url.parse()
        .map_err(|e| LabError::Setup(format!("--postgres {url:?} is not a PostgreSQL URL: {e}")))
}

impl Downstream {
    /// Creates this run's schema on the database at `url`.
    pub async fn create(url: &str, scenario: &Scenario) -> Result<Downstream, LabError> {
        let base = parse_url(url)?;
        let admin = connect(&base).await?;
        let schema = format!("leasehold_lab_{}", std::process::id());
        let app = format!("{schema}_work");
        admin
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; SET search_path = {schema};"
            ))
            .await
            .map_err(LabError::postgres)?;
        admin
            .batch_execute(SCHEMA_SQL)
            .await
            .map_err(LabError::postgres)?;
        let db = &scenario.database;
        admin
            .execute(
                "INSERT INTO settings VALUES ($1, 1.0)",
                &[&db.contention.clamp(0.0, 1.0)],
            )
            .await
            .map_err(LabError::postgres)?;
        admin
            .execute(
                "INSERT INTO slots SELECT generate_series(0, $1 - 1)",
                &[&(db.capacity.max(1) as i32)],
            )
            .await
            .map_err(LabError::postgres)?;
        let mut config = base.clone();
        config.options(format!("-c search_path={schema}"));
        let pool = fleet_pool(&config, &app, db.capacity.max(1) as usize)?;
        let base_url = url.to_string();
        let url = schema_url(url, &schema);
        Ok(Downstream {
            admin,
            config,
            url,
            base_url,
            schema,
            app,
            pool,
            in_progress: Arc::new(AtomicU32::new(0)),
        })
    }

    /// Refuses, before anything starts, a fleet that needs more connections than the
    /// database has left (`max_connections`, less the reserved and those open now).
    pub async fn check_room(&self, needed: u32) -> Result<(), LabError> {
        let row = self
            .admin
            .query_one(
                "SELECT current_setting('max_connections')::int
                      - current_setting('superuser_reserved_connections')::int
                      - (SELECT count(*) FROM pg_stat_activity
                         WHERE backend_type = 'client backend')::int",
                &[],
            )
            .await
            .map_err(LabError::postgres)?;
        let left: i32 = row.get(0);
        if i64::from(needed) > i64::from(left) {
            return Err(LabError::Setup(format!(
                "the fleet needs {needed} connections to the downstream database and it has {left} left (max_connections): run fewer consumers"
            )));
        }
        Ok(())
    }

    /// A URL to this run's schema (for the idempotency store).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Where a consumer process finds this run's downstream.
    pub fn reach(&self) -> Reach {
        Reach {
            postgres_url: self.base_url.clone(),
            schema: self.schema.clone(),
            app: self.app.clone(),
        }
    }

    /// Executions running on the database now, in a fleet of processes (each with a
    /// connection of its own, so none waits for one): the statements of the fleet's
    /// connections in progress.
    pub async fn running_statements(&self) -> Result<u32, LabError> {
        let row = self
            .admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'active'",
                &[&self.app],
            )
            .await
            .map_err(LabError::postgres)?;
        Ok(u32::try_from(row.get::<_, i64>(0)).unwrap_or(u32::MAX))
    }

    /// The consumer processes whose latest execution is still running, by number: those a
    /// crash takes.
    pub async fn busy_workers(&self) -> Result<Vec<i32>, LabError> {
        let rows = self
            .admin
            .query(
                "SELECT worker FROM (
                     SELECT DISTINCT ON (worker) worker, finished_at, failed_at, killed_at
                     FROM executions WHERE worker IS NOT NULL ORDER BY worker, id DESC) latest
                 WHERE finished_at IS NULL AND failed_at IS NULL AND killed_at IS NULL
                 ORDER BY worker",
                &[],
            )
            .await
            .map_err(LabError::postgres)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Marks the newest execution of a consumer a deploy stopped as cut (`killed_at`) if it
    /// did not finish: killed at the grace's end, or given back by the runtime then (its row
    /// marked failed when it was cut, or, if the process ended first, not at all). A poison
    /// message's failure is its own end, not a cut.
    pub async fn mark_cut(&self, worker: i32) -> Result<(), LabError> {
        self.admin
            .execute(
                "UPDATE executions SET killed_at = coalesce(failed_at, clock_timestamp())
                 WHERE id = (SELECT max(id) FROM executions WHERE worker = $1)
                   AND finished_at IS NULL AND killed_at IS NULL
                   AND NOT (message_id LIKE 'poison-%' AND failed_at IS NOT NULL)",
                &[&worker],
            )
            .await
            .map_err(LabError::postgres)?;
        Ok(())
    }

    /// Marks what a killed consumer process was running (its newest execution, if it had not
    /// ended) as killed, now; answers whether it had one (it may have finished between the
    /// look at the table and the kill).
    pub async fn mark_killed(&self, worker: i32) -> Result<bool, LabError> {
        let marked = self
            .admin
            .execute(
                "UPDATE executions SET killed_at = clock_timestamp()
                 WHERE id = (SELECT max(id) FROM executions WHERE worker = $1)
                   AND finished_at IS NULL AND failed_at IS NULL AND killed_at IS NULL",
                &[&worker],
            )
            .await
            .map_err(LabError::postgres)?;
        Ok(marked > 0)
    }

    /// One consumer's way to the database: its own connection to record its executions
    /// (the lab's ledger, outside the pool), and the fleet's pool to work through.
    pub async fn executor(&self) -> Result<Executor, LabError> {
        let mut config = self.config.clone();
        config.application_name(format!("{}_ledger", self.app));
        let ledger = Arc::new(connect(&config).await?);
        Ok(Executor::for_task(
            ledger,
            self.pool.clone(),
            self.in_progress.clone(),
        ))
    }

    /// The slow-query trigger: every execution's work takes `factor` times as long.
    pub async fn set_slow_factor(&self, factor: f64) -> Result<(), LabError> {
        self.admin
            .execute("UPDATE settings SET slow_factor = $1", &[&factor.max(0.01)])
            .await
            .map_err(LabError::postgres)?;
        Ok(())
    }

    /// The table-lock trigger: a transaction of its own locks `records` against writes for
    /// `length` (or until `stop`), then commits. Executions reaching their upsert wait on it.
    pub async fn lock_records(
        &self,
        length: Duration,
        stop: tokio_util::sync::CancellationToken,
    ) -> Result<(), LabError> {
        let client = connect(&self.config).await?;
        client
            .batch_execute("BEGIN; LOCK TABLE records IN SHARE ROW EXCLUSIVE MODE")
            .await
            .map_err(LabError::postgres)?;
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(length) => {}
                _ = stop.cancelled() => {}
            }
            let _ = client.batch_execute("COMMIT").await;
        });
        Ok(())
    }

    /// Executions in progress now: waiting for a pool connection, or running.
    pub fn running(&self) -> u32 {
        self.in_progress.load(Ordering::Relaxed)
    }

    /// The database's clock, as the origin of the run's time.
    pub async fn now(&self) -> Result<std::time::SystemTime, LabError> {
        let row = self
            .admin
            .query_one("SELECT clock_timestamp()", &[])
            .await
            .map_err(LabError::postgres)?;
        Ok(row.get(0))
    }

    /// Every execution recorded, in seconds from `origin`.
    pub async fn executions(
        &self,
        origin: std::time::SystemTime,
    ) -> Result<Vec<ExecutionRow>, LabError> {
        let rows = self
            .admin
            .query(
                "SELECT message_id, unloaded_s, started_at, finished_at, failed_at, killed_at,
                        timed_out
                 FROM executions ORDER BY started_at, id",
                &[],
            )
            .await
            .map_err(LabError::postgres)?;
        let since =
            |t: std::time::SystemTime| t.duration_since(origin).map_or(0.0, |d| d.as_secs_f64());
        Ok(rows
            .iter()
            .map(|r| ExecutionRow {
                message_id: r.get(0),
                unloaded_s: r.get(1),
                started_s: since(r.get(2)),
                finished_s: r.get::<_, Option<std::time::SystemTime>>(3).map(since),
                failed_s: r.get::<_, Option<std::time::SystemTime>>(4).map(since),
                killed_s: r.get::<_, Option<std::time::SystemTime>>(5).map(since),
                timed_out: r.get(6),
            })
            .collect())
    }

    /// Ends every consumer transaction still running (at the end of a fleet's run), and the
    /// ledgers' sessions; the pool stays open for the next fleet (the mirage's redrive).
    pub async fn terminate_executions(&self) -> Result<(), LabError> {
        self.admin
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE $1 || '%'",
                &[&self.app],
            )
            .await
            .map_err(LabError::postgres)?;
        Ok(())
    }

    /// Drops the run's schema (its tables, functions and the idempotency store's table).
    pub async fn drop_schema(&self) -> Result<(), LabError> {
        self.pool.close();
        self.terminate_executions().await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.admin
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema))
            .await
            .map_err(LabError::postgres)
    }
}

/// A pool of the fleet's connections to the run's schema, named `app` so that the lab can
/// find their statements.
fn fleet_pool(config: &Config, app: &str, size: usize) -> Result<Pool, LabError> {
    let mut pooled = config.clone();
    pooled.application_name(app);
    let manager = Manager::from_config(
        pooled,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .build()
        .map_err(|e| LabError::Setup(format!("the downstream's pool: {e}")))
}

/// The database's URL with the run's schema as the connection's search path.
fn schema_url(url: &str, schema: &str) -> String {
    format!(
        "{url}{}options=-c%20search_path%3D{schema}",
        if url.contains('?') { "&" } else { "?" }
    )
}

/// Where a consumer process finds the run's downstream: the database, the run's schema,
/// and the application name the fleet's connections carry.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
pub struct Reach {
    pub postgres_url: String,
    pub schema: String,
    pub app: String,
}

impl Reach {
    /// A URL to the run's schema (for the idempotency store).
    pub fn url(&self) -> String {
        schema_url(&self.postgres_url, &self.schema)
    }
}

mod executor;
#[cfg(test)]
mod tests;

pub use executor::Executor;

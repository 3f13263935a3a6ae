//! The downstream: a real PostgreSQL database that every execution writes to. Its latency
//! grows with the transactions running at once (counted from `pg_stat_activity`, past the
//! scenario's capacity) and with row contention (copies of one message upsert the same row
//! and hold its lock for the last `contention` share of their work), and a trigger can make
//! it slow. Each run lives in a schema of its own, dropped at the end.

use std::time::Duration;

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
}

pub struct Downstream {
    admin: Client,
    config: Config,
    url: String,
    schema: String,
    /// The application name of the consumers' connections: what the load is counted by.
    app: String,
}

/// The tables and functions of one run. `work(unloaded)` sleeps in slices, each stretched by
/// the load factor the scenario's database model names, measured live: running transactions
/// past `capacity` slow every one of them by `load_slope` per capacity's worth, and a slow
/// query trigger multiplies it by `slow_factor`.
const SCHEMA_SQL: &str = r#"
CREATE TABLE settings (capacity int NOT NULL, load_slope float8 NOT NULL,
                       contention float8 NOT NULL, slow_factor float8 NOT NULL);
CREATE TABLE executions (id bigserial PRIMARY KEY, message_id text NOT NULL,
                         unloaded_s float8 NOT NULL,
                         started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                         finished_at timestamptz);
CREATE INDEX executions_by_message ON executions (message_id);
CREATE TABLE records (key text PRIMARY KEY, executions int NOT NULL);
CREATE FUNCTION work(unloaded float8, app text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  done float8 := 0; running int; s record; factor float8; slice float8;
BEGIN
  WHILE done < unloaded LOOP
    SELECT * INTO s FROM settings;
    running := 0;
    IF s.load_slope > 0 THEN
      PERFORM pg_stat_clear_snapshot();
      SELECT count(*) INTO running FROM pg_stat_activity
        WHERE application_name = app AND state = 'active';
    END IF;
    factor := (1 + s.load_slope * greatest(running - s.capacity, 0)::float8
                   / greatest(s.capacity, 1)) * s.slow_factor;
    slice := least(0.025, (unloaded - done) * factor);
    PERFORM pg_sleep(slice);
    done := done + slice / factor;
  END LOOP;
END $$;
CREATE FUNCTION execute(execution bigint, work_key text, unloaded float8, app text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE c float8;
BEGIN
  SELECT contention INTO c FROM settings;
  PERFORM work(unloaded * (1 - c), app);
  INSERT INTO records VALUES (work_key, 1)
    ON CONFLICT (key) DO UPDATE SET executions = records.executions + 1;
  PERFORM work(unloaded * c, app);
  UPDATE executions SET finished_at = clock_timestamp() WHERE id = execution;
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
                "INSERT INTO settings VALUES ($1, $2, $3, 1.0)",
                &[
                    &(db.capacity.max(1) as i32),
                    &db.load_slope,
                    &db.contention.clamp(0.0, 1.0),
                ],
            )
            .await
            .map_err(LabError::postgres)?;
        let mut config = base.clone();
        config.options(format!("-c search_path={schema}"));
        let url = format!(
            "{url}{}options=-c%20search_path%3D{schema}",
            if url.contains('?') { "&" } else { "?" }
        );
        Ok(Downstream {
            admin,
            config,
            url,
            schema,
            app,
        })
    }

    /// A URL to this run's schema (for the idempotency store).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A connection for one consumer's executions.
    pub async fn executor(&self) -> Result<Executor, LabError> {
        let mut config = self.config.clone();
        config.application_name(&self.app);
        let client = connect(&config).await?;
        Ok(Executor {
            client,
            app: self.app.clone(),
        })
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

    /// Transactions of the consumers running on the database now.
    pub async fn running(&self) -> Result<u32, LabError> {
        let row = self
            .admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'active'",
                &[&self.app],
            )
            .await
            .map_err(LabError::postgres)?;
        Ok(row.get::<_, i64>(0) as u32)
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
                "SELECT message_id, unloaded_s, started_at, finished_at FROM executions ORDER BY started_at, id",
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
            })
            .collect())
    }

    /// Ends every consumer transaction still running (at the end of a run).
    pub async fn terminate_executions(&self) -> Result<(), LabError> {
        self.admin
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
                &[&self.app],
            )
            .await
            .map_err(LabError::postgres)?;
        Ok(())
    }

    /// Drops the run's schema (its tables, functions and the idempotency store's table).
    pub async fn drop_schema(&self) -> Result<(), LabError> {
        self.terminate_executions().await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.admin
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema))
            .await
            .map_err(LabError::postgres)
    }
}

/// One consumer's connection to the downstream.
pub struct Executor {
    client: Client,
    app: String,
}

impl Executor {
    /// One execution of a message: a row in `executions` first (committed at once, so an
    /// execution cut short is still counted), then the work in one transaction that upserts
    /// the message's record row and marks the execution finished.
    pub async fn execute(&self, message_id: &str, unloaded_s: f64) -> Result<(), LabError> {
        let row = self
            .client
            .query_one(
                "INSERT INTO executions (message_id, unloaded_s) VALUES ($1, $2) RETURNING id",
                &[&message_id, &unloaded_s],
            )
            .await
            .map_err(LabError::postgres)?;
        let id: i64 = row.get(0);
        self.client
            .execute(
                "SELECT execute($1, $2, $3, $4)",
                &[&id, &message_id, &unloaded_s, &self.app],
            )
            .await
            .map_err(LabError::postgres)?;
        Ok(())
    }

    /// Cancels whatever this connection is running (a handler whose lease was lost stops).
    pub async fn cancel(&self) {
        let _ = self.client.cancel_token().cancel_query(NoTls).await;
    }
}

//! PostgreSQL: one row per key under a unique constraint; claims by `INSERT ... ON CONFLICT DO
//! NOTHING`, takeover of an expired claim by `UPDATE ... WHERE token = old`. Time is the
//! database's `now()`, so workers' clocks never disagree.

use std::time::Duration;

use std::sync::{Arc, Mutex as StdMutex};

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row};

use super::{Begin, Claim, IdempotencyError, IdempotencyStore};

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS leasehold_idempotency (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN ('in_progress', 'completed')),
    token TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
)";

/// One connection, opened again when it closes (the database restarted) or when a call on it
/// was abandoned (it may be stalled): the next call opens a fresh one.
pub struct PostgresStore {
    config: tokio_postgres::Config,
    current: StdMutex<Option<Arc<Client>>>,
    /// One opening at a time.
    opening: tokio::sync::Mutex<()>,
}

/// The error with its causes: tokio-postgres says only "db error" and keeps the server's
/// words (`database "x" does not exist`) in its source.
fn unavailable(e: tokio_postgres::Error) -> IdempotencyError {
    IdempotencyError::Unavailable(format!("postgres: {}", super::with_causes(&e)))
}

fn millis(d: Duration) -> f64 {
    d.as_millis() as f64
}

/// How long one statement may take before its connection is given up for a fresh one.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// Marks the connection for replacement unless the call it guards finished.
struct Abandoned<'a> {
    store: &'a PostgresStore,
    client: Arc<Client>,
    finished: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.store.discard(&self.client);
        }
    }
}

impl PostgresStore {
    pub async fn connect(url: &str) -> Result<PostgresStore, IdempotencyError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(unavailable)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(super::CONNECT_TIMEOUT);
        }
        // A connection given up for a fresh one may sit on a stalled socket: the kernel ends it
        // once its unacknowledged data has waited this long.
        config.tcp_user_timeout(Duration::from_secs(10));
        let store = PostgresStore {
            config,
            current: StdMutex::new(None),
            opening: tokio::sync::Mutex::new(()),
        };
        store.migrate().await?;
        Ok(store)
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Arc<Client>>> {
        // Only a pointer is kept under the lock: a panic cannot leave it half-changed.
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn open_client(&self) -> Option<Arc<Client>> {
        self.slot().clone().filter(|c| !c.is_closed())
    }

    fn discard(&self, client: &Arc<Client>) {
        let mut slot = self.slot();
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, client)) {
            *slot = None;
        }
    }

    /// The open connection, or a new one.
    async fn client(&self) -> Result<Arc<Client>, IdempotencyError> {
        if let Some(client) = self.open_client() {
            return Ok(client);
        }
        let _one = self.opening.lock().await;
        if let Some(client) = self.open_client() {
            return Ok(client);
        }
        // The whole opening is bounded, not only its TCP connect: a server that accepts and
        // then says nothing must not hold every call behind it.
        let opening = tokio::time::timeout(super::CONNECT_TIMEOUT, self.config.connect(NoTls));
        let (client, connection) = opening
            .await
            .map_err(|_| {
                IdempotencyError::Unavailable(format!(
                    "postgres: no answer within {} s",
                    super::CONNECT_TIMEOUT.as_secs()
                ))
            })?
            .map_err(unavailable)?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::warn!(%error, "postgres connection closed");
            }
        });
        let client = Arc::new(client);
        *self.slot() = Some(client.clone());
        Ok(client)
    }

    /// Runs one call on the connection, within `CALL_TIMEOUT`; a call that times out, or is
    /// dropped by its caller before it answers, has its connection replaced.
    async fn call<T, F, Fut>(&self, f: F) -> Result<T, IdempotencyError>
    where
        F: FnOnce(Arc<Client>) -> Fut,
        Fut: std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let client = self.client().await?;
        let mut guard = Abandoned {
            store: self,
            client: client.clone(),
            finished: false,
        };
        let result = tokio::time::timeout(CALL_TIMEOUT, f(client)).await;
        guard.finished = result.is_ok();
        match result {
            Ok(result) => result.map_err(unavailable),
            Err(_) => Err(IdempotencyError::Unavailable(format!(
                "postgres: no answer within {} s",
                CALL_TIMEOUT.as_secs()
            ))),
        }
    }

    async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, IdempotencyError> {
        self.call(|c| async move { c.execute(sql, params).await })
            .await
    }

    async fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, IdempotencyError> {
        self.call(|c| async move { c.query_opt(sql, params).await })
            .await
    }

    /// Creates the table if it is missing. Concurrent first starts may race on the
    /// catalog; a second attempt settles it.
    async fn migrate(&self) -> Result<(), IdempotencyError> {
        let create = || self.call(|c| async move { c.batch_execute(SCHEMA).await });
        if create().await.is_err() {
            create().await?;
        }
        Ok(())
    }

    /// Removes every record: for tests.
    pub async fn clear(&self, prefix: &str) -> Result<(), IdempotencyError> {
        let pattern = format!("{prefix}%");
        self.call(|c| async move {
            c.execute(
                "DELETE FROM leasehold_idempotency WHERE key LIKE $1",
                &[&pattern],
            )
            .await
        })
        .await?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl IdempotencyStore for PostgresStore {
    async fn begin(&self, key: &str, ttl: Duration) -> Result<Begin, IdempotencyError> {
        for _ in 0..3 {
            let claim = Claim::new();
            let inserted = self
                .execute(
                    "INSERT INTO leasehold_idempotency (key, state, token, expires_at)
                     VALUES ($1, 'in_progress', $2, now() + $3 * interval '1 millisecond')
                     ON CONFLICT (key) DO NOTHING",
                    &[&key, &claim.token, &millis(ttl)],
                )
                .await?;
            if inserted == 1 {
                return Ok(Begin::Started(claim));
            }
            let row = self.query_opt(
                    "SELECT state, token, expires_at < now() FROM leasehold_idempotency WHERE key = $1",
                    &[&key],
                ).await?;
            let Some(row) = row else { continue };
            let (state, old_token, expired): (String, String, bool) =
                (row.get(0), row.get(1), row.get(2));
            if !expired {
                return Ok(if state == "completed" {
                    Begin::Completed
                } else {
                    Begin::InProgressElsewhere
                });
            }
            // Expired (an abandoned claim, or a completion past its retention): take it over
            // only if nobody changed it since we looked.
            let taken = self.execute(
                    "UPDATE leasehold_idempotency
                     SET state = 'in_progress', token = $2, expires_at = now() + $3 * interval '1 millisecond', updated_at = now()
                     WHERE key = $1 AND token = $4 AND expires_at < now()",
                    &[&key, &claim.token, &millis(ttl), &old_token],
                ).await?;
            return Ok(if taken == 1 {
                Begin::Started(claim)
            } else {
                Begin::InProgressElsewhere
            });
        }
        Ok(Begin::InProgressElsewhere)
    }

    async fn extend(
        &self,
        key: &str,
        claim: &Claim,
        ttl: Duration,
    ) -> Result<bool, IdempotencyError> {
        let n = self.execute(
                "UPDATE leasehold_idempotency SET expires_at = now() + $3 * interval '1 millisecond', updated_at = now()
                 WHERE key = $1 AND token = $2 AND state = 'in_progress'",
                &[&key, &claim.token, &millis(ttl)],
            ).await?;
        Ok(n == 1)
    }

    async fn complete(
        &self,
        key: &str,
        claim: &Claim,
        retention: Duration,
    ) -> Result<bool, IdempotencyError> {
        let n = self.execute(
                "UPDATE leasehold_idempotency SET state = 'completed', expires_at = now() + $3 * interval '1 millisecond', updated_at = now()
                 WHERE key = $1 AND token = $2",
                &[&key, &claim.token, &millis(retention)],
            ).await?;
        Ok(n == 1)
    }

    async fn release(&self, key: &str, claim: &Claim) -> Result<(), IdempotencyError> {
        self.execute(
                "DELETE FROM leasehold_idempotency WHERE key = $1 AND token = $2 AND state = 'in_progress'",
                &[&key, &claim.token],
            ).await?;
        Ok(())
    }

    async fn is_completed(&self, key: &str) -> Result<bool, IdempotencyError> {
        let row = self.query_opt(
                "SELECT 1 FROM leasehold_idempotency WHERE key = $1 AND state = 'completed' AND expires_at > now()",
                &[&key],
            ).await?;
        Ok(row.is_some())
    }
}

//! PostgreSQL: one row per key under a unique constraint; claims by `INSERT ... ON CONFLICT DO
//! NOTHING`, takeover of an expired claim by `UPDATE ... WHERE token = old`. Time is the
//! database's `now()`, so workers' clocks never disagree.

use std::time::Duration;

use tokio_postgres::{Client, NoTls};

use super::{Begin, Claim, IdempotencyError, IdempotencyStore};

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS leasehold_idempotency (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN ('in_progress', 'completed')),
    token TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
)";

pub struct PostgresStore {
    client: Client,
}

/// The error with its causes: tokio-postgres says only "db error" and keeps the server's
/// words (`database "x" does not exist`) in its source.
fn unavailable(e: tokio_postgres::Error) -> IdempotencyError {
    IdempotencyError::Unavailable(format!("postgres: {}", super::with_causes(&e)))
}

fn millis(d: Duration) -> f64 {
    d.as_millis() as f64
}

impl PostgresStore {
    pub async fn connect(url: &str) -> Result<PostgresStore, IdempotencyError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(unavailable)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(super::CONNECT_TIMEOUT);
        }
        let (client, connection) = config.connect(NoTls).await.map_err(unavailable)?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::warn!(%error, "postgres connection closed");
            }
        });
        let store = PostgresStore { client };
        store.migrate().await?;
        Ok(store)
    }

    /// Creates the table if it is missing. Concurrent first starts may race on the
    /// catalog; a second attempt settles it.
    async fn migrate(&self) -> Result<(), IdempotencyError> {
        if self.client.batch_execute(SCHEMA).await.is_err() {
            self.client
                .batch_execute(SCHEMA)
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }

    /// Removes every record: for tests.
    pub async fn clear(&self, prefix: &str) -> Result<(), IdempotencyError> {
        self.client
            .execute(
                "DELETE FROM leasehold_idempotency WHERE key LIKE $1",
                &[&format!("{prefix}%")],
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl IdempotencyStore for PostgresStore {
    async fn begin(&self, key: &str, ttl: Duration) -> Result<Begin, IdempotencyError> {
        for _ in 0..3 {
            let claim = Claim::new();
            let inserted = self
                .client
                .execute(
                    "INSERT INTO leasehold_idempotency (key, state, token, expires_at)
                     VALUES ($1, 'in_progress', $2, now() + $3 * interval '1 millisecond')
                     ON CONFLICT (key) DO NOTHING",
                    &[&key, &claim.token, &millis(ttl)],
                )
                .await
                .map_err(unavailable)?;
            if inserted == 1 {
                return Ok(Begin::Started(claim));
            }
            let row = self
                .client
                .query_opt(
                    "SELECT state, token, expires_at < now() FROM leasehold_idempotency WHERE key = $1",
                    &[&key],
                )
                .await
                .map_err(unavailable)?;
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
            let taken = self
                .client
                .execute(
                    "UPDATE leasehold_idempotency
                     SET state = 'in_progress', token = $2, expires_at = now() + $3 * interval '1 millisecond', updated_at = now()
                     WHERE key = $1 AND token = $4 AND expires_at < now()",
                    &[&key, &claim.token, &millis(ttl), &old_token],
                )
                .await
                .map_err(unavailable)?;
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
        let n = self
            .client
            .execute(
                "UPDATE leasehold_idempotency SET expires_at = now() + $3 * interval '1 millisecond', updated_at = now()
                 WHERE key = $1 AND token = $2 AND state = 'in_progress'",
                &[&key, &claim.token, &millis(ttl)],
            )
            .await
            .map_err(unavailable)?;
        Ok(n == 1)
    }

    async fn complete(
        &self,
        key: &str,
        claim: &Claim,
        retention: Duration,
    ) -> Result<bool, IdempotencyError> {
        let n = self
            .client
            .execute(
                "UPDATE leasehold_idempotency SET state = 'completed', expires_at = now() + $3 * interval '1 millisecond', updated_at = now()
                 WHERE key = $1 AND token = $2 AND state = 'in_progress'",
                &[&key, &claim.token, &millis(retention)],
            )
            .await
            .map_err(unavailable)?;
        Ok(n == 1)
    }

    async fn release(&self, key: &str, claim: &Claim) -> Result<(), IdempotencyError> {
        self.client
            .execute(
                "DELETE FROM leasehold_idempotency WHERE key = $1 AND token = $2 AND state = 'in_progress'",
                &[&key, &claim.token],
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn is_completed(&self, key: &str) -> Result<bool, IdempotencyError> {
        let row = self
            .client
            .query_opt(
                "SELECT 1 FROM leasehold_idempotency WHERE key = $1 AND state = 'completed' AND expires_at > now()",
                &[&key],
            )
            .await
            .map_err(unavailable)?;
        Ok(row.is_some())
    }
}

//! The idempotency gate: a record per unit of work, claimed before the work runs and marked
//! completed after it, so a duplicate delivery of finished work is skipped and a duplicate of
//! work in progress elsewhere is put back instead of run twice.
//!
//! Claims expire with the lease (the worker renews them with every heartbeat); an expired
//! claim is taken over only by compare-and-set against its token, never by overwrite.

mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;

use std::time::Duration;

pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
#[cfg(feature = "redis")]
pub use redis::RedisStore;

#[derive(Debug, thiserror::Error)]
pub enum IdempotencyError {
    #[error("idempotency store unavailable: {0}")]
    Unavailable(String),
    #[error("unsupported idempotency store {0:?}: use postgres://..., redis://... or memory")]
    UnsupportedUrl(String),
    #[error(
        "this build has no {0} idempotency store: build leasehold-worker with the {0:?} feature"
    )]
    NotBuiltIn(&'static str),
}

/// Proof that this worker holds the claim on a key: its random token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub token: String,
}

impl Claim {
    pub fn new() -> Claim {
        Claim {
            token: format!("{:032x}", rand::random::<u128>()),
        }
    }
}

impl Default for Claim {
    fn default() -> Self {
        Claim::new()
    }
}

/// What `begin` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Begin {
    /// The work is ours to do.
    Started(Claim),
    /// The work was done already: skip it.
    Completed,
    /// Another worker is doing it now and its claim has not expired.
    InProgressElsewhere,
}

#[async_trait::async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Claims `key` for `ttl`, unless it is completed or claimed by someone else.
    async fn begin(&self, key: &str, ttl: Duration) -> Result<Begin, IdempotencyError>;
    /// Renews our claim; false if it is no longer ours.
    async fn extend(
        &self,
        key: &str,
        claim: &Claim,
        ttl: Duration,
    ) -> Result<bool, IdempotencyError>;
    /// Marks the work completed, remembered for `retention`: true when it is (again, for a
    /// retried call; or when our claim lapsed and nobody took the key), false when another
    /// worker holds the key.
    async fn complete(
        &self,
        key: &str,
        claim: &Claim,
        retention: Duration,
    ) -> Result<bool, IdempotencyError>;
    /// Gives the claim up (the work failed or was cancelled), so a retry can run.
    async fn release(&self, key: &str, claim: &Claim) -> Result<(), IdempotencyError>;
    /// Whether the work is recorded as completed.
    async fn is_completed(&self, key: &str) -> Result<bool, IdempotencyError>;
}

/// How long opening a store may take before it is reported unavailable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// An error and its sources, `outer: inner: innermost`, skipping repeats: one readable line,
/// where SDK and driver errors say little at the top ("service error", "db error").
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Opens a store from a URL: `postgres://...`, `redis://...`, or `memory`.
pub async fn connect(url: &str) -> Result<Box<dyn IdempotencyStore>, IdempotencyError> {
    if url == "memory" {
        Ok(Box::new(MemoryStore::default()))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        return Ok(Box::new(PostgresStore::connect(url).await?));
        #[cfg(not(feature = "postgres"))]
        return Err(IdempotencyError::NotBuiltIn("postgres"));
    } else if url.starts_with("redis://") || url.starts_with("rediss://") {
        #[cfg(feature = "redis")]
        return Ok(Box::new(RedisStore::connect(url).await?));
        #[cfg(not(feature = "redis"))]
        return Err(IdempotencyError::NotBuiltIn("redis"));
    } else {
        Err(IdempotencyError::UnsupportedUrl(url.to_string()))
    }
}

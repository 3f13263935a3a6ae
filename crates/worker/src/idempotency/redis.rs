//! Redis: a claim is `SET key in_progress:TOKEN NX PX ttl`; expiry hands an abandoned claim to
//! the next `SET NX`, and every change to a claim is a compare-and-set script on its token.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

use super::{Begin, Claim, IdempotencyError, IdempotencyStore};

const PREFIX: &str = "leasehold:idem:";

pub struct RedisStore {
    connection: ConnectionManager,
}

fn unavailable(e: redis::RedisError) -> IdempotencyError {
    IdempotencyError::Unavailable(format!("redis: {}", super::with_causes(&e)))
}

/// Sets the key to ARGV[2] with expiry ARGV[3] ms, only if it holds ARGV[1].
const SWAP: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0"#;

/// Marks the work completed (ARGV[2], expiry ARGV[3] ms) if the key holds our claim
/// (ARGV[1]), our completion already (a retried call), or nothing (our claim expired and
/// nobody took it): the work is done, whatever the key held.
const COMPLETE: &str = r#"
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] or held == ARGV[2] or held == false then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0"#;

/// Deletes the key only if it holds ARGV[1].
const DELETE_IF: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0"#;

impl RedisStore {
    pub async fn connect(url: &str) -> Result<RedisStore, IdempotencyError> {
        let client = redis::Client::open(url).map_err(unavailable)?;
        // A call that gets no answer in time fails (and the connection is opened again)
        // rather than waiting on a stalled connection.
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(super::CONNECT_TIMEOUT))
            .set_connection_timeout(Some(super::CONNECT_TIMEOUT));
        let connecting = ConnectionManager::new_with_config(client, config);
        let connection = tokio::time::timeout(super::CONNECT_TIMEOUT, connecting)
            .await
            .map_err(|_| {
                IdempotencyError::Unavailable(format!(
                    "redis: no answer within {} s",
                    super::CONNECT_TIMEOUT.as_secs()
                ))
            })?
            .map_err(unavailable)?;
        Ok(RedisStore { connection })
    }

    fn key(key: &str) -> String {
        format!("{PREFIX}{key}")
    }

    async fn swap(
        &self,
        script: &str,
        key: &str,
        from: &str,
        to: &str,
        ttl: Duration,
    ) -> Result<bool, IdempotencyError> {
        let mut c = self.connection.clone();
        let n: i64 = Script::new(script)
            .key(Self::key(key))
            .arg(from)
            .arg(to)
            .arg(ttl.as_millis().max(1) as u64)
            .invoke_async(&mut c)
            .await
            .map_err(unavailable)?;
        Ok(n == 1)
    }
}

#[async_trait::async_trait]
impl IdempotencyStore for RedisStore {
    async fn begin(&self, key: &str, ttl: Duration) -> Result<Begin, IdempotencyError> {
        let mut c = self.connection.clone();
        let claim = Claim::new();
        let set: Option<String> = redis::cmd("SET")
            .arg(Self::key(key))
            .arg(format!("in_progress:{}", claim.token))
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64)
            .query_async(&mut c)
            .await
            .map_err(unavailable)?;
        if set.is_some() {
            return Ok(Begin::Started(claim));
        }
        let current: Option<String> = redis::cmd("GET")
            .arg(Self::key(key))
            .query_async(&mut c)
            .await
            .map_err(unavailable)?;
        Ok(match current {
            Some(v) if v.starts_with("completed:") => Begin::Completed,
            Some(_) => Begin::InProgressElsewhere,
            // It expired between the two calls; the next delivery will claim it.
            None => Begin::InProgressElsewhere,
        })
    }

    async fn extend(
        &self,
        key: &str,
        claim: &Claim,
        ttl: Duration,
    ) -> Result<bool, IdempotencyError> {
        let value = format!("in_progress:{}", claim.token);
        self.swap(SWAP, key, &value, &value, ttl).await
    }

    async fn complete(
        &self,
        key: &str,
        claim: &Claim,
        retention: Duration,
    ) -> Result<bool, IdempotencyError> {
        self.swap(
            COMPLETE,
            key,
            &format!("in_progress:{}", claim.token),
            &format!("completed:{}", claim.token),
            retention,
        )
        .await
    }

    async fn release(&self, key: &str, claim: &Claim) -> Result<(), IdempotencyError> {
        let mut c = self.connection.clone();
        let _: i64 = Script::new(DELETE_IF)
            .key(Self::key(key))
            .arg(format!("in_progress:{}", claim.token))
            .invoke_async(&mut c)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn is_completed(&self, key: &str) -> Result<bool, IdempotencyError> {
        let mut c = self.connection.clone();
        let current: Option<String> = redis::cmd("GET")
            .arg(Self::key(key))
            .query_async(&mut c)
            .await
            .map_err(unavailable)?;
        Ok(current.is_some_and(|v| v.starts_with("completed:")))
    }
}

//! An in-process idempotency store: for tests and single-process workers.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Begin, Claim, IdempotencyError, IdempotencyStore};

#[derive(Clone, Debug)]
struct Record {
    completed: bool,
    token: String,
    expires: Instant,
}

#[derive(Default)]
pub struct MemoryStore {
    records: Mutex<HashMap<String, Record>>,
}

impl MemoryStore {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Record>, Instant) -> T) -> T {
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut records, Instant::now())
    }
}

#[async_trait::async_trait]
impl IdempotencyStore for MemoryStore {
    async fn begin(&self, key: &str, ttl: Duration) -> Result<Begin, IdempotencyError> {
        Ok(self.with(|records, now| match records.get(key) {
            Some(r) if r.expires > now && r.completed => Begin::Completed,
            Some(r) if r.expires > now => Begin::InProgressElsewhere,
            _ => {
                // Absent or expired: the lock makes this a compare-and-set.
                let claim = Claim::new();
                records.insert(
                    key.to_string(),
                    Record {
                        completed: false,
                        token: claim.token.clone(),
                        expires: now + ttl,
                    },
                );
                Begin::Started(claim)
            }
        }))
    }

    async fn extend(
        &self,
        key: &str,
        claim: &Claim,
        ttl: Duration,
    ) -> Result<bool, IdempotencyError> {
        Ok(self.with(|records, now| match records.get_mut(key) {
            Some(r) if !r.completed && r.token == claim.token => {
                r.expires = now + ttl;
                true
            }
            _ => false,
        }))
    }

    async fn complete(
        &self,
        key: &str,
        claim: &Claim,
        retention: Duration,
    ) -> Result<bool, IdempotencyError> {
        // Ours (claimed, or completed by a retried call), or nobody's: the work is done.
        Ok(self.with(|records, now| match records.get(key) {
            Some(r) if r.token != claim.token => false,
            _ => {
                let record = Record {
                    completed: true,
                    token: claim.token.clone(),
                    expires: now + retention,
                };
                records.insert(key.to_string(), record);
                true
            }
        }))
    }

    async fn release(&self, key: &str, claim: &Claim) -> Result<(), IdempotencyError> {
        self.with(|records, _| {
            if records
                .get(key)
                .is_some_and(|r| !r.completed && r.token == claim.token)
            {
                records.remove(key);
            }
        });
        Ok(())
    }

    async fn is_completed(&self, key: &str) -> Result<bool, IdempotencyError> {
        Ok(self.with(|records, now| {
            records
                .get(key)
                .is_some_and(|r| r.completed && r.expires > now)
        }))
    }
}

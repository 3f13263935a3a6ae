//! A store that fails on purpose: the Nth write or sync errors, to prove that a failed write
//! is an error to the client and never an acknowledgement.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::batch::{RangeDelete, WriteBatch};
use crate::{Store, StoreError, Visitor};

pub struct FaultyStore<S> {
    inner: S,
    writes: u64,
    syncs: u64,
    /// Fail the write with this (1-based) number, and every one after it.
    pub fail_write: Option<u64>,
    /// Fail the sync with this (1-based) number, and every one after it.
    pub fail_sync: Option<u64>,
    /// Find the file system full at the write with this number, and that one only.
    pub full_at_write: Option<u64>,
    /// Find the file system full at every write while this is set (by the test, any time).
    pub full_while: Option<Arc<AtomicBool>>,
}

impl<S: Store> FaultyStore<S> {
    pub fn new(inner: S) -> Self {
        FaultyStore {
            inner,
            writes: 0,
            syncs: 0,
            fail_write: None,
            fail_sync: None,
            full_at_write: None,
            full_while: None,
        }
    }
}

impl<S: Store> Store for FaultyStore<S> {
    fn scan_range(
        &mut self,
        start: &[u8],
        end: &[u8],
        visit: &mut Visitor,
    ) -> Result<(), StoreError> {
        self.inner.scan_range(start, end, visit)
    }

    fn write(&mut self, batches: &[WriteBatch], sync: bool) -> Result<(), StoreError> {
        self.writes += 1;
        if self.fail_write.is_some_and(|n| self.writes >= n) {
            return Err(StoreError::Injected(format!("write {} fails", self.writes)));
        }
        let full_now = self
            .full_while
            .as_ref()
            .is_some_and(|f| f.load(Ordering::SeqCst));
        if full_now || self.full_at_write == Some(self.writes) {
            return Err(StoreError::Full {
                path: self.describe(),
                reason: format!("write {} finds no space (injected)", self.writes),
            });
        }
        if sync {
            self.syncs += 1;
            if self.fail_sync.is_some_and(|n| self.syncs >= n) {
                // The data may be written but is not known durable: still a failure.
                return Err(StoreError::Injected(format!("sync {} fails", self.syncs)));
            }
        }
        self.inner.write(batches, sync)
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        self.syncs += 1;
        if self.fail_sync.is_some_and(|n| self.syncs >= n) {
            return Err(StoreError::Injected(format!("sync {} fails", self.syncs)));
        }
        self.inner.sync()
    }

    fn delete_some(&mut self, range: &RangeDelete, limit: usize) -> Result<usize, StoreError> {
        self.writes += 1;
        if self.fail_write.is_some_and(|n| self.writes >= n) {
            return Err(StoreError::Injected(format!("write {} fails", self.writes)));
        }
        self.inner.delete_some(range, limit)
    }

    fn describe(&self) -> String {
        format!("faulty {}", self.inner.describe())
    }

    fn reader(&self) -> Result<Arc<dyn crate::Reader>, StoreError> {
        self.inner.reader()
    }

    fn seal_with(&mut self, keyring: Arc<crate::keyring::Keyring>) {
        self.inner.seal_with(keyring);
    }
}

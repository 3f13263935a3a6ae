//! A store in a map: the seam's reference backend, for tests.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::batch::{Op, RangeDelete, WriteBatch};
use crate::codec::is_content;
use crate::keyring::Keyring;
use crate::sealing::rebound;
use crate::{Reader, Space, Store, StoreError, Visitor};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// Shared with its readers, as a file is.
#[derive(Default, Debug, Clone)]
pub struct MemoryStore {
    data: Arc<RwLock<Map>>,
    pub syncs: u64,
    rebind: Option<Arc<Keyring>>,
    /// The free space its readers report (`with_free_space`); None: no file system.
    free: Option<Arc<std::sync::atomic::AtomicU64>>,
}

impl MemoryStore {
    /// A store holding `records`, as a file that held them would on opening.
    pub fn from_records(records: Map) -> MemoryStore {
        MemoryStore {
            data: Arc::new(RwLock::new(records)),
            free: None,
            ..MemoryStore::default()
        }
    }

    /// A store whose readers report a file system of 1 GiB with `free` bytes free (which the
    /// caller may change): for tests of what a server does near its disk reserve.
    pub fn with_free_space(mut self, free: Arc<std::sync::atomic::AtomicU64>) -> MemoryStore {
        self.free = Some(free);
        self
    }

    /// Removes the oldest `n` message contents, leaving their messages' records: what a
    /// damaged file holds, for tests.
    pub fn lose_contents(&self, n: usize) {
        let mut data = self.write_lock();
        let lost: Vec<Vec<u8>> = data
            .keys()
            .filter(|k| is_content(k))
            .take(n)
            .cloned()
            .collect();
        for key in lost {
            data.remove(&key);
        }
    }

    /// Every record it holds now.
    pub fn records(&self) -> Map {
        self.read().clone()
    }

    fn read(&self) -> RwLockReadGuard<'_, Map> {
        self.data.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_lock(&self) -> RwLockWriteGuard<'_, Map> {
        self.data.write().unwrap_or_else(|p| p.into_inner())
    }
}

impl Reader for MemoryStore {
    fn get(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        let data = self.read();
        Ok(keys.iter().map(|k| data.get(k).cloned()).collect())
    }

    fn space(&self) -> Option<Space> {
        self.free.as_ref().map(|free| Space {
            file_system_size: 1 << 30,
            file_system_free: free.load(std::sync::atomic::Ordering::SeqCst),
            reusable_in_file: 0,
            write_ahead_log: crate::WRITE_AHEAD_LOG_ROOM,
        })
    }
}

/// Applies a batch's puts and deletes; range deletes are `delete_some`'s.
fn apply(data: &mut Map, batch: &WriteBatch, rebind: Option<&Keyring>) {
    for op in &batch.ops {
        match op {
            Op::Put(k, v) => {
                data.insert(k.clone(), v.clone());
            }
            Op::PutSealed(k, v) => {
                let value = rebind.map_or_else(|| v.clone(), |keyring| keyring.seal(k, v));
                data.insert(k.clone(), value);
            }
            Op::Delete(k) => {
                data.remove(k);
            }
            Op::DeleteRange(_) => {}
            Op::Copy { from, to } => copy(data, from, to, rebind),
        }
    }
}

/// `Op::Copy` on a map: a missing source copies nothing, as SQLite's does; a sealed value is
/// sealed again to its new key when the store rebinds copies.
pub(crate) fn copy(data: &mut Map, from: &[u8], to: &[u8], rebind: Option<&Keyring>) {
    if let Some(value) = data.get(from).cloned() {
        let value = match rebind {
            Some(keyring) => rebound(keyring, from, to, value),
            None => value,
        };
        data.insert(to.to_vec(), value);
    }
}

impl Store for MemoryStore {
    fn scan_range(
        &mut self,
        start: &[u8],
        end: &[u8],
        visit: &mut Visitor,
    ) -> Result<(), StoreError> {
        let data = self.read();
        let range = data.range::<[u8], _>((
            std::ops::Bound::Included(start),
            std::ops::Bound::Excluded(end),
        ));
        for (k, v) in range.filter(|(k, _)| !is_content(k)) {
            visit(k, v).map_err(|reason| StoreError::Corrupt {
                path: self.describe(),
                reason,
            })?;
        }
        Ok(())
    }

    fn write(&mut self, batches: &[WriteBatch], sync: bool) -> Result<(), StoreError> {
        let mut data = self.write_lock();
        for batch in batches {
            apply(&mut data, batch, self.rebind.as_deref());
        }
        drop(data);
        if sync {
            self.syncs += 1;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        self.syncs += 1;
        Ok(())
    }

    fn delete_some(&mut self, range: &RangeDelete, limit: usize) -> Result<usize, StoreError> {
        let mut data = self.write_lock();
        let doomed: Vec<Vec<u8>> = data
            .range(range.start.clone()..range.end.clone())
            .map(|(k, _)| k)
            .filter(|k| range.covers(k))
            .take(limit)
            .cloned()
            .collect();
        for k in &doomed {
            data.remove(k);
        }
        Ok(doomed.len())
    }

    fn describe(&self) -> String {
        "(memory)".into()
    }

    fn reader(&self) -> Result<Arc<dyn Reader>, StoreError> {
        Ok(Arc::new(self.clone()))
    }

    fn seal_with(&mut self, keyring: Arc<Keyring>) {
        self.rebind = Some(keyring);
    }
}

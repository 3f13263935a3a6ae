//! A store in a map: the seam's reference backend, for tests.

use std::collections::BTreeMap;

use crate::batch::{Op, RangeDelete, WriteBatch};
use crate::{Store, StoreError, Visitor};

#[derive(Default, Debug, Clone)]
pub struct MemoryStore {
    pub data: BTreeMap<Vec<u8>, Vec<u8>>,
    pub syncs: u64,
}

/// Applies a batch's puts and deletes; range deletes are `delete_some`'s.
fn apply(data: &mut BTreeMap<Vec<u8>, Vec<u8>>, batch: &WriteBatch) {
    for op in &batch.ops {
        match op {
            Op::Put(k, v) => {
                data.insert(k.clone(), v.clone());
            }
            Op::Delete(k) => {
                data.remove(k);
            }
            Op::DeleteRange(_) => {}
        }
    }
}

impl Store for MemoryStore {
    fn scan(&mut self, visit: &mut Visitor) -> Result<(), StoreError> {
        for (k, v) in &self.data {
            visit(k, v).map_err(|reason| StoreError::Corrupt {
                path: self.describe(),
                reason,
            })?;
        }
        Ok(())
    }

    fn write(&mut self, batches: &[WriteBatch], sync: bool) -> Result<(), StoreError> {
        for batch in batches {
            apply(&mut self.data, batch);
        }
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
        let doomed: Vec<Vec<u8>> = self
            .data
            .range(range.start.clone()..range.end.clone())
            .map(|(k, _)| k)
            .filter(|k| range.covers(k))
            .take(limit)
            .cloned()
            .collect();
        for k in &doomed {
            self.data.remove(k);
        }
        Ok(doomed.len())
    }

    fn describe(&self) -> String {
        "(memory)".into()
    }
}

//! A store in a map: the seam's reference backend, for tests.

use std::collections::BTreeMap;

use crate::batch::{Op, WriteBatch};
use crate::{Store, StoreError, Visitor};

#[derive(Default, Debug, Clone)]
pub struct MemoryStore {
    pub data: BTreeMap<Vec<u8>, Vec<u8>>,
    pub syncs: u64,
}

pub(crate) fn apply(data: &mut BTreeMap<Vec<u8>, Vec<u8>>, batch: &WriteBatch) {
    for op in &batch.ops {
        match op {
            Op::Put(k, v) => {
                data.insert(k.clone(), v.clone());
            }
            Op::Delete(k) => {
                data.remove(k);
            }
            Op::DeleteRange(start, end) => {
                let doomed: Vec<Vec<u8>> = data
                    .range(start.clone()..end.clone())
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in doomed {
                    data.remove(&k);
                }
            }
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

    fn describe(&self) -> String {
        "(memory)".into()
    }
}

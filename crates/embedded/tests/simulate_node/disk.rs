//! The simulated disk under the node: what was written, what was synced, and the fault the
//! run planned for one write (a crash, a failed write, a full file system).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use leasehold_embedded::simulation;
use leasehold_store::{MemoryStore, RangeDelete, Reader, Store, StoreError, Visitor, WriteBatch};

/// What happens at the planned write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The node crashes: the write lands (unsynced) or not, and no thread takes another step.
    Crash { lands: bool },
    /// The write fails: the disk's state is unknown, the node serves reads only.
    Fail,
    /// The file system is full: the write changes nothing.
    Full,
}

struct Disk {
    /// What a reader, and a restart after a crash of the process, finds.
    written: MemoryStore,
    /// What a restart after a power cut finds.
    synced: BTreeMap<Vec<u8>, Vec<u8>>,
    writes: u64,
    fault: Option<(u64, Fault)>,
}

/// The disk, shared by the node's store, its readers, and the simulation across restarts.
#[derive(Clone)]
pub struct SimDisk(Arc<Mutex<Disk>>);

impl SimDisk {
    pub fn new() -> SimDisk {
        SimDisk(Arc::new(Mutex::new(Disk {
            written: MemoryStore::default(),
            synced: BTreeMap::new(),
            writes: 0,
            fault: None,
        })))
    }

    fn disk(&self) -> MutexGuard<'_, Disk> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Plans `fault` for the `at`th write from now (None: no fault).
    pub fn plan(&self, fault: Option<(u64, Fault)>) {
        let mut disk = self.disk();
        let writes = disk.writes;
        disk.fault = fault.map(|(at, fault)| (writes + at, fault));
    }

    /// Writes so far, all runs together.
    pub fn writes(&self) -> u64 {
        self.disk().writes
    }

    /// The power went: what was not synced is gone.
    pub fn power_cut(&self) {
        let mut disk = self.disk();
        disk.written = MemoryStore::from_records(disk.synced.clone());
    }

    /// A store over this disk, for a node to open.
    pub fn store(&self) -> SimStore {
        SimStore(self.clone())
    }
}

pub struct SimStore(SimDisk);

impl SimStore {
    /// Counts a write, and does what was planned for it: Err for a failure, halts the node
    /// for a crash (after applying `write` if the crash lets it land).
    fn fault(&self, write: impl FnOnce(&mut Disk)) -> Result<Option<()>, StoreError> {
        let mut disk = self.0.disk();
        disk.writes += 1;
        let planned = disk.fault.filter(|(at, _)| *at == disk.writes);
        match planned.map(|(_, fault)| fault) {
            None => Ok(None),
            Some(Fault::Crash { lands }) => {
                if lands {
                    write(&mut disk);
                }
                drop(disk);
                simulation::halt()
            }
            Some(Fault::Fail) => Err(StoreError::Write {
                path: "(simulated disk)".into(),
                reason: format!("write {} fails (planned)", disk.writes),
            }),
            Some(Fault::Full) => Err(StoreError::Full {
                path: "(simulated disk)".into(),
                reason: format!("write {} finds no space (planned)", disk.writes),
            }),
        }
    }
}

fn apply(disk: &mut Disk, batches: &[WriteBatch]) {
    disk.written
        .write(batches, false)
        .expect("a map takes any write");
}

impl Store for SimStore {
    fn scan_range(
        &mut self,
        start: &[u8],
        end: &[u8],
        visit: &mut Visitor,
    ) -> Result<(), StoreError> {
        let mut written = self.0.disk().written.clone();
        written.scan_range(start, end, visit)
    }

    fn write(&mut self, batches: &[WriteBatch], sync: bool) -> Result<(), StoreError> {
        self.fault(|disk| apply(disk, batches))?;
        let mut disk = self.0.disk();
        apply(&mut disk, batches);
        if sync {
            disk.synced = disk.written.records();
        }
        Ok(())
    }

    fn delete_some(&mut self, range: &RangeDelete, limit: usize) -> Result<usize, StoreError> {
        self.fault(|disk| {
            let _ = disk.written.delete_some(range, limit);
        })?;
        let mut written = self.0.disk().written.clone();
        written.delete_some(range, limit)
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        let mut disk = self.0.disk();
        disk.synced = disk.written.records();
        Ok(())
    }

    fn describe(&self) -> String {
        "(simulated disk)".into()
    }

    fn reader(&self) -> Result<Arc<dyn Reader>, StoreError> {
        Ok(Arc::new(self.0.disk().written.clone()))
    }

    fn seal_with(&mut self, keyring: Arc<leasehold_store::keyring::Keyring>) {
        self.0.disk().written.seal_with(keyring);
    }
}

//! The embedded backend: the pure engine behind a read-write lock, made durable by the SQLite
//! committer (group commit) when it has a store. A command on one queue's messages shares
//! the engine and takes only the lock of one stripe of that queue at a time
//! (`Embedded::on_queue`), so queues, and a standard queue's stripes, never wait for one
//! another; what spans queues holds the engine alone (`Embedded::apply`). A change
//! is acknowledged only once the store holds it; a failed write puts the engine back to what
//! the store holds and leaves the backend serving reads only.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

// The engine's lock and the failure's: std's, or under the `simulation` feature shuttle's, so
// the node simulation (`tests/simulate_node/`) schedules every lock the node takes.
#[cfg(feature = "simulation")]
use shuttle::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(not(feature = "simulation"))]
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use leasehold_backend::{BackendError, Result, Waiters};
use leasehold_engine::{
    Change, Clock, Engine, EngineConfig, EngineError, LeaseMode, Naming, NewMessage, ReceiptSealer,
    Sink,
};
use leasehold_store::keyring::Keyring;
use leasehold_store::{codec, restore, sealing, Committer, Durability, Store, StoreError};

mod commands;
mod contents;
mod disk_reserve;
#[cfg(feature = "simulation")]
pub mod simulation;

use contents::Contents;
use disk_reserve::{DiskReserve, STORED_MESSAGE_OVERHEAD};

/// How a durable backend keeps its store.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub durability: Durability,
    /// Bytes of recent message contents kept in memory (0: none), so that a short queue's
    /// receives rarely read the disk.
    pub body_cache_bytes: u64,
    /// Below this much space left for the store's writes, sends are refused (throttled) while
    /// receives, deletes and visibility changes go on, so consumers can drain the queue.
    /// None: `DEFAULT_DISK_RESERVE_BYTES`, or a tenth of a smaller file system.
    pub disk_reserve_bytes: Option<u64>,
    /// The key file whose keys seal message contents at rest, where their queue asks for it
    /// (SqsManagedSseEnabled, the default, or a KmsMasterKeyId); created on the store's first
    /// start. None: contents are stored in the clear, and no queue may ask otherwise.
    pub encryption_key_file: Option<PathBuf>,
}

/// `--body-cache-mb`'s default.
pub const DEFAULT_BODY_CACHE_BYTES: u64 = 64 << 20;
/// `--disk-reserve-mb`'s default, on a file system of 640 MiB or more.
pub const DEFAULT_DISK_RESERVE_BYTES: u64 = 64 << 20;

impl From<Durability> for StoreOptions {
    fn from(durability: Durability) -> Self {
        StoreOptions {
            durability,
            body_cache_bytes: DEFAULT_BODY_CACHE_BYTES,
            disk_reserve_bytes: None,
            encryption_key_file: None,
        }
    }
}

/// What an embedded engine is built from, and rebuilt from after a failed write.
#[derive(Clone)]
pub struct EngineSetup {
    pub clock: Arc<dyn Clock>,
    pub config: EngineConfig,
}

impl EngineSetup {
    /// A server's engine: a random receipt key (a durable store keeps its own over it) and
    /// seed, drops deferred off the request's path, and a standard queue split into a stripe
    /// per core, so that as many threads can work on one hot queue side by side.
    pub fn serving(clock: Arc<dyn Clock>, lease_mode: LeaseMode, naming: Naming) -> EngineSetup {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        EngineSetup {
            clock,
            config: EngineConfig {
                lease_mode,
                region: naming.region,
                account_id: naming.account_id,
                receipt_key: rand::random(),
                seed: rand::random(),
                track_changes: false,
                defer_drops: true,
                stripes: cores.min(leasehold_engine::MAX_STRIPES),
                ..EngineConfig::default()
            },
        }
    }
}

pub struct Embedded {
    setup: EngineSetup,
    naming: Naming,
    /// The engine's (its key is the store's, the same after a failed write puts the engine
    /// back): receipt handles are opened with it before their queue is locked.
    sealer: ReceiptSealer,
    /// Commands that span queues hold it alone; reads and commands on one queue's messages
    /// share it (`read`, `on_queue`), the latter holding that queue's own lock as well.
    engine: RwLock<Engine>,
    waiters: Waiters,
    committer: Option<Committer>,
    /// Where message contents are read back from: durable backends only.
    contents: Option<Contents>,
    disk: DiskReserve,
    /// `HEALTHY`, `RECOVERING` or `READ_ONLY`: after a failed write the engine is put back
    /// to what the store holds, and the backend then answers reads only.
    health: AtomicU8,
    /// Why the store failed, once it has.
    failure: Mutex<Option<String>>,
}

const HEALTHY: u8 = 0;
const RECOVERING: u8 = 1;
const READ_ONLY: u8 = 2;

/// Whether a command only reads: a read is still served after the store failed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Change,
}

/// Queues reported between two yields to other tasks: a scrape of 100,000 queues lets them
/// run a hundred times (each report holds only its own queue's lock, and that briefly).
const REPORTS_PER_YIELD: usize = 1_000;

impl Embedded {
    /// A backend that keeps everything in memory.
    pub fn in_memory(mut setup: EngineSetup) -> Embedded {
        setup.config.track_changes = false;
        let engine = Engine::new(setup.clock.clone(), setup.config.clone());
        Embedded::assemble(setup, engine, None)
    }

    /// A durable backend: restores what `store` kept, then commits every change to it. The
    /// engine keeps no message content; the store does, and receives read it back.
    pub fn durable(
        mut setup: EngineSetup,
        mut store: Box<dyn Store>,
        options: impl Into<StoreOptions>,
    ) -> Result<Embedded, StoreError> {
        let options = options.into();
        setup.config.track_changes = true;
        let keyring = open_keys(&mut *store, options.encryption_key_file.as_deref())?;
        setup.config.encrypts_at_rest = keyring.is_some();
        // With what a background delete had not finished when the server last stopped.
        let (mut engine, leftovers) =
            restore(&mut *store, setup.clock.clone(), setup.config.clone())?;
        let contents = Contents::new(store.reader()?, options.body_cache_bytes, keyring.clone());
        let committer = Committer::start(store, options.durability);
        // Contents a file written before they had records of their own kept inside message
        // records: rewritten apart, once.
        engine.hand_over_contents();
        let changes = engine.take_changes();
        if !changes.is_empty() {
            // A new engine's receipt key must be on disk before any handle is issued with it.
            committer.submit_detached(codec::encode(&changes));
        }
        if !leftovers.is_empty() {
            committer.submit_detached(leftovers);
        }
        let mut backend = Embedded::assemble(setup, engine, Some(committer));
        let space = contents.reader().space();
        backend.disk.reserve = options.disk_reserve_bytes.unwrap_or_else(|| {
            let tenth = space.map_or(u64::MAX, |s| s.file_system_size / 10);
            DEFAULT_DISK_RESERVE_BYTES.min(tenth)
        });
        if let Some(space) = space {
            backend.disk.measured(space.available());
        }
        backend.contents = Some(contents);
        Ok(backend)
    }

    fn assemble(setup: EngineSetup, engine: Engine, committer: Option<Committer>) -> Embedded {
        Embedded {
            naming: engine.naming().clone(),
            sealer: engine.receipt_sealer().clone(),
            setup,
            engine: RwLock::new(engine),
            waiters: Waiters::default(),
            committer,
            contents: None,
            disk: DiskReserve::unmeasured(),
            health: AtomicU8::new(HEALTHY),
            failure: Mutex::new(None),
        }
    }

    /// Refuses a send of `messages` while the disk is below its reserve, or would be with it.
    fn admit_send<'m>(&self, messages: impl IntoIterator<Item = &'m NewMessage>) -> Result<()> {
        let bytes = messages
            .into_iter()
            .map(|m| m.size() as u64 + STORED_MESSAGE_OVERHEAD)
            .sum();
        match self.disk.take(bytes) {
            Some(why) => Err(BackendError::Throttled(why)),
            None => Ok(()),
        }
    }

    /// Measures the space the store's writes may still use (a few system calls and one read,
    /// off the async threads).
    async fn measure_disk(&self) {
        let Some(contents) = &self.contents else {
            return;
        };
        let reader = contents.reader();
        if let Ok(Some(space)) = off_async(move || reader.space()).await {
            self.disk.measured(space.available());
        }
    }

    /// The engine, locked. A panic while it was locked may have left the engine half
    /// changed, so a poisoned lock is not taken over: the process ends, and a restart
    /// restores every acknowledged write from the store (an in-memory server loses its
    /// queues, as it would on any crash).
    fn engine(&self) -> RwLockWriteGuard<'_, Engine> {
        self.engine.write().unwrap_or_else(|_| poisoned())
    }

    /// The engine, held for reading alongside other readers.
    fn engine_shared(&self) -> RwLockReadGuard<'_, Engine> {
        self.engine.read().unwrap_or_else(|_| poisoned())
    }

    /// Runs a command that only reads under a shared hold of the engine's lock, so reads
    /// from many connections do not wait for each other; served while the store is
    /// read-only too, not while the engine is being put back to what the store holds.
    fn read<T>(
        &self,
        query: impl FnOnce(&Engine) -> std::result::Result<T, EngineError>,
    ) -> Result<T> {
        let engine = self.engine_shared();
        if self.health.load(Ordering::SeqCst) == RECOVERING {
            return Err(BackendError::Unavailable(self.failure_reason()));
        }
        Ok(query(&engine)?)
    }

    /// Whether a command of this `access` may run now. A change is refused once the store
    /// has failed, since nothing more can be made durable; a read only while the engine is
    /// being put back to what the store holds. Asked under a hold of the engine's lock, so no
    /// command changes the engine after it was put back.
    fn admit(&self, access: Access) -> Result<()> {
        admission(self.health.load(Ordering::SeqCst), access).map_err(|unavailable| {
            match unavailable {
                true => BackendError::Unavailable(self.failure_reason()),
                false => BackendError::Failed(self.failure_reason()),
            }
        })
    }

    /// The engine, locked alone for `access` (see `admit`), its move tasks held while the
    /// disk is below its reserve (they copy bodies: on a tight disk their write would fail,
    /// be put back, and be tried again without end).
    fn lock(&self, access: Access) -> Result<RwLockWriteGuard<'_, Engine>> {
        let mut engine = self.engine();
        self.admit(access)?;
        // A store keeps the bodies: moves copy them, within the room above the reserve.
        let room = self.contents.is_some().then(|| self.disk.room_for_moves());
        engine.limit_moves(room);
        Ok(engine)
    }

    /// Runs `command` on the engine under its lock, hands what it changed to the committer
    /// in the order it was made, and answers once the store holds it.
    async fn apply<T>(
        &self,
        access: Access,
        command: impl FnOnce(&mut Engine) -> std::result::Result<T, EngineError>,
    ) -> Result<T> {
        let (value, commit, removed, woken) = {
            let mut engine = self.lock(access)?;
            let value = command(&mut engine);
            let commit = self.submit(engine.take_changes());
            let woken = engine.take_woken();
            (value, commit, engine.take_removed(), woken)
        };
        for queue in woken {
            // Messages a move task brought (starting, cancelling or listing runs the tasks).
            self.waiters.wake(&queue);
        }
        if !removed.is_empty() {
            // A purged or deleted queue of a million messages takes long to free: not here.
            drop_in_background(removed);
        }
        self.committed(commit).await?;
        Ok(value?)
    }

    /// Runs `command` on the engine shared with commands on other queues and stripes: it
    /// locks what it needs (`Engine::on_stripe`, `receive_striped`, `on_handles`: a stripe at
    /// a time, with a dead-letter queue's beside it when a receive moves messages there) and
    /// hands each stripe's changes to the sink before that stripe's lock goes, which passes
    /// them to the committer, so the store gets each stripe's changes in the order they were
    /// made. Answers once the store holds them all.
    async fn on_queue<T>(
        &self,
        command: impl FnOnce(&Engine, Sink) -> std::result::Result<T, EngineError>,
    ) -> Result<T> {
        let (value, commits) = {
            let engine = self.engine_shared();
            self.admit(Access::Change)?;
            let panicking = AbortOnPanic;
            let mut commits = Vec::new();
            let value = command(&engine, &mut |changes| commits.extend(self.submit(changes)));
            drop(panicking);
            (value, commits)
        };
        for commit in commits {
            self.committed(Some(commit)).await?;
        }
        Ok(value?)
    }

    /// Like `on_queue`, where nobody waits for what it changed to be written: looks that
    /// tick the queue (attributes, lease reports; a tick may end leases and drop expired
    /// messages) and the empty-receive counter. What it changed goes to the committer under
    /// each stripe's lock all the same.
    fn on_queue_detached<T>(
        &self,
        access: Access,
        command: impl FnOnce(&Engine, Sink) -> T,
    ) -> Result<T> {
        let engine = self.engine_shared();
        self.admit(access)?;
        let panicking = AbortOnPanic;
        let value = command(&engine, &mut |changes| self.write_detached(&changes));
        drop(panicking);
        Ok(value)
    }

    /// Waits for a commit; a failed one puts the engine back to what the store holds.
    async fn committed(
        &self,
        commit: Option<impl std::future::Future<Output = std::result::Result<(), StoreError>>>,
    ) -> Result<()> {
        let Some(commit) = commit else {
            return Ok(());
        };
        let Err(error) = commit.await else {
            return Ok(());
        };
        self.store_failed(&error).await;
        Err(match error {
            // Nothing was written, and the engine is back to what is: try again.
            StoreError::Full { .. } => BackendError::Unavailable(error.to_string()),
            _ => BackendError::Failed(error.to_string()),
        })
    }

    /// Hands what a command changed to the committer, to be awaited before the command is
    /// acknowledged. None when there is nothing to wait for.
    fn submit(
        &self,
        changes: Vec<Change>,
    ) -> Option<impl std::future::Future<Output = std::result::Result<(), StoreError>>> {
        let committer = self.committer.as_ref()?;
        if let Some(contents) = &self.contents {
            contents.note(&changes);
        }
        // A read-only backend's engine is frozen; nothing is written.
        (self.is_healthy() && !changes.is_empty())
            .then(|| committer.submit(codec::encode(&changes)))
    }

    /// Like `submit`, for background work nobody waits on.
    fn write_detached(&self, changes: &[Change]) {
        if let Some(committer) = &self.committer {
            if !changes.is_empty() && self.is_healthy() {
                if let Some(contents) = &self.contents {
                    contents.note(changes);
                }
                committer.submit_detached(codec::encode(changes));
            }
        }
    }

    fn is_healthy(&self) -> bool {
        self.health.load(Ordering::SeqCst) == HEALTHY
    }

    fn failure_reason(&self) -> String {
        let failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        let failure = failure.as_deref().unwrap_or("unknown");
        match self.health.load(Ordering::SeqCst) {
            RECOVERING => format!("the server is going back to what its store holds after a failed write: {failure}"),
            _ => format!("the store failed and takes no more writes until the server is restarted: {failure}"),
        }
    }

    /// A write failed: memory now holds changes the disk does not, some of them refused to
    /// their clients. Stops every change, puts the engine back to exactly what the store
    /// holds, and from then on serves reads only, so nothing refused is ever visible. A write
    /// the full file system refused changed nothing on disk: once the engine is back to what
    /// the store holds, the backend takes writes again (the disk reserve keeps sends off).
    async fn store_failed(&self, error: &StoreError) {
        let transient = matches!(error, StoreError::Full { .. });
        {
            let _engine = self.engine();
            if self
                .health
                .compare_exchange(HEALTHY, RECOVERING, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                return;
            }
            *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(error.to_string());
        }
        if transient {
            tracing::warn!(%error, "a write found the file system full: going back to what the store holds, then on");
        } else {
            tracing::error!(%error, "a write failed: going back to what the store holds, read-only until a restart");
        }
        let Some(committer) = &self.committer else {
            return;
        };
        let EngineSetup { clock, config } = self.setup.clone();
        match committer.rebuild(clock, config).await {
            Ok(mut restored) => {
                if !transient {
                    // Serving reads only: memory must stay what the store holds, so no look
                    // brings a queue up to the present (a tick ends leases, drops messages).
                    restored.freeze();
                }
                let old = std::mem::replace(&mut *self.engine(), restored);
                if let Some(contents) = &self.contents {
                    // It holds the refused writes' contents, whose keys will be used again.
                    contents.forget_all();
                }
                self.health.store(
                    if transient { HEALTHY } else { READ_ONLY },
                    Ordering::SeqCst,
                );
                drop(old);
            }
            // Nothing can be trusted: stay refusing everything.
            Err(error) => tracing::error!(%error, "the store cannot be read back either"),
        }
        self.waiters.wake_all();
    }

    /// Every queue's invariants (`Engine::check_invariants`), under a shared hold: what a
    /// test asks between commands.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.engine_shared().check_invariants()
    }

    /// Wakes one waiting receive on `queue` per entry that succeeded.
    fn wake_per_success<T, E>(&self, queue: &str, results: &[std::result::Result<T, E>]) {
        self.waiters
            .wake_some(queue, results.iter().filter(|r| r.is_ok()).count());
    }
}

/// The keys that seal `store`'s contents, from `key_file` (`sealing::keyring_for`), the store
/// told to seal with them; the record of a new sealing key written, synced, before anything
/// is sealed with it (a start that cannot write it stops here, in one line). Without a key
/// file, a store that holds sealed contents is refused: served without its keys they could
/// only be dropped as damaged.
fn open_keys(
    store: &mut dyn Store,
    key_file: Option<&std::path::Path>,
) -> std::result::Result<Option<Arc<Keyring>>, StoreError> {
    let Some(path) = key_file else {
        if !sealing::recorded(store)?.is_empty() {
            return Err(StoreError::Keys(format!(
                "{} holds encrypted messages, and no encryption key file was given",
                store.describe()
            )));
        }
        return Ok(None);
    };
    let (keyring, record) =
        sealing::keyring_for(store, path).map_err(|e| StoreError::Keys(e.to_string()))?;
    if let Some(record) = record {
        store.write(&[record], true)?;
    }
    store.seal_with(keyring.clone());
    Ok(Some(keyring))
}

/// Whether a command of `access` may run in `health`: Err(true) while the engine is being put
/// back to what the store holds (503: it passes, and after a full disk writes resume), Err(false)
/// once the store has failed for good (500).
fn admission(health: u8, access: Access) -> std::result::Result<(), bool> {
    match (health, access) {
        (HEALTHY, _) | (READ_ONLY, Access::Read) => Ok(()),
        (RECOVERING, _) => Err(true),
        _ => Err(false),
    }
}

/// Held while a queue's lock is: a panic then may have left the queue half changed, so the
/// process ends at once. A queue's lock is not poisoned by a panic, but the engine never lets
/// it go while its thread panics (`QueueGuard`), so no other thread sees the torn queue
/// before the abort, whatever order the locals drop in.
struct AbortOnPanic;

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            #[cfg(feature = "simulation")]
            simulation::abort_while_panicking();
            #[cfg(not(feature = "simulation"))]
            poisoned();
        }
    }
}

/// A panic while the engine was locked may have left it half changed: the process ends.
fn poisoned() -> ! {
    tracing::error!("a request panicked while changing the engine; stopping so that a restart restores a consistent state from the store");
    #[cfg(feature = "simulation")]
    simulation::abort();
    #[cfg(not(feature = "simulation"))]
    std::process::abort()
}

/// Drops `value` on tokio's blocking pool (under the simulation, in place).
fn drop_in_background<T: Send + 'static>(value: T) {
    #[cfg(feature = "simulation")]
    drop(value);
    #[cfg(not(feature = "simulation"))]
    tokio::task::spawn_blocking(move || drop(value));
}

/// Runs blocking `work` off the async threads (tokio's blocking pool); under the simulation,
/// which has no runtime, in place.
async fn off_async<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> std::result::Result<T, String> {
    #[cfg(feature = "simulation")]
    return Ok(work());
    #[cfg(not(feature = "simulation"))]
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 46, defect 8: while the engine is put back to what the store holds, a change is
    /// answered 503 (retry), as the full disk that caused it is, not 500; once the store has
    /// failed for good, 500.
    #[test]
    fn changes_during_a_recovery_are_unavailable_and_after_a_failure_failed() {
        assert_eq!(admission(HEALTHY, Access::Change), Ok(()));
        assert_eq!(admission(RECOVERING, Access::Change), Err(true));
        assert_eq!(admission(RECOVERING, Access::Read), Err(true));
        assert_eq!(admission(READ_ONLY, Access::Read), Ok(()));
        assert_eq!(admission(READ_ONLY, Access::Change), Err(false));
    }
}

//! Shared server state: the engine behind its lock, the clock, the long-poll waiters, and
//! the committer that makes every change durable before it is acknowledged.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use leasehold_engine::{Engine, EngineConfig, LeaseMode};
use leasehold_store::{codec, load, Committer, Durability, Store, StoreError};
use tokio::sync::Notify;

use crate::clock::WallClock;

/// How the server is set up; the binary fills it from the command line.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub lease_mode: LeaseMode,
    pub region: String,
    pub account_id: String,
    /// Enables `POST /_leasehold/clock/advance`.
    pub time_travel: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            lease_mode: LeaseMode::Aws,
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
            time_travel: false,
        }
    }
}

pub struct AppState {
    pub config: ServerConfig,
    pub clock: Arc<WallClock>,
    engine: Mutex<Engine>,
    waiters: Mutex<HashMap<String, Arc<Notify>>>,
    committer: Option<Committer>,
}

impl AppState {
    /// A server that keeps everything in memory.
    pub fn new(config: ServerConfig) -> Arc<AppState> {
        let clock = Arc::new(WallClock::default());
        let engine = Engine::new(clock.clone(), engine_config(&config, false));
        Arc::new(AppState::assemble(config, clock, engine, None))
    }

    /// A durable server: restores what `store` kept, then commits every change to it.
    pub fn durable(
        config: ServerConfig,
        mut store: Box<dyn Store>,
        durability: Durability,
    ) -> Result<Arc<AppState>, StoreError> {
        let snapshot = load(&mut *store)?;
        let fresh = snapshot.engine.is_none();
        let clock = Arc::new(WallClock::default());
        let mut engine = Engine::restore(clock.clone(), engine_config(&config, true), snapshot);
        let committer = Committer::start(store, durability);
        if fresh {
            // The new receipt key must be on disk before any handle is issued with it.
            let first = codec::encode(&engine.take_changes());
            committer.submit_detached(first);
        }
        Ok(Arc::new(AppState::assemble(
            config,
            clock,
            engine,
            Some(committer),
        )))
    }

    fn assemble(
        config: ServerConfig,
        clock: Arc<WallClock>,
        engine: Engine,
        committer: Option<Committer>,
    ) -> AppState {
        AppState {
            config,
            clock,
            engine: Mutex::new(engine),
            waiters: Mutex::new(HashMap::new()),
            committer,
        }
    }

    /// The engine, locked. A panic while locked must not take every later request down with
    /// it, so a poisoned lock is taken over rather than propagated.
    pub fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Hands what the last command changed to the committer. Call it with the engine still
    /// locked, so changes reach the disk in the order they were made; await the answer
    /// before acknowledging. None when there is nothing to wait for.
    pub fn persist(
        &self,
        engine: &mut Engine,
    ) -> Option<impl Future<Output = Result<(), StoreError>>> {
        let committer = self.committer.as_ref()?;
        let changes = engine.take_changes();
        (!changes.is_empty()).then(|| committer.submit(codec::encode(&changes)))
    }

    /// Like `persist`, for background work nobody waits on.
    pub fn persist_detached(&self, engine: &mut Engine) {
        if let Some(committer) = &self.committer {
            let changes = engine.take_changes();
            if !changes.is_empty() {
                committer.submit_detached(codec::encode(&changes));
            }
        }
    }

    /// The notifier that long polls on `queue` wait on.
    pub fn waiter(&self, queue: &str) -> Arc<Notify> {
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        waiters.entry(queue.to_string()).or_default().clone()
    }

    /// Wakes the long polls on `queue` to look again.
    pub fn wake(&self, queue: &str) {
        let waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(notify) = waiters.get(queue) {
            notify.notify_waiters();
        }
    }

    /// Wakes every long poll: the clock jumped.
    pub fn wake_all(&self) {
        let waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        waiters.values().for_each(|n| n.notify_waiters());
    }
}

/// A request id in AWS's shape: unique per process and per start, cheap (no system call).
pub fn request_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(rand::random);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let id = (u128::from(prefix) << 64) | u128::from(n);
    uuid::Uuid::from_u128(id).hyphenated().to_string()
}

fn engine_config(config: &ServerConfig, track_changes: bool) -> EngineConfig {
    EngineConfig {
        lease_mode: config.lease_mode,
        region: config.region.clone(),
        account_id: config.account_id.clone(),
        receipt_key: rand::random(),
        seed: rand::random(),
        track_changes,
    }
}

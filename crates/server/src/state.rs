//! Shared server state: the engine behind its lock, the clock, the long-poll waiters, and
//! the committer that makes every change durable before it is acknowledged.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use leasehold_engine::{Change, Engine, EngineConfig, LeaseMode};
use leasehold_store::{codec, load, Committer, Durability, Store, StoreError};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::clock::WallClock;
use leasehold_protocol::ProtocolError;

/// How the server is set up; the binary fills it from the command line.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub lease_mode: LeaseMode,
    pub region: String,
    pub account_id: String,
    /// Enables `POST /_leasehold/clock/advance`.
    pub time_travel: bool,
    pub limits: Limits,
}

/// What bounds the server's work, so no client can stall the others.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Requests doing work at once (parsing, the engine, the commit) before new ones are
    /// shed with `ServiceUnavailable`.
    pub requests_in_progress: usize,
    /// Receives waiting for messages at once, before new ones are shed with
    /// `RequestThrottled`; they hold a connection each but no work slot.
    pub waiting_receives: usize,
    /// A request's head must arrive within this time, and an idle keep-alive connection is
    /// closed after it.
    pub idle_timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            requests_in_progress: 10_000,
            waiting_receives: 10_000,
            idle_timeout: std::time::Duration::from_secs(20),
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            lease_mode: LeaseMode::Aws,
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
            time_travel: false,
            limits: Limits::default(),
        }
    }
}

pub struct AppState {
    pub config: ServerConfig,
    pub clock: Arc<WallClock>,
    engine: Mutex<Engine>,
    waiters: Mutex<HashMap<String, Arc<Notify>>>,
    committer: Option<Committer>,
    in_progress: Arc<Semaphore>,
    waiting: Arc<Semaphore>,
    shutting_down: AtomicBool,
    /// `HEALTHY`, `RECOVERING` or `READ_ONLY`: after a failed write the engine is put back
    /// to what the store holds, and the server then answers reads only.
    health: AtomicU8,
    /// Why the store failed, once it has.
    failure: Mutex<Option<String>>,
    /// The last `/metrics` answer and when it was built (`leases::metrics`).
    pub(crate) last_scrape:
        tokio::sync::Mutex<Option<(std::time::Instant, crate::leases::Format, axum::body::Bytes)>>,
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
        // What a background delete had not finished when the server last stopped.
        let leftovers = codec::leftovers(&snapshot);
        let clock = Arc::new(WallClock::default());
        let mut engine = Engine::restore(clock.clone(), engine_config(&config, true), snapshot);
        let committer = Committer::start(store, durability);
        if fresh {
            // The new receipt key must be on disk before any handle is issued with it.
            let first = codec::encode(&engine.take_changes());
            committer.submit_detached(first);
        }
        if !leftovers.is_empty() {
            committer.submit_detached(leftovers);
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
            in_progress: Arc::new(Semaphore::new(config.limits.requests_in_progress)),
            waiting: Arc::new(Semaphore::new(config.limits.waiting_receives)),
            config,
            clock,
            engine: Mutex::new(engine),
            waiters: Mutex::new(HashMap::new()),
            committer,
            shutting_down: AtomicBool::new(false),
            health: AtomicU8::new(HEALTHY),
            failure: Mutex::new(None),
            last_scrape: tokio::sync::Mutex::new(None),
        }
    }

    /// A slot for a request's work, or None when too many are in progress.
    pub fn request_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.in_progress.clone().try_acquire_owned().ok()
    }

    /// A slot for a receive to wait in, or None when too many are waiting.
    pub fn waiting_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.waiting.clone().try_acquire_owned().ok()
    }

    /// From now on waiting receives return at once, empty; every waiting one is woken.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        self.wake_all();
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// The engine, locked. A panic while it was locked may have left the engine half
    /// changed, so a poisoned lock is not taken over: the process ends, and a restart
    /// restores every acknowledged write from the store (an in-memory server loses its
    /// queues, as it would on any crash).
    pub fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|_| {
            tracing::error!("a request panicked while changing the engine; stopping so that a restart restores a consistent state from the store");
            std::process::abort()
        })
    }

    /// The engine, locked, for a command that changes it; refused once the store has failed,
    /// since nothing more can be made durable. Checked under the lock, so no command
    /// changes the engine after it was put back to what the store holds.
    pub fn engine_to_change(&self) -> Result<MutexGuard<'_, Engine>, ProtocolError> {
        let engine = self.engine();
        match self.health.load(Ordering::SeqCst) {
            HEALTHY => Ok(engine),
            _ => Err(ProtocolError::Internal(self.failure_reason())),
        }
    }

    /// The engine, locked, for a command that only reads it: refused only while it is being
    /// put back to what the store holds.
    pub fn engine_to_read(&self) -> Result<MutexGuard<'_, Engine>, ProtocolError> {
        let engine = self.engine();
        match self.health.load(Ordering::SeqCst) {
            RECOVERING => Err(ProtocolError::ServiceUnavailable(self.failure_reason())),
            _ => Ok(engine),
        }
    }

    fn failure_reason(&self) -> String {
        let failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        format!(
            "the store failed and takes no more writes until the server is restarted: {}",
            failure.as_deref().unwrap_or("unknown")
        )
    }

    /// A write failed: memory now holds changes the disk does not, some of them refused to
    /// their clients. Stops every change, puts the engine back to exactly what the store
    /// holds, and from then on serves reads only, so nothing refused is ever visible.
    pub async fn store_failed(&self, error: &StoreError) {
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
        tracing::error!(%error, "a write failed: going back to what the store holds, read-only until a restart");
        let Some(committer) = &self.committer else {
            return;
        };
        match committer.load().await {
            Ok(snapshot) => {
                let restored = Engine::restore(
                    self.clock.clone(),
                    engine_config(&self.config, true),
                    snapshot,
                );
                let old = std::mem::replace(&mut *self.engine(), restored);
                self.health.store(READ_ONLY, Ordering::SeqCst);
                drop(old);
            }
            // Nothing can be trusted: stay refusing everything.
            Err(error) => tracing::error!(%error, "the store cannot be read back either"),
        }
        self.wake_all();
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
        // A read-only server's reads may still tick (retention); nothing is written.
        (self.is_healthy() && !changes.is_empty())
            .then(|| committer.submit(codec::encode(&changes)))
    }

    /// Like `persist`, for background work nobody waits on.
    pub fn persist_detached(&self, engine: &mut Engine) {
        self.write_detached(&engine.take_changes());
    }

    /// Hands every queue's measurements not yet written to the store: at shutdown, so the
    /// lease histograms a restart reads back miss nothing of the last second.
    pub fn flush_metrics(&self) {
        let mut engine = self.engine();
        // Still under the lock, so no newer record of the same queue is written before it.
        self.write_detached(&engine.take_all_metrics());
    }

    fn write_detached(&self, changes: &[Change]) {
        if let Some(committer) = &self.committer {
            if !changes.is_empty() && self.is_healthy() {
                committer.submit_detached(codec::encode(changes));
            }
        }
    }

    fn is_healthy(&self) -> bool {
        self.health.load(Ordering::SeqCst) == HEALTHY
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

    /// Wakes up to `count` long polls on `queue`, one per message that became receivable:
    /// a send to a queue with 2,000 waiters wakes one of them, not all.
    pub fn wake_some(&self, queue: &str, count: usize) {
        if count == 0 {
            return;
        }
        let waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(notify) = waiters.get(queue) {
            (0..count).for_each(|_| notify.notify_one());
        }
    }

    /// Wakes every long poll: the clock jumped.
    pub fn wake_all(&self) {
        let waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        waiters.values().for_each(|n| n.notify_waiters());
    }
}

const HEALTHY: u8 = 0;
const RECOVERING: u8 = 1;
const READ_ONLY: u8 = 2;

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
        defer_drops: true,
    }
}

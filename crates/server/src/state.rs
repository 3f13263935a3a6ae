//! Shared server state: the engine behind its lock, the clock, and the long-poll waiters.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use leasehold_engine::{Engine, EngineConfig, LeaseMode};
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
}

impl AppState {
    pub fn new(config: ServerConfig) -> Arc<AppState> {
        let clock = Arc::new(WallClock::default());
        let engine_config = EngineConfig {
            lease_mode: config.lease_mode,
            region: config.region.clone(),
            account_id: config.account_id.clone(),
            receipt_key: rand_key(),
            seed: rand::random(),
        };
        let engine = Engine::new(clock.clone(), engine_config);
        Arc::new(AppState {
            config,
            clock,
            engine: Mutex::new(engine),
            waiters: Mutex::new(HashMap::new()),
        })
    }

    /// The engine, locked. A panic while locked must not take every later request down with
    /// it, so a poisoned lock is taken over rather than propagated.
    pub fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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

fn rand_key() -> [u8; 16] {
    rand::random()
}

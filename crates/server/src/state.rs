//! Shared server state: the backend that holds the queues, the clock, and the limits on
//! requests at work and receives waiting.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use leasehold_backend::Backend;
use leasehold_engine::LeaseMode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::clock::WallClock;
use crate::pressure::MemoryBudget;

/// How the server is set up; the binary fills it from the command line.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub lease_mode: LeaseMode,
    pub region: String,
    pub account_id: String,
    /// Enables `POST /_leasehold/clock/advance`.
    pub time_travel: bool,
    pub limits: Limits,
    /// Checks SigV4 signatures and scopes queues by account; None: an open server, every
    /// request the own account's.
    pub auth: Option<crate::auth::Auth>,
    /// What queue URLs start with, when the server sits behind a proxy or in a container
    /// (`https://sqs.example.com`); None: the scheme and `Host` each request arrived with.
    pub public_url: Option<String>,
    /// Whether the listener speaks TLS, so queue URLs say https.
    pub tls: bool,
    /// The memory to keep under (`--memory-limit`); None: the cgroup's limit, else a share of
    /// the machine's RAM (`pressure::memory_limit`).
    pub memory_limit: Option<u64>,
    /// The backend's quota of queues per account (`--max-queues-per-account`), given to
    /// whichever backend the binary builds, as `lease_mode` is.
    pub max_queues_per_account: usize,
    /// The most messages one queue holds in flight (`--max-in-flight-per-queue`), for
    /// whichever backend the binary builds.
    pub max_in_flight_per_queue: usize,
    /// Names, besides loopback ones and IP addresses, a request's `Host` may give where the
    /// server checks it (`hosts.rs`): `--allowed-host`, and the host of `--public-url`.
    pub allowed_hosts: crate::hosts::AllowedHosts,
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
            auth: None,
            public_url: None,
            tls: false,
            max_queues_per_account: leasehold_engine::MAX_QUEUES_PER_ACCOUNT,
            max_in_flight_per_queue: leasehold_engine::MAX_IN_FLIGHT_PER_QUEUE,
            memory_limit: None,
            allowed_hosts: crate::hosts::AllowedHosts::default(),
        }
    }
}

pub struct AppState {
    pub config: ServerConfig,
    pub clock: Arc<WallClock>,
    /// Where the queues are: every SQS request is applied on it.
    pub backend: Arc<dyn Backend>,
    in_progress: Arc<Semaphore>,
    waiting: Arc<Semaphore>,
    /// Messages receives may take and render at once (`pressure::messages_at_once`).
    receiving: Arc<Semaphore>,
    shutting_down: AtomicBool,
    /// Resident memory against the limit: near it, sends are refused.
    pub memory: MemoryBudget,
    /// What metrics scrapes keep (`metrics`): the last answer, for scrapers that waited for
    /// it, and what the queues counted, so the totals never fall.
    pub(crate) scrapes: tokio::sync::Mutex<crate::metrics::Scrapes>,
}

impl AppState {
    /// A server on `backend`, which the binary chose and built (the embedded engine, or
    /// PostgreSQL). `clock` is the one time travel moves: the embedded engine's rules read
    /// it; a backend with a clock of its own is told of each jump (`Backend::clock_advanced`).
    pub fn new(
        config: ServerConfig,
        clock: Arc<WallClock>,
        backend: Arc<dyn Backend>,
    ) -> Arc<AppState> {
        Arc::new(AppState::assemble(config, clock, backend))
    }

    fn assemble(
        config: ServerConfig,
        clock: Arc<WallClock>,
        backend: Arc<dyn Backend>,
    ) -> AppState {
        let (limit, source) = crate::pressure::memory_limit(config.memory_limit);
        tracing::info!(limit_mb = limit >> 20, ?source, "memory limit");
        let memory = MemoryBudget::new(limit);
        memory.sample();
        let receiving = crate::pressure::messages_at_once(limit);
        AppState {
            memory,
            in_progress: Arc::new(Semaphore::new(config.limits.requests_in_progress)),
            waiting: Arc::new(Semaphore::new(config.limits.waiting_receives)),
            receiving: Arc::new(Semaphore::new(receiving.min(Semaphore::MAX_PERMITS))),
            config,
            clock,
            backend,
            shutting_down: AtomicBool::new(false),
            scrapes: tokio::sync::Mutex::default(),
        }
    }

    /// What queue URLs start with for a request to `host`: the public URL when one is set,
    /// else the scheme the server speaks and the host the client addressed.
    pub fn origin(&self, host: &str) -> String {
        match (&self.config.public_url, self.config.tls) {
            (Some(public), _) => public.clone(),
            (None, true) => format!("https://{host}"),
            (None, false) => format!("http://{host}"),
        }
    }

    /// A slot for a request's work, or None when too many are in progress.
    pub fn request_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.in_progress.clone().try_acquire_owned().ok()
    }

    /// A turn to take and render up to `messages` messages, waited for (a receive is never
    /// refused for memory: it drains the backlog), held until its answer is rendered.
    pub async fn receiving_turn(&self, messages: u32) -> OwnedSemaphorePermit {
        self.receiving
            .clone()
            .acquire_many_owned(messages.clamp(1, 10))
            .await
            .expect("the receiving semaphore is never closed")
    }

    /// A slot for a receive to wait in, or None when too many are waiting.
    pub fn waiting_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.waiting.clone().try_acquire_owned().ok()
    }

    /// From now on waiting receives return at once, empty; every waiting one is woken.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        self.backend.wake_all();
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Why new messages are refused now (memory near its limit, the disk below its reserve),
    /// if they are; counts the refusal.
    pub fn refusing_sends(&self) -> Option<String> {
        self.memory
            .refusal()
            .or_else(|| self.backend.refusing_sends())
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

//! The PostgreSQL backend: the queues live in one PostgreSQL database
//! that any number of stateless Leasehold servers share, so PostgreSQL's replication and
//! failover are the queues' too.
//!
//! Built on the engine: a queue's metadata is the engine's own `QueueRecord` (in the store's
//! codec), and commands on it run the engine's own rules on a transient engine loaded with
//! just the queues they touch (`queues.rs`). Messages are rows (`messages.rs`): a send is an
//! insert, a receive claims with `FOR UPDATE SKIP LOCKED`, so two servers never hand one
//! message to two receivers under live leases. Receipt handles are sealed with a key kept in
//! the database, so any server opens any handle, and every instant comes from the database's
//! clock (`leasehold_now()`), which a test can freeze and time travel can move.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod backend;
mod dead_letters;
mod deliveries;
mod encryption;
mod fifo;
mod group;
mod handles;
mod leases;
mod messages;
mod moves;
mod notify;
mod queues;
mod recent_deletes;
mod schema;
mod sweep;
mod tx;
mod vacuum;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, QueueMode, RecyclingMethod, Runtime};
use leasehold_backend::{BackendError, Waiters};
use leasehold_engine::{LeaseMode, Naming, ReceiptSealer};
use leasehold_store::keyring::Keyring;
use thiserror::Error;
use tokio_postgres::NoTls;

pub use schema::SCHEMA_VERSION;

/// Why a server cannot start on the database: one line, said at start.
#[derive(Debug, Error)]
pub enum StartError {
    #[error("the PostgreSQL URL is not valid: {0}")]
    Url(String),
    #[error("cannot connect to PostgreSQL at {0}")]
    Connect(String),
    #[error("cannot prepare the database: {0}")]
    Schema(String),
    #[error("{0}")]
    Keys(String),
}

/// How the backend uses the database.
#[derive(Clone, Debug)]
pub struct Options {
    /// Connections held at most.
    pub pool_size: usize,
    /// How long a command waits for a connection, or for one to be made, before it is
    /// refused with ServiceUnavailable.
    pub connect_timeout: Duration,
    /// The schema to work in: tests give each run its own.
    pub schema: Option<String>,
    /// What a handle whose lease is over may still do (the engine's `LeaseMode`).
    pub lease_mode: LeaseMode,
    /// CreateQueue refuses a new queue once its account holds this many.
    pub max_queues_per_account: usize,
    /// How many transactions of grouped requests (standard queues' sends, receives and
    /// deletes) a server commits at once; requests that arrive meanwhile wait for the next.
    /// 1: the fewest, largest groups, and no two of a server's claims contending for a
    /// queue's oldest messages. On the full cycle (32 clients, one queue, `scripts/
    /// bench-postgres 8 32`, 2 cores) one server moved 22,800 messages/s with 1, 20,400 with
    /// 2, 18,000 with 4, 15,100 with 8; two servers 20,700 with 1, 18,000 with 2, 14,200
    /// with 4. Servers add their own: each is one more transaction at a time.
    pub group_commits: usize,
    /// The key file whose keys encrypt the contents of the queues that ask for it
    /// (`encryption.rs`), the same on every server of the cluster; created when absent and
    /// the database holds nothing encrypted. None: stored in the clear, and SSE-SQS refused.
    pub encryption_key_file: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            pool_size: 32,
            connect_timeout: Duration::from_secs(5),
            schema: None,
            lease_mode: LeaseMode::default(),
            max_queues_per_account: leasehold_engine::MAX_QUEUES_PER_ACCOUNT,
            group_commits: 1,
            encryption_key_file: None,
        }
    }
}

/// A server's handle on the database: its state, shared with the tasks that commit its
/// grouped requests (`group.rs`).
pub struct Postgres {
    core: Arc<Core>,
    grouper: group::Grouper,
}

impl std::ops::Deref for Postgres {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

/// What a server knows of the database: its pool, the cluster's receipt key, its waiting
/// receives and its measurements. Every command is a method of it.
pub struct Core {
    pool: Pool,
    naming: Naming,
    receipt_key: [u8; 16],
    sealer: ReceiptSealer,
    /// The keys that seal contents at rest; None: this server stores them in the clear.
    keyring: Option<Arc<Keyring>>,
    lease_mode: LeaseMode,
    max_queues_per_account: usize,
    waiters: Arc<Waiters>,
    /// This server's id in its notifications, so it skips its own.
    server_id: u64,
    sweep_clock: sweep::SweepClock,
    tasks_clock: sweep::SweepClock,
    measurements: leases::Measurements,
    vacuum_clock: vacuum::VacuumClock,
    /// Deletes of messages another transaction held, finished after their group in
    /// transactions of their own, at most a quarter of the pool at once.
    busy_deletes: tokio::sync::Semaphore,
    _listener: notify::Listener,
}

impl Postgres {
    /// Connects, brings the schema up to date (refusing one newer than this build knows) and
    /// reads the cluster's receipt key. Every failure is a `StartError` naming its cause.
    pub async fn connect(
        url: &str,
        naming: Naming,
        options: Options,
    ) -> Result<Postgres, StartError> {
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e: tokio_postgres::Error| StartError::Url(e.to_string()))?;
        config.connect_timeout(options.connect_timeout);
        keep_alive(&mut config);
        let at = describe(&config);
        if let Some(schema) = &options.schema {
            config.options(format!("-c search_path={schema}"));
        }
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            // The connection used last, first: a group's transaction then finds its
            // backend awake, where the one idle longest costs a wake-up per statement (a
            // begin took 0.9 ms of a group's 5 on a busy machine, taken in turn).
            .queue_mode(QueueMode::Lifo)
            .wait_timeout(Some(options.connect_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| StartError::Connect(format!("{at}: {e}")))?;
        let mut client = pool
            .get()
            .await
            .map_err(|e| StartError::Connect(format!("{at}: {}", cause(&e))))?;
        let key = schema::prepare(&mut client).await?;
        let keyring =
            encryption::open_keys(&client, options.encryption_key_file.as_deref()).await?;
        drop(client);
        let waiters = Arc::new(Waiters::default());
        let server_id = rand::random();
        let listener = notify::Listener::start(config, server_id, waiters.clone())
            .await
            .map_err(|why| StartError::Connect(format!("{at}: {why}")))?;
        let core = Arc::new(Core {
            pool,
            naming,
            receipt_key: key,
            sealer: ReceiptSealer::new(key),
            keyring,
            lease_mode: options.lease_mode,
            max_queues_per_account: options.max_queues_per_account,
            waiters,
            server_id,
            sweep_clock: sweep::SweepClock::default(),
            tasks_clock: sweep::SweepClock::default(),
            measurements: leases::Measurements::default(),
            vacuum_clock: vacuum::VacuumClock::default(),
            busy_deletes: tokio::sync::Semaphore::new((options.pool_size / 4).max(1)),
            _listener: listener,
        });
        Ok(Postgres {
            grouper: group::Grouper::new(core.clone(), options.group_commits),
            core,
        })
    }
}

impl Core {
    async fn client(&self) -> Result<deadpool_postgres::Object, BackendError> {
        self.pool.get().await.map_err(|e| unavailable(&e))
    }

    /// A transaction (`tx.rs`) on a connection of the pool.
    async fn begin(&self) -> Result<tx::Tx, BackendError> {
        tx::Tx::begin(self.client().await?).await
    }

    /// Moves every server's clock `by_ms` forward (time travel); answers the new instant.
    pub async fn advance_clock(&self, by_ms: u64) -> Result<u64, BackendError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "UPDATE leasehold_cluster SET clock_offset_ms = clock_offset_ms + $1
                 RETURNING leasehold_now()",
                &[&to_i64(by_ms)],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(to_u64(row.get(0)))
    }

    /// Freezes the cluster's clock at `ms` (None: the database's clock again), for tests
    /// that drive time by hand.
    pub async fn freeze_clock(&self, ms: Option<u64>) -> Result<(), BackendError> {
        let client = self.client().await?;
        let ms = ms.map(to_i64);
        client
            .execute("UPDATE leasehold_cluster SET clock_frozen_ms = $1", &[&ms])
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(())
    }
}

/// A statement prepared once per connection and kept: a command then costs one round trip
/// per statement, not two.
async fn cached(
    tx: &deadpool_postgres::ClientWrapper,
    sql: &str,
) -> Result<tokio_postgres::Statement, BackendError> {
    tx.prepare_cached(sql).await.map_err(|e| unavailable(&e))
}

/// Probes for a peer that vanished without a reset (a dropped NAT entry, a dead host) within
/// about a minute rather than tokio-postgres's two hours: the pool hands out the connection
/// used last, so one made in a burst may sit idle a long time, and the group that takes it
/// must not hang on it. Whatever the URL sets is kept.
fn keep_alive(config: &mut tokio_postgres::Config) {
    if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config.keepalives_idle(Duration::from_secs(30));
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(Duration::from_secs(10));
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(3);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(Duration::from_secs(60));
    }
}

/// The innermost cause of an error, the one a person can act on ("Connection refused",
/// "password authentication failed for user ..."): the outer layers only repeat it.
fn cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut innermost = error;
    while let Some(inner) = innermost.source() {
        innermost = inner;
    }
    innermost.to_string()
}

/// A database that cannot answer: the client may retry; nothing was acknowledged.
fn unavailable(error: &(dyn std::error::Error + 'static)) -> BackendError {
    BackendError::Unavailable(format!("the database did not answer: {}", cause(error)))
}

/// Where a URL points, without its password: `postgres@127.0.0.1:5432/test`.
fn describe(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "{}@{host}:{port}/{}",
        config.get_user().unwrap_or_default(),
        config.get_dbname().unwrap_or_default()
    )
}

/// Whether PostgreSQL can hold this text: it refuses NUL in `text`, where the engine's rules
/// never store one (queue names, ids, bodies are checked). A lookup by text that cannot be
/// stored finds nothing, and is answered so without asking the database.
fn storable(text: &str) -> bool {
    !text.contains('\0')
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or_default()
}

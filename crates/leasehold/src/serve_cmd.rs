//! `leasehold serve`: its flags (each also a config file key and a `LEASEHOLD_*` variable),
//! the checks made at start, and the backend and listeners it runs.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use clap::ValueEnum;
use leasehold_backend::Backend;
use leasehold_embedded::{Embedded, EngineSetup, StoreOptions, DEFAULT_BODY_CACHE_BYTES};
use leasehold_engine::LeaseMode;
use leasehold_server::{AppState, Limits, ServerConfig, WallClock};
use leasehold_store::{Durability, SqliteStore};

use crate::{config, consume, shutdown_signal, stripes_range};

#[derive(Clone, Copy, ValueEnum)]
enum LeaseModeArg {
    /// As real AWS behaves on standard queues: any handle ever issued still deletes.
    Aws,
    /// Only the current, unexpired lease's handle deletes; stale deletes do nothing.
    Strict,
}

/// Every flag of `serve` is also a key of the config file and a `LEASEHOLD_*` variable
/// (`--data-dir`, `data-dir = ...`, `LEASEHOLD_DATA_DIR`): flags win over variables, variables
/// over the file, the file over the defaults.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// A TOML file with any of these flags as keys, `[[queues]]` to declare at start and
    /// `[[access-keys]]`; see docs/operations.md.
    #[arg(long, env = "LEASEHOLD_CONFIG")]
    pub(crate) config: Option<std::path::PathBuf>,
    /// The config file, once read (its queues and access keys).
    #[arg(skip)]
    pub(crate) config_file: Option<config::ConfigFile>,
    /// Address and port to listen on: an IP address or a host name (localhost:9324). Any
    /// address but loopback wants --credentials (or --allow-anonymous).
    #[arg(long, env = "LEASEHOLD_BIND", default_value = "127.0.0.1:9324", value_parser = parse_bind)]
    bind: SocketAddr,
    /// Keep everything in memory; nothing survives a restart.
    #[arg(long, env = "LEASEHOLD_IN_MEMORY", conflicts_with_all = ["data_dir", "fsync", "postgres"])]
    in_memory: bool,
    /// Keep the queues in this PostgreSQL database, shared by every server given the same
    /// URL (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE); a schema of its own with
    /// ?options=-c%20search_path%3DSCHEMA. See docs/scaling.md.
    #[arg(long, env = "LEASEHOLD_POSTGRES_URL", conflicts_with_all = ["data_dir", "fsync"])]
    postgres: Option<String>,
    /// Where the durable store keeps its data file (leasehold.db).
    #[arg(long, env = "LEASEHOLD_DATA_DIR", default_value = "./leasehold-data")]
    data_dir: std::path::PathBuf,
    /// When acknowledged writes reach the disk.
    /// `always`: fsync before every answer; nothing acknowledged is lost, even on power loss.
    /// `interval-ms=N`: fsync every N ms; a crash of the server loses nothing, a power cut
    /// loses up to N ms of acknowledged work.
    /// `never`: no fsync; a crash of the server loses nothing, a power cut loses whatever the
    /// operating system had not written yet.
    #[arg(
        long,
        env = "LEASEHOLD_FSYNC",
        default_value = "always",
        verbatim_doc_comment
    )]
    fsync: Durability,
    /// The server's own region: where requests whose signature and host name none go.
    #[arg(long, env = "LEASEHOLD_REGION", default_value = "us-east-1")]
    region: String,
    /// The account of unsigned requests (and of credentials that name none), in queue URLs
    /// and ARNs.
    #[arg(long, env = "LEASEHOLD_ACCOUNT_ID", default_value = "000000000000")]
    account_id: String,
    /// Enable POST /_leasehold/clock/advance {"seconds": N}, for tests.
    #[arg(long, env = "LEASEHOLD_TIME_TRAVEL")]
    time_travel: bool,
    /// What a receipt handle is worth once its lease is over.
    #[arg(long, env = "LEASEHOLD_LEASE_MODE", value_enum, default_value = "aws")]
    lease_mode: LeaseModeArg,
    /// Seconds a connection may take to send a request's head, and may stay idle between
    /// requests, before it is closed.
    #[arg(long, env = "LEASEHOLD_IDLE_TIMEOUT", default_value = "20", value_parser = clap::value_parser!(u64).range(1..=3600))]
    idle_timeout: u64,
    /// Require a valid AWS Signature Version 4 on every request, by a key in this file (AWS's
    /// shared credentials format, plus `account_id` per profile); queues belong to accounts.
    #[arg(long, env = "LEASEHOLD_CREDENTIALS")]
    credentials: Option<std::path::PathBuf>,
    /// With credentials, the bearer token that opens /metrics and /_leasehold/* on --bind.
    #[arg(long, env = "LEASEHOLD_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// Also serve /metrics, /_leasehold/*, /health and /ready, without a token, here: a
    /// loopback address, or any other with --allow-anonymous.
    #[arg(long, env = "LEASEHOLD_ADMIN_BIND", value_parser = parse_bind)]
    admin_bind: Option<SocketAddr>,
    /// Serve anyone who can reach a non-loopback --bind without credentials, or a non-loopback
    /// --admin-bind (which never asks for a token).
    #[arg(long, env = "LEASEHOLD_ALLOW_ANONYMOUS")]
    allow_anonymous: bool,
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, env = "LEASEHOLD_TLS_CERT")]
    tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "LEASEHOLD_TLS_KEY")]
    tls_key: Option<std::path::PathBuf>,
    /// A name, besides loopback names and IP addresses, that requests may give as their Host
    /// where it is checked: always on the admin routes, and on every route without
    /// --credentials, so that a web page on another name cannot drive the server (DNS
    /// rebinding). Repeat it, or separate names with commas; the host of --public-url is one.
    #[arg(long = "allowed-host", env = "LEASEHOLD_ALLOWED_HOSTS", value_delimiter = ',', value_parser = parse_host_name)]
    allowed_host: Vec<String>,
    /// What queue URLs start with, behind a proxy or in a container
    /// (https://sqs.example.com); otherwise the scheme and Host of each request.
    #[arg(long, env = "LEASEHOLD_PUBLIC_URL")]
    public_url: Option<String>,
    /// Export each message's life as OpenTelemetry spans over OTLP/HTTP to this collector
    /// (its base URL, http://HOST:4318, or its /v1/traces): the send, the wait in the queue,
    /// each lease (held how long, run out or not) and the delete (late or not), in the
    /// producer's trace where the message names one (traceparent, or AWSTraceHeader).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// With --otlp-endpoint: the share, 0 to 1, of messages whose producer sent no trace
    /// that start one of their own (a producer's trace is sampled as the producer decided).
    #[arg(long, env = "LEASEHOLD_TRACE_SAMPLE_RATIO", default_value = "1", value_parser = parse_ratio)]
    trace_sample_ratio: f64,
    /// The memory to keep under (512MiB, 2GiB, bytes): near it, sends are refused with
    /// RequestThrottled while receives and deletes drain the backlog. Default: the cgroup's
    /// memory limit, else 60% of the machine's RAM.
    #[arg(long, env = "LEASEHOLD_MEMORY_LIMIT", value_parser = parse_memory_limit)]
    memory_limit: Option<u64>,
    /// MiB of recent message bodies the durable store keeps in memory, so that a short
    /// queue's receives rarely read the disk (0: none). Default: 64, or an eighth of a
    /// smaller memory limit.
    #[arg(long, env = "LEASEHOLD_BODY_CACHE_MB", conflicts_with_all = ["in_memory", "postgres"])]
    body_cache_mb: Option<u64>,
    /// MiB of the data directory's file system kept free: below it, sends are refused with
    /// RequestThrottled while receives, deletes and visibility changes go on; sends resume
    /// by themselves when space returns. Default: 64, or a tenth of a smaller file system.
    #[arg(long, env = "LEASEHOLD_DISK_RESERVE_MB", conflicts_with_all = ["in_memory", "postgres"])]
    disk_reserve_mb: Option<u64>,
    /// The file of the keys that encrypt message bodies and attributes at rest, for every
    /// queue that asks (SqsManagedSseEnabled, on by default as on AWS, or a KmsMasterKeyId):
    /// `<number> <64 hex digits>` a line, the last line's key sealing, every line's opening,
    /// so a rotation adds a line. Created, readable by its owner only, on the data
    /// directory's (or database's) first start. Keep a copy: without it the messages are
    /// unreadable. Default: encryption.key in the data directory; with --postgres, none
    /// (messages in the clear, SqsManagedSseEnabled refused): give every server the same file.
    #[arg(
        long,
        env = "LEASEHOLD_ENCRYPTION_KEY_FILE",
        conflicts_with = "in_memory"
    )]
    encryption_key_file: Option<std::path::PathBuf>,
    /// The most queues one account may hold (AWS's default quota, 1000000, is the most it
    /// may be set to): a CreateQueue past it is refused with OverLimit.
    #[arg(long, env = "LEASEHOLD_MAX_QUEUES_PER_ACCOUNT", default_value = "1000000", value_parser = clap::value_parser!(u64).range(1..=leasehold_engine::MAX_QUEUES_PER_ACCOUNT as u64))]
    max_queues_per_account: u64,
    /// The most messages one queue holds in flight (received, not yet deleted), AWS's quota
    /// by default: past it a standard queue's short poll is refused with OverLimit and a long
    /// poll gets nothing, a FIFO queue hands out nothing more. Raise it as AWS raises the
    /// quota on request; lower it to test a consumer against it. Not yet with `--postgres`.
    #[arg(long, env = "LEASEHOLD_MAX_IN_FLIGHT_PER_QUEUE", default_value = "120000", value_parser = clap::value_parser!(u64).range(1..=u64::from(u32::MAX)), conflicts_with = "postgres")]
    max_in_flight_per_queue: u64,
    /// How many stripes a standard queue created from now on is split into, so that as
    /// many cores work on one hot queue side by side (at most 64; a queue keeps the count it
    /// was created with). Default: one per core. 1: one order for a whole queue.
    #[arg(long, env = "LEASEHOLD_STRIPES", value_parser = stripes_range(), conflicts_with = "postgres")]
    stripes: Option<u64>,
}

/// A host name as `--allowed-host` takes it: letters, digits, dots, dashes and underscores,
/// with an optional :PORT.
fn parse_host_name(text: &str) -> Result<String, String> {
    let name = text.rsplit_once(':').map_or(text, |(name, _)| name);
    let fits = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    match fits {
        true => Ok(text.to_string()),
        false => Err(format!(
            "expected a host name such as queue.internal, not {text:?}"
        )),
    }
}

pub(crate) fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!("{text} is not a number from 0 to 1")),
    }
}

fn parse_memory_limit(text: &str) -> Result<u64, String> {
    match leasehold_server::pressure::parse_size(text)? {
        0 => Err("a memory limit of 0 leaves nothing to serve with".into()),
        limit => Ok(limit),
    }
}

/// `--bind HOST:PORT`: an address, or a name resolved once at start (IPv4 first, so
/// `localhost` is 127.0.0.1 where both are offered).
fn parse_bind(value: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let addresses: Vec<SocketAddr> = value
        .to_socket_addrs()
        .map_err(|e| format!("expected HOST:PORT that resolves: {e}"))?
        .collect();
    addresses
        .iter()
        .find(|a| a.is_ipv4())
        .or(addresses.first())
        .copied()
        .ok_or_else(|| format!("{value} resolves to no address"))
}

/// Who may use the server: the credentials of `--credentials` and the config file's
/// `[[access-keys]]`, if any. Checked at start: a wrong file is a usage error.
fn auth_of(args: &ServeArgs) -> anyhow::Result<Option<leasehold_server::auth::Auth>> {
    use leasehold_server::auth::{Auth, Credential, Credentials};
    let mut list = Vec::new();
    if let Some(path) = &args.credentials {
        let from_file = Credentials::from_file(path)
            .map_err(|e| consume::usage(format!("--credentials {e}")))?;
        list.extend(from_file.into_list());
    }
    for key in args.config_file.iter().flat_map(|f| &f.access_keys) {
        list.push(Credential {
            access_key_id: key.access_key_id.clone(),
            secret_access_key: key.secret_access_key.clone(),
            account_id: key
                .account_id
                .clone()
                .unwrap_or_else(|| args.account_id.clone()),
        });
    }
    if list.is_empty() {
        return Ok(None);
    }
    let credentials =
        Credentials::new(list).map_err(|e| consume::usage(format!("credentials: {e}")))?;
    Ok(Some(Auth {
        credentials,
        admin_token: args.admin_token.clone(),
    }))
}

/// An open listener on an address others can reach is refused unless asked for by name: the
/// SQS listener without credentials, and the admin listener (which takes no token, peeks at
/// bodies and redrives) always.
fn check_exposure(args: &ServeArgs, signed: bool) -> anyhow::Result<()> {
    if let Some(admin) = args.admin_bind.filter(|a| !a.ip().is_loopback()) {
        if !args.allow_anonymous {
            return Err(consume::usage(format!(
                "refusing to serve the admin routes on {admin} without a token: anyone who can reach it could read message bodies and redrive; keep --admin-bind on loopback, or give --allow-anonymous to serve it open"
            )));
        }
        tracing::warn!(
            admin_bind = %admin,
            "serving the admin routes without a token on a non-loopback address (--allow-anonymous): anyone who can reach it can read message bodies and redrive"
        );
    }
    if signed || args.bind.ip().is_loopback() {
        return Ok(());
    }
    if !args.allow_anonymous {
        return Err(consume::usage(format!(
            "refusing to serve {} without credentials: anyone who can reach it could read, send and delete; give --credentials FILE, or --allow-anonymous to serve it open",
            args.bind
        )));
    }
    tracing::warn!(
        bind = %args.bind,
        "serving without credentials on a non-loopback address (--allow-anonymous): anyone who can reach it can read, send and delete"
    );
    Ok(())
}

/// The host (and port) of a `--public-url`.
fn public_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest).to_string()
}

fn tls_of(args: &ServeArgs) -> anyhow::Result<Option<leasehold_server::tls::TlsAcceptor>> {
    match (&args.tls_cert, &args.tls_key) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => Ok(Some(
            leasehold_server::tls::acceptor(cert, key)
                .map_err(|e| consume::usage(e.to_string()))?,
        )),
        _ => Err(consume::usage(
            "--tls-cert and --tls-key go together: give both, or neither",
        )),
    }
}

pub(crate) async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let auth = auth_of(&args)?;
    check_exposure(&args, auth.is_some())?;
    let tls = tls_of(&args)?;
    if let Some(url) = &args.public_url {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(consume::usage(format!(
                "--public-url {url}: expected http://HOST[:PORT] or https://HOST[:PORT]"
            )));
        }
    }
    let config = ServerConfig {
        auth,
        public_url: args.public_url.clone(),
        tls: tls.is_some(),
        lease_mode: match args.lease_mode {
            LeaseModeArg::Aws => LeaseMode::Aws,
            LeaseModeArg::Strict => LeaseMode::Strict,
        },
        region: args.region.clone(),
        account_id: args.account_id.clone(),
        time_travel: args.time_travel,
        limits: Limits {
            idle_timeout: std::time::Duration::from_secs(args.idle_timeout),
            ..Limits::default()
        },
        memory_limit: args.memory_limit,
        max_queues_per_account: args.max_queues_per_account as usize,
        max_in_flight_per_queue: args.max_in_flight_per_queue as usize,
        allowed_hosts: leasehold_server::hosts::AllowedHosts::new(
            args.allowed_host
                .iter()
                .cloned()
                .chain(args.public_url.as_deref().map(public_host)),
        ),
    };
    let clock = Arc::new(WallClock::default());
    let backend = build_backend(&args, &config, &clock).await?;
    let (backend, traces) = match &args.otlp_endpoint {
        Some(endpoint) => {
            let started = leasehold_trace::Tracing::start(
                (backend, config.lease_mode),
                clock.clone(),
                endpoint,
                args.trace_sample_ratio,
            )
            .map_err(|e| consume::usage(format!("--otlp-endpoint: {e}")))?;
            tracing::info!(endpoint = %leasehold_trace::traces_url(endpoint)?, "messages traced");
            let traced: Arc<dyn Backend> = started.backend.clone();
            (traced, Some(started))
        }
        None => (backend, None),
    };
    let state = AppState::new(config, clock, backend);
    if let Some(file) = &args.config_file {
        let declared = file.declared_queues(state.backend.naming());
        leasehold_server::declare_queues(&*state.backend, &declared)
            .await
            .map_err(|e| consume::usage(format!("--config: {e}")))?;
    }
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .with_context(|| format!("cannot listen on {}", args.bind))?;
    let admin = match args.admin_bind {
        Some(address) => Some(
            tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("cannot listen on --admin-bind {address}"))?,
        ),
        None => None,
    };
    if let Some(admin) = &admin {
        tracing::info!(address = %admin.local_addr()?, "admin routes served");
    }
    tracing::info!(
        address = %listener.local_addr()?,
        tls = tls.is_some(),
        signatures = state.config.auth.is_some(),
        "leasehold is serving SQS"
    );
    let listeners = leasehold_server::Listeners { tls, admin };
    let served = leasehold_server::serve_with(listener, state, listeners, shutdown_signal())
        .await
        .context("server failed");
    if let Some(traces) = traces {
        // Sends the last spans: it waits on the exporter, so off the async workers.
        let _ = tokio::task::spawn_blocking(move || traces.stop()).await;
    }
    served
}

/// The backend `serve` runs on, as its flags choose: PostgreSQL, memory, or the embedded
/// store in `--data-dir` (the default). The server knows only the `Backend` seam.
async fn build_backend(
    args: &ServeArgs,
    config: &ServerConfig,
    clock: &Arc<WallClock>,
) -> anyhow::Result<Arc<dyn Backend>> {
    let naming = leasehold_engine::Naming {
        region: config.region.clone(),
        account_id: config.account_id.clone(),
    };
    if let Some(url) = &args.postgres {
        let options = leasehold_postgres::Options {
            lease_mode: config.lease_mode,
            max_queues_per_account: config.max_queues_per_account,
            encryption_key_file: args.encryption_key_file.clone(),
            ..leasehold_postgres::Options::default()
        };
        let backend = match leasehold_postgres::Postgres::connect(url, naming, options).await {
            Err(error @ leasehold_postgres::StartError::Url(_)) => {
                return Err(consume::usage(format!("--postgres: {error}")))
            }
            connected => connected?,
        };
        tracing::info!(
            schema_version = leasehold_postgres::SCHEMA_VERSION,
            "PostgreSQL backend ready"
        );
        if args.encryption_key_file.is_none() {
            tracing::warn!("no --encryption-key-file: messages are stored in PostgreSQL in the clear, and SqsManagedSseEnabled=true is refused");
        }
        return Ok(Arc::new(backend));
    }
    let mut setup = EngineSetup::serving(clock.clone(), config.lease_mode, naming);
    setup.config.max_queues_per_account = config.max_queues_per_account;
    setup.config.max_in_flight_per_queue = config.max_in_flight_per_queue;
    if let Some(stripes) = args.stripes {
        setup.config.stripes = stripes as usize;
    }
    if args.in_memory {
        tracing::warn!("serving from memory: nothing survives a restart");
        return Ok(Arc::new(Embedded::in_memory(setup)));
    }
    let started = std::time::Instant::now();
    let store = SqliteStore::open(&args.data_dir)?;
    let options = StoreOptions {
        durability: args.fsync,
        body_cache_bytes: args.body_cache_mb.map_or_else(
            || {
                let (limit, _) = leasehold_server::pressure::memory_limit(args.memory_limit);
                DEFAULT_BODY_CACHE_BYTES.min(limit / 8)
            },
            |mb| mb << 20,
        ),
        disk_reserve_bytes: args.disk_reserve_mb.map(|mb| mb << 20),
        encryption_key_file: Some(
            args.encryption_key_file
                .clone()
                .unwrap_or_else(|| leasehold_store::keyring::default_key_file(&args.data_dir)),
        ),
    };
    let backend = Embedded::durable(setup, Box::new(store), options)?;
    tracing::info!(
        data_dir = %args.data_dir.display(),
        fsync = ?args.fsync,
        restored_in_ms = started.elapsed().as_millis() as u64,
        "durable store open"
    );
    Ok(Arc::new(backend))
}

//! The `leasehold` command: `leasehold serve` runs the SQS-compatible server.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

/// A faster allocator than the system's for a server that allocates per request.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod advise;
mod config;
mod consume;
mod group;
mod guard;
mod in_process;
mod lab;
mod redrive;
mod simulate;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use leasehold_backend::Backend;
use leasehold_embedded::{Embedded, EngineSetup, StoreOptions, DEFAULT_BODY_CACHE_BYTES};
use leasehold_engine::LeaseMode;
use leasehold_server::{AppState, Limits, ServerConfig, WallClock};
use leasehold_store::{Durability, SqliteStore};

#[derive(Parser)]
#[command(
    name = "leasehold",
    version,
    about = "An SQS-compatible queue that is honest about leases"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How logs (on stderr) are written: text, or one JSON object per line.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the SQS API (AWS JSON 1.0 and the query protocol) over HTTP.
    Serve(Box<ServeArgs>),
    /// Load-test any SQS endpoint that speaks AWS JSON 1.0 and report throughput and latency.
    Bench(BenchArgs),
    /// Recommend a visibility timeout, heartbeat and maxReceiveCount from measured times.
    Advise(advise::AdviseArgs),
    /// Consume a queue, running a command per message under heartbeats and an idempotency gate.
    Work(consume::WorkArgs),
    /// Move a dead-letter queue's messages back, skipping work already recorded as done.
    Redrive(redrive::RedriveArgs),
    /// Run a death-spiral scenario on the real engine under a virtual clock.
    Simulate(simulate::SimulateArgs),
    /// Run a scenario live (server, consumers, a PostgreSQL downstream) against the simulator.
    Lab(lab::LabArgs),
    /// Copy a data directory's store to one file, consistently, while its server runs.
    Backup(BackupArgs),
    /// `work`'s guardian: kills the commands' process groups if the worker dies.
    #[command(name = "guard", hide = true)]
    Guard,
}

#[derive(clap::Args)]
struct BackupArgs {
    /// The data directory of the server to back up (its --data-dir).
    #[arg(long, env = "LEASEHOLD_DATA_DIR", default_value = "./leasehold-data")]
    data_dir: std::path::PathBuf,
    /// The file to write; it must not exist. Restore by making it a data directory's
    /// leasehold.db (see the README).
    #[arg(long)]
    to: std::path::PathBuf,
}

/// `--stripes`: 1 to `MAX_STRIPES`.
fn stripes_range() -> clap::builder::RangedU64ValueParser {
    clap::value_parser!(u64).range(1..=leasehold_engine::MAX_STRIPES as u64)
}

#[derive(clap::Args)]
struct BenchArgs {
    /// The endpoint to load, e.g. http://127.0.0.1:9324 (else AWS_ENDPOINT_URL, else that).
    #[arg(
        long,
        alias = "endpoint",
        env = "AWS_ENDPOINT_URL",
        default_value = "http://127.0.0.1:9324"
    )]
    endpoint_url: String,
    /// send, send-batch, receive-delete, full-cycle, many-queues, long-poll or big-ops over
    /// HTTP; or in-process: the full cycle on the embedded backend itself (`--threads`,
    /// `--queues`, `--data-dir`), no server.
    scenario: BenchScenario,
    /// How long to run, in seconds.
    #[arg(long, default_value = "10")]
    seconds: u64,
    /// Concurrent clients in all.
    #[arg(long, default_value = "32")]
    clients: usize,
    /// Size of each message body, in bytes.
    #[arg(long, default_value = "200")]
    body_bytes: usize,
    /// The server's process id, to sample its CPU and memory (Linux).
    #[arg(long)]
    server_pid: Option<u32>,
    /// Messages to preload for receive-delete (and into each big queue for big-ops).
    #[arg(long, default_value = "100000")]
    preload: u64,
    /// Queues for many-queues and in-process.
    #[arg(long, default_value = "1000")]
    queues: usize,
    /// in-process: threads driving the backend.
    #[arg(long, default_value = "1")]
    threads: usize,
    /// in-process: stripes a standard queue is split into, as `serve --stripes` (default:
    /// one per core).
    #[arg(long, value_parser = stripes_range())]
    stripes: Option<u64>,
    /// in-process: keep the queues durable in this directory (fsync always); else in memory.
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Sign every request with SigV4, as the SDKs do, by the key in AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY: for a server that checks signatures (serve --credentials).
    #[arg(long)]
    sign: bool,
    /// The region signatures are scoped to (else AWS_REGION; us-east-1 if none).
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    region: String,
}

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
struct ServeArgs {
    /// A TOML file with any of these flags as keys, `[[queues]]` to declare at start and
    /// `[[access-keys]]`; see docs/operations.md.
    #[arg(long, env = "LEASEHOLD_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// The config file, once read (its queues and access keys).
    #[arg(skip)]
    config_file: Option<config::ConfigFile>,
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
    /// The most queues one account may hold (AWS's default quota, 1000000, is the most it
    /// may be set to): a CreateQueue past it is refused with OverLimit.
    #[arg(long, env = "LEASEHOLD_MAX_QUEUES_PER_ACCOUNT", default_value = "1000000", value_parser = clap::value_parser!(u64).range(1..=leasehold_engine::MAX_QUEUES_PER_ACCOUNT as u64))]
    max_queues_per_account: u64,
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

fn parse_memory_limit(text: &str) -> Result<u64, String> {
    match leasehold_server::pressure::parse_size(text)? {
        0 => Err("a memory limit of 0 leaves nothing to serve with".into()),
        limit => Ok(limit),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // One readable line with its causes, whatever RUST_BACKTRACE says; a mistake in
            // how the command was called exits 2, as clap's own usage errors do.
            eprintln!("leasehold: {error:#}");
            if error.is::<consume::UsageError>() {
                std::process::ExitCode::from(2)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let cli = parse_cli()?;
    init_logs(cli.log_format);
    let command = cli.command;
    if matches!(
        command,
        Command::Advise(_)
            | Command::Simulate(_)
            | Command::Lab(_)
            | Command::Bench(_)
            | Command::Redrive(_)
            | Command::Backup(_)
    ) {
        print_until_the_reader_goes();
    }
    match command {
        Command::Serve(args) => serve(*args).await,
        Command::Bench(args) => bench(args).await,
        Command::Advise(args) => advise::run(args).await,
        Command::Work(args) => consume::work(args).await,
        Command::Redrive(args) => redrive::redrive(args).await,
        Command::Simulate(args) => simulate::simulate(args),
        Command::Lab(args) => lab::lab(args).await,
        Command::Backup(args) => backup(args).await,
        Command::Guard => guard::run(),
    }
}

/// The command line; for `serve --config FILE`, parsed again with the file's values as the
/// flags' defaults, so that variables and flags override them.
fn parse_cli() -> anyhow::Result<Cli> {
    use clap::{CommandFactory, FromArgMatches};
    let cli = Cli::parse();
    let Command::Serve(args) = &cli.command else {
        return Ok(cli);
    };
    let Some(path) = &args.config else {
        return Ok(cli);
    };
    let file =
        config::ConfigFile::load(path).map_err(|e| consume::usage(format!("--config: {e}")))?;
    let with_defaults = |command: clap::Command| {
        let known: Vec<String> = command
            .get_arguments()
            .map(|a| a.get_id().to_string())
            .collect();
        file.flag_defaults()
            .into_iter()
            .filter(|(id, _)| known.contains(id))
            .fold(command, |command, (id, value)| {
                command.mut_arg(id, |arg| arg.default_value(value))
            })
    };
    let command = with_defaults(Cli::command()).mut_subcommand("serve", with_defaults);
    let matches = command.get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Command::Serve(args) = &mut cli.command {
        args.config_file = Some(file);
    }
    Ok(cli)
}

/// Logs go to stderr (stdout is for what a command prints), filtered by `RUST_LOG`; colour
/// only on a terminal and never with `NO_COLOR` set.
fn init_logs(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "leasehold=info,leasehold_server=info,leasehold_worker=info".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => {
            let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            logs.with_ansi(colour).init()
        }
    }
}

/// For commands whose output is read by a pipe (`| head`): when the reader goes, end quietly
/// as Unix tools do, instead of panicking on the failed write. Not for `serve` and `work`,
/// which must outlive a client or a command that stops reading (their sockets are written
/// with MSG_NOSIGNAL, pipes to commands are not).
#[allow(unsafe_code)]
fn print_until_the_reader_goes() {
    // SAFETY: restores the default disposition of one signal before any thread writes.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
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

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
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
        allowed_hosts: leasehold_server::hosts::AllowedHosts::new(
            args.allowed_host
                .iter()
                .cloned()
                .chain(args.public_url.as_deref().map(public_host)),
        ),
    };
    let clock = Arc::new(WallClock::default());
    let backend = build_backend(&args, &config, &clock).await?;
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
    leasehold_server::serve_with(listener, state, listeners, shutdown_signal())
        .await
        .context("server failed")
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
        return Ok(Arc::new(backend));
    }
    let mut setup = EngineSetup::serving(clock.clone(), config.lease_mode, naming);
    setup.config.max_queues_per_account = config.max_queues_per_account;
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

async fn backup(args: BackupArgs) -> anyhow::Result<()> {
    let (data_dir, to) = (args.data_dir.clone(), args.to.clone());
    let summary = tokio::task::spawn_blocking(move || leasehold_store::backup(&data_dir, &to))
        .await
        .context("the backup stopped")??;
    println!(
        "backed up {} to {}: {} bytes ({} pages) in {} ms",
        args.data_dir.display(),
        args.to.display(),
        summary.bytes,
        summary.pages,
        summary.took.as_millis()
    );
    Ok(())
}

/// What `leasehold bench` runs: a scenario against an endpoint, or the backend in-process.
#[derive(Clone)]
enum BenchScenario {
    Wire(leasehold_bench::Scenario),
    InProcess,
}

impl std::str::FromStr for BenchScenario {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "in-process" => Ok(BenchScenario::InProcess),
            wire => wire
                .parse()
                .map(BenchScenario::Wire)
                .map_err(|e: String| format!("{e}, in-process")),
        }
    }
}

/// `bench --sign`'s key, from the environment as the SDKs take it: checked at start.
fn bench_signer(region: &str) -> anyhow::Result<leasehold_bench::Signer> {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| consume::usage(format!("--sign needs {name} in the environment")))
    };
    Ok(leasehold_bench::Signer::new(
        &var("AWS_ACCESS_KEY_ID")?,
        &var("AWS_SECRET_ACCESS_KEY")?,
        region,
    ))
}

async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let signer = args.sign.then(|| bench_signer(&args.region)).transpose()?;
    let scenario = match args.scenario {
        BenchScenario::Wire(scenario) => scenario,
        BenchScenario::InProcess => {
            let config = in_process::InProcess {
                threads: args.threads.max(1),
                queues: args.queues.max(1),
                duration: std::time::Duration::from_secs(args.seconds),
                body_bytes: args.body_bytes.max(1),
                data_dir: args.data_dir.clone(),
                stripes: args.stripes.map(|s| s as usize),
            };
            let report = tokio::task::spawn_blocking(move || in_process::run(&config)).await??;
            print_report(&report, args.json);
            return Ok(());
        }
    };
    let scenario = match scenario {
        leasehold_bench::Scenario::ReceiveDelete { .. } => {
            leasehold_bench::Scenario::ReceiveDelete {
                preload: args.preload,
            }
        }
        leasehold_bench::Scenario::BigOps { .. } => leasehold_bench::Scenario::BigOps {
            preload: args.preload,
        },
        leasehold_bench::Scenario::ManyQueues { .. } => leasehold_bench::Scenario::ManyQueues {
            queues: args.queues.max(1),
        },
        other => other,
    };
    let report = leasehold_bench::run(leasehold_bench::BenchConfig {
        endpoint: args.endpoint_url,
        scenario,
        duration: std::time::Duration::from_secs(args.seconds),
        clients: args.clients.max(1),
        body_bytes: args.body_bytes.max(1),
        server_pid: args.server_pid,
        signer,
    })
    .await?;
    print_report(&report, args.json);
    Ok(())
}

/// A bench report, as one JSON object or as lines for a person.
fn print_report(report: &leasehold_bench::Report, json: bool) {
    if json {
        let latency: serde_json::Map<String, serde_json::Value> = report
            .latency
            .iter()
            .map(|(action, l)| {
                let ms = |us: u64| us as f64 / 1000.0;
                (action.to_string(), serde_json::json!({"calls": l.calls, "p50_ms": ms(l.p50_us), "p99_ms": ms(l.p99_us), "p999_ms": ms(l.p999_us), "max_ms": ms(l.max_us)}))
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "scenario": report.scenario, "clients": report.clients, "seconds": report.seconds,
                "messages_per_second": report.messages_per_second, "messages": report.messages,
                "sent_per_second": report.sent_per_second, "deleted_per_second": report.deleted_per_second,
                "errors": report.errors, "latency": latency,
                "server_cpu_percent": report.server_cpu_percent, "server_rss_mib": report.server_rss_mib,
            })
        );
    } else {
        report.print();
    }
}

/// A token cancelled by Ctrl-C or SIGTERM: what a command that ends early but cleanly
/// (draining, releasing, dropping what it made) listens to.
pub(crate) fn cancelled_on_shutdown() -> tokio_util::sync::CancellationToken {
    let token = tokio_util::sync::CancellationToken::new();
    tokio::spawn({
        let token = token.clone();
        async move {
            shutdown_signal().await;
            token.cancel();
        }
    });
    token
}

pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutting down");
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every flag of `serve`, and `--log-format`, is a key of the config file, and every key
    /// a flag: the file can say anything the command line can.
    #[test]
    fn every_serve_flag_is_a_config_key_and_every_key_a_flag() {
        let command = super::Cli::command();
        let serve = command.find_subcommand("serve").expect("serve");
        let mut flags: Vec<String> = serve
            .get_arguments()
            .chain(command.get_arguments())
            .map(|a| a.get_id().to_string())
            .filter(|id| !["help", "version", "config", "config_file"].contains(&id.as_str()))
            .collect();
        flags.sort();
        let serde_json::Value::Object(keys) =
            serde_json::to_value(crate::config::ConfigFile::default()).expect("serializes")
        else {
            panic!("a config file is a table");
        };
        let mut keys: Vec<String> = keys.keys().map(|k| k.replace('-', "_")).collect();
        keys.sort();
        assert_eq!(flags, keys);
    }
}

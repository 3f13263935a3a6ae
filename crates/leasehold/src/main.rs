//! The `leasehold` command: `leasehold serve` runs the SQS-compatible server.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

/// A faster allocator than the system's for a server that allocates per request. Built so
/// that it does not ask for transparent huge pages (`no_thp`: no `madvise(MADV_HUGEPAGE)`):
/// when it did, the kernel zeroed a fresh 2 MiB page each time it took back memory it had
/// returned, a fifth of the server's CPU on SendMessageBatch (BENCHMARKS.md, issue 27). A
/// machine whose kernel gives huge pages to every process (THP `always`) still does. It
/// changes no process setting (no `PR_SET_THP_DISABLE`), so the commands `leasehold work`
/// runs inherit nothing from it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod advise;
mod bench_cmd;
mod completions;
mod config;
mod consume;
mod group;
mod guard;
mod http_target;
mod in_process;
mod lab;
mod redrive;
mod serve_cmd;
mod simulate;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};

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
    Serve(Box<serve_cmd::ServeArgs>),
    /// Load-test any SQS endpoint that speaks AWS JSON 1.0 and report throughput and latency.
    Bench(bench_cmd::BenchArgs),
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
    /// Print a completion script for a shell: `source <(leasehold completions bash)`.
    Completions(completions::CompletionsArgs),
    /// `work`'s guardian: kills the commands' process groups if the worker dies.
    #[command(name = "guard", hide = true)]
    Guard,
    /// One consumer of a `lab` run, as a process of its own (started by `lab`).
    #[command(name = "lab-consumer", hide = true)]
    LabConsumer,
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
pub(crate) fn stripes_range() -> clap::builder::RangedU64ValueParser {
    clap::value_parser!(u64).range(1..=leasehold_engine::MAX_STRIPES as u64)
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
            | Command::Completions(_)
    ) {
        print_until_the_reader_goes();
    }
    match command {
        Command::Serve(args) => serve_cmd::serve(*args).await,
        Command::Bench(args) => bench_cmd::bench(args).await,
        Command::Completions(args) => completions::print(args),
        Command::Advise(args) => advise::run(args).await,
        Command::Work(args) => consume::work(args).await,
        Command::Redrive(args) => redrive::redrive(args).await,
        Command::Simulate(args) => simulate::simulate(args),
        Command::Lab(args) => lab::lab(args).await,
        Command::Backup(args) => backup(args).await,
        Command::Guard => guard::run(),
        Command::LabConsumer => lab::lab_consumer().await,
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

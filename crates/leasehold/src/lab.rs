//! `leasehold lab`: runs a scenario for real (this binary as the server, in its own process
//! group; consumer fleets; a PostgreSQL downstream) and compares it with the simulator.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use leasehold_lab::{LabOptions, LabReport, LabSpec};
use leasehold_sim::Scenario;

use crate::consume::usage;
use crate::group::ProcessGroup;

#[derive(clap::Args)]
pub struct LabArgs {
    /// The scenario file (TOML; see scenarios/lab-*.toml): its times are the lab's, scaled
    /// down, and it runs unchanged in `leasehold simulate`.
    scenario: PathBuf,
    /// Where to write summary.json, the measured and predicted time series and the plots.
    #[arg(long, default_value = "lab-out")]
    out: PathBuf,
    /// The PostgreSQL database the downstream lives in (a schema of its own, dropped at the
    /// end).
    #[arg(
        long,
        env = "LEASEHOLD_LAB_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    postgres: String,
    /// Whether tenants' messages carry their tenant as MessageGroupId (a fair queue):
    /// overrides the scenario's `queue.fair`, as `leasehold simulate --fair` does.
    #[arg(long)]
    fair: Option<bool>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// The server this lab runs against: this binary, in memory, on a free loopback port.
struct Server {
    child: tokio::process::Child,
    group: ProcessGroup,
    endpoint: String,
}

impl Server {
    async fn start(scenario: &Scenario, out: &std::path::Path) -> anyhow::Result<Server> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("no free port on 127.0.0.1")?
            .port();
        std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
        let log = std::fs::File::create(out.join("server.log"))
            .with_context(|| format!("cannot write {}", out.join("server.log").display()))?;
        let child = tokio::process::Command::new(std::env::current_exe()?)
            .args(["serve", "--in-memory", "--bind"])
            .arg(format!("127.0.0.1:{port}"))
            .args(["--lease-mode", &scenario.queue.lease_mode])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .context("cannot start the server")?;
        let group = ProcessGroup::new(child.id().unwrap_or(0));
        let endpoint = format!("http://127.0.0.1:{port}");
        let server = Server {
            child,
            group,
            endpoint,
        };
        server.wait_ready().await?;
        Ok(server)
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let http = reqwest::Client::new();
        let url = format!("{}/ready", self.endpoint);
        for _ in 0..100 {
            if http
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!("the lab's server did not become ready within 10 s (see server.log)")
    }

    async fn stop(mut self) {
        self.group
            .stop(&mut self.child, Duration::from_secs(5))
            .await;
    }
}

pub async fn lab(args: LabArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.scenario)
        .map_err(|e| usage(format!("cannot read {}: {e}", args.scenario.display())))?;
    let mut scenario = Scenario::from_toml(&text)
        .map_err(|e| usage(format!("{}: {e}", args.scenario.display())))?;
    if let Some(fair) = args.fair {
        scenario.queue.fair = fair;
    }
    LabSpec::of(&scenario).map_err(|e| usage(format!("{}: {e}", args.scenario.display())))?;
    leasehold_lab::check_postgres_url(&args.postgres).map_err(|e| usage(e.to_string()))?;
    // Ctrl-C or SIGTERM ends the run early; it still drops its schema, and the server stops.
    let interrupt = crate::cancelled_on_shutdown();
    let server = Server::start(&scenario, &args.out).await?;
    let bar = progress_bar(&scenario, args.quiet);
    let options = LabOptions {
        endpoint: server.endpoint.clone(),
        postgres_url: args.postgres.clone(),
        out: args.out.clone(),
        exe: std::env::current_exe().context("cannot find this binary to run consumers with")?,
        interrupt,
    };
    let mut progress = |fraction: f64| bar.set_position((fraction * 1000.0) as u64);
    let result = leasehold_lab::run(&scenario, &options, &mut progress).await;
    bar.finish_and_clear();
    server.stop().await;
    print_report(&result?, &args.out);
    Ok(())
}

fn progress_bar(scenario: &Scenario, quiet: bool) -> indicatif::ProgressBar {
    let bar = if quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(1000)
    };
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {percent}% ({elapsed})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(format!("{} (live)", scenario.name));
    bar
}

fn print_report(report: &LabReport, out: &std::path::Path) {
    let (m, p) = (&report.measured, &report.predicted);
    println!(
        "{} ({} consumers): {}",
        report.scenario, report.consumers, report.scaling
    );
    println!(
        "  measured:  {} messages, {} executions ({} duplicates), peak amplification {:.2}x, {}",
        m.unique_messages,
        m.executions,
        m.duplicate_executions,
        m.peak_amplification,
        leasehold_sim::outcome_line(m)
    );
    println!(
        "  predicted: {} messages, {} executions ({} duplicates), peak amplification {:.2}x, {}",
        p.unique_messages,
        p.executions,
        p.duplicate_executions,
        p.peak_amplification,
        leasehold_sim::outcome_line(p)
    );
    if !m.tenants.is_empty() {
        println!("  measured  {}", leasehold_sim::dwell_line(&m.tenants));
        println!("  predicted {}", leasehold_sim::dwell_line(&p.tenants));
    }
    if m.dlq_messages + p.dlq_messages > 0 {
        println!(
            "  DLQ: measured {} ({} already succeeded), predicted {} ({})",
            m.dlq_messages,
            m.dlq_messages_already_succeeded,
            p.dlq_messages,
            p.dlq_messages_already_succeeded
        );
    }
    if let Some(r) = &report.redrive {
        println!(
            "  redrive: blind re-executed {} of {} finished messages' work; leasehold redrive skipped {} and re-executed {}",
            r.blind.re_executions_of_finished_work,
            r.blind.already_succeeded,
            r.leasehold.skipped_as_done,
            r.leasehold.re_executions_of_finished_work
        );
    }
    if report.sending.max_lag_s > 1.0 {
        println!(
            "  note: arrivals went out up to {:.1} s behind their schedule (a busy machine)",
            report.sending.max_lag_s
        );
    }
    if report.execution_failures > 0 {
        println!(
            "  warning: {} executions failed on the database, the first with: {}",
            report.execution_failures,
            report.first_execution_error.as_deref().unwrap_or("?")
        );
    }
    if report.disagreements.is_empty() {
        println!("  the measurement and the simulator agree on every measure");
    }
    for d in &report.disagreements {
        println!("  disagrees: {d}");
    }
    println!("outputs in {}", out.display());
}

/// `leasehold lab-consumer` (hidden): one consumer of a lab run as a process of its own,
/// started by `leasehold lab` for a scenario whose crashes kill consumers; its spec comes on
/// stdin.
pub async fn lab_consumer() -> anyhow::Result<()> {
    leasehold_lab::run_consumer().await?;
    // Not a return through the runtime, which would wait for the thread still reading stdin.
    std::process::exit(0)
}

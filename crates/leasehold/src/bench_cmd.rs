//! `leasehold bench`: load any SQS endpoint that speaks AWS JSON 1.0 (`leasehold-bench`) and
//! print what it measured.

use crate::stripes_range;

#[derive(clap::Args)]
pub(crate) struct BenchArgs {
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
    /// Sends every message with this MessageGroupId: on a standard queue, all of one tenant.
    #[arg(long)]
    message_group_id: Option<String>,
    /// The region signatures are scoped to (else AWS_REGION; us-east-1 if none).
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    region: String,
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
            .ok_or_else(|| crate::consume::usage(format!("--sign needs {name} in the environment")))
    };
    Ok(leasehold_bench::Signer::new(
        &var("AWS_ACCESS_KEY_ID")?,
        &var("AWS_SECRET_ACCESS_KEY")?,
        region,
    ))
}

pub(crate) async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let signer = args.sign.then(|| bench_signer(&args.region)).transpose()?;
    let scenario = match args.scenario {
        BenchScenario::Wire(scenario) => scenario,
        BenchScenario::InProcess => {
            let config = crate::in_process::InProcess {
                threads: args.threads.max(1),
                queues: args.queues.max(1),
                duration: std::time::Duration::from_secs(args.seconds),
                body_bytes: args.body_bytes.max(1),
                data_dir: args.data_dir.clone(),
                stripes: args.stripes.map(|s| s as usize),
            };
            let report =
                tokio::task::spawn_blocking(move || crate::in_process::run(&config)).await??;
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
        group_id: args.message_group_id,
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

//! `leasehold work`: the consumer runtime as a command, for any language and any SQS; and
//! what it shares with `leasehold redrive` (the SQS client, the checks at start).

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName};
use aws_sdk_sqs::Client;
use leasehold_worker::idempotency::with_causes;
use leasehold_worker::{idempotency, Backoff, IdempotencyStore, Message, SettingsError, Worker};

use crate::group::ProcessGroup;
use crate::guard::{self, Guardian};
use crate::http_target::{self, HttpTarget};
use tokio::io::AsyncWriteExt;

/// Where to find SQS: the AWS defaults (environment, profile), with an optional endpoint.
#[derive(clap::Args, Clone)]
pub struct SqsArgs {
    /// An SQS endpoint other than AWS's, e.g. http://127.0.0.1:9324 (or AWS_ENDPOINT_URL).
    #[arg(long)]
    endpoint_url: Option<String>,
    /// The region (else AWS_REGION or the profile's; us-east-1 if none).
    #[arg(long)]
    region: Option<String>,
}

/// A mistake in how a command was called, found by the checks at start: exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

/// The endpoint a queue URL names, unless it is AWS's own (`*.amazonaws.com`), whose
/// endpoint the SDK works out from the region.
pub(crate) fn endpoint_of(queue_url: &str) -> Option<String> {
    let (scheme, rest) = queue_url.split_once("://")?;
    let authority = rest.split('/').next()?;
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
    let aws = host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn");
    (!aws && !authority.is_empty()).then(|| format!("{scheme}://{authority}"))
}

/// Whether any AWS credentials are configured where the SDK looks without a network call:
/// the environment and the shared files.
fn credentials_configured() -> bool {
    let env = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let home_file = |file: &str| {
        std::env::var_os("HOME")
            .map(|home| std::path::Path::new(&home).join(".aws").join(file).exists())
            .unwrap_or(false)
    };
    [
        "AWS_ACCESS_KEY_ID",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONFIG_FILE",
    ]
    .iter()
    .any(|name| env(name))
        || home_file("credentials")
        || home_file("config")
}

/// An SQS client for `queue_url`. The endpoint is `--endpoint-url`, else `AWS_ENDPOINT_URL`,
/// else the queue URL's own scheme, host and port when that is not AWS. Against an endpoint
/// that is not AWS with no credentials configured, placeholder credentials are used (a local
/// server takes any); against AWS, missing credentials are an error at start.
pub async fn sqs_client(args: &SqsArgs, queue_url: &str) -> anyhow::Result<Client> {
    let endpoint = args
        .endpoint_url
        .clone()
        .or_else(|| std::env::var("AWS_ENDPOINT_URL_SQS").ok())
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
        .or_else(|| endpoint_of(queue_url));
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(endpoint) = &endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    let region = args
        .region
        .clone()
        .or_else(|| std::env::var("AWS_REGION").ok())
        .unwrap_or_else(|| "us-east-1".into());
    loader = loader.region(aws_config::Region::new(region));
    let local = endpoint
        .as_deref()
        .is_some_and(|e| endpoint_of(e).is_some());
    if local && !credentials_configured() {
        tracing::info!(
            endpoint = endpoint.as_deref().unwrap_or_default(),
            "no AWS credentials configured: using placeholder credentials for this endpoint"
        );
        loader = loader.credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "leasehold",
            "leasehold",
            None,
            None,
            "placeholder",
        ));
    }
    let config = loader.load().await;
    if !local {
        use aws_sdk_sqs::config::ProvideCredentials;
        let provider = config
            .credentials_provider()
            .ok_or_else(|| usage(format!("no AWS credentials found for {queue_url}")))?;
        if let Err(error) = provider.provide_credentials().await {
            return Err(usage(format!(
                "no AWS credentials found for {queue_url}: {}",
                with_causes(&error)
            )));
        }
    }
    Ok(Client::new(&config))
}

/// A queue's attributes, read at start: a queue that cannot be used is a mistake, said in
/// the server's own words.
pub(crate) async fn queue_attributes(
    client: &Client,
    url: &str,
    names: &[QueueAttributeName],
) -> anyhow::Result<HashMap<QueueAttributeName, String>> {
    let out = client
        .get_queue_attributes()
        .queue_url(url)
        .set_attribute_names(Some(names.to_vec()))
        .send()
        .await
        .map_err(|e| usage(format!("cannot use the queue {url}: {}", with_causes(&e))))?;
    Ok(out.attributes.unwrap_or_default())
}

/// Fails at start when the command to run per message is not there to run.
fn check_command(program: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |path: &std::path::Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let found = if program.contains('/') {
        runnable(std::path::Path::new(program))
    } else {
        std::env::var_os("PATH").is_some_and(|path| {
            std::env::split_paths(&path).any(|dir| runnable(&dir.join(program)))
        })
    };
    if found {
        Ok(())
    } else {
        Err(usage(format!(
            "the command {program:?} was not found or cannot be run"
        )))
    }
}

/// Opens the idempotency store at start; one that does not answer is a mistake to fix.
pub(crate) async fn open_store(url: &str) -> anyhow::Result<Box<dyn IdempotencyStore>> {
    idempotency::connect(url)
        .await
        .map_err(|error| usage(format!("cannot use the idempotency store: {error}")))
}

#[derive(clap::Args)]
pub struct WorkArgs {
    #[command(flatten)]
    sqs: SqsArgs,
    /// The queue to consume.
    #[arg(long)]
    queue_url: String,
    /// Messages processed at once.
    #[arg(long, default_value = "4", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    concurrency: u64,
    /// Lease in seconds: asked for at each receive and renewed by each heartbeat.
    #[arg(long, default_value = "30", value_parser = clap::value_parser!(u64).range(1..=43_200))]
    lease: u64,
    /// Heartbeat period in seconds (default: a third of the lease).
    #[arg(long)]
    heartbeat: Option<f64>,
    /// At most this many messages started per second.
    #[arg(long)]
    rate: Option<u32>,
    /// postgres://..., redis://... or memory: skip work already done, never run it twice at once.
    #[arg(long)]
    idempotency: Option<String>,
    /// Seconds in-flight work may finish after SIGTERM (default: two thirds of the lease).
    #[arg(long)]
    grace: Option<u64>,
    /// First retry delay in seconds after a failure, doubled per receive, jittered.
    #[arg(long, default_value = "5")]
    backoff: u64,
    /// Longest retry delay in seconds.
    #[arg(long, default_value = "900")]
    max_backoff: u64,
    /// Put failed messages back at once instead of after a backoff.
    #[arg(long)]
    fail_fast: bool,
    /// Seconds between SIGTERM and SIGKILL when a command's process group is stopped (its
    /// lease could end before it would, or the shutdown grace ran out); default: a sixth of
    /// the lease, at most 5. The stop begins this long (plus slack) before the lease can end.
    #[arg(long, conflicts_with = "http")]
    kill_grace: Option<f64>,
    /// POST each message to this URL instead of running a command, as Elastic Beanstalk's
    /// worker daemon (sqsd) does: the body as the request's, X-Aws-Sqsd-* headers; a 200
    /// deletes it, anything else or no answer in --http-timeout retries after the backoff.
    #[arg(long, value_name = "URL", value_parser = parse_http_url, conflicts_with = "command")]
    http: Option<reqwest::Url>,
    /// Seconds --http waits for an answer (sqsd's inactivity timeout) before the message
    /// fails; the lease is heartbeated meanwhile.
    #[arg(long, default_value = "299", requires = "http", value_parser = clap::value_parser!(u64).range(1..=43_200))]
    http_timeout: u64,
    /// Export each run as an OpenTelemetry span (`process QUEUE`, in the message's trace when
    /// its `traceparent` attribute names one) over OTLP/HTTP to this collector; the command
    /// gets the span as TRACEPARENT.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// With --otlp-endpoint: the share, 0 to 1, of messages without a producer's trace whose
    /// runs start one of their own.
    #[arg(long, env = "LEASEHOLD_TRACE_SAMPLE_RATIO", default_value = "1", value_parser = crate::serve_cmd::parse_ratio)]
    trace_sample_ratio: f64,
    /// The command to run per message: body on stdin, metadata in LEASEHOLD_* variables.
    #[arg(last = true, required_unless_present = "http")]
    command: Vec<String>,
}

/// `--http`: an http URL: the web app is local, as sqsd's is (this build speaks no TLS to
/// it, so an https URL is refused here rather than failing every message).
fn parse_http_url(text: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(text).map_err(|e| format!("not a URL: {e}"))?;
    match url.scheme() {
        "http" => Ok(url),
        other => Err(format!("an http:// URL of a local web app, not {other}:")),
    }
}

fn string_attributes(attrs: &HashMap<String, MessageAttributeValue>) -> String {
    let map: serde_json::Map<String, serde_json::Value> = attrs
        .iter()
        .filter_map(|(k, v)| {
            v.string_value
                .clone()
                .map(|s| (k.clone(), serde_json::Value::String(s)))
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// What every command run shares.
struct Commands {
    command: Vec<String>,
    queue_url: String,
    kill_grace: Duration,
    guardian: Arc<Guardian>,
}

/// Runs the command for one message, in a process group of its own: the terminal's Ctrl-C
/// reaches the worker (which drains), not the command. The group registers with the guardian
/// before the command starts, so it dies with a worker that is killed. If the message's token
/// is cancelled (the run must stop before its lease can end, or the shutdown grace ran out)
/// the whole group gets SIGTERM, then SIGKILL after the kill grace: a `sh -c` wrapper's
/// children die with it. Whatever the command left running in its group when it exits is
/// killed too. The run is over only when its group is empty.
async fn run_command(
    commands: Arc<Commands>,
    m: Message,
) -> Result<(), leasehold_worker::HandlerError> {
    let mut command = tokio::process::Command::new(&commands.command[0]);
    command
        .args(&commands.command[1..])
        .env("LEASEHOLD_MESSAGE_ID", &m.message_id)
        .env("LEASEHOLD_RECEIVE_COUNT", m.receive_count.to_string())
        .env("LEASEHOLD_QUEUE_URL", &commands.queue_url)
        .env(
            "LEASEHOLD_MESSAGE_ATTRIBUTES",
            string_attributes(&m.message_attributes),
        )
        .stdin(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(traceparent) = leasehold_trace::current_traceparent() {
        command.env("TRACEPARENT", traceparent);
    }
    register_with_guardian(&mut command, commands.guardian.fd());
    let mut child = command.spawn()?;
    let Some(pid) = child.id() else {
        return Err("the command exited before it could be watched".into());
    };
    // Dropped in reverse: the group is killed (unless seen empty), then forgotten by the
    // guardian, however this future ends (returned, or dropped by the runtime).
    let _registered = Registered {
        guardian: &commands.guardian,
        group: pid,
    };
    let mut group = ProcessGroup::new(pid);
    // Fed apart, so a command that does not read its input can still be stopped.
    let feeding = child.stdin.take().map(|mut stdin| {
        let body = m.body.clone();
        // A command that does not read its input must not fail the message.
        tokio::spawn(async move { stdin.write_all(body.as_bytes()).await })
    });
    let _stop_feeding = feeding.map(|task| task.abort_handle()).map(AbortOnDrop);
    tokio::select! {
        status = child.wait() => {
            let status = status?;
            group.finish(&mut child).await;
            if status.success() { Ok(()) } else { Err(format!("command exited with {status}").into()) }
        }
        _ = m.cancel.cancelled() => {
            group.stop(&mut child, commands.kill_grace).await;
            Err("the run had to stop (lease or claim could end, or the worker stopped): command and its children killed".into())
        }
    }
}

/// A command's group, registered with the guardian until this is dropped.
struct Registered<'a> {
    guardian: &'a Guardian,
    group: u32,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.guardian.forget(self.group);
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The forked child writes its pid (its group's id) to the guardian before it execs.
#[allow(unsafe_code)]
fn register_with_guardian(command: &mut tokio::process::Command, fd: std::os::fd::RawFd) {
    // SAFETY: the closure runs in the forked child before exec and calls only getpid and
    // write (`guard::register_self`), both async-signal-safe; it allocates nothing.
    unsafe {
        command.pre_exec(move || guard::register_self(fd));
    }
}

pub async fn work(args: WorkArgs) -> anyhow::Result<()> {
    if let Some(program) = args.command.first() {
        check_command(program)?;
    }
    let traces = match &args.otlp_endpoint {
        Some(endpoint) => Some(
            leasehold_trace::GlobalTracing::install(
                endpoint,
                args.trace_sample_ratio,
                "leasehold-work",
            )
            .map_err(|e| usage(format!("--otlp-endpoint: {e}")))?,
        ),
        None => None,
    };
    let worked = work_on(args).await;
    if let Some(traces) = traces {
        // Sends the last spans: it waits on the exporter, so off the async workers.
        let _ = tokio::task::spawn_blocking(move || traces.stop()).await;
    }
    worked
}

async fn work_on(args: WorkArgs) -> anyhow::Result<()> {
    let client = sqs_client(&args.sqs, &args.queue_url).await?;
    queue_attributes(&client, &args.queue_url, &[QueueAttributeName::QueueArn]).await?;
    let store = match &args.idempotency {
        Some(url) => Some(Arc::<dyn IdempotencyStore>::from(open_store(url).await?)),
        None => None,
    };
    let shutdown = crate::cancelled_on_shutdown();
    let lease = Duration::from_secs(args.lease);
    let kill_grace = match (args.kill_grace, &args.http) {
        // A request is aborted at once: the stop's grace is the runtime's slack alone.
        (_, Some(_)) => Duration::ZERO,
        (None, None) => leasehold_worker::default_stop_grace(lease, Duration::from_secs(5)),
        (Some(seconds), None) => Duration::try_from_secs_f64(seconds)
            .map_err(|_| usage("--kill-grace must be a number of seconds >= 0"))?,
    };
    let mut builder = Worker::builder(client, args.queue_url.clone())
        .concurrency(args.concurrency as usize)
        .lease(lease)
        // The command's group is stopped within the kill grace and emptied right after; the
        // runtime drops the run only once all of that had time.
        .stop_grace(
            kill_grace
                .saturating_add(crate::group::KILL_WAIT)
                .saturating_add(Duration::from_millis(150)),
        )
        .backoff(Backoff {
            base: Duration::from_secs(args.backoff),
            cap: Duration::from_secs(args.max_backoff),
        })
        .fail_fast(args.fail_fast)
        .shutdown(shutdown.clone());
    if let Some(h) = args.heartbeat {
        let every = Duration::try_from_secs_f64(h)
            .map_err(|_| usage("--heartbeat must be a number of seconds > 0"))?;
        builder = builder.heartbeat(every);
    }
    if let Some(r) = args.rate {
        builder = builder.rate_limit(r);
    }
    if let Some(g) = args.grace {
        builder = builder.grace(Duration::from_secs(g));
    }
    if let Some(store) = store {
        builder = builder.idempotency(store);
    }
    if let Err(SettingsError::NoRoomForHeartbeat {
        heartbeat, slack, ..
    }) = builder.check()
    {
        // --http has no kill grace to shorten.
        let (grace, shorten) = match args.http {
            Some(_) => (String::new(), "--heartbeat"),
            None => (
                format!("--kill-grace {:.2} s, ", kill_grace.as_secs_f64()),
                "--kill-grace or --heartbeat",
            ),
        };
        return Err(usage(format!(
            "{grace}a heartbeat every {:.2} s and {:.2} s of slack leave a heartbeat no time in \
             a {} s --lease: a run must be stopped before its lease can end; lengthen --lease, \
             or shorten {shorten}",
            heartbeat.as_secs_f64(),
            slack.as_secs_f64(),
            args.lease
        )));
    }
    if let Some(url) = args.http {
        let timeout = Duration::from_secs(args.http_timeout);
        let connections = args.concurrency as usize;
        let target = Arc::new(HttpTarget::new(url, &args.queue_url, connections, timeout)?);
        let worker = builder
            .handler(move |m| http_target::post(target.clone(), m))
            .build();
        tracing::info!(queue = %args.queue_url, "worker started");
        let stats = worker.run().await;
        tracing::info!(?stats, "worker stopped");
        return Ok(());
    }
    let guardian = Guardian::start(shutdown.clone())?;
    let commands = Arc::new(Commands {
        command: args.command.clone(),
        queue_url: args.queue_url.clone(),
        kill_grace,
        guardian: guardian.clone(),
    });
    let worker = builder
        .handler(move |m| run_command(commands.clone(), m))
        .build();
    tracing::info!(queue = %args.queue_url, "worker started");
    let stats = worker.run().await;
    tracing::info!(?stats, "worker stopped");
    guardian.finish().await
}

#[cfg(test)]
mod tests {
    use super::endpoint_of;

    #[test]
    fn a_queue_urls_endpoint_is_its_own_unless_it_is_aws() {
        assert_eq!(
            endpoint_of("http://127.0.0.1:9324/000000000000/jobs").as_deref(),
            Some("http://127.0.0.1:9324")
        );
        assert_eq!(
            endpoint_of("https://queues.internal/1/jobs").as_deref(),
            Some("https://queues.internal")
        );
        assert_eq!(
            endpoint_of("https://sqs.eu-west-1.amazonaws.com/123456789012/jobs"),
            None
        );
        assert_eq!(endpoint_of("jobs"), None);
    }
}

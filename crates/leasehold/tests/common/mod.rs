//! Starting the real `leasehold` binary for tests, and SDK clients for it.

#![allow(dead_code)] // each test binary uses its own part

pub mod checker;
pub mod pressure;
pub mod proxy;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_credential_types::Credentials;
use aws_sdk_sqs::config::{BehaviorVersion, Region};
use aws_sdk_sqs::Client;

pub const POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
pub const REDIS_URL: &str = "redis://127.0.0.1:6379";

/// A connection to the test database.
pub async fn postgres_admin() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(POSTGRES_URL, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// A schema of a test's own on the test database (`{prefix}_<random>`), an admin connection
/// to drop it with, and the URL that works in it.
pub async fn postgres_schema(prefix: &str) -> (tokio_postgres::Client, String, String) {
    let client = postgres_admin().await;
    let name = format!("{prefix}_{}", rand::random::<u32>());
    client
        .batch_execute(&format!("CREATE SCHEMA {name}"))
        .await
        .unwrap();
    let url = format!("{POSTGRES_URL}?options=-c%20search_path%3D{name}");
    (client, name, url)
}

pub struct Server {
    child: Child,
    pub port: u16,
}

/// `leasehold work` against `server`'s `url`, with test credentials and quiet output: the
/// caller adds its flags and `-- COMMAND`, then spawns it.
pub fn leasehold_work(server: &Server, url: &str) -> Command {
    leasehold_work_at(&server.endpoint(), url)
}

/// `leasehold work` as `leasehold_work`, through another endpoint (a proxy's).
pub fn leasehold_work_at(endpoint: &str, url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    command
        .args(["work", "--endpoint-url", endpoint, "--queue-url", url])
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// Waits (at most 20 s) until something listens on `port`.
pub fn wait_until_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "server did not listen within 20 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Server {
    /// `leasehold serve` with these extra arguments, on `port`, waiting until it listens.
    pub fn start_on(port: u16, extra: &[&str], data_dir: Option<&Path>) -> Server {
        let mut args: Vec<std::ffi::OsString> = extra.iter().map(Into::into).collect();
        match data_dir {
            Some(dir) => args.extend(["--data-dir".into(), dir.into()]),
            None => args.push("--in-memory".into()),
        };
        Self::serve(port, &args)
    }

    /// `leasehold serve` on the PostgreSQL database at `url`.
    pub fn start_postgres(url: &str) -> Server {
        Self::serve(free_port(), &["--postgres".into(), url.into()])
    }

    /// `leasehold serve` on the PostgreSQL database at `url`, encrypting with the keys of
    /// `key_file`.
    pub fn start_postgres_keyed(url: &str, key_file: &Path) -> Server {
        let args = [
            "--postgres".into(),
            url.into(),
            "--encryption-key-file".into(),
        ];
        Self::serve(free_port(), &[&args[..], &[key_file.into()]].concat())
    }

    fn serve(port: u16, args: &[std::ffi::OsString]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
        command
            .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
            .args(args);
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the leasehold binary starts");
        wait_until_listening(port);
        Server { child, port }
    }

    pub fn start(extra: &[&str]) -> Server {
        Self::start_on(free_port(), extra, None)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn client(&self) -> Client {
        client(self.port)
    }

    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client(port: u16) -> Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(format!("http://127.0.0.1:{port}"))
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
        .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
        .timeout_config(
            aws_sdk_sqs::config::timeout::TimeoutConfig::builder()
                .operation_timeout(Duration::from_secs(30))
                .build(),
        )
        .build();
    Client::from_conf(config)
}

/// One receive of up to ten messages, not waiting.
pub async fn receive_ten(sqs: &Client, url: &str) -> Vec<aws_sdk_sqs::types::Message> {
    sqs.receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default()
}

/// Visible plus in-flight plus delayed messages of a queue.
pub async fn stored(sqs: &Client, url: &str) -> u64 {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let attrs = out.attributes.unwrap();
    [
        aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages,
        aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesDelayed,
    ]
    .iter()
    .map(|a| attrs[a].parse::<u64>().unwrap())
    .sum()
}

/// Creates a queue with default attributes and returns its URL.
pub async fn create_queue(sqs: &Client, name: &str) -> String {
    sqs.create_queue()
        .queue_name(name)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap()
}

/// Creates a queue whose visibility timeout is `lease_s` and returns its URL.
pub async fn create_queue_leased(sqs: &Client, name: &str, lease_s: u32) -> String {
    sqs.create_queue()
        .queue_name(name)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            lease_s.to_string(),
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap()
}

/// The URL of an existing queue.
pub async fn queue_url(sqs: &Client, name: &str) -> String {
    sqs.get_queue_url()
        .queue_name(name)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap()
}

/// Sends one message, which must be acknowledged.
pub async fn send(sqs: &Client, url: &str, body: &str) {
    sqs.send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .unwrap();
}

/// Visible messages of a queue (not in flight, not delayed).
pub async fn visible(sqs: &Client, url: &str) -> u64 {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&A::ApproximateNumberOfMessages]
        .parse()
        .unwrap()
}

/// Waits until `done` holds, failing the test after `limit`.
pub async fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A process a test started, killed when the test ends however it ends (a failed assertion
/// must not leave a server running).
pub struct Running(Option<Child>);

impl Running {
    pub fn new(child: Child) -> Running {
        Running(Some(child))
    }

    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// SIGTERM, then everything the process wrote to its piped stderr.
    pub fn terminate(mut self) -> String {
        use std::io::Read;
        let mut child = self.0.take().expect("running");
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill runs");
        child.wait().expect("the process ends");
        let mut logs = String::new();
        if let Some(mut stderr) = child.stderr.take() {
            stderr.read_to_string(&mut logs).expect("stderr reads");
        }
        logs
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Restarts the machine's PostgreSQL (its `main` cluster of the newest version).
pub fn restart_postgres() {
    let version = std::fs::read_dir("/etc/postgresql")
        .expect("PostgreSQL's clusters are under /etc/postgresql")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .max()
        .expect("a PostgreSQL version");
    let status = std::process::Command::new("pg_ctlcluster")
        .args(["--skip-systemctl-redirect", &version, "main", "restart"])
        .status()
        .expect("pg_ctlcluster runs");
    assert!(status.success(), "pg_ctlcluster restart failed");
}

/// The terminal's Ctrl-C to a worker started in a process group of its own, as a shell runs a
/// foreground job: SIGINT to the group; then how the worker exited, within 10 s.
#[allow(unsafe_code)] // a signal through libc, to a process group this test started
pub async fn interrupt(worker: &mut Child) -> std::process::ExitStatus {
    assert_eq!(
        unsafe { libc::kill(-(worker.id() as i32), libc::SIGINT) },
        0
    );
    let mut exited = None;
    wait_for(
        "the worker drained and exited",
        Duration::from_secs(10),
        || {
            exited = worker.try_wait().unwrap();
            exited.is_some()
        },
    )
    .await;
    exited.expect("waited for")
}

//! `leasehold work` under faults, checked against its promise: no two runs of one message
//! overlap, ever. Every command takes a lock on its message (`flock`, held by everything it
//! starts, a background child included, and let go by the kernel only when the last of them
//! is gone) or logs an overlap; a scenario also checks the lock itself at the moment another
//! consumer gets the message. Faults: the SQS connection stalled by a proxy, a command that
//! ignores SIGTERM, the worker SIGKILLed, a command that forks, a shutdown.

mod common;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use common::proxy::{Fault, Proxy};
use common::{Running, Server, POSTGRES_URL};

/// A scenario's directory: the commands' log and their locks.
struct Scene {
    dir: tempfile::TempDir,
}

impl Scene {
    fn new() -> Scene {
        Scene {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn count(&self, prefix: &str) -> usize {
        self.log().iter().filter(|l| l.starts_with(prefix)).count()
    }

    fn lock_path(&self, message_id: &str) -> PathBuf {
        self.dir.path().join(format!("{message_id}.lock"))
    }

    /// Whether no run of the message is alive: its lock can be taken.
    fn lock_is_free(&self, message_id: &str) -> bool {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.lock_path(message_id))
            .unwrap();
        file.try_lock().is_ok()
    }

    /// The command every scenario runs: it takes its message's lock or logs an overlap,
    /// logs its start, then does `work`.
    fn command(&self, work: &str) -> Vec<String> {
        let script = format!(
            r#"exec 9>>"$DIR/$LEASEHOLD_MESSAGE_ID.lock"
if ! flock -n 9; then echo "overlap $LEASEHOLD_MESSAGE_ID" >> "$DIR/log"; exit 1; fi
echo "start $LEASEHOLD_MESSAGE_ID" >> "$DIR/log"
{work}"#
        );
        ["sh", "-c", &script].map(str::to_string).to_vec()
    }

    /// `leasehold work` through `endpoint` with `flags`, its logs in `worker.log`, running
    /// `work` per message.
    fn worker(&self, endpoint: &str, url: &str, flags: &[&str], work: &str) -> Child {
        common::leasehold_work_at(endpoint, url)
            .args(flags)
            .arg("--")
            .args(self.command(work))
            .env("DIR", self.dir.path())
            .stderr(std::fs::File::create(self.dir.path().join("worker.log")).unwrap())
            .spawn()
            .unwrap()
    }

    async fn until_logged(&self, prefix: &str, n: usize, limit: Duration) {
        common::wait_for(&format!("{n} {prefix:?} lines"), limit, || {
            self.count(prefix) >= n
        })
        .await;
    }
}

async fn send(sqs: &Client, url: &str, body: &str) -> String {
    sqs.send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .unwrap()
        .message_id
        .unwrap()
}

async fn until_deleted(sqs: &Client, url: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while common::stored(sqs, url).await > 0 {
        assert!(
            Instant::now() < deadline,
            "the message deleted within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Another consumer, straight to the server: polls until it receives `message_id`, and says
/// whether the first run's lock was free at that moment.
async fn second_consumer_finds_the_run_gone(
    sqs: &Client,
    url: &str,
    scene: &Scene,
    message_id: &str,
    limit: Duration,
) -> Duration {
    let started = Instant::now();
    while started.elapsed() < limit {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .wait_time_seconds(1)
            .visibility_timeout(60)
            .send()
            .await
            .unwrap();
        if let Some(m) = out.messages.unwrap_or_default().first() {
            assert_eq!(m.message_id.as_deref(), Some(message_id));
            assert!(
                scene.lock_is_free(message_id),
                "another consumer received the message while its first run was alive: {:?}",
                scene.log()
            );
            return started.elapsed();
        }
    }
    panic!(
        "the message never came back within {limit:?}: {:?}",
        scene.log()
    );
}

/// Loops forever, ignoring SIGTERM (the trap logs it), logging that it is alive.
const IGNORES_SIGTERM: &str = r#"trap 'echo "term $(date +%s.%N)" >> "$DIR/log"' TERM
while :; do echo "alive $(date +%s.%N)" >> "$DIR/log"; sleep 0.1; done"#;

/// The seconds between the first `term` line and the last `alive` line.
fn alive_after_sigterm(scene: &Scene) -> f64 {
    let time = |line: &String| line.split(' ').nth(1).unwrap().parse::<f64>().unwrap();
    let log = scene.log();
    let term = log.iter().find(|l| l.starts_with("term")).map(time);
    let last_alive = log.iter().rev().find(|l| l.starts_with("alive")).map(time);
    last_alive.unwrap() - term.expect("the command got SIGTERM")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_ignores_sigterm_is_killed_before_its_stalled_lease_can_end() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue_leased(&sqs, "stalled", 6).await;
    let id = send(&sqs, &url, "job").await;
    let proxy = Proxy::start(server.port).await;
    let scene = Scene::new();
    let flags = ["--lease", "6", "--kill-grace", "2"];
    let worker = Running::new(scene.worker(&proxy.endpoint(), &url, &flags, IGNORES_SIGTERM));
    scene
        .until_logged("start", 1, Duration::from_secs(10))
        .await;
    // Every heartbeat from now on hangs: the lease runs out on the server unless the run
    // is gone first.
    proxy.set(Fault::Stall);
    second_consumer_finds_the_run_gone(&sqs, &url, &scene, &id, Duration::from_secs(15)).await;
    let kept = alive_after_sigterm(&scene);
    assert!(
        (1.5..3.5).contains(&kept),
        "the command had its 2 s --kill-grace between SIGTERM and SIGKILL: {kept:.2} s"
    );
    assert_eq!(scene.count("overlap"), 0);
    proxy.set(Fault::None);
    drop(worker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_gives_a_message_back_only_once_its_command_is_gone() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue_leased(&sqs, "drained", 6).await;
    let id = send(&sqs, &url, "job").await;
    let scene = Scene::new();
    let flags = ["--lease", "6", "--grace", "1", "--kill-grace", "2"];
    let worker = Running::new(scene.worker(&server.endpoint(), &url, &flags, IGNORES_SIGTERM));
    scene
        .until_logged("start", 1, Duration::from_secs(10))
        .await;
    worker.terminate();
    let logs = std::fs::read_to_string(scene.dir.path().join("worker.log")).unwrap();
    // The worker waited its 1 s grace, gave the command its 2 s, then released the message.
    let waited =
        second_consumer_finds_the_run_gone(&sqs, &url, &scene, &id, Duration::from_secs(3)).await;
    assert!(
        waited < Duration::from_secs(2),
        "released at once: {waited:?}"
    );
    let kept = alive_after_sigterm(&scene);
    assert!((1.5..3.5).contains(&kept), "{kept:.2} s; {logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_worker_killed_outright_takes_its_commands_with_it() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue_leased(&sqs, "killed-outright", 3).await;
    let id = send(&sqs, &url, "job").await;
    let scene = Scene::new();
    let flags = [
        "--lease",
        "3",
        "--backoff",
        "1",
        "--idempotency",
        POSTGRES_URL,
    ];
    // The command forks a child that would outlive it, then waits.
    let mut first = scene.worker(&server.endpoint(), &url, &flags, "sleep 60 & sleep 60");
    scene
        .until_logged("start", 1, Duration::from_secs(10))
        .await;
    first.kill().unwrap();
    first.wait().unwrap();
    let killed = Instant::now();
    common::wait_for(
        "the command's group to die with its worker",
        Duration::from_secs(1),
        || scene.lock_is_free(&id),
    )
    .await;
    let gone_after = killed.elapsed();
    // Another worker does the work, once, after the first's lease and claim have lapsed.
    let second = Running::new(scene.worker(
        &server.endpoint(),
        &url,
        &flags,
        r#"echo "effect $LEASEHOLD_MESSAGE_ID" >> "$DIR/log""#,
    ));
    scene
        .until_logged("effect", 1, Duration::from_secs(20))
        .await;
    until_deleted(&sqs, &url, Duration::from_secs(5)).await;
    drop(second);
    assert_eq!(scene.count("effect"), 1, "{:?}", scene.log());
    assert_eq!(scene.count("overlap"), 0, "{:?}", scene.log());
    assert!(gone_after < Duration::from_secs(1), "{gone_after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_forks_and_exits_leaves_nothing_running() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue_leased(&sqs, "forks", 6).await;
    let id = send(&sqs, &url, "job").await;
    let scene = Scene::new();
    let worker = Running::new(scene.worker(
        &server.endpoint(),
        &url,
        &["--lease", "6"],
        r#"sleep 60 & echo "effect $LEASEHOLD_MESSAGE_ID" >> "$DIR/log""#,
    ));
    scene
        .until_logged("effect", 1, Duration::from_secs(10))
        .await;
    until_deleted(&sqs, &url, Duration::from_secs(5)).await;
    assert!(
        scene.lock_is_free(&id),
        "the background child was killed before the message was deleted"
    );
    drop(worker);
}

fn lock_file(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
}

#[test]
fn the_lock_the_commands_take_is_the_one_the_test_checks() {
    let scene = Scene::new();
    let held = lock_file(&scene.lock_path("m"));
    held.lock().unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&scene.command("echo ran >> \"$DIR/log\"")[2])
        .env("DIR", scene.dir.path())
        .env("LEASEHOLD_MESSAGE_ID", "m")
        .status()
        .unwrap();
    assert!(!out.success());
    assert_eq!(scene.log(), vec!["overlap m".to_string()]);
    drop(held);
    assert!(scene.lock_is_free("m"));
}

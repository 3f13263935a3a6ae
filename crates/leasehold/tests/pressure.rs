//! Short of memory or disk, the real binary throttles new messages and keeps draining; it
//! never dies and loses nothing acknowledged.
//!
//! - In a memory cgroup of 256 MiB, 1 GiB of 200 KiB messages goes in through the SDK with its
//!   retries: the kernel never kills the server, its resident memory stays under the limit,
//!   and every acknowledged message is there after a restart in the same cgroup.
//! - On a file system of 48 MiB (tmpfs), sends fill it to the disk reserve and are then
//!   refused with `RequestThrottled`, while 200 messages are received and deleted; once space
//!   is freed, sends are taken again without a restart, and a restart finds every
//!   acknowledged, undeleted message.
//!
//! Needs root (cgroups, mount), as CI has.

#![allow(unsafe_code)] // geteuid through libc

mod common;

use std::collections::HashSet;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_credential_types::Credentials;
use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Region};
use aws_sdk_sqs::Client;
use common::{free_port, wait_until_listening};
use leasehold_server::pressure::resident_bytes_of;

fn need_root(what: &str) {
    assert_eq!(unsafe { libc::geteuid() }, 0, "{what} needs root");
}

/// A memory cgroup of the test's own (v2 where the unified hierarchy has the memory
/// controller, else v1), removed at the end.
struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    fn new(limit: u64) -> Cgroup {
        need_root("a memory cgroup");
        let name = format!("leasehold-test-{}", std::process::id());
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers");
        let unified = std::fs::read_to_string(v2).is_ok_and(|c| c.contains("memory"));
        let (dir, limit_file) = if unified {
            (Path::new("/sys/fs/cgroup").join(&name), "memory.max")
        } else {
            (
                Path::new("/sys/fs/cgroup/memory").join(&name),
                "memory.limit_in_bytes",
            )
        };
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        std::fs::write(dir.join(limit_file), limit.to_string()).unwrap();
        Cgroup { dir }
    }

    /// Whether the kernel killed anything in it for want of memory.
    fn oom_kills(&self) -> u64 {
        let events = std::fs::read_to_string(self.dir.join("memory.events"))
            .or_else(|_| std::fs::read_to_string(self.dir.join("memory.oom_control")))
            .unwrap_or_default();
        events
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Empty once its processes are gone; they may take a moment to leave.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The server, started inside `cgroup` (or anywhere), in a process group of its own.
struct Serving {
    child: Child,
    port: u16,
}

impl Serving {
    fn start(data: &Path, extra: &[&str], cgroup: Option<&Cgroup>) -> Serving {
        let port = free_port();
        let bin = env!("CARGO_BIN_EXE_leasehold");
        let mut args = vec![
            "serve".to_string(),
            "--bind".into(),
            format!("127.0.0.1:{port}"),
            "--data-dir".into(),
            data.display().to_string(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        // The shell joins the cgroup and becomes the server, so nothing it allocates is
        // charged elsewhere.
        let join = match cgroup {
            Some(c) => format!("echo $$ > {}/cgroup.procs && ", c.dir.display()),
            None => String::new(),
        };
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("{join}exec \"$0\" \"$@\""))
            .arg(bin)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("the leasehold binary starts");
        wait_until_listening(port);
        Serving { child, port }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn rss(&self) -> u64 {
        resident_bytes_of(&self.child.id().to_string()).unwrap_or(0)
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An SDK client with the retries a real producer has: standard mode, backing off from
/// `RequestThrottled` by itself, up to `attempts` tries a call.
fn client(server: &Serving, attempts: u32) -> Client {
    let retry = if attempts > 1 {
        RetryConfig::standard()
            .with_max_attempts(attempts)
            .with_max_backoff(Duration::from_secs(2))
    } else {
        RetryConfig::disabled()
    };
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(server.endpoint())
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
        .retry_config(retry)
        .build();
    Client::from_conf(config)
}

/// A body of `size` bytes that starts with its number.
fn body(n: usize, size: usize) -> String {
    let mut body = format!("{n:08}:");
    body.extend(std::iter::repeat_n('x', size - body.len()));
    body
}

/// Sends message `n` of `size` bytes; the error's code when it is refused.
async fn send(sqs: &Client, url: &str, n: usize, size: usize) -> Result<(), String> {
    sqs.send_message()
        .queue_url(url)
        .message_body(body(n, size))
        .send()
        .await
        .map(drop)
        .map_err(|e| code(&e.into_service_error()))
}

/// Receives every message in the queue once (leases long enough not to see one twice) and
/// answers the numbers their bodies start with.
async fn numbers_in(sqs: &Client, url: &str) -> HashSet<usize> {
    let mut seen = HashSet::new();
    loop {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(600)
            .send()
            .await
            .unwrap();
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            return seen;
        }
        for m in messages {
            let number = m.body.unwrap_or_default()[..8].parse().unwrap();
            assert!(seen.insert(number), "message {number} received twice");
        }
    }
}

/// The highest resident memory of `pid`'s server seen while `running`, sampled every 50 ms.
fn watch_rss(pid: u32, running: Arc<AtomicBool>) -> (Arc<AtomicU64>, std::thread::JoinHandle<()>) {
    let peak = Arc::new(AtomicU64::new(0));
    let seen = peak.clone();
    let watcher = std::thread::spawn(move || {
        while running.load(Ordering::Relaxed) {
            let rss = resident_bytes_of(&pid.to_string()).unwrap_or(0);
            seen.fetch_max(rss, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    (peak, watcher)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_four_times_a_memory_cgroup_is_kept_and_survives_a_restart_in_it() {
    const LIMIT: u64 = 256 << 20;
    const SIZE: usize = 200 * 1024;
    const MESSAGES: usize = (1 << 30) / SIZE + 1;
    const PRODUCERS: usize = 8;
    let cgroup = Cgroup::new(LIMIT);
    let data = tempfile::tempdir().unwrap();
    let mut server = Serving::start(data.path(), &[], Some(&cgroup));
    let running = Arc::new(AtomicBool::new(true));
    let (peak, watcher) = watch_rss(server.child.id(), running.clone());
    let sqs = client(&server, 10);
    let url = common::create_queue(&sqs, "backlog").await;

    let started = Instant::now();
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let (sqs, url) = (sqs.clone(), url.clone());
        producers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for n in (p..MESSAGES).step_by(PRODUCERS) {
                if send(&sqs, &url, n, SIZE).await.is_ok() {
                    acked.push(n);
                }
            }
            acked
        }));
    }
    let mut acked = HashSet::new();
    for producer in producers {
        acked.extend(producer.await.unwrap());
    }
    let sending = started.elapsed();
    assert!(server.alive(), "the server died under the backlog");
    let resident = server.rss();
    println!(
        "{} of {MESSAGES} sends of {} KiB acknowledged in {:.1} s; resident {} MiB after, peak {} MiB",
        acked.len(),
        SIZE >> 10,
        sending.as_secs_f64(),
        resident >> 20,
        peak.load(Ordering::Relaxed) >> 20
    );
    assert!(
        acked.len() * SIZE >= 1 << 30,
        "only {} MiB acknowledged",
        (acked.len() * SIZE) >> 20
    );

    server.kill();
    let restarted_at = Instant::now();
    let mut again = Serving::start(data.path(), &[], Some(&cgroup));
    println!(
        "restarted in the cgroup in {:.2} s",
        restarted_at.elapsed().as_secs_f64()
    );
    running.store(false, Ordering::Relaxed);
    watcher.join().unwrap();
    let running = Arc::new(AtomicBool::new(true));
    let (peak_after, watcher) = watch_rss(again.child.id(), running.clone());
    let sqs = client(&again, 3);
    let found = numbers_in(&sqs, &url).await;
    running.store(false, Ordering::Relaxed);
    watcher.join().unwrap();
    assert!(
        again.alive(),
        "the restarted server died while serving the backlog"
    );
    let lost: Vec<_> = acked.difference(&found).collect();
    assert!(lost.is_empty(), "acknowledged and lost: {lost:?}");
    let peak = peak
        .load(Ordering::Relaxed)
        .max(peak_after.load(Ordering::Relaxed));
    println!(
        "peak resident memory {} MiB of {} MiB",
        peak >> 20,
        LIMIT >> 20
    );
    assert!(peak < LIMIT, "resident memory reached {} MiB", peak >> 20);
    assert_eq!(cgroup.oom_kills(), 0, "the kernel killed for memory");
    again.kill();
}

/// A tmpfs of `size` bytes mounted for the test's life.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn new(size: u64) -> Tmpfs {
        need_root("a tmpfs mount");
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "mount tmpfs failed");
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// The error code of a failed SDK call.
fn code<E: aws_sdk_sqs::error::ProvideErrorMetadata>(error: &E) -> String {
    error.code().unwrap_or("(none)").to_string()
}

#[tokio::test]
async fn on_a_full_disk_sends_wait_while_consumers_drain_and_resume_without_a_restart() {
    const SIZE: usize = 32 * 1024;
    let disk = Tmpfs::new(48 << 20);
    let filler = disk.path().join("filler");
    std::fs::write(&filler, vec![1u8; 16 << 20]).unwrap();
    let data = disk.path().join("data");
    let server = Serving::start(&data, &["--disk-reserve-mb", "8"], None);
    let sqs = client(&server, 1);
    let url = common::create_queue(&sqs, "full").await;

    // Fill it: sends are taken until the reserve is reached, then refused as throttled.
    let mut acked = Vec::new();
    let mut refused = 0;
    let mut n = 0;
    while refused < 3 {
        n += 1;
        assert!(n < 5_000, "the disk reserve was never reached");
        match send(&sqs, &url, n, SIZE).await {
            Ok(()) => acked.push(n),
            Err(code) => {
                assert_eq!(code, "RequestThrottled");
                refused += 1;
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        }
    }
    println!(
        "{} sends of {} KiB taken before the reserve",
        acked.len(),
        SIZE >> 10
    );
    assert!(acked.len() > 200, "too few sends to drain: {}", acked.len());
    let ready: serde_json::Value = reqwest::get(format!("{}/ready", server.endpoint()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["sends"], "refused", "{ready}");
    // What would grow the server's state otherwise is refused the same way.
    let created = sqs.create_queue().queue_name("grows").send().await;
    assert_eq!(
        created.map_err(|e| code(&e)).err().as_deref(),
        Some("RequestThrottled")
    );
    let tagged = sqs.tag_queue().queue_url(&url).tags("k", "v").send().await;
    assert_eq!(
        tagged.map_err(|e| code(&e)).err().as_deref(),
        Some("RequestThrottled")
    );

    // Consumers drain while sends are refused.
    let mut deleted = HashSet::new();
    while deleted.len() < 200 {
        let got = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .send()
            .await
            .expect("a receive while the disk is full");
        for m in got.messages.unwrap_or_default() {
            if deleted.len() == 200 {
                break;
            }
            sqs.delete_message()
                .queue_url(&url)
                .receipt_handle(m.receipt_handle.unwrap())
                .send()
                .await
                .expect("a delete while the disk is full");
            deleted.insert(m.body.unwrap()[..8].parse::<usize>().unwrap());
        }
    }

    // Space returns: sends are taken again, by themselves.
    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = Vec::new();
    while after.len() < 20 {
        assert!(Instant::now() < deadline, "sends were not taken again");
        n += 1;
        match send(&sqs, &url, n, SIZE).await {
            Ok(()) => after.push(n),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }

    // After a restart: every acknowledged message that was not deleted, and no other.
    server.kill();
    let again = Serving::start(&data, &["--disk-reserve-mb", "8"], None);
    let sqs = client(&again, 3);
    let found = numbers_in(&sqs, &url).await;
    let expected: HashSet<usize> = acked
        .into_iter()
        .chain(after)
        .filter(|n| !deleted.contains(n))
        .collect();
    assert_eq!(found, expected);
    again.kill();
}

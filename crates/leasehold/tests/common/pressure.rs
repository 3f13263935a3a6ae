//! What the pressure tests share: the real server started in a memory cgroup or on a small
//! tmpfs of the test's own (both need root, as CI has), and SDK clients with a producer's
//! retries.

#![allow(unsafe_code)] // geteuid through libc

use std::collections::HashSet;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_credential_types::Credentials;
use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Region};
use aws_sdk_sqs::Client;
use leasehold_server::pressure::resident_bytes_of;

use super::free_port;
use super::wait_until_listening;

pub fn need_root(what: &str) {
    assert_eq!(unsafe { libc::geteuid() }, 0, "{what} needs root");
}

/// A memory cgroup of the test's own (v2 where the unified hierarchy has the memory
/// controller, else v1), removed at the end.
pub struct Cgroup {
    pub dir: PathBuf,
}

impl Cgroup {
    pub fn new(limit: u64) -> Cgroup {
        need_root("a memory cgroup");
        // Each cgroup its own name: tests of one binary run side by side.
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let made = MADE.fetch_add(1, Ordering::Relaxed);
        let name = format!("leasehold-test-{}-{made}", std::process::id());
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
    pub fn oom_kills(&self) -> u64 {
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
pub struct Serving {
    pub child: Child,
    pub port: u16,
}

impl Serving {
    pub fn start(data: &Path, extra: &[&str], cgroup: Option<&Cgroup>) -> Serving {
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

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn rss(&self) -> u64 {
        resident_bytes_of(&self.child.id().to_string()).unwrap_or(0)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn kill(mut self) {
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
pub fn client(server: &Serving, attempts: u32) -> Client {
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
pub fn body(n: usize, size: usize) -> String {
    let mut body = format!("{n:08}:");
    body.extend(std::iter::repeat_n('x', size - body.len()));
    body
}

/// Sends message `n` of `size` bytes; the error's code when it is refused.
pub async fn send(sqs: &Client, url: &str, n: usize, size: usize) -> Result<(), String> {
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
pub async fn numbers_in(sqs: &Client, url: &str) -> HashSet<usize> {
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
pub fn watch_rss(
    pid: u32,
    running: Arc<AtomicBool>,
) -> (Arc<AtomicU64>, std::thread::JoinHandle<()>) {
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

/// A tmpfs of `size` bytes mounted for the test's life.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn new(size: u64) -> Tmpfs {
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

    pub fn path(&self) -> &Path {
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
pub fn code<E: aws_sdk_sqs::error::ProvideErrorMetadata>(error: &E) -> String {
    error.code().unwrap_or("(none)").to_string()
}

//! The power-cut test: the real binary keeps its data on an ext4 file system of its own (a
//! loop device), which is shut down mid-run with `EXT4_IOC_SHUTDOWN` and no log flush, as a
//! power cut would: whatever was not synced is gone. Then the file system is mounted again and
//! a new server reads what survived. `--fsync always` must lose nothing acknowledged;
//! `interval-ms=N` at most what was acknowledged in the last N ms; `never` may lose anything
//! not yet written back, but the data file must still open.
//!
//! And a full disk: sends refused for want of space are never counted or delivered.
//!
//! Needs root (mount, losetup) and `mkfs.ext4`, as CI has.

#![allow(unsafe_code)] // signals and ioctls through libc, on processes this test started

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use common::{free_port, Server};

/// `_IOR('X', 125, __u32)` and its flag that drops the journal's unwritten part.
const EXT4_IOC_SHUTDOWN: libc::c_ulong = 0x8004_587d;
const EXT4_GOING_FLAGS_NOLOGFLUSH: u32 = 2;

/// An ext4 file system in a file, mounted on a loop device for the test's life.
struct Disk {
    _dir: tempfile::TempDir,
    image: PathBuf,
    mount: PathBuf,
    mounted: bool,
}

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} cannot run: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Disk {
    fn new() -> Disk {
        Disk::of_size(64 << 20)
    }

    fn of_size(bytes: u64) -> Disk {
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "the power-cut test needs root to mount a loop device"
        );
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("disk.img");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).unwrap();
        std::fs::File::create(&image)
            .unwrap()
            .set_len(bytes)
            .unwrap();
        run("mkfs.ext4", &["-q", "-F", image.to_str().unwrap()]);
        let mut disk = Disk {
            _dir: dir,
            image,
            mount,
            mounted: false,
        };
        disk.mount();
        disk
    }

    /// Mounted with a one-minute journal commit, so only what the server syncs is on disk.
    fn mount(&mut self) {
        run(
            "mount",
            &[
                "-o",
                "loop,commit=60",
                self.image.to_str().unwrap(),
                self.mount.to_str().unwrap(),
            ],
        );
        self.mounted = true;
    }

    fn unmount(&mut self) {
        if std::mem::take(&mut self.mounted) {
            run("umount", &[self.mount.to_str().unwrap()]);
        }
    }

    /// The power cut: the file system stops at once and forgets what was not synced.
    fn cut_power(&self) {
        let dir = std::fs::File::open(&self.mount).unwrap();
        let flags = EXT4_GOING_FLAGS_NOLOGFLUSH;
        let rc = unsafe {
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(&dir),
                EXT4_IOC_SHUTDOWN,
                &flags,
            )
        };
        assert_eq!(
            rc,
            0,
            "EXT4_IOC_SHUTDOWN: {}",
            std::io::Error::last_os_error()
        );
    }

    fn data(&self) -> PathBuf {
        self.mount.join("data")
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        }
    }
}

/// Sends one message at a time for `seconds`, noting when each was acknowledged.
async fn send_for(sqs: &Client, url: &str, seconds: f64) -> Vec<(String, Instant)> {
    let started = Instant::now();
    let mut acked = Vec::new();
    let mut n = 0;
    while started.elapsed().as_secs_f64() < seconds {
        n += 1;
        let body = format!("m{n}");
        if sqs
            .send_message()
            .queue_url(url)
            .message_body(&body)
            .send()
            .await
            .is_ok()
        {
            acked.push((body, Instant::now()));
        }
    }
    acked
}

/// Every message body a fresh server finds in the queue, or none when the queue is gone.
async fn surviving(data: &Path) -> HashSet<String> {
    let server = Server::start_on(free_port(), &[], Some(data));
    let sqs = server.client();
    let mut found = HashSet::new();
    let Ok(url) = sqs.get_queue_url().queue_name("powered").send().await else {
        return found;
    };
    let url = url.queue_url.unwrap();
    loop {
        let got = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .visibility_timeout(600)
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default();
        if got.is_empty() {
            return found;
        }
        found.extend(got.into_iter().filter_map(|m| m.body));
    }
}

/// Runs the server on a fresh disk with `fsync`, sends for two seconds, cuts the power, and
/// returns what was acknowledged (with when), when the power went, and what survived.
async fn power_cut(fsync: &str) -> (Vec<(String, Instant)>, Instant, HashSet<String>) {
    let mut disk = Disk::new();
    let server = Server::start_on(free_port(), &["--fsync", fsync], Some(&disk.data()));
    let sqs = server.client();
    let url = common::create_queue(&sqs, "powered").await;
    let acked = send_for(&sqs, &url, 2.0).await;
    disk.cut_power();
    let cut = Instant::now();
    server.kill();
    disk.unmount();
    disk.mount();
    let found = surviving(&disk.data()).await;
    let lost = acked.iter().filter(|(b, _)| !found.contains(b)).count();
    println!(
        "--fsync {fsync}: {} acknowledged, {} survived the power cut, {lost} lost",
        acked.len(),
        found.len()
    );
    (acked, cut, found)
}

#[tokio::test]
async fn fsync_always_loses_nothing_acknowledged_in_a_power_cut() {
    let (acked, _, found) = power_cut("always").await;
    assert!(acked.len() > 50, "too few sends to judge: {}", acked.len());
    let lost: Vec<_> = acked.iter().filter(|(b, _)| !found.contains(b)).collect();
    assert!(lost.is_empty(), "{} acknowledged sends lost", lost.len());
}

#[tokio::test]
async fn fsync_interval_loses_at_most_its_interval_in_a_power_cut() {
    let interval = Duration::from_millis(200);
    // The sync that follows the interval takes a moment of its own on a loop device.
    let slack = Duration::from_millis(300);
    let (acked, cut, found) = power_cut("interval-ms=200").await;
    let old_enough: Vec<_> = acked
        .iter()
        .filter(|(_, at)| *at + interval + slack <= cut)
        .collect();
    assert!(
        old_enough.len() > 50,
        "too few sends to judge: {}",
        old_enough.len()
    );
    let lost: Vec<_> = old_enough
        .iter()
        .filter(|(b, _)| !found.contains(b))
        .collect();
    assert!(
        lost.is_empty(),
        "{} sends acknowledged more than {:?} before the cut were lost",
        lost.len(),
        interval + slack
    );
}

#[tokio::test]
async fn fsync_never_may_lose_work_but_the_data_file_still_opens_after_a_power_cut() {
    let (acked, _, found) = power_cut("never").await;
    let sent: HashSet<&String> = acked.iter().map(|(b, _)| b).collect();
    // `surviving` started a server on the file: it was not refused as damaged. What it holds
    // is part of what was acknowledged, never anything else.
    assert!(
        found.iter().all(|b| sent.contains(b)),
        "a message nobody sent"
    );
}

#[tokio::test]
async fn on_a_full_disk_refused_sends_are_never_counted_or_delivered() {
    let disk = Disk::of_size(24 << 20);
    // No disk reserve: this is about the writes that still find the disk full.
    let server = Server::start_on(free_port(), &["--disk-reserve-mb", "0"], Some(&disk.data()));
    let sqs = server.client();
    let url = common::create_queue(&sqs, "full").await;
    let body = "x".repeat(256 * 1024);
    let (mut acked, mut refused) = (0, 0);
    while refused < 5 && acked < 1_000 {
        let sent = sqs
            .send_message()
            .queue_url(&url)
            .message_body(&body)
            .send()
            .await;
        match sent {
            Ok(_) if refused == 0 => acked += 1,
            Ok(_) => panic!("a send was acknowledged after the disk had failed"),
            Err(_) => refused += 1,
        }
    }
    assert_eq!(refused, 5, "the disk never filled ({acked} sends)");
    let counted = common::stored(&sqs, &url).await;
    println!("full disk: {acked} sends acknowledged, {counted} counted");
    assert_eq!(counted, acked as u64);
    server.kill();
    // After a restart (here on the same full disk), the same messages and no others.
    let restarted = Server::start_on(free_port(), &[], Some(&disk.data()));
    let again = restarted.client();
    let url = common::queue_url(&again, "full").await;
    assert_eq!(common::stored(&again, &url).await, acked as u64);
}

//! Short of memory, the real binary throttles new messages and keeps draining; it never dies
//! and loses nothing acknowledged.
//!
//! - In a memory cgroup of 256 MiB, 1 GiB of 200 KiB messages goes in through the SDK with its
//!   retries: the kernel never kills the server, its resident memory stays under the limit,
//!   and every acknowledged message is there after a restart in the same cgroup.
//!
//! Needs root (cgroups), as CI has. A full disk: `full_disk.rs`.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use common::pressure::{client, numbers_in, send, watch_rss, Cgroup, Serving};

/// The tests take turns: each fills a server to its memory limit, and two at once on two
/// cores would measure each other.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_four_times_a_memory_cgroup_is_kept_and_survives_a_restart_in_it() {
    let _turn = ONE_AT_A_TIME.lock().await;
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

/// Issue 46, defect 5: receives were outside the memory budget. A receive of ten 1 MiB
/// messages holds several copies of them at once (the store's, the decoded, the rendered
/// answer); many at once in a 256 MiB cgroup must not bring the kernel's OOM killer, and
/// every message is received once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_receives_of_big_messages_stay_inside_a_memory_cgroup() {
    let _turn = ONE_AT_A_TIME.lock().await;
    const LIMIT: u64 = 256 << 20;
    const SIZE: usize = (1 << 20) - 4096;
    const MESSAGES: usize = 200;
    const RECEIVERS: usize = 48;
    let cgroup = Cgroup::new(LIMIT);
    let data = tempfile::tempdir().unwrap();
    let mut server = Serving::start(data.path(), &[], Some(&cgroup));
    let sqs = client(&server, 10);
    let url = common::create_queue(&sqs, "big").await;
    for n in 0..MESSAGES {
        send(&sqs, &url, n, SIZE).await.unwrap();
    }
    let running = Arc::new(AtomicBool::new(true));
    let (peak, watcher) = watch_rss(server.child.id(), running.clone());
    let mut receivers = Vec::new();
    for _ in 0..RECEIVERS {
        let (sqs, url) = (sqs.clone(), url.clone());
        receivers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let received = sqs
                    .receive_message()
                    .queue_url(&url)
                    .max_number_of_messages(10)
                    .visibility_timeout(600)
                    .send()
                    .await;
                let Ok(received) = received else {
                    return Err(format!("{received:?}"));
                };
                let messages = received.messages.unwrap_or_default();
                if messages.is_empty() {
                    return Ok(got);
                }
                for m in messages {
                    let body = m.body.unwrap_or_default();
                    assert_eq!(body.len(), SIZE);
                    got.push(body[..8].parse::<usize>().unwrap());
                }
            }
        }));
    }
    let mut seen = HashSet::new();
    let mut failed = Vec::new();
    for receiver in receivers {
        match receiver.await.unwrap() {
            Ok(got) => {
                for n in got {
                    assert!(seen.insert(n), "message {n} received twice");
                }
            }
            Err(error) => failed.push(error),
        }
    }
    running.store(false, Ordering::Relaxed);
    watcher.join().unwrap();
    let peak = peak.load(Ordering::Relaxed);
    println!(
        "{} of {MESSAGES} messages of 1 MiB received by {RECEIVERS} receivers; peak resident {} MiB of {} MiB",
        seen.len(),
        peak >> 20,
        LIMIT >> 20
    );
    assert!(server.alive(), "the server died");
    assert_eq!(cgroup.oom_kills(), 0, "the kernel killed for memory");
    assert!(failed.is_empty(), "receives failed: {failed:?}");
    assert_eq!(seen.len(), MESSAGES);
    server.kill();
}

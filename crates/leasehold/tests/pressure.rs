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

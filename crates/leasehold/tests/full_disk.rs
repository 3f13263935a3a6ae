//! Short of disk, the real binary throttles new messages and keeps draining; it never dies,
//! never spins, and loses nothing acknowledged. On small tmpfs mounts of the test's own
//! (needs root, as CI has):
//!
//! - Sends fill the file system to the disk reserve and are then refused with
//!   `RequestThrottled`, while 200 messages are received and deleted; once space is freed,
//!   sends are taken again without a restart, and a restart finds every acknowledged,
//!   undeleted message.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::pressure::{client, code, numbers_in, send, Serving, Tmpfs};

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

/// CPU time (user and system, in clock ticks) the process `pid` has used.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Fills what is left of the file system at `path` with a file of its own, to the last block.
fn fill_to_the_last_block(path: &std::path::Path) {
    use std::io::Write;
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![2u8; 64 << 10];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
    // Whatever is short of a chunk, byte by byte in smaller writes.
    let mut small = 4096;
    while small > 0 {
        if file.write(&chunk[..small]).is_err() {
            small /= 2;
        }
    }
    let _ = file.sync_all();
}

/// Issue 46, defect 3: the operator's remedy on a full disk. With the data directory's file
/// system filled by another process to its last block, PurgeQueue is taken, the server does
/// not spin a core trying to free space it has no room to free, and once the other file is
/// removed the queue is empty and sends are taken again, with no restart.
#[tokio::test]
async fn a_purge_on_a_disk_filled_to_its_last_block_is_taken_and_sends_resume() {
    const SIZE: usize = 32 * 1024;
    let disk = Tmpfs::new(48 << 20);
    let data = disk.path().join("data");
    let server = Serving::start(&data, &["--disk-reserve-mb", "8"], None);
    let sqs = client(&server, 1);
    let url = common::create_queue(&sqs, "purged").await;
    let mut n = 0;
    let mut refused = 0;
    while refused < 3 {
        n += 1;
        assert!(n < 5_000, "the disk reserve was never reached");
        if send(&sqs, &url, n, SIZE).await.is_err() {
            refused += 1;
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }
    let other = disk.path().join("other");
    fill_to_the_last_block(&other);

    let purged = client(&server, 3)
        .purge_queue()
        .queue_url(&url)
        .send()
        .await;
    assert!(
        purged.is_ok(),
        "PurgeQueue on a full disk: {:?}",
        purged.map_err(|e| code(&e.into_service_error()))
    );
    let before = cpu_ticks(server.child.id());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let used = cpu_ticks(server.child.id()) - before;
    // 100 ticks a second: a core spinning for 3 s uses 300.
    assert!(
        used < 60,
        "the server used {used} ticks of CPU in 3 s on a full disk"
    );

    std::fs::remove_file(&other).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = HashSet::new();
    while after.len() < 20 {
        assert!(
            Instant::now() < deadline,
            "sends were not taken again after space returned"
        );
        n += 1;
        match send(&sqs, &url, n, SIZE).await {
            Ok(()) => {
                after.insert(n);
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert_eq!(
        numbers_in(&sqs, &url).await,
        after,
        "purged messages came back"
    );
    server.kill();
}

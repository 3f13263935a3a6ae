//! The crash test: the real binary under a bounded load from several clients, killed with
//! SIGKILL at random moments, restarted on the same data directory. Every acknowledged send
//! must still be there or have been deleted; no acknowledged delete may come back.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, SendMessageBatchRequestEntry};
use aws_sdk_sqs::Client;
use common::{free_port, Server};
use rand::{Rng, SeedableRng};

const CRASHES: usize = 5;
const CLIENTS: usize = 4;

#[derive(Default)]
struct Ledger {
    acked_sends: HashSet<String>,
    attempted_deletes: HashSet<String>,
    acked_deletes: HashSet<String>,
    receives: HashMap<String, u32>,
    operations_acked: u64,
}

/// One client: sends batches, receives, sometimes extends or releases, deletes what it got.
async fn load(sqs: Client, url: String, who: usize, round: usize, ledger: Arc<Mutex<Ledger>>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64((round * 100 + who) as u64);
    let mut n = 0u64;
    loop {
        let entries: Vec<_> = (0..rng.random_range(1..=5))
            .map(|i| {
                n += 1;
                SendMessageBatchRequestEntry::builder()
                    .id(format!("e{i}"))
                    .message_body(format!("r{round}-c{who}-{n}"))
                    .build()
                    .unwrap()
            })
            .collect();
        let bodies: Vec<String> = entries
            .iter()
            .map(|e| e.message_body().to_string())
            .collect();
        match sqs
            .send_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries))
            .send()
            .await
        {
            Ok(out) if out.failed.is_empty() => {
                let mut l = ledger.lock().unwrap();
                l.acked_sends.extend(bodies);
                l.operations_acked += 1;
            }
            _ => return,
        }
        let visibility = rng.random_range(1..=5);
        let Ok(out) = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .visibility_timeout(visibility)
            .send()
            .await
        else {
            return;
        };
        let messages = out.messages.unwrap_or_default();
        {
            let mut l = ledger.lock().unwrap();
            l.operations_acked += 1;
            for m in &messages {
                *l.receives.entry(m.body.clone().unwrap()).or_default() += 1;
            }
        }
        let mut deletes = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let handle = m.receipt_handle.clone().unwrap();
            match rng.random_range(0..10) {
                0 => {
                    if sqs
                        .change_message_visibility()
                        .queue_url(&url)
                        .receipt_handle(&handle)
                        .visibility_timeout(0)
                        .send()
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                1 => {
                    if sqs
                        .change_message_visibility()
                        .queue_url(&url)
                        .receipt_handle(&handle)
                        .visibility_timeout(30)
                        .send()
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                _ => deletes.push((format!("d{i}"), handle, m.body.clone().unwrap())),
            }
        }
        if deletes.is_empty() {
            continue;
        }
        ledger
            .lock()
            .unwrap()
            .attempted_deletes
            .extend(deletes.iter().map(|(_, _, b)| b.clone()));
        let entries = deletes
            .iter()
            .map(|(id, handle, _)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(id)
                    .receipt_handle(handle)
                    .build()
                    .unwrap()
            })
            .collect();
        match sqs
            .delete_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries))
            .send()
            .await
        {
            Ok(out) => {
                let ok: HashSet<String> = out.successful.iter().map(|e| e.id.clone()).collect();
                let mut l = ledger.lock().unwrap();
                l.operations_acked += 1;
                for (id, _, body) in &deletes {
                    if ok.contains(id) {
                        l.acked_deletes.insert(body.clone());
                    }
                }
            }
            Err(_) => return,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_servers_lose_nothing_acknowledged() {
    let data_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut url = String::new();
    for round in 0..CRASHES {
        let server = Server::start_on(
            port,
            &["--fsync", "always", "--time-travel"],
            Some(data_dir.path()),
        );
        let sqs = server.client();
        url = sqs
            .create_queue()
            .queue_name("crash")
            .send()
            .await
            .unwrap()
            .queue_url
            .unwrap();
        let clients: Vec<_> = (0..CLIENTS)
            .map(|who| tokio::spawn(load(sqs.clone(), url.clone(), who, round, ledger.clone())))
            .collect();
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..1200))).await;
        server.kill();
        for c in clients {
            let _ = tokio::time::timeout(Duration::from_secs(10), c).await;
        }
    }

    // Restart once more, let every lease run out, and drain the queue.
    let server = Server::start_on(
        port,
        &["--fsync", "always", "--time-travel"],
        Some(data_dir.path()),
    );
    let sqs = server.client();
    let advanced = reqwest::Client::new()
        .post(format!(
            "http://127.0.0.1:{}/_leasehold/clock/advance",
            server.port
        ))
        .json(&serde_json::json!({"seconds": 43_300}))
        .send()
        .await
        .unwrap();
    assert_eq!(advanced.status(), 200);
    let mut remaining = HashSet::new();
    let mut duplicates_in_drain = 0;
    loop {
        let out = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .visibility_timeout(600)
            .send()
            .await
            .unwrap();
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            break;
        }
        for m in messages {
            if !remaining.insert(m.body.clone().unwrap()) {
                duplicates_in_drain += 1;
            }
            sqs.delete_message()
                .queue_url(&url)
                .receipt_handle(m.receipt_handle.unwrap())
                .send()
                .await
                .unwrap();
        }
    }
    server.kill();

    let l = ledger.lock().unwrap();
    let lost: Vec<&String> = l
        .acked_sends
        .iter()
        .filter(|b| !remaining.contains(*b) && !l.attempted_deletes.contains(*b))
        .collect();
    let resurrected: Vec<&String> = l
        .acked_deletes
        .iter()
        .filter(|b| remaining.contains(*b))
        .collect();
    let redelivered = l.receives.values().filter(|n| **n > 1).count();
    let deleted_without_ack = l
        .acked_sends
        .iter()
        .filter(|b| {
            !remaining.contains(*b)
                && !l.acked_deletes.contains(*b)
                && l.attempted_deletes.contains(*b)
        })
        .count();
    println!(
        "crash test: {} operations acknowledged, {} crashes, {} acknowledged sends, {} acknowledged deletes, \
         {} left in the queue, {} deleted by a delete whose answer the crash ate, \
         messages lost: {}, acknowledged deletes resurrected: {}, messages delivered more than once: {}, \
         duplicates in the final drain: {}",
        l.operations_acked,
        CRASHES,
        l.acked_sends.len(),
        l.acked_deletes.len(),
        remaining.len(),
        deleted_without_ack,
        lost.len(),
        resurrected.len(),
        redelivered,
        duplicates_in_drain
    );
    assert!(
        l.acked_sends.len() > 100,
        "the load must have done real work"
    );
    assert!(lost.is_empty(), "acknowledged sends lost: {lost:?}");
    assert!(
        resurrected.is_empty(),
        "acknowledged deletes came back: {resurrected:?}"
    );
    assert_eq!(duplicates_in_drain, 0);
    // Counts add up: each acknowledged send is in exactly one place.
    let in_queue = l
        .acked_sends
        .iter()
        .filter(|b| remaining.contains(*b))
        .count();
    let deleted_with_ack = l
        .acked_sends
        .iter()
        .filter(|b| l.acked_deletes.contains(*b))
        .count();
    assert_eq!(
        in_queue + deleted_with_ack + deleted_without_ack,
        l.acked_sends.len()
    );
    // Everything left over was sent by this test; some sends arrived though their answer died.
    let unacknowledged_arrivals = remaining
        .iter()
        .filter(|b| !l.acked_sends.contains(*b))
        .count();
    assert!(remaining.iter().all(|b| b.starts_with('r')));
    println!(
        "crash test: {unacknowledged_arrivals} sends arrived although the crash ate their answer"
    );
}

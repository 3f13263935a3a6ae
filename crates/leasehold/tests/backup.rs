//! `leasehold backup` against the real binary: a backup taken while clients send restores to
//! a server that holds every message acknowledged before the backup began; a backup never
//! overwrites a file; a directory with no data file is a clear error.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{free_port, Server};

fn backup(data_dir: &std::path::Path, to: &std::path::Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["backup", "--data-dir"])
        .arg(data_dir)
        .arg("--to")
        .arg(to)
        .output()
        .unwrap()
}

#[tokio::test]
async fn a_backup_under_load_restores_every_message_acknowledged_before_it_began() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start_on(free_port(), &[], Some(&data));
    let sqs = server.client();
    let url = common::create_queue(&sqs, "backed-up").await;
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let senders: Vec<_> = (0..4)
        .map(|sender| {
            let (sqs, url, acknowledged, stop) =
                (sqs.clone(), url.clone(), acknowledged.clone(), stop.clone());
            tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let body = format!("{sender}-{n}");
                    if sqs
                        .send_message()
                        .queue_url(&url)
                        .message_body(&body)
                        .send()
                        .await
                        .is_ok()
                    {
                        acknowledged.lock().unwrap().push(body);
                    }
                    n += 1;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before: Vec<String> = acknowledged.lock().unwrap().clone();
    let copy = dir.path().join("leasehold-backup.db");
    let out = backup(&data, &copy);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with("backed up "), "{said}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for sender in senders {
        sender.await.unwrap();
    }
    let all = acknowledged.lock().unwrap().len();
    assert!(before.len() >= 20, "the load was light: {}", before.len());
    assert!(all > before.len(), "sends went on during the backup");
    drop(server);

    // Restore: the copy becomes a new data directory's leasehold.db, beside the key file
    // (kept apart from backups: without it the messages stay encrypted).
    let restored_dir = dir.path().join("restored");
    std::fs::create_dir(&restored_dir).unwrap();
    std::fs::copy(&copy, restored_dir.join("leasehold.db")).unwrap();
    let key = "encryption.key";
    std::fs::copy(data.join(key), restored_dir.join(key)).unwrap();
    let restored = Server::start_on(free_port(), &[], Some(&restored_dir));
    let sqs = restored.client();
    let url = common::queue_url(&sqs, "backed-up").await;
    let mut held = HashSet::new();
    loop {
        let got = common::receive_ten(&sqs, &url).await;
        if got.is_empty() {
            break;
        }
        held.extend(got.into_iter().filter_map(|m| m.body));
    }
    let missing: Vec<_> = before.iter().filter(|b| !held.contains(*b)).collect();
    assert!(missing.is_empty(), "lost in the backup: {missing:?}");
    assert!(held.len() <= all, "the backup holds what was never sent");
}

#[test]
fn a_backup_never_overwrites_and_needs_a_data_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = backup(&dir.path().join("empty"), &dir.path().join("copy.db"));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("there is no data file to back up"),
        "{stderr}"
    );

    let data = dir.path().join("data");
    drop(Server::start_on(free_port(), &[], Some(&data)));
    let existing = dir.path().join("existing.db");
    std::fs::write(&existing, b"precious").unwrap();
    let out = backup(&data, &existing);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("never overwrites"));
    assert_eq!(std::fs::read(&existing).unwrap(), b"precious");
}

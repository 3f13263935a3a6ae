//! `leasehold work` and the processes it starts: a command runs in a process group of its
//! own, and when its lease is lost the whole group goes (SIGTERM, then SIGKILL after
//! `--kill-grace`), grandchildren that ignore SIGTERM included.

mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

use common::{wait_for, Server};

/// Whether a process is running (a zombie is not).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after_name = stat.rfind(')').map(|i| stat[i + 2..].to_string())?;
            after_name.split_whitespace().next().map(|s| s != "Z")
        })
        .unwrap_or(false)
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `leasehold work` in a process group of its own, as a shell runs a foreground job.
fn work(server: &Server, url: &str, script: &str, dir: &Path) -> Child {
    common::leasehold_work(server, url)
        .process_group(0)
        .args(["--lease", "3", "--heartbeat", "1", "--kill-grace", "1"])
        .args(["--", "sh", "-c", script])
        .env("PIDS", dir)
        .spawn()
        .unwrap()
}

#[tokio::test]
async fn a_lost_lease_stops_the_commands_whole_process_group() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue(&sqs, "grouped").await;
    common::send(&sqs, &url, "long job").await;
    let dir = tempfile::tempdir().unwrap();
    // A wrapper shell whose background child ignores SIGTERM, as a careless script's would.
    let script = r#"echo $$ > "$PIDS/shell"; (trap '' TERM; exec sleep 60) & echo $! > "$PIDS/grandchild"; wait"#;
    let mut worker = work(&server, &url, script, dir.path());
    let (shell, grandchild) = (dir.path().join("shell"), dir.path().join("grandchild"));
    wait_for("the command started", Duration::from_secs(10), || {
        read_pid(&grandchild).is_some() && read_pid(&shell).is_some()
    })
    .await;
    let (shell, grandchild) = (read_pid(&shell).unwrap(), read_pid(&grandchild).unwrap());
    assert!(running(shell) && running(grandchild));

    // The message disappears under the worker: its next heartbeat finds the lease gone.
    sqs.purge_queue().queue_url(&url).send().await.unwrap();
    wait_for(
        "the shell and its grandchild were stopped",
        Duration::from_secs(6),
        || !running(shell) && !running(grandchild),
    )
    .await;
    let _ = worker.kill();
    let _ = worker.wait();
}

#[tokio::test]
async fn ctrl_c_drains_the_worker_and_does_not_reach_the_command() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let url = common::create_queue(&sqs, "interrupted").await;
    common::send(&sqs, &url, "job").await;
    let dir = tempfile::tempdir().unwrap();
    let script = r#"touch "$PIDS/started"; sleep 1; touch "$PIDS/finished""#;
    let mut worker = work(&server, &url, script, dir.path());
    wait_for("the command started", Duration::from_secs(10), || {
        dir.path().join("started").exists()
    })
    .await;
    assert!(common::interrupt(&mut worker).await.success());
    assert!(
        dir.path().join("finished").exists(),
        "the command was interrupted"
    );
    assert_eq!(
        common::stored(&sqs, &url).await,
        0,
        "finished work is deleted"
    );
}

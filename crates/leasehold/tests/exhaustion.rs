//! The connection-exhaustion test: the real binary under a 256-descriptor limit, more idle
//! and slowloris connections opened than it may hold. It must keep serving: idle connections
//! are closed after `--idle-timeout`, connections past the limit wait in the backlog instead
//! of failing accept in a loop, and it says once that the limit was reached.

#![allow(unsafe_code)] // signals and ioctls through libc, on processes this test started

mod common;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{client, free_port};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const DESCRIPTORS: libc::rlim_t = 256;
const IDLE: usize = 350;
const SLOWLORIS: usize = 50;

/// Sets the child's descriptor limit, soft and hard, before it runs.
fn limit_descriptors(command: &mut Command) {
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: DESCRIPTORS,
                rlim_max: DESCRIPTORS,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

#[tokio::test]
async fn idle_and_slowloris_connections_past_the_descriptor_limit_do_not_stop_other_clients() {
    let port = free_port();
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    command
        .args(["serve", "--in-memory", "--idle-timeout", "2"])
        .args(["--bind", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap());
    limit_descriptors(&mut command);
    let mut child = command.spawn().unwrap();
    let address = format!("127.0.0.1:{port}");
    common::wait_until_listening(port);

    let mut idle = Vec::new();
    for _ in 0..IDLE {
        idle.push(TcpStream::connect(&address).await.unwrap());
    }
    let slowloris: Vec<_> = (0..SLOWLORIS)
        .map(|_| {
            let address = address.clone();
            tokio::spawn(async move {
                let Ok(mut stream) = TcpStream::connect(&address).await else {
                    return;
                };
                let _ = stream.write_all(b"POST / HTTP/1.1\r\n").await;
                // One header byte every half second, for at most 30 s.
                for _ in 0..60 {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    if stream.write_all(b"X").await.is_err() {
                        return;
                    }
                }
            })
        })
        .collect();

    let sqs = client(port);
    let started = Instant::now();
    let created = sqs.create_queue().queue_name("still-served").send().await;
    let waited = started.elapsed();
    assert!(created.is_ok(), "{created:?}");
    assert!(
        waited < Duration::from_secs(10),
        "a client waited {waited:?} behind idle connections"
    );
    let url = created.unwrap().queue_url.unwrap();
    for i in 0..20 {
        common::send(&sqs, &url, &format!("m{i}")).await;
    }

    assert!(child.try_wait().unwrap().is_none(), "the server died");
    let _ = child.kill();
    let _ = child.wait();
    for task in slowloris {
        task.abort();
    }
    drop(idle);
    let logged = std::fs::read_to_string(log.path()).unwrap();
    assert!(
        logged.contains("connection limit reached"),
        "the limit was not logged:\n{logged}"
    );
    println!("a client got through {IDLE} idle and {SLOWLORIS} slowloris connections in {waited:?}\n{logged}");
}

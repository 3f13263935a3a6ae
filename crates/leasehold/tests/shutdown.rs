//! SIGTERM with clients still connected: the real binary exits within two seconds, answering
//! its hundred waiting receives with no messages, whatever a slow client does, and what it
//! acknowledged is there after a restart.

#![allow(unsafe_code)] // signals and ioctls through libc, on processes this test started

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{client, free_port};
use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn sigterm_ends_the_server_within_two_seconds_answering_a_hundred_waiting_receives_empty() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_until_listening(port);
    let sqs = client(port);
    let url = common::create_queue(&sqs, "closing").await;
    let kept = common::create_queue(&sqs, "kept").await;
    common::send(&sqs, &kept, "acknowledged before the signal").await;
    let polls: Vec<_> = (0..100)
        .map(|_| {
            let (sqs, url) = (sqs.clone(), url.clone());
            tokio::spawn(async move {
                sqs.receive_message()
                    .queue_url(url)
                    .wait_time_seconds(20)
                    .send()
                    .await
                    .map(|out| out.messages.unwrap_or_default().len())
            })
        })
        .collect();
    // A client that sent half a request and went quiet, and one that sent nothing.
    let mut slow = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    slow.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nAction=")
        .await
        .unwrap();
    let _idle = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    // Every poll has reached the server and waits.
    tokio::time::sleep(Duration::from_millis(1_000)).await;

    let started = Instant::now();
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let exited = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("the server was still running 10 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = started.elapsed();
    assert!(exited.success(), "{exited}");
    assert!(took < Duration::from_secs(2), "shutdown took {took:?}");
    assert_eq!(polls.len(), 100);
    for poll in polls {
        assert_eq!(poll.await.unwrap().unwrap(), 0);
    }
    println!("SIGTERM to exit with 100 long polls waiting: {took:?}");

    let restarted = common::Server::start_on(port, &[], Some(dir.path()));
    assert_eq!(common::stored(&restarted.client(), &kept).await, 1);
}

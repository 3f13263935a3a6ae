//! `leasehold serve`'s command line, against the real binary.

mod common;

use common::{free_port, wait_until_listening};

#[tokio::test]
async fn serve_binds_to_a_host_name() {
    let port = free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "serve",
            "--in-memory",
            "--bind",
            &format!("localhost:{port}"),
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until_listening(port);
    let queues = common::client(port).list_queues().send().await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(queues.is_ok(), "{queues:?}");
}

#[test]
fn serve_refuses_a_bind_that_does_not_resolve_as_a_usage_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--in-memory", "--bind", "no-such-host.invalid:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: invalid value 'no-such-host.invalid:1' for '--bind"),
        "{stderr}"
    );
}

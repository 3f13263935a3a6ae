//! Two real `leasehold serve --postgres` processes on one database (the machine's
//! PostgreSQL, a schema of the test's own), driven through the AWS SDK: any server answers
//! any request about the same queues.

mod common;

use std::time::{Duration, Instant};

use common::{create_queue, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_servers_share_queues_leases_fifo_order_and_long_polls() {
    let (admin, schema, url) = common::postgres_schema("leasehold_cluster").await;
    // One key file for the cluster: its queues are encrypted at rest, as by default.
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("encryption.key");
    let a = Server::start_postgres_keyed(&url, &key_file);
    let b = Server::start_postgres_keyed(&url, &key_file);
    let (on_a, on_b) = (a.client(), b.client());
    let queue = create_queue(&on_a, "shared").await;
    for i in 0..3 {
        common::send(&on_a, &queue, &format!("m{i}")).await;
    }
    // Received on B, deleted on A with B's handles.
    let got = common::receive_ten(&on_b, &queue).await;
    let mut bodies: Vec<_> = got.iter().filter_map(|m| m.body.clone()).collect();
    bodies.sort();
    assert_eq!(bodies, ["m0", "m1", "m2"]);
    for message in &got {
        on_a.delete_message()
            .queue_url(&queue)
            .receipt_handle(message.receipt_handle.clone().unwrap())
            .send()
            .await
            .unwrap();
    }
    assert_eq!(common::stored(&on_b, &queue).await, 0);

    // A long poll on B is answered by a send on A, well before its wait ends.
    let waiting = {
        let (on_b, queue) = (on_b.clone(), queue.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let out = on_b
                .receive_message()
                .queue_url(&queue)
                .wait_time_seconds(10)
                .send()
                .await
                .unwrap();
            (started.elapsed(), out.messages.unwrap_or_default())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    common::send(&on_a, &queue, "wake up").await;
    let (waited, messages) = waiting.await.unwrap();
    assert_eq!(messages.len(), 1);
    assert!(waited < Duration::from_secs(3), "{waited:?}");

    // A lease taken on A holds on B, and its end is seen on B.
    let short = on_a
        .create_queue()
        .queue_name("short")
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            "1",
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    common::send(&on_b, &short, "leased").await;
    assert_eq!(common::receive_ten(&on_a, &short).await.len(), 1);
    assert!(common::receive_ten(&on_b, &short).await.is_empty());
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(common::receive_ten(&on_b, &short).await.len(), 1);

    // One FIFO group, sent and received on alternating servers, one at a time: in order.
    let fifo = on_b
        .create_queue()
        .queue_name("ordered.fifo")
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::ContentBasedDeduplication,
            "true",
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    for i in 0..6 {
        let sqs = if i % 2 == 0 { &on_a } else { &on_b };
        sqs.send_message()
            .queue_url(&fifo)
            .message_body(format!("f{i}"))
            .message_group_id("g")
            .send()
            .await
            .unwrap();
    }
    for i in 0..6 {
        let sqs = if i % 2 == 0 { &on_b } else { &on_a };
        let got = sqs
            .receive_message()
            .queue_url(&fifo)
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].body.as_deref(), Some(format!("f{i}").as_str()));
        // The group waits for this one: the other server has nothing to hand out.
        let other = if i % 2 == 0 { &on_a } else { &on_b };
        assert!(common::receive_ten(other, &fifo).await.is_empty());
        sqs.delete_message()
            .queue_url(&fifo)
            .receipt_handle(got[0].receipt_handle.clone().unwrap())
            .send()
            .await
            .unwrap();
    }

    let stored = admin
        .query(
            &format!("SELECT m::text FROM {schema}.leasehold_messages m"),
            &[],
        )
        .await
        .unwrap();
    assert!(!stored.is_empty());
    for row in &stored {
        let row: String = row.get(0);
        assert!(!row.contains("leased"), "a body in the clear: {row}");
    }

    // A server given another key file is refused at start, in one line.
    let other_key = keys.path().join("other.key");
    std::fs::write(&other_key, format!("1 {}\n", "11".repeat(32))).unwrap();
    let owner_only = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    std::fs::set_permissions(&other_key, owner_only).unwrap();
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--bind", "127.0.0.1:0", "--postgres", &url])
        .arg("--encryption-key-file")
        .arg(&other_key)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(said.contains("different key numbered 1"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");

    drop((a, b));
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
}

#[test]
fn postgres_a_server_that_cannot_reach_its_database_says_so_in_one_line() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "serve",
            "--postgres",
            "postgres://postgres@127.0.0.1:1/test",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0]
            .starts_with("leasehold: cannot connect to PostgreSQL at postgres@127.0.0.1:1/test: "),
        "{stderr}"
    );
    let malformed = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--postgres", "postgres://[::1"])
        .output()
        .unwrap();
    assert_eq!(malformed.status.code(), Some(2));
}

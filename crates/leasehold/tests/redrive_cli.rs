//! `leasehold redrive` through the real binary: the checks at start, FIFO groups kept in
//! order, a dry run that lists and releases at once.

mod common;

use std::process::Command;

use aws_sdk_sqs::types::QueueAttributeName as A;
use aws_sdk_sqs::Client;
use common::Server;
use serde_json::Value;

/// `leasehold redrive ARGS --json`: the exit code, the report, stderr.
fn redrive(server: &Server, args: &[&str]) -> (Option<i32>, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["redrive", "--endpoint-url", &server.endpoint(), "--json"])
        .args(args)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code(),
        report,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `--from FROM --to TO` with the in-memory store and `--blind`, then `extra`.
fn blind<'a>(from: &'a str, to: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--from",
        from,
        "--to",
        to,
        "--idempotency",
        "memory",
        "--blind",
    ];
    args.extend_from_slice(extra);
    args
}

/// A source queue whose RedrivePolicy names a dead-letter queue; returns (source, dlq).
async fn pair(sqs: &Client, name: &str, fifo: bool) -> (String, String) {
    let suffix = if fifo { ".fifo" } else { "" };
    let mut fifo_attrs = vec![];
    if fifo {
        fifo_attrs = vec![
            (A::FifoQueue, "true"),
            (A::ContentBasedDeduplication, "true"),
        ];
    }
    let create = |queue: String, extra: Vec<(A, String)>| {
        let mut request = sqs.create_queue().queue_name(queue);
        for (k, v) in fifo_attrs
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .chain(extra)
        {
            request = request.attributes(k, v);
        }
        request.send()
    };
    let dlq_name = format!("{name}-dlq{suffix}");
    let dlq = create(dlq_name.clone(), vec![])
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let policy = format!(
        r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:{dlq_name}","maxReceiveCount":2}}"#
    );
    let source = create(format!("{name}{suffix}"), vec![(A::RedrivePolicy, policy)])
        .await
        .unwrap()
        .queue_url
        .unwrap();
    (source, dlq)
}

#[tokio::test]
async fn a_redrive_that_makes_no_sense_is_refused_at_start() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let (source, dlq) = pair(&sqs, "checked", false).await;
    let other = common::create_queue(&sqs, "unrelated").await;
    common::send(&sqs, &other, "x").await;
    let missing = source.replace("checked", "missing");
    let cases: [(&[&str], &str); 4] = [
        (&blind(&dlq, &dlq, &[]), "the same queue"),
        (
            &blind(&other, &source, &[]),
            "is not the dead-letter queue of",
        ),
        (
            &["--from", &dlq, "--to", &source, "--idempotency", "memory"],
            "--blind",
        ),
        (&blind(&dlq, &missing, &[]), "QueueDoesNotExist"),
    ];
    for (args, says) in cases {
        let (code, _, err) = redrive(&server, args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert_eq!(common::stored(&sqs, &other).await, 1, "nothing moved");
    // --force moves from a queue that is not the dead-letter queue.
    let (code, report, err) = redrive(&server, &blind(&other, &source, &["--force"]));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(report["moved"], 1);
}

#[tokio::test]
async fn a_fifo_redrive_keeps_each_groups_order_and_a_second_run_moves_nothing() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let (source, dlq) = pair(&sqs, "ordered", true).await;
    for body in ["a1", "b1", "a2", "a3", "b2"] {
        sqs.send_message()
            .queue_url(&dlq)
            .message_body(body)
            .message_group_id(&body[..1])
            .send()
            .await
            .unwrap();
    }
    let args = blind(&dlq, &source, &[]);
    let (code, report, err) = redrive(&server, &args);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        (report["moved"].as_u64(), report["failed"].as_u64()),
        (Some(5), Some(0))
    );
    let mut order: Vec<String> = Vec::new();
    loop {
        let got = common::receive_ten(&sqs, &source).await;
        if got.is_empty() {
            break;
        }
        for m in got {
            order.push(m.body.clone().unwrap());
            sqs.delete_message()
                .queue_url(&source)
                .receipt_handle(m.receipt_handle.unwrap())
                .send()
                .await
                .unwrap();
        }
    }
    let group = |g: &str| {
        order
            .iter()
            .filter(|b| b.starts_with(g))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(group("a"), ["a1", "a2", "a3"]);
    assert_eq!(group("b"), ["b1", "b2"]);
    let (code, report, _) = redrive(&server, &args);
    assert_eq!((code, report["moved"].as_u64()), (Some(0), Some(0)));
}

#[tokio::test]
async fn a_dry_run_lists_each_message_and_leaves_it_visible() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let (source, dlq) = pair(&sqs, "looked-at", false).await;
    for i in 0..3 {
        common::send(&sqs, &dlq, &format!("m{i}")).await;
    }
    let (code, report, err) = redrive(&server, &blind(&dlq, &source, &["--dry-run"]));
    assert_eq!(code, Some(0), "{err}");
    let messages = report["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{report}");
    assert!(messages
        .iter()
        .all(|m| m["verdict"] == "would_move" && m["message_id"].is_string()));
    assert_eq!(
        common::visible(&sqs, &dlq).await,
        3,
        "released at once, not held for a lease"
    );
    assert_eq!(common::stored(&sqs, &source).await, 0);
}

#[tokio::test]
async fn a_message_that_cannot_be_moved_is_named_with_its_reason_released_and_fails_the_run() {
    let server = Server::start(&[]);
    let sqs = server.client();
    let (source, dlq) = pair(&sqs, "small", false).await;
    // The source takes nothing over 1 KiB: the big message cannot go back.
    sqs.set_queue_attributes()
        .queue_url(&source)
        .attributes(A::MaximumMessageSize, "1024")
        .send()
        .await
        .unwrap();
    common::send(&sqs, &dlq, "fits").await;
    common::send(&sqs, &dlq, &"x".repeat(2048)).await;
    let (code, report, err) = redrive(&server, &blind(&dlq, &source, &[]));
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        (report["moved"].as_u64(), report["failed"].as_u64()),
        (Some(1), Some(1))
    );
    let failed = report["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["verdict"] == "failed")
        .unwrap();
    assert!(
        failed["reason"].as_str().unwrap().contains("send to"),
        "{failed}"
    );
    assert!(err.contains("could not be moved"), "{err}");
    assert_eq!(
        common::visible(&sqs, &dlq).await,
        1,
        "the failed message is back in the DLQ at once"
    );
}

//! Dead-letter queues and message move tasks through the SDK.

use std::time::{Duration, Instant};

use aws_sdk_sqs::types::MessageSystemAttributeName as S;

use crate::harness::{code, TestServer};

fn arn(name: &str) -> String {
    format!("arn:aws:sqs:us-east-1:000000000000:{name}")
}

fn redrive(dlq: &str, max: u32) -> String {
    format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":{max}}}"#,
        arn(dlq)
    )
}

#[tokio::test]
async fn a_message_past_max_receive_count_moves_to_the_dlq_on_the_next_receive() {
    let s = TestServer::start().await;
    let dlq = s.queue("dlq", &[]).await;
    let src = s
        .queue(
            "src",
            &[
                ("VisibilityTimeout", "5"),
                ("RedrivePolicy", &redrive("dlq", 1)),
            ],
        )
        .await;
    let sent = s.send(&src, "poison").await;
    assert_eq!(s.receive(&src, 1).await.len(), 1);
    s.advance(5).await;
    assert!(
        s.receive(&src, 1).await.is_empty(),
        "moved instead of delivered"
    );
    let moved = s
        .sqs
        .receive_message()
        .queue_url(&dlq)
        .message_system_attribute_names(S::All)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap()
        .remove(0);
    assert_eq!(moved.message_id.as_deref(), Some(sent.as_str()));
    assert_eq!(
        moved.attributes.unwrap()[&S::DeadLetterQueueSourceArn],
        arn("src")
    );
    let sources = s
        .sqs
        .list_dead_letter_source_queues()
        .queue_url(&dlq)
        .send()
        .await
        .unwrap();
    assert_eq!(sources.queue_urls, [src]);
}

#[tokio::test]
async fn a_rate_limited_move_task_keeps_moving_in_the_background() {
    let s = TestServer::start().await;
    s.queue("dlq", &[]).await;
    let src = s
        .queue(
            "src",
            &[
                ("VisibilityTimeout", "1"),
                ("RedrivePolicy", &redrive("dlq", 1)),
            ],
        )
        .await;
    for i in 0..3 {
        s.send(&src, &format!("m{i}")).await;
    }
    s.receive(&src, 10).await;
    s.advance(1).await;
    assert!(s.receive(&src, 10).await.is_empty());
    s.sqs
        .start_message_move_task()
        .source_arn(arn("dlq"))
        .max_number_of_messages_per_second(1)
        .send()
        .await
        .unwrap();
    let err = s
        .sqs
        .start_message_move_task()
        .source_arn(arn("dlq"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InvalidParameterValue");
    // The clock jumps; the server's background runner moves what the rate now allows.
    s.advance(10).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let task = loop {
        let tasks = s
            .sqs
            .list_message_move_tasks()
            .source_arn(arn("dlq"))
            .send()
            .await
            .unwrap();
        let task = tasks.results.unwrap().remove(0);
        if task.status.as_deref() == Some("COMPLETED") || Instant::now() > deadline {
            break task;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(task.status.as_deref(), Some("COMPLETED"));
    assert_eq!(task.approximate_number_of_messages_moved, 3);
    assert_eq!(task.approximate_number_of_messages_to_move, Some(3));
    assert_eq!(s.receive(&src, 10).await.len(), 3);
}

#[tokio::test]
async fn move_task_errors_use_aws_codes() {
    let s = TestServer::start().await;
    s.queue("plain", &[]).await;
    let err = s
        .sqs
        .start_message_move_task()
        .source_arn(arn("plain"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InvalidParameterValue");
    let err = s
        .sqs
        .start_message_move_task()
        .source_arn(arn("absent"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "ResourceNotFoundException");
    let err = s
        .sqs
        .cancel_message_move_task()
        .task_handle("bogus")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InvalidParameterValue");
}

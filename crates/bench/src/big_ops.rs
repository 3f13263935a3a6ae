//! The `big-ops` scenario: what one large operation costs everybody else. Two queues are
//! filled; a probe client keeps sending, receiving and deleting on a third while the first is
//! purged (at a quarter of the run) and the second deleted (at half). The probe's latency,
//! above all its maximum, is the stall.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::scenario::{create_queue, one_client_report, preload, receive_delete, Bodies, Tally};
use crate::{BenchConfig, BenchError, Report, SqsClient};

pub async fn run(
    sqs: &SqsClient,
    config: &BenchConfig,
    preloaded: u64,
    stamp: u128,
) -> Result<Report, BenchError> {
    let body = "x".repeat(config.body_bytes);
    let purged = create_queue(sqs, &format!("bench-big-ops-{stamp}-purged")).await?;
    let deleted = create_queue(sqs, &format!("bench-big-ops-{stamp}-deleted")).await?;
    let probe = create_queue(sqs, &format!("bench-big-ops-{stamp}-probe")).await?;
    for url in [&purged, &deleted] {
        let bodies = Bodies::new(url, &body, config.group_id.as_deref());
        preload(sqs, &bodies, preloaded, config.clients).await;
    }
    let big = {
        let sqs = sqs.clone();
        let period = config.duration / 4;
        tokio::spawn(async move {
            let mut t = Tally::default();
            tokio::time::sleep(period).await;
            t.call(&sqs, "PurgeQueue", json!({"QueueUrl": purged}))
                .await;
            tokio::time::sleep(period).await;
            t.call(&sqs, "DeleteQueue", json!({"QueueUrl": deleted}))
                .await;
            t
        })
    };
    let mut t = Tally::default();
    let started = Instant::now();
    let bodies = Bodies::new(&probe, &body, config.group_id.as_deref());
    let send = json!({"QueueUrl": probe, "MessageBody": body});
    while started.elapsed() < config.duration {
        let answer = t.call(sqs, "SendMessage", send.clone()).await;
        t.sent += u64::from(answer.is_some());
        receive_delete(&mut t, sqs, &bodies, false).await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    if let Ok(big) = big.await {
        t.merge(big);
    }
    let _ = sqs.call("DeleteQueue", &json!({"QueueUrl": probe})).await;
    Ok(one_client_report(
        "big-ops",
        &t,
        started.elapsed().as_secs_f64(),
    ))
}

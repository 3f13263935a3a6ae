//! A `lambda` fleet's controller: every `scaling.interval_s` it reads the queue's visible
//! count (`ApproximateNumberOfMessages`: the backlog a Lambda SQS event source's pollers
//! scale with, as the simulator models it) and starts
//! or stops consumer processes by the simulator's rule (`Scenario::lambda_change`): toward
//! one consumer per visible message, within the limit and the ramp; an idle consumer is
//! stopped, a busy one (its newest execution running, from the downstream table) left to
//! finish.

use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use aws_sdk_sqs::Client;
use leasehold_sim::Scenario;
use leasehold_worker::CancellationToken;
use tokio::time::Instant;

use crate::downstream::Downstream;
use crate::processes::Processes;
use crate::LabError;

/// The queue's visible count as the server answers `GetQueueAttributes`.
async fn visible(client: &Client, queue_url: &str) -> Result<u64, LabError> {
    let name = QueueAttributeName::ApproximateNumberOfMessages;
    let count = crate::run::queue_attribute(client, queue_url, name).await?;
    count
        .parse()
        .map_err(|_| LabError::Server(format!("not a visible count: {count:?}")))
}

/// Scales the fleet from the run's `start` (the first decision at once, as the simulator's)
/// until `stop`. A decision that fails (the server or the database did not answer) is
/// skipped and told on stderr; the next interval decides again. A consumer that cannot be
/// started ends the control with its error (the caller stops the run).
pub async fn control(
    scenario: &Scenario,
    (client, queue_url): (&Client, &str),
    downstream: &Downstream,
    processes: &tokio::sync::Mutex<Processes>,
    start: Instant,
    stop: CancellationToken,
) -> Result<(), LabError> {
    let interval = Duration::from_secs_f64(scenario.scaling.interval_s.max(0.1));
    for k in 0u32.. {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep_until(start + interval * k) => {}
        }
        let decided = async {
            let visible = visible(client, queue_url).await?;
            let busy = downstream.busy_workers().await?;
            let mut processes = processes.lock().await;
            let change = scenario.lambda_change(visible, processes.active());
            processes.scale(change, &busy).await
        };
        let decided = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            decided = decided => decided,
        };
        if let Err(e) = decided {
            if matches!(e, LabError::Setup(_)) {
                // A consumer process that cannot start will not start next time either.
                return Err(e);
            }
            tracing::warn!("the lambda fleet's controller skipped an interval: {e}");
        }
    }
    Ok(())
}

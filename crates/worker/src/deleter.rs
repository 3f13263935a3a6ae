//! Batched deletes: handles finished within a few milliseconds of each other share one
//! DeleteMessageBatch call.

use std::time::Duration;

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use aws_sdk_sqs::Client;
use tokio::sync::{mpsc, oneshot};

const MAX_WAIT: Duration = Duration::from_millis(5);

type Job = (String, oneshot::Sender<Result<(), String>>);

#[derive(Clone)]
pub struct Deleter {
    jobs: mpsc::UnboundedSender<Job>,
}

impl Deleter {
    pub fn spawn(client: Client, queue_url: String) -> (Deleter, tokio::task::JoinHandle<()>) {
        let (jobs, mut rx) = mpsc::unbounded_channel::<Job>();
        let task = tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                let deadline = tokio::time::Instant::now() + MAX_WAIT;
                while batch.len() < 10 {
                    match tokio::time::timeout_at(deadline, rx.recv()).await {
                        Ok(Some(job)) => batch.push(job),
                        _ => break,
                    }
                }
                let entries = batch
                    .iter()
                    .enumerate()
                    .map(|(i, (handle, _))| {
                        DeleteMessageBatchRequestEntry::builder()
                            .id(format!("d{i}"))
                            .receipt_handle(handle)
                            .build()
                            .expect("id and handle set")
                    })
                    .collect();
                let result = client
                    .delete_message_batch()
                    .queue_url(&queue_url)
                    .set_entries(Some(entries))
                    .send()
                    .await;
                match result {
                    Ok(out) => {
                        for (i, (_, done)) in batch.into_iter().enumerate() {
                            let failed = out.failed.iter().find(|f| f.id == format!("d{i}"));
                            let _ = done.send(failed.map_or(Ok(()), |f| {
                                Err(format!(
                                    "{}: {}",
                                    f.code,
                                    f.message.clone().unwrap_or_default()
                                ))
                            }));
                        }
                    }
                    Err(e) => {
                        let reason = crate::errors::one_line(&e);
                        for (_, done) in batch {
                            let _ = done.send(Err(reason.clone()));
                        }
                    }
                }
            }
        });
        (Deleter { jobs }, task)
    }

    pub async fn delete(&self, handle: String) -> Result<(), String> {
        let (done, wait) = oneshot::channel();
        self.jobs
            .send((handle, done))
            .map_err(|_| "the deleter stopped".to_string())?;
        wait.await.map_err(|_| "the deleter stopped".to_string())?
    }
}

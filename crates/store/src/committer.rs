//! Group commit: one writer thread takes every batch waiting, writes them as one transaction
//! and, under `--fsync always`, one fsync; only then are their requests answered.

use std::str::FromStr;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::batch::WriteBatch;
use crate::{Store, StoreError};

/// At most this many requests share one commit, bounding its latency.
const MAX_GROUP: usize = 4096;

/// When acknowledged writes reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// fsync before every answer: nothing acknowledged is lost, even on power loss.
    Always,
    /// fsync every so often: a crash of the server loses nothing; a power cut loses up to
    /// this much acknowledged work.
    Interval(Duration),
    /// never fsync explicitly: a crash of the server loses nothing; a power cut loses what
    /// the operating system had not yet written.
    Never,
}

impl FromStr for Durability {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "always" => Ok(Durability::Always),
            "never" => Ok(Durability::Never),
            other => other
                .strip_prefix("interval-ms=")
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|n| *n > 0)
                .map(|n| Durability::Interval(Duration::from_millis(n)))
                .ok_or_else(|| {
                    format!("expected always, interval-ms=N (N > 0) or never, not {other:?}")
                }),
        }
    }
}

struct Job {
    batch: WriteBatch,
    done: Option<oneshot::Sender<Result<(), StoreError>>>,
}

pub struct Committer {
    jobs: Option<mpsc::Sender<Job>>,
    writer: Option<JoinHandle<()>>,
}

impl Committer {
    pub fn start(store: Box<dyn Store>, durability: Durability) -> Committer {
        let (jobs, rx) = mpsc::channel();
        let writer = std::thread::Builder::new()
            .name("leasehold-commit".into())
            .spawn(move || run(store, durability, rx))
            .expect("the commit thread starts");
        Committer {
            jobs: Some(jobs),
            writer: Some(writer),
        }
    }

    /// Queues a batch; the answer says when it is written (and synced, if so configured).
    /// Batches are written in the order they are submitted.
    pub fn submit(
        &self,
        batch: WriteBatch,
    ) -> impl std::future::Future<Output = Result<(), StoreError>> {
        let (done, wait) = oneshot::channel();
        let queued = self.send(Job {
            batch,
            done: Some(done),
        });
        async move {
            queued?;
            wait.await
                .unwrap_or_else(|_| Err(StoreError::Failed("the commit thread stopped".into())))
        }
    }

    /// Queues a batch nobody waits for (background work such as message move tasks).
    pub fn submit_detached(&self, batch: WriteBatch) {
        let _ = self.send(Job { batch, done: None });
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        self.jobs
            .as_ref()
            .and_then(|jobs| jobs.send(job).ok())
            .ok_or_else(|| StoreError::Failed("the commit thread stopped".into()))
    }

    /// Writes what is queued, syncs, and stops the writer.
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.jobs.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn run(mut store: Box<dyn Store>, durability: Durability, rx: mpsc::Receiver<Job>) {
    let mut failed: Option<StoreError> = None;
    let mut unsynced_since: Option<Instant> = None;
    loop {
        let first = match (durability, unsynced_since) {
            (Durability::Interval(period), Some(since)) => {
                match rx.recv_timeout(period.saturating_sub(since.elapsed())) {
                    Ok(job) => job,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        sync(&mut *store, &mut failed);
                        unsynced_since = None;
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            _ => match rx.recv() {
                Ok(job) => job,
                Err(_) => break,
            },
        };
        let mut jobs = vec![first];
        while jobs.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let (batches, waiters): (Vec<WriteBatch>, Vec<_>) =
            jobs.into_iter().map(|j| (j.batch, j.done)).unzip();
        let result = match &failed {
            Some(earlier) => Err(StoreError::Failed(earlier.to_string())),
            None => store.write(&batches, durability == Durability::Always),
        };
        if let (Err(error), None) = (&result, &failed) {
            // After a failed write the disk's state is unknown: stop taking writes rather
            // than acknowledge anything that might not be there.
            tracing::error!(%error, "store write failed; refusing further writes");
            failed = Some(error.clone());
        }
        for waiter in waiters.into_iter().flatten() {
            let _ = waiter.send(result.clone());
        }
        if let Durability::Interval(period) = durability {
            let since = *unsynced_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= period {
                sync(&mut *store, &mut failed);
                unsynced_since = None;
            }
        }
    }
    if failed.is_none() {
        sync(&mut *store, &mut failed);
    }
}

fn sync(store: &mut dyn Store, failed: &mut Option<StoreError>) {
    if failed.is_some() {
        return;
    }
    if let Err(error) = store.sync() {
        tracing::error!(%error, "store sync failed; refusing further writes");
        *failed = Some(error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_parses_the_three_modes() {
        assert_eq!("always".parse(), Ok(Durability::Always));
        assert_eq!("never".parse(), Ok(Durability::Never));
        assert_eq!(
            "interval-ms=50".parse(),
            Ok(Durability::Interval(Duration::from_millis(50)))
        );
        assert!("interval-ms=0".parse::<Durability>().is_err());
        assert!("sometimes".parse::<Durability>().is_err());
    }
}

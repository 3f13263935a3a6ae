//! Group commit on PostgreSQL: a server's sends, receives and deletes on standard queues
//! that arrive while its transactions are busy wait, and share the next one.
//!
//! Each request used to be a transaction of its own (a begin, a read of the queue, one
//! statement, a commit: a WAL flush and four round trips per request). Now a request joins a
//! queue of `Job`s; up to `Options::group_commits` runners, each a task of its own, take
//! every job waiting (up to `MAX_GROUP`) and commit them together (`run.rs`): one read of
//! the queues they name, one statement for all their deletes, one claim per queue and lease
//! for all their receives, one insert for all their sends, one commit. A job is answered
//! only after the commit that holds it; a job refused for what it asked (a missing queue, a
//! bad handle, an invalid message) is answered so and takes nothing from the others. When
//! nothing else is waiting a request runs at once, alone: grouping costs nothing at rest.
//!
//! FIFO queues keep a transaction per request (their sends take ordered locks by group and
//! deduplication id, `fifo.rs`); whether a queue is FIFO is its name's (`.fifo`), which
//! CreateQueue holds together with its attribute.

mod run;
mod work;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use leasehold_backend::{BackendError, Received};
use leasehold_engine::{EngineError, NewMessage, ReceiveRequest, Sent};
use tokio::sync::oneshot;

use crate::Core;

type Result<T> = std::result::Result<T, BackendError>;

/// At most this many requests share one transaction: a bound on its statements' arrays
/// (a group of sends holds at most 640 messages) and on how long its first request waits.
const MAX_GROUP: usize = 64;

pub(crate) type Reply<T> = oneshot::Sender<Result<T>>;

/// A request waiting for a transaction, and where its answer goes.
pub(crate) enum Job {
    Send {
        queue: String,
        messages: Vec<NewMessage>,
        batch: bool,
        reply: Reply<Vec<std::result::Result<Sent, EngineError>>>,
    },
    Receive {
        queue: String,
        request: ReceiveRequest,
        reply: Reply<Received>,
    },
    Delete {
        queue: String,
        handles: Vec<String>,
        reply: Reply<Vec<std::result::Result<(), EngineError>>>,
    },
}

impl Job {
    /// Its caller no longer waits for the answer.
    fn abandoned(&self) -> bool {
        match self {
            Job::Send { reply, .. } => reply.is_closed(),
            Job::Receive { reply, .. } => reply.is_closed(),
            Job::Delete { reply, .. } => reply.is_closed(),
        }
    }
}

/// The jobs waiting and the runners counted: the only state under the grouper's lock, and
/// every decision about it is one of these methods, so a runner's work is never done under
/// the lock. Generic so that `tests` can run it under shuttle's scheduler.
pub(crate) struct Pending<J> {
    jobs: VecDeque<J>,
    running: usize,
    limit: usize,
}

impl<J> Pending<J> {
    pub(crate) fn new(limit: usize) -> Self {
        Pending {
            jobs: VecDeque::new(),
            running: 0,
            limit: limit.max(1),
        }
    }

    /// Adds a job; true when the caller must start a runner (one more is allowed). A
    /// runner already running takes the job after its commit otherwise.
    pub(crate) fn push(&mut self, job: J) -> bool {
        self.jobs.push_back(job);
        self.start_one()
    }

    /// The next group, oldest first, for a runner that is free; None when nothing waits,
    /// and the runner, uncounted, stops.
    pub(crate) fn next_group(&mut self, max: usize) -> Option<Vec<J>> {
        if self.jobs.is_empty() {
            self.running -= 1;
            return None;
        }
        let take = self.jobs.len().min(max.max(1));
        Some(self.jobs.drain(..take).collect())
    }

    fn start_one(&mut self) -> bool {
        let start = self.running < self.limit;
        self.running += usize::from(start);
        start
    }

    #[cfg(test)]
    fn is_idle(&self) -> bool {
        self.jobs.is_empty() && self.running == 0
    }
}

/// Where a server's grouped requests wait, and the runners that commit them: each a task
/// that takes groups until none waits.
pub(crate) struct Grouper {
    core: Arc<Core>,
    pending: Arc<Mutex<Pending<Job>>>,
}

impl Grouper {
    pub(crate) fn new(core: Arc<Core>, group_commits: usize) -> Self {
        Grouper {
            core,
            pending: Arc::new(Mutex::new(Pending::new(group_commits))),
        }
    }

    /// Queues a job and waits for its answer: the commit that held it, or its refusal.
    pub(crate) async fn submit<T>(&self, job: impl FnOnce(Reply<T>) -> Job) -> Result<T> {
        let (reply, answer) = oneshot::channel();
        let start = lock(&self.pending).push(job(reply));
        if start {
            self.start_runner();
        }
        answer.await.unwrap_or_else(|_| {
            Err(BackendError::Unavailable(
                "the server lost the transaction that held this request".into(),
            ))
        })
    }

    fn start_runner(&self) {
        let (core, pending) = (self.core.clone(), self.pending.clone());
        tokio::spawn(async move {
            loop {
                let group = lock(&pending).next_group(MAX_GROUP);
                let Some(group) = group else { return };
                // A task of its own, so that a panic in one group (its callers answered
                // Unavailable as their replies drop; its transaction, never committed, rolled
                // back) leaves this runner counted and running.
                let core = core.clone();
                if let Err(error) = tokio::spawn(core.run_group(group)).await {
                    tracing::error!(%error, "a group of requests failed");
                }
            }
        });
    }
}

/// The lock holds only `Pending`, whose methods leave it whole even if one panicked.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;

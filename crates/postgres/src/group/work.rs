//! A group's requests as its transaction holds them: each request's work (what it asked,
//! its answer once decided, what it measured), the group by kind, and the queues it names.

use std::collections::HashMap;

use leasehold_backend::Received;
use leasehold_engine::{EngineError, ReceiveRequest, Sent};

use super::{Job, Reply, Result};
use crate::handles::Seen;
use crate::messages::{Opened, ReceiveTally};
use crate::storable;

pub(super) type SendAnswer = Vec<std::result::Result<Sent, EngineError>>;
pub(super) type DeleteAnswer = Vec<std::result::Result<(), EngineError>>;

/// A request of the group, its answer once decided, and what it measured.
pub(super) struct Work<Asked, Answer, Measured> {
    pub(super) queue: String,
    pub(super) asked: Asked,
    pub(super) reply: Reply<Answer>,
    pub(super) answer: Option<Result<Answer>>,
    pub(super) measured: Measured,
}

impl<Asked, Answer, Measured: Default> Work<Asked, Answer, Measured> {
    pub(super) fn new(queue: String, asked: Asked, reply: Reply<Answer>) -> Self {
        Work {
            queue,
            asked,
            reply,
            answer: None,
            measured: Measured::default(),
        }
    }
}

/// Sends: the messages, whether a batch; measured: how many were stored.
pub(super) type SendWork = Work<(Vec<leasehold_engine::NewMessage>, bool), SendAnswer, u64>;
pub(super) type ReceiveWork = Work<ReceiveRequest, Received, Option<ReceiveTally>>;
pub(super) type DeleteWork = Work<Vec<String>, DeleteAnswer, Deleted>;

/// What a delete measured, and its handles whose messages were busy (their places in its
/// answer), deleted after the group in a transaction of their own.
#[derive(Default)]
pub(super) struct Deleted {
    pub(super) seen: Vec<Seen>,
    pub(super) busy: Vec<(usize, String)>,
}
/// A delete's handles, each opened (or refused) against its queue.
pub(super) type Handles = Vec<(
    std::result::Result<leasehold_engine::Receipt, EngineError>,
    String,
)>;

/// A group's requests by kind, each kind in arrival order.
#[derive(Default)]
pub(super) struct Group {
    pub(super) sends: Vec<SendWork>,
    pub(super) receives: Vec<ReceiveWork>,
    pub(super) deletes: Vec<DeleteWork>,
}

impl Group {
    /// The jobs whose callers still wait: one that went (a client that disconnected, a
    /// request past its deadline) is not run, so nothing is leased or stored for nobody.
    pub(super) fn of(jobs: Vec<Job>) -> Group {
        let mut group = Group::default();
        for job in jobs.into_iter().filter(|job| !job.abandoned()) {
            match job {
                Job::Send {
                    queue,
                    messages,
                    batch,
                    reply,
                } => group.sends.push(Work::new(queue, (messages, batch), reply)),
                Job::Receive {
                    queue,
                    request,
                    reply,
                } => group.receives.push(Work::new(queue, request, reply)),
                Job::Delete {
                    queue,
                    handles,
                    reply,
                } => group.deletes.push(Work::new(queue, handles, reply)),
            }
        }
        group
    }

    /// The queues the group names, each once.
    pub(super) fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = (self.sends.iter().map(|w| w.queue.as_str()))
            .chain(self.receives.iter().map(|w| w.queue.as_str()))
            .chain(self.deletes.iter().map(|w| w.queue.as_str()))
            .filter(|key| storable(key))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }
}

/// The queues a group names, as they were when it began, and the cluster's instant for it.
pub(super) struct Queues {
    pub(super) now: u64,
    pub(super) by_key: HashMap<String, Opened>,
}

impl Queues {
    /// The queue a request names, or its refusal: it does not exist.
    pub(super) fn of<A, B, M>(&self, work: &mut Work<A, B, M>) -> Option<&Opened> {
        let opened = self.by_key.get(&work.queue);
        if opened.is_none() {
            work.answer = Some(Err(EngineError::QueueDoesNotExist.into()));
        }
        opened
    }
}

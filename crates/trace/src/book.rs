//! The messages being traced, by message id: each one's trace, its open lease and the
//! receipt handles it was given. Bounded: past its capacity the longest-traced message is let
//! go (its open lease ended there). Under its lock only the decision: entries are taken out,
//! changed and their spans ended by the caller, and put back.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use opentelemetry::Context;
use opentelemetry_sdk::trace::Span;

/// One traced message.
pub(crate) struct Message {
    /// The queue's key.
    pub queue: String,
    /// What the message's spans are children of: the server's send span, or the producer's
    /// span where this server did not see the send.
    pub parent: Context,
    pub sent_ms: u64,
    /// Whether its wait in the queue (send to first receive) is told.
    pub received: bool,
    pub lease: Option<Lease>,
    /// Every receipt handle it was given, the newest last.
    pub handles: Vec<String>,
}

/// A message's open lease.
pub(crate) struct Lease {
    pub span: Span,
    /// Which receive began it (1 for the first).
    pub number: u32,
    pub handle: String,
    pub started_ms: u64,
    /// When it runs out unless extended.
    pub deadline_ms: u64,
    pub extensions: u32,
}

#[derive(Default)]
struct Inner {
    messages: HashMap<String, (u64, Message)>,
    /// Receipt handle to message id.
    handles: HashMap<String, String>,
    /// Message ids in the order they were put in, each with the generation it was put in
    /// with: an entry whose generation differs was put in again since, later in the order.
    order: VecDeque<(String, u64)>,
    generation: u64,
}

pub(crate) struct Book {
    inner: Mutex<Inner>,
    capacity: usize,
}

impl Book {
    pub fn new(capacity: usize) -> Book {
        Book {
            inner: Mutex::new(Inner::default()),
            capacity: capacity.max(1),
        }
    }

    /// A panic elsewhere leaves no half-changed entry here (entries change outside the
    /// lock), so a poisoned lock's state is whole.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether message `id` is traced.
    pub fn contains(&self, id: &str) -> bool {
        self.lock().messages.contains_key(id)
    }

    /// Forgets a receipt handle no longer kept.
    pub fn forget_handle(&self, handle: &str) {
        self.lock().handles.remove(handle);
    }

    /// Takes message `id` out, if it is traced.
    pub fn take(&self, id: &str) -> Option<Message> {
        let mut inner = self.lock();
        inner.messages.remove(id).map(|(_, message)| message)
    }

    /// Takes out the message a receipt handle was given for, with its id.
    pub fn take_by_handle(&self, handle: &str) -> Option<(String, Message)> {
        let mut inner = self.lock();
        let id = inner.handles.get(handle)?.clone();
        let (_, message) = inner.messages.remove(&id)?;
        Some((id, message))
    }

    /// Puts message `id` (back) in; answers the messages let go to stay within capacity (their
    /// spans are the caller's to end, outside the lock).
    pub fn put(&self, id: String, message: Message) -> Vec<Message> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        inner.generation += 1;
        let generation = inner.generation;
        for handle in &message.handles {
            inner.handles.insert(handle.clone(), id.clone());
        }
        inner.order.push_back((id.clone(), generation));
        // One put in meanwhile (a race of two commands on one message) is let go.
        let mut let_go: Vec<Message> = (inner.messages.insert(id, (generation, message)))
            .map(|(_, displaced)| displaced)
            .into_iter()
            .collect();
        while inner.messages.len() > self.capacity {
            let Some((oldest, generation)) = inner.order.pop_front() else {
                break;
            };
            let live = inner
                .messages
                .get(&oldest)
                .is_some_and(|(g, _)| *g == generation);
            if let Some((_, message)) = live.then(|| inner.messages.remove(&oldest)).flatten() {
                for handle in &message.handles {
                    inner.handles.remove(handle);
                }
                let_go.push(message);
            }
        }
        // Stale places in the order (messages put in again, or gone) are dropped once they
        // outnumber the live ones.
        if inner.order.len() > 2 * self.capacity.max(inner.messages.len()) {
            let messages = &inner.messages;
            inner
                .order
                .retain(|(id, g)| messages.get(id).is_some_and(|(live, _)| live == g));
        }
        let_go
    }

    /// Forgets a message taken out for good (deleted): its handles too.
    pub fn forget(&self, message: &Message) {
        let mut inner = self.lock();
        for handle in &message.handles {
            inner.handles.remove(handle);
        }
    }

    /// Takes every message out: at shutdown.
    pub fn drain(&self) -> Vec<Message> {
        let mut inner = self.lock();
        inner.handles.clear();
        inner.order.clear();
        inner.messages.drain().map(|(_, (_, m))| m).collect()
    }
}

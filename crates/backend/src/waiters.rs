//! The receives waiting on each queue, and waking them: one notifier per queue, for any
//! backend to use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

#[derive(Default)]
pub struct Waiters(Mutex<HashMap<String, Arc<Notify>>>);

impl Waiters {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        // The map holds no invariant a panic could break halfway.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The notifier the long polls on `queue` wait on.
    pub fn of(&self, queue: &str) -> Arc<Notify> {
        self.map().entry(queue.to_string()).or_default().clone()
    }

    /// Wakes every long poll on `queue` to look again.
    pub fn wake(&self, queue: &str) {
        if let Some(notify) = self.map().get(queue) {
            notify.notify_waiters();
        }
    }

    /// Wakes up to `count` long polls on `queue`, one per message that became receivable:
    /// a send to a queue with 2,000 waiters wakes one of them, not all.
    pub fn wake_some(&self, queue: &str, count: usize) {
        if count == 0 {
            return;
        }
        if let Some(notify) = self.map().get(queue) {
            (0..count).for_each(|_| notify.notify_one());
        }
    }

    /// Wakes every long poll on every queue.
    pub fn wake_all(&self) {
        self.map().values().for_each(|n| n.notify_waiters());
    }
}

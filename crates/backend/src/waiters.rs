//! The receives waiting on each queue, and waking them: one notifier per queue, for any
//! backend to use. The map is read far more than written (every send and receive looks its
//! queue's notifier up; only a queue's first waiter adds one), so lookups share its lock.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::Notify;

#[derive(Default)]
pub struct Waiters(RwLock<HashMap<String, Arc<Notify>>>);

impl Waiters {
    // The map holds no invariant a panic could break halfway: a poisoned lock is taken over.
    fn read(&self) -> RwLockReadGuard<'_, HashMap<String, Arc<Notify>>> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<String, Arc<Notify>>> {
        self.0.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The notifier the long polls on `queue` wait on.
    pub fn of(&self, queue: &str) -> Arc<Notify> {
        if let Some(notify) = self.read().get(queue) {
            return notify.clone();
        }
        self.write().entry(queue.to_string()).or_default().clone()
    }

    /// Wakes every long poll on `queue` to look again.
    pub fn wake(&self, queue: &str) {
        if let Some(notify) = self.read().get(queue) {
            notify.notify_waiters();
        }
    }

    /// Wakes up to `count` long polls on `queue`, one per message that became receivable:
    /// a send to a queue with 2,000 waiters wakes one of them, not all.
    pub fn wake_some(&self, queue: &str, count: usize) {
        if count == 0 {
            return;
        }
        if let Some(notify) = self.read().get(queue) {
            (0..count).for_each(|_| notify.notify_one());
        }
    }

    /// Wakes every long poll on every queue.
    pub fn wake_all(&self) {
        self.read().values().for_each(|n| n.notify_waiters());
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use super::*;

    #[test]
    fn a_queue_keeps_one_notifier_and_a_wake_reaches_it() {
        let waiters = Waiters::default();
        let first = waiters.of("q");
        assert!(Arc::ptr_eq(&first, &waiters.of("q")));
        assert!(!Arc::ptr_eq(&first, &waiters.of("other")));
        let woken = first.notified();
        tokio::pin!(woken);
        // Registered before the wake, as a long poll is; nothing woke it yet.
        assert!(!woken.as_mut().enable());
        waiters.wake_some("q", 1);
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        assert!(woken.as_mut().poll(&mut cx).is_ready());
    }
}

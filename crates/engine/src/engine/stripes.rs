//! A queue's cell: its stripes, each its own `Queue` behind its own lock.
//!
//! A standard queue promises no order, so it is split into `EngineConfig::stripes` stripes
//! (fixed at its creation, `QueueMeta::stripes`): each holds its share of the messages, its
//! own indexes, numbering (`queue/numbering.rs`), counters and measurements. A thread sends
//! to its own stripe (`home`), or the next free one; a receive starts at its own stripe
//! unless another has waited longer (`receive_order`), and fills up from the others one lock
//! at a time; a delete or visibility change goes to the stripe its handle's number names.
//! So two threads on one hot queue mostly work on two stripes, each staying in its core's
//! cache, where one lock handed back and forth moved the queue between cores at every
//! command. A FIFO queue has one stripe: its order is one per group.
//!
//! What is the queue's own (settings, tags, instants, purge mark) every stripe holds a copy
//! of, the head's (stripe 0) being the one changed (`HeadMut`) and copied on; what spans
//! the stripes (attributes, reports, peeks) adds them up stripe by stripe.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::queue::Queue;

/// How many times a queue's lock is looked at before the thread sleeps on it: about 36 us
/// on the 2-core VM, longer than a batch holds it. Sleeping and waking cost more than that.
#[cfg(not(feature = "shuttle"))]
const SPINS: usize = 4_000;

/// The most stripes a queue is split into.
pub const MAX_STRIPES: usize = 64;

/// A receive starts at the stripe that has waited longest when that is this much longer
/// than its own stripe has, so no stripe's messages wait behind another's busier traffic;
/// within it, a thread keeps to its own stripe (and its core's cache).
const FAIR_LAG_MS: u64 = 250;

/// A queue's lock: parking_lot's, or with the `shuttle` feature shuttle's, whose scheduler
/// explores the interleavings of the lock order (`tests/lock_order.rs`).
#[cfg(not(feature = "shuttle"))]
type QueueMutex = parking_lot::Mutex<Queue>;
#[cfg(not(feature = "shuttle"))]
type RawGuard<'a> = parking_lot::MutexGuard<'a, Queue>;
#[cfg(feature = "shuttle")]
type QueueMutex = shuttle::sync::Mutex<Queue>;
#[cfg(feature = "shuttle")]
type RawGuard<'a> = shuttle::sync::MutexGuard<'a, Queue>;

/// A stripe's lock, held. Dropped while its thread panics, when the stripe may be half
/// changed, it is never let go: the lock stays taken, so no other thread sees the torn
/// stripe (a lock is not poisoned by a panic). A server then aborts (the embedded backend's
/// `AbortOnPanic`); a test's panic goes on and fails the test. Let go normally, it leaves
/// the stripe's `waiting_since` for receives choosing where to start.
pub(crate) struct QueueGuard<'a> {
    raw: Option<RawGuard<'a>>,
    waiting_since: &'a AtomicU64,
}

impl<'a> QueueGuard<'a> {
    fn new(raw: RawGuard<'a>, waiting_since: &'a AtomicU64) -> QueueGuard<'a> {
        QueueGuard {
            raw: Some(raw),
            waiting_since,
        }
    }
}

impl std::ops::Deref for QueueGuard<'_> {
    type Target = Queue;

    fn deref(&self) -> &Queue {
        self.raw.as_deref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for QueueGuard<'_> {
    fn deref_mut(&mut self) -> &mut Queue {
        self.raw.as_deref_mut().expect("held until dropped")
    }
}

impl Drop for QueueGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            std::mem::forget(self.raw.take());
        } else if let Some(queue) = &self.raw {
            self.waiting_since
                .store(queue.waiting_since(), Ordering::Relaxed);
        }
    }
}

/// One stripe and what others may read of it without its lock, on cache lines of its own.
#[repr(align(128))]
struct StripeCell {
    queue: QueueMutex,
    /// `Queue::waiting_since` as the stripe's last lock holder left it.
    waiting_since: AtomicU64,
}

impl StripeCell {
    #[cfg(not(feature = "shuttle"))]
    fn try_lock(&self) -> Option<QueueGuard<'_>> {
        let raw = self.queue.try_lock()?;
        Some(QueueGuard::new(raw, &self.waiting_since))
    }

    /// The stripe, locked: spins a while (reading, not writing, the lock's word), then sleeps.
    #[cfg(not(feature = "shuttle"))]
    fn lock(&self) -> QueueGuard<'_> {
        for _ in 0..SPINS {
            if !self.queue.is_locked() {
                if let Some(queue) = self.try_lock() {
                    return queue;
                }
            }
            std::hint::spin_loop();
        }
        QueueGuard::new(self.queue.lock(), &self.waiting_since)
    }

    #[cfg(not(feature = "shuttle"))]
    fn get_mut(&mut self) -> &mut Queue {
        self.queue.get_mut()
    }

    #[cfg(not(feature = "shuttle"))]
    fn into_inner(self) -> Queue {
        self.queue.into_inner()
    }

    #[cfg(feature = "shuttle")]
    fn try_lock(&self) -> Option<QueueGuard<'_>> {
        let raw = self.queue.try_lock().ok()?;
        Some(QueueGuard::new(raw, &self.waiting_since))
    }

    // A panic under shuttle's lock poisons it: the test fails either way.
    #[cfg(feature = "shuttle")]
    fn lock(&self) -> QueueGuard<'_> {
        let raw = self.queue.lock().expect("a queue's lock is never poisoned");
        QueueGuard::new(raw, &self.waiting_since)
    }

    #[cfg(feature = "shuttle")]
    fn get_mut(&mut self) -> &mut Queue {
        self.queue
            .get_mut()
            .expect("a queue's lock is never poisoned")
    }

    #[cfg(feature = "shuttle")]
    fn into_inner(self) -> Queue {
        self.queue
            .into_inner()
            .expect("a queue's lock is never poisoned")
    }
}

/// Numbers threads as they first touch a queue, so that each has a stripe of its own.
static THREADS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD: usize = THREADS.fetch_add(1, Ordering::Relaxed);
}

/// One queue's stripes, with the id of its incarnation beside them (fixed for the cell's
/// life), so that commands needing two queues lock them in id order without looking inside
/// either first.
pub(crate) struct QueueCell {
    pub(super) id: u64,
    /// Fixed at creation too: whether a dead-letter queue fits a source is known unlocked.
    pub(super) fifo: bool,
    stripes: Box<[StripeCell]>,
}

impl QueueCell {
    /// A cell of `stripes`, stripe 0 (the head) first.
    pub(super) fn new(stripes: Vec<Queue>) -> QueueCell {
        let head = stripes.first().expect("a queue has a stripe");
        QueueCell {
            id: head.meta.id,
            fifo: head.meta.settings.fifo,
            stripes: stripes
                .into_iter()
                .map(|queue| StripeCell {
                    waiting_since: AtomicU64::new(queue.waiting_since()),
                    queue: QueueMutex::new(queue),
                })
                .collect(),
        }
    }

    pub(super) fn count(&self) -> usize {
        self.stripes.len()
    }

    /// This thread's own stripe.
    pub(super) fn home(&self) -> usize {
        THREAD.with(|t| *t) % self.stripes.len()
    }

    /// The stripe numbered `stripe` (modulo the count: any number names a stripe), locked.
    pub(super) fn lock(&self, stripe: usize) -> QueueGuard<'_> {
        self.stripes[stripe % self.stripes.len()].lock()
    }

    /// The head (stripe 0), locked: for what every stripe holds alike (settings, tags).
    pub(super) fn head(&self) -> QueueGuard<'_> {
        self.stripes[0].lock()
    }

    /// A stripe to add messages to: this thread's own unless another thread holds it and
    /// another stripe is free (any stripe of a standard queue will do).
    pub(super) fn lock_any(&self) -> (usize, QueueGuard<'_>) {
        let home = self.home();
        let count = self.stripes.len();
        if count > 1 {
            for stripe in (0..count).map(|i| (home + i) % count) {
                if let Some(queue) = self.stripes[stripe].try_lock() {
                    return (stripe, queue);
                }
            }
        }
        (home, self.stripes[home].lock())
    }

    /// The stripes in the order a receive visits them: its own first, unless another has
    /// had a message waiting `FAIR_LAG_MS` longer (then that one), then the rest in turn.
    pub(super) fn receive_order(&self) -> impl Iterator<Item = usize> + Clone {
        let count = self.stripes.len();
        let mut start = self.home();
        if count > 1 {
            let since = |s: usize| self.stripes[s].waiting_since.load(Ordering::Relaxed);
            let oldest = (0..count).min_by_key(|&s| since(s)).unwrap_or(start);
            if since(oldest).saturating_add(FAIR_LAG_MS) < since(start) {
                start = oldest;
            }
        }
        (0..count).map(move |i| (start + i) % count)
    }

    /// Sets every stripe's `waiting_since` to what it holds: after changes made through
    /// `&mut` (a restore, a move task, a purge), which no guard's drop saw.
    pub(super) fn refresh(&mut self) {
        for stripe in self.stripes.iter_mut() {
            let since = stripe.get_mut().waiting_since();
            *stripe.waiting_since.get_mut() = since;
        }
    }

    /// Whether a stripe may have a message to hand out at `now`, as its last lock holder
    /// left it (a look without its lock: it may be out of date either way).
    pub(super) fn may_hold_ready(&self, stripe: usize, now: u64) -> bool {
        self.stripes[stripe % self.stripes.len()]
            .waiting_since
            .load(Ordering::Relaxed)
            <= now
    }

    /// Every stripe, with no lock: `&mut self` proves nobody else holds one.
    pub(super) fn stripes_mut(&mut self) -> impl Iterator<Item = &mut Queue> {
        self.stripes.iter_mut().map(StripeCell::get_mut)
    }

    /// One stripe, with no lock.
    pub(super) fn stripe_mut(&mut self, stripe: usize) -> &mut Queue {
        let count = self.stripes.len();
        self.stripes[stripe % count].get_mut()
    }

    /// The head, to change what every stripe holds alike: copied to the others when the
    /// `HeadMut` goes.
    pub(super) fn head_mut(&mut self) -> HeadMut<'_> {
        let (head, rest) = self
            .stripes
            .split_first_mut()
            .expect("a queue has a stripe");
        HeadMut {
            head: head.get_mut(),
            rest,
        }
    }

    pub(super) fn into_inner(self) -> Vec<Queue> {
        self.stripes
            .into_vec()
            .into_iter()
            .map(StripeCell::into_inner)
            .collect()
    }
}

/// The head of a queue, changed through `&mut Engine`; when it goes, every other stripe
/// takes on what changed of the queue's own (all of `QueueMeta` but the stripe's counters),
/// marked to be written.
pub(crate) struct HeadMut<'a> {
    head: &'a mut Queue,
    rest: &'a mut [StripeCell],
}

impl std::ops::Deref for HeadMut<'_> {
    type Target = Queue;

    fn deref(&self) -> &Queue {
        self.head
    }
}

impl std::ops::DerefMut for HeadMut<'_> {
    fn deref_mut(&mut self) -> &mut Queue {
        self.head
    }
}

impl Drop for HeadMut<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        for stripe in self.rest.iter_mut() {
            let queue = stripe.get_mut();
            let mut own = self.head.meta.clone();
            own.stats = queue.meta.stats.clone();
            if queue.meta != own {
                queue.meta = own;
                queue.touch();
            }
        }
    }
}

//! A queue's cell: its stripes, each its own `Queue` behind its own lock.
//!
//! A standard queue promises no order, so it is split into `EngineConfig::stripes` stripes
//! (fixed at its creation, `QueueMeta::stripes`): each holds its share of the messages, its
//! own indexes, numbering (`queue/numbering.rs`), counters and measurements. A stripe other
//! than the head is made only when a send finds every made one busy (`QueueCell`). A thread
//! sends to its own stripe (`home`), or the next free one; a receive starts at its own stripe
//! unless another has waited longer (`receive_order`), and fills up from the others one lock
//! at a time; a delete or visibility change goes to the stripe its handle's number names.
//! So two threads on one hot queue mostly work on two stripes, each staying in its core's
//! cache, where one lock handed back and forth moved the queue between cores at every
//! command. A FIFO queue has one stripe: its order is one per group.
//!
//! What is the queue's own (settings, tags, instants, purge mark) every stripe holds a copy
//! of, the head's (stripe 0) being the one changed (`HeadMut`) and copied on; what spans
//! the stripes (attributes, reports, peeks) adds them up stripe by stripe.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::queue::Queue;
use crate::tenants::Tenants;

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
    published: &'a Published,
}

impl<'a> QueueGuard<'a> {
    fn new(raw: RawGuard<'a>, published: &'a Published) -> QueueGuard<'a> {
        QueueGuard {
            raw: Some(raw),
            published,
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
            self.published.publish(queue);
        }
    }
}

/// One stripe and what others may read of it without its lock, on cache lines of its own.
#[repr(align(128))]
struct StripeCell {
    queue: QueueMutex,
    /// What the stripe's last lock holder left it holding.
    published: Published,
}

/// What others may read of a stripe without its lock, as its last lock holder left it: it
/// may be out of date either way.
struct Published {
    /// `Queue::waiting_since`.
    waiting_since: AtomicU64,
    /// Whether a quiet tenant may have a message to hand out on it (`Queue::quiet_may_wait`).
    quiet_may_wait: AtomicBool,
    /// `Queue::next_due` (u64::MAX: none): a message due since may be a quiet tenant's.
    next_due: AtomicU64,
}

impl Published {
    fn of(queue: &Queue) -> Published {
        Published {
            waiting_since: AtomicU64::new(queue.waiting_since()),
            quiet_may_wait: AtomicBool::new(queue.quiet_may_wait()),
            next_due: AtomicU64::new(queue.next_due().unwrap_or(u64::MAX)),
        }
    }

    fn publish(&self, queue: &Queue) {
        self.waiting_since
            .store(queue.waiting_since(), Ordering::Relaxed);
        self.quiet_may_wait
            .store(queue.quiet_may_wait(), Ordering::Relaxed);
        self.next_due
            .store(queue.next_due().unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

impl StripeCell {
    #[cfg(not(feature = "shuttle"))]
    fn try_lock(&self) -> Option<QueueGuard<'_>> {
        let raw = self.queue.try_lock()?;
        Some(QueueGuard::new(raw, &self.published))
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
        QueueGuard::new(self.queue.lock(), &self.published)
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
        Some(QueueGuard::new(raw, &self.published))
    }

    // Shuttle's lock is poisoned when a panic lets it go, which `QueueGuard` never does:
    // a thread that finds it poisoned took a stripe a panic left half changed.
    #[cfg(feature = "shuttle")]
    fn lock(&self) -> QueueGuard<'_> {
        let raw = self
            .queue
            .lock()
            .expect("a thread took a stripe that a panic let go half changed");
        QueueGuard::new(raw, &self.published)
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
#[cfg(not(feature = "shuttle"))]
static THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[cfg(not(feature = "shuttle"))]
thread_local! {
    static THREAD: usize = THREADS.fetch_add(1, Ordering::Relaxed);
}

/// This thread's number: under shuttle, whose threads share one thread of the system, its
/// task's, the same in every run of a schedule.
#[cfg(not(feature = "shuttle"))]
fn thread_number() -> usize {
    THREAD.with(|t| *t)
}

#[cfg(feature = "shuttle")]
fn thread_number() -> usize {
    shuttle::current::get_current_task().map_or(0, usize::from)
}

/// One queue's stripes, with the id of its incarnation beside them (fixed for the cell's
/// life), so that commands needing two queues lock them in id order without looking inside
/// either first.
///
/// Only the head (stripe 0) is there from the start: another stripe is made when a send
/// finds every stripe made so far busy (`lock_any`), so a queue that never sees two senders
/// at once stays one stripe (a million quiet queues cost what they did), and a hot one grows
/// a stripe per thread that works on it at the same time, up to its count.
pub(crate) struct QueueCell {
    pub(super) id: u64,
    /// Fixed at creation too: whether a dead-letter queue fits a source is known unlocked.
    pub(super) fifo: bool,
    /// The queue's tenants, shared with its stripes (`tenants.rs`): whether any is noisy is
    /// known unlocked.
    pub(super) tenants: Arc<Tenants>,
    head: StripeCell,
    /// Stripes 1 and on, each made when first needed.
    others: Box<[OnceLock<Box<StripeCell>>]>,
}

impl StripeCell {
    fn new(queue: Queue) -> StripeCell {
        StripeCell {
            published: Published::of(&queue),
            queue: QueueMutex::new(queue),
        }
    }
}

impl QueueCell {
    /// A cell of `head`'s `meta.stripes` stripes, with `others` (each at its own index)
    /// made already.
    pub(super) fn new(head: Queue, others: Vec<Queue>) -> QueueCell {
        let count = (head.meta.stripes.max(1) as usize).min(MAX_STRIPES);
        let mut cell = QueueCell {
            id: head.meta.id,
            fifo: head.meta.settings.fifo,
            tenants: head.tenants().clone(),
            head: StripeCell::new(head),
            others: (1..count).map(|_| OnceLock::new()).collect(),
        };
        for queue in others {
            let index = queue.stripe_index() as usize;
            if let Some(slot) = index.checked_sub(1).and_then(|i| cell.others.get_mut(i)) {
                let _ = slot.set(Box::new(StripeCell::new(queue)));
            }
        }
        cell
    }

    pub(super) fn count(&self) -> usize {
        self.others.len() + 1
    }

    /// The stripe, if it was made.
    fn made(&self, stripe: usize) -> Option<&StripeCell> {
        match stripe % self.count() {
            0 => Some(&self.head),
            other => self.others[other - 1].get().map(|cell| &**cell),
        }
    }

    /// The stripes made so far, the head first.
    pub(super) fn made_stripes(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.count()).filter(|&stripe| self.made(stripe).is_some())
    }

    /// The stripe, made now if it was not: a copy of the head's own (looked at under its
    /// lock, let go before the stripe is published) numbering above any purge.
    fn make(&self, stripe: usize) -> &StripeCell {
        let stripe = stripe % self.count();
        if let Some(cell) = self.made(stripe) {
            return cell;
        }
        // `&Engine` is held, so the head's own cannot change before the stripe is set.
        let fresh = Queue::stripe_of_head(&self.head.lock(), stripe as u32);
        // Made before `get_or_init`, whose closure must not wait on anything another thread
        // could hold (its `Once` blocks every other caller): under shuttle, reading the
        // tenant table's counts for `Published` is a point where another task runs, and one
        // of them making the same stripe hung the node simulation (seed 89).
        let cell = Box::new(StripeCell::new(fresh));
        self.others[stripe - 1].get_or_init(|| cell)
    }

    /// This thread's own stripe.
    pub(super) fn home(&self) -> usize {
        thread_number() % self.count()
    }

    /// This thread's own stripe if it was made, else the head.
    pub(super) fn home_made(&self) -> usize {
        let home = self.home();
        if self.made(home).is_some() {
            home
        } else {
            0
        }
    }

    /// Stripe `stripe` (modulo the count: any number names a stripe), made if it was not,
    /// locked.
    pub(super) fn lock(&self, stripe: usize) -> QueueGuard<'_> {
        self.make(stripe).lock()
    }

    /// The head (stripe 0), locked: for what every stripe holds alike (settings, tags).
    pub(super) fn head(&self) -> QueueGuard<'_> {
        self.head.lock()
    }

    /// A stripe to add messages to (any stripe of a standard queue will do): this thread's
    /// own if it is made and free, else any made stripe that is free; when every one is
    /// busy, this thread's own, made if it was not (the head when it is that).
    pub(super) fn lock_any(&self) -> (usize, QueueGuard<'_>) {
        let home = self.home();
        let count = self.count();
        for stripe in (0..count).map(|i| (home + i) % count) {
            if let Some(queue) = self.made(stripe).and_then(StripeCell::try_lock) {
                return (stripe, queue);
            }
        }
        (home, self.lock(home))
    }

    /// The made stripes in the order a receive visits them: its own first (or the head,
    /// when its own was not made), unless another has had a message waiting `FAIR_LAG_MS`
    /// longer (then that one), then the rest in turn.
    pub(super) fn receive_order(&self) -> impl Iterator<Item = usize> + Clone + '_ {
        let count = self.count();
        let mut start = self.home_made();
        if count > 1 {
            let since = |s: usize| {
                self.made(s).map_or(u64::MAX, |c| {
                    c.published.waiting_since.load(Ordering::Relaxed)
                })
            };
            let oldest = (0..count).min_by_key(|&s| since(s)).unwrap_or(start);
            if since(oldest).saturating_add(FAIR_LAG_MS) < since(start) {
                start = oldest;
            }
        }
        (0..count)
            .map(move |i| (start + i) % count)
            .filter(|&stripe| self.made(stripe).is_some())
    }

    /// Whether a quiet tenant may have a message to hand out at `now` on any made stripe, as
    /// their last lock holders left them (one without a group, or a delay or lease due since,
    /// which no tick has counted yet), or anywhere by the tenant table.
    pub(super) fn quiet_may_wait(&self, now: u64) -> bool {
        self.tenants.quiet_visible() > 0
            || self.made_stripes().any(|s| {
                self.made(s).is_some_and(|c| {
                    c.published.quiet_may_wait.load(Ordering::Relaxed)
                        || c.published.next_due.load(Ordering::Relaxed) <= now
                })
            })
    }

    /// Whether a stripe may have a message to hand out at `now`, as its last lock holder
    /// left it (a look without its lock: it may be out of date either way).
    pub(super) fn may_hold_ready(&self, stripe: usize, now: u64) -> bool {
        self.made(stripe)
            .is_some_and(|cell| cell.published.waiting_since.load(Ordering::Relaxed) <= now)
    }

    /// Sets every stripe's `waiting_since` to what it holds: after changes made through
    /// `&mut` (a restore, a move task, a purge), which no guard's drop saw.
    pub(super) fn refresh(&mut self) {
        let others = self.others.iter_mut().filter_map(|slot| slot.get_mut());
        for stripe in std::iter::once(&mut self.head).chain(others.map(|b| &mut **b)) {
            stripe.published = Published::of(stripe.get_mut());
        }
    }

    /// Every stripe made, with no lock: `&mut self` proves nobody else holds one.
    pub(super) fn stripes_mut(&mut self) -> impl Iterator<Item = &mut Queue> {
        let others = self.others.iter_mut().filter_map(|slot| slot.get_mut());
        std::iter::once(self.head.get_mut()).chain(others.map(|cell| cell.get_mut()))
    }

    /// One stripe, made if it was not, with no lock.
    pub(super) fn stripe_mut(&mut self, stripe: usize) -> &mut Queue {
        let stripe = stripe % self.count();
        if stripe == 0 {
            return self.head.get_mut();
        }
        let head = self.head.get_mut();
        let slot = &mut self.others[stripe - 1];
        if slot.get().is_none() {
            let _ = slot.set(Box::new(StripeCell::new(Queue::stripe_of_head(
                head,
                stripe as u32,
            ))));
        }
        slot.get_mut().expect("set above").get_mut()
    }

    /// The head, to change what every stripe holds alike: copied to the others when the
    /// `HeadMut` goes.
    pub(super) fn head_mut(&mut self) -> HeadMut<'_> {
        HeadMut {
            head: self.head.get_mut(),
            rest: &mut self.others,
        }
    }

    pub(super) fn into_inner(self) -> Vec<Queue> {
        let others = self.others.into_vec().into_iter();
        std::iter::once(self.head.into_inner())
            .chain(others.filter_map(|slot| slot.into_inner().map(|cell| cell.into_inner())))
            .collect()
    }
}

/// The head of a queue, changed through `&mut Engine`; when it goes, every other stripe
/// takes on what changed of the queue's own (all of `QueueMeta` but the stripe's counters),
/// marked to be written.
pub(crate) struct HeadMut<'a> {
    head: &'a mut Queue,
    rest: &'a mut [OnceLock<Box<StripeCell>>],
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
        for stripe in self.rest.iter_mut().filter_map(|slot| slot.get_mut()) {
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

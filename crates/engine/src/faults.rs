//! Panics on purpose, for the node simulation: with the `shuttle` feature, `arm(n)` makes the
//! nth `point` reached from then on panic, in the middle of a change to a queue (its stripe
//! locked, the change half made), so the simulation can prove that no other thread ever sees
//! what the panic left behind (`stripes::QueueGuard`) and that the node stops as a crash
//! would. Without the feature a point is nothing.

#[cfg(feature = "shuttle")]
mod armed {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// Points left to pass before one panics; 0: none will.
    static COUNTDOWN: AtomicU64 = AtomicU64::new(0);
    static FIRED: AtomicBool = AtomicBool::new(false);

    /// The `after`th point reached from now panics (0: none does).
    pub fn arm(after: u64) {
        COUNTDOWN.store(after, Ordering::SeqCst);
        FIRED.store(false, Ordering::SeqCst);
    }

    /// Whether a point panicked since the last `arm`.
    pub fn fired() -> bool {
        FIRED.load(Ordering::SeqCst)
    }

    pub(crate) fn point(at: &'static str) {
        let due = COUNTDOWN
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok_and(|before| before == 1);
        if due {
            FIRED.store(true, Ordering::SeqCst);
            panic!("an injected panic in {at}, a change half made");
        }
    }
}

#[cfg(feature = "shuttle")]
pub(crate) use armed::point;
#[cfg(feature = "shuttle")]
pub use armed::{arm, fired};

#[cfg(not(feature = "shuttle"))]
#[inline(always)]
pub(crate) fn point(_at: &'static str) {}

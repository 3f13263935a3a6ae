//! What the node simulation (`tests/simulate_node/`, feature `simulation`) needs from inside
//! the node: a way to stop it as a crash would, and to tell an abort from a failure.
//!
//! A real node that panics under a lock aborts (`poisoned`); under the simulation there is no
//! process to end, so `abort` notes it and asks the simulation's scheduler to stop every
//! thread at its next step, as `std::process::abort` stops them all at once. The simulated
//! store's crash does the same through `halt`.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static ABORTED: AtomicBool = AtomicBool::new(false);

/// Clears the flags before a run.
pub fn reset() {
    STOP.store(false, Ordering::SeqCst);
    ABORTED.store(false, Ordering::SeqCst);
}

/// Whether the scheduler should run no thread further: the node crashed or aborted.
pub fn stopping() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Whether the node aborted (rather than crashed) since the last `reset`.
pub fn aborted() -> bool {
    ABORTED.load(Ordering::SeqCst)
}

/// The node crashes here: no thread runs another step (the caller's included).
pub fn halt() -> ! {
    STOP.store(true, Ordering::SeqCst);
    loop {
        // The scheduler sees `STOP` and ends the run; it never comes back here.
        shuttle::thread::yield_now();
    }
}

/// `std::process::abort` under the simulation, where a lock was found poisoned: noted, and
/// this thread panics, which ends the run (no other thread takes another step).
pub(crate) fn abort() -> ! {
    ABORTED.store(true, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
    panic!("the node aborted (simulated)");
}

/// The abort of a thread that panicked under a queue's lock: noted, and the panic goes on (a
/// second one would end the test process), which ends the run.
pub(crate) fn abort_while_panicking() {
    ABORTED.store(true, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

//! `Queue::check_invariants`: the index invariants stated in `queue.rs` and `fifo.rs`, checked
//! by walking every message. Tests call it on every queue; debug builds call it after each
//! queue operation on queues of at most `DEBUG_CHECK_LIMIT` messages (a walk per operation
//! would make large debug-build tests quadratic).

use super::Queue;
use crate::message::State;

/// The largest queue debug builds check after every operation.
pub(super) const DEBUG_CHECK_LIMIT: usize = 1_000;

impl Queue {
    /// Every stored message is in exactly one state and indexed for it: Delayed and InFlight
    /// in `timers` under their end, a standard queue's Ready ones in `ready`, a FIFO queue's
    /// through their group; the counts agree; FIFO groups follow `fifo.rs`'s rules.
    pub fn check_invariants(&self) -> Result<(), String> {
        let (mut ready, mut timed, mut in_flight, mut delayed) = (0, 0, 0, 0);
        let mut plain_ready = 0;
        for (key, m) in self.messages.iter() {
            if key.seq >= self.next_seq {
                return Err(format!(
                    "{key:?} is numbered past next_seq {}",
                    self.next_seq
                ));
            }
            if !self.numbers(key.seq) {
                return Err(format!(
                    "{key:?} is not numbered as stripe {} of {}",
                    self.stripe_index(),
                    self.meta.stripes
                ));
            }
            let in_ready =
                self.ready.contains(&key) || self.noisy_ready.values().any(|r| r.contains(&key));
            let in_timers = self.timers.contains(&(m.until_ms, key));
            let indexed = match m.state {
                State::Ready => {
                    ready += 1;
                    plain_ready += usize::from(m.group().is_none());
                    in_ready != self.meta.settings.fifo && !in_timers
                }
                State::Delayed | State::InFlight => {
                    timed += 1;
                    in_flight += usize::from(m.state == State::InFlight);
                    delayed += usize::from(m.state == State::Delayed);
                    in_timers && !in_ready
                }
            };
            if !indexed {
                return Err(format!(
                    "{key:?} is {:?} but indexed in ready={in_ready} timers={in_timers}",
                    m.state
                ));
            }
        }
        let ready_indexed = if self.meta.settings.fifo { 0 } else { ready };
        let ready_held =
            self.ready.len() + self.noisy_ready.values().map(|r| r.len()).sum::<usize>();
        if ready_held != ready_indexed || self.timers.len() != timed {
            return Err(format!(
                "indexes hold {} ready and {} timers for {ready_indexed} and {timed} messages",
                ready_held,
                self.timers.len()
            ));
        }
        if (self.in_flight, self.delayed) != (in_flight, delayed) {
            return Err(format!(
                "counts say {} in flight and {} delayed; the messages say {in_flight} and {delayed}",
                self.in_flight, self.delayed
            ));
        }
        // The whole queue's count holds every stripe's leases (and, for a moment, places
        // other stripes' receives reserved); a FIFO queue is one stripe, and its receive
        // reserves and leases under this lock.
        let queue_wide = self.flying.get();
        if queue_wide < self.in_flight || (self.meta.stripes == 1 && queue_wide != self.in_flight) {
            return Err(format!(
                "the queue counts {queue_wide} in flight; this stripe holds {}",
                self.in_flight
            ));
        }
        if !self.meta.settings.fifo && plain_ready != self.plain_ready {
            return Err(format!(
                "{plain_ready} ready messages without a group; the count says {}",
                self.plain_ready
            ));
        }
        self.check_tenants()?;
        if self.meta.settings.fifo {
            self.fifo.check_invariants(self.messages.len(), |key| {
                self.messages
                    .get(&key)
                    .map(|m| (m.group().cloned(), m.state == State::Ready, m.until_ms))
            })?;
        }
        Ok(())
    }

    /// This stripe's messages in flight, and the whole queue's count of them (`quota.rs`).
    pub(crate) fn in_flight_counts(&self) -> (usize, usize) {
        (self.in_flight, self.flying.get())
    }

    /// After a queue operation, in debug builds: panics if an invariant is broken.
    pub(super) fn debug_check(&self) {
        if cfg!(debug_assertions) && self.messages.len() <= DEBUG_CHECK_LIMIT {
            if let Err(broken) = self.check_invariants() {
                panic!("queue {} broke an invariant: {broken}", self.meta.id);
            }
        }
    }
}

//! The fleet at work: a free worker's receive, an execution's start, heartbeats and
//! contention while it runs, and what its end does (a delete, a put-back, a failure left to
//! its lease); the dead letters the receives moved.

use rand::Rng;

use leasehold_engine::ReceiveRequest;

use super::{ms, Ev, Execution, Simulation, WorkerState, DLQ, QUEUE};
use crate::model::{contention, load_factor};
use crate::SimError;

impl Simulation<'_> {
    /// A worker vanishes mid-message: no delete, no release; its lease runs out.
    pub(super) fn kill(&mut self, exec: u64) {
        if let Some(e) = self.remove_exec(exec) {
            self.tally.lost_work_ms += self.now.saturating_sub(e.started_ms);
            if let Some(m) = self.msgs.get_mut(&e.msg) {
                m.crashed_at = Some(self.now);
            }
        }
    }

    /// How long a message put back stays invisible: the runtime's backoff (`Backoff` in
    /// leasehold-worker), backoff_s x 2^(receives-1) capped at 900 s, in whole seconds,
    /// drawn in its upper half so that retries spread out; never under a second. Drawn from
    /// a generator of its own, so that the work's draws are the same with or without it.
    fn backoff_s(&mut self, receive_count: u32) -> u32 {
        let exponent = receive_count.saturating_sub(1).min(20) as i32;
        let full = (self.sc.consumers.backoff_s * 2f64.powi(exponent))
            .min(900.0)
            .floor()
            .max(1.0) as u32;
        let half = full / 2;
        (half + self.backoff_rng.random_range(0..=full - half)).max(1)
    }

    /// Puts a received message back for the backoff.
    fn put_back(&mut self, handle: &str, receive_count: u32) {
        let backoff = self.backoff_s(receive_count);
        let _ = self.engine.change_visibility(QUEUE, handle, backoff);
    }

    fn remove_exec(&mut self, exec: u64) -> Option<Execution> {
        let e = self.execs.remove(&exec)?;
        if e.fails {
            self.tally.poison_work_ms += self.now.saturating_sub(e.started_ms);
        }
        if let Some(list) = self.running_by_msg.get_mut(&e.msg) {
            list.retain(|x| *x != exec);
            if list.is_empty() {
                self.running_by_msg.remove(&e.msg);
            } else {
                // One copy fewer contends for the rows: the rest speed up again.
                let rest = list.clone();
                let copies = rest.len() as f64;
                let db = &self.sc.database;
                self.rescale(&rest, contention(db, copies) / contention(db, copies + 1.0));
            }
        }
        Some(e)
    }

    /// A first execution earns `ratio` retry tokens (at most 100 first executions' worth are
    /// kept); a retry takes one. Whether this execution may start.
    fn spend_retry_budget(&mut self, receive_count: u32, ratio: f64) -> bool {
        if receive_count <= 1 {
            self.retry_tokens = (self.retry_tokens + ratio).min(100.0 * ratio);
            return true;
        }
        if self.retry_tokens >= 1.0 {
            self.retry_tokens -= 1.0;
            return true;
        }
        false
    }

    /// Hands visible messages to idle workers, within the ceiling and the rate limit.
    pub(super) fn dispatch(&mut self) -> Result<(), SimError> {
        let c = &self.sc.consumers;
        // Held back by the ceiling or the rate limit rather than an empty queue: a completion
        // (the ceiling) or the token's timer (the rate limit) dispatches again, and a lease's
        // end must not, or a lease that ended unseen (due, not yet taken) wakes this at once,
        // forever.
        let mut held = false;
        while let Some(&w) = self.idle.first() {
            if c.concurrency_ceiling > 0 && self.running() >= c.concurrency_ceiling {
                held = true;
                break;
            }
            if c.rate_limit_per_s > 0.0 {
                let elapsed = (self.now - self.tokens_at) as f64 / 1000.0;
                self.tokens =
                    (self.tokens + elapsed * c.rate_limit_per_s).min(c.rate_limit_per_s.max(1.0));
                self.tokens_at = self.now;
                if self.tokens < 1.0 {
                    let wait = ms((1.0 - self.tokens) / c.rate_limit_per_s).max(1);
                    self.wake_at(self.now + wait);
                    held = true;
                    break;
                }
            }
            let deliveries = self.engine.receive(QUEUE, &ReceiveRequest::up_to(1))?;
            self.collect_dead_letters()?;
            let Some(d) = deliveries.into_iter().next() else {
                break;
            };
            self.tokens -= 1.0;
            self.idle.remove(&w);
            let msg: u64 = d.body.parse().unwrap_or(u64::MAX);
            self.note_dwell(msg);
            let state = self.msgs.entry(msg).or_default();
            state.first_receive_ms.get_or_insert(self.now);
            if let Some(crashed) = state.crashed_at.take() {
                self.tally.crash_recoveries_ms.push(self.now - crashed);
            }
            if c.idempotency {
                if self.completed.contains(&msg) {
                    self.tally.skipped_duplicates += 1;
                    self.finish_message(msg, &d.receipt_handle)?;
                    self.idle.insert(w);
                    continue;
                }
                if self
                    .in_progress
                    .get(&msg)
                    .is_some_and(|expires| *expires > self.now)
                {
                    self.tally.put_back_in_progress += 1;
                    self.put_back(&d.receipt_handle, d.receive_count);
                    self.idle.insert(w);
                    continue;
                }
                self.in_progress
                    .insert(msg, self.now + self.lease_ms + self.lease_ms / 3);
            }
            if c.retry_budget > 0.0 && !self.spend_retry_budget(d.receive_count, c.retry_budget) {
                self.tally.retries_refused += 1;
                self.put_back(&d.receipt_handle, d.receive_count);
                self.idle.insert(w);
                continue;
            }
            self.start(w, msg, d.receipt_handle, d.receive_count);
        }
        if !self.idle.is_empty() && !held {
            if let Some(due) = self.engine.next_due(QUEUE) {
                self.wake_at(due.max(self.now + 1));
            }
        }
        Ok(())
    }

    fn wake_at(&mut self, time: u64) {
        if self.dispatch_at.is_none_or(|t| time < t) {
            self.dispatch_at = Some(time);
            self.at(time, Ev::Dispatch);
        }
    }

    /// The message's unloaded processing time: drawn for this execution, or, when the
    /// scenario says slowness stays with a message, drawn at its first and kept.
    fn unloaded_s(&mut self, msg: u64) -> f64 {
        if !self.sc.work.per_message {
            return self.work.draw(&mut self.rng);
        }
        if let Some(kept) = self.msgs.get(&msg).and_then(|m| m.unloaded_s) {
            return kept;
        }
        let drawn = self.work.draw(&mut self.rng);
        self.msgs.entry(msg).or_default().unloaded_s = Some(drawn);
        drawn
    }

    /// A Lambda function's timeout ran out: the execution is killed, nothing deleted; its
    /// message comes back when its lease ends.
    pub(super) fn time_out(&mut self, exec: u64) {
        if let Some(e) = self.remove_exec(exec) {
            self.tally.function_timeouts += 1;
            self.in_progress.remove(&e.msg);
            self.free_worker(e.worker);
        }
    }

    fn start(&mut self, w: usize, msg: u64, handle: String, receive_count: u32) {
        let unloaded = self.unloaded_s(msg) * self.work_scale(msg);
        let db = &self.sc.database;
        let running = self.running() + 1;
        let others = self.running_by_msg.get(&msg).cloned().unwrap_or_default();
        let copies = others.len() as f64 + 1.0;
        let seconds = unloaded * self.blip * load_factor(db, running) * contention(db, copies);
        // The copies already running now fight this one for the same rows.
        self.rescale(
            &others,
            contention(db, copies) / contention(db, copies - 1.0),
        );
        let exec = self.next_exec;
        self.next_exec += 1;
        let end = self.locked_end(self.now, self.now + ms(seconds).max(1));
        let mut seconds = (end - self.now) as f64 / 1000.0;
        if self.sc.scaling.kind == "lambda" {
            // Whatever contention later does to its length, Lambda ends it at the timeout.
            let timeout = self.sc.scaling.function_timeout_s;
            self.at(self.now + ms(timeout), Ev::FunctionTimeout(exec));
            seconds = seconds.min(timeout);
        }
        let state = self.msgs.entry(msg).or_default();
        state.executions += 1;
        let fails = state.poison;
        let repeat = state.executions > 1;
        if state.executions == 1 {
            self.tally.executed_messages += 1;
        } else if state.executions == 2 {
            self.tally.messages_executed_more_than_once += 1;
        }
        self.execs.insert(
            exec,
            Execution {
                msg,
                worker: w,
                handle,
                started_ms: self.now,
                end_ms: end,
                gen: 0,
                fails,
                receive_count,
            },
        );
        self.running_by_msg.entry(msg).or_default().push(exec);
        self.workers[w] = WorkerState::Busy(exec);
        self.at(end, Ev::Complete(exec, 0));
        if self.sc.consumers.heartbeat {
            let beat = self.now + (self.lease_ms / 3).max(1);
            self.at(beat, Ev::Heartbeat(exec));
        }
        self.tally.executions += 1;
        self.step.executions += 1;
        self.step.latency_sum_s += seconds;
        self.tally.latency_sum_s += seconds;
        if repeat {
            self.tally.duplicate_executions += 1;
            self.step.duplicates += 1;
        }
        self.tally.peak_db_running = self.tally.peak_db_running.max(self.running());
        self.window.push_back((self.now, msg));
        *self.window_counts.entry(msg).or_default() += 1;
    }

    /// Stretches (or shrinks) what is left of each execution by `factor`.
    fn rescale(&mut self, execs: &[u64], factor: f64) {
        for id in execs {
            if let Some(e) = self.execs.get_mut(id) {
                let remaining = e.end_ms.saturating_sub(self.now) as f64;
                e.end_ms = self.now + (remaining * factor).max(1.0) as u64;
                e.gen += 1;
                let (end, gen) = (e.end_ms, e.gen);
                self.at(end, Ev::Complete(*id, gen));
            }
        }
    }

    pub(super) fn heartbeat(&mut self, exec: u64) {
        let Some(e) = self.execs.get(&exec) else {
            return;
        };
        let (handle, msg) = (e.handle.clone(), e.msg);
        let draining = matches!(self.workers[e.worker], WorkerState::Draining(_));
        if draining && self.sc.consumers.heartbeat_stops_on_shutdown {
            return;
        }
        match self
            .engine
            .change_visibility(QUEUE, &handle, self.sc.queue.visibility_timeout_s)
        {
            Ok(()) => {
                if let Some(expires) = self.in_progress.get_mut(&msg) {
                    *expires = self.now + self.lease_ms + self.lease_ms / 3;
                }
                let next = self.now + (self.lease_ms / 3).max(1);
                self.at(next, Ev::Heartbeat(exec));
            }
            Err(_) => {
                // The lease is lost: the runtime cancels the work.
                self.tally.lost_leases += 1;
                if let Some(e) = self.remove_exec(exec) {
                    self.in_progress.remove(&e.msg);
                    self.free_worker(e.worker);
                }
            }
        }
    }

    fn free_worker(&mut self, w: usize) {
        match self.workers[w] {
            WorkerState::Draining(_) => {
                self.workers[w] = WorkerState::Down;
                let up = self.now + ms(self.deploy_restart_s());
                self.at(up, Ev::WorkerUp(w));
            }
            WorkerState::Gone | WorkerState::Down => {}
            _ => {
                self.workers[w] = WorkerState::Idle;
                self.idle.insert(w);
            }
        }
    }

    pub(super) fn complete(&mut self, exec: u64, gen: u32) -> Result<(), SimError> {
        if self.execs.get(&exec).is_none_or(|e| e.gen != gen) {
            return Ok(());
        }
        let e = self.remove_exec(exec).expect("checked above");
        self.free_worker(e.worker);
        let c = &self.sc.consumers;
        if e.fails {
            self.in_progress.remove(&e.msg);
            let visibility = match c.on_failure.as_str() {
                "release" => Some(0),
                "backoff" => Some(self.backoff_s(e.receive_count)),
                _ => None,
            };
            if let Some(v) = visibility {
                let _ = self.engine.change_visibility(QUEUE, &e.handle, v);
            }
            return Ok(());
        }
        if let Some(state) = self.msgs.get_mut(&e.msg) {
            state.succeeded = true;
        }
        if c.idempotency {
            self.completed.insert(e.msg);
            self.in_progress.remove(&e.msg);
        }
        let _ = e.started_ms;
        self.finish_message(e.msg, &e.handle)
    }

    /// Deletes a message's handle; forgets the message once it has left the queue.
    fn finish_message(&mut self, msg: u64, handle: &str) -> Result<(), SimError> {
        let outcome = self.engine.delete_message(QUEUE, handle)?;
        if outcome.removed {
            self.tally.completed += 1;
        }
        if (outcome.removed || !outcome.late) && !self.running_by_msg.contains_key(&msg) {
            self.msgs.remove(&msg);
        }
        Ok(())
    }

    /// Messages the engine moved to the DLQ since we last looked.
    pub(super) fn collect_dead_letters(&mut self) -> Result<(), SimError> {
        if self.sc.queue.max_receive_count == 0 {
            return Ok(());
        }
        let moved = self.engine.stats(QUEUE)?.dead_lettered;
        if moved == self.dead_lettered_seen {
            return Ok(());
        }
        self.dead_lettered_seen = moved;
        loop {
            let request = ReceiveRequest {
                max_messages: 10,
                visibility_s: Some(43_200),
                attempt_id: None,
            };
            let batch = self.engine.receive(DLQ, &request)?;
            if batch.is_empty() {
                break;
            }
            for d in batch {
                let msg: u64 = d.body.parse().unwrap_or(u64::MAX);
                self.tally.dlq_messages += 1;
                if let Some(state) = self.msgs.get(&msg) {
                    if state.succeeded {
                        self.tally.dlq_messages_already_succeeded += 1;
                    }
                    if state.poison {
                        if let Some(first) = state.first_receive_ms {
                            self.tally.times_to_dlq_ms.push(self.now - first);
                        }
                    }
                }
                if !self.running_by_msg.contains_key(&msg) {
                    self.msgs.remove(&msg);
                }
            }
        }
        Ok(())
    }
}

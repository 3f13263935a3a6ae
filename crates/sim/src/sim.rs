//! The event loop: a virtual clock, the real engine, workers, a database, and triggers.
//!
//! Deterministic: every choice comes from the seeded RNG or from ordered structures, so the
//! same scenario and seed give the same output. Processing time is drawn when an execution
//! starts (unloaded time x blip x database load at that moment); when a duplicate of a message
//! starts, every running copy of it is slowed by the row-lock contention factor.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use leasehold_engine::{Clock, Engine, EngineConfig, LeaseMode, ManualClock, NewMessage};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};

use crate::model::WorkModel;
use crate::scenario::Scenario;

mod consumers;
mod tenants;
use crate::{Row, SimError};

const QUEUE: &str = "work";
const DLQ: &str = "dlq";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrival,
    /// The steady arrival rate changes: draw the next arrival afresh.
    RateChange,
    Burst(usize),
    /// The next message of tenant `i` (`Scenario::tenants`).
    TenantArrival(usize),
    Send(u64),
    Complete(u64, u32),
    Heartbeat(u64),
    Dispatch,
    /// A Lambda function's timeout: the execution is killed if it still runs.
    FunctionTimeout(u64),
    Step,
    TriggerStart(usize),
    TriggerEnd(usize),
    DeployStop(usize, usize),
    GraceEnd(u64),
    WorkerUp(usize),
    Scale,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WorkerState {
    Idle,
    Busy(u64),
    Draining(u64),
    Down,
    Gone,
}

struct Execution {
    msg: u64,
    worker: usize,
    handle: String,
    started_ms: u64,
    end_ms: u64,
    gen: u32,
    fails: bool,
    receive_count: u32,
}

#[derive(Default)]
struct MsgState {
    first_receive_ms: Option<u64>,
    poison: bool,
    executions: u32,
    succeeded: bool,
    crashed_at: Option<u64>,
    /// Its unloaded processing time, kept for every execution when `work.per_message`.
    unloaded_s: Option<f64>,
    /// Its tenant (`Scenario::tenants`), and when it was sent.
    tenant: Option<usize>,
    sent_ms: u64,
}

/// What the run measured, row by row and in all.
#[derive(Default)]
pub struct Tally {
    pub arrivals: u64,
    pub executions: u64,
    pub duplicate_executions: u64,
    pub executed_messages: u64,
    pub messages_executed_more_than_once: u64,
    pub skipped_duplicates: u64,
    pub put_back_in_progress: u64,
    /// Redeliveries put back because the retry budget was spent.
    pub retries_refused: u64,
    pub completed: u64,
    pub dlq_messages: u64,
    pub dlq_messages_already_succeeded: u64,
    pub crash_recoveries_ms: Vec<u64>,
    pub times_to_dlq_ms: Vec<u64>,
    /// How long executions of poison messages ran, however each ended: the workers' time
    /// they took.
    pub poison_work_ms: u64,
    /// How long the executions a crash or a deploy killed had run: work lost.
    pub lost_work_ms: u64,
    pub lost_leases: u64,
    /// Executions a Lambda function's timeout killed.
    pub function_timeouts: u64,
    pub peak_db_running: u32,
    pub peak_workers: u32,
    pub latency_sum_s: f64,
    /// Send to first receive, by tenant (`scenario::OTHERS` for the steady arrivals).
    pub dwell_ms: std::collections::BTreeMap<String, Vec<u64>>,
    pub rows: Vec<Row>,
}

pub struct Simulation<'a> {
    sc: &'a Scenario,
    clock: ManualClock,
    engine: Engine,
    rng: StdRng,
    backoff_rng: StdRng,
    work: WorkModel,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    now: u64,
    end: u64,
    lease_ms: u64,
    workers: Vec<WorkerState>,
    idle: BTreeSet<usize>,
    execs: HashMap<u64, Execution>,
    next_exec: u64,
    running_by_msg: HashMap<u64, Vec<u64>>,
    msgs: HashMap<u64, MsgState>,
    next_msg: u64,
    completed: HashSet<u64>,
    in_progress: HashMap<u64, u64>,
    blip: f64,
    tokens: f64,
    tokens_at: u64,
    /// The retry budget's tokens (`Consumers::retry_budget`).
    retry_tokens: f64,
    dispatch_at: Option<u64>,
    dead_lettered_seen: u64,
    late_deletes_seen: u64,
    window: VecDeque<(u64, u64)>,
    window_counts: HashMap<u64, u32>,
    step: StepTally,
    pub tally: Tally,
}

#[derive(Default)]
struct StepTally {
    arrivals: u64,
    executions: u64,
    duplicates: u64,
    latency_sum_s: f64,
}

fn ms(seconds: f64) -> u64 {
    (seconds * 1000.0).round().max(0.0) as u64
}

impl<'a> Simulation<'a> {
    pub fn new(sc: &'a Scenario) -> Result<Simulation<'a>, SimError> {
        let clock = ManualClock::new(1_700_000_000_000);
        let config = EngineConfig {
            lease_mode: if sc.queue.lease_mode == "aws" {
                LeaseMode::Aws
            } else {
                LeaseMode::Strict
            },
            seed: sc.seed,
            ..EngineConfig::default()
        };
        let mut engine = Engine::new(Arc::new(clock.clone()), config);
        let mut attributes = vec![
            (
                "VisibilityTimeout".to_string(),
                sc.queue.visibility_timeout_s.to_string(),
            ),
            (
                "MessageRetentionPeriod".to_string(),
                sc.queue.retention_s.to_string(),
            ),
        ];
        if sc.queue.max_receive_count > 0 {
            engine.create_queue(
                DLQ,
                &[("MessageRetentionPeriod".into(), "1209600".into())],
                &[],
            )?;
            let policy = format!(
                r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":{}}}"#,
                engine.queue_arn(DLQ),
                sc.queue.max_receive_count
            );
            attributes.push(("RedrivePolicy".into(), policy));
        }
        engine.create_queue(QUEUE, &attributes, &[])?;
        let workers = sc.scaling.workers as usize;
        let start = clock.now_ms();
        let mut sim = Simulation {
            sc,
            clock,
            engine,
            rng: StdRng::seed_from_u64(sc.seed),
            backoff_rng: StdRng::seed_from_u64(sc.seed ^ 0x00ba_c0ff),
            work: WorkModel::new(&sc.work),
            events: BinaryHeap::new(),
            seq: 0,
            now: start,
            end: start + ms(sc.duration_s),
            lease_ms: u64::from(sc.queue.visibility_timeout_s) * 1000,
            workers: vec![WorkerState::Idle; workers],
            idle: (0..workers).collect(),
            execs: HashMap::new(),
            next_exec: 0,
            running_by_msg: HashMap::new(),
            msgs: HashMap::new(),
            next_msg: 0,
            completed: HashSet::new(),
            in_progress: HashMap::new(),
            blip: 1.0,
            tokens: sc.consumers.rate_limit_per_s.max(1.0),
            tokens_at: start,
            retry_tokens: 0.0,
            dispatch_at: None,
            dead_lettered_seen: 0,
            late_deletes_seen: 0,
            window: VecDeque::new(),
            window_counts: HashMap::new(),
            step: StepTally::default(),
            tally: Tally::default(),
        };
        sim.schedule_start()?;
        Ok(sim)
    }

    fn at(&mut self, time: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((time, self.seq, ev)));
    }

    fn schedule_start(&mut self) -> Result<(), SimError> {
        let start = self.now;
        match self.sc.arrivals.kind.as_str() {
            "file" => {
                let path = self.sc.arrivals.file.clone().unwrap_or_default();
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    SimError::Scenario(format!("cannot read arrivals file {path}: {e}"))
                })?;
                for line in text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                {
                    let t: f64 = line.parse().map_err(|_| {
                        SimError::Scenario(format!("arrivals file {path}: {line:?} is not a time"))
                    })?;
                    self.at(start + ms(t), Ev::Send(0));
                }
            }
            _ if self.sc.arrivals.rate_per_s > 0.0 => self.at(start, Ev::Arrival),
            _ if !self.sc.arrivals.rate_changes.is_empty() => self.at(start, Ev::RateChange),
            _ => {}
        }
        for (i, b) in self.sc.arrivals.bursts.iter().enumerate() {
            self.at(start + ms(b.at_s), Ev::Burst(i));
        }
        self.schedule_tenants(start);
        for (i, t) in self.sc.triggers.iter().enumerate() {
            self.at(start + ms(t.start_s), Ev::TriggerStart(i));
            if t.kind == "blip" {
                self.at(start + ms(t.end_s), Ev::TriggerEnd(i));
            }
        }
        self.at(start + ms(self.sc.step_s), Ev::Step);
        if self.sc.scaling.kind == "lambda" {
            self.at(start, Ev::Scale);
        }
        Ok(())
    }

    /// Runs to the end, reporting progress as a fraction.
    pub fn run(mut self, progress: &mut dyn FnMut(f64)) -> Result<Tally, SimError> {
        let start = self.now;
        let total = (self.end - start).max(1) as f64;
        let mut reported = 0u64;
        while let Some(Reverse((time, _, ev))) = self.events.pop() {
            if time > self.end {
                break;
            }
            if time > self.now {
                self.clock.advance_ms(time - self.now);
                self.now = time;
            }
            self.handle(ev)?;
            let done = (self.now - start) * 100 / (self.end - start).max(1);
            if done > reported {
                reported = done;
                progress((self.now - start) as f64 / total);
                // A hundred times a run: the real engine under the lab still keeps its
                // invariants (whole queues, whatever their size).
                self.check_engine();
            }
        }
        self.finish();
        self.check_engine();
        Ok(self.tally)
    }

    /// In debug builds (the tests), panics if the engine broke an invariant.
    fn check_engine(&self) {
        if cfg!(debug_assertions) {
            if let Err(broken) = self.engine.check_invariants() {
                panic!("the simulated engine broke an invariant: {broken}");
            }
        }
    }

    fn handle(&mut self, ev: Ev) -> Result<(), SimError> {
        match ev {
            Ev::Arrival => {
                self.send(false)?;
                self.schedule_arrival();
            }
            Ev::RateChange => self.schedule_arrival(),
            Ev::TenantArrival(i) => self.tenant_arrival(i)?,
            Ev::Send(_) => self.send(false)?,
            Ev::Burst(i) => {
                for _ in 0..self.sc.arrivals.bursts[i].count {
                    self.send(false)?;
                }
            }
            Ev::Complete(exec, gen) => self.complete(exec, gen)?,
            Ev::Heartbeat(exec) => self.heartbeat(exec),
            Ev::FunctionTimeout(exec) => self.time_out(exec),
            Ev::Dispatch => {
                if self.dispatch_at.is_some_and(|t| t <= self.now) {
                    self.dispatch_at = None;
                }
            }
            Ev::Step => {
                self.record_row();
                let next = self.now + ms(self.sc.step_s);
                self.at(next, Ev::Step);
            }
            Ev::TriggerStart(i) => self.trigger(i)?,
            Ev::TriggerEnd(_) => self.blip = 1.0,
            Ev::DeployStop(worker, trigger) => self.deploy_stop(worker, trigger),
            Ev::GraceEnd(exec) => {
                if let Some(e) = self.execs.get(&exec) {
                    let (worker, handle) = (e.worker, e.handle.clone());
                    self.kill(exec);
                    // The runtime gives back what its grace could not finish; a consumer
                    // whose heartbeat stopped at shutdown, or a naive one, leaves it to its
                    // lease.
                    let c = &self.sc.consumers;
                    if c.heartbeat && !c.heartbeat_stops_on_shutdown {
                        let _ = self.engine.change_visibility(QUEUE, &handle, 0);
                    }
                    self.workers[worker] = WorkerState::Down;
                    let up = self.now + ms(self.deploy_restart_s());
                    self.at(up, Ev::WorkerUp(worker));
                }
            }
            Ev::WorkerUp(w) => {
                if self.workers[w] == WorkerState::Down {
                    self.workers[w] = WorkerState::Idle;
                    self.idle.insert(w);
                }
            }
            Ev::Scale => self.scale(),
        }
        self.dispatch()
    }

    fn deploy_restart_s(&self) -> f64 {
        self.sc
            .triggers
            .iter()
            .find(|t| t.kind == "deploy")
            .map_or(30.0, |t| t.restart_after_s)
    }

    /// The next steady arrival, at the rate in force now; a Poisson process forgets, so a
    /// rate change on the way simply draws again from there.
    fn schedule_arrival(&mut self) {
        let t_s = self.elapsed_s();
        let rate = self.sc.arrivals.rate_at(t_s);
        let next = Exp::new(rate)
            .ok()
            .filter(|_| rate > 0.0)
            .map(|d| self.now + ms(d.sample(&mut self.rng)).max(1));
        let change = self
            .sc
            .arrivals
            .next_change_after(t_s)
            .map(|c| self.now + ms(c - t_s).max(1));
        match (next, change) {
            (Some(n), Some(c)) if c < n => self.at(c, Ev::RateChange),
            (Some(n), _) => self.at(n, Ev::Arrival),
            (None, Some(c)) => self.at(c, Ev::RateChange),
            (None, None) => {}
        }
    }

    /// When an execution from `start` to `end` really ends, given the table locks: if it
    /// reaches its write (after 1 - contention of its time) while the rows are locked, it
    /// waits for the lock's end and then does the rest.
    fn locked_end(&self, start: u64, end: u64) -> u64 {
        let origin = self.end - ms(self.sc.duration_s);
        let write_share = 1.0 - self.sc.database.contention.clamp(0.0, 1.0);
        self.sc
            .triggers
            .iter()
            .filter(|t| t.kind == "lock")
            .fold(end, |end, t| {
                let (from, to) = (origin + ms(t.start_s), origin + ms(t.end_s));
                let length = (end - start) as f64;
                let write = start + (length * write_share) as u64;
                if (from..to).contains(&write) {
                    to + (length * (1.0 - write_share)) as u64
                } else {
                    end
                }
            })
    }

    /// Seconds since the run began.
    fn elapsed_s(&self) -> f64 {
        (self.now - (self.end - ms(self.sc.duration_s))) as f64 / 1000.0
    }

    fn send(&mut self, poison: bool) -> Result<(), SimError> {
        self.send_as(poison, None)
    }

    /// Sends a message of `tenant` (None: of no tenant).
    fn send_as(&mut self, poison: bool, tenant: Option<usize>) -> Result<(), SimError> {
        let msg = self.next_msg;
        self.next_msg += 1;
        let mut message = NewMessage::new(msg.to_string());
        message.group_id = self.group_of(tenant);
        self.engine.send(QUEUE, message)?;
        self.msgs.insert(
            msg,
            MsgState {
                poison,
                tenant,
                sent_ms: self.now,
                ..MsgState::default()
            },
        );
        self.tally.arrivals += 1;
        self.step.arrivals += 1;
        Ok(())
    }

    fn trigger(&mut self, i: usize) -> Result<(), SimError> {
        let t = self.sc.triggers[i].clone();
        match t.kind.as_str() {
            "blip" => self.blip = t.factor,
            // Each execution's wait is settled when it starts (`locked_end`).
            "lock" => {}
            "poison" => {
                for _ in 0..t.count {
                    self.send(true)?;
                }
            }
            "crash" => {
                let busy: Vec<usize> = (0..self.workers.len())
                    .filter(|w| matches!(self.workers[*w], WorkerState::Busy(_)))
                    .take(t.workers as usize)
                    .collect();
                for w in busy {
                    if let WorkerState::Busy(exec) = self.workers[w] {
                        self.kill(exec);
                    }
                    self.workers[w] = WorkerState::Down;
                    let up = self.now + ms(t.restart_after_s);
                    self.at(up, Ev::WorkerUp(w));
                }
            }
            _ => {
                for w in 0..self.workers.len() {
                    let when = self.now + ms(t.interval_s * w as f64);
                    self.at(when, Ev::DeployStop(w, i));
                }
            }
        }
        Ok(())
    }

    fn deploy_stop(&mut self, w: usize, trigger: usize) {
        let restart = ms(self.sc.triggers[trigger].restart_after_s);
        match self.workers[w] {
            WorkerState::Idle => {
                self.idle.remove(&w);
                self.workers[w] = WorkerState::Down;
                self.at(self.now + restart, Ev::WorkerUp(w));
            }
            WorkerState::Busy(exec) => {
                self.workers[w] = WorkerState::Draining(exec);
                let grace = self.now + ms(self.sc.consumers.graceful_shutdown_s);
                self.at(grace, Ev::GraceEnd(exec));
            }
            _ => {}
        }
    }

    fn scale(&mut self) {
        let visible = self.engine.counts(QUEUE).map_or(0, |c| c.visible as u64);
        let active = (self.workers.iter())
            .filter(|w| **w != WorkerState::Gone)
            .count();
        let change = self.sc.lambda_change(visible, active);
        for _ in 0..change.max(0) {
            self.workers.push(WorkerState::Idle);
            self.idle.insert(self.workers.len() - 1);
        }
        for _ in 0..(-change).max(0) {
            let Some(w) = self.idle.pop_last() else { break };
            self.workers[w] = WorkerState::Gone;
        }
        let next = self.now + ms(self.sc.scaling.interval_s);
        self.at(next, Ev::Scale);
    }

    fn running(&self) -> u32 {
        self.execs.len() as u32
    }

    fn record_row(&mut self) {
        let horizon = self.now.saturating_sub(ms(self.sc.amplification_window_s));
        while self.window.front().is_some_and(|(t, _)| *t < horizon) {
            let (_, msg) = self.window.pop_front().expect("front exists");
            if let Some(n) = self.window_counts.get_mut(&msg) {
                *n -= 1;
                if *n == 0 {
                    self.window_counts.remove(&msg);
                }
            }
        }
        let amplification = if self.window_counts.is_empty() {
            1.0
        } else {
            self.window.len() as f64 / self.window_counts.len() as f64
        };
        let counts = self
            .engine
            .counts(QUEUE)
            .unwrap_or(leasehold_engine::QueueCounts {
                visible: 0,
                not_visible: 0,
                delayed: 0,
            });
        let late = self
            .engine
            .stats(QUEUE)
            .map(|s| s.late_deletes)
            .unwrap_or(0);
        let workers = self
            .workers
            .iter()
            .filter(|w| !matches!(w, WorkerState::Gone | WorkerState::Down))
            .count() as u32;
        self.tally.peak_workers = self.tally.peak_workers.max(workers);
        let step = std::mem::take(&mut self.step);
        self.tally.rows.push(Row {
            t_s: self.elapsed_s(),
            arrivals: step.arrivals,
            executions: step.executions,
            duplicate_executions: step.duplicates,
            amplification,
            late_deletes: late - self.late_deletes_seen,
            visible: counts.visible as u64,
            in_flight: counts.not_visible as u64,
            db_running: self.running(),
            db_latency_s: if step.executions > 0 {
                step.latency_sum_s / step.executions as f64
            } else {
                0.0
            },
            workers,
            dlq_messages: self.tally.dlq_messages,
        });
        self.late_deletes_seen = late;
    }

    fn finish(&mut self) {
        let _ = self.collect_dead_letters();
    }
}

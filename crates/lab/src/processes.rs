//! A fleet of consumer processes, for the scenarios whose triggers stop consumers (a crash, a
//! deploy) and for a `lambda` fleet: each consumer is the lab's binary run as `leasehold
//! lab-consumer` (its spec on stdin), in a process group of its own, with a connection of its
//! own to the downstream (whose capacity is its slots). A crash SIGKILLs the groups of the
//! busy ones, a deploy SIGTERMs each in turn (it drains), and both start them again after
//! the trigger's delay; a lambda fleet's controller starts and stops them (`scale`); the
//! run's end kills them all. A consumer whose lab dies sees its stdin close and exits, so
//! none outlives it.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use leasehold_sim::Scenario;
use leasehold_worker::CancellationToken;
use rustix::process::{kill_process_group, Pid, Signal};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use crate::consumers::{launch, Site, WorkDraw};
use crate::downstream::{Executor, Reach};
use crate::LabError;

/// Whether the scenario's consumers run as processes: a crash kills some of them, a deploy
/// stops and starts them all, a lambda fleet's controller starts and stops them.
pub fn needed(scenario: &Scenario) -> bool {
    is_lambda(scenario)
        || (scenario.triggers.iter()).any(|t| matches!(t.kind.as_str(), "crash" | "deploy"))
}

/// Whether the fleet is a `lambda` one: its size follows the queue's visible count.
pub fn is_lambda(scenario: &Scenario) -> bool {
    scenario.scaling.kind == "lambda"
}

/// What one consumer process runs: its queue, the downstream, the scenario, and which
/// consumer it is (`worker`, from 0) in which start of it (`incarnation`, from 0).
#[derive(Clone, Serialize, Deserialize)]
pub struct ConsumerSpec {
    pub endpoint: String,
    pub queue_url: String,
    pub reach: Reach,
    pub scenario: Scenario,
    pub worker: i32,
    pub incarnation: u32,
}

/// The consumer process's body (`leasehold lab-consumer`, its spec the first line of its
/// stdin, written by the lab): one consumer of the scenario's kind on the queue, until the
/// lab's end of stdin closes (stopped at once) or a SIGTERM (drained: the message under way
/// finishes, the runtime's within the scenario's `graceful_shutdown_s`). The caller ends the
/// process on return: the thread reading stdin may still wait.
pub async fn run_consumer() -> Result<(), LabError> {
    // First, so that a deploy's SIGTERM while it starts drains it rather than killing it.
    let mut terminate = signal(SignalKind::terminate())
        .map_err(|e| LabError::Setup(format!("lab-consumer: cannot take SIGTERM: {e}")))?;
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::stdin().lock(), &mut line).map(|_| line)
    })
    .await
    .map_err(|e| LabError::Setup(format!("lab-consumer: {e}")))?
    .map_err(|e| LabError::Setup(format!("lab-consumer: cannot read its spec: {e}")))?;
    let spec: ConsumerSpec = serde_json::from_str(&line)
        .map_err(|e| LabError::Setup(format!("lab-consumer: not a consumer's spec: {e}")))?;
    let client = crate::run::sqs_client(&spec.endpoint);
    // A Lambda function's timeout ends an execution that outlives it.
    let limit = is_lambda(&spec.scenario).then(|| {
        Duration::from_secs_f64(spec.scenario.scaling.function_timeout_s.clamp(0.001, 900.0))
    });
    let executor = Executor::for_process(&spec.reach, spec.worker, limit).await?;
    let (stop, drain) = (CancellationToken::new(), CancellationToken::new());
    let idempotency_url = spec.reach.url();
    let site = Site {
        scenario: &spec.scenario,
        client: &client,
        queue_url: &spec.queue_url,
        idempotency_url: &idempotency_url,
        stop: &stop,
        drain: &drain,
        grace: Duration::from_secs_f64(
            spec.scenario
                .consumers
                .graceful_shutdown_s
                .clamp(0.0, 600.0),
        ),
    };
    let draw = WorkDraw::for_process(&spec.scenario, spec.worker, spec.incarnation);
    let fleet = launch(&site, vec![executor], draw).await?;
    // The lab holds the other end of stdin: when it closes, the lab is done or gone.
    let orphaned = CancellationToken::new();
    let reader = orphaned.clone();
    tokio::task::spawn_blocking(move || {
        let mut buffer = [0u8; 64];
        while let Ok(1..) = std::io::Read::read(&mut std::io::stdin(), &mut buffer) {}
        reader.cancel();
    });
    // SIGTERM (a deploy) drains: the message under way finishes, no other is taken.
    tokio::select! {
        _ = orphaned.cancelled() => stop.cancel(),
        _ = terminate.recv() => {}
    }
    drain.cancel();
    tokio::select! {
        _ = fleet.join() => {}
        _ = orphaned.cancelled() => stop.cancel(),
    }
    Ok(())
}

/// SIGTERM's number, as an exit status reports it.
fn sigterm_number() -> i32 {
    Signal::TERM.as_raw()
}

/// The running consumer processes of a run.
pub struct Processes {
    exe: PathBuf,
    spec: ConsumerSpec,
    log: std::fs::File,
    children: Vec<Option<Child>>,
    incarnations: Vec<u32>,
    /// Consumers that ended on their own (a failure: see `consumers.log`).
    exited: u64,
    /// Consumers told to drain (SIGTERM): their end is no failure.
    draining: std::collections::HashSet<i32>,
}

impl Processes {
    /// Room for `slots` consumers from `exe` (this binary), the first `started` of them
    /// started, their stderr to `consumers.log` in `out`.
    pub async fn start(
        exe: &Path,
        spec: ConsumerSpec,
        (slots, started): (u32, u32),
        out: &Path,
    ) -> Result<Processes, LabError> {
        std::fs::create_dir_all(out).map_err(|e| LabError::Output(e.to_string()))?;
        let log = std::fs::File::create(out.join("consumers.log"))
            .map_err(|e| LabError::Output(format!("consumers.log: {e}")))?;
        let mut processes = Processes {
            exe: exe.to_path_buf(),
            spec,
            log,
            children: (0..slots).map(|_| None).collect(),
            incarnations: vec![0; slots as usize],
            exited: 0,
            draining: Default::default(),
        };
        for worker in 0..started.min(slots) as i32 {
            processes.spawn(worker).await?;
        }
        Ok(processes)
    }

    /// Starts consumer `worker`, its spec written to its stdin (not its command line, where
    /// any user could read the database's URL), and the pipe kept open.
    async fn spawn(&mut self, worker: i32) -> Result<(), LabError> {
        let index = usize::try_from(worker).unwrap_or(usize::MAX);
        let (Some(slot), Some(incarnation)) = (
            self.children.get_mut(index),
            self.incarnations.get_mut(index),
        ) else {
            return Ok(());
        };
        if slot.is_some() {
            // Running already (started again twice over): never replaced, which would kill it.
            return Ok(());
        }
        let spec = ConsumerSpec {
            worker,
            incarnation: *incarnation,
            ..self.spec.clone()
        };
        *incarnation += 1;
        let spec = serde_json::to_string(&spec).map_err(|e| LabError::Setup(e.to_string()))?;
        let log = self
            .log
            .try_clone()
            .map_err(|e| LabError::Output(e.to_string()))?;
        let mut child = Command::new(&self.exe)
            .arg("lab-consumer")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| LabError::Setup(format!("cannot start a consumer process: {e}")))?;
        let written = match child.stdin.as_mut() {
            Some(stdin) => stdin.write_all(format!("{spec}\n").as_bytes()).await,
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        };
        *slot = Some(child);
        written
            .map_err(|e| LabError::Setup(format!("cannot give a consumer process its spec: {e}")))
    }

    /// SIGKILLs consumer `worker`'s process group, as an out-of-memory kill would, and
    /// reaps it.
    pub async fn kill(&mut self, worker: i32) {
        let slot = usize::try_from(worker)
            .ok()
            .and_then(|i| self.children.get_mut(i));
        let Some(mut child) = slot.and_then(Option::take) else {
            return;
        };
        self.draining.remove(&worker);
        if let Some(pid) = child.id().and_then(|id| Pid::from_raw(id as i32)) {
            let _ = kill_process_group(pid, Signal::KILL);
        }
        let _ = child.wait().await;
    }

    /// Starts consumer `worker` again (a new incarnation, its own draws).
    pub async fn restart(&mut self, worker: i32) -> Result<(), LabError> {
        self.spawn(worker).await
    }

    /// Whether consumer `worker` runs (started, not killed, not ended).
    pub fn is_running(&mut self, worker: i32) -> bool {
        self.reap();
        usize::try_from(worker)
            .ok()
            .and_then(|i| self.children.get(i))
            .is_some_and(Option::is_some)
    }

    /// Reaps the consumers that ended, counting those that ended on their own rather than
    /// drained; answers that count so far.
    pub fn reap(&mut self) -> u64 {
        for (worker, slot) in (0..).zip(&mut self.children) {
            let ended = slot
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten());
            if let Some(status) = ended {
                *slot = None;
                // A drained consumer ends cleanly (or, told before it could take the
                // signal, by it); any other end is a failure.
                let drained = status.success() || status.signal() == Some(sigterm_number());
                if !(self.draining.remove(&worker) && drained) {
                    self.exited += 1;
                }
            }
        }
        self.exited
    }

    /// Whether consumer `worker` was told to drain and has not ended yet.
    pub fn is_draining(&mut self, worker: i32) -> bool {
        self.is_running(worker) && self.draining.contains(&worker)
    }

    /// Tells consumer `worker` to drain (SIGTERM to its group), as a deploy's stop does.
    pub fn terminate(&mut self, worker: i32) {
        let child = usize::try_from(worker)
            .ok()
            .and_then(|i| self.children.get(i))
            .and_then(Option::as_ref);
        if let Some(pid) = child
            .and_then(Child::id)
            .and_then(|id| Pid::from_raw(id as i32))
        {
            self.draining.insert(worker);
            let _ = kill_process_group(pid, Signal::TERM);
        }
    }

    /// Consumers running now, draining ones too (as the simulator's workers that are not
    /// gone or down).
    pub fn up(&mut self) -> u32 {
        self.reap();
        self.children.iter().filter(|c| c.is_some()).count() as u32
    }

    /// Consumers running and not told to stop: a lambda fleet's size.
    pub fn active(&mut self) -> usize {
        self.reap();
        (0..self.children.len() as i32)
            .filter(|w| self.children[*w as usize].is_some() && !self.draining.contains(w))
            .count()
    }

    /// A lambda fleet's controller's decision carried out (`Scenario::lambda_change`):
    /// positive, start that many consumers in free slots (lowest first); negative, tell that
    /// many idle ones to stop (highest first; `busy` are the consumers whose newest execution
    /// runs, and they are left to finish). Answers how many started or were told to stop.
    pub async fn scale(&mut self, change: i64, busy: &[i32]) -> Result<u32, LabError> {
        self.reap();
        let mut done = 0;
        if change > 0 {
            let free: Vec<i32> = (0..self.children.len() as i32)
                .filter(|w| self.children[*w as usize].is_none())
                .take(change as usize)
                .collect();
            for worker in free {
                self.spawn(worker).await?;
                done += 1;
            }
            return Ok(done);
        }
        let idle: Vec<i32> = (0..self.children.len() as i32)
            .rev()
            .filter(|w| self.children[*w as usize].is_some())
            .filter(|w| !self.draining.contains(w) && !busy.contains(w))
            .take(change.unsigned_abs() as usize)
            .collect();
        for worker in idle {
            self.terminate(worker);
            done += 1;
        }
        Ok(done)
    }

    /// Kills every consumer: the run is over.
    pub async fn kill_all(&mut self) {
        for worker in 0..self.children.len() as i32 {
            self.kill(worker).await;
        }
    }
}

/// A run's consumers: tasks of the lab's own process, or, where a crash or a deploy stops
/// them, processes of their own.
pub enum Crew {
    Tasks(crate::consumers::Fleet),
    Processes(Box<tokio::sync::Mutex<Processes>>),
}

impl Crew {
    /// Starts the fleet the scenario describes: processes of `exe` (this binary) if
    /// `needed`, else tasks.
    pub async fn start(
        target: &crate::consumers::Target<'_>,
        endpoint: &str,
        exe: &Path,
        out: &Path,
    ) -> Result<Crew, LabError> {
        if !needed(target.scenario) {
            return Ok(Crew::Tasks(crate::consumers::start(target).await?));
        }
        let spec = ConsumerSpec {
            endpoint: endpoint.to_string(),
            queue_url: target.queue_url.to_string(),
            reach: target.downstream.reach(),
            scenario: target.scenario.clone(),
            worker: 0,
            incarnation: 0,
        };
        let slots = crate::consumers::Fleet::size(target.scenario);
        // A lambda fleet starts as the simulator's does after its first scaling: one.
        let started = match is_lambda(target.scenario) {
            true => 1,
            false => slots,
        };
        let processes = Processes::start(exe, spec, (slots, started), out).await?;
        Ok(Crew::Processes(Box::new(tokio::sync::Mutex::new(
            processes,
        ))))
    }

    /// The processes, for the triggers that kill them.
    pub fn processes(&self) -> Option<&tokio::sync::Mutex<Processes>> {
        match self {
            Crew::Tasks(_) => None,
            Crew::Processes(processes) => Some(processes),
        }
    }

    /// What went wrong in the lab's own machinery so far: the tasks' count, or the consumer
    /// processes that ended on their own (what each failed on is in `consumers.log`).
    pub async fn failures(&self) -> crate::report::Counts {
        match self {
            Crew::Tasks(fleet) => fleet.failures.snapshot(),
            Crew::Processes(processes) => {
                let exited = processes.lock().await.reap();
                crate::report::Counts {
                    execution_failures: exited,
                    first_execution_error: (exited > 0).then(|| {
                        format!("{exited} consumer processes ended on their own: see consumers.log")
                    }),
                    ..Default::default()
                }
            }
        }
    }

    /// Ends the fleet after its stop token: every execution on the database is ended and
    /// every consumer waited for (processes killed); the runtime's stats, if it ran as tasks.
    pub async fn end(
        self,
        downstream: &crate::downstream::Downstream,
    ) -> Result<Option<leasehold_worker::WorkerStats>, LabError> {
        match self {
            Crew::Tasks(fleet) => {
                downstream.terminate_executions().await?;
                Ok(tokio::time::timeout(Duration::from_secs(10), fleet.join())
                    .await
                    .ok()
                    .flatten())
            }
            Crew::Processes(processes) => {
                processes.into_inner().kill_all().await;
                downstream.terminate_executions().await?;
                Ok(None)
            }
        }
    }

    /// Consumers up now (as the simulator's `workers`): a fleet of tasks is all up.
    pub async fn up(&self, scenario: &Scenario) -> u32 {
        match self {
            Crew::Tasks(_) => crate::consumers::Fleet::size(scenario),
            Crew::Processes(processes) => processes.lock().await.up(),
        }
    }

    /// Executions in progress now, as the simulator's `db_running`.
    pub async fn running(
        &self,
        downstream: &crate::downstream::Downstream,
    ) -> Result<u32, LabError> {
        match self {
            Crew::Tasks(_) => Ok(downstream.running()),
            Crew::Processes(_) => downstream.running_statements().await,
        }
    }
}

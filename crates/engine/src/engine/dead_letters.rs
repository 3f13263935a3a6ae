//! Dead letters: redrive policy checks, ListDeadLetterSourceQueues, and message move tasks.
//!
//! A move task progresses with the clock: `run_move_tasks` moves as many messages as the
//! task's rate allows by now. The server calls it on a timer; tests call it directly.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use rand::Rng;

use super::{paginate, Engine, QueuePage};
use crate::error::{EngineError, Result};
use crate::message::{format_message_id, MsgKey};
use crate::queue::numbering::stripe_of;
use crate::settings::QueueSettings;

/// At most this many messages move per task per call, so one call never holds the engine long.
const MOVE_BATCH: u64 = 10_000;
/// At most this many a task where a store keeps the bodies: each call's moves are one write
/// that copies every body it moves (up to 1 MiB each), which must fit the room above the
/// disk reserve (the embedded backend bounds all tasks together by it, `limit_moves`). Ten
/// calls a second move 500 a second, AWS's highest MaxNumberOfMessagesPerSecond.
pub const MOVE_BATCH_STORED: u64 = 50;
const MAX_MOVE_RATE: u32 = 500;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveTaskStatus {
    Running,
    Completed,
    Cancelled,
    Failed,
}

impl MoveTaskStatus {
    const ALL: [MoveTaskStatus; 4] = [
        MoveTaskStatus::Running,
        MoveTaskStatus::Completed,
        MoveTaskStatus::Cancelled,
        MoveTaskStatus::Failed,
    ];

    /// The status `as_str` names.
    pub fn parse(name: &str) -> Option<MoveTaskStatus> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            MoveTaskStatus::Running => "RUNNING",
            MoveTaskStatus::Completed => "COMPLETED",
            MoveTaskStatus::Cancelled => "CANCELLED",
            MoveTaskStatus::Failed => "FAILED",
        }
    }
}

/// A message move task, as the engine runs it and a store keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveTask {
    pub id: String,
    pub source: String,
    pub source_arn: String,
    pub destination_arn: Option<String>,
    pub rate: Option<u32>,
    pub status: MoveTaskStatus,
    pub moved: u64,
    pub to_move: u64,
    /// Messages stored at the start have keys up to this; later arrivals stay.
    pub limit: Option<MsgKey>,
    pub started_ms: u64,
    pub failure: Option<String>,
}

/// A move task as ListMessageMoveTasks reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveTaskInfo {
    /// Only while the task runs.
    pub task_handle: Option<String>,
    pub status: MoveTaskStatus,
    pub source_arn: String,
    pub destination_arn: Option<String>,
    pub max_per_second: Option<u32>,
    pub moved: u64,
    pub to_move: u64,
    pub failure_reason: Option<String>,
    pub started_ms: u64,
}

fn not_found(what: &str) -> EngineError {
    EngineError::resource_not_found(what)
}

/// What a task handle carries, in AWS's form: base64 of `{"taskId":...,"sourceArn":...}`.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskHandle {
    task_id: String,
    source_arn: String,
}

/// The rules of message move tasks that do not depend on where queues are kept, for every
/// backend: the engine's below, and PostgreSQL's.
impl MoveTask {
    /// A task that starts now on `source`, whose messages up to `limit` (`to_move` of them)
    /// are what it moves.
    pub fn new(
        id: String,
        source: &str,
        start: (&str, Option<&str>, Option<u32>),
        (limit, to_move): (Option<MsgKey>, u64),
        now: u64,
    ) -> MoveTask {
        let (source_arn, destination_arn, rate) = start;
        MoveTask {
            id,
            source: source.to_string(),
            source_arn: source_arn.to_string(),
            destination_arn: destination_arn.map(str::to_string),
            rate,
            status: MoveTaskStatus::Running,
            moved: 0,
            to_move,
            limit,
            started_ms: now,
            failure: None,
        }
    }

    /// The task's handle: base64 of its id and source ARN, as AWS's.
    pub fn handle(&self) -> String {
        let handle = TaskHandle {
            task_id: self.id.clone(),
            source_arn: self.source_arn.clone(),
        };
        STANDARD.encode(serde_json::to_string(&handle).expect("two strings serialize"))
    }

    /// The task id and source ARN a handle names, or AWS's error for a handle that is not one.
    pub fn read_handle(handle: &str) -> Result<(String, String)> {
        let bytes = STANDARD.decode(handle).ok();
        let parsed: Option<TaskHandle> = bytes.and_then(|b| serde_json::from_slice(&b).ok());
        parsed.map(|h| (h.task_id, h.source_arn)).ok_or_else(|| {
            EngineError::InvalidParameterValue("Value for parameter TaskHandle is invalid.".into())
        })
    }

    /// StartMessageMoveTask's checks, in AWS's order, given what the backend found: the
    /// source and destination queues (`Some(same type as the source)` for one that exists),
    /// the rate, whether the source is a dead-letter queue, and whether a task already runs
    /// on it. A destination of the other type is refused: a standard message has no group
    /// to take its place in a FIFO queue by.
    pub fn check_start(
        source_exists: bool,
        destination: Option<bool>,
        rate: Option<u32>,
        is_dead_letter_queue: impl FnOnce() -> bool,
        already_running: impl FnOnce() -> bool,
    ) -> Result<()> {
        if !source_exists {
            return Err(not_found("SourceArn"));
        }
        match destination {
            None => return Err(not_found("DestinationArn")),
            Some(false) => {
                return Err(EngineError::InvalidParameterValue(
                    "The destination queue must be of the same type as the source queue.".into(),
                ))
            }
            Some(true) => {}
        }
        if let Some(r) = rate.filter(|r| !(1..=MAX_MOVE_RATE).contains(r)) {
            return Err(EngineError::out_of_range(
                "MaxNumberOfMessagesPerSecond",
                r,
                "Must be between 1 and 500.",
            ));
        }
        if !is_dead_letter_queue() {
            return Err(EngineError::InvalidParameterValue(
                "Source queue must be configured as a Dead Letter Queue.".into(),
            ));
        }
        if already_running() {
            return Err(EngineError::InvalidParameterValue(
                "There is already a task running. Only one active task is allowed for a source queue arn at a given time."
                    .into(),
            ));
        }
        Ok(())
    }

    /// CancelMessageMoveTask on this task (None: there is no such task): it stops, and
    /// answers how many it had moved.
    pub fn cancel(task: Option<&mut MoveTask>) -> Result<u64> {
        let task =
            task.ok_or_else(|| EngineError::ResourceNotFound("Task does not exist.".into()))?;
        if task.status != MoveTaskStatus::Running {
            return Err(EngineError::InvalidParameterValue(
                "Only active tasks can be cancelled.".into(),
            ));
        }
        task.status = MoveTaskStatus::Cancelled;
        Ok(task.moved)
    }

    /// ListMessageMoveTasks' MaxResults: 1 unless given, at most 10.
    pub fn list_max(max_results: Option<u32>) -> Result<usize> {
        let max = max_results.unwrap_or(1);
        if !(1..=10).contains(&max) {
            return Err(EngineError::out_of_range(
                "MaxResults",
                max,
                "You must enter a number that's between 1 and 10.",
            ));
        }
        Ok(max as usize)
    }

    /// The task as ListMessageMoveTasks reports it: a handle only while it runs.
    pub fn info(&self) -> MoveTaskInfo {
        MoveTaskInfo {
            task_handle: (self.status == MoveTaskStatus::Running).then(|| self.handle()),
            status: self.status,
            source_arn: self.source_arn.clone(),
            destination_arn: self.destination_arn.clone(),
            max_per_second: self.rate,
            moved: self.moved,
            to_move: self.to_move,
            failure_reason: self.failure.clone(),
            started_ms: self.started_ms,
        }
    }

    /// How many more messages the task may move by `now`, at its rate, in one batch of at
    /// most `batch`.
    pub fn budget(&self, now: u64, batch: u64) -> u64 {
        let allowed = match self.rate {
            Some(rate) => now.saturating_sub(self.started_ms) * u64::from(rate) / 1000,
            None => u64::MAX,
        };
        allowed.saturating_sub(self.moved).min(batch)
    }
}

/// Why a move task failed: the queue it moves from or to is gone.
pub const MOVE_TASK_QUEUE_GONE: &str = "AWS.SimpleQueueService.NonExistentQueue";

impl Engine {
    /// Checks a RedrivePolicy: the target exists, is of the same type, and allows the source.
    pub(super) fn check_redrive(&self, source: &str, settings: &QueueSettings) -> Result<()> {
        let Some(policy) = &settings.redrive else {
            return Ok(());
        };
        let invalid = |reason: &str| {
            EngineError::InvalidParameterValue(format!(
                "Value {} for parameter RedrivePolicy is invalid. Reason: {reason}",
                policy.to_json()
            ))
        };
        // A dead-letter queue is in its source's region; one elsewhere does not exist here.
        let target = self
            .queue_key_from_arn(&policy.dead_letter_target_arn)
            .filter(|key| self.same_region(key, source))
            .and_then(|key| self.queues.get(&key))
            .ok_or_else(|| invalid("Dead letter target does not exist."))?
            .head();
        if target.meta.settings.fifo != settings.fifo {
            return Err(invalid(
                "Dead-letter queue must be same type of queue as the source.",
            ));
        }
        let source_arn = self.queue_arn(source);
        if let Some(allow) = &target.meta.settings.redrive_allow {
            if !allow.allows(&source_arn) {
                return Err(invalid(&format!(
                    "Queue {source_arn} is not allowed to use {} as its dead-letter queue by its RedriveAllowPolicy.",
                    policy.dead_letter_target_arn
                )));
            }
        }
        Ok(())
    }

    /// ListDeadLetterSourceQueues: queues whose RedrivePolicy targets `name`.
    pub fn list_dead_letter_source_queues(
        &self,
        name: &str,
        max_results: Option<usize>,
        next_token: Option<&str>,
    ) -> Result<QueuePage> {
        self.cell(name)?;
        let arn = self.queue_arn(name);
        let names = self
            .queues
            .iter()
            .filter(|(_, q)| {
                q.head()
                    .meta
                    .settings
                    .redrive
                    .as_ref()
                    .is_some_and(|p| p.dead_letter_target_arn == arn)
            })
            .map(|(n, _)| n.clone())
            .collect();
        paginate(names, max_results, next_token)
    }

    fn existing_queue_of_arn(&self, arn: &str, param: &str) -> Result<String> {
        self.queue_key_from_arn(arn).ok_or_else(|| not_found(param))
    }

    /// StartMessageMoveTask: moves a dead-letter queue's messages back to their sources (or
    /// to one destination), at most `rate` per second. Returns the task handle.
    pub fn start_move_task(
        &mut self,
        source_arn: &str,
        destination_arn: Option<&str>,
        rate: Option<u32>,
    ) -> Result<String> {
        let source = self.queue_key_from_arn(source_arn);
        let fifo = |key: &String| self.queues.get(key).map(|q| q.fifo);
        let source_fifo = source.as_ref().and_then(fifo);
        let destination = match destination_arn {
            None => Some(true),
            Some(arn) => self
                .queue_key_from_arn(arn)
                .and_then(|key| fifo(&key))
                .map(|dest_fifo| Some(dest_fifo) == source_fifo),
        };
        let is_dead_letter_queue = || {
            self.queues.values().any(|q| {
                q.head()
                    .meta
                    .settings
                    .redrive
                    .as_ref()
                    .is_some_and(|p| p.dead_letter_target_arn == source_arn)
            })
        };
        MoveTask::check_start(
            source.is_some(),
            destination,
            rate,
            is_dead_letter_queue,
            || false,
        )?;
        self.progress_move_tasks();
        let running = self
            .tasks
            .iter()
            .any(|t| t.source_arn == source_arn && t.status == MoveTaskStatus::Running);
        MoveTask::check_start(true, Some(true), None, || true, || running)?;
        let source = source.expect("checked above");
        let (cell, now) = self.stripes_now(&source)?;
        // The newest message of every stripe's, and how many they hold together.
        let (limit, to_move) = cell
            .stripes_mut()
            .map(|q| q.newest())
            .fold((None, 0), |(limit, count), (newest, held)| {
                (limit.max(newest), count + held)
            });
        // The generator starts again from the configured seed at every restart: an id a kept
        // task already has is drawn again, so that a handle never names two tasks.
        let id = loop {
            let id = format_message_id(self.rng.random());
            if !self.tasks.iter().any(|task| task.id == id) {
                break id;
            }
        };
        let start = (source_arn, destination_arn, rate);
        let task = MoveTask::new(id, &source, start, (limit, to_move as u64), now);
        let handle = task.handle();
        self.tasks.push(task);
        self.engine_changed();
        self.progress_move_tasks();
        Ok(handle)
    }

    /// CancelMessageMoveTask: stops a running task; returns how many it had moved.
    pub fn cancel_move_task(&mut self, handle: &str) -> Result<u64> {
        let (task_id, source_arn) = MoveTask::read_handle(handle)?;
        self.existing_queue_of_arn(&source_arn, "SourceArn")?;
        self.progress_move_tasks();
        let task = self
            .tasks
            .iter_mut()
            .find(|t| t.id == task_id && t.source_arn == source_arn);
        let moved = MoveTask::cancel(task)?;
        self.engine_changed();
        Ok(moved)
    }

    /// ListMessageMoveTasks: the most recent tasks of a source queue, newest first.
    pub fn list_move_tasks(
        &mut self,
        source_arn: &str,
        max_results: Option<u32>,
    ) -> Result<Vec<MoveTaskInfo>> {
        self.existing_queue_of_arn(source_arn, "SourceArn")?;
        let max = MoveTask::list_max(max_results)?;
        self.progress_move_tasks();
        Ok(self.listed_move_tasks(source_arn, max))
    }

    /// ListMessageMoveTasks as the tasks stand, moving nothing: for a server that serves
    /// reads only.
    pub fn move_tasks_as_they_stand(
        &self,
        source_arn: &str,
        max_results: Option<u32>,
    ) -> Result<Vec<MoveTaskInfo>> {
        self.existing_queue_of_arn(source_arn, "SourceArn")?;
        let max = MoveTask::list_max(max_results)?;
        Ok(self.listed_move_tasks(source_arn, max))
    }

    fn listed_move_tasks(&self, source_arn: &str, max: usize) -> Vec<MoveTaskInfo> {
        self.tasks
            .iter()
            .rev()
            .filter(|t| t.source_arn == source_arn)
            .take(max)
            .map(MoveTask::info)
            .collect()
    }

    /// Whether a message move task is running, so `run_move_tasks` has something to do.
    pub fn moves_running(&self) -> bool {
        self.tasks
            .iter()
            .any(|t| t.status == MoveTaskStatus::Running)
    }

    /// Moves what every running task may move by now. Returns the queues that received
    /// messages since the last `take_woken` (by this or by the move that starting, cancelling
    /// or listing a task makes first), so waiting receives on them can be woken.
    pub fn run_move_tasks(&mut self) -> Vec<String> {
        self.progress_move_tasks();
        self.take_woken()
    }

    /// Moves what every running task may move by now, noting the queues that received
    /// messages for `take_woken`.
    fn progress_move_tasks(&mut self) {
        let mut room = self.moves_room.unwrap_or(u64::MAX);
        let now = self.clock.now_ms();
        let mut woken = std::mem::take(&mut self.woken);
        for index in 0..self.tasks.len() {
            if room == 0 {
                break;
            }
            if self.tasks[index].status == MoveTaskStatus::Running {
                room -= self.progress_task(index, now, room, &mut woken);
            }
        }
        self.woken = woken;
    }

    /// The queues that received messages by a move task since the last call, once each:
    /// whoever runs a command through `&mut Engine` wakes their waiting receives.
    pub fn take_woken(&mut self) -> Vec<String> {
        let mut woken = std::mem::take(&mut self.woken);
        woken.sort();
        woken.dedup();
        woken
    }

    /// Moves what task `index` may move by now, at most `room`; answers how many it moved.
    fn progress_task(&mut self, index: usize, now: u64, room: u64, woken: &mut Vec<String>) -> u64 {
        self.engine_changed();
        let task = &self.tasks[index];
        let batch = match self.config.track_changes {
            true => MOVE_BATCH_STORED,
            false => MOVE_BATCH,
        };
        let budget = task.budget(now, batch).min(room);
        let (source, limit, fixed_destination, task_moved) = (
            task.source.clone(),
            task.limit,
            task.destination_arn.clone(),
            task.moved,
        );
        let mut outcome = None;
        let mut moved = 0;
        while moved < budget {
            let Some(limit) = limit else {
                outcome = Some((MoveTaskStatus::Completed, None));
                break;
            };
            if self.cell(&source).is_err() {
                outcome = Some((MoveTaskStatus::Failed, Some(MOVE_TASK_QUEUE_GONE)));
                break;
            }
            // Its stripes tick below: what that changes (a lease run out, a message expired)
            // is the store's to take.
            self.note(&source);
            let cell = self.queues.get_mut(&source).expect("looked up above");
            // The oldest ready message of any stripe.
            let Some((key, origin)) = cell
                .stripes_mut()
                .filter_map(|queue| {
                    queue.tick(now);
                    queue.oldest_ready(limit)
                })
                .min_by_key(|(key, _)| *key)
            else {
                cell.refresh();
                outcome = Some((MoveTaskStatus::Completed, None));
                break;
            };
            let destination = fixed_destination
                .as_deref()
                .or(origin.as_deref())
                .and_then(|arn| self.queue_key_from_arn(arn));
            let Some(destination) = destination else {
                outcome = Some((MoveTaskStatus::Failed, Some(MOVE_TASK_QUEUE_GONE)));
                break;
            };
            let cell = self.queues.get_mut(&source).expect("looked up above");
            let stripes = cell.count() as u32;
            let taken = cell.stripe_mut(stripe_of(key.seq, stripes));
            taken.touch();
            let from = taken.content_key(key);
            let message = taken.take_message(key).expect("just found");
            cell.refresh();
            let stored = message.content.is_none();
            self.note(&destination);
            let cell = self.queues.get_mut(&destination).expect("resolved above");
            // Spread over the destination's stripes made so far, one after the other.
            let made: Vec<usize> = cell.made_stripes().collect();
            let target = cell.stripe_mut(made[(task_moved + moved) as usize % made.len()]);
            target.tick(now);
            target.touch();
            let arrived = target.accept_moved(now, message);
            let to = target.content_key(arrived);
            cell.refresh();
            let content = self.content_moved(stored, from, to);
            self.pending.extend(content);
            woken.push(destination);
            moved += 1;
        }
        let task = &mut self.tasks[index];
        task.moved += moved;
        if let Some((status, failure)) = outcome {
            task.status = status;
            task.failure = failure.map(str::to_string);
        }
        moved
    }
}

//! Message move tasks on PostgreSQL, by the engine's rules (`MoveTask`): a task is a row of
//! `leasehold_move_tasks`; a round of its work (at its start, on a List or Cancel of its
//! source, and once a second from any server's tick) locks the row and moves, at the task's
//! rate, the receivable messages that were in the source when it started, oldest first,
//! each back to the queue it was dead-lettered from (or to the task's destination).

use std::collections::HashMap;

use leasehold_backend::{BackendError, MoveTaskStart};
use leasehold_engine::{
    format_message_id, EngineError, MoveTask, MoveTaskInfo, MoveTaskStatus, MsgKey,
    MOVE_TASK_QUEUE_GONE,
};

use crate::dead_letters::Destination;
use crate::notify::notify;
use crate::queues::{decode, now};
use crate::tx::Tx;
use crate::{cached, storable, to_i64, to_u64, unavailable, Core};

type Result<T> = std::result::Result<T, BackendError>;

/// At most this many messages a task's round moves: a round a second, so 500 a second, AWS's
/// highest MaxNumberOfMessagesPerSecond (a round is one transaction; the database, not a
/// local disk reserve, bounds what it writes).
const ROUND_MOVES: u64 = 500;

/// The columns `task_of_row` reads, in order.
const TASK_COLUMNS: &str = "id, source_key, source_arn, destination_arn, rate, status, moved, \
                            to_move, limit_sent_ms, limit_seq, started_ms, failure";

fn task_of_row(row: &tokio_postgres::Row) -> Result<MoveTask> {
    let status: String = row.get(5);
    let limit = match (row.get::<_, Option<i64>>(8), row.get::<_, Option<i64>>(9)) {
        (Some(sent_ms), Some(seq)) => Some(MsgKey {
            sent_ms: to_u64(sent_ms),
            seq: to_u64(seq),
        }),
        _ => None,
    };
    Ok(MoveTask {
        id: row.get(0),
        source: row.get(1),
        source_arn: row.get(2),
        destination_arn: row.get(3),
        rate: row.get::<_, Option<i32>>(4).map(|r| r.unsigned_abs()),
        status: MoveTaskStatus::parse(&status).ok_or_else(|| {
            BackendError::Failed(format!("a move task in the database has status {status}"))
        })?,
        moved: to_u64(row.get(6)),
        to_move: to_u64(row.get(7)),
        limit,
        started_ms: to_u64(row.get(10)),
        failure: row.get(11),
    })
}

/// A queue a task moves from or to, as a round finds it.
#[derive(Clone, Copy)]
struct Found {
    id: u64,
    fifo: bool,
}

/// What a round of a task did that its callers finish after the commit.
struct Progress {
    /// Queues that got messages: their polls wake.
    woken: Vec<String>,
    /// Leases that ran out unseen on the messages moved.
    expired: u64,
}

/// A round's messages to move, and whether rows another transaction held stopped it short.
struct Ready {
    /// Each message's seq, the queue it was dead-lettered from, and whether its lease ran
    /// out unseen (counted when it moves, as the engine counts it on its way out).
    rows: Vec<(i64, Option<String>, bool)>,
    held: bool,
}

impl Core {
    pub(crate) async fn start_task(&self, start: MoveTaskStart) -> Result<(String, Vec<String>)> {
        let tx = self.begin().await?;
        let source_arn = start.source_arn.as_str();
        let source = self.naming.key_of_arn(source_arn);
        let source_found = match &source {
            Some(key) if storable(source_arn) => self.find_queue(&tx, key).await?,
            _ => None,
        };
        let destination = match start.destination_arn.as_deref() {
            None => Some(true),
            Some(arn) => match self.naming.key_of_arn(arn) {
                Some(key) => self
                    .find_queue(&tx, &key)
                    .await?
                    .map(|dest| Some(dest.fifo) == source_found.map(|source| source.fifo)),
                None => None,
            },
        };
        let is_dead_letter_queue = source_found.is_some()
            && tx
            .query_one(
                &cached(
                    &tx,
                    "SELECT EXISTS (SELECT 1 FROM leasehold_queues WHERE dead_letter_target_arn = $1)",
                )
                .await?,
                &[&source_arn],
            )
            .await
            .map_err(|e| unavailable(&e))?
            .get::<_, bool>(0);
        MoveTask::check_start(
            source_found.is_some(),
            destination,
            start.per_second,
            || is_dead_letter_queue,
            || false,
        )?;
        let (source, source_found) = match (source, source_found) {
            (Some(key), Some(found)) => (key, found),
            _ => return Err(EngineError::QueueDoesNotExist.into()),
        };
        drop(tx);
        // Checked first, as the engine does; then every running task's round, in
        // transactions of their own (it stands even when this start is refused below).
        let mut woken = self.run_tasks().await?;
        let tx = self.begin().await?;
        let now = now(&tx).await?;
        let newest = self.newest(&tx, source_found.id, now).await?;
        let id = format_message_id(rand::random());
        let dest = start.destination_arn.as_deref();
        let mut task = MoveTask::new(
            id,
            &source,
            (source_arn, dest, start.per_second),
            newest,
            now,
        );
        let inserted = tx
            .execute(
                &cached(
                    &tx,
                    "INSERT INTO leasehold_move_tasks (id, source_key, source_arn, destination_arn,
                         rate, status, to_move, limit_sent_ms, limit_seq, started_ms)
                     VALUES ($1, $2, $3, $4, $5, 'RUNNING', $6, $7, $8, $9)
                     ON CONFLICT (source_arn) WHERE status = 'RUNNING' DO NOTHING",
                )
                .await?,
                &[
                    &task.id,
                    &task.source,
                    &task.source_arn,
                    &task.destination_arn,
                    &task.rate.map(|r| i32::try_from(r).unwrap_or(i32::MAX)),
                    &to_i64(task.to_move),
                    &task.limit.map(|k| to_i64(k.sent_ms)),
                    &task.limit.map(|k| to_i64(k.seq)),
                    &to_i64(now),
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let started = MoveTask::check_start(true, Some(true), None, || true, || inserted == 0);
        let mut expired = 0;
        if started.is_ok() {
            let progress = self.progress(&tx, &mut task, now).await?;
            woken.extend(progress.woken);
            expired = progress.expired;
        }
        tx.commit().await?;
        self.count_moved_expired(&task.source, expired);
        started?;
        Ok((task.handle(), woken))
    }

    pub(crate) async fn cancel_task(&self, handle: &str) -> Result<(u64, Vec<String>)> {
        let (task_id, source_arn) = MoveTask::read_handle(handle)?;
        self.check_source(&source_arn).await?;
        // The round stands even when this cancel is refused, as in the engine.
        let woken = self.run_tasks().await?;
        let tx = self.begin().await?;
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM leasehold_move_tasks
             WHERE id = $1 AND source_arn = $2 FOR UPDATE"
        );
        let row = match storable(&task_id) {
            true => tx
                .query_opt(&sql, &[&task_id, &source_arn])
                .await
                .map_err(|e| unavailable(&e))?,
            false => None,
        };
        let mut task = row.as_ref().map(task_of_row).transpose()?;
        let cancelled = MoveTask::cancel(task.as_mut());
        if let (Some(task), Ok(_)) = (&task, &cancelled) {
            self.save(&tx, task).await?;
        }
        tx.commit().await?;
        Ok((cancelled?, woken))
    }

    pub(crate) async fn list_tasks(
        &self,
        source_arn: &str,
        max: Option<u32>,
    ) -> Result<(Vec<MoveTaskInfo>, Vec<String>)> {
        self.check_source(source_arn).await?;
        let max = MoveTask::list_max(max)?;
        let woken = self.run_tasks().await?;
        let tx = self.begin().await?;
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM leasehold_move_tasks
             WHERE source_arn = $1 ORDER BY n DESC LIMIT $2"
        );
        let rows = tx
            .query(&sql, &[&source_arn, &to_i64(max as u64)])
            .await
            .map_err(|e| unavailable(&e))?;
        let tasks = rows
            .iter()
            .map(|row| task_of_row(row).map(|t| t.info()))
            .collect::<Result<Vec<_>>>()?;
        tx.commit().await?;
        Ok((tasks, woken))
    }

    /// A round of every running task, once a second from this server's tick.
    pub(crate) async fn run_due_tasks(&self) -> Result<Vec<String>> {
        if !self.tasks_clock.due() {
            return Ok(Vec::new());
        }
        self.run_tasks().await
    }

    /// One round of every running task, each in a transaction of its own and skipped if
    /// another server is running it; answers the queues that received messages. Any command
    /// on move tasks runs one first, as the engine's do, so what it reports is up to date.
    /// A round takes the send locks of the FIFO groups it moves into in one order; two
    /// rounds in one transaction would hold the first's while taking the second's, out of
    /// that order.
    pub(crate) async fn run_tasks(&self) -> Result<Vec<String>> {
        let running = (self.client().await?)
            .query(
                "SELECT id FROM leasehold_move_tasks WHERE status = 'RUNNING' ORDER BY n",
                &[],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM leasehold_move_tasks
             WHERE id = $1 AND status = 'RUNNING' FOR UPDATE SKIP LOCKED"
        );
        let mut woken = Vec::new();
        for row in &running {
            let id: String = row.get(0);
            // One task's failed round (the rows it met, a queue gone mid-round) neither stops
            // the others nor loses the wake-ups of the rounds already committed.
            match self.round(&sql, &id).await {
                Ok(queues) => woken.extend(queues),
                Err(error) => tracing::warn!(%error, task = %id, "a move task's round did not run"),
            }
        }
        woken.sort();
        woken.dedup();
        Ok(woken)
    }

    /// One round of the running task `id`, in a transaction of its own, unless another
    /// server holds it.
    async fn round(&self, sql: &str, id: &str) -> Result<Vec<String>> {
        let (tx, rows) = Tx::begin_with_query(self.client().await?, sql, &[&id]).await?;
        let Some(row) = rows.first() else {
            return Ok(Vec::new());
        };
        let mut task = task_of_row(row)?;
        let now = now(&tx).await?;
        let Progress { woken, expired } = self.progress(&tx, &mut task, now).await?;
        tx.commit().await?;
        self.count_moved_expired(&task.source, expired);
        Ok(woken)
    }

    /// A round of one task: moves what its rate allows by now, in order, until the source
    /// has nothing left from before the task started (Completed) or a queue it needs is
    /// gone (Failed), as the engine's `progress_task`; saves the task.
    async fn progress(&self, tx: &Tx, task: &mut MoveTask, now: u64) -> Result<Progress> {
        let budget = task.budget(now, ROUND_MOVES);
        let mut woken = Vec::new();
        let (mut moved, mut expired) = (0, 0);
        // One pass: a round takes the send locks of its destination groups once, sorted; a
        // second pass in the same transaction would take more while holding those.
        let outcome = 'round: {
            if budget == 0 {
                break 'round None;
            }
            let Some(limit) = task.limit else {
                break 'round Some((MoveTaskStatus::Completed, None));
            };
            let Some(source) = self.find_queue(tx, &task.source).await? else {
                break 'round Some((MoveTaskStatus::Failed, Some(MOVE_TASK_QUEUE_GONE)));
            };
            let Ready { rows, held } = self.oldest_ready(tx, source.id, limit, now, budget).await?;
            // Fewer than asked, none held: nothing from before the task started is left.
            let finished = !held && (rows.len() as u64) < budget;
            // Where each goes, up to the first whose queue is gone.
            let mut plan: Vec<(i64, String, Found)> = Vec::with_capacity(rows.len());
            let mut destinations: HashMap<String, Option<Found>> = HashMap::new();
            let mut gone = false;
            for (seq, origin, ran_out) in rows {
                let arn = task.destination_arn.clone().or(origin);
                let key = arn.as_deref().and_then(|arn| self.naming.key_of_arn(arn));
                let found = match &key {
                    Some(key) => match destinations.get(key) {
                        Some(found) => *found,
                        None => {
                            let found = self.find_queue(tx, key).await?;
                            destinations.insert(key.clone(), found);
                            found
                        }
                    },
                    None => None,
                };
                let (Some(key), Some(found)) = (key, found) else {
                    gone = true;
                    break;
                };
                expired += u64::from(ran_out);
                plan.push((seq, key, found));
            }
            self.lock_destination_groups(tx, source.id, &plan).await?;
            // Consecutive messages bound for one queue move together, in order.
            let mut run: Vec<i64> = Vec::new();
            let mut run_to: Option<(String, Found)> = None;
            for (seq, key, found) in plan {
                if run_to.as_ref().is_some_and(|(k, _)| *k != key) {
                    moved += self
                        .move_run(tx, source.id, &run_to, &mut run, now, &mut woken)
                        .await?;
                }
                run_to = Some((key, found));
                run.push(seq);
            }
            moved += self
                .move_run(tx, source.id, &run_to, &mut run, now, &mut woken)
                .await?;
            match (gone, finished) {
                (true, _) => Some((MoveTaskStatus::Failed, Some(MOVE_TASK_QUEUE_GONE))),
                (false, true) => Some((MoveTaskStatus::Completed, None)),
                // Budget spent, or stopped at a held row (moving past it would put a FIFO
                // group out of order): the next round goes on.
                (false, false) => None,
            }
        };
        task.moved += moved;
        if let Some((status, failure)) = outcome {
            task.status = status;
            task.failure = failure.map(str::to_string);
        }
        self.save(tx, task).await?;
        Ok(Progress { woken, expired })
    }

    /// Counts, once its transaction committed, the leases that ran out unseen on messages a
    /// round moved out of `source`: the engine counts them as it takes them.
    fn count_moved_expired(&self, source: &str, expired: u64) {
        if expired > 0 {
            self.measurements
                .record(source, |m| m.stats.leases_expired += expired);
        }
    }

    /// Moves the messages gathered in `run` to `to`, emptying it; answers how many.
    async fn move_run(
        &self,
        tx: &Tx,
        from: u64,
        to: &Option<(String, Found)>,
        run: &mut Vec<i64>,
        now: u64,
        woken: &mut Vec<String>,
    ) -> Result<u64> {
        let Some((key, found)) = to else {
            return Ok(0);
        };
        if run.is_empty() {
            return Ok(0);
        }
        let destination = Destination {
            id: found.id,
            fifo: found.fifo,
            dead_letter_source: None,
        };
        let moved = self.transfer(tx, from, &destination, run, now).await?.len();
        notify(tx, self.server_id, key, moved).await?;
        woken.push(key.clone());
        run.clear();
        Ok(moved as u64)
    }

    /// The source's receivable messages up to `limit`, oldest first, with the queue each
    /// was dead-lettered from, locked: those up to the first another transaction holds now
    /// (`held`), which a later round moves. Taking the ones after it (SKIP LOCKED alone) would
    /// move a FIFO group's later messages before its earlier ones, and a round that found
    /// none but held ones would call the task complete with messages left.
    async fn oldest_ready(
        &self,
        tx: &Tx,
        queue_id: u64,
        limit: MsgKey,
        now: u64,
        count: u64,
    ) -> Result<Ready> {
        let rows = tx
            .query(
                &cached(
                    tx,
                    "WITH candidates AS MATERIALIZED (
                         SELECT m.seq, m.sent_ms, m.dead_letter_source_arn
                         FROM leasehold_messages m JOIN leasehold_queues q ON q.id = m.queue_id
                         WHERE m.queue_id = $1 AND m.visible_ms <= $2
                           AND m.sent_ms > $2 - q.retention_ms AND (m.sent_ms, m.seq) <= ($3, $4)
                         ORDER BY m.sent_ms, m.seq
                         LIMIT $5),
                     -- Whether the lease ran out, read from the row as locked: a change
                     -- committed since the candidates were read may have counted it.
                     locked AS MATERIALIZED (
                         SELECT m.seq,
                                leasehold_lease_ran_out(m.receive_count, m.released,
                                                        m.visible_ms, $2) AS ran_out
                         FROM leasehold_messages m
                         WHERE m.queue_id = $1 AND m.seq IN (SELECT seq FROM candidates)
                           AND m.visible_ms <= $2
                         ORDER BY m.seq
                         FOR UPDATE SKIP LOCKED)
                     SELECT c.seq, c.dead_letter_source_arn, c.seq IN (SELECT seq FROM locked),
                            c.seq IN (SELECT seq FROM locked WHERE ran_out)
                     FROM candidates c
                     ORDER BY c.sent_ms, c.seq",
                )
                .await?,
                &[
                    &to_i64(queue_id),
                    &to_i64(now),
                    &to_i64(limit.sent_ms),
                    &to_i64(limit.seq),
                    &to_i64(count),
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let taken = rows.iter().take_while(|row| row.get::<_, bool>(2)).count();
        Ok(Ready {
            held: taken < rows.len(),
            rows: rows[..taken]
                .iter()
                .map(|row| (row.get(0), row.get(1), row.get(3)))
                .collect(),
        })
    }

    /// Takes the send locks of every FIFO group a round moves messages into, in one order
    /// (destination, then group, as batch sends and dead-letter moves take theirs), before
    /// the round's first transfer: taken transfer by transfer, a round could hold one group's
    /// lock while a batch send held the next and waited for it.
    async fn lock_destination_groups(
        &self,
        tx: &Tx,
        source: u64,
        plan: &[(i64, String, Found)],
    ) -> Result<()> {
        let (destinations, seqs): (Vec<i64>, Vec<i64>) = plan
            .iter()
            .filter(|(_, _, found)| found.fifo)
            .map(|(seq, _, found)| (to_i64(found.id), *seq))
            .unzip();
        if seqs.len() < 2 {
            return Ok(());
        }
        tx.execute(
            &cached(
                tx,
                "SELECT pg_advisory_xact_lock(hashtextextended('send ' || g, d))
                 FROM (SELECT DISTINCT t.d, m.group_id AS g
                       FROM unnest($1::bigint[], $2::bigint[]) AS t(d, s)
                       JOIN leasehold_messages m ON m.queue_id = $3 AND m.seq = t.s
                       WHERE m.group_id IS NOT NULL
                       ORDER BY 1, 2) sorted",
            )
            .await?,
            &[&destinations, &seqs, &to_i64(source)],
        )
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(())
    }

    /// The newest message of a queue and how many it holds: what a task starting now moves.
    async fn newest(&self, tx: &Tx, queue_id: u64, now: u64) -> Result<(Option<MsgKey>, u64)> {
        let row = tx
            .query_one(
                &cached(
                    tx,
                    "SELECT max(m.sent_ms), (array_agg(m.seq ORDER BY m.sent_ms DESC, m.seq DESC))[1],
                            count(*)
                     FROM leasehold_messages m JOIN leasehold_queues q ON q.id = m.queue_id
                     WHERE m.queue_id = $1 AND m.sent_ms > $2 - q.retention_ms",
                )
                .await?,
                &[&to_i64(queue_id), &to_i64(now)],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let limit = match (row.get::<_, Option<i64>>(0), row.get::<_, Option<i64>>(1)) {
            (Some(sent_ms), Some(seq)) => Some(MsgKey {
                sent_ms: to_u64(sent_ms),
                seq: to_u64(seq),
            }),
            _ => None,
        };
        Ok((limit, to_u64(row.get(2))))
    }

    async fn save(&self, tx: &Tx, task: &MoveTask) -> Result<()> {
        tx.execute(
            &cached(
                tx,
                "UPDATE leasehold_move_tasks SET status = $2, moved = $3, failure = $4
                 WHERE id = $1",
            )
            .await?,
            &[
                &task.id,
                &task.status.as_str(),
                &to_i64(task.moved),
                &task.failure,
            ],
        )
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(())
    }

    async fn find_queue(&self, tx: &Tx, key: &str) -> Result<Option<Found>> {
        if !storable(key) {
            return Ok(None);
        }
        let row = tx
            .query_opt(
                &cached(tx, "SELECT record FROM leasehold_queues WHERE key = $1").await?,
                &[&key],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        row.map(|row| {
            let record = decode(row.get(0))?;
            Ok(Found {
                id: record.meta.id,
                fifo: record.meta.settings.fifo,
            })
        })
        .transpose()
    }

    /// AWS's error for a SourceArn that names no queue, on a connection given back before
    /// the rounds `run_tasks` runs on its own.
    async fn check_source(&self, source_arn: &str) -> Result<()> {
        let tx = self.begin().await?;
        self.source_exists(&tx, source_arn).await
    }

    /// AWS's error for a SourceArn that names no queue.
    async fn source_exists(&self, tx: &Tx, source_arn: &str) -> Result<()> {
        let exists = match self.naming.key_of_arn(source_arn) {
            Some(key) if storable(source_arn) => self.find_queue(tx, &key).await?.is_some(),
            _ => false,
        };
        MoveTask::check_start(exists, Some(true), None, || true, || false)?;
        Ok(())
    }
}

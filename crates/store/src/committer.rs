//! Group commit: one writer thread takes every batch waiting, writes them as one transaction
//! and, under `--fsync always`, one fsync; only then are their requests answered.

use std::str::FromStr;
use std::time::{Duration, Instant};

// The writer thread and its channel: std's, or under the `shuttle` feature shuttle's, so the
// node simulation schedules the writer among the requests (it runs `Durability::Always` or
// `Never`: shuttle's `recv_timeout` never times out).
#[cfg(feature = "shuttle")]
use shuttle::{sync::mpsc, thread};
#[cfg(not(feature = "shuttle"))]
use std::{sync::mpsc, thread};
use thread::JoinHandle;

use tokio::sync::oneshot;

use std::collections::VecDeque;

use crate::batch::{Op, RangeDelete, WriteBatch};
use crate::{Store, StoreError};
use leasehold_engine::{Clock, Engine, EngineConfig};
use std::sync::Arc;

/// At most this many requests share one commit, bounding its latency.
const MAX_GROUP: usize = 4096;
/// A commit takes no more requests once its batches hold this many bytes: a group of big
/// sends that finds the disk full fails as one, and takes the small deletes and receives
/// queued with it down too; the disk reserve must hold a whole group.
pub const MAX_GROUP_BYTES: usize = 8 << 20;
/// Records one step of a background range delete removes: a few milliseconds of work, so a
/// purge of a million messages delays no request by more than that.
const SWEEP_STEP: usize = 1_000;
/// How long range deletes wait after one found the file system full, rather than try again
/// at once and spin a core while freeing nothing.
const SWEEP_FULL_PAUSE: Duration = Duration::from_millis(250);

/// When acknowledged writes reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// fsync before every answer: nothing acknowledged is lost, even on power loss.
    Always,
    /// fsync every so often: a crash of the server loses nothing; a power cut loses up to
    /// this much acknowledged work.
    Interval(Duration),
    /// never fsync explicitly: a crash of the server loses nothing; a power cut loses what
    /// the operating system had not yet written.
    Never,
}

impl FromStr for Durability {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "always" => Ok(Durability::Always),
            "never" => Ok(Durability::Never),
            other => other
                .strip_prefix("interval-ms=")
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|n| *n > 0)
                .map(|n| Durability::Interval(Duration::from_millis(n)))
                .ok_or_else(|| {
                    format!("expected always, interval-ms=N (N > 0) or never, not {other:?}")
                }),
        }
    }
}

/// What an engine is rebuilt from, and where it goes.
struct Rebuild {
    clock: Arc<dyn Clock>,
    config: EngineConfig,
    reply: oneshot::Sender<Result<Engine, StoreError>>,
}

impl Rebuild {
    /// Streams the records into a new engine on the writer's thread (`crate::restore`), so
    /// that no list of every message is held beside the live engine; the range deletes still
    /// to do are already the writer's.
    fn answer(self, store: &mut dyn Store, sweeps: &mut VecDeque<RangeDelete>) {
        let rebuilt = crate::restore(store, self.clock, self.config).map(|(engine, leftovers)| {
            // What a refused write's deletes or an earlier stop left is finished as at a
            // start (a range already queued twice finds nothing the second time).
            sweeps.extend(range_deletes(std::slice::from_ref(&leftovers)));
            engine
        });
        let _ = self.reply.send(rebuilt);
    }
}

struct Job {
    batch: WriteBatch,
    done: Option<oneshot::Sender<Result<(), StoreError>>>,
    /// Instead of writing: rebuild an engine from everything the store holds, after every
    /// earlier write.
    load: Option<Rebuild>,
}

pub struct Committer {
    jobs: Option<mpsc::Sender<Job>>,
    writer: Option<JoinHandle<()>>,
}

impl Committer {
    pub fn start(store: Box<dyn Store>, durability: Durability) -> Committer {
        let (jobs, rx) = mpsc::channel();
        let writer = thread::Builder::new()
            .name("leasehold-commit".into())
            .spawn(move || run(store, durability, rx))
            .expect("the commit thread starts");
        Committer {
            jobs: Some(jobs),
            writer: Some(writer),
        }
    }

    /// Queues a batch; the answer says when it is written (and synced, if so configured).
    /// Batches are written in the order they are submitted.
    pub fn submit(
        &self,
        batch: WriteBatch,
    ) -> impl std::future::Future<Output = Result<(), StoreError>> {
        let (done, wait) = oneshot::channel();
        let queued = self.send(Job {
            batch,
            done: Some(done),
            load: None,
        });
        async move {
            queued?;
            wait.await
                .unwrap_or_else(|_| Err(StoreError::Failed("the commit thread stopped".into())))
        }
    }

    /// Queues a batch nobody waits for (background work such as message move tasks).
    pub fn submit_detached(&self, batch: WriteBatch) {
        let _ = self.send(Job {
            batch,
            done: None,
            load: None,
        });
    }

    /// An engine rebuilt from what the store holds once every batch submitted before is
    /// written (or refused): the state to go back to when a write failed and memory holds
    /// changes the disk does not.
    pub fn rebuild(
        &self,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
    ) -> impl std::future::Future<Output = Result<Engine, StoreError>> {
        let (reply, wait) = oneshot::channel();
        let queued = self.send(Job {
            batch: WriteBatch::default(),
            done: None,
            load: Some(Rebuild {
                clock,
                config,
                reply,
            }),
        });
        async move {
            queued?;
            wait.await
                .unwrap_or_else(|_| Err(StoreError::Failed("the commit thread stopped".into())))
        }
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        self.jobs
            .as_ref()
            .and_then(|jobs| jobs.send(job).ok())
            .ok_or_else(|| StoreError::Failed("the commit thread stopped".into()))
    }

    /// Writes what is queued, syncs, and stops the writer.
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.jobs.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn run(mut store: Box<dyn Store>, durability: Durability, rx: mpsc::Receiver<Job>) {
    let mut failed: Option<StoreError> = None;
    // A write the full file system refused (`StoreError::Full`): every write queued behind it
    // was made on top of it, so they are refused too, up to the next `rebuild`, which the
    // backend asks for once it stopped changing its engine, to go back to what is stored.
    let mut refusing: Option<StoreError> = None;
    let mut unsynced_since: Option<Instant> = None;
    // Range deletes still to do, in steps, whenever no request is waiting.
    let mut sweeps: VecDeque<RangeDelete> = VecDeque::new();
    // Until when they wait, after one found the file system full.
    let mut sweeps_paused_until: Option<Instant> = None;
    loop {
        let paused = sweeps_paused_until.filter(|until| *until > Instant::now());
        let first = if sweeps.is_empty() || failed.is_some() || paused.is_some() {
            match next_job(&rx, durability, unsynced_since, paused) {
                Next::Job(job) => job,
                Next::SyncDue => {
                    sync(&mut *store, &mut failed);
                    unsynced_since = None;
                    continue;
                }
                Next::SweepDue => {
                    sweeps_paused_until = None;
                    continue;
                }
                Next::Closed => break,
            }
        } else {
            match rx.try_recv() {
                Ok(job) => job,
                Err(mpsc::TryRecvError::Empty) => {
                    if sweep_step(&mut *store, &mut sweeps, &mut failed) == Swept::FoundFull {
                        sweeps_paused_until = Some(Instant::now() + SWEEP_FULL_PAUSE);
                    }
                    let sync_due = match durability {
                        Durability::Always => sweeps.is_empty(),
                        Durability::Interval(period) => {
                            unsynced_since.is_some_and(|since| since.elapsed() >= period)
                        }
                        Durability::Never => false,
                    };
                    if sync_due {
                        sync(&mut *store, &mut failed);
                        unsynced_since = None;
                    }
                    continue;
                }
                Err(mpsc::TryRecvError::Disconnected) => break,
            }
        };
        if let Some(rebuild) = first.load {
            refusing = None;
            rebuild.answer(&mut *store, &mut sweeps);
            continue;
        }
        let mut bytes = first.batch.bytes();
        let mut jobs = vec![first];
        let mut load_after = None;
        while jobs.len() < MAX_GROUP && bytes < MAX_GROUP_BYTES {
            match rx.try_recv() {
                Ok(Job {
                    load: Some(rebuild),
                    ..
                }) => {
                    load_after = Some(rebuild);
                    break;
                }
                Ok(job) => {
                    bytes += job.batch.bytes();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        let (batches, waiters): (Vec<WriteBatch>, Vec<_>) =
            jobs.into_iter().map(|j| (j.batch, j.done)).unzip();
        let result = match (&failed, &refusing) {
            (Some(earlier), _) => Err(StoreError::Failed(earlier.to_string())),
            (None, Some(full)) => Err(full.clone()),
            (None, None) => store.write(&batches, durability == Durability::Always),
        };
        match (&result, &failed) {
            (Ok(()), _) => sweeps.extend(range_deletes(&batches)),
            (Err(error @ StoreError::Full { .. }), None) => {
                if refusing.is_none() {
                    tracing::warn!(%error, "the file system is full: this write and those queued behind it are refused");
                }
                refusing = Some(error.clone());
            }
            (Err(error), None) => {
                // After a failed write the disk's state is unknown: stop taking writes rather
                // than acknowledge anything that might not be there.
                tracing::error!(%error, "store write failed; refusing further writes");
                failed = Some(error.clone());
            }
            (Err(_), Some(_)) => {}
        }
        for waiter in waiters.into_iter().flatten() {
            let _ = waiter.send(result.clone());
        }
        if let Some(rebuild) = load_after {
            refusing = None;
            rebuild.answer(&mut *store, &mut sweeps);
        }
        if let Durability::Interval(period) = durability {
            let since = *unsynced_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= period {
                sync(&mut *store, &mut failed);
                unsynced_since = None;
            }
        }
    }
    if failed.is_none() {
        sync(&mut *store, &mut failed);
    }
}

enum Next {
    Job(Job),
    SyncDue,
    /// Range deletes paused by a full file system may go on.
    SweepDue,
    Closed,
}

/// Waits for the next job; under `interval-ms=N`, no longer than until the sync is due, and
/// no longer than until paused range deletes may go on (`resume_sweeps`).
fn next_job(
    rx: &mpsc::Receiver<Job>,
    durability: Durability,
    unsynced: Option<Instant>,
    resume_sweeps: Option<Instant>,
) -> Next {
    let sync_at = match (durability, unsynced) {
        (Durability::Interval(period), Some(since)) => Some(since + period),
        _ => None,
    };
    let Some(wake_at) = [sync_at, resume_sweeps].into_iter().flatten().min() else {
        return rx.recv().map_or(Next::Closed, Next::Job);
    };
    match rx.recv_timeout(wake_at.saturating_duration_since(Instant::now())) {
        Ok(job) => Next::Job(job),
        Err(mpsc::RecvTimeoutError::Timeout) if sync_at.is_some_and(|at| at <= Instant::now()) => {
            Next::SyncDue
        }
        Err(mpsc::RecvTimeoutError::Timeout) => Next::SweepDue,
        Err(mpsc::RecvTimeoutError::Disconnected) => Next::Closed,
    }
}

fn range_deletes(batches: &[WriteBatch]) -> impl Iterator<Item = RangeDelete> + '_ {
    batches
        .iter()
        .flat_map(|b| &b.ops)
        .filter_map(|op| match op {
            Op::DeleteRange(range) => Some(range.clone()),
            _ => None,
        })
}

#[derive(PartialEq, Eq)]
enum Swept {
    Done,
    FoundFull,
}

/// One step of the oldest range delete. A range that came back short is done.
fn sweep_step(
    store: &mut dyn Store,
    sweeps: &mut VecDeque<RangeDelete>,
    failed: &mut Option<StoreError>,
) -> Swept {
    let Some(range) = sweeps.front() else {
        return Swept::Done;
    };
    match store.delete_some(range, SWEEP_STEP) {
        Ok(deleted) if deleted < SWEEP_STEP => {
            sweeps.pop_front();
        }
        Ok(_) => {}
        // Deleting needs room in the write-ahead log too; the step is tried again after a
        // pause (`SWEEP_FULL_PAUSE`).
        Err(StoreError::Full { .. }) => return Swept::FoundFull,
        Err(error) => {
            tracing::error!(%error, "background delete failed; refusing further writes");
            *failed = Some(error);
        }
    }
    Swept::Done
}

fn sync(store: &mut dyn Store, failed: &mut Option<StoreError>) {
    if failed.is_some() {
        return;
    }
    match store.sync() {
        Ok(()) => {}
        // The sync's own small write found no room; what it would sync is written, and the
        // next interval tries again.
        Err(StoreError::Full { .. }) => {}
        Err(error) => {
            tracing::error!(%error, "store sync failed; refusing further writes");
            *failed = Some(error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;
    use std::sync::{Arc, Condvar, Mutex};

    /// Records the bytes of each group it is given; its first write waits until `open`.
    struct Recording {
        inner: MemoryStore,
        open: Arc<(Mutex<bool>, Condvar)>,
        groups: Arc<Mutex<Vec<usize>>>,
    }

    impl Store for Recording {
        fn scan_range(
            &mut self,
            start: &[u8],
            end: &[u8],
            visit: &mut crate::Visitor,
        ) -> Result<(), StoreError> {
            self.inner.scan_range(start, end, visit)
        }

        fn write(&mut self, batches: &[WriteBatch], sync: bool) -> Result<(), StoreError> {
            let (open, opened) = &*self.open;
            let mut is_open = open.lock().unwrap();
            while !*is_open {
                is_open = opened.wait(is_open).unwrap();
            }
            let bytes = batches.iter().map(WriteBatch::bytes).sum();
            self.groups.lock().unwrap().push(bytes);
            self.inner.write(batches, sync)
        }

        fn delete_some(&mut self, range: &RangeDelete, limit: usize) -> Result<usize, StoreError> {
            self.inner.delete_some(range, limit)
        }

        fn sync(&mut self) -> Result<(), StoreError> {
            self.inner.sync()
        }

        fn describe(&self) -> String {
            "recording".into()
        }

        fn reader(&self) -> Result<Arc<dyn crate::Reader>, StoreError> {
            self.inner.reader()
        }

        fn seal_with(&mut self, keyring: Arc<crate::keyring::Keyring>) {
            self.inner.seal_with(keyring);
        }
    }

    /// Issue 46, defect 2: a group commit had no bound in bytes, so eight batches of 10 MiB
    /// queued together were written (and, on a tight disk, failed) as one.
    #[cfg(not(feature = "shuttle"))]
    #[test]
    fn a_group_commit_takes_no_more_batches_once_it_holds_its_bytes() {
        let open = Arc::new((Mutex::new(false), Condvar::new()));
        let groups = Arc::new(Mutex::new(Vec::new()));
        let store = Recording {
            inner: MemoryStore::default(),
            open: open.clone(),
            groups: groups.clone(),
        };
        let committer = Committer::start(Box::new(store), Durability::Never);
        let mut first = WriteBatch::default();
        first.put(b"first".to_vec(), vec![0; 10]);
        committer.submit_detached(first);
        const BIG: usize = 2 << 20;
        for i in 0..10u8 {
            let mut big = WriteBatch::default();
            big.put(vec![i], vec![i; BIG]);
            committer.submit_detached(big);
        }
        *open.0.lock().unwrap() = true;
        open.1.notify_all();
        committer.close();
        let groups = groups.lock().unwrap();
        let total: usize = groups.iter().sum();
        assert_eq!(total, 10 * (BIG + 1) + 15);
        assert!(
            groups.iter().all(|&g| g < MAX_GROUP_BYTES + BIG + 16),
            "a group past its bound: {groups:?}"
        );
    }

    #[test]
    fn durability_parses_the_three_modes() {
        assert_eq!("always".parse(), Ok(Durability::Always));
        assert_eq!("never".parse(), Ok(Durability::Never));
        assert_eq!(
            "interval-ms=50".parse(),
            Ok(Durability::Interval(Duration::from_millis(50)))
        );
        assert!("interval-ms=0".parse::<Durability>().is_err());
        assert!("sometimes".parse::<Durability>().is_err());
    }
}

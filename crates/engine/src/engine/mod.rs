//! The engine: every queue of one account, in every region, and the SQS operations on them.
//!
//! Synchronous and deterministic: given the same clock readings, seed and commands, it gives
//! the same replies. Two kinds of access (see `locked.rs`): a command on one queue's messages
//! needs only `&Engine` and that queue's own lock (`Engine::lock_queue`), so commands on
//! different queues run side by side; everything else (queue life cycle, attributes, move
//! tasks, a store's `take_changes`) takes `&mut Engine`, which the caller serialises against
//! all of them (the server holds the engine behind a read-write lock). The
//! operations are spread over `queues.rs` (queue life cycle, attributes, tags, permissions),
//! `messages.rs` (send, receive, delete, visibility) and `dead_letters.rs` (redrive policies,
//! dead-letter sources, message move tasks); `regions.rs` says how a queue's key names its
//! region. Every method taking a queue `name` takes its key.

mod dead_letters;
mod leases;
mod locked;
mod messages;
mod persist;
mod queues;
mod regions;
mod spread;
mod stripes;

use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::clock::Clock;
use crate::error::{EngineError, Result};
use crate::message::ContentKey;
use crate::queue::Removed;
use crate::receipt::ReceiptSealer;
use crate::rules::LeaseMode;

pub use dead_letters::{
    MoveTask, MoveTaskInfo, MoveTaskStatus, MOVE_BATCH_STORED, MOVE_TASK_QUEUE_GONE,
};
pub use leases::{Fairness, LeaseReport};
pub use locked::Locked;
pub use messages::{check_batch, ReceiveRequest};
pub use persist::{Change, EngineRecord, QueueRecord, Restoring, Snapshot};
pub use queues::{check_queue_room, list_queue_keys, validate_queue_name, QueueListing};
pub use regions::{is_account_id, is_region, name_of, Naming};
pub use spread::StripedReceive;

/// Where a command's changes go, one stripe's at a time, before that stripe's lock goes.
pub type Sink<'s> = &'s mut dyn FnMut(Vec<Change>);
pub use stripes::MAX_STRIPES;

use stripes::{HeadMut, QueueCell, QueueGuard};

pub const MAX_LIST_RESULTS: usize = 1000;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub lease_mode: LeaseMode,
    pub region: String,
    pub account_id: String,
    /// Seals receipt handles; must stay the same for handles to outlive a restart.
    pub receipt_key: [u8; 16],
    /// Seeds message ids, so a simulation replays exactly.
    pub seed: u64,
    /// Record what changes, for a store to take with `take_changes`, and hand every message's
    /// content to that store rather than keep it (`StoredMessage::content`).
    pub track_changes: bool,
    /// Keep what a purge or a queue deletion removes for the caller to free later
    /// (`take_removed`), so a server frees a million messages outside its lock.
    pub defer_drops: bool,
    /// CreateQueue refuses a new queue with OverLimit once its account holds this many.
    pub max_queues_per_account: usize,
    /// The most messages one queue holds in flight (`quota.rs`): a receive past it hands out
    /// nothing, and a standard queue's says so (`StripedReceive::over_limit`).
    pub max_in_flight_per_queue: usize,
    /// How many stripes a standard queue created from now on is split into (at most
    /// `MAX_STRIPES`), so that as many threads work on it side by side (`stripes.rs`): a
    /// server's cores. 1 keeps one order for a whole queue, as simulations need.
    pub stripes: usize,
    /// Whether the store behind the engine encrypts what a queue asks it to (SSE-SQS or
    /// SSE-KMS) at rest: then a new queue has SqsManagedSseEnabled on, as on AWS; otherwise
    /// a new queue has it off and a request to turn it on is refused (never claimed and
    /// not done).
    pub encrypts_at_rest: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            lease_mode: LeaseMode::Aws,
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
            receipt_key: [0; 16],
            seed: 0,
            track_changes: false,
            defer_drops: false,
            max_queues_per_account: crate::settings::MAX_QUEUES_PER_ACCOUNT,
            max_in_flight_per_queue: crate::quota::MAX_IN_FLIGHT_PER_QUEUE,
            stripes: 1,
            encrypts_at_rest: true,
        }
    }
}

/// The engine's maps by name. Under the `shuttle` feature their hasher has fixed keys, so
/// that what walks them (lock order included) is the same in every run of a seed, which the
/// node simulation replays exactly; a server's are keyed at random (no flooding one bucket).
#[cfg(not(feature = "shuttle"))]
type Map<K, V> = std::collections::HashMap<K, V>;
#[cfg(feature = "shuttle")]
type Map<K, V> = std::collections::HashMap<
    K,
    V,
    std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>,
>;

pub struct Engine {
    clock: Arc<dyn Clock>,
    config: EngineConfig,
    naming: Naming,
    sealer: ReceiptSealer,
    rng: StdRng,
    queues: Map<String, QueueCell>,
    /// How many of `queues` each account holds, kept beside them so that CreateQueue's quota
    /// is one lookup, not a walk over a million keys.
    queues_per_account: Map<String, usize>,
    deleted_at: Map<String, u64>,
    next_queue_id: u64,
    tasks: Vec<MoveTask>,
    /// Changes that do not belong to a live queue (deletions, purges), in order.
    pending: Vec<Change>,
    engine_dirty: bool,
    dirty_queues: std::collections::BTreeSet<String>,
    /// Taken out by purges and queue deletions, not yet freed (with `defer_drops`).
    removed: Vec<Removed>,
    /// Queues that move tasks brought messages to, not yet taken (`take_woken`).
    woken: Vec<String>,
    /// Looks change nothing, not even by the clock (`freeze`).
    frozen: bool,
    /// How many messages running move tasks may move together per call (`limit_moves`);
    /// None: as their rates and the batch allow.
    moves_room: Option<u64>,
}

/// One page of a listing of queue names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuePage {
    pub names: Vec<String>,
    pub next_token: Option<String>,
}

impl Engine {
    pub fn new(clock: Arc<dyn Clock>, config: EngineConfig) -> Self {
        // A new engine's receipt key and counters are a change a store must keep.
        let engine_dirty = config.track_changes;
        Engine {
            clock,
            sealer: ReceiptSealer::new(config.receipt_key),
            rng: StdRng::seed_from_u64(config.seed),
            naming: Naming {
                region: config.region.clone(),
                account_id: config.account_id.clone(),
            },
            config,
            queues: Map::default(),
            queues_per_account: Map::default(),
            deleted_at: Map::default(),
            next_queue_id: 1,
            tasks: Vec::new(),
            pending: Vec::new(),
            engine_dirty,
            dirty_queues: Default::default(),
            removed: Vec::new(),
            woken: Vec::new(),
            frozen: false,
            moves_room: None,
        }
    }

    /// From now on a look at a queue does not bring it up to the present (no lease ends, no
    /// message expires): for a server that serves reads only, whose memory must stay what
    /// its store holds. Commands that change a queue are the caller's to refuse.
    pub fn freeze(&mut self) {
        self.frozen = true;
    }

    /// How many messages running move tasks may move together per call, all tasks counted:
    /// a durable server's room above its disk reserve (a task copies bodies, which needs
    /// room; none below the reserve, where sends are refused too). Starting, listing and
    /// cancelling tasks go on whatever it is. None: no bound but the tasks' own.
    pub fn limit_moves(&mut self, room: Option<u64>) {
        self.moves_room = room;
    }

    /// Notes that engine-wide state changed, when a store is listening.
    fn engine_changed(&mut self) {
        self.engine_dirty |= self.config.track_changes;
    }

    /// The change that tells a store a message whose content it keeps (`stored`) moved from
    /// one queue's key to another's, so it moves the content before the old key's is deleted:
    /// None when the store keeps no content of it, or no store listens.
    fn content_moved(&self, stored: bool, from: ContentKey, to: ContentKey) -> Option<Change> {
        (stored && self.config.track_changes).then_some(Change::ContentMoved { from, to })
    }

    /// Notes that a queue may have changes for a store to take.
    fn note(&mut self, name: &str) {
        if self.config.track_changes && !self.dirty_queues.contains(name) {
            self.dirty_queues.insert(name.to_string());
        }
    }

    /// The queue's head, brought up to the present, with its own record marked changed:
    /// for commands that change what every stripe holds alike (settings, tags), copied to
    /// the other stripes when the `HeadMut` goes.
    fn queue_mut(&mut self, name: &str) -> Result<(HeadMut<'_>, u64)> {
        let (cell, now) = self.cell_noted(name)?;
        let mut head = cell.head_mut();
        head.tick(now);
        head.touch();
        Ok((head, now))
    }

    /// The queue's cell, noted changed, with the instant to bring it up to.
    fn cell_noted(&mut self, name: &str) -> Result<(&mut QueueCell, u64)> {
        self.cell(name)?;
        self.note(name);
        let now = self.clock.now_ms();
        let cell = self
            .queues
            .get_mut(name)
            .ok_or(EngineError::QueueDoesNotExist)?;
        Ok((cell, now))
    }

    /// What purges and queue deletions took out since the last call, to be freed by the
    /// caller where it costs nobody (empty unless `defer_drops`).
    pub fn take_removed(&mut self) -> Vec<Removed> {
        std::mem::take(&mut self.removed)
    }

    /// Frees `removed` now, or keeps it for `take_removed`.
    fn discard(&mut self, removed: Removed) {
        if self.config.defer_drops {
            self.removed.push(removed);
        }
    }

    /// What seals and opens this engine's receipt handles: its key is the stored one, fixed
    /// for the engine's life, so a caller may open handles before it locks their queue.
    pub fn receipt_sealer(&self) -> &ReceiptSealer {
        &self.sealer
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Checks every queue's invariants (`Queue::check_invariants`): for tests, after each
    /// command. Names the queue that broke one.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.queues.iter().try_for_each(|(name, cell)| {
            // Every stripe at once, in order (no command holds two stripes of one queue), so
            // the queue's in-flight count is seen with no lease half made.
            let stripes: Vec<_> = cell.made_stripes().map(|s| (s, cell.lock(s))).collect();
            for (stripe, queue) in &stripes {
                queue
                    .check_invariants()
                    .map_err(|broken| format!("queue {name}, stripe {stripe}: {broken}"))?;
            }
            let leased: usize = stripes.iter().map(|(_, q)| q.in_flight_counts().0).sum();
            let counted = stripes.first().map_or(0, |(_, q)| q.in_flight_counts().1);
            match leased == counted {
                true => Ok(()),
                false => Err(format!(
                    "queue {name}: its stripes hold {leased} in flight; its count says {counted}"
                )),
            }
        })
    }

    fn cell(&self, name: &str) -> Result<&QueueCell> {
        self.queues.get(name).ok_or(EngineError::QueueDoesNotExist)
    }

    /// The queue's head (stripe 0), locked for a look at what every stripe holds alike.
    fn queue(&self, name: &str) -> Result<QueueGuard<'_>> {
        self.cell(name).map(QueueCell::head)
    }

    /// Every stripe of the queue, brought up to the present, noted changed.
    fn stripes_now(&mut self, name: &str) -> Result<(&mut QueueCell, u64)> {
        let (cell, now) = self.cell_noted(name)?;
        cell.stripes_mut().for_each(|q| q.tick(now));
        Ok((cell, now))
    }
}

/// Sorted names after an opaque token, at most `max_results` (or 1000 with no token given).
fn paginate(
    mut names: Vec<String>,
    max_results: Option<usize>,
    next_token: Option<&str>,
) -> Result<QueuePage> {
    if let Some(max) = max_results {
        if !(1..=MAX_LIST_RESULTS).contains(&max) {
            return Err(EngineError::out_of_range(
                "MaxResults",
                max,
                "MaxResults must be an integer between 1 and 1000.",
            ));
        }
    }
    let after = match next_token {
        None => None,
        Some(token) => Some(
            URL_SAFE_NO_PAD
                .decode(token)
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .ok_or_else(|| {
                    EngineError::InvalidParameterValue("Invalid NextToken value.".into())
                })?,
        ),
    };
    names.sort();
    names.retain(|n| after.as_ref().is_none_or(|a| n > a));
    let limit = max_results.unwrap_or(MAX_LIST_RESULTS);
    let more = names.len() > limit && max_results.is_some();
    names.truncate(limit);
    let next_token = more
        .then(|| {
            names
                .last()
                .map(|last| URL_SAFE_NO_PAD.encode(last.as_bytes()))
        })
        .flatten();
    Ok(QueuePage { names, next_token })
}

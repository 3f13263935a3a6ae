//! The simulated node's callers: clients that run every action that changes state, long
//! polls that wait as the HTTP layer's do, the clock, and the server's ticker. Each runs on a
//! shuttle thread, its choices drawn from its own seeded generator.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use leasehold_backend::{Backend, Measurements, Messages, MoveTaskStart, QueueAdmin};
use leasehold_embedded::Embedded;
use leasehold_engine::{Clock, ManualClock, MessageState, NewMessage, ReceiveRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

use crate::model::{Model, Seen};

pub const STANDARD: [&str; 4] = ["a", "b", "c", "tmp"];
pub const FIFO: [&str; 3] = ["f.fifo", "g.fifo", "h.fifo"];
/// Queues a long poll may wait on: dead-letter targets, move task destinations, a FIFO queue.
pub const POLLED: [&str; 4] = ["a", "b", "c", "f.fifo"];

pub fn arn(queue: &str) -> String {
    format!("arn:aws:sqs:us-east-1:000000000000:{queue}")
}

pub fn redrive(target: &str, max: u32) -> (String, String) {
    let policy = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":{max}}}"#,
        arn(target)
    );
    ("RedrivePolicy".to_string(), policy)
}

/// What the node is, and what its callers share.
pub struct World {
    pub node: Embedded,
    pub model: Arc<Model>,
    pub clock: Arc<ManualClock>,
    pub epoch: u64,
    /// The clock's reading, for long polls waiting for a lease or delay to end.
    pub time: watch::Sender<u64>,
    /// Set once the clients are done: long polls stop receiving and report where they wait.
    pub closing: watch::Sender<bool>,
    pub parked: watch::Sender<usize>,
    pub polls: Mutex<HashMap<String, Poll>>,
    pub clients_left: AtomicUsize,
    pub move_tasks: Mutex<Vec<String>>,
}

/// A long poll's state once the clients are done.
#[derive(Clone, Copy, Debug, Default)]
pub struct Poll {
    /// It waits after a receive that found nothing.
    pub waiting: bool,
    /// A wake reached it since.
    pub woken: bool,
    /// When the next lease or delay to end, as its last receive answered, ends at the
    /// earliest: its timer may have fired since.
    pub due: Option<u64>,
}

impl World {
    pub fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    fn clients_running(&self) -> bool {
        self.clients_left.load(Ordering::SeqCst) > 0
    }
}

/// A message a client holds a receipt handle of.
struct Held {
    queue: &'static str,
    body: String,
    handle: String,
}

pub struct Client {
    pub id: usize,
    rng: StdRng,
    held: Vec<Held>,
    sent: u64,
}

impl Client {
    pub fn new(id: usize, seed: u64) -> Client {
        Client {
            id,
            rng: StdRng::seed_from_u64(seed),
            held: Vec::new(),
            sent: 0,
        }
    }

    pub async fn run(mut self, world: &World, actions: usize) {
        for _ in 0..actions {
            self.act(world).await;
        }
        world.clients_left.fetch_sub(1, Ordering::SeqCst);
    }

    fn any_queue(&mut self) -> &'static str {
        let all: Vec<&'static str> = STANDARD.iter().chain(FIFO.iter()).copied().collect();
        all[self.rng.random_range(0..all.len())]
    }

    async fn act(&mut self, world: &World) {
        match self.rng.random_range(0..100) {
            0..=24 => self.send(world, 1).await,
            25..=31 => {
                let n = self.rng.random_range(2..=4);
                self.send(world, n).await
            }
            32..=56 => self.receive(world).await,
            57..=71 => self.delete(world).await,
            72..=79 => self.change_visibility(world).await,
            80..=83 => self.set_attributes(world).await,
            84..=86 => self.move_task(world).await,
            87 => self.purge(world).await,
            88 => self.recreate_tmp(world).await,
            89..=93 => self.look(world).await,
            _ => {
                // A client gives up on a message: its lease runs out.
                if !self.held.is_empty() {
                    let i = self.rng.random_range(0..self.held.len());
                    self.held.swap_remove(i);
                }
            }
        }
    }

    async fn send(&mut self, world: &World, count: usize) {
        let queue = self.any_queue();
        let fifo = queue.ends_with(".fifo");
        let group = format!("g{}", self.id);
        let mut bodies = Vec::new();
        let mut messages = Vec::new();
        for _ in 0..count {
            self.sent += 1;
            let body = format!("e{}c{}n{}", world.epoch, self.id, self.sent);
            // A group's send order across runs (client ids repeat in each).
            let seq = world.epoch << 32 | self.sent;
            let mut message = NewMessage::new(body.clone());
            if fifo {
                message.group_id = Some(group.clone());
                message.deduplication_id = Some(body.clone());
            } else if self.rng.random_bool(0.2) {
                message.delay_s = Some(self.rng.random_range(0..=2));
            }
            world
                .model
                .send_started(&body, queue, fifo.then_some(group.as_str()), seq);
            bodies.push(body);
            messages.push(message);
        }
        world
            .model
            .note(format!("c{} sends {bodies:?} to {queue}", self.id));
        if count == 1 {
            let sent = world.node.send(queue, messages.remove(0)).await;
            world.model.send_answered(&bodies[0], sent.is_ok());
        } else {
            let sent = world.node.send_batch(queue, messages).await;
            for (i, body) in bodies.iter().enumerate() {
                let acked =
                    matches!(&sent, Ok(results) if results.get(i).is_some_and(|r| r.is_ok()));
                world.model.send_answered(body, acked);
            }
        }
    }

    async fn receive(&mut self, world: &World) {
        let queue = self.any_queue();
        let visibility = self.rng.random_range(0..=3u32);
        let request = ReceiveRequest {
            max_messages: self.rng.random_range(1..=10),
            visibility_s: Some(visibility),
            attempt_id: None,
        };
        let began = world.now();
        let event = world.model.receive_begun();
        let Ok(received) = world.node.receive(queue, request).await else {
            return;
        };
        let ended = world.now();
        let seen = seen(&received.deliveries);
        world.model.note(format!(
            "c{} receives {:?} from {queue} at [{began}, {ended}] for {visibility}s",
            self.id,
            seen.iter().map(|s| &s.body).collect::<Vec<_>>()
        ));
        world.model.delivered(
            queue,
            &seen,
            (began, ended, event),
            u64::from(visibility) * 1000,
        );
        for s in seen {
            self.held.push(Held {
                queue,
                body: s.body,
                handle: s.handle,
            });
        }
        if self.held.len() > 16 {
            self.held.remove(0);
        }
    }

    fn take_held(&mut self) -> Option<Held> {
        (!self.held.is_empty()).then(|| {
            let i = self.rng.random_range(0..self.held.len());
            self.held.swap_remove(i)
        })
    }

    async fn delete(&mut self, world: &World) {
        let Some(held) = self.take_held() else {
            return;
        };
        delete(
            world,
            &format!("c{}", self.id),
            held.queue,
            &held.body,
            held.handle,
        )
        .await;
    }

    async fn change_visibility(&mut self, world: &World) {
        let Some(held) = self.take_held() else {
            return;
        };
        let visibility = self.rng.random_range(0..=3u32);
        let began = world.now();
        world
            .model
            .visibility_change_begun(held.queue, &held.body, &held.handle, began);
        let changed = world
            .node
            .change_visibility(held.queue, vec![(held.handle.clone(), visibility)])
            .await;
        let ended = world.now();
        let acked = matches!(&changed, Ok(results) if results[0].is_ok());
        world.model.note(format!(
            "c{} changes {:?} in {} to {visibility}s at [{began}, {ended}]: {}",
            self.id,
            held.body,
            held.queue,
            if acked { "ok" } else { "refused" }
        ));
        world.model.visibility_change_answered(
            held.queue,
            &held.body,
            &held.handle,
            acked,
            began,
            ended,
            u64::from(visibility) * 1000,
        );
        if acked {
            self.held.push(held);
        }
    }

    async fn set_attributes(&mut self, world: &World) {
        let queue = self.any_queue();
        let attribute = match self.rng.random_range(0..3) {
            0 => (
                "VisibilityTimeout".to_string(),
                self.rng.random_range(1..=4u32).to_string(),
            ),
            1 if !queue.ends_with(".fifo") => (
                "DelaySeconds".to_string(),
                self.rng.random_range(0..=1u32).to_string(),
            ),
            _ => {
                let partner = match queue {
                    "a" => "b",
                    "b" => "a",
                    "g.fifo" => "h.fifo",
                    "h.fifo" => "g.fifo",
                    _ => return,
                };
                redrive(partner, self.rng.random_range(1..=4))
            }
        };
        world
            .model
            .note(format!("c{} sets {attribute:?} on {queue}", self.id));
        let _ = world.node.set_attributes(queue, vec![attribute]).await;
    }

    async fn move_task(&mut self, world: &World) {
        match self.rng.random_range(0..4) {
            0 | 1 => {
                let source = ["a", "b", "h.fifo"][self.rng.random_range(0..3)];
                let destination = self.rng.random_bool(0.3).then(|| arn("c"));
                let task = MoveTaskStart {
                    source_arn: arn(source),
                    destination_arn: destination.filter(|_| source != "h.fifo"),
                    per_second: self
                        .rng
                        .random_bool(0.5)
                        .then(|| self.rng.random_range(1..=5)),
                };
                let started = world.node.start_move_task(task).await;
                world.model.note(format!(
                    "c{} starts a move task from {source}: {started:?}",
                    self.id
                ));
                if let Ok(handle) = started {
                    lock(&world.move_tasks).push(handle);
                }
            }
            2 => {
                let handle = {
                    let mut tasks = lock(&world.move_tasks);
                    (!tasks.is_empty()).then(|| {
                        let i = self.rng.random_range(0..tasks.len());
                        tasks.swap_remove(i)
                    })
                };
                if let Some(handle) = handle {
                    let cancelled = world.node.cancel_move_task(&handle).await;
                    world
                        .model
                        .note(format!("c{} cancels a move task: {cancelled:?}", self.id));
                }
            }
            _ => {
                let source = ["a", "b", "h.fifo"][self.rng.random_range(0..3)];
                let _ = world.node.list_move_tasks(&arn(source), None).await;
            }
        }
    }

    async fn purge(&mut self, world: &World) {
        let queue = self.any_queue();
        let began = world.now();
        let event = world.model.removal_started(queue, began);
        let purged = world.node.purge(queue).await;
        world
            .model
            .removal_answered(queue, (began, event), purged.is_ok());
        world
            .model
            .note(format!("c{} purges {queue}: {purged:?}", self.id));
    }

    async fn recreate_tmp(&mut self, world: &World) {
        let began = world.now();
        let event = world.model.removal_started("tmp", began);
        let deleted = world.node.delete_queue("tmp").await;
        world
            .model
            .removal_answered("tmp", (began, event), deleted.is_ok());
        let created = world
            .node
            .create_queue("tmp", vec![visibility_attribute()], Vec::new())
            .await;
        world.model.note(format!(
            "c{} deletes tmp ({deleted:?}) and creates it again ({created:?})",
            self.id
        ));
    }

    /// What only looks (a look may still tick a queue: leases end, messages move on).
    async fn look(&mut self, world: &World) {
        let queue = self.any_queue();
        match self.rng.random_range(0..4) {
            0 => drop(world.node.get_attributes(queue, vec!["All".into()]).await),
            1 => drop(world.node.peek(queue, 10).await),
            2 => drop(world.node.lease_report(queue).await),
            _ => world.node.record_empty_receive(queue).await,
        }
    }
}

pub fn visibility_attribute() -> (String, String) {
    ("VisibilityTimeout".to_string(), "2".to_string())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn seen(deliveries: &[leasehold_engine::Delivery]) -> Vec<Seen> {
    deliveries
        .iter()
        .map(|d| Seen {
            body: d.body.to_string(),
            handle: d.receipt_handle.clone(),
            group: d.group_id.as_deref().map(str::to_string),
        })
        .collect()
}

async fn delete(world: &World, who: &str, queue: &str, body: &str, handle: String) {
    let began = world.now();
    let begun = world.model.delete_begun(body, &handle, began);
    let deleted = world.node.delete(queue, vec![handle]).await;
    let ended = world.now();
    let acked = matches!(&deleted, Ok(results) if results[0].is_ok());
    world.model.note(format!(
        "{who} deletes {body:?} from {queue} at [{began}, {ended}] (lease live to {}): {}",
        begun.0,
        if acked { "ok" } else { "refused" }
    ));
    world.model.delete_answered(body, acked, ended, begun);
}

/// Moves the clock on, a little at a time, while the clients run.
pub async fn pass_time(world: &World, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..2_000 {
        if !world.clients_running() {
            break;
        }
        for _ in 0..rng.random_range(1..=4) {
            shuttle::thread::yield_now();
        }
        world.clock.advance_ms(rng.random_range(0..=700));
        world.time.send_replace(world.now());
    }
}

/// The server's ticker: move tasks progress.
pub async fn tick(world: &World) {
    for _ in 0..2_000 {
        if !world.clients_running() {
            break;
        }
        for _ in 0..3 {
            shuttle::thread::yield_now();
        }
        world.node.tick().await;
    }
}

/// A long poll on `queue`, as `crates/server/src/sqs.rs` waits: its wake-up registered before
/// each receive, then woken by the backend or by its timer. Once the clients are done it stops
/// receiving and notes whether it waits, and whether a wake reached it.
pub async fn long_poll(world: &World, queue: &'static str) {
    let notify = world.node.waiter(queue);
    let mut time = world.time.subscribe();
    let mut closing = world.closing.subscribe();
    let who = format!("poll on {queue}");
    let mut state = Poll::default();
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if *closing.borrow() {
            break;
        }
        let began = world.now();
        let event = world.model.receive_begun();
        let Ok(received) = world.node.receive(queue, request(2)).await else {
            break;
        };
        let ended = world.now();
        if !received.deliveries.is_empty() {
            let seen = seen(&received.deliveries);
            world.model.note(format!(
                "{who} receives {:?} at [{began}, {ended}]",
                seen.iter().map(|s| &s.body).collect::<Vec<_>>()
            ));
            world
                .model
                .delivered(queue, &seen, (began, ended, event), 2_000);
            for s in seen {
                delete(world, &who, queue, &s.body, s.handle).await;
            }
            continue;
        }
        // The server's timer starts once the answer is out; the next lease or delay ends
        // at the engine's instant of the receive (at least `began`) plus the wait.
        let due = received.next_due_in_ms.map(|d| ended + d);
        let due_at_earliest = received.next_due_in_ms.map(|d| began + d);
        world.model.note(format!(
            "{who} finds nothing at [{began}, {ended}], looks again at {due:?}"
        ));
        let wait = tokio::select! {
            biased;
            _ = &mut notified => Some("woken"),
            _ = reached(&mut time, due) => Some("due"),
            _ = closing.wait_for(|c| *c) => None,
        };
        if let Some(why) = wait {
            world.model.note(format!("{who} looks again: {why}"));
            continue;
        }
        // The clients are done: no more receives. Note where this poll waits, and whether a
        // wake still reaches it, for the check that follows.
        state = Poll {
            waiting: true,
            woken: false,
            due: due_at_earliest,
        };
        lock(&world.polls).insert(queue.to_string(), state);
        world.parked.send_modify(|n| *n += 1);
        notified.await;
        lock(&world.polls).insert(
            queue.to_string(),
            Poll {
                woken: true,
                ..state
            },
        );
        return;
    }
    lock(&world.polls).insert(queue.to_string(), state);
    world.parked.send_modify(|n| *n += 1);
}

fn request(visibility_s: u32) -> ReceiveRequest {
    ReceiveRequest {
        max_messages: 10,
        visibility_s: Some(visibility_s),
        attempt_id: None,
    }
}

/// Until the clock reaches `due` (never, for None).
async fn reached(time: &mut watch::Receiver<u64>, due: Option<u64>) {
    match due {
        Some(due) => drop(time.wait_for(|now| *now >= due).await),
        None => std::future::pending().await,
    }
}

/// The messages of `queue` a receive would hand out now (a FIFO queue's only where its
/// group has none in flight; none its redrive policy would move on), as (body, receives so
/// far).
pub async fn receivable(world: &World, queue: &str) -> Vec<(String, u32)> {
    let moves_on_at = max_receive_count(world, queue).await.unwrap_or(u32::MAX);
    let Ok(peeked) = world.node.peek(queue, 100_000).await else {
        return Vec::new();
    };
    let blocked: Vec<_> = peeked
        .iter()
        .filter(|p| p.state == MessageState::InFlight)
        .filter_map(|p| p.group_id.clone())
        .collect();
    peeked
        .iter()
        .filter(|p| {
            p.state == MessageState::Ready
                && p.receive_count < moves_on_at
                && p.group_id.as_ref().is_none_or(|g| !blocked.contains(g))
        })
        .map(|p| (p.body.to_string(), p.receive_count))
        .collect()
}

/// The queue's maxReceiveCount as its RedrivePolicy says now (clients change it).
async fn max_receive_count(world: &World, queue: &str) -> Option<u32> {
    let names = vec!["RedrivePolicy".to_string()];
    let pairs = world.node.get_attributes(queue, names).await.ok()?;
    let (_, policy) = pairs
        .into_iter()
        .find(|(name, _)| name == "RedrivePolicy")?;
    let policy = leasehold_engine::RedrivePolicy::parse(&policy).ok()?;
    Some(policy.max_receive_count)
}

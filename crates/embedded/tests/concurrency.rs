//! Many clients at once over many queues and one hot queue, with dead-letter moves (both lock
//! orders, and two queues that are each other's dead-letter queue), move tasks back, and FIFO
//! groups, checked against what a model of the clients' own acknowledged work says: nothing
//! acknowledged is lost or doubled, no message is under two live leases, each FIFO group is
//! received in the order it was sent, and the run ends within a bound (no deadlock). The
//! durable run then restarts on its store and finds exactly what was there.
//!
//! Standard queues are split into stripes, as a server's are.
//!
//! Queue invariants (`Queue::check_invariants`) run after every command in debug builds.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_backend::{Backend, Measurements, Messages, MoveTaskStart, QueueAdmin};
use leasehold_embedded::{Embedded, EngineSetup};
use leasehold_engine::{EngineConfig, ManualClock, NewMessage, ReceiveRequest};
use leasehold_store::{Durability, SqliteStore};

const WORKERS: usize = 8;
const RUN: Duration = Duration::from_millis(1_500);
/// Past this, a worker is stuck: the locks deadlocked.
const BOUND: Duration = Duration::from_secs(120);
/// A lease the clients keep: longer than the clock moves in a run, so a second lease on
/// the same message while the first is held is a violation, never a lease that ran out.
const KEEP_S: u32 = 43_200;
/// Queues whose dead-letter queue was created before them (lower id: the receive that
/// dead-letters must let its queue go and lock both in order) or after them.
const SPREAD: [&str; 4] = ["low-0", "low-1", "high-0", "high-1"];
const PAIR: [&str; 2] = ["pair-a", "pair-b"];
const HOT: &str = "hot";
const FIFO: &str = "orders.fifo";

fn pairs(items: &[(&str, String)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn redrive(backend: &Embedded, target: &str) -> Vec<(String, String)> {
    let arn = backend.naming().queue_arn(target);
    pairs(&[(
        "RedrivePolicy",
        format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":"2"}}"#),
    )])
}

/// The queues of the run, created so that both lock orders occur.
async fn create_queues(backend: &Embedded) {
    backend
        .create_queue("dlq-low", vec![], vec![])
        .await
        .unwrap();
    for name in ["low-0", "low-1", HOT] {
        let attributes = redrive(backend, "dlq-low");
        backend
            .create_queue(name, attributes, vec![])
            .await
            .unwrap();
    }
    backend
        .create_queue("dlq-high", vec![], vec![])
        .await
        .unwrap();
    for name in ["high-0", "high-1"] {
        backend.create_queue(name, vec![], vec![]).await.unwrap();
        backend
            .set_attributes(name, redrive(backend, "dlq-high"))
            .await
            .unwrap();
    }
    // Each the other's dead-letter queue.
    backend.create_queue(PAIR[0], vec![], vec![]).await.unwrap();
    let attributes = redrive(backend, PAIR[0]);
    backend
        .create_queue(PAIR[1], attributes, vec![])
        .await
        .unwrap();
    let attributes = redrive(backend, PAIR[1]);
    backend.set_attributes(PAIR[0], attributes).await.unwrap();
    let fifo = pairs(&[
        ("FifoQueue", "true".into()),
        ("ContentBasedDeduplication", "true".into()),
    ]);
    backend.create_queue(FIFO, fifo, vec![]).await.unwrap();
}

fn all_queues() -> Vec<&'static str> {
    let mut queues = vec!["dlq-low", "dlq-high", HOT, FIFO];
    queues.extend(SPREAD);
    queues.extend(PAIR);
    queues
}

/// What the clients know: every send acknowledged, every delete acknowledged, the leases
/// they hold now, and each FIFO group's bodies in the order they were received.
#[derive(Default)]
struct Model {
    sent: HashSet<String>,
    deleted: HashSet<String>,
    /// Body, and the receive number of the lease held on it.
    leased: HashMap<String, u32>,
    violations: Vec<String>,
    fifo_received: HashMap<usize, Vec<u64>>,
}

type Shared = Arc<Mutex<Model>>;

fn receive(max: u32, visibility_s: u32) -> ReceiveRequest {
    ReceiveRequest {
        max_messages: max,
        visibility_s: Some(visibility_s),
        attempt_id: None,
    }
}

/// One client: sends, receives with a lease it keeps (then deletes or releases) or with none
/// (so messages come back and pile up receives until they are dead-lettered).
async fn client(backend: Arc<Embedded>, model: Shared, worker: usize, until: Instant) {
    let mut round = 0u64;
    let queues: Vec<&str> = SPREAD.iter().chain(&PAIR).copied().collect();
    while Instant::now() < until {
        // The in-memory backend never waits: without this, the first tasks would keep the
        // runtime's threads to themselves until the end.
        tokio::task::yield_now().await;
        round += 1;
        let queue = if round.is_multiple_of(2) {
            HOT
        } else {
            queues[(worker + round as usize / 2) % queues.len()]
        };
        let bodies: Vec<String> = (0..5).map(|i| format!("{worker}/{round}/{i}")).collect();
        let batch = bodies.iter().map(|b| NewMessage::new(b.as_str())).collect();
        let sent = backend.send_batch(queue, batch).await.unwrap();
        {
            let mut model = model.lock().unwrap();
            for (body, result) in bodies.iter().zip(&sent) {
                if result.is_ok() {
                    model.sent.insert(body.clone());
                }
            }
        }
        let bounce = round.is_multiple_of(3);
        let request = receive(10, if bounce { 0 } else { KEEP_S });
        let received = backend.receive(queue, request).await.unwrap().deliveries;
        let mut to_delete = Vec::new();
        let mut to_release = Vec::new();
        {
            let mut model = model.lock().unwrap();
            for (i, delivery) in received.iter().enumerate() {
                let body = delivery.body.to_string();
                // A later receive while a lease is held; an earlier one (a lease that
                // ended at once) may be answered after it.
                let this = delivery.receive_count;
                if let Some(held) = model.leased.get(&body).copied().filter(|h| this > *h) {
                    model.violations.push(format!(
                        "{body} in {queue}: receive {this} during lease {held}"
                    ));
                }
                if bounce {
                    continue;
                }
                model.leased.insert(body.clone(), this);
                let handle = delivery.receipt_handle.clone();
                match (i + round as usize).is_multiple_of(4) {
                    true => to_release.push((body, (handle, 0))),
                    false => to_delete.push((body, handle)),
                }
            }
        }
        // Each lease is let go in the model before on the server, so a new lease is never
        // counted against one that is already over.
        let forget = |bodies: Vec<&String>| {
            let mut model = model.lock().unwrap();
            for body in bodies {
                model.leased.remove(body);
            }
        };
        forget(to_release.iter().map(|(b, _)| b).collect());
        let releases = to_release.into_iter().map(|(_, r)| r).collect::<Vec<_>>();
        if !releases.is_empty() {
            for result in backend.change_visibility(queue, releases).await.unwrap() {
                result.unwrap();
            }
        }
        forget(to_delete.iter().map(|(b, _)| b).collect());
        let handles = to_delete.iter().map(|(_, h)| h.clone()).collect();
        let results = backend.delete(queue, handles).await.unwrap();
        let mut model = model.lock().unwrap();
        for ((body, _), result) in to_delete.iter().zip(results) {
            match result {
                Ok(()) if model.deleted.insert(body.clone()) => {}
                Ok(()) => model.violations.push(format!("{body} deleted twice")),
                Err(error) => model.violations.push(format!("{body}: {error}")),
            }
        }
    }
}

/// One FIFO group per client: sent in order, received and deleted by any client, one after
/// another as the group allows.
async fn fifo_client(backend: Arc<Embedded>, model: Shared, worker: usize, until: Instant) {
    let mut next = 0u64;
    while Instant::now() < until {
        tokio::task::yield_now().await;
        let batch = (0..3)
            .map(|_| {
                next += 1;
                NewMessage {
                    group_id: Some(format!("g{worker}")),
                    ..NewMessage::new(format!("{worker}:{next}"))
                }
            })
            .collect();
        for result in backend.send_batch(FIFO, batch).await.unwrap() {
            result.unwrap();
        }
        let received = backend.receive(FIFO, receive(10, KEEP_S)).await.unwrap();
        let mut handles = Vec::new();
        {
            let mut model = model.lock().unwrap();
            for delivery in &received.deliveries {
                let (group, number) = delivery.body.split_once(':').unwrap();
                let (group, number) = (group.parse().unwrap(), number.parse().unwrap());
                model.fifo_received.entry(group).or_default().push(number);
                handles.push(delivery.receipt_handle.clone());
            }
        }
        // Deleted before the group's next messages can be received.
        for result in backend.delete(FIFO, handles).await.unwrap() {
            result.unwrap();
        }
    }
}

/// Moves the dead-letter queues' messages back to their sources now and then, and runs the
/// backend's tick (which moves them) and lease reports (which lock every queue in turn). The
/// clock moves a second a round, so that move tasks have a budget.
async fn redriver(backend: Arc<Embedded>, clock: ManualClock, until: Instant) {
    while Instant::now() < until {
        clock.advance_secs(1);
        for dlq in ["dlq-low", "dlq-high"] {
            let task = MoveTaskStart {
                source_arn: backend.naming().queue_arn(dlq),
                destination_arn: None,
                per_second: Some(500),
            };
            // One task a source at a time: a refusal while one runs is expected.
            let _ = backend.start_move_task(task).await;
        }
        backend.tick().await;
        assert!(!backend.lease_reports("").await.unwrap().is_empty());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn run(backend: Arc<Embedded>, clock: ManualClock) -> Model {
    create_queues(&backend).await;
    let model = Shared::default();
    let until = Instant::now() + RUN;
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..WORKERS {
        tasks.spawn(client(backend.clone(), model.clone(), worker, until));
    }
    for worker in 0..3 {
        tasks.spawn(fifo_client(backend.clone(), model.clone(), worker, until));
    }
    tasks.spawn(redriver(backend.clone(), clock, until));
    let watchdog = Watchdog::start(BOUND);
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    watchdog.stop();
    let mut dead_lettered = BTreeMap::new();
    for queue in SPREAD.iter().chain(&PAIR).chain(&[HOT]) {
        let stats = backend.lease_report(queue).await.unwrap().stats;
        dead_lettered.insert(*queue, stats.dead_lettered);
    }
    assert!(
        dead_lettered.values().all(|n| *n > 0),
        "every queue's dead-letter path was taken: {dead_lettered:?}"
    );
    for dlq in ["dlq-low", "dlq-high"] {
        let arn = backend.naming().queue_arn(dlq);
        let tasks = backend.list_move_tasks(&arn, Some(10)).await.unwrap();
        let moved: u64 = tasks.iter().map(|t| t.moved).sum();
        assert!(
            moved > 0,
            "move tasks moved nothing out of {dlq}: {tasks:?}"
        );
    }
    Arc::try_unwrap(model).ok().unwrap().into_inner().unwrap()
}

/// Ends the process if the run is not over within its bound: threads stuck on each other's
/// locks would never let a timer inside the runtime fire.
struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    fn start(bound: Duration) -> Watchdog {
        let over = Arc::new(AtomicBool::new(false));
        let seen = over.clone();
        std::thread::spawn(move || {
            std::thread::sleep(bound);
            if !seen.load(Ordering::SeqCst) {
                eprintln!("clients still running after {bound:?}: the locks deadlocked");
                std::process::abort();
            }
        });
        Watchdog(over)
    }

    fn stop(self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Every body still held by some queue, with how many copies.
async fn held(backend: &Embedded) -> BTreeMap<String, usize> {
    let mut held = BTreeMap::new();
    for queue in all_queues() {
        for peeked in backend.peek(queue, 10_000_000).await.unwrap() {
            *held.entry(peeked.body.to_string()).or_insert(0) += 1;
        }
    }
    held
}

fn check(model: &Model, held: &BTreeMap<String, usize>) {
    assert_eq!(model.violations, Vec::<String>::new());
    assert!(
        model.sent.len() > 1_000,
        "too little work: {}",
        model.sent.len()
    );
    for (body, copies) in held {
        assert_eq!(*copies, 1, "{body} is held {copies} times");
        assert!(
            !model.deleted.contains(body),
            "{body} deleted but still held"
        );
    }
    let lost: Vec<_> = model
        .sent
        .iter()
        .filter(|b| !model.deleted.contains(*b) && !held.contains_key(*b))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged sends lost: {lost:.5?}",
        lost.len()
    );
    assert_eq!(
        model.fifo_received.len(),
        3,
        "every FIFO group was received"
    );
    for (group, numbers) in &model.fifo_received {
        let in_order = numbers.windows(2).all(|w| w[1] == w[0] + 1);
        assert!(
            in_order && numbers.first() == Some(&1),
            "group {group}: {numbers:?}"
        );
    }
}

/// Standard queues in three stripes, so that four threads share some: sends go to a free
/// stripe, receives fill up from one stripe after another, deletes go where their handle's
/// number says.
fn setup(clock: &ManualClock) -> EngineSetup {
    EngineSetup {
        clock: Arc::new(clock.clone()),
        config: EngineConfig {
            stripes: 3,
            ..EngineConfig::default()
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_clients_over_many_queues_lose_nothing_and_never_share_a_lease_in_memory() {
    let clock = ManualClock::new(1_000_000);
    let backend = Arc::new(Embedded::in_memory(setup(&clock)));
    let model = run(backend.clone(), clock).await;
    check(&model, &held(&backend).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_clients_on_a_durable_store_leave_exactly_what_a_restart_finds() {
    let dir = std::env::temp_dir().join(format!("leasehold-concurrency-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let clock = ManualClock::new(1_000_000);
    let open = || {
        let store = SqliteStore::open(&dir).unwrap();
        let setup = setup(&clock);
        Arc::new(Embedded::durable(setup, Box::new(store), Durability::Never).unwrap())
    };
    let backend = open();
    let model = run(backend.clone(), clock.clone()).await;
    let before = held(&backend).await;
    check(&model, &before);
    backend.flush().await;
    drop(backend);
    let after = held(&open()).await;
    assert_eq!(before.len(), after.len());
    assert!(
        before == after,
        "a restart found other messages than were held"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

//! One seed: runs of the node one after another on the same disk and clock, each under its
//! own shuttle execution, ended by the clients finishing, a crash, or an abort; then a last
//! restart that only checks.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use leasehold_backend::{Backend, Messages, QueueAdmin, TimeTravel};
use leasehold_embedded::{simulation, Embedded, EngineSetup, StoreOptions};
use leasehold_engine::{faults, Clock, EngineConfig, LeaseMode, ManualClock};
use leasehold_store::Durability;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shuttle::scheduler::{RandomScheduler, Schedule, Scheduler, Task, TaskId};
use shuttle::{Config, FailurePersistence, MaxSteps, Runner};
use tokio::sync::watch;

use crate::actors::{self, arn, redrive, Client, World, FIFO, POLLED, STANDARD};
use crate::disk::{Fault, SimDisk};
use crate::model::Model;

/// Runs per seed before the last restart.
const RUNS: u64 = 4;
/// A run that takes more steps than this is stuck (a livelock, or a wait that never ends).
const MAX_STEPS: usize = 3_000_000;

pub enum Outcome {
    Held,
    Broken {
        violations: Vec<String>,
        trace: Vec<String>,
    },
}

/// How the runs ended, over all seeds.
#[derive(Default)]
pub struct Tally {
    runs: u64,
    clean: u64,
    crashed: u64,
    power_cuts: u64,
    aborted: u64,
    read_only: u64,
    full: u64,
    sends: u64,
    deliveries: u64,
    certain_deletes: u64,
    writes: u64,
}

impl Tally {
    fn fields(&mut self) -> [&mut u64; 11] {
        [
            &mut self.runs,
            &mut self.clean,
            &mut self.crashed,
            &mut self.power_cuts,
            &mut self.aborted,
            &mut self.read_only,
            &mut self.full,
            &mut self.sends,
            &mut self.deliveries,
            &mut self.certain_deletes,
            &mut self.writes,
        ]
    }

    /// The tally as a child process hands it to its parent.
    pub fn line(&mut self) -> String {
        let numbers: Vec<String> = self.fields().iter().map(|n| n.to_string()).collect();
        format!("TALLY {}", numbers.join(" "))
    }

    /// Adds a child's `line`; false if `line` is none.
    pub fn add_line(&mut self, line: &str) -> bool {
        let Some(numbers) = line.strip_prefix("TALLY ") else {
            return false;
        };
        for (field, number) in self.fields().into_iter().zip(numbers.split(' ')) {
            *field += number.parse::<u64>().unwrap_or(0);
        }
        true
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} runs ({} ended by the clients, {} crashed of which {} power cuts, {} aborted by a panic under a lock; {} with a failed write, {} with a full disk); {} acknowledged sends, {} deliveries, {} deletes under a live lease, {} writes",
            self.runs, self.clean, self.crashed, self.power_cuts, self.aborted, self.read_only, self.full,
            self.sends, self.deliveries, self.certain_deletes, self.writes
        )
    }
}

/// What one run is drawn to be.
#[derive(Clone, Copy, Debug)]
struct Plan {
    run: u64,
    clients: usize,
    actions: usize,
    polls: usize,
    store_fault: Option<(u64, Fault)>,
    power_cut: bool,
    panic_at: u64,
    durability: Durability,
    body_cache: u64,
}

impl Plan {
    /// `unsynced`: an earlier run wrote without fsync, so a power cut would rightly lose what
    /// it acknowledged; this seed has none from then on.
    fn draw(rng: &mut StdRng, run: u64, unsynced: bool) -> Plan {
        let mut plan = Plan {
            run,
            clients: rng.random_range(2..=4),
            actions: rng.random_range(15..=45),
            polls: rng.random_range(1..=3),
            store_fault: None,
            power_cut: false,
            panic_at: 0,
            durability: Durability::Always,
            body_cache: if rng.random_bool(0.5) { 0 } else { 1 << 20 },
        };
        if run == RUNS {
            // The last restart only checks.
            plan.clients = 0;
            plan.polls = 0;
            return plan;
        }
        let at = rng.random_range(1..=60);
        match rng.random_range(0..100) {
            0..=39 => {}
            40..=59 => {
                plan.store_fault = Some((
                    at,
                    Fault::Crash {
                        lands: rng.random_bool(0.5),
                    },
                ));
                plan.power_cut = !unsynced && rng.random_bool(0.5);
            }
            60..=69 => plan.store_fault = Some((at, Fault::Fail)),
            70..=84 => plan.store_fault = Some((at, Fault::Full)),
            _ => plan.panic_at = rng.random_range(1..=80),
        }
        if !plan.power_cut && rng.random_bool(0.2) {
            // Without fsync a crash of the process loses nothing; a power cut would.
            plan.durability = Durability::Never;
        }
        plan
    }
}

/// What a run's shuttle execution starts from.
struct Start {
    seed: u64,
    stripes: usize,
    lease_mode: LeaseMode,
    plan: Plan,
    disk: SimDisk,
    model: Arc<Model>,
    clock: Arc<ManualClock>,
    verbose: bool,
}

/// Shuttle's random scheduler, stopped at once when the node crashes or aborts
/// (`simulation::stopping`): no thread takes another step, as in a process that died.
struct Stoppable(RandomScheduler);

impl Scheduler for Stoppable {
    fn new_execution(&mut self) -> Option<Schedule> {
        self.0.new_execution()
    }

    fn next_task(
        &mut self,
        runnable: &[&Task],
        current: Option<TaskId>,
        is_yielding: bool,
    ) -> Option<TaskId> {
        if simulation::stopping() {
            return None;
        }
        self.0.next_task(runnable, current, is_yielding)
    }

    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
}

static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Panics are the simulation's to report (an injected one is expected): kept, not printed.
pub fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let mut panics = PANICS.lock().unwrap_or_else(|p| p.into_inner());
        panics.push(info.to_string());
    }));
}

fn panics() -> Vec<String> {
    std::mem::take(&mut *PANICS.lock().unwrap_or_else(|p| p.into_inner()))
}

pub fn seed(seed: u64, verbose: bool, tally: &mut Tally) -> Outcome {
    let mut rng = StdRng::seed_from_u64(seed);
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let stripes = rng.random_range(1..=3);
    let lease_mode = match rng.random_bool(0.7) {
        true => LeaseMode::Aws,
        false => LeaseMode::Strict,
    };
    let model = Arc::new(Model::new(lease_mode == LeaseMode::Aws));
    let mut unsynced = false;
    for run in 0..=RUNS {
        let plan = Plan::draw(&mut rng, run, unsynced);
        unsynced |= plan.durability == Durability::Never;
        model.note(format!(
            "run {run}: {plan:?}, {stripes} stripes, {lease_mode:?} leases"
        ));
        if verbose {
            eprintln!("seed {seed} run {run}: {plan:?}, {stripes} stripes, {lease_mode:?} leases");
        }
        let start = Arc::new(Start {
            seed,
            stripes,
            lease_mode,
            plan,
            disk: disk.clone(),
            model: model.clone(),
            clock: clock.clone(),
            verbose,
        });
        simulation::reset();
        faults::arm(plan.panic_at);
        disk.plan(plan.store_fault);
        panics();
        let result = catch_unwind(AssertUnwindSafe(|| {
            let scheduler = Stoppable(RandomScheduler::new_from_seed(
                seed.wrapping_mul(1_000).wrapping_add(run),
                1,
            ));
            let mut config = Config::new();
            config.max_steps = MaxSteps::FailAfter(MAX_STEPS);
            config.failure_persistence = FailurePersistence::None;
            config.silence_warnings = true;
            // Debug builds of the async commands need more than its default 32 KiB.
            config.stack_size = 4 << 20;
            let start = start.clone();
            Runner::new(scheduler, config).run(move || one_run(&start));
        }));
        let injected = faults::fired();
        faults::arm(0);
        disk.plan(None);
        let panicked = panics();
        tally.runs += 1;
        match result {
            Ok(()) if simulation::stopping() => {
                tally.crashed += 1;
                model.note(format!("run {run}: the node crashed"));
                model.crashed();
                if plan.power_cut {
                    tally.power_cuts += 1;
                    disk.power_cut();
                }
            }
            Ok(()) => tally.clean += 1,
            Err(_) if panicked.iter().any(|p| p.contains("let go half changed")) => {
                model.violate(format!(
                    "a thread took a stripe that a panic let go half changed: {}",
                    panicked.join(" / ")
                ));
            }
            Err(_) if simulation::aborted() && injected => {
                tally.aborted += 1;
                model.note(format!(
                    "run {run}: the node aborted after an injected panic"
                ));
                model.crashed();
            }
            Err(_) => model.violate(format!(
                "the run failed (aborted {}, injected {}): {}",
                simulation::aborted(),
                injected,
                panicked.join(" / ")
            )),
        }
        match plan.store_fault {
            Some((_, Fault::Fail)) => tally.read_only += 1,
            Some((_, Fault::Full)) => tally.full += 1,
            _ => {}
        }
        let violations = model.violations();
        if !violations.is_empty() {
            return Outcome::Broken {
                violations,
                trace: model.trace(),
            };
        }
    }
    let stats = model.stats();
    tally.sends += stats.sends_acked;
    tally.deliveries += stats.deliveries;
    tally.certain_deletes += stats.deletes_certain;
    tally.writes += disk.writes();
    Outcome::Held
}

/// One run, inside shuttle: the node restarts from the disk, is checked, serves the clients,
/// and is checked again.
fn one_run(start: &Start) {
    let plan = start.plan;
    let setup = EngineSetup {
        clock: start.clock.clone(),
        config: EngineConfig {
            lease_mode: start.lease_mode,
            receipt_key: [7; 16],
            // Move task ids come from it: each restart draws new ones.
            seed: start.seed.wrapping_mul(31).wrapping_add(plan.run),
            defer_drops: true,
            stripes: start.stripes,
            ..EngineConfig::default()
        },
    };
    let options = StoreOptions {
        durability: plan.durability,
        body_cache_bytes: plan.body_cache,
        disk_reserve_bytes: Some(0),
        // Contents in the clear: a sealed record's random nonce would make a seed's run
        // differ between replays.
        encryption_key_file: None,
    };
    let node = match Embedded::durable(setup, Box::new(start.disk.store()), options) {
        Ok(node) => node,
        Err(error) => {
            start.model.violate(format!(
                "run {}: the node does not restart: {error}",
                plan.run
            ));
            return;
        }
    };
    let world = Arc::new(World {
        node,
        model: start.model.clone(),
        clock: start.clock.clone(),
        epoch: plan.run,
        time: watch::Sender::new(start.clock.now_ms()),
        closing: watch::Sender::new(false),
        parked: watch::Sender::new(0),
        polls: Mutex::new(HashMap::new()),
        clients_left: AtomicUsize::new(plan.clients),
        move_tasks: Mutex::new(Vec::new()),
    });
    shuttle::future::block_on(async {
        check(&world, &format!("run {}, restarted", plan.run)).await;
        if plan.run == 0 {
            create_queues(&world).await;
        }
    });
    let mut clients = Vec::new();
    for id in 0..plan.clients {
        let world = world.clone();
        let client = Client::new(id, start.seed ^ (plan.run << 32) ^ (id as u64 + 1) << 48);
        let actions = plan.actions;
        clients.push(shuttle::thread::spawn(move || {
            shuttle::future::block_on(client.run(&world, actions))
        }));
    }
    let polled: Vec<&'static str> = POLLED[..plan.polls].to_vec();
    let mut polls = Vec::new();
    for &queue in &polled {
        let world = world.clone();
        polls.push(shuttle::thread::spawn(move || {
            shuttle::future::block_on(actors::long_poll(&world, queue))
        }));
    }
    if plan.clients > 0 {
        let w = world.clone();
        let time_seed = start.seed ^ plan.run;
        clients.push(shuttle::thread::spawn(move || {
            shuttle::future::block_on(actors::pass_time(&w, time_seed))
        }));
        let w = world.clone();
        clients.push(shuttle::thread::spawn(move || {
            shuttle::future::block_on(actors::tick(&w))
        }));
    }
    for client in clients {
        client.join().expect("a client panicked");
    }
    world.closing.send_replace(true);
    shuttle::future::block_on(async {
        let mut parked = world.parked.subscribe();
        let _ = parked.wait_for(|n| *n == polled.len()).await;
    });
    // Let a long poll that a wake reached run before it is looked at.
    for _ in 0..64 {
        shuttle::thread::yield_now();
    }
    shuttle::future::block_on(check_polls(&world, &polled));
    world.node.wake_all();
    for poll in polls {
        poll.join().expect("a long poll panicked");
    }
    shuttle::future::block_on(async {
        if world.node.ready().await.is_err() {
            reads_change_nothing(&world, plan.run).await;
        }
        check(&world, &format!("run {}, at its end", plan.run)).await;
    });
    if start.verbose {
        eprintln!("  run {} ends at {} ms", plan.run, world.now());
    }
}

/// Each queue's dead-letter queue and maxReceiveCount: a and b are each other's, as are g.fifo
/// and h.fifo.
const REDRIVES: [(&str, &str, u32); 4] = [
    ("a", "b", 2),
    ("b", "a", 3),
    ("g.fifo", "h.fifo", 2),
    ("h.fifo", "g.fifo", 2),
];

async fn create_queues(world: &World) {
    for queue in STANDARD {
        let _ = world
            .node
            .create_queue(queue, vec![actors::visibility_attribute()], Vec::new())
            .await;
    }
    for queue in FIFO {
        let attributes = vec![
            ("FifoQueue".to_string(), "true".to_string()),
            actors::visibility_attribute(),
        ];
        let _ = world.node.create_queue(queue, attributes, Vec::new()).await;
    }
    for (queue, target, max) in REDRIVES {
        let _ = world
            .node
            .set_attributes(queue, vec![redrive(target, max)])
            .await;
    }
    let _ = arn("a");
}

/// Every long poll that still waits, no wake having reached it and its timer not due, on a
/// queue that holds a receivable message, was not woken.
async fn check_polls(world: &World, polled: &[&'static str]) {
    let polls = world
        .polls
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let now = world.now();
    for queue in polled {
        let Some(poll) = polls.get(*queue) else {
            continue;
        };
        let timer_fired = poll.due.is_some_and(|due| now >= due);
        if !poll.waiting || poll.woken || timer_fired {
            continue;
        }
        let receivable = actors::receivable(world, queue).await;
        if !receivable.is_empty() {
            world.model.violate(format!(
                "a long poll on {queue} still waits (its timer due at {:?}, now {now}) while {queue} holds receivable messages {receivable:?} (body, receives): no wake reached it",
                poll.due
            ));
        }
    }
}

/// What every queue holds, by body, checked against the model; and every queue's invariants.
async fn check(world: &World, when: &str) {
    let mut held: HashMap<String, usize> = HashMap::new();
    for queue in STANDARD.iter().chain(FIFO.iter()) {
        if let Ok(peeked) = world.node.peek(queue, 100_000).await {
            for p in peeked {
                *held.entry(p.body.to_string()).or_default() += 1;
            }
        }
    }
    world.model.check_held(&held, when);
    if let Err(broken) = world.node.check_invariants() {
        world
            .model
            .violate(format!("{when}: an invariant is broken: {broken}"));
    }
}

/// After a failed write the node serves reads only, and they change nothing in memory: what
/// each queue holds is the same after time passes and the reads that tick queues run.
async fn reads_change_nothing(world: &World, run: u64) {
    let before = holdings(world).await;
    world.clock.advance_ms(30_000);
    let _ = world.node.clock_advanced(30_000).await;
    for queue in STANDARD.iter().chain(FIFO.iter()) {
        let _ = world.node.get_attributes(queue, vec!["All".into()]).await;
        let _ = world.node.list_move_tasks(&arn(queue), None).await;
    }
    let after = holdings(world).await;
    if before != after {
        world.model.violate(format!(
            "run {run}: serving reads only after a failed write, memory changed: {before:?} became {after:?}"
        ));
    }
}

async fn holdings(world: &World) -> Vec<(String, String, u32)> {
    let mut all = Vec::new();
    for queue in STANDARD.iter().chain(FIFO.iter()) {
        if let Ok(peeked) = world.node.peek(queue, 100_000).await {
            all.extend(
                peeked
                    .into_iter()
                    .map(|p| (queue.to_string(), p.body.to_string(), p.receive_count)),
            );
        }
    }
    all.sort();
    all
}

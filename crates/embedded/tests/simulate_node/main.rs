//! The deterministic simulation of one node (issue 45): the embedded backend as the server
//! runs it (the engine's lock, the queue locks, the committer's thread and channel, the
//! waiters, the manual clock), every thread under one seeded shuttle scheduler, on a simulated
//! disk that crashes at a planned write (losing what was not synced, on a power cut), fails a
//! write, or runs out of space; and engine panics planned under a queue's lock. Clients run
//! every action that changes state over standard and FIFO queues that are each other's
//! dead-letter queues, with long polls, move tasks and time passing. After every crash or
//! abort the node restarts from its disk through the production restore path. The model
//! (`model.rs`) checks: no acknowledged send lost, no acknowledged delete undone, no message
//! under two live leases, one message in flight per FIFO group and first deliveries in send
//! order, no deadlock (shuttle's) and no livelock (a step bound), every waiting long poll woken
//! once its queue holds a receivable message, `check_invariants` on every queue. What it does
//! not cover: SQLite itself (its own tests and `crash.rs`), the HTTP layer, PostgreSQL.
//!
//! `scripts/simulate-node [--seeds N | --seed S | --minutes M] [--first S]`; a failure prints
//! the command that replays it exactly.

mod actors;
mod disk;
mod model;
mod run;

use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;

use run::{Outcome, Tally};

struct Args {
    first: u64,
    seeds: Option<u64>,
    minutes: Option<f64>,
    verbose: bool,
    /// Run by a parent: print the tally as one `TALLY` line.
    child: bool,
}

/// Seeds per child process. A run that a crash or an abort stopped leaves what its threads
/// held for good (shuttle abandons their stacks): a child of this many seeds ends, and its
/// memory with it, before that adds up.
const CHUNK: u64 = 100;

fn usage(why: &str) -> ! {
    eprintln!("simulate-node: {why}\nusage: scripts/simulate-node [--seeds N | --seed S | --minutes M] [--first S] [--verbose]");
    std::process::exit(2)
}

fn parse() -> Args {
    let mut args = Args {
        first: 0,
        seeds: Some(20),
        minutes: None,
        verbose: false,
        child: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .unwrap_or_else(|| usage(&format!("{name} needs a value")))
        };
        match flag.as_str() {
            "--seeds" => {
                args.seeds = Some(number(&value("--seeds")));
                args.minutes = None;
            }
            "--seed" => {
                args.first = number(&value("--seed"));
                args.seeds = Some(1);
                args.minutes = None;
                args.verbose = true;
            }
            "--first" => args.first = number(&value("--first")),
            "--minutes" => {
                let minutes = value("--minutes");
                args.minutes = Some(
                    minutes
                        .parse()
                        .ok()
                        .filter(|m: &f64| *m > 0.0)
                        .unwrap_or_else(|| {
                            usage(&format!(
                                "--minutes wants a positive number, not {minutes:?}"
                            ))
                        }),
                );
                args.seeds = None;
            }
            "--verbose" => args.verbose = true,
            "--child" => args.child = true,
            // What cargo's test runner passes on.
            "--nocapture" | "--quiet" | "-q" => {}
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    args
}

fn number(text: &str) -> u64 {
    text.parse()
        .unwrap_or_else(|_| usage(&format!("expected a whole number, not {text:?}")))
}

fn main() {
    let args = parse();
    run::quiet_panics();
    let started = Instant::now();
    let mut tally = Tally::default();
    let mut seed = args.first;
    let in_chunks = !args.child && args.seeds.is_none_or(|n| n > CHUNK);
    loop {
        let done = match (args.seeds, args.minutes) {
            (Some(n), _) => seed >= args.first + n,
            (None, Some(m)) => started.elapsed().as_secs_f64() >= m * 60.0,
            (None, None) => true,
        };
        if done {
            break;
        }
        if in_chunks {
            let count = args
                .seeds
                .map_or(CHUNK, |n| CHUNK.min(args.first + n - seed));
            chunk(seed, count, &mut tally);
            seed += count;
            continue;
        }
        match run::seed(seed, args.verbose, &mut tally) {
            Outcome::Held => {}
            Outcome::Broken { violations, trace } => {
                eprintln!(
                    "\nseed {seed} FAILED after {:.1} s of this run:",
                    started.elapsed().as_secs_f64()
                );
                for line in trace {
                    eprintln!("  {line}");
                }
                for violation in &violations {
                    eprintln!("VIOLATION: {violation}");
                }
                eprintln!("replay: scripts/simulate-node --seed {seed}");
                std::process::exit(1);
            }
        }
        seed += 1;
    }
    if args.child {
        println!("{}", tally.line());
        return;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "simulate-node: seeds {}..{} held in {secs:.1} s ({:.1} seeds/minute): {tally}",
        args.first,
        seed,
        (seed - args.first) as f64 * 60.0 / secs.max(0.001),
    );
}

/// Runs `count` seeds from `first` in a child process of this program (in a process group of
/// its own), adding its tally; its failure is this run's.
fn chunk(first: u64, count: u64, tally: &mut Tally) {
    let program =
        std::env::current_exe().unwrap_or_else(|e| usage(&format!("cannot find myself: {e}")));
    let mut child = Command::new(program)
        .args([
            "--child",
            "--first",
            &first.to_string(),
            "--seeds",
            &count.to_string(),
        ])
        .process_group(0)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| usage(&format!("cannot start a child: {e}")));
    let mut tallied = false;
    if let Some(out) = child.stdout.take() {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if !tally.add_line(&line) {
                println!("{line}");
            } else {
                tallied = true;
            }
        }
    }
    let status = child
        .wait()
        .unwrap_or_else(|e| usage(&format!("lost a child: {e}")));
    if !status.success() || !tallied {
        // The child said what failed, and how to replay it.
        eprintln!(
            "simulate-node: seeds {first}..{} failed ({status})",
            first + count
        );
        std::process::exit(1);
    }
}

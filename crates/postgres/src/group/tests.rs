//! The grouper's lock under shuttle's scheduler: submitters and the runners they start, in
//! many interleavings, each seeded so a failure replays.

use std::sync::Arc;

use shuttle::sync::Mutex;
use shuttle::thread;

use super::Pending;

/// One run: `submitters` threads each push `jobs` jobs and start a runner when told to;
/// a runner takes groups of at most `max` until none waits, as `Grouper::start_runner`'s
/// task does.
fn run(limit: usize, submitters: usize, jobs: usize, max: usize) {
    let pending = Arc::new(Mutex::new(Pending::new(limit)));
    let ran = Arc::new(Mutex::new(Vec::new()));
    let runners = Arc::new(Mutex::new(Vec::new()));
    let most_running = Arc::new(Mutex::new(0));
    let threads: Vec<_> = (0..submitters)
        .map(|s| {
            let (pending, ran, runners, most) = (
                pending.clone(),
                ran.clone(),
                runners.clone(),
                most_running.clone(),
            );
            thread::spawn(move || {
                for j in 0..jobs {
                    let start = {
                        let mut pending = pending.lock().unwrap();
                        let start = pending.push(s * 100 + j);
                        let mut most = most.lock().unwrap();
                        *most = (*most).max(pending.running);
                        start
                    };
                    if start {
                        let (pending, ran) = (pending.clone(), ran.clone());
                        let runner = thread::spawn(move || loop {
                            let group = pending.lock().unwrap().next_group(max);
                            let Some(group) = group else { return };
                            assert!(!group.is_empty() && group.len() <= max);
                            ran.lock().unwrap().extend(group);
                        });
                        runners.lock().unwrap().push(runner);
                    }
                }
            })
        })
        .collect();
    for submitter in threads {
        submitter.join().unwrap();
    }
    // Every runner was started by a submitter, all of which are done.
    let runners = std::mem::take(&mut *runners.lock().unwrap());
    for runner in runners {
        runner.join().unwrap();
    }
    let mut ran = ran.lock().unwrap().clone();
    ran.sort_unstable();
    let mut expected: Vec<usize> = (0..submitters)
        .flat_map(|s| (0..jobs).map(move |j| s * 100 + j))
        .collect();
    expected.sort_unstable();
    assert_eq!(ran, expected, "every job runs exactly once");
    assert!(
        pending.lock().unwrap().is_idle(),
        "no job left, no runner counted"
    );
    assert!(
        *most_running.lock().unwrap() <= limit,
        "never more runners than the limit"
    );
}

#[test]
fn every_job_runs_once_and_no_runner_is_left_counted_in_every_interleaving() {
    shuttle::check_random(|| run(2, 3, 3, 2), 2_000);
}

#[test]
fn one_runner_alone_still_takes_every_job() {
    shuttle::check_random(|| run(1, 3, 2, 64), 1_000);
}

#[test]
fn a_job_pushed_as_the_last_runner_stops_starts_a_new_one() {
    // The race the lock closes: a runner finds nothing and stops while a job arrives; the
    // job's submitter sees no runner counted and starts one.
    shuttle::check_pct(|| run(1, 2, 1, 1), 2_000, 3);
}

#[test]
fn groups_are_taken_oldest_first_and_bounded() {
    let mut pending = Pending::new(2);
    assert!(pending.push(1));
    assert!(pending.push(2));
    assert!(
        !pending.push(3),
        "a third runner is not started past the limit"
    );
    assert_eq!(pending.next_group(2), Some(vec![1, 2]));
    assert_eq!(pending.next_group(2), Some(vec![3]));
    assert_eq!(pending.next_group(2), None);
    assert_eq!(pending.next_group(2), None);
    assert!(pending.is_idle());
}

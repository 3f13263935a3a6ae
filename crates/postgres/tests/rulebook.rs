//! The rulebook's tables of cases (`leasehold_engine::rules`), each row stated once and run
//! three ways: against the pure rule, against the embedded engine and against PostgreSQL, in
//! both lease modes. A row says where a handle stands when its command arrives and what must
//! follow: the answer, whether the message stays, and which counter counts it.

mod common;

use std::sync::Arc;

use common::Schema;
use leasehold_backend::{Backend, BackendError};
use leasehold_embedded::{Embedded, EngineSetup};
use leasehold_engine::rules::{self, ChangeKind, Handling, LeaseEnd, MessageLease, Refusal, Take};
use leasehold_engine::{
    EngineConfig, EngineError, LeaseMode, ManualClock, NewMessage, QueueStats, ReceiveRequest,
};
use leasehold_postgres::Postgres;

const START_MS: u64 = 1_700_000_000_000;
const LEASE_S: u32 = 30;

/// Where a handle stands when its command arrives. Each starts from one message, received
/// once with a 30 s lease.
#[derive(Clone, Copy, Debug)]
enum Handle {
    /// A second into its lease.
    Live,
    /// Its lease ran out a second ago; nobody received the message since.
    RanOut,
    /// Its lease ran out and another consumer received the message.
    Superseded,
    /// Another consumer received the message and deleted it.
    Gone,
}

impl Handle {
    /// The situation as the rules see it: the message's lease (None: gone), the handle's
    /// receive number and the instant, from the start of the case.
    fn as_rules_see_it(self) -> (Option<MessageLease>, u32, u64) {
        let lease = |receive_count, started_ms: u64| MessageLease {
            receive_count,
            started_ms,
            hidden_until_ms: started_ms + u64::from(LEASE_S) * 1000,
            released: false,
        };
        match self {
            Handle::Live => (Some(lease(1, 0)), 1, 1_000),
            Handle::RanOut => (Some(lease(1, 0)), 1, 31_000),
            Handle::Superseded => (Some(lease(2, 31_000)), 1, 31_000),
            Handle::Gone => (None, 1, 31_000),
        }
    }
}

/// A backend under test and the clock its rules read.
struct Side<'a> {
    name: &'static str,
    backend: &'a dyn Backend,
    clock: Clock<'a>,
    now: u64,
}

enum Clock<'a> {
    Manual(ManualClock),
    Frozen(&'a Postgres),
}

impl Side<'_> {
    async fn advance(&mut self, ms: u64) {
        self.now += ms;
        match &self.clock {
            Clock::Manual(clock) => clock.advance_ms(ms),
            Clock::Frozen(postgres) => postgres.freeze_clock(Some(self.now)).await.unwrap(),
        }
    }

    async fn create(&self, queue: &str, mut attributes: Vec<(String, String)>) {
        attributes.push(("VisibilityTimeout".into(), LEASE_S.to_string()));
        if queue.ends_with(".fifo") {
            attributes.push(("FifoQueue".into(), "true".into()));
            attributes.push(("ContentBasedDeduplication".into(), "true".into()));
        }
        self.backend
            .create_queue(queue, attributes, vec![])
            .await
            .unwrap();
    }

    async fn send(&self, queue: &str, body: &str, group: &str) {
        let mut message = NewMessage::new(body);
        if queue.ends_with(".fifo") {
            message.group_id = Some(group.into());
        }
        self.backend.send(queue, message).await.unwrap();
    }

    /// Bodies, receive counts and handles of what one receive leased.
    async fn receive(&self, queue: &str, max: u32, lease_s: u32) -> Vec<(String, u32, String)> {
        let request = ReceiveRequest {
            max_messages: max,
            visibility_s: Some(lease_s),
            attempt_id: None,
        };
        let received = self.backend.receive(queue, request).await.unwrap();
        received
            .deliveries
            .into_iter()
            .map(|d| (d.body.to_string(), d.receive_count, d.receipt_handle))
            .collect()
    }

    async fn delete(&self, queue: &str, handle: &str) -> String {
        answer(self.backend.delete(queue, vec![handle.into()]).await)
    }

    async fn change(&self, queue: &str, handle: &str, timeout_s: u32) -> String {
        let changes = vec![(handle.to_string(), timeout_s)];
        answer(self.backend.change_visibility(queue, changes).await)
    }

    async fn stats(&self, queue: &str) -> QueueStats {
        self.backend.lease_report(queue).await.unwrap().stats
    }

    /// How many messages the queue holds: receivable, and all.
    async fn held(&self, queue: &str) -> (u64, u64) {
        let names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ];
        let names = names.map(String::from).to_vec();
        let pairs = self.backend.get_attributes(queue, names).await.unwrap();
        let count = |name: &str| -> u64 {
            pairs
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, v)| v.parse().unwrap())
        };
        let all = pairs.iter().map(|(_, v)| v.parse::<u64>().unwrap()).sum();
        (count("ApproximateNumberOfMessages"), all)
    }

    /// Brings a fresh one-message queue to `handle`'s situation; answers the handle.
    async fn stage(&mut self, queue: &str, handle: Handle) -> String {
        self.create(queue, vec![]).await;
        self.send(queue, "m", "g").await;
        let first = self.receive(queue, 1, LEASE_S).await.remove(0).2;
        match handle {
            Handle::Live => self.advance(1_000).await,
            Handle::RanOut => self.advance(31_000).await,
            Handle::Superseded | Handle::Gone => {
                self.advance(31_000).await;
                let second = self.receive(queue, 1, LEASE_S).await.remove(0).2;
                if let Handle::Gone = handle {
                    assert_eq!(self.delete(queue, &second).await, "ok");
                }
            }
        }
        first
    }
}

/// A one-entry batch's answer: "ok", or the error's name.
fn answer(result: Result<Vec<Result<(), EngineError>>, BackendError>) -> String {
    match result.map(|mut v| v.remove(0)) {
        Ok(Ok(())) => "ok".into(),
        Ok(Err(error)) => name_of(&error),
        Err(error) => panic!("the backend failed: {error}"),
    }
}

fn name_of(error: &EngineError) -> String {
    let debug = format!("{error:?}");
    debug.split('(').next().unwrap_or_default().to_string()
}

fn refusal_name(refusal: Option<Refusal>) -> String {
    refusal.map_or("ok".into(), |r| name_of(&r.error("h")))
}

/// Which of `counters` (by name) went up by one from `before` to `after`, or "none"; any
/// other change among them fails.
fn counted(before: &QueueStats, after: &QueueStats, counters: &[&str]) -> &'static str {
    let mut up = "none";
    for (i, name) in QueueStats::NAMES.iter().enumerate() {
        let delta = after.values()[i] - before.values()[i];
        if counters.contains(name) && delta > 0 {
            assert_eq!((up, delta), ("none", 1), "{name} counted too");
            up = name;
        }
    }
    up
}

/// The embedded engine and PostgreSQL in one lease mode, each with its clock.
struct Rig {
    mode: LeaseMode,
    schema: Schema,
    postgres: Postgres,
    embedded: Embedded,
    clock: ManualClock,
}

impl Rig {
    async fn new(mode: LeaseMode) -> Rig {
        let schema = Schema::new().await;
        let postgres = schema.server_in(mode).await;
        postgres.freeze_clock(Some(START_MS)).await.unwrap();
        let clock = ManualClock::new(START_MS);
        let embedded = Embedded::in_memory(EngineSetup {
            clock: Arc::new(clock.clone()),
            config: EngineConfig {
                lease_mode: mode,
                // As the backend compared with (given a key file, `common::key_file`).
                encrypts_at_rest: true,
                ..EngineConfig::default()
            },
        });
        Rig {
            mode,
            schema,
            postgres,
            embedded,
            clock,
        }
    }

    fn sides(&self) -> [Side<'_>; 2] {
        [
            Side {
                name: "embedded",
                backend: &self.embedded,
                clock: Clock::Manual(self.clock.clone()),
                now: START_MS,
            },
            Side {
                name: "postgres",
                backend: &self.postgres,
                clock: Clock::Frozen(&self.postgres),
                now: START_MS,
            },
        ]
    }

    async fn drop_all(self) {
        self.schema.drop_all([self.postgres]).await;
    }
}

fn queue_name(prefix: &str, row: usize, fifo: bool) -> String {
    format!("{prefix}{row}{}", if fifo { ".fifo" } else { "" })
}

/// DeleteMessage: (FIFO, mode, handle) -> (answer, message stays, counted as).
const DELETES: &[(bool, LeaseMode, Handle, &str, bool, &str)] = {
    use Handle::*;
    use LeaseMode::*;
    &[
        (false, Aws, Live, "ok", false, "deleted_within_lease"),
        (false, Aws, RanOut, "ok", false, "late_deletes"),
        (false, Aws, Superseded, "ok", false, "late_deletes"),
        (false, Aws, Gone, "ok", false, "repeat_deletes"),
        (false, Strict, Live, "ok", false, "deleted_within_lease"),
        (false, Strict, RanOut, "ok", true, "late_deletes"),
        (false, Strict, Superseded, "ok", true, "late_deletes"),
        (false, Strict, Gone, "ok", false, "repeat_deletes"),
        (true, Aws, Live, "ok", false, "deleted_within_lease"),
        (
            true,
            Aws,
            RanOut,
            "ReceiptHandleExpired",
            true,
            "late_deletes",
        ),
        (
            true,
            Strict,
            Superseded,
            "ReceiptHandleExpired",
            true,
            "late_deletes",
        ),
        (true, Aws, Gone, "ok", false, "repeat_deletes"),
    ]
};

#[test]
fn the_delete_table_is_the_rules() {
    for &(fifo, mode, handle, answer, stays, counted) in DELETES {
        let (lease, receive_no, now) = handle.as_rules_see_it();
        let deletion = lease.map(|l| rules::delete(Handling { fifo, mode }, &l, receive_no, now));
        let row = format!("{fifo} {mode:?} {handle:?}");
        assert_eq!(
            refusal_name(deletion.and_then(|d| d.refusal)),
            answer,
            "{row}"
        );
        let removes = deletion.is_some_and(|d| d.removes);
        assert_eq!(lease.is_some() && !removes, stays, "{row}");
        let counted_as = match LeaseEnd::of(deletion.as_ref()) {
            LeaseEnd::OnTime => "deleted_within_lease",
            LeaseEnd::Late => "late_deletes",
            LeaseEnd::Repeat => "repeat_deletes",
        };
        assert_eq!(counted_as, counted, "{row}");
    }
}

/// ChangeMessageVisibility: (FIFO, mode, handle, timeout) -> (answer, counted as, receivable
/// right after).
const CHANGES: &[(bool, LeaseMode, Handle, u32, &str, &str, bool)] = {
    use Handle::*;
    use LeaseMode::*;
    &[
        (false, Aws, Live, 0, "ok", "released_early", true),
        (false, Aws, Live, 10, "ok", "released_early", false),
        (false, Aws, Live, 60, "ok", "extensions", false),
        (false, Aws, RanOut, 60, "ok", "none", false),
        (false, Aws, Superseded, 60, "ok", "none", false),
        (false, Aws, Gone, 60, "MessageNotAvailable", "none", false),
        (false, Strict, Live, 60, "ok", "extensions", false),
        (
            false,
            Strict,
            RanOut,
            60,
            "MessageNotInflight",
            "none",
            true,
        ),
        (
            false,
            Strict,
            Superseded,
            0,
            "MessageNotInflight",
            "none",
            false,
        ),
        (false, Strict, Gone, 0, "MessageNotAvailable", "none", false),
        (true, Aws, Live, 0, "ok", "released_early", true),
        (true, Aws, RanOut, 60, "ReceiptHandleExpired", "none", true),
        (
            true,
            Strict,
            Superseded,
            60,
            "ReceiptHandleExpired",
            "none",
            false,
        ),
        (true, Aws, Gone, 60, "MessageNotAvailable", "none", false),
    ]
};

#[test]
fn the_visibility_table_is_the_rules() {
    for &(fifo, mode, handle, timeout_s, answer, counted, receivable) in CHANGES {
        let (lease, receive_no, now) = handle.as_rules_see_it();
        let handling = Handling { fifo, mode };
        let change = rules::change_visibility(handling, lease.as_ref(), receive_no, now, timeout_s);
        let row = format!("{fifo} {mode:?} {handle:?} {timeout_s}");
        assert_eq!(refusal_name(change.err()), answer, "{row}");
        let counted_as = match change.map(|c| c.kind) {
            Ok(ChangeKind::Released) => "released_early",
            Ok(ChangeKind::Extended) => "extensions",
            Ok(ChangeKind::Other) | Err(_) => "none",
        };
        assert_eq!(counted_as, counted, "{row}");
        let hidden_until = match change {
            Ok(change) => change.until_ms,
            Err(_) => lease.map_or(u64::MAX, |l| l.hidden_until_ms),
        };
        assert_eq!(lease.is_some() && hidden_until <= now, receivable, "{row}");
    }
}

/// The 12-hour ceiling, counted from the lease's start in whole seconds: a lease of 43,200 s
/// held 1,000.5 s, then a new timeout -> answer.
const CEILING: &[(u32, &str)] = &[
    (42_200, "ok"),
    (42_199, "ok"),
    (42_201, "InvalidParameterValue"),
];

#[test]
fn the_ceiling_table_is_the_rules() {
    let lease = MessageLease {
        receive_count: 1,
        started_ms: 0,
        hidden_until_ms: 43_200_000,
        released: false,
    };
    for &(timeout_s, answer) in CEILING {
        let handling = Handling {
            fifo: false,
            mode: LeaseMode::Aws,
        };
        let change = rules::change_visibility(handling, Some(&lease), 1, 1_000_500, timeout_s);
        assert_eq!(refusal_name(change.err()), answer, "{timeout_s}");
    }
}

/// A receive under maxReceiveCount 2: (FIFO, receives so far, dead-letter queue still there)
/// -> (the receive count it is leased with, or 0: dead-lettered instead).
const RECEIVES: &[(bool, u32, bool, u32)] = &[
    (false, 0, true, 1),
    (false, 1, true, 2),
    (false, 2, true, 0),
    (false, 2, false, 3),
    (true, 1, true, 2),
    (true, 2, true, 0),
    (true, 2, false, 3),
];

#[test]
fn the_receive_table_is_the_rules() {
    for &(fifo, so_far, target_there, leased_as) in RECEIVES {
        let max = rules::dead_letter_after(Some(2), fifo, target_there.then_some(fifo));
        let expected = match rules::take(so_far, max) {
            Take::Lease { receive_no, first } => {
                assert_eq!(first, so_far == 0);
                receive_no
            }
            Take::DeadLetter => 0,
        };
        assert_eq!(expected, leased_as, "{fifo} {so_far} {target_there}");
    }
}

/// How a lease that ran out is counted: (what came after it) -> (leases_expired,
/// released_early, late_deletes) once the message was next seen.
#[derive(Clone, Copy, Debug)]
enum After {
    ReceivedAgain,
    ReleasedThenReceived,
    DeletedLate,
}

const LEASE_ENDS: &[(After, [u64; 3])] = &[
    (After::ReceivedAgain, [1, 0, 0]),
    (After::ReleasedThenReceived, [0, 1, 0]),
    (After::DeletedLate, [1, 0, 1]),
];

#[test]
fn the_lease_end_table_is_the_rules() {
    for &(after, [expired, _, _]) in LEASE_ENDS {
        let lease = MessageLease {
            receive_count: 1,
            started_ms: 0,
            hidden_until_ms: 30_000,
            released: matches!(after, After::ReleasedThenReceived),
        };
        assert_eq!(u64::from(lease.ran_out(31_000)), expired, "{after:?}");
    }
}

/// A FIFO group whose head m1 is (leased, released, ran out, deleted) -> what a receive of
/// ten takes from the queue (groups g: m1, m2; h: n1).
#[derive(Clone, Copy, Debug)]
enum Head {
    Leased,
    Released,
    RanOut,
    Deleted,
}

const GROUP_HEADS: &[(Head, &[&str])] = &[
    (Head::Leased, &["n1"]),
    (Head::Released, &["m1", "m2", "n1"]),
    (Head::RanOut, &["m1", "m2", "n1"]),
    (Head::Deleted, &["m2", "n1"]),
];

#[test]
fn the_group_head_table_is_the_rules() {
    for &(head, takes) in GROUP_HEADS {
        // The group's head as the next receive finds it, and when: m1, or m2 once m1 is gone.
        let (receive_count, hidden_until_ms, now) = match head {
            Head::Leased => (1, 30_000, 1_000),
            Head::Released => (1, 1_000, 1_000),
            Head::RanOut => (1, 30_000, 31_000),
            Head::Deleted => (0, 0, 1_000),
        };
        let lease = MessageLease {
            receive_count,
            started_ms: 0,
            hidden_until_ms,
            released: matches!(head, Head::Released),
        };
        let eligible = rules::group_eligible(&lease, now);
        assert_eq!(eligible, takes.contains(&"m2"), "{head:?}");
    }
}

async fn run_deletes(rig: &Rig, side: &mut Side<'_>) {
    for (row, &(fifo, mode, handle, answer, stays, counted_as)) in DELETES.iter().enumerate() {
        if mode != rig.mode {
            continue;
        }
        let queue = queue_name("del", row, fifo);
        let first = side.stage(&queue, handle).await;
        let before = side.stats(&queue).await;
        let got = side.delete(&queue, &first).await;
        let after = side.stats(&queue).await;
        let counters = ["deleted_within_lease", "late_deletes", "repeat_deletes"];
        let observed = (
            got,
            side.held(&queue).await.1 > 0,
            counted(&before, &after, &counters),
        );
        let expected = (answer.to_string(), stays, counted_as);
        let row = format!("{} delete {fifo} {mode:?} {handle:?}", side.name);
        assert_eq!(observed, expected, "{row}");
    }
}

async fn run_changes(rig: &Rig, side: &mut Side<'_>) {
    for (row, &(fifo, mode, handle, timeout_s, answer, counted_as, receivable)) in
        CHANGES.iter().enumerate()
    {
        if mode != rig.mode {
            continue;
        }
        let queue = queue_name("chg", row, fifo);
        let first = side.stage(&queue, handle).await;
        let before = side.stats(&queue).await;
        let got = side.change(&queue, &first, timeout_s).await;
        let after = side.stats(&queue).await;
        let counters = ["released_early", "extensions"];
        let observed = (
            got,
            counted(&before, &after, &counters),
            side.held(&queue).await.0 > 0,
        );
        let expected = (answer.to_string(), counted_as, receivable);
        let row = format!(
            "{} change {fifo} {mode:?} {handle:?} {timeout_s}",
            side.name
        );
        assert_eq!(observed, expected, "{row}");
    }
}

async fn run_ceiling(side: &mut Side<'_>) {
    for (row, &(timeout_s, answer)) in CEILING.iter().enumerate() {
        let queue = queue_name("ceil", row, false);
        side.create(&queue, vec![]).await;
        side.send(&queue, "m", "g").await;
        let handle = side.receive(&queue, 1, 43_200).await.remove(0).2;
        side.advance(1_000_500).await;
        let got = side.change(&queue, &handle, timeout_s).await;
        assert_eq!(got, answer, "{} ceiling {timeout_s}", side.name);
    }
}

async fn run_receives(side: &mut Side<'_>) {
    for (row, &(fifo, so_far, target_there, leased_as)) in RECEIVES.iter().enumerate() {
        let (queue, dlq) = (queue_name("rcv", row, fifo), queue_name("dlq", row, fifo));
        side.create(&dlq, vec![]).await;
        let policy = format!(
            r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:{dlq}","maxReceiveCount":"2"}}"#
        );
        side.create(&queue, vec![("RedrivePolicy".into(), policy)])
            .await;
        side.send(&queue, "m", "g").await;
        for _ in 0..so_far {
            assert_eq!(side.receive(&queue, 1, 1).await.len(), 1);
            side.advance(2_000).await;
        }
        if !target_there {
            side.backend.delete_queue(&dlq).await.unwrap();
        }
        let got = side.receive(&queue, 1, LEASE_S).await;
        let leased = got.first().map_or(0, |(_, count, _)| *count);
        let row = format!("{} receive {fifo} {so_far} {target_there}", side.name);
        assert_eq!(leased, leased_as, "{row}");
        if target_there && leased_as == 0 {
            assert_eq!(
                side.held(&dlq).await.1,
                1,
                "{row}: in the dead-letter queue"
            );
        }
    }
}

async fn run_lease_ends(side: &mut Side<'_>) {
    for (row, &(after, expected)) in LEASE_ENDS.iter().enumerate() {
        let queue = queue_name("end", row, false);
        side.create(&queue, vec![]).await;
        side.send(&queue, "m", "g").await;
        let handle = side.receive(&queue, 1, LEASE_S).await.remove(0).2;
        match after {
            After::ReleasedThenReceived => {
                assert_eq!(side.change(&queue, &handle, 0).await, "ok");
            }
            After::ReceivedAgain | After::DeletedLate => side.advance(31_000).await,
        }
        match after {
            After::DeletedLate => assert_eq!(side.delete(&queue, &handle).await, "ok"),
            _ => assert_eq!(side.receive(&queue, 1, LEASE_S).await.len(), 1),
        }
        let stats = side.stats(&queue).await;
        let observed = [
            stats.leases_expired,
            stats.released_early,
            stats.late_deletes,
        ];
        assert_eq!(observed, expected, "{} lease end {after:?}", side.name);
    }
}

async fn run_group_heads(side: &mut Side<'_>) {
    for (row, &(head, takes)) in GROUP_HEADS.iter().enumerate() {
        let queue = queue_name("grp", row, true);
        side.create(&queue, vec![]).await;
        for (body, group) in [("m1", "g"), ("m2", "g"), ("n1", "h")] {
            side.send(&queue, body, group).await;
        }
        let m1 = side.receive(&queue, 1, LEASE_S).await.remove(0);
        assert_eq!(m1.0, "m1");
        match head {
            Head::Leased => side.advance(1_000).await,
            Head::Released => assert_eq!(side.change(&queue, &m1.2, 0).await, "ok"),
            Head::RanOut => side.advance(31_000).await,
            Head::Deleted => assert_eq!(side.delete(&queue, &m1.2).await, "ok"),
        }
        let mut got: Vec<String> = side
            .receive(&queue, 10, LEASE_S)
            .await
            .into_iter()
            .map(|(body, _, _)| body)
            .collect();
        got.sort();
        assert_eq!(got, takes, "{} group head {head:?}", side.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_table_holds_on_the_engine_and_postgres_in_both_lease_modes() {
    for mode in [LeaseMode::Aws, LeaseMode::Strict] {
        let rig = Rig::new(mode).await;
        for mut side in rig.sides() {
            run_deletes(&rig, &mut side).await;
            run_changes(&rig, &mut side).await;
            if mode == LeaseMode::Aws {
                run_ceiling(&mut side).await;
                run_receives(&mut side).await;
                run_lease_ends(&mut side).await;
                run_group_heads(&mut side).await;
            }
        }
        rig.drop_all().await;
    }
}

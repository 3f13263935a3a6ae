//! The rulebook: every lease rule decided once, as pure functions over a message's lease, the
//! queue's handling of handles, the handle's receive number and the instant. The embedded
//! engine's queues and the PostgreSQL backend both call these; the SQL of the one selects,
//! locks and stores what they decide, and the few predicates SQL must evaluate itself (a claim
//! under `SKIP LOCKED`) are checked against these functions on generated inputs
//! (`crates/postgres/tests/rules_sql.rs`). `crates/postgres/tests/rulebook.rs` runs each
//! rule's table of cases against the rules themselves and against both backends.

use crate::error::EngineError;
use crate::settings::{QueueSettings, MAX_VISIBILITY_TIMEOUT_S};

/// How receipt handles behave once their lease is over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LeaseMode {
    /// As real AWS behaves on standard queues: any handle ever issued still deletes.
    #[default]
    Aws,
    /// The contract the seed module teaches: only the current, unexpired lease counts.
    Strict,
}

/// What the rules need to know of a stored message's lease, whichever backend keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageLease {
    /// Receives so far: the number of the newest lease (0: never received).
    pub receive_count: u32,
    /// When the newest lease began.
    pub started_ms: u64,
    /// Until when the message is not receivable (leased or delayed); at or before now, it is.
    pub hidden_until_ms: u64,
    /// Its newest lease was given back (a visibility change to 0), not left to run out.
    pub released: bool,
}

impl MessageLease {
    /// Whether a receive may take the message now.
    pub fn receivable(&self, now: u64) -> bool {
        self.hidden_until_ms <= now
    }

    /// Whether the handle of receive number `receive_no` holds the message's current, live
    /// lease: only that handle's commands are on time.
    pub fn is_live(&self, receive_no: u32, now: u64) -> bool {
        receive_no == self.receive_count && !self.receivable(now)
    }

    /// Whether the newest lease ran out by itself (no delete, no release): the message came
    /// back for another consumer, and the lease counts as expired.
    pub fn ran_out(&self, now: u64) -> bool {
        self.receive_count > 0 && self.receivable(now) && !self.released
    }
}

/// How a queue treats handles whose lease is over: by its kind and the server's lease mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handling {
    pub fifo: bool,
    pub mode: LeaseMode,
}

impl Handling {
    pub fn of(settings: &QueueSettings, mode: LeaseMode) -> Handling {
        Handling {
            fifo: settings.fifo,
            mode,
        }
    }

    /// Whether a delete by a handle whose lease is over still removes the message: on a
    /// standard queue in AWS mode any issued handle does; FIFO queues and strict mode want
    /// the current, live lease.
    pub fn late_delete_removes(self) -> bool {
        !self.fifo && self.mode == LeaseMode::Aws
    }
}

/// Why a command by receipt handle was refused; `error` names AWS's code for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A FIFO queue refuses a handle whose lease is over.
    Expired,
    /// Strict mode refuses to change the visibility of a message its handle no longer holds.
    NotInflight,
    /// The message is gone.
    NotAvailable,
    /// The lease so far plus the new timeout would pass the 12-hour ceiling.
    BeyondCeiling { timeout_s: u32 },
}

impl Refusal {
    pub fn error(self, handle: &str) -> EngineError {
        match self {
            Refusal::Expired => EngineError::ReceiptHandleExpired(handle.to_string()),
            Refusal::NotInflight => EngineError::MessageNotInflight(handle.to_string()),
            Refusal::NotAvailable => EngineError::MessageNotAvailable(handle.to_string()),
            Refusal::BeyondCeiling { timeout_s } => EngineError::out_of_range(
                "VisibilityTimeout",
                timeout_s,
                "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]",
            ),
        }
    }
}

/// What a delete by handle does to a message that is still stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deletion {
    /// The message leaves the queue (never when the delete is refused).
    pub removes: bool,
    /// The handle's lease was over: proof of duplicate work, counted and marked on the
    /// message (a later dead-lettering of it is the DLQ mirage).
    pub late: bool,
    /// The delete is refused (the message stays, marked late).
    pub refusal: Option<Refusal>,
}

/// What a delete by the handle of receive `receive_no` does to the message whose lease is
/// `lease`. (A delete of a message already gone succeeds and changes nothing, as on AWS.)
pub fn delete(handling: Handling, lease: &MessageLease, receive_no: u32, now: u64) -> Deletion {
    let late = !lease.is_live(receive_no, now);
    Deletion {
        removes: !late || handling.late_delete_removes(),
        late,
        refusal: (late && handling.fifo).then_some(Refusal::Expired),
    }
}

/// What kind of visibility change it was, for the lease measurements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// Ended or shortened a live lease (a backoff put-back), or made the message receivable
    /// at once: a release, not a heartbeat.
    Released,
    /// A heartbeat: a live lease made longer.
    Extended,
    /// A new timeout on a message the handle no longer holds (AWS mode allows it).
    Other,
}

/// What a visibility change does: the message is hidden until `until_ms` (receivable at
/// once when `released_now`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VisibilityChange {
    pub until_ms: u64,
    pub kind: ChangeKind,
    /// A timeout of 0: receivable now, ranked as released by this command.
    pub released_now: bool,
}

/// What ChangeMessageVisibility to `timeout_s` by the handle of receive `receive_no` does to
/// the message whose lease is `lease` (None: the message is gone). The lease so far counts
/// in whole seconds towards the 12-hour ceiling, as SQS counts it.
pub fn change_visibility(
    handling: Handling,
    lease: Option<&MessageLease>,
    receive_no: u32,
    now: u64,
    timeout_s: u32,
) -> Result<VisibilityChange, Refusal> {
    let lease = lease.ok_or(Refusal::NotAvailable)?;
    let live = lease.is_live(receive_no, now);
    if !live && handling.fifo {
        return Err(Refusal::Expired);
    }
    if !live && handling.mode == LeaseMode::Strict {
        return Err(Refusal::NotInflight);
    }
    let held_s = now.saturating_sub(lease.started_ms) / 1000;
    if held_s + u64::from(timeout_s) > u64::from(MAX_VISIBILITY_TIMEOUT_S) {
        return Err(Refusal::BeyondCeiling { timeout_s });
    }
    let until_ms = lease_end(now, timeout_s);
    let kind = if timeout_s == 0 || (live && until_ms < lease.hidden_until_ms) {
        ChangeKind::Released
    } else if live {
        ChangeKind::Extended
    } else {
        ChangeKind::Other
    };
    Ok(VisibilityChange {
        until_ms,
        kind,
        released_now: timeout_s == 0,
    })
}

/// When a lease of `visibility_s` seconds that starts at `now` ends.
pub fn lease_end(now: u64, visibility_s: u32) -> u64 {
    now + u64::from(visibility_s) * 1000
}

/// What a receive does with a receivable message it reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// Leased: its receive count becomes `receive_no`, its lease starts now, with no
    /// heartbeats yet; `first` when this is its first receive.
    Lease { receive_no: u32, first: bool },
    /// Exhausted: received maxReceiveCount times already, it goes to the dead-letter queue
    /// instead (and is never leased again here).
    DeadLetter,
}

/// Whether a message received `receive_count` times has used up its receives.
pub fn exhausted(receive_count: u32, max_receive_count: Option<u32>) -> bool {
    max_receive_count.is_some_and(|max| receive_count >= max)
}

/// What a receive does with a receivable message of `receive_count` receives so far, under a
/// redrive policy of `max_receive_count` (None: none, or its target is gone).
pub fn take(receive_count: u32, max_receive_count: Option<u32>) -> Take {
    if exhausted(receive_count, max_receive_count) {
        Take::DeadLetter
    } else {
        Take::Lease {
            receive_no: receive_count + 1,
            first: receive_count == 0,
        }
    }
}

/// After how many receives a queue's messages go to its dead-letter queue: its redrive
/// policy's maxReceiveCount, while the target exists (`target_fifo` is its kind) and is of the
/// queue's own kind. Otherwise none: a target that is gone turns dead-lettering off rather
/// than destroying messages.
pub fn dead_letter_after(
    max_receive_count: Option<u32>,
    source_fifo: bool,
    target_fifo: Option<bool>,
) -> Option<u32> {
    max_receive_count.filter(|_| target_fifo == Some(source_fifo))
}

/// The ceiling in SQL: a message can be received this many times at most when no redrive
/// policy applies (`exhausted` with None is never true).
pub const NO_MAX_RECEIVES: u32 = i32::MAX as u32;

/// The maxReceiveCount a SQL claim compares with: `exhausted`'s None as a number.
pub fn max_receives_for_sql(max_receive_count: Option<u32>) -> u32 {
    max_receive_count
        .unwrap_or(NO_MAX_RECEIVES)
        .min(NO_MAX_RECEIVES)
}

/// How a lease ended, for the honest-lease counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseEnd {
    /// Deleted while the handle's lease was live.
    OnTime,
    /// Deleted after the lease ran out or another receive took the message: duplicate work.
    Late,
    /// The message was already gone: another consumer's copy of the work finished first.
    Repeat,
}

impl LeaseEnd {
    /// What a delete counts as, by what the rules made of it (None: the message was gone).
    pub fn of(deletion: Option<&Deletion>) -> LeaseEnd {
        match deletion {
            None => LeaseEnd::Repeat,
            Some(d) if d.late => LeaseEnd::Late,
            Some(_) => LeaseEnd::OnTime,
        }
    }
}

/// A FIFO group's head (its oldest message) makes the group eligible for a receive when it
/// is receivable; a receive then takes the group's messages in order while each is.
pub fn group_eligible(head: &MessageLease, now: u64) -> bool {
    head.receivable(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AWS: Handling = Handling {
        fifo: false,
        mode: LeaseMode::Aws,
    };
    const STRICT: Handling = Handling {
        fifo: false,
        mode: LeaseMode::Strict,
    };
    const FIFO: Handling = Handling {
        fifo: true,
        mode: LeaseMode::Aws,
    };

    fn leased(receive_count: u32, until: u64) -> MessageLease {
        MessageLease {
            receive_count,
            started_ms: 0,
            hidden_until_ms: until,
            released: false,
        }
    }

    #[test]
    fn a_late_delete_removes_only_on_aws_standard_queues() {
        let expired = leased(1, 1_000);
        let removes = |h| delete(h, &expired, 1, 2_000).removes;
        assert!(removes(AWS));
        assert!(!removes(STRICT));
        assert!(!removes(FIFO));
        assert_eq!(
            delete(FIFO, &expired, 1, 2_000).refusal,
            Some(Refusal::Expired)
        );
    }

    #[test]
    fn a_handle_of_an_earlier_receive_is_late_even_while_the_message_is_leased() {
        let again = leased(2, 10_000);
        assert!(delete(AWS, &again, 1, 5_000).late);
        assert!(!delete(AWS, &again, 2, 5_000).late);
    }

    #[test]
    fn the_ceiling_counts_the_lease_so_far_in_whole_seconds() {
        let lease = leased(1, 50_000);
        let at = 43_000 * 1000 + 999;
        assert!(change_visibility(AWS, Some(&lease), 1, at, 200).is_ok());
        assert_eq!(
            change_visibility(AWS, Some(&lease), 1, at, 201),
            Err(Refusal::BeyondCeiling { timeout_s: 201 })
        );
    }

    #[test]
    fn shortening_a_live_lease_is_a_release_not_a_heartbeat() {
        let lease = leased(1, 30_000);
        let kind = |t| change_visibility(AWS, Some(&lease), 1, 1_000, t).map(|c| c.kind);
        assert_eq!(kind(10), Ok(ChangeKind::Released));
        assert_eq!(kind(60), Ok(ChangeKind::Extended));
        assert_eq!(kind(0), Ok(ChangeKind::Released));
    }

    #[test]
    fn exhaustion_takes_the_redrive_policy_and_sql_never_exhausts_without_one() {
        assert_eq!(take(3, Some(3)), Take::DeadLetter);
        assert_eq!(
            take(2, Some(3)),
            Take::Lease {
                receive_no: 3,
                first: false
            }
        );
        assert!(!exhausted(u32::MAX, None));
        assert_eq!(max_receives_for_sql(None), NO_MAX_RECEIVES);
    }
}

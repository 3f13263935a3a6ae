//! How a consumer ends or moves a lease: DeleteMessage and ChangeMessageVisibility, as the
//! rulebook decides them, with their measurements.

use super::{DeleteOutcome, Queue, State, StoredMessage};
use crate::error::Result;
use crate::lease_stats::DeleteSeen;
use crate::receipt::Receipt;
use crate::rules::{self, ChangeKind, Handling, LeaseMode};

impl Queue {
    /// A message whose body the store lost (a damaged data file): removed if the receive
    /// `receipt` names is still its latest, whatever its lease, counting nothing (it was never
    /// delivered). Answers whether it was removed.
    pub fn forget_lost(&mut self, receipt: &Receipt) -> bool {
        let latest = self
            .messages
            .get(&receipt.key)
            .is_some_and(|m| m.receive_count == receipt.receive_no);
        if latest {
            self.remove(receipt.key);
        }
        latest
    }

    pub fn delete(
        &mut self,
        now: u64,
        receipt: &Receipt,
        handle: &str,
        mode: LeaseMode,
    ) -> Result<DeleteOutcome> {
        let handling = Handling::of(&self.meta.settings, mode);
        let seen = self.messages.get(&receipt.key).map(|m| DeleteSeen {
            deletion: rules::delete(handling, &m.lease(), receipt.receive_no, now),
            receive_count: m.receive_count,
            extensions: m.extensions,
        });
        self.metrics
            .count_delete(&mut self.meta.stats, now, receipt, seen);
        let Some(DeleteSeen { deletion, .. }) = seen else {
            // Deleting twice, or after retention dropped it, succeeds as on AWS.
            return Ok(DeleteOutcome {
                removed: false,
                late: false,
            });
        };
        if deletion.late {
            // Marked for the DLQ mirage; an on-time delete skips the second lookup.
            if let Some(message) = self.messages.get_mut(&receipt.key) {
                message.late_deleted = true;
            }
        }
        if let Some(refusal) = deletion.refusal {
            self.mark(receipt.key);
            return Err(refusal.error(handle));
        }
        if deletion.removes {
            self.remove(receipt.key);
        } else {
            self.mark(receipt.key);
        }
        Ok(DeleteOutcome {
            removed: deletion.removes,
            late: deletion.late,
        })
    }

    pub fn change_visibility(
        &mut self,
        now: u64,
        receipt: &Receipt,
        handle: &str,
        timeout_s: u32,
        mode: LeaseMode,
    ) -> Result<()> {
        let handling = Handling::of(&self.meta.settings, mode);
        let lease = self.messages.get(&receipt.key).map(StoredMessage::lease);
        let change =
            rules::change_visibility(handling, lease.as_ref(), receipt.receive_no, now, timeout_s)
                .map_err(|refusal| refusal.error(handle))?;
        match change.kind {
            ChangeKind::Released => self.meta.stats.released_early += 1,
            ChangeKind::Extended => {
                self.meta.stats.extensions += 1;
                if let Some(m) = self.messages.get_mut(&receipt.key) {
                    m.extensions = m.extensions.saturating_add(1);
                }
            }
            ChangeKind::Other => {}
        }
        if change.released_now {
            self.set_state(receipt.key, State::Ready, 0);
        } else {
            self.set_state(receipt.key, State::InFlight, change.until_ms);
        }
        self.mark(receipt.key);
        Ok(())
    }
}

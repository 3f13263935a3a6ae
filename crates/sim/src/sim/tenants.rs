//! Tenants of the simulated queue (`Scenario::tenants`): each sends at its own rate for its
//! own stretch of the run, its messages carrying its name as MessageGroupId when the queue is
//! fair (so the real engine hands quiet tenants' messages out first), and each tenant's dwell
//! time (send to first receive) is kept apart.

use rand_distr::{Distribution, Exp};

use super::{ms, Ev, Simulation};
use crate::scenario::OTHERS;
use crate::SimError;

impl Simulation<'_> {
    /// Each tenant's first arrival, at its `from_s`.
    pub(super) fn schedule_tenants(&mut self, start: u64) {
        for (i, tenant) in self.sc.tenants.iter().enumerate() {
            if tenant.rate_per_s > 0.0 {
                self.at(start + ms(tenant.from_s), Ev::TenantArrival(i));
            }
        }
    }

    /// Tenant `i` sends, and draws its next send, until its `to_s`.
    pub(super) fn tenant_arrival(&mut self, i: usize) -> Result<(), SimError> {
        let tenant = &self.sc.tenants[i];
        let until = tenant.to_s.unwrap_or(f64::INFINITY);
        if self.elapsed_s() >= until {
            return Ok(());
        }
        let rate = tenant.rate_per_s;
        self.send_as(false, Some(i))?;
        if let Ok(gap) = Exp::new(rate) {
            let next = self.now + ms(gap.sample(&mut self.rng)).max(1);
            self.at(next, Ev::TenantArrival(i));
        }
        Ok(())
    }

    /// The MessageGroupId a tenant's messages carry: none on a queue that is not fair.
    pub(super) fn group_of(&self, tenant: Option<usize>) -> Option<String> {
        let tenant = &self.sc.tenants[tenant?];
        self.sc.queue.fair.then(|| tenant.name.clone())
    }

    /// How much longer than the usual a message's work takes: its tenant's `work_scale`.
    pub(super) fn work_scale(&self, msg: u64) -> f64 {
        let tenant = self.msgs.get(&msg).and_then(|m| m.tenant);
        tenant.map_or(1.0, |i| self.sc.tenants[i].work_scale)
    }

    /// At a message's first receive: its dwell time, under its tenant's name.
    pub(super) fn note_dwell(&mut self, msg: u64) {
        let Some(state) = self.msgs.get(&msg) else {
            return;
        };
        if state.first_receive_ms.is_some() {
            return;
        }
        let name = state
            .tenant
            .map_or(OTHERS, |i| self.sc.tenants[i].name.as_str());
        let dwell = self.now.saturating_sub(state.sent_ms);
        self.tally
            .dwell_ms
            .entry(name.to_string())
            .or_default()
            .push(dwell);
    }
}

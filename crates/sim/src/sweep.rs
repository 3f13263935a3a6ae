//! The sweep: a scenario run over a grid of lease lengths and loads, to map where the system
//! stays in the spiral after the trigger is gone.

use std::path::Path;

use serde::Serialize;

use crate::scenario::Scenario;
use crate::{run, SimError};

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SweepCell {
    pub lease_s: f64,
    /// Arrival rate as a share of the fleet's unloaded capacity.
    pub load: f64,
    pub recovered: bool,
    pub recovery_s: Option<f64>,
    pub peak_amplification: f64,
}

/// Runs `base` for each lease and load. The base scenario's fleet capacity is workers / mean
/// unloaded work time; `load` scales the arrival rate against it.
pub fn sweep(
    base: &Scenario,
    leases: &[f64],
    loads: &[f64],
    dir: &Path,
    progress: &mut dyn FnMut(f64),
) -> Result<Vec<SweepCell>, SimError> {
    let mean_work = match base.work.kind.as_str() {
        "lognormal" => base.work.median_s * (base.work.sigma * base.work.sigma / 2.0).exp(),
        "quantiles" => base.work.p50_s.max(0.001),
        _ => base.work.mean_s.max(0.001),
    };
    let capacity = base.scaling.workers as f64 / mean_work;
    let total = (leases.len() * loads.len()).max(1) as f64;
    let mut cells = Vec::new();
    for lease in leases {
        for load in loads {
            let mut s = base.clone();
            s.queue.visibility_timeout_s = lease.round().clamp(1.0, 43_200.0) as u32;
            s.arrivals.rate_per_s = capacity * load;
            let outcome = run(&s, &mut |_| {})?;
            cells.push(SweepCell {
                lease_s: *lease,
                load: *load,
                recovered: outcome.summary.recovered.unwrap_or(false),
                recovery_s: outcome.summary.recovery_s,
                peak_amplification: outcome.summary.peak_amplification,
            });
            progress(cells.len() as f64 / total);
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| SimError::Output(e.to_string()))?;
    let json = serde_json::to_string_pretty(&cells).map_err(|e| SimError::Output(e.to_string()))?;
    std::fs::write(dir.join("sweep.json"), json).map_err(|e| SimError::Output(e.to_string()))?;
    crate::plot::draw_sweep(
        &format!("{}: where the spiral outlives the trigger (red)", base.name),
        &cells,
        dir,
    )?;
    Ok(cells)
}

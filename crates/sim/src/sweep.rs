//! The sweeps: a scenario run over a grid of lease lengths and loads, or of trigger sizes and
//! durations, to map where the system stays in the spiral after the trigger is gone (the
//! boundary of metastability, as Huang et al., OSDI 2022, draw it).

use std::path::Path;

use serde::Serialize;

use crate::scenario::Scenario;
use crate::{run, SimError, Summary};

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
    let capacity = base.scaling.workers as f64 / base.work.mean_s();
    let cells = grid(
        base,
        leases,
        loads,
        progress,
        |s, lease, load| {
            s.queue.visibility_timeout_s = lease.round().clamp(1.0, 43_200.0) as u32;
            s.arrivals.rate_per_s = capacity * load;
        },
        |lease, load, summary| SweepCell {
            lease_s: lease,
            load,
            recovered: summary.recovered.unwrap_or(false),
            recovery_s: summary.recovery_s,
            peak_amplification: summary.peak_amplification,
        },
    )?;
    write_json(dir, "sweep.json", &cells)?;
    crate::plot::draw_sweep(
        &format!("{}: where the spiral outlives the trigger (red)", base.name),
        &cells,
        dir,
    )?;
    Ok(cells)
}

/// Runs `base` once for each (x, y) of the grid, changed by `vary`, and makes a cell of each
/// run's summary with `cell`, in the order x then y.
fn grid<C>(
    base: &Scenario,
    xs: &[f64],
    ys: &[f64],
    progress: &mut dyn FnMut(f64),
    vary: impl Fn(&mut Scenario, f64, f64),
    cell: impl Fn(f64, f64, &Summary) -> C,
) -> Result<Vec<C>, SimError> {
    let total = (xs.len() * ys.len()).max(1) as f64;
    let mut cells = Vec::new();
    for x in xs {
        for y in ys {
            let mut s = base.clone();
            vary(&mut s, *x, *y);
            let outcome = run(&s, &mut |_| {})?;
            cells.push(cell(*x, *y, &outcome.summary));
            progress(cells.len() as f64 / total);
        }
    }
    Ok(cells)
}

fn write_json(dir: &Path, file: &str, value: &impl Serialize) -> Result<(), SimError> {
    let out = |e: &dyn std::fmt::Display| SimError::Output(e.to_string());
    std::fs::create_dir_all(dir).map_err(|e| out(&e))?;
    let json = serde_json::to_string_pretty(value).map_err(|e| out(&e))?;
    std::fs::write(dir.join(file), json).map_err(|e| out(&e))
}

/// One run of the trigger sweep.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TriggerCell {
    /// How many times longer work took during the blip.
    pub factor: f64,
    pub duration_s: f64,
    pub recovered: bool,
    pub recovery_s: Option<f64>,
    pub peak_amplification: f64,
}

/// Runs `base` with its first blip set to each factor and duration: the map of which
/// triggers the system shakes off and which tip it into a spiral that outlives them
/// (`trigger-sweep.json`, `trigger-sweep.svg`, `trigger-sweep.png`).
pub fn sweep_triggers(
    base: &Scenario,
    factors: &[f64],
    durations: &[f64],
    dir: &Path,
    progress: &mut dyn FnMut(f64),
) -> Result<Vec<TriggerCell>, SimError> {
    let Some(blip) = base.triggers.iter().position(|t| t.kind == "blip") else {
        return Err(SimError::Scenario(
            "the trigger sweep varies a blip: the scenario has none".into(),
        ));
    };
    let cells = grid(
        base,
        factors,
        durations,
        progress,
        |s, factor, duration| {
            let trigger = &mut s.triggers[blip];
            trigger.factor = factor;
            trigger.end_s = trigger.start_s + duration;
        },
        |factor, duration_s, summary| TriggerCell {
            factor,
            duration_s,
            recovered: summary.recovered.unwrap_or(false),
            recovery_s: summary.recovery_s,
            peak_amplification: summary.peak_amplification,
        },
    )?;
    write_json(dir, "trigger-sweep.json", &cells)?;
    let axes = crate::plot::MapAxes {
        x_desc: "blip: work takes this many times longer",
        xs: factors,
        x_digits: 2,
        y_desc: "blip duration (s)",
        ys: durations,
        y_digits: 0,
    };
    let map: Vec<crate::plot::MapCell> = cells
        .iter()
        .map(|c| (c.factor, c.duration_s, c.recovered))
        .collect();
    crate::plot::draw_map(
        &format!(
            "{}: blips that tip it into a spiral that outlives them (red)",
            base.name
        ),
        &axes,
        &map,
        dir,
        "trigger-sweep",
    )?;
    Ok(cells)
}

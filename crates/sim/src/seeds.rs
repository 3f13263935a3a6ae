//! One scenario over many seeds: what holds across them, not what one seed happened to do
//! (`leasehold simulate --seeds N`).

use std::path::Path;

use serde::Serialize;

use crate::scenario::Scenario;
use crate::{run, write_outputs, SimError, Summary};

/// The least, the median and the most of one measure over the seeds that have it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Spread {
    /// How many seeds had the measure (a recovery time only the seeds that recovered).
    pub seeds: usize,
    pub min: Option<f64>,
    pub median: Option<f64>,
    pub max: Option<f64>,
}

impl Spread {
    pub fn of(values: impl IntoIterator<Item = f64>) -> Spread {
        let mut sorted: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        let median = match sorted.len() {
            0 => None,
            n if n % 2 == 1 => Some(sorted[n / 2]),
            n => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
        };
        Spread {
            seeds: sorted.len(),
            min: sorted.first().copied(),
            median,
            max: sorted.last().copied(),
        }
    }
}

/// What a scenario did over seeds 1..=N.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SeedsSummary {
    pub scenario: String,
    pub seeds: Vec<u64>,
    pub simulated_s: f64,
    pub had_trigger: bool,
    /// The share of seeds that recovered from the trigger; null without a trigger.
    pub recovered_share: Option<f64>,
    /// The seeds that recovered.
    pub recovered_seeds: Vec<u64>,
    /// Without a trigger, the share of seeds whose second half ran healthy; null with one.
    pub stable_share: Option<f64>,
    /// The seeds' "Nx the load" on the database (`Summary::peak_load_multiple`).
    pub peak_load_multiple: Spread,
    /// Seconds from the end of the trigger to recovery, over the seeds that recovered.
    pub recovery_s: Spread,
    /// Executions per distinct message at its peak (`Summary::peak_amplification`).
    pub peak_amplification: Spread,
    pub duplicate_fraction: Spread,
    /// Each seed's own summary, in seed order.
    pub runs: Vec<Summary>,
}

/// Runs seeds 1..=`count` of `scenario`, each written in `dir/seed-N/`, and writes the
/// summary over them as `dir/summary.json`.
pub fn run_seeds(
    scenario: &Scenario,
    count: u64,
    dir: &Path,
    progress: &mut dyn FnMut(f64),
) -> Result<SeedsSummary, SimError> {
    let mut runs = Vec::new();
    for seed in 1..=count {
        let mut one = scenario.clone();
        one.seed = seed;
        let done = (seed - 1) as f64;
        let outcome = run(&one, &mut |f| progress((done + f) / count as f64))?;
        write_outputs(&one, &outcome, &dir.join(format!("seed-{seed}")))?;
        runs.push(outcome.summary);
    }
    let summary = over_seeds(scenario, runs);
    let out = |e: &dyn std::fmt::Display| SimError::Output(e.to_string());
    std::fs::create_dir_all(dir).map_err(|e| out(&e))?;
    let json = serde_json::to_string_pretty(&summary).map_err(|e| out(&e))?;
    std::fs::write(dir.join("summary.json"), json + "\n").map_err(|e| out(&e))?;
    Ok(summary)
}

/// The summary over the runs of one scenario with different seeds.
pub fn over_seeds(scenario: &Scenario, runs: Vec<Summary>) -> SeedsSummary {
    let n = runs.len().max(1) as f64;
    let had_trigger = scenario.triggers_end_s().is_some();
    let recovered_seeds: Vec<u64> = runs
        .iter()
        .filter(|r| r.recovered == Some(true))
        .map(|r| r.seed)
        .collect();
    let stable = runs.iter().filter(|r| r.stable == Some(true)).count();
    SeedsSummary {
        scenario: scenario.name.clone(),
        seeds: runs.iter().map(|r| r.seed).collect(),
        simulated_s: scenario.duration_s,
        had_trigger,
        recovered_share: had_trigger.then(|| recovered_seeds.len() as f64 / n),
        recovered_seeds,
        stable_share: (!had_trigger).then(|| stable as f64 / n),
        peak_load_multiple: Spread::of(runs.iter().filter_map(|r| r.peak_load_multiple)),
        recovery_s: Spread::of(runs.iter().filter_map(|r| r.recovery_s)),
        peak_amplification: Spread::of(runs.iter().map(|r| r.peak_amplification)),
        duplicate_fraction: Spread::of(runs.iter().map(|r| r.duplicate_fraction)),
        runs,
    }
}

/// The one line that says what held across the seeds.
pub fn seeds_line(s: &SeedsSummary) -> String {
    let range = |spread: &Spread, unit: &str| match (spread.min, spread.median, spread.max) {
        (Some(min), Some(median), Some(max)) => {
            format!("{min:.2}{unit} to {max:.2}{unit} (median {median:.2}{unit})")
        }
        _ => "none".into(),
    };
    let outcome = match (s.recovered_share, s.stable_share) {
        (Some(share), _) => format!(
            "recovered in {} of {} seeds ({:.0}%), recovery {}",
            s.recovered_seeds.len(),
            s.seeds.len(),
            share * 100.0,
            range(&s.recovery_s, " s")
        ),
        (None, Some(share)) => {
            format!("stable in {:.0}% of {} seeds", share * 100.0, s.seeds.len())
        }
        (None, None) => String::new(),
    };
    format!(
        "{}: peak load on the database {} the arrivals; {outcome}",
        s.scenario,
        range(&s.peak_load_multiple, "x")
    )
}

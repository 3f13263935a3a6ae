//! `leasehold simulate`: run a death-spiral scenario, or sweep it over leases and loads.

use std::path::PathBuf;

use anyhow::Context;
use leasehold_sim::{run, run_seeds, seeds_line, sweep, sweep_triggers, write_outputs, Scenario};

#[derive(clap::Args)]
pub struct SimulateArgs {
    /// The scenario file (TOML; see scenarios/).
    scenario: PathBuf,
    /// Where to write summary.json, timeseries.csv/json and the plots.
    #[arg(long)]
    out: PathBuf,
    /// Override the scenario's seed.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run seeds 1..=N and write what held across them (summary.json: recovered_share, the
    /// spread of the peak load multiple and of recovery times), each seed's outputs in
    /// seed-K/.
    #[arg(long, conflicts_with_all = ["sweep", "sweep_triggers"], value_parser = clap::value_parser!(u64).range(1..=1000))]
    seeds: Option<u64>,
    /// Run the scenario over a grid of visibility timeouts and loads and map where it stays
    /// in the spiral after the trigger (sweep.json, sweep.svg, sweep.png).
    #[arg(long)]
    sweep: bool,
    /// Visibility timeouts for --sweep, in seconds.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "15,20,25,30,40,50,60,90,120"
    )]
    leases: Vec<f64>,
    /// Loads for --sweep, as shares of the fleet's unloaded capacity.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0.3,0.4,0.5,0.6,0.7,0.8,0.9"
    )]
    loads: Vec<f64>,
    /// Run the scenario over a grid of blip sizes and durations and map which blips tip it
    /// into a spiral that outlives them (trigger-sweep.json, .svg, .png).
    #[arg(long, conflicts_with = "sweep")]
    sweep_triggers: bool,
    /// Blip sizes for --sweep-triggers: how many times longer work takes.
    #[arg(long, value_delimiter = ',', default_value = "1.2,1.5,1.8,2.1,2.5,3")]
    factors: Vec<f64>,
    /// Blip durations for --sweep-triggers, in seconds.
    #[arg(long, value_delimiter = ',', default_value = "30,60,120,300,600")]
    durations: Vec<f64>,
    /// Whether tenants' messages carry their tenant as MessageGroupId, so the queue is fair
    /// (quiet tenants first while one is noisy): overrides the scenario's `queue.fair`;
    /// `--fair false` sends the same traffic, oldest first.
    #[arg(long)]
    fair: Option<bool>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

pub fn simulate(args: SimulateArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.scenario)
        .with_context(|| format!("cannot read {}", args.scenario.display()))?;
    let mut scenario = Scenario::from_toml(&text)?;
    if let Some(fair) = args.fair {
        scenario.queue.fair = fair;
    }
    if let Some(seed) = args.seed {
        scenario.seed = seed;
    }
    let bar = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(1000)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {percent}% ({elapsed})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(scenario.name.clone());
    let mut progress = |fraction: f64| bar.set_position((fraction * 1000.0) as u64);
    if args.sweep_triggers {
        let cells = sweep_triggers(
            &scenario,
            &args.factors,
            &args.durations,
            &args.out,
            &mut progress,
        )?;
        bar.finish_and_clear();
        let tipped = cells.iter().filter(|c| !c.recovered).count();
        println!(
            "{}: {} of {} blips (size, duration) left a spiral that outlived them; map in {}",
            scenario.name,
            tipped,
            cells.len(),
            args.out.join("trigger-sweep.png").display()
        );
        return Ok(());
    }
    if args.sweep {
        let cells = sweep(
            &scenario,
            &args.leases,
            &args.loads,
            &args.out,
            &mut progress,
        )?;
        bar.finish_and_clear();
        let metastable = cells.iter().filter(|c| !c.recovered).count();
        println!(
            "{}: {} of {} (lease, load) pairs stayed in the spiral after the trigger; map in {}",
            scenario.name,
            metastable,
            cells.len(),
            args.out.join("sweep.png").display()
        );
        return Ok(());
    }
    if let Some(count) = args.seeds {
        let summary = run_seeds(&scenario, count, &args.out, &mut progress)?;
        bar.finish_and_clear();
        println!("{}", seeds_line(&summary));
        println!("outputs in {}", args.out.display());
        return Ok(());
    }
    let outcome = run(&scenario, &mut progress)?;
    bar.finish_and_clear();
    write_outputs(&scenario, &outcome, &args.out)?;
    let s = &outcome.summary;
    println!(
        "{}: {} messages, {} executions ({} duplicates), peak load on the database {} the arrivals ({:.0} s), at most {:.2} executions per message ({:.0} s), {}; DLQ {} ({} already succeeded); {:.1} s of wall clock for {:.0} s simulated",
        s.scenario,
        s.unique_messages,
        s.executions,
        s.duplicate_executions,
        s.peak_load_multiple
            .map_or("none".to_string(), |m| format!("{m:.2}x")),
        scenario.load_window_s,
        s.peak_amplification,
        scenario.amplification_window_s,
        leasehold_sim::outcome_line(s),
        s.dlq_messages,
        s.dlq_messages_already_succeeded,
        s.wall_clock_s,
        s.simulated_s
    );
    if !s.tenants.is_empty() {
        println!("{}", leasehold_sim::dwell_line(&s.tenants));
    }
    println!("outputs in {}", args.out.display());
    Ok(())
}

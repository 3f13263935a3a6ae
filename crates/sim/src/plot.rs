//! Plots a person can read at a glance: amplification, queue depth and database latency over
//! time, with the trouble shaded and named, the DLQ and the fleet where they matter, legends
//! in headroom above the data, and the definition of recovery on the page; and the sweep's
//! map of where the system is metastable, labelled at its cells' centres.

use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::scenario::Scenario;
use crate::sweep::SweepCell;
use crate::{Outcome, SimError};

fn err(e: impl std::fmt::Display) -> SimError {
    SimError::Output(format!("plot: {e}"))
}

/// One line of a panel: its name, its colour, and its value in a row.
type Line = (&'static str, RGBColor, Box<dyn Fn(&crate::Row) -> f64>);

fn render<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    scenario: &Scenario,
    outcome: &Outcome,
) -> Result<(), SimError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let s = &outcome.summary;
    let title = format!(
        "{}: peak load {} the arrivals ({:.0} s), {:.1} executions per message, {}",
        scenario.name,
        s.peak_load_multiple
            .map_or("none".to_string(), |m| format!("{m:.1}x")),
        scenario.load_window_s,
        s.peak_amplification,
        crate::report::outcome_line(s)
    );
    let root = root.titled(&title, ("sans-serif", 22)).map_err(err)?;
    let (root, footer) = root.split_vertically(root.dim_in_pixel().1 - 24);
    footer
        .draw(&Text::new(
            recovery_definition(scenario).as_str(),
            (8, 4),
            ("sans-serif", 12).into_font().color(&BLACK),
        ))
        .map_err(err)?;
    let panels = root.split_evenly((3, 1));
    let rows = &outcome.rows;
    let t_max = rows.last().map_or(1.0, |r| r.t_s).max(1.0);

    let mut messages: Vec<Line> = vec![
        ("visible", BLUE, Box::new(|r| r.visible as f64)),
        ("in flight", GREEN, Box::new(|r| r.in_flight as f64)),
        (
            "running on the database",
            MAGENTA,
            Box::new(|r| r.db_running as f64),
        ),
    ];
    if scenario.queue.max_receive_count > 0 {
        messages.push((
            "in the DLQ",
            RGBColor(120, 60, 0),
            Box::new(|r| r.dlq_messages as f64),
        ));
    }
    if scenario.scaling.kind != "fixed" {
        messages.push(("workers", CYAN, Box::new(|r| f64::from(r.workers))));
    }
    if !scenario.arrivals.rate_changes.is_empty() {
        // The load stepped down after the trigger: where the spiral ends shows hysteresis.
        messages.push((
            "arrivals per step",
            RGBColor(90, 90, 90),
            Box::new(|r| r.arrivals as f64),
        ));
    }
    let series: [(&str, Vec<Line>); 3] = [
        (
            "executions per distinct message",
            vec![(
                "executions per distinct message (amplification window)",
                RED,
                Box::new(|r| r.amplification),
            )],
        ),
        ("messages", messages),
        (
            "processing time (s)",
            vec![("mean processing time", BLACK, Box::new(|r| r.db_latency_s))],
        ),
    ];
    for ((label, lines), panel) in series.iter().zip(panels.iter()) {
        // Headroom above the data, where the legend sits without covering a line.
        let y_max = lines.iter().flat_map(|(_, _, f)| rows.iter().map(f)).fold(
            if *label == "processing time (s)" {
                scenario.queue.visibility_timeout_s as f64
            } else {
                1.0
            },
            f64::max,
        ) * 1.45;
        let integral = *label == "messages";
        let mut chart = ChartBuilder::on(panel)
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..t_max, 0.0..y_max)
            .map_err(err)?;
        let whole = |v: &f64| {
            if v.fract() == 0.0 {
                format!("{v:.0}")
            } else {
                String::new()
            }
        };
        let decimal = |v: &f64| format!("{v:.1}");
        chart
            .configure_mesh()
            .x_desc("simulated time (s)")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_desc(*label)
            .y_label_formatter(if integral { &whole } else { &decimal })
            .draw()
            .map_err(err)?;
        shade_triggers(&mut chart, scenario, y_max)?;
        if *label == "processing time (s)" {
            let lease = scenario.queue.visibility_timeout_s as f64;
            chart
                .draw_series(LineSeries::new(
                    [(0.0, lease), (t_max, lease)],
                    RED.stroke_width(1),
                ))
                .map_err(err)?
                .label("lease")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RED));
        }
        // A step in which nothing started has no processing time: leave a gap, not a zero.
        let latency_panel = *label == "processing time (s)";
        for (name, color, f) in lines {
            let points = rows
                .iter()
                .filter(|r| !latency_panel || r.executions > 0)
                .map(|r| (r.t_s, f(r)));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(err)?
                .label(*name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], *color));
        }
        draw_legend(&mut chart)?;
    }
    root.present().map_err(err)
}

/// A time-series chart: seconds across, values up.
type TimeChart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Shades each trigger's span across the chart, its name at the top.
fn shade_triggers<'a, DB: DrawingBackend + 'a>(
    chart: &mut TimeChart<'a, DB>,
    scenario: &Scenario,
    y_max: f64,
) -> Result<(), SimError>
where
    DB::ErrorType: 'static,
{
    for (a, b, name) in trigger_spans(scenario) {
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(a, 0.0), (b, y_max)],
                RGBColor(255, 220, 180).filled(),
            )))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                name,
                (a, y_max * 0.97),
                ("sans-serif", 13).into_font().color(&RGBColor(150, 80, 0)),
            )))
            .map_err(err)?;
    }
    Ok(())
}

/// The legend, top right, in the headroom left above the data.
fn draw_legend<'a, DB: DrawingBackend + 'a>(chart: &mut TimeChart<'a, DB>) -> Result<(), SimError>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

/// Each trigger's span and its label, for the shaded bands.
fn trigger_spans(scenario: &Scenario) -> Vec<(f64, f64, &'static str)> {
    scenario
        .triggers
        .iter()
        .map(|t| match t.kind.as_str() {
            "blip" => (t.start_s, t.end_s, "trigger: blip"),
            "lock" => (t.start_s, t.end_s, "trigger: table lock"),
            "deploy" => (
                t.start_s,
                t.start_s + t.interval_s * scenario.scaling.workers as f64,
                "trigger: deploy",
            ),
            "crash" => (t.start_s, t.start_s + scenario.step_s, "trigger: crash"),
            _ => (t.start_s, t.start_s + scenario.step_s, "trigger: poison"),
        })
        .collect()
}

/// One panel of the comparison: its axis label and its lines (name, colour, dashed, points).
type ComparePanel = (&'static str, Vec<(String, RGBColor, bool, Vec<(f64, f64)>)>);

fn render_comparison<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    scenario: &Scenario,
    title: &str,
    panels: &[ComparePanel],
) -> Result<(), SimError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(err)?;
    let areas = root.split_evenly((panels.len(), 1));
    let t_max = scenario.duration_s.max(1.0);
    for ((label, lines), area) in panels.iter().zip(areas.iter()) {
        let y_max = lines
            .iter()
            .flat_map(|l| l.3.iter().map(|p| p.1))
            .fold(1.0, f64::max)
            * 1.45;
        let mut chart = ChartBuilder::on(area)
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..t_max, 0.0..y_max)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_desc(*label)
            .y_label_formatter(&|v| format!("{v:.1}"))
            .draw()
            .map_err(err)?;
        shade_triggers(&mut chart, scenario, y_max)?;
        for (name, color, dashed, points) in lines {
            let style = color.stroke_width(if *dashed { 1 } else { 2 });
            let anno = if *dashed {
                chart
                    .draw_series(DashedLineSeries::new(points.iter().copied(), 6, 4, style))
                    .map_err(err)?
            } else {
                chart
                    .draw_series(LineSeries::new(points.iter().copied(), style))
                    .map_err(err)?
            };
            let color = *color;
            anno.label(name.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
        }
        draw_legend(&mut chart)?;
    }
    root.present().map_err(err)
}

/// `leasehold lab`'s picture: what the real system did (solid) beside what the simulator
/// predicted for the same scenario (dashed), over time, in comparison.svg and .png.
pub fn draw_comparison(
    scenario: &Scenario,
    title: &str,
    measured: &[crate::Row],
    predicted: &[crate::Row],
    dir: &Path,
) -> Result<(), SimError> {
    let pair = |f: fn(&crate::Row) -> f64, what: &str, color: RGBColor| {
        let points = |rows: &[crate::Row]| rows.iter().map(|r| (r.t_s, f(r))).collect();
        vec![
            (format!("{what}, measured"), color, false, points(measured)),
            (format!("{what}, predicted"), color, true, points(predicted)),
        ]
    };
    let mut messages = pair(|r| r.visible as f64, "visible", BLUE);
    messages.extend(pair(|r| r.in_flight as f64, "in flight", GREEN));
    if scenario.queue.max_receive_count > 0 {
        messages.extend(pair(
            |r| r.dlq_messages as f64,
            "in the DLQ",
            RGBColor(120, 60, 0),
        ));
    }
    let panels: Vec<ComparePanel> = vec![
        (
            "executions per message",
            pair(|r| r.amplification, "amplification", RED),
        ),
        ("messages", messages),
        (
            "on the database",
            pair(|r| f64::from(r.db_running), "running", MAGENTA),
        ),
    ];
    let svg = dir.join("comparison.svg");
    render_comparison(
        SVGBackend::new(&svg, (1200, 1000)).into_drawing_area(),
        scenario,
        title,
        &panels,
    )?;
    let png = dir.join("comparison.png");
    render_comparison(
        BitMapBackend::new(&png, (1200, 1000)).into_drawing_area(),
        scenario,
        title,
        &panels,
    )
}

/// What "recovered" means, written under the plots.
fn recovery_definition(scenario: &Scenario) -> String {
    let hold = scenario.recovery_hold_s;
    format!(
        "Recovered: after the last trigger, {} on end (or the rest of the run, if {} or more) with no duplicate execution, no late delete and a backlog at most twice its pre-trigger peak. Without a trigger: stable if the second half has neither.",
        span(hold),
        span(0.4 * hold)
    )
}

/// 300 s as "5 min", 20 s as "20 s".
fn span(s: f64) -> String {
    if s >= 60.0 && (s / 60.0).fract() == 0.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{s:.0} s")
    }
}

pub fn draw(scenario: &Scenario, outcome: &Outcome, dir: &Path) -> Result<(), SimError> {
    let svg = dir.join("plot.svg");
    render(
        SVGBackend::new(&svg, (1200, 1000)).into_drawing_area(),
        scenario,
        outcome,
    )?;
    let png = dir.join("plot.png");
    render(
        BitMapBackend::new(&png, (1200, 1000)).into_drawing_area(),
        scenario,
        outcome,
    )
}

/// A map's axes: each axis's values (one cell each), its name and its decimals.
pub struct MapAxes<'a> {
    pub x_desc: &'a str,
    pub xs: &'a [f64],
    pub x_digits: usize,
    pub y_desc: &'a str,
    pub ys: &'a [f64],
    pub y_digits: usize,
}

/// One cell of a map: its x and y values, and whether the system recovered there.
pub type MapCell = (f64, f64, bool);

fn render_map<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    axes: &MapAxes<'_>,
    cells: &[MapCell],
) -> Result<(), SimError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    // Segmented axes: each value is a cell, labelled at its centre.
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        // A segmented range holds its end too: n values are 0..n-1.
        .build_cartesian_2d(
            (0..axes.xs.len().saturating_sub(1)).into_segmented(),
            (0..axes.ys.len().saturating_sub(1)).into_segmented(),
        )
        .map_err(err)?;
    let centre = |value: &SegmentValue<usize>, values: &[f64], digits: usize| match value {
        SegmentValue::CenterOf(i) => values
            .get(*i)
            .map_or(String::new(), |v| format!("{v:.digits$}")),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .x_labels(axes.xs.len())
        .y_labels(axes.ys.len())
        .x_label_formatter(&|v| centre(v, axes.xs, axes.x_digits))
        .y_label_formatter(&|v| centre(v, axes.ys, axes.y_digits))
        .draw()
        .map_err(err)?;
    for (x_value, y_value, recovered) in cells {
        let x = axes.xs.iter().position(|v| v == x_value).unwrap_or(0);
        let y = axes.ys.iter().position(|v| v == y_value).unwrap_or(0);
        let color = if *recovered {
            RGBColor(120, 200, 120)
        } else {
            RGBColor(220, 80, 80)
        };
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [
                    (SegmentValue::Exact(x), SegmentValue::Exact(y)),
                    (SegmentValue::Exact(x + 1), SegmentValue::Exact(y + 1)),
                ],
                color.filled(),
            )))
            .map_err(err)?;
    }
    root.present().map_err(err)
}

/// A map as `STEM.svg` and `STEM.png` in `dir`.
pub fn draw_map(
    title: &str,
    axes: &MapAxes<'_>,
    cells: &[MapCell],
    dir: &Path,
    stem: &str,
) -> Result<(), SimError> {
    let svg = dir.join(format!("{stem}.svg"));
    render_map(
        SVGBackend::new(&svg, (900, 700)).into_drawing_area(),
        title,
        axes,
        cells,
    )?;
    let png = dir.join(format!("{stem}.png"));
    render_map(
        BitMapBackend::new(&png, (900, 700)).into_drawing_area(),
        title,
        axes,
        cells,
    )
}

/// The lease-by-load map of `sweep`.
pub fn draw_sweep(title: &str, cells: &[SweepCell], dir: &Path) -> Result<(), SimError> {
    let distinct = |values: Vec<f64>| {
        let mut values = values;
        values.sort_by(f64::total_cmp);
        values.dedup();
        values
    };
    let leases = distinct(cells.iter().map(|c| c.lease_s).collect());
    let loads = distinct(cells.iter().map(|c| c.load).collect());
    let axes = MapAxes {
        x_desc: "visibility timeout (s)",
        xs: &leases,
        x_digits: 0,
        y_desc: "load (share of fleet capacity)",
        ys: &loads,
        y_digits: 2,
    };
    let map: Vec<MapCell> = cells
        .iter()
        .map(|c| (c.lease_s, c.load, c.recovered))
        .collect();
    draw_map(title, &axes, &map, dir, "sweep")
}

//! `aiperf score --report DIR`: plots (SVG and PNG, through plotters) of the OPS and regulated
//! score over time, the error over time, each group's trials on a timeline, and utilisation,
//! plus an HTML page that shows them with the summary. Text needs a TrueType font: the
//! first of `AIPERF_FONT` and a few standard paths (Debian's `fonts-dejavu-core`); without one
//! the page is written without plots and says how to get them.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::OnceLock;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::reader::Run;
use crate::report;
use crate::score::Score;

mod files;

pub use files::{report_files, scaling_files, write_report, write_scaling};

/// Where fonts usually are.
const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/Library/Fonts/Arial Unicode.ttf",
];

/// Registers a font as "sans-serif" once per process; the path used, or why none.
fn font() -> &'static Result<PathBuf, String> {
    static FONT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let candidates: Vec<PathBuf> = std::env::var_os("AIPERF_FONT")
            .map(PathBuf::from)
            .into_iter()
            .chain(FONT_PATHS.iter().map(PathBuf::from))
            .collect();
        for path in candidates {
            if let Ok(bytes) = std::fs::read(&path) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(path);
                }
            }
        }
        Err("no TrueType font found: install fonts-dejavu-core or set AIPERF_FONT=/path/to/font.ttf to get plots".into())
    })
}

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

/// The time axis' unit for a run of `duration_s`: seconds, minutes or hours, so that a
/// short run's axis does not read 0.001 h.
fn time_unit(duration_s: f64) -> (f64, &'static str) {
    if duration_s < 600.0 {
        (1.0, "elapsed (s)")
    } else if duration_s < 3.0 * 3600.0 {
        (60.0, "elapsed (min)")
    } else {
        (3600.0, "elapsed (h)")
    }
}

/// `seconds` since t0 in the time axis' unit.
fn at(s: &Score, seconds: f64) -> f64 {
    seconds / time_unit(s.duration_s).0
}

/// The chart type every plot uses: elapsed time against a linear y axis.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A white canvas with a title, an x axis from 0 to the run's duration and the
/// given y range; `y_area` is the width left for the y labels.
fn frame<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, plotters::coord::Shift>,
    s: &Score,
    title: &str,
    y: std::ops::Range<f64>,
    y_area: u32,
) -> Result<Chart<'a, DB>, String> {
    area.fill(&WHITE).map_err(e)?;
    ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(y_area)
        .build_cartesian_2d(0.0..at(s, s.duration_s).max(1e-6), y)
        .map_err(e)
}

/// The OPS and regulated score at every epoch completion, exactly: just before and just
/// after each completion (the cumulative count steps up there; in between OPS decays as
/// ops / (t − t0)), then the run's end. Points are (elapsed s, OPS, regulated).
pub fn epoch_curve(run: &Run, s: &Score) -> Vec<(f64, f64, f64)> {
    let t0 = run.info.start_time_s;
    let mut epochs: Vec<_> = run
        .groups
        .iter()
        .flat_map(|g| g.epochs.iter())
        .filter(|e| e.time_s > t0 && e.time_s - t0 <= s.duration_s)
        .collect();
    epochs.sort_by(|a, b| a.time_s.total_cmp(&b.time_s));
    let regulated = |ops: f64, best: Option<f64>| {
        let error = (1.0 - best.unwrap_or(0.0)).max(crate::score::ERROR_FLOOR);
        ops * -error.ln() + 0.0
    };
    // Epochs before t0 (clocks that disagree) count from the start, as in the score.
    let mut ops: u128 = run
        .groups
        .iter()
        .flat_map(|g| g.epochs.iter())
        .filter(|e| e.time_s <= t0)
        .map(|e| u128::from(e.train_ops) + u128::from(e.val_ops))
        .sum();
    let mut best: Option<f64> = None;
    let mut points = Vec::with_capacity(2 * epochs.len() + 1);
    for e in epochs {
        let dt = e.time_s - t0;
        let before = ops as f64 / dt;
        points.push((dt, before, regulated(before, best)));
        ops += u128::from(e.train_ops) + u128::from(e.val_ops);
        best = Some(best.map_or(e.val_accuracy, |b: f64| b.max(e.val_accuracy)));
        let after = ops as f64 / dt;
        points.push((dt, after, regulated(after, best)));
    }
    let end = ops as f64 / s.duration_s;
    points.push((s.duration_s, end, regulated(end, best)));
    points
}

/// OPS and regulated score against elapsed time: the exact curve through every epoch
/// completion, the grid points marked, the warm-up end and the steady-state OPS drawn.
fn draw_ops<DB: DrawingBackend>(
    run: &Run,
    s: &Score,
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String> {
    let curve = epoch_curve(run, s);
    let y_max = curve
        .iter()
        .map(|p| p.1.max(p.2))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let mut chart = frame(area, s, "Sustained OPS and regulated score", 0.0..y_max, 90)?;
    chart
        .configure_mesh()
        .x_desc(time_unit(s.duration_s).1)
        .y_desc("operations per second")
        .y_label_formatter(&|v| report::si(*v))
        .draw()
        .map_err(e)?;
    for (pick, color, label) in [(1usize, BLUE, "OPS"), (2, RED, "regulated")] {
        let line: Vec<(f64, f64)> = curve
            .iter()
            .map(|p| (at(s, p.0), if pick == 1 { p.1 } else { p.2 }))
            .collect();
        chart
            .draw_series(LineSeries::new(line, color.stroke_width(2)))
            .map_err(e)?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
        let marks = s.timeline.iter().map(|p| {
            let y = if pick == 1 { p.ops_per_s } else { p.regulated };
            Circle::new((at(s, p.elapsed_s), y), 4, color.filled())
        });
        chart.draw_series(marks).map_err(e)?;
    }
    draw_warmup(&mut chart, s, y_max)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    area.present().map_err(e)
}

/// The warm-up end as a vertical line and the steady-state OPS after it.
fn draw_warmup<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    s: &Score,
    y_max: f64,
) -> Result<(), String> {
    let Some(tw) = s.stability.warmup_end_s else {
        return Ok(());
    };
    let grey = RGBColor(90, 90, 90);
    chart
        .draw_series(std::iter::once(PathElement::new(
            [(at(s, tw), 0.0), (at(s, tw), y_max)],
            grey.stroke_width(1),
        )))
        .map_err(e)?
        .label("warm-up end")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], grey));
    if let Some(steady) = s.stability.steady_ops_per_s {
        let green = RGBColor(0, 140, 60);
        chart
            .draw_series(std::iter::once(PathElement::new(
                [(at(s, tw), steady), (at(s, s.duration_s), steady)],
                green.stroke_width(2),
            )))
            .map_err(e)?
            .label("steady-state OPS")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], green));
    }
    Ok(())
}

/// Error (1 − best accuracy so far) against elapsed time: a step at every epoch that
/// improved it, the grid points marked.
fn draw_error<DB: DrawingBackend>(
    run: &Run,
    s: &Score,
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String> {
    let mut chart = frame(area, s, "Error of the best model", 0.0..100.0, 60)?;
    chart
        .configure_mesh()
        .x_desc(time_unit(s.duration_s).1)
        .y_desc("error (%)")
        .draw()
        .map_err(e)?;
    let t0 = run.info.start_time_s;
    let mut epochs: Vec<_> = run.groups.iter().flat_map(|g| g.epochs.iter()).collect();
    epochs.sort_by(|a, b| a.time_s.total_cmp(&b.time_s));
    let mut steps = vec![(0.0, 100.0)];
    let mut error = 100.0;
    for ep in epochs.iter().filter(|ep| ep.time_s - t0 <= s.duration_s) {
        let x = at(s, (ep.time_s - t0).max(0.0));
        let now = 100.0 * (1.0 - ep.val_accuracy);
        if now < error {
            steps.push((x, error));
            steps.push((x, now));
            error = now;
        }
    }
    steps.push((at(s, s.duration_s), error));
    chart
        .draw_series(LineSeries::new(steps, BLACK.stroke_width(2)))
        .map_err(e)?;
    let marks = s
        .timeline
        .iter()
        .map(|p| Circle::new((at(s, p.elapsed_s), 100.0 * p.error), 4, BLACK.filled()));
    chart.draw_series(marks).map_err(e)?;
    area.present().map_err(e)
}

/// A colour for a validation accuracy: red (0) through yellow to green (1).
pub fn accuracy_color(acc: f64) -> RGBColor {
    let a = if acc.is_finite() {
        acc.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let (r, g) = if a < 0.5 {
        (220.0, 40.0 + 360.0 * a)
    } else {
        (220.0 - 400.0 * (a - 0.5), 220.0 - 40.0 * (a - 0.5))
    };
    RGBColor(r as u8, g as u8, 50)
}

/// Each group's trials as bars along the time axis, coloured by best accuracy and labelled
/// with model id and best accuracy where the bar is wide enough for it.
fn draw_trials<DB: DrawingBackend>(
    run: &Run,
    s: &Score,
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String> {
    let t0 = run.info.start_time_s;
    let groups = f64::from(run.info.groups.max(1));
    let accs = run
        .trials
        .iter()
        .map(|t| t.best_accuracy)
        .filter(|a| a.is_finite());
    let lo = accs.clone().fold(f64::INFINITY, f64::min).min(1.0);
    let hi = accs.fold(f64::NEG_INFINITY, f64::max).max(lo);
    let scale = |a: f64| if hi > lo { (a - lo) / (hi - lo) } else { 1.0 };
    let title = if lo.is_finite() && hi > lo {
        format!("Trials per group (colour: best accuracy, red {lo:.2} → green {hi:.2})")
    } else {
        "Trials per group (colour: best accuracy)".to_string()
    };
    let mut chart = frame(area, s, &title, -0.5..groups - 0.5, 60)?;
    // Label only the integer ticks: one per group.
    let label = |v: &f64| {
        if (v - v.round()).abs() < 1e-9 {
            format!("{:.0}", v.round())
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_desc(time_unit(s.duration_s).1)
        .y_desc("group")
        .y_labels(4 * run.info.groups.max(1) as usize + 1)
        .y_label_formatter(&label)
        .disable_y_mesh()
        .draw()
        .map_err(e)?;
    let bar = |t: &crate::schema::TrialRow| {
        let y = f64::from(t.group);
        [
            (at(s, t.start_s - t0), y - 0.35),
            (at(s, t.end_s - t0), y + 0.35),
        ]
    };
    chart
        .draw_series(
            run.trials
                .iter()
                .map(|t| Rectangle::new(bar(t), accuracy_color(scale(t.best_accuracy)).filled())),
        )
        .map_err(e)?;
    // A white edge between adjacent trials.
    chart
        .draw_series(
            run.trials
                .iter()
                .map(|t| Rectangle::new(bar(t), WHITE.stroke_width(1))),
        )
        .map_err(e)?;
    // About 7 px per character of a 12 px font, over a plot about 780 px wide.
    let px_per_s = 780.0 / s.duration_s.max(1e-9);
    let labels = run.trials.iter().filter_map(|t| {
        let text = format!("m{} {:.2}", t.model_id, t.best_accuracy);
        let fits = (t.end_s - t.start_s) * px_per_s > 7.0 * text.len() as f64 + 6.0;
        fits.then(|| {
            Text::new(
                text,
                (
                    at(s, t.start_s - t0 + 3.0 / px_per_s),
                    f64::from(t.group) + 0.1,
                ),
                ("sans-serif", 12).into_font().color(&BLACK),
            )
        })
    });
    chart.draw_series(labels).map_err(e)?;
    area.present().map_err(e)
}

/// CPU and accelerator utilisation per group.
fn draw_utilisation<DB: DrawingBackend>(
    run: &Run,
    s: &Score,
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String> {
    let t0 = run.info.start_time_s;
    let mut chart = frame(area, s, "Utilisation", 0.0..105.0, 60)?;
    chart
        .configure_mesh()
        .x_desc(time_unit(s.duration_s).1)
        .y_desc("%")
        .draw()
        .map_err(e)?;
    for (i, g) in run.groups.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let series = |f: fn(&crate::schema::MonitorRow) -> f64| -> Vec<(f64, f64)> {
            g.monitor
                .iter()
                .filter(|m| f(m).is_finite())
                .map(|m| (at(s, m.time_s - t0), 100.0 * f(m)))
                .collect()
        };
        let cpu = series(|m| m.cpu_util);
        let accel = series(|m| m.accel_util);
        if !cpu.is_empty() {
            chart
                .draw_series(LineSeries::new(cpu, color.stroke_width(1)))
                .map_err(e)?
                .label(format!("group {} CPU", g.group))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
        }
        if !accel.is_empty() {
            chart
                .draw_series(LineSeries::new(accel, color.stroke_width(3)))
                .map_err(e)?
                .label(format!("group {} accelerator", g.group))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], color.stroke_width(3))
                });
        }
    }
    if run.groups.iter().any(|g| !g.monitor.is_empty()) {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(e)?;
    }
    area.present().map_err(e)
}

/// The weak-scaling plot over `scores` (`aiperf score --scaling --report DIR`): efficiency
/// (OPS per accelerator against the smallest run's) by accelerators, ideal at 1.
fn draw_scaling<DB: DrawingBackend>(
    scores: &[Score],
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String> {
    let mut rows: Vec<&Score> = scores.iter().collect();
    rows.sort_by_key(|s| s.accelerators);
    let base = rows.first().map_or(0.0, |s| s.ops_per_s_per_accelerator);
    let pts: Vec<(f64, f64)> = rows
        .iter()
        .map(|s| {
            let eff = if base > 0.0 {
                s.ops_per_s_per_accelerator / base
            } else {
                0.0
            };
            (f64::from(s.accelerators), eff)
        })
        .collect();
    let x_max = pts.iter().map(|p| p.0).fold(1.0, f64::max) * 1.1;
    let y_max = pts.iter().map(|p| p.1).fold(1.0, f64::max) * 1.15;
    area.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "Weak scaling: OPS per accelerator vs the smallest run",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("accelerators")
        .y_desc("efficiency")
        .draw()
        .map_err(e)?;
    chart
        .draw_series(std::iter::once(PathElement::new(
            [(0.0, 1.0), (x_max, 1.0)],
            RGBColor(120, 120, 120).stroke_width(1),
        )))
        .map_err(e)?;
    chart
        .draw_series(LineSeries::new(pts.clone(), BLUE.stroke_width(2)))
        .map_err(e)?;
    chart
        .draw_series(pts.iter().map(|&p| Circle::new(p, 5, BLUE.filled())))
        .map_err(e)?;
    let labels = rows.iter().zip(&pts).map(|(s, &(x, y))| {
        Text::new(
            format!("{:.2} ({} nodes)", y, s.nodes),
            (x, y + 0.03 * y_max),
            ("sans-serif", 13).into_font(),
        )
    });
    chart.draw_series(labels).map_err(e)?;
    area.present().map_err(e)
}

fn draw_named<DB: DrawingBackend>(
    name: &str,
    run: &Run,
    s: &Score,
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String> {
    match name {
        "ops" => draw_ops(run, s, area),
        "error" => draw_error(run, s, area),
        "trials" => draw_trials(run, s, area),
        _ => draw_utilisation(run, s, area),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The HTML page: summary, verdict, the plots, the trials and the timeline.
fn page(run: &Run, s: &Score, with_plots: bool) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>aiperf score: {run}</title>\n\
         <style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}pre{{background:#f4f4f4;padding:1em;overflow-x:auto}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}</style></head><body>\n\
         <h1>aiperf score</h1>\n<p>{run}</p>\n<pre>{summary}</pre>\n",
        run = escape(&s.run),
        summary = escape(&report::text(s))
    );
    if with_plots {
        for name in ["ops", "error", "trials", "utilisation"] {
            let _ = writeln!(
                h,
                "<p><img src=\"{name}.svg\" alt=\"{name}\" width=\"900\" height=\"450\"></p>"
            );
        }
    } else {
        let _ = writeln!(h, "<p>No plots: no TrueType font was found (install fonts-dejavu-core or set AIPERF_FONT).</p>");
    }
    trials_table(&mut h, run);
    h.push_str("<h2>Timeline</h2>\n<table><tr><th>elapsed (s)</th><th>error (%)</th><th>OPS</th><th>regulated</th></tr>\n");
    for p in &s.timeline {
        let _ = writeln!(
            h,
            "<tr><td>{:.1}</td><td>{:.2}</td><td>{}</td><td>{}</td></tr>",
            p.elapsed_s,
            100.0 * p.error,
            report::si(p.ops_per_s),
            report::si(p.regulated)
        );
    }
    h.push_str("</table>\n</body></html>\n");
    h
}

/// Every trial, its accuracy cell in the colour the trials plot gives it.
fn trials_table(h: &mut String, run: &Run) {
    h.push_str("<h2>Trials</h2>\n<table><tr><th>model</th><th>father</th><th>group</th><th>round</th><th>batch</th><th>kernel</th><th>epochs</th><th>best accuracy</th><th>status</th></tr>\n");
    for t in &run.trials {
        let c = accuracy_color(t.best_accuracy);
        let father = if t.father < 0 {
            "-".to_string()
        } else {
            t.father.to_string()
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{father}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td style=\"background:rgb({},{},{})\">{:.4}</td><td>{:?}</td></tr>",
            t.model_id, t.group, t.round, t.batch_size, t.kernel_size, t.epochs, c.0, c.1, c.2, t.best_accuracy, t.status
        );
    }
    h.push_str("</table>\n");
}

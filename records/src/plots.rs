//! `aiperf score --report DIR`: plots (SVG and PNG, through plotters) of the OPS and regulated
//! score over time, the error over time, each group's trials on a timeline, and utilisation,
//! plus an HTML page that shows them with the summary. Text needs a TrueType font: the
//! first of `AIPERF_FONT` and a few standard paths (Debian's `fonts-dejavu-core`); without one
//! the page is written without plots and says how to get them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::reader::Run;
use crate::report;
use crate::score::Score;

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

fn hours(s: f64) -> f64 {
    s / 3600.0
}

/// The chart type every plot uses: elapsed hours against a linear y axis.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A white canvas with a title, an x axis from 0 to the run's duration in hours and the
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
        .build_cartesian_2d(0.0..hours(s.duration_s).max(1e-6), y)
        .map_err(e)
}

/// OPS and regulated score against elapsed hours.
fn draw_ops<DB: DrawingBackend>(
    s: &Score,
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String> {
    let y_max = s
        .timeline
        .iter()
        .map(|p| p.ops_per_s.max(p.regulated))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let mut chart = frame(area, s, "Sustained OPS and regulated score", 0.0..y_max, 90)?;
    chart
        .configure_mesh()
        .x_desc("elapsed (h)")
        .y_desc("operations per second")
        .y_label_formatter(&|v| report::si(*v))
        .draw()
        .map_err(e)?;
    let ops: Vec<(f64, f64)> = s
        .timeline
        .iter()
        .map(|p| (hours(p.elapsed_s), p.ops_per_s))
        .collect();
    let reg: Vec<(f64, f64)> = s
        .timeline
        .iter()
        .map(|p| (hours(p.elapsed_s), p.regulated))
        .collect();
    chart
        .draw_series(LineSeries::new(ops, BLUE.stroke_width(2)))
        .map_err(e)?
        .label("OPS")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLUE));
    chart
        .draw_series(LineSeries::new(reg, RED.stroke_width(2)))
        .map_err(e)?
        .label("regulated")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RED));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    area.present().map_err(e)
}

/// Error (1 − best accuracy) against elapsed hours.
fn draw_error<DB: DrawingBackend>(
    s: &Score,
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String> {
    let mut chart = frame(area, s, "Error of the best model", 0.0..100.0, 60)?;
    chart
        .configure_mesh()
        .x_desc("elapsed (h)")
        .y_desc("error (%)")
        .draw()
        .map_err(e)?;
    let pts: Vec<(f64, f64)> = s
        .timeline
        .iter()
        .map(|p| (hours(p.elapsed_s), 100.0 * p.error))
        .collect();
    chart
        .draw_series(LineSeries::new(pts, BLACK.stroke_width(2)))
        .map_err(e)?;
    area.present().map_err(e)
}

/// Each group's trials as bars along the time axis.
fn draw_trials<DB: DrawingBackend>(
    run: &Run,
    s: &Score,
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String> {
    let t0 = run.info.start_time_s;
    let groups = f64::from(run.info.groups.max(1));
    let mut chart = frame(area, s, "Trials per group", -0.5..groups - 0.5, 60)?;
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
        .x_desc("elapsed (h)")
        .y_desc("group")
        .y_labels(4 * run.info.groups.max(1) as usize + 1)
        .y_label_formatter(&label)
        .disable_y_mesh()
        .draw()
        .map_err(e)?;
    chart
        .draw_series(run.trials.iter().enumerate().map(|(i, t)| {
            let y = f64::from(t.group);
            let color = Palette99::pick(i).filled();
            Rectangle::new(
                [
                    (hours(t.start_s - t0), y - 0.35),
                    (hours(t.end_s - t0), y + 0.35),
                ],
                color,
            )
        }))
        .map_err(e)?;
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
        .x_desc("elapsed (h)")
        .y_desc("%")
        .draw()
        .map_err(e)?;
    for (i, g) in run.groups.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let series = |f: fn(&crate::schema::MonitorRow) -> f64| -> Vec<(f64, f64)> {
            g.monitor
                .iter()
                .filter(|m| f(m).is_finite())
                .map(|m| (hours(m.time_s - t0), 100.0 * f(m)))
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

/// Writes the report for `run` into `dir`: the plots (when a font is available) and
/// `index.html`. Returns the files written and any warning.
pub fn write_report(
    dir: &Path,
    run: &Run,
    s: &Score,
) -> Result<(Vec<PathBuf>, Option<String>), String> {
    std::fs::create_dir_all(dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    let mut files = Vec::new();
    let mut warning = None;
    let plots = ["ops", "error", "trials", "utilisation"];
    match font() {
        Ok(_) => {
            for name in plots {
                for ext in ["svg", "png"] {
                    let path = dir.join(format!("{name}.{ext}"));
                    let result = if ext == "svg" {
                        let area = SVGBackend::new(&path, (900, 450)).into_drawing_area();
                        draw_named(name, run, s, &area)
                    } else {
                        let area = BitMapBackend::new(&path, (900, 450)).into_drawing_area();
                        draw_named(name, run, s, &area)
                    };
                    result.map_err(|err| format!("{}: {err}", path.display()))?;
                    files.push(path);
                }
            }
        }
        Err(why) => warning = Some(why.clone()),
    }
    let html = dir.join("index.html");
    std::fs::write(&html, page(s, warning.is_none()))
        .map_err(|err| format!("{}: {err}", html.display()))?;
    files.push(html);
    Ok((files, warning))
}

fn draw_named<DB: DrawingBackend>(
    name: &str,
    run: &Run,
    s: &Score,
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String> {
    match name {
        "ops" => draw_ops(s, area),
        "error" => draw_error(s, area),
        "trials" => draw_trials(run, s, area),
        _ => draw_utilisation(run, s, area),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The HTML page: summary, verdict, timeline table and the plots.
fn page(s: &Score, with_plots: bool) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>aiperf score: {run}</title>\n\
         <style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}pre{{background:#f4f4f4;padding:1em}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}</style></head><body>\n\
         <h1>aiperf score</h1>\n<p>{run}</p>\n<pre>{summary}</pre>\n",
        run = escape(&s.run),
        summary = escape(&report::text(s))
    );
    if with_plots {
        for name in ["ops", "error", "trials", "utilisation"] {
            let _ = writeln!(
                h,
                "<p><img src=\"{name}.svg\" alt=\"{name}\" width=\"900\"></p>"
            );
        }
    } else {
        let _ = writeln!(h, "<p>No plots: no TrueType font was found (install fonts-dejavu-core or set AIPERF_FONT).</p>");
    }
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

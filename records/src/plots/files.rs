//! The files of `aiperf score --report DIR`: which they are (so that `aiperf score` can check
//! them against the records before writing anything, [`crate::outputs`]) and writing them,
//! each through a temporary file renamed over its name once complete.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{draw_named, draw_scaling, font, page};
use crate::outputs;
use crate::reader::Run;
use crate::score::Score;

/// The plots of a run's report, each as `<name>.svg` and `<name>.png`.
const PLOTS: [&str; 4] = ["ops", "error", "trials", "utilisation"];

/// The size of every plot, in pixels.
const SIZE: (u32, u32) = (900, 450);

/// Every file [`write_report`] may write into `dir` (the plots whether or not a font is
/// found, then `index.html`).
pub fn report_files(dir: &Path) -> Vec<PathBuf> {
    PLOTS
        .iter()
        .flat_map(|name| ["svg", "png"].map(|ext| dir.join(format!("{name}.{ext}"))))
        .chain(std::iter::once(dir.join("index.html")))
        .collect()
}

/// The files [`write_scaling`] writes into `dir`: `scaling.svg`, `scaling.png`.
pub fn scaling_files(dir: &Path) -> Vec<PathBuf> {
    vec![dir.join("scaling.svg"), dir.join("scaling.png")]
}

/// `path: error`.
fn at(path: &Path, err: impl std::fmt::Display) -> String {
    format!("{}: {err}", path.display())
}

/// Draws an SVG in memory and writes it to `path` whole.
fn svg_file(
    path: &Path,
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<(), String>,
) -> Result<(), String> {
    let mut text = String::new();
    {
        let area = SVGBackend::with_string(&mut text, SIZE).into_drawing_area();
        draw(&area).map_err(|err| at(path, err))?;
    }
    outputs::write_atomic(path, text.as_bytes()).map_err(|err| at(path, err))
}

/// Draws a PNG into a temporary file beside `path` (same extension: the encoder goes by it)
/// and renames it to `path` when complete.
fn png_file(
    path: &Path,
    draw: impl FnOnce(&DrawingArea<BitMapBackend, Shift>) -> Result<(), String>,
) -> Result<(), String> {
    let (staged, file) = outputs::Staged::new(path).map_err(|err| at(path, err))?;
    drop(file);
    {
        let area = BitMapBackend::new(staged.path(), SIZE).into_drawing_area();
        draw(&area).map_err(|err| at(path, err))?;
    }
    staged.commit().map_err(|err| at(path, err))
}

/// Writes `scaling.svg` and `scaling.png` into `dir`; returns them.
pub fn write_scaling(dir: &Path, scores: &[Score]) -> Result<Vec<PathBuf>, String> {
    font().as_ref().map_err(Clone::clone)?;
    std::fs::create_dir_all(dir).map_err(|err| at(dir, err))?;
    let files = scaling_files(dir);
    svg_file(&files[0], |area| draw_scaling(scores, area))?;
    png_file(&files[1], |area| draw_scaling(scores, area))?;
    Ok(files)
}

/// Writes the report for `run` into `dir`: the plots (when a font is available) and
/// `index.html`. Returns the files written and any warning.
pub fn write_report(
    dir: &Path,
    run: &Run,
    s: &Score,
) -> Result<(Vec<PathBuf>, Option<String>), String> {
    std::fs::create_dir_all(dir).map_err(|err| at(dir, err))?;
    let mut files = Vec::new();
    let mut warning = None;
    match font() {
        Ok(_) => {
            for name in PLOTS {
                let svg = dir.join(format!("{name}.svg"));
                svg_file(&svg, |area| draw_named(name, run, s, area))?;
                files.push(svg);
                let png = dir.join(format!("{name}.png"));
                png_file(&png, |area| draw_named(name, run, s, area))?;
                files.push(png);
            }
        }
        Err(why) => warning = Some(why.clone()),
    }
    let html = dir.join("index.html");
    outputs::write_atomic(&html, page(run, s, warning.is_none()).as_bytes())
        .map_err(|err| at(&html, err))?;
    files.push(html);
    Ok((files, warning))
}

//! The `score` command, shared by `aiperf score` and the reviewer's `aiperf-score`.

use std::path::PathBuf;

use anyhow::Context;

use crate::{digest, plots, read_run, report, score};

/// Arguments of `aiperf score`.
#[derive(clap::Args, Debug)]
pub struct ScoreArgs {
    /// Run folders (results/<run-id>/), each holding primary.h5 and group-<g>.h5.
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Grid step in seconds (official: 360 = 0.1 h) [default: the step the recorded preset
    /// names (`score_interval_s`), else 360].
    #[arg(long)]
    pub interval: Option<f64>,
    /// Write the spans of `aiperf run --trace-steps` as a Chrome trace (Perfetto,
    /// chrome://tracing) to this file (one run only).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// The run digest from rank 0's closing log line ("run digest <64 hex digits>"): the
    /// records must be the ones that job wrote (one run only).
    #[arg(long, value_name = "HEX")]
    pub digest: Option<String>,
    /// Print JSON (one document with every run) instead of the text summary.
    #[arg(long)]
    pub json: bool,
    /// Also write the timelines as CSV to this file.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Also write plots (SVG, PNG) and an HTML page per run into this folder (with
    /// `--scaling`, also `scaling.svg`/`.png`: efficiency by accelerators).
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// Weak-scaling table over the runs given (accelerators, score, per accelerator,
    /// efficiency relative to the smallest run).
    #[arg(long)]
    pub scaling: bool,
}

/// Scores every run and prints the reports; errors name the run and the problem.
pub fn run(args: &ScoreArgs) -> anyhow::Result<()> {
    if let Some(i) = args.interval.filter(|i| !(i.is_finite() && *i > 0.0)) {
        anyhow::bail!("--interval {i} must be a positive number of seconds (official: 360)");
    }
    let expected = match &args.digest {
        Some(_) if args.runs.len() > 1 => {
            anyhow::bail!("--digest checks one run: give one run folder with it")
        }
        Some(hex) => Some(digest::parse_hex(hex).map_err(|e| anyhow::anyhow!("--digest {e}"))?),
        None => None,
    };
    let mut scores = Vec::new();
    let mut runs = Vec::new();
    for dir in &args.runs {
        let run = read_run(dir)?;
        let interval = args
            .interval
            .unwrap_or_else(|| score::default_interval(&run));
        scores.push(score::score_with_digest(&run, interval, expected.as_ref())?);
        runs.push(run);
    }
    if args.scaling {
        print!("{}", report::scaling(&scores));
        if let Some(out) = &args.report {
            for f in plots::write_scaling(out, &scores).map_err(anyhow::Error::msg)? {
                eprintln!("scaling plot: {}", f.display());
            }
        }
    } else if args.json {
        println!("{}", serde_json::to_string_pretty(&scores)?);
    } else {
        for s in &scores {
            print!("{}", report::text(s));
        }
    }
    if let Some(path) = &args.csv {
        let mut out = String::new();
        for (i, s) in scores.iter().enumerate() {
            let csv = report::csv(s);
            out.push_str(if i == 0 {
                &csv
            } else {
                csv.split_once('\n').map_or("", |x| x.1)
            });
        }
        std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.trace {
        let [run] = &runs[..] else {
            anyhow::bail!("--trace writes one run's spans: give one run folder with it");
        };
        let doc = crate::trace::chrome_trace(run).ok_or_else(|| {
            anyhow::anyhow!(
                "--trace {}: {} holds no traced spans (record some with `aiperf run --trace-steps N`)",
                path.display(),
                run.dir.display()
            )
        })?;
        std::fs::write(path, serde_json::to_string(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("trace: {}", path.display());
    }
    if let Some(out) = &args.report {
        for (i, (run, s)) in runs.iter().zip(&scores).enumerate() {
            let dir = if runs.len() == 1 {
                out.clone()
            } else {
                let name = run
                    .dir
                    .file_name()
                    .map_or("run".into(), |n| n.to_string_lossy().into_owned());
                out.join(format!("{i}-{name}"))
            };
            let (_, warning) = plots::write_report(&dir, run, s).map_err(anyhow::Error::msg)?;
            if let Some(w) = warning {
                eprintln!("warning: {w}");
            }
            eprintln!("report: {}", dir.join("index.html").display());
        }
    }
    Ok(())
}

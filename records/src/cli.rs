//! The `score` command, shared by `aiperf score` and the reviewer's `aiperf-score`.

// The doc comments of clap's types are the `--help` text, where `<run-id>` is meant
// literally, not as HTML.
#![allow(rustdoc::invalid_html_tags)]

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::outputs::{self, Flag, Records};
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
    /// The audit digest `aiperf audit` printed ("audit digest <64 hex digits>"): only with it
    /// is the folder's audit.h5 shown as verified — an audit proves something only to whoever
    /// ran it (one run only).
    #[arg(long, value_name = "HEX")]
    pub audit_digest: Option<String>,
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

/// What the exit status of `aiperf score` (and `aiperf-score`) tells a script about the
/// runs it scored (the worst of them); an error (unreadable records, a bad flag) exits 1,
/// and a command line clap cannot parse 2. Documented in docs/reviewer.md ("Exit status").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// Scored, VALID, records intact (matching `--digest` when given): 0.
    Valid,
    /// Scored, UNOFFICIAL: measured correctly, not the official configuration: 3.
    Unofficial,
    /// Scored, INVALID (a rule broken; records not altered): 4.
    Invalid,
    /// The records are altered or not the ones `--digest` names: 5.
    Altered,
    /// The run's audit failed, or `--audit-digest` was given and the folder's audit is
    /// altered or not that audit: 6. An audit not verified by its digest never changes the
    /// exit status.
    AuditFailed,
}

impl Outcome {
    /// The outcome of one score.
    pub fn of(s: &score::Score) -> Outcome {
        let audit_failed = s
            .audit
            .as_ref()
            .is_some_and(|a| a.checked && a.verdict != "PASSED");
        if audit_failed {
            Outcome::AuditFailed
        } else if s.integrity.records == "altered"
            || (s.integrity.records == "intact" && s.integrity.digest_matches == Some(false))
        {
            Outcome::Altered
        } else {
            match s.verdict.status {
                score::Status::Valid => Outcome::Valid,
                score::Status::Unofficial => Outcome::Unofficial,
                score::Status::Invalid => Outcome::Invalid,
            }
        }
    }

    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            Outcome::Valid => 0,
            Outcome::Unofficial => 3,
            Outcome::Invalid => 4,
            Outcome::Altered => 5,
            Outcome::AuditFailed => 6,
        }
    }
}

/// Writes every score's CSV row under one header to `path` (`--csv`).
fn write_csv(path: &Path, scores: &[score::Score]) -> anyhow::Result<()> {
    let mut out = String::new();
    for (i, s) in scores.iter().enumerate() {
        let csv = report::csv(s);
        out.push_str(if i == 0 {
            &csv
        } else {
            csv.split_once('\n').map_or("", |x| x.1)
        });
    }
    outputs::write_atomic(path, out.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Writes the one run's traced spans to `path` as a Chrome trace (`--trace`).
fn write_trace(path: &Path, runs: &[crate::Run]) -> anyhow::Result<()> {
    let [run] = runs else {
        anyhow::bail!("--trace writes one run's spans: give one run folder with it");
    };
    let doc = crate::trace::chrome_trace(run).ok_or_else(|| {
        anyhow::anyhow!(
            "--trace {}: {} holds no traced spans (record some with `aiperf run --trace-steps N`)",
            path.display(),
            run.dir.display()
        )
    })?;
    outputs::write_atomic(path, serde_json::to_string(&doc)?.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("trace: {}", path.display());
    Ok(())
}

/// The folder of each run's report under `--report DIR`: `DIR` itself for one run, else
/// `DIR/<i>-<run folder's name>`.
fn report_dirs(out: &Path, runs: &[PathBuf]) -> Vec<PathBuf> {
    if runs.len() == 1 {
        return vec![out.to_path_buf()];
    }
    runs.iter()
        .enumerate()
        .map(|(i, run)| {
            let name = run
                .file_name()
                .map_or("run".into(), |n| n.to_string_lossy().into_owned());
            out.join(format!("{i}-{name}"))
        })
        .collect()
}

/// Refuses, before anything is read or written, every output that would destroy one of the
/// records read or pose as one ([`outputs::Records::check`]): `--csv`, `--trace`, and
/// `--report`'s folders and every file it would write into them.
///
/// `--report` may name a run folder itself: its files (`index.html`, `<plot>.svg`/`.png`,
/// `scaling.svg`/`.png`) are never `*.h5` names, so they destroy no record there and
/// leave the run readable; only where one of those names is already a link to a record
/// (symbolic or hard) is the report refused.
fn check_outputs(args: &ScoreArgs) -> anyhow::Result<()> {
    let records = Records::of(&args.runs);
    for (flag, path) in [(Flag::Csv, &args.csv), (Flag::Trace, &args.trace)] {
        if let Some(path) = path {
            records.check(flag, path, path)?;
        }
    }
    if let Some(out) = &args.report {
        records.check(Flag::Report, out, out)?;
        let mut files = if args.scaling {
            plots::scaling_files(out)
        } else {
            Vec::new()
        };
        for dir in report_dirs(out, &args.runs) {
            records.check(Flag::Report, out, &dir)?;
            files.extend(plots::report_files(&dir));
        }
        for file in files {
            records.check(Flag::Report, out, &file)?;
        }
    }
    Ok(())
}

/// Scores every run and prints the reports; errors name the run and the problem. Returns
/// the worst outcome over the runs (the exit status).
pub fn run(args: &ScoreArgs) -> anyhow::Result<Outcome> {
    if let Some(i) = args.interval.filter(|i| !(i.is_finite() && *i > 0.0)) {
        anyhow::bail!("--interval {i} must be a positive number of seconds (official: 360)");
    }
    let expected = match &args.digest {
        Some(_) if args.runs.len() > 1 => {
            anyhow::bail!("--digest checks one run: give one run folder with it")
        }
        Some(hex) => Some(
            digest::parse_hex(hex, digest::Wanted::Run)
                .map_err(|e| anyhow::anyhow!("--digest {e}"))?,
        ),
        None => None,
    };
    let audit_digest = match &args.audit_digest {
        Some(_) if args.runs.len() > 1 => {
            anyhow::bail!("--audit-digest checks one run's audit: give one run folder with it")
        }
        Some(hex) => Some(
            digest::parse_hex(hex, digest::Wanted::Audit)
                .map_err(|e| anyhow::anyhow!("--audit-digest {e}"))?,
        ),
        None => None,
    };
    check_outputs(args)?;
    let mut scores = Vec::new();
    let mut runs = Vec::new();
    for dir in &args.runs {
        let run = read_run(dir)?;
        let interval = args
            .interval
            .unwrap_or_else(|| score::default_interval(&run));
        scores.push(score::score_with_digest(
            &run,
            interval,
            expected.as_ref(),
            audit_digest.as_ref(),
        )?);
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
        write_csv(path, &scores)?;
    }
    if let Some(path) = &args.trace {
        write_trace(path, &runs)?;
    }
    if let Some(out) = &args.report {
        for ((run, s), dir) in runs.iter().zip(&scores).zip(report_dirs(out, &args.runs)) {
            let (_, warning) = plots::write_report(&dir, run, s).map_err(anyhow::Error::msg)?;
            if let Some(w) = warning {
                eprintln!("warning: {w}");
            }
            eprintln!("report: {}", dir.join("index.html").display());
        }
    }
    Ok(scores
        .iter()
        .map(Outcome::of)
        .max()
        .unwrap_or(Outcome::Valid))
}

//! The score (docs/design.md §5, a contract), computed from the records alone: the timeline of
//! operations per second and quality-regulated score on a grid of step Δ from t0, the final
//! values at the run's end, per-accelerator figures, totals, the time split, and the
//! validity verdict under the versioned rules.

use serde::Serialize;

use crate::digest::Digest;
use crate::error::RecordError;
pub use crate::grid::{grid, GridError, MAX_GRID_STEPS, OFFICIAL_INTERVAL_S};
use crate::integrity::{self, Integrity};
use crate::reader::Run;
use crate::rules::{self, Severity};
use crate::schema::{EpochRow, TrialStatus, RULES_VERSION, SCHEMA_VERSION};
use crate::stability::{stability, Stability};

/// Error floor, so that a perfect accuracy keeps −ln(error) finite (a warning says so).
pub const ERROR_FLOOR: f64 = 1e-9;

/// One grid point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    /// Seconds since t0.
    pub elapsed_s: f64,
    /// Operations of the epochs completed by then.
    pub ops: u128,
    /// ops / elapsed.
    pub ops_per_s: f64,
    /// 1 − best validation accuracy so far (1 before any epoch), floored at
    /// [`ERROR_FLOOR`]: the value the regulated score uses.
    pub error: f64,
    /// OPS · (−ln error).
    pub regulated: f64,
}

/// The verdict, like HPL's PASSED/FAILED.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    /// Follows every rule: an official result.
    Valid,
    /// Measured correctly but not under the official configuration.
    Unofficial,
    /// Breaks a rule: not a result.
    Invalid,
}

/// Validity under [`RULES_VERSION`], with every reason.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// The rules applied.
    pub rules: String,
    /// The outcome.
    pub status: Status,
    /// Why it is not valid (empty when valid).
    pub reasons: Vec<String>,
}

/// Everything `aiperf score` reports for one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Score {
    /// The run folder.
    pub run: String,
    /// Grid step used.
    pub interval_s: f64,
    /// Seconds from t0 to the end.
    pub duration_s: f64,
    /// Times the run was resumed (`aiperf run --resume`).
    pub resumes: usize,
    /// Seconds between stops and resumptions: counted in the duration, as wall time.
    pub down_time_s: f64,
    /// The timeline, ending with the run's end.
    pub timeline: Vec<Point>,
    /// Sustained OPS at the end: the score.
    pub ops_per_s: f64,
    /// Regulated score at the end.
    pub regulated: f64,
    /// Accelerators.
    pub accelerators: u32,
    /// Score per accelerator.
    pub ops_per_s_per_accelerator: f64,
    /// Regulated score per accelerator.
    pub regulated_per_accelerator: f64,
    /// Nodes: distinct hosts of the training ranks.
    pub nodes: u32,
    /// Score per node.
    pub ops_per_s_per_node: f64,
    /// Regulated score per node.
    pub regulated_per_node: f64,
    /// Warm-up end, steady-state OPS and convergence (docs/design.md §5).
    pub stability: Stability,
    /// What the digests say of the records.
    pub integrity: Integrity,
    /// Training operations counted.
    pub train_ops: u128,
    /// Validation operations counted.
    pub val_ops: u128,
    /// Trials recorded.
    pub trials: usize,
    /// Of which cut by the deadline (their completed epochs count).
    pub trials_stopped: usize,
    /// Of which failed (their completed epochs count).
    pub trials_failed: usize,
    /// Epochs counted.
    pub epochs: usize,
    /// Optimizer steps of the counted epochs (per exchange figures: all-reduce s / steps).
    pub steps: u128,
    /// Best validation accuracy.
    pub best_accuracy: f64,
    /// Seconds of compute, summed over groups.
    pub compute_s: f64,
    /// Seconds of all-reduce, summed over groups.
    pub allreduce_s: f64,
    /// Bytes all-reduced per rank, summed over groups.
    pub allreduce_bytes: u128,
    /// Seconds waiting for data, summed over groups.
    pub data_wait_s: f64,
    /// All-reduce bytes per all-reduce second (per rank), over the epochs that exchanged
    /// something; `None` (JSON `null`) when nothing was exchanged (e.g. one-rank groups).
    pub allreduce_bytes_per_s: Option<f64>,
    /// The same per counted epoch with an exchange: (min, median, max), bytes per second —
    /// to set beside `aiperf comm-bench`'s figures for the interconnect.
    pub allreduce_epoch_bytes_per_s: Option<(f64, f64, f64)>,
    /// Accelerator-busy fraction: seconds inside train/eval steps and exchanges (compute +
    /// all-reduce) of counted epochs, over groups × the run's duration.
    pub busy_fraction: f64,
    /// What the monitor sampled within the run: accelerator utilisation and memory, host
    /// CPU and memory.
    pub resources: crate::resources::Resources,
    /// The validity verdict.
    pub verdict: Verdict,
    /// The audit's verdict (`aiperf audit`), when the run's folder holds one.
    pub audit: Option<crate::audit::AuditSummary>,
    /// The platforms the ranks ran on (`None`: records before schema 4 do not name them).
    pub platform: Option<Vec<crate::platform::PlatformEntry>>,
    /// Each accelerator's measured ceiling (`None`: records before schema 5 do not hold it).
    pub ceilings: Option<Vec<crate::ceiling::Ceiling>>,
    /// The sustained OPS over the machine's ceiling, each accelerator's fastest
    /// ([`crate::ceiling::efficiency`]).
    pub efficiency: Option<f64>,
    /// The run's precision, as recorded (`precision` attribute).
    pub precision: String,
    /// The accelerators' summed ceiling in the run's own precision, operations per second
    /// (`None` where a rank recorded none in it, or no ceilings are recorded).
    pub ceiling_run_precision: Option<f64>,
    /// Qualifications of the result.
    pub warnings: Vec<String>,
}

/// Bytes per second, or `None` when nothing was exchanged or no time was measured: a rate
/// from zero bytes or zero seconds is noise, not a bandwidth.
fn bandwidth(bytes: u128, seconds: f64) -> Option<f64> {
    let rate = bytes as f64 / seconds;
    (bytes > 0 && seconds > 0.0 && rate.is_finite()).then_some(rate)
}

/// The timeline on `grid` (seconds since t0) over `epochs` sorted by time, and whether an
/// accuracy of 1 had to be floored.
fn timeline(t0: f64, grid: &[f64], epochs: &[&EpochRow]) -> (Vec<Point>, bool) {
    let mut points = Vec::with_capacity(grid.len());
    let (mut i, mut ops, mut best) = (0usize, 0u128, None::<f64>);
    let mut floored = false;
    for &elapsed in grid {
        let t = t0 + elapsed;
        while i < epochs.len() && epochs[i].time_s <= t {
            ops += u128::from(epochs[i].train_ops) + u128::from(epochs[i].val_ops);
            best = Some(best.map_or(epochs[i].val_accuracy, |b: f64| {
                b.max(epochs[i].val_accuracy)
            }));
            i += 1;
        }
        let ops_per_s = ops as f64 / elapsed;
        let raw_error = 1.0 - best.unwrap_or(0.0);
        floored |= raw_error < ERROR_FLOOR;
        let error = raw_error.max(ERROR_FLOOR);
        points.push(Point {
            elapsed_s: elapsed,
            ops,
            ops_per_s,
            error,
            // Before any completed epoch error = 1 and regulated = 0 (docs/design.md §5), not −0.
            regulated: ops_per_s * -error.ln() + 0.0,
        });
    }
    (points, floored)
}

/// The exchange's bandwidth over the counted epochs that exchanged something (groups of two
/// ranks or more, bytes and seconds recorded): overall, and (min, median, max) per epoch.
fn exchange(run: &Run, t_end: f64) -> (Option<f64>, Option<(f64, f64, f64)>) {
    let exchanged: Vec<&EpochRow> = run
        .groups
        .iter()
        .filter(|g| g.ranks > 1)
        .flat_map(|g| &g.epochs)
        .filter(|e| e.time_s <= t_end && e.allreduce_bytes > 0 && e.allreduce_s > 0.0)
        .collect();
    let overall = bandwidth(
        exchanged
            .iter()
            .map(|e| u128::from(e.allreduce_bytes))
            .sum(),
        exchanged.iter().map(|e| e.allreduce_s).sum(),
    );
    let mut per_epoch: Vec<f64> = exchanged
        .iter()
        .filter_map(|e| bandwidth(u128::from(e.allreduce_bytes), e.allreduce_s))
        .collect();
    per_epoch.sort_by(f64::total_cmp);
    let spread = (!per_epoch.is_empty()).then(|| {
        let n = per_epoch.len();
        (per_epoch[0], per_epoch[n / 2], per_epoch[n - 1])
    });
    (overall, spread)
}

/// Epochs outside the run: before its start (clocks disagree) or after its end (not counted).
fn clock_warnings(epochs: &[&EpochRow], t0: f64, t_end: f64) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(e) = epochs.iter().find(|e| e.time_s < t0) {
        warnings.push(format!(
            "an epoch completed at {} before the run's start {t0}: clocks disagree",
            e.time_s
        ));
    }
    let late = epochs.iter().filter(|e| e.time_s > t_end).count();
    if late > 0 {
        warnings.push(format!(
            "{late} epoch(s) recorded after the run's end are not counted"
        ));
    }
    warnings
}

/// What a run with a stand-in trainer did not measure (the rules make it INVALID anyway).
fn emulation_note(run: &Run) -> Option<String> {
    let config = json(&run.info.config_json);
    let ops = config
        .pointer("/sim/ops")
        .and_then(serde_json::Value::as_f64);
    let ops = ops.map_or("?".into(), |o| format!("{o:e}"));
    match config.pointer("/trainer").and_then(serde_json::Value::as_str) {
        Some("emulated") => Some(format!(
            "emulated trainer: each accelerator's compute is a wait at {ops} OPS and accuracy a synthetic learning curve; the gradient exchanges (the architectures' real parameter counts), the search, the protocol and the records are real"
        )),
        Some("simulated") => Some(format!(
            "simulated trainer: epochs are waits at {ops} OPS per accelerator with no exchange, and accuracy a synthetic learning curve; the search, the protocol and the records are real"
        )),
        _ => None,
    }
}

/// Each group whose epoch rows go back in time (rows are appended as epochs complete, so
/// the clock jumped back): the first such row. The score counts rows in time order.
fn backwards(run: &Run) -> Vec<String> {
    run.groups
        .iter()
        .filter_map(|g| {
            let row = g.epochs.windows(2).position(|w| w[1].time_s < w[0].time_s)? + 1;
            Some(format!(
                "{} epochs row {row} completed at {} before row {} ({}): the clock went backwards; rows are counted in time order",
                crate::schema::group_file(g.group),
                g.epochs[row].time_s,
                row - 1,
                g.epochs[row - 1].time_s
            ))
        })
        .collect()
}

/// Scores `run` with grid step `interval_s` (docs/design.md §5), verifying its digests.
pub fn score(run: &Run, interval_s: f64) -> Result<Score, RecordError> {
    score_with_digest(run, interval_s, None, None)
}

/// The run's start, end and epochs sorted by completion time.
fn span(run: &Run) -> Result<(f64, f64, Vec<&EpochRow>), RecordError> {
    let t0 = run.info.start_time_s;
    let mut epochs: Vec<_> = run.groups.iter().flat_map(|g| g.epochs.iter()).collect();
    if epochs.is_empty() {
        if let Some(m) = run.missing.first() {
            return Err(RecordError::Hdf5 {
                path: run.dir.clone(),
                message: format!("no completed epoch to score: {m}"),
            });
        }
        return Err(RecordError::Empty(run.dir.clone()));
    }
    epochs.sort_by(|a, b| a.time_s.total_cmp(&b.time_s));
    let last_epoch = epochs.last().expect("not empty").time_s;
    let t_end = run.info.end_time_s.unwrap_or(last_epoch);
    if t_end - t0 <= 0.0 {
        return Err(RecordError::Hdf5 {
            path: run.dir.clone(),
            message: format!("the run ends ({t_end}) before it starts ({t0})"),
        });
    }
    Ok((t0, t_end, epochs))
}

/// Distinct hosts of the training ranks (rank 0, the primary, excluded), at least 1.
fn nodes(run: &Run) -> u32 {
    let hosts: std::collections::BTreeSet<&String> = run.info.hosts.iter().skip(1).collect();
    (hosts.len() as u32).max(1)
}

/// [`score`], also checking the run digest against `expected` (`aiperf score --digest`) and
/// the audit's against `audit_digest` (`--audit-digest`: only then is an audit verified).
pub fn score_with_digest(
    run: &Run,
    interval_s: f64,
    expected: Option<&Digest>,
    audit_digest: Option<&Digest>,
) -> Result<Score, RecordError> {
    let (t0, t_end, epochs) = span(run)?;
    let mut warnings = run.warnings.clone();
    warnings.extend(clock_warnings(&epochs, t0, t_end));
    warnings.extend(backwards(run));
    warnings.extend(emulation_note(run));
    let duration_s = t_end - t0;
    let grid = grid(duration_s, interval_s).map_err(|problem| RecordError::BadInterval {
        run: run.dir.clone(),
        problem,
    })?;
    let (timeline, floored) = timeline(t0, &grid, &epochs);
    if floored {
        warnings.push(format!(
            "a validation accuracy of 1 makes −ln(error) infinite: error taken as {ERROR_FLOOR:e}"
        ));
    }
    let counted: Vec<&EpochRow> = epochs
        .iter()
        .copied()
        .filter(|e| e.time_s <= t_end)
        .collect();
    let best_accuracy = counted.iter().map(|e| e.val_accuracy).fold(0.0, f64::max);
    let integrity = integrity::check(run, expected);
    warnings.extend(integrity.notes.iter().cloned());
    let ops_per_s = timeline.last().map_or(0.0, |p| p.ops_per_s);
    let verdict = verdict(run, duration_s, ops_per_s, 1.0 - best_accuracy, &integrity);
    let groups: Vec<(u32, &[EpochRow])> = (0..run.info.groups)
        .map(|g| {
            let rows = run.groups.iter().find(|r| r.group == g);
            (g, rows.map_or(&[][..], |r| &r.epochs[..]))
        })
        .collect();
    let measured = Measured {
        interval_s,
        stability: stability(t0, t_end, &epochs, &run.trials, &groups),
        timeline,
        best_accuracy,
        verdict,
        integrity,
        warnings,
        audit_digest: audit_digest.copied(),
    };
    Ok(assemble(run, &counted, duration_s, measured))
}

/// What [`score_with_digest`] worked out before the sums.
struct Measured {
    interval_s: f64,
    timeline: Vec<Point>,
    best_accuracy: f64,
    verdict: Verdict,
    stability: Stability,
    integrity: Integrity,
    warnings: Vec<String>,
    audit_digest: Option<Digest>,
}

/// The score: the end of the timeline, per accelerator and per node, and the sums over the
/// counted epochs and trials.
fn assemble(run: &Run, counted: &[&EpochRow], duration_s: f64, m: Measured) -> Score {
    let end = m.timeline.last().expect("grid ends at t_end").clone();
    let (acc, nodes) = (f64::from(run.info.accelerators.max(1)), nodes(run));
    let sum = |f: &dyn Fn(&EpochRow) -> f64| counted.iter().map(|e| f(e)).sum::<f64>();
    let (compute_s, allreduce_s) = (sum(&|e| e.compute_s), sum(&|e| e.allreduce_s));
    let t_end = run.info.start_time_s + duration_s;
    let (allreduce_bytes_per_s, allreduce_epoch_bytes_per_s) = exchange(run, t_end);
    let trials_with = |s: TrialStatus| run.trials.iter().filter(|t| t.status == s).count();
    let audit = crate::audit::summary_for(
        run,
        m.integrity.run_digest.as_deref(),
        m.audit_digest.as_ref(),
    );
    Score {
        run: run.dir.display().to_string(),
        interval_s: m.interval_s,
        duration_s,
        resumes: run.info.resumes.len(),
        down_time_s: run
            .info
            .resumes
            .iter()
            .map(|(stopped, resumed)| (resumed - stopped).max(0.0))
            .sum(),
        ops_per_s: end.ops_per_s,
        regulated: end.regulated,
        accelerators: run.info.accelerators,
        ops_per_s_per_accelerator: end.ops_per_s / acc,
        regulated_per_accelerator: end.regulated / acc,
        nodes,
        ops_per_s_per_node: end.ops_per_s / f64::from(nodes),
        regulated_per_node: end.regulated / f64::from(nodes),
        timeline: m.timeline,
        stability: m.stability,
        integrity: m.integrity,
        train_ops: counted.iter().map(|e| u128::from(e.train_ops)).sum(),
        val_ops: counted.iter().map(|e| u128::from(e.val_ops)).sum(),
        trials: run.trials.len(),
        trials_stopped: trials_with(TrialStatus::Stopped),
        trials_failed: trials_with(TrialStatus::Failed),
        epochs: counted.len(),
        steps: counted.iter().map(|e| u128::from(e.steps)).sum(),
        best_accuracy: m.best_accuracy,
        compute_s,
        allreduce_s,
        allreduce_bytes: counted.iter().map(|e| u128::from(e.allreduce_bytes)).sum(),
        data_wait_s: sum(&|e| e.data_wait_s),
        allreduce_bytes_per_s,
        allreduce_epoch_bytes_per_s,
        busy_fraction: (compute_s + allreduce_s) / (run.groups.len().max(1) as f64 * duration_s),
        resources: crate::resources::summarise(run, t_end),
        verdict: m.verdict,
        audit,
        platform: run.info.platform.clone(),
        efficiency: run
            .info
            .ceilings
            .as_deref()
            .filter(|c| crate::ceiling::ranks(c).len() == run.info.accelerators as usize)
            .and_then(|c| crate::ceiling::efficiency(end.ops_per_s, c)),
        precision: run.info.precision.clone(),
        ceiling_run_precision: run
            .info
            .ceilings
            .as_deref()
            .and_then(|c| crate::ceiling::total_in(c, &run.info.precision)),
        ceilings: run.info.ceilings.clone(),
        warnings: m.warnings,
    }
}

/// The grid step the recorded preset names (`preset.score_interval_s`), else the official
/// 0.1 h.
pub fn default_interval(run: &Run) -> f64 {
    json(&run.info.config_json)
        .pointer("/preset/score_interval_s")
        .and_then(serde_json::Value::as_f64)
        .filter(|v| v.is_finite() && *v > 0.0)
        .unwrap_or(OFFICIAL_INTERVAL_S)
}

/// Parses a recorded JSON text; damaged text reads as `null` (every rule on it then fails).
fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or(serde_json::Value::Null)
}

/// The verdict under [`RULES_VERSION`]: the rules table ([`crate::rules::RULES`]) over the
/// recorded configuration, dataset identity, search record and measured figures, plus the
/// records' own soundness — group files present, digest chains intact, every epoch's ops
/// recomputed — and the rules version recorded. INVALID outranks UNOFFICIAL.
fn verdict(
    run: &Run,
    duration_s: f64,
    ops_per_s: f64,
    final_error: f64,
    integrity: &Integrity,
) -> Verdict {
    let i = &run.info;
    let evidence = rules::evidence(
        &json(&i.config_json),
        &json(&i.dataset_json),
        &json(&i.search_json),
        duration_s,
        final_error,
    );
    let mut invalid = Vec::new();
    let mut unofficial = Vec::new();
    for d in rules::check(&evidence) {
        match d.rule.severity {
            Severity::Invalid => invalid.push(d.to_string()),
            Severity::Unofficial => unofficial.push(d.to_string()),
        }
    }
    invalid.extend(run.missing.iter().cloned());
    invalid.extend(integrity.problems.iter().cloned());
    if integrity.records == "incomplete" && run.info.run_digest.is_some() {
        invalid.push(
            "a group file the run recorded is missing: its rows cannot be verified or counted"
                .into(),
        );
    } else if integrity.records == "incomplete" {
        invalid.push("no run digest: the run did not stop cleanly, so nothing seals its attributes or vouches for its last rows (resume it with `aiperf run --resume` and let it reach its deadline)".into());
    }
    invalid.extend(crate::recount::recount(run));
    invalid.extend(crate::consistency::check(run, ops_per_s));
    if i.rules_version != RULES_VERSION {
        invalid.push(format!(
            "recorded under rules {}, scored under {RULES_VERSION}",
            i.rules_version
        ));
    }
    if i.schema_version != SCHEMA_VERSION {
        invalid.push(format!(
            "records of schema {}, scored under schema {SCHEMA_VERSION}: a result carries every field of the newest schema (score older records with the build that recorded them)",
            i.schema_version
        ));
    }
    let status = if !invalid.is_empty() {
        Status::Invalid
    } else if !unofficial.is_empty() {
        Status::Unofficial
    } else {
        Status::Valid
    };
    invalid.extend(unofficial);
    Verdict {
        rules: RULES_VERSION.into(),
        status,
        reasons: invalid,
    }
}

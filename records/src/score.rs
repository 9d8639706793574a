//! The score (DESIGN.md §5, a contract), computed from the records alone: the timeline of
//! operations per second and quality-regulated score on a grid of step Δ from t0, the final
//! values at the run's end, per-accelerator figures, totals, the time split, and the
//! validity verdict under the versioned rules.

use serde::Serialize;

use crate::error::RecordError;
use crate::reader::Run;
use crate::schema::RULES_VERSION;

/// The official grid step: 0.1 h.
pub const OFFICIAL_INTERVAL_S: f64 = 360.0;
/// The official minimum duration: 1 h.
pub const MIN_DURATION_S: f64 = 3600.0;
/// The largest final error of a valid run.
pub const MAX_FINAL_ERROR: f64 = 0.30;
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
    /// 1 − best validation accuracy so far (1 before any epoch).
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
    /// Training operations counted.
    pub train_ops: u128,
    /// Validation operations counted.
    pub val_ops: u128,
    /// Trials recorded.
    pub trials: usize,
    /// Epochs counted.
    pub epochs: usize,
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
    /// All-reduce bytes per all-reduce second (per rank).
    pub allreduce_bytes_per_s: f64,
    /// The same per counted epoch with an exchange: (min, median, max), bytes per second —
    /// to set beside `aiperf comm-bench`'s figures for the interconnect.
    pub allreduce_epoch_bytes_per_s: Option<(f64, f64, f64)>,
    /// Accelerator-busy fraction: seconds inside train/eval steps and exchanges (compute +
    /// all-reduce) of counted epochs, over groups × the run's duration.
    pub busy_fraction: f64,
    /// The validity verdict.
    pub verdict: Verdict,
    /// Qualifications of the result.
    pub warnings: Vec<String>,
}

/// Scores `run` with grid step `interval_s` (DESIGN.md §5).
pub fn score(run: &Run, interval_s: f64) -> Result<Score, RecordError> {
    assert!(interval_s > 0.0, "the grid step must be positive");
    let t0 = run.info.start_time_s;
    let mut epochs: Vec<_> = run.groups.iter().flat_map(|g| g.epochs.iter()).collect();
    if epochs.is_empty() {
        return Err(RecordError::Empty(run.dir.clone()));
    }
    epochs.sort_by(|a, b| a.time_s.total_cmp(&b.time_s));
    let mut warnings = run.warnings.clone();
    let last_epoch = epochs.last().expect("not empty").time_s;
    let t_end = run.info.end_time_s.unwrap_or(last_epoch);
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
    let duration_s = t_end - t0;
    if duration_s <= 0.0 {
        return Err(RecordError::Hdf5 {
            path: run.dir.clone(),
            message: format!("the run ends ({t_end}) before it starts ({t0})"),
        });
    }
    let mut grid: Vec<f64> = (1..)
        .map(|k| t0 + k as f64 * interval_s)
        .take_while(|&t| t < t_end)
        .collect();
    grid.push(t_end);
    let mut timeline = Vec::with_capacity(grid.len());
    let (mut i, mut ops, mut best) = (0usize, 0u128, None::<f64>);
    let mut floored = false;
    for &t in &grid {
        while i < epochs.len() && epochs[i].time_s <= t {
            ops += u128::from(epochs[i].train_ops) + u128::from(epochs[i].val_ops);
            best = Some(best.map_or(epochs[i].val_accuracy, |b: f64| {
                b.max(epochs[i].val_accuracy)
            }));
            i += 1;
        }
        let elapsed = t - t0;
        let ops_per_s = ops as f64 / elapsed;
        let raw_error = 1.0 - best.unwrap_or(0.0);
        floored |= raw_error < ERROR_FLOOR;
        let error = raw_error.max(ERROR_FLOOR);
        timeline.push(Point {
            elapsed_s: elapsed,
            ops,
            ops_per_s,
            error: raw_error,
            regulated: ops_per_s * -error.ln(),
        });
    }
    if floored {
        warnings.push(format!(
            "a validation accuracy of 1 makes −ln(error) infinite: error taken as {ERROR_FLOOR}"
        ));
    }
    let counted: Vec<_> = epochs.iter().filter(|e| e.time_s <= t_end).collect();
    let end = timeline.last().expect("grid ends at t_end").clone();
    let acc = run.info.accelerators.max(1);
    let sum =
        |f: &dyn Fn(&crate::schema::EpochRow) -> f64| counted.iter().map(|e| f(e)).sum::<f64>();
    let allreduce_s = sum(&|e| e.allreduce_s);
    let allreduce_bytes: u128 = counted.iter().map(|e| u128::from(e.allreduce_bytes)).sum();
    let best_accuracy = counted.iter().map(|e| e.val_accuracy).fold(0.0, f64::max);
    let verdict = verdict(run, duration_s, 1.0 - best_accuracy);
    Ok(Score {
        run: run.dir.display().to_string(),
        interval_s,
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
        ops_per_s_per_accelerator: end.ops_per_s / f64::from(acc),
        regulated_per_accelerator: end.regulated / f64::from(acc),
        train_ops: counted.iter().map(|e| u128::from(e.train_ops)).sum(),
        val_ops: counted.iter().map(|e| u128::from(e.val_ops)).sum(),
        trials: run.trials.len(),
        epochs: counted.len(),
        best_accuracy,
        compute_s: sum(&|e| e.compute_s),
        allreduce_s,
        allreduce_bytes,
        data_wait_s: sum(&|e| e.data_wait_s),
        allreduce_bytes_per_s: if allreduce_s > 0.0 {
            allreduce_bytes as f64 / allreduce_s
        } else {
            0.0
        },
        allreduce_epoch_bytes_per_s: {
            let mut bw: Vec<f64> = counted
                .iter()
                .filter(|e| e.allreduce_s > 0.0 && e.allreduce_bytes > 0)
                .map(|e| e.allreduce_bytes as f64 / e.allreduce_s)
                .collect();
            bw.sort_by(f64::total_cmp);
            (!bw.is_empty()).then(|| (bw[0], bw[bw.len() / 2], bw[bw.len() - 1]))
        },
        busy_fraction: (sum(&|e| e.compute_s) + allreduce_s)
            / (run.groups.len().max(1) as f64 * duration_s),
        timeline,
        verdict,
        warnings,
    })
}

/// The rules: configuration deviations make a result unofficial; broken rules make it invalid.
fn verdict(run: &Run, duration_s: f64, final_error: f64) -> Verdict {
    let i = &run.info;
    let mut unofficial = Vec::new();
    let mut invalid = Vec::new();
    if i.dataset != "imagenet" {
        unofficial.push(format!("dataset {} (official: imagenet)", i.dataset));
    }
    if i.start_architecture != "resnet50" {
        unofficial.push(format!(
            "start architecture {} (official: resnet50)",
            i.start_architecture
        ));
    }
    if !i.fixed_algorithms {
        unofficial.push("search or HPO algorithms differ from the rules' fixed ones".into());
    }
    if !["fp32", "tf32", "bf16", "fp16"].contains(&i.precision.as_str()) {
        invalid.push(format!("precision {} is below FP16", i.precision));
    }
    if duration_s < MIN_DURATION_S {
        invalid.push(format!(
            "ran {:.0} s, the rules require at least {MIN_DURATION_S:.0} s (1 h)",
            duration_s
        ));
    }
    if final_error > MAX_FINAL_ERROR {
        invalid.push(format!(
            "final error {:.1}% exceeds {:.0}%",
            100.0 * final_error,
            100.0 * MAX_FINAL_ERROR
        ));
    }
    if i.rules_version != RULES_VERSION {
        invalid.push(format!(
            "recorded under rules {}, scored under {RULES_VERSION}",
            i.rules_version
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

//! The audit's judgement, recomputed from the recorded and re-trained figures alone (never
//! read from a stored flag), by `aiperf audit` when it writes `audit.h5` and by every scorer
//! that reads it (docs/design.md §5; results/README.md defines it for independent scorers).
//!
//! Counts — images, steps, operations — must be equal in every mode. *Exact* mode: every
//! re-trained loss and accuracy bit-identical to its record. *Statistical* mode: per value
//! kind (train loss, validation loss, validation accuracy), the spread of the re-trainings
//! of each compared epoch about their mean is pooled over the epochs compared (an epoch
//! whose own re-trainings spread wider keeps its own); a recorded figure may not be
//! *better* than its epoch's re-trainings — accuracy higher, a loss lower — by more than
//! the one-sided prediction interval at family-wise α (Bonferroni over every value
//! compared). A figure worse than the re-trainings is shown, never failed: honest first
//! epochs scatter far below their re-trainings now and then (docs/reviewer.md), and a worse
//! figure claims nothing. `--timed` adds: no recorded epoch faster than this machine
//! re-trains it, beyond the spread measured here.

use serde::Serialize;

use super::stats::t_quantile;
use super::{Audit, AuditRow, Mode};

/// Smallest spread assumed for validation accuracy (absolute), so that re-trainings that
/// happen to agree exactly do not make the interval vanish.
pub const ACCURACY_FLOOR: f64 = 0.002;
/// Smallest spread assumed for a loss, relative to its epoch's mean.
pub const LOSS_FLOOR: f64 = 0.002;
/// Smallest slack granted an epoch's time under `--timed`, relative.
pub const TIME_SLACK: f64 = 0.10;
/// Largest slack granted under `--timed`, relative: however noisy the re-trainings, an epoch
/// recorded in under half the fastest of them fails (without a cap, a busy node whose
/// repeats vary by a third would switch the check off).
pub const TIME_SLACK_MAX: f64 = 0.50;

/// How far a trial's first [`STEPS_JUDGED`] steps may lie from their re-training on
/// another platform, as the relative gap |recorded − re-trained| / |re-trained| of each.
/// Re-trained with other kernels or threads, every trial measured agreed to 3e-7 or better
/// there — later steps part faster in some trainings than in others, up to 3e-2 by the
/// seventh — while another seed, architecture or batch parts them by about 1e-2 from the
/// first step (docs/reviewer.md, `scripts/bench/bench-early-steps`).
pub const STEP_TOLERANCE: f64 = 1e-4;
/// The early steps judged: the first ones, before the platforms' rounding has grown; the
/// later recorded steps are compared and shown, not judged.
pub const STEPS_JUDGED: usize = 2;

/// The three compared values, in the order the audit lists them.
pub const KINDS: [&str; 3] = ["train_loss", "val_loss", "val_accuracy"];

/// One compared value of one epoch.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    /// The trial's group.
    pub group: u32,
    /// Its model id.
    pub model_id: u64,
    /// The epoch.
    pub epoch: u32,
    /// Which value ([`KINDS`]).
    pub value: &'static str,
    /// The recorded figure.
    pub recorded: f64,
    /// The mean of the re-trainings.
    pub mean: f64,
    /// The interval's scale: the larger of the pooled spread, this epoch's own spread and
    /// the floor, × √(1 + 1/n).
    pub scale: f64,
    /// How much better than the mean the record is, in scales: (recorded − mean) / scale
    /// for accuracy, (mean − recorded) / scale for a loss; in exact mode 0 or ∞.
    pub z: f64,
    /// The critical z of its epoch's stratum (statistical mode), else 0.
    pub critical: f64,
    /// Whether it lies inside the interval (exact mode: bit-identical).
    pub agrees: bool,
}

/// The early steps compared: the trial's identity on any platform.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Steps {
    /// Steps compared.
    pub compared: usize,
    /// Trials they belong to.
    pub trials: usize,
    /// Statistical mode: the largest relative gap of a judged step; exact mode: the largest
    /// relative gap of any step (0 when every step is bit-identical).
    pub largest_gap: f64,
    /// The gap allowed ([`STEP_TOLERANCE`]; exact mode: 0).
    pub tolerance: f64,
}

/// The smallest uniform shift of one value kind this audit would have caught.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Power {
    /// The value kind.
    pub value: &'static str,
    /// The shift, in the direction a forger would move it (accuracy up, losses down): the
    /// smaller of what the combined test and the most sensitive single figure catch.
    pub shift: f64,
    /// The combined test's estimate of how much better the records are than their
    /// re-trainings on the whole (the inverse-variance weighted mean; < 0: worse).
    pub combined: f64,
    /// Its standard error.
    pub combined_se: f64,
    /// The combined test's critical z.
    pub combined_critical: f64,
    /// Degrees of freedom of the spreads, summed over the strata.
    pub df: u32,
}

/// The judgement of an audit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Judgement {
    /// `PASSED` or `FAILED`.
    pub verdict: &'static str,
    /// The critical z (statistical mode, one-sided), else 0.
    pub critical: f64,
    /// Every compared value.
    pub findings: Vec<Finding>,
    /// Per value kind, what this evidence could detect (statistical mode).
    pub power: Vec<Power>,
    /// The early steps compared.
    pub steps: Steps,
    /// Every disagreement, in words, naming group, model, epoch and value.
    pub failures: Vec<String>,
}

fn name(r: &AuditRow) -> String {
    format!("group {} model {} epoch {}", r.group, r.model_id, r.epoch)
}

fn value(r: &AuditRow, kind: usize) -> [f64; 2] {
    [r.train_loss, r.val_loss, r.val_accuracy][kind]
}

/// Counts that differ between record and re-training, in words.
fn count_failures(r: &AuditRow) -> Vec<String> {
    [
        ("train_images", r.train_images),
        ("steps", r.steps),
        ("val_images", r.val_images),
        ("train_ops", r.train_ops),
        ("val_ops", r.val_ops),
    ]
    .iter()
    .filter(|(_, [a, b])| a != b)
    .map(|(n, [a, b])| format!("{}: {n} recorded {a}, re-trained {b}", name(r)))
    .collect()
}

/// Every re-training of row `i`'s value `kind`: the row's own, then its seed rows'.
fn samples(a: &Audit, i: usize, kind: usize) -> Vec<f64> {
    let r = &a.rows[i];
    let mut v = vec![value(r, kind)[1]];
    v.extend(
        a.seed_rows
            .iter()
            .filter(|s| (s.group, s.model_id, s.epoch) == (r.group, r.model_id, r.epoch))
            .map(|s| [s.train_loss, s.val_loss, s.val_accuracy][kind]),
    );
    v
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Judges `a` from its rows alone.
pub fn judge(a: &Audit) -> Judgement {
    let mut failures: Vec<String> = a.rows.iter().flat_map(count_failures).collect();
    let mut j = Judgement {
        verdict: "PASSED",
        critical: 0.0,
        findings: Vec::new(),
        power: Vec::new(),
        steps: Steps::default(),
        failures: Vec::new(),
    };
    match a.mode {
        Mode::Exact => exact(a, &mut j),
        Mode::Statistical => failures.extend(statistical(a, &mut j)),
    }
    failures.extend(
        j.findings
            .iter()
            .filter(|f| !f.agrees)
            .map(|f| describe(f, a.mode)),
    );
    failures.extend(early_steps(a, &mut j.steps));
    if a.timed {
        failures.extend(timed(a));
    }
    j.verdict = if failures.is_empty() {
        "PASSED"
    } else {
        "FAILED"
    };
    j.failures = failures;
    j
}

fn describe(f: &Finding, mode: Mode) -> String {
    let critical = f.critical;
    let head = format!("group {} model {} epoch {}", f.group, f.model_id, f.epoch);
    match mode {
        Mode::Exact => format!(
            "{head}: {} recorded {}, re-trained {}",
            f.value, f.recorded, f.mean
        ),
        Mode::Statistical => format!(
            "{head}: {} recorded {:.6}, re-trained mean {:.6} (interval scale {:.6}): better by z = {:.2}, beyond {critical:.2}",
            f.value, f.recorded, f.mean, f.scale, f.z
        ),
    }
}

/// Exact mode: every re-training (repeats included) bit-identical to the record.
fn exact(a: &Audit, j: &mut Judgement) {
    for (i, r) in a.rows.iter().enumerate() {
        for (k, kind) in KINDS.iter().enumerate() {
            let rec = value(r, k)[0];
            let all = samples(a, i, k);
            let differs = all.iter().find(|x| x.to_bits() != rec.to_bits());
            j.findings.push(Finding {
                group: r.group,
                model_id: r.model_id,
                epoch: r.epoch,
                value: kind,
                recorded: rec,
                mean: *differs.unwrap_or(&rec),
                scale: 0.0,
                z: if differs.is_some() {
                    f64::INFINITY
                } else {
                    0.0
                },
                critical: 0.0,
                agrees: differs.is_none(),
            });
        }
    }
}

/// The standard deviation of `v` about `m` (n − 1 in the denominator; 0 for one value).
fn spread_of(v: &[f64], m: f64) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// Each row's stratum spread: over the rows of the same epoch number, the median of their
/// own spreads (each divided by the median of a spread of that many re-trainings under
/// normality, Wilson–Hilferty's √((1 − 2/(9k))³) for k degrees of freedom), so that one trial
/// whose seeds scatter wide neither narrows nor widens the others' intervals (it keeps its
/// own); with the degrees of freedom the median is worth, ⌈(2/π) Σ (n − 1)⌉.
fn strata(per_row: &[Vec<f64>], epochs: &[u32]) -> Vec<(f64, usize)> {
    epochs
        .iter()
        .map(|&e| {
            let mine: Vec<&Vec<f64>> = (per_row.iter().zip(epochs))
                .filter(|(_, &x)| x == e)
                .map(|(v, _)| v)
                .collect();
            let df: usize = mine.iter().map(|v| v.len() - 1).sum();
            let spreads: Vec<f64> = (mine.iter())
                .filter(|v| v.len() > 1)
                .map(|v| {
                    let k = (v.len() - 1) as f64;
                    spread_of(v, mean(v)) / (1.0 - 2.0 / (9.0 * k)).powi(3).sqrt()
                })
                .collect();
            if spreads.is_empty() {
                return (0.0, 0);
            }
            let worth = (df as f64 * 2.0 / std::f64::consts::PI).ceil() as usize;
            (median(spreads), worth)
        })
        .collect()
}

/// The Student-t quantile `1 − p` with `df` degrees of freedom; none: nothing can be told.
fn critical(p: f64, df: usize) -> f64 {
    if df > 0 {
        t_quantile(1.0 - p, df as f64)
    } else {
        f64::INFINITY
    }
}

/// Statistical mode, per value kind: every figure against its epoch's prediction interval
/// (the spread pooled over its stratum, one-sided, Bonferroni over every value compared at
/// α/2), and every figure together by the combined test (the inverse-variance weighted
/// mean improvement over its standard error, one-sided, Bonferroni over the kinds at α/2).
/// Returns the combined tests' failures.
fn statistical(a: &Audit, j: &mut Judgement) -> Vec<String> {
    let compared = (a.rows.len() * KINDS.len()).max(1) as f64;
    let epochs: Vec<u32> = a.rows.iter().map(|r| r.epoch).collect();
    let mut failures = Vec::new();
    for (k, kind) in KINDS.iter().enumerate() {
        let per_row: Vec<Vec<f64>> = (0..a.rows.len()).map(|i| samples(a, i, k)).collect();
        let pooled = strata(&per_row, &epochs);
        let mut df_total = 0;
        let mut seen = Vec::new();
        let (mut single, mut wsum, mut wd) = (f64::INFINITY, 0.0, 0.0);
        for ((r, v), &(spread, df)) in a.rows.iter().zip(&per_row).zip(&pooled) {
            if !seen.contains(&r.epoch) {
                seen.push(r.epoch);
                df_total += df;
            }
            let m = mean(v);
            let floor = if k == 2 {
                ACCURACY_FLOOR
            } else {
                LOSS_FLOOR * m.abs()
            };
            let own = spread_of(v, m);
            let scale = spread.max(own).max(floor) * (1.0 + 1.0 / v.len() as f64).sqrt();
            let rec = value(r, k)[0];
            // A forger raises accuracy and lowers losses: z counts in that direction.
            let better = if k == 2 { rec - m } else { m - rec };
            let z = better / scale;
            let crit = critical(a.alpha / 2.0 / compared, df);
            single = single.min((crit * scale - better).max(0.0));
            wsum += 1.0 / (scale * scale);
            wd += better / (scale * scale);
            j.critical = j.critical.max(crit);
            j.findings.push(Finding {
                group: r.group,
                model_id: r.model_id,
                epoch: r.epoch,
                value: kind,
                recorded: rec,
                mean: m,
                scale,
                z,
                critical: crit,
                agrees: z <= crit,
            });
        }
        let (combined, se) = if wsum > 0.0 {
            (wd / wsum, 1.0 / wsum.sqrt())
        } else {
            (0.0, f64::INFINITY)
        };
        let crit = critical(a.alpha / 2.0 / KINDS.len() as f64, df_total);
        if combined > crit * se {
            failures.push(format!(
                "{kind}: the recorded figures are better than their re-trainings on the whole by {combined:.6} (standard error {se:.6}, {} epochs): z = {:.2}, beyond {crit:.2}",
                a.rows.len(),
                combined / se
            ));
        }
        j.power.push(Power {
            value: kind,
            shift: single.min((crit * se - combined).max(0.0)),
            combined,
            combined_se: se,
            combined_critical: crit,
            df: df_total as u32,
        });
    }
    failures
}

/// The relative gap of one step (∞ when it cannot be computed).
fn step_gap(rec: f64, re: f64) -> f64 {
    let gap = (rec - re).abs() / re.abs().max(f64::MIN_POSITIVE);
    if gap.is_nan() {
        f64::INFINITY
    } else {
        gap
    }
}

/// The median of `v` (not empty).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// The early steps, per trial: every step bit-identical in exact mode; elsewhere each of its
/// first [`STEPS_JUDGED`] steps within [`STEP_TOLERANCE`] relative. A step the records lack
/// fails.
fn early_steps(a: &Audit, out: &mut Steps) -> Vec<String> {
    let exact = a.mode == Mode::Exact;
    out.tolerance = if exact { 0.0 } else { STEP_TOLERANCE };
    out.compared = a.step_rows.len();
    let mut trials: Vec<(u32, u64)> = a.step_rows.iter().map(|s| (s.group, s.model_id)).collect();
    trials.dedup();
    out.trials = trials.len();
    let mut failures = Vec::new();
    for (group, model) in trials {
        let head = format!("group {group} model {model}");
        let rows: Vec<_> = (a.step_rows.iter())
            .filter(|s| (s.group, s.model_id) == (group, model))
            .collect();
        if let Some(s) = rows.iter().find(|s| !s.train_loss[0].is_finite()) {
            failures.push(format!(
                "{head} step {}: no training loss recorded (re-trained {}): the records lack the trial's early steps",
                s.step, s.train_loss[1]
            ));
            continue;
        }
        let judged = &rows[..rows.len().min(STEPS_JUDGED)];
        let gaps: Vec<f64> = (judged.iter())
            .map(|s| step_gap(s.train_loss[0], s.train_loss[1]))
            .collect();
        let (worst, largest) =
            gaps.iter().enumerate().fold(
                (0, 0.0_f64),
                |(w, g), (i, &x)| if x > g { (i, x) } else { (w, g) },
            );
        let judged_largest = gaps.iter().copied().fold(0.0, f64::max);
        let first_differing =
            (rows.iter()).find(|s| s.train_loss[0].to_bits() != s.train_loss[1].to_bits());
        let (s, differs) = match (exact, first_differing) {
            (true, Some(d)) => (*d, true),
            (true, None) => (rows[worst], false),
            (false, _) => (rows[worst], judged_largest > STEP_TOLERANCE),
        };
        let largest = if exact {
            step_gap(s.train_loss[0], s.train_loss[1])
        } else {
            largest
        };
        out.largest_gap = out
            .largest_gap
            .max(if exact { largest } else { judged_largest });
        if differs {
            failures.push(format!(
                "{head} step {}: early-step training loss recorded {}, re-trained {} (relative gap {largest:.2e}; {}): the records are not this trial's training",
                s.step,
                s.train_loss[0],
                s.train_loss[1],
                if exact {
                    "bit-identical required".to_string()
                } else {
                    format!("the first {} steps judged, tolerance {STEP_TOLERANCE:.0e}", judged.len())
                }
            ));
        }
    }
    failures
}

/// `--timed`: each recorded epoch's duration against this machine's re-trainings of it.
fn timed(a: &Audit) -> Vec<String> {
    let mut out = Vec::new();
    for r in &a.rows {
        let mut times = vec![r.seconds[1]];
        times.extend(
            a.seed_rows
                .iter()
                .filter(|s| (s.group, s.model_id, s.epoch) == (r.group, r.model_id, r.epoch))
                .map(|s| s.seconds),
        );
        if times.iter().any(|t| !t.is_finite()) || !r.seconds[0].is_finite() {
            out.push(format!("{}: no epoch time to compare", name(r)));
            continue;
        }
        let m = mean(&times);
        let sd = if times.len() > 1 {
            (times.iter().map(|t| (t - m) * (t - m)).sum::<f64>() / (times.len() - 1) as f64).sqrt()
        } else {
            0.0
        };
        let slack = (3.0 * sd / m).clamp(TIME_SLACK, TIME_SLACK_MAX);
        let fastest = times.iter().copied().fold(f64::INFINITY, f64::min);
        if r.seconds[0] < fastest * (1.0 - slack) {
            out.push(format!(
                "{}: epoch time recorded {:.3} s, this machine needs at least {:.3} s ({} re-trainings, slack {:.0}%): the recorded throughput is not this machine's",
                name(r),
                r.seconds[0],
                fastest,
                times.len(),
                slack * 100.0
            ));
        }
    }
    out
}

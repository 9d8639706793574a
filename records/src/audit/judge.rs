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
    /// Whether it lies inside the interval (exact mode: bit-identical).
    pub agrees: bool,
}

/// The smallest uniform shift of one value kind this audit would have caught.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Power {
    /// The value kind.
    pub value: &'static str,
    /// The shift, in the direction a forger would move it (accuracy up, losses down).
    pub shift: f64,
    /// The pooled spread of the re-trainings (before the floor).
    pub spread: f64,
    /// Degrees of freedom of the pooled spread.
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
        failures: Vec::new(),
    };
    match a.mode {
        Mode::Exact => exact(a, &mut j),
        Mode::Statistical => statistical(a, &mut j),
    }
    failures.extend(
        j.findings
            .iter()
            .filter(|f| !f.agrees)
            .map(|f| describe(f, a.mode, j.critical)),
    );
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

fn describe(f: &Finding, mode: Mode, critical: f64) -> String {
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

/// Statistical mode: pooled spread per kind, one-sided, Bonferroni over every compared value.
fn statistical(a: &Audit, j: &mut Judgement) {
    let compared = (a.rows.len() * KINDS.len()).max(1) as f64;
    for (k, kind) in KINDS.iter().enumerate() {
        let per_row: Vec<Vec<f64>> = (0..a.rows.len()).map(|i| samples(a, i, k)).collect();
        let (ss, df) = per_row.iter().fold((0.0, 0usize), |(ss, df), v| {
            let m = mean(v);
            let dev: f64 = v.iter().map(|x| (x - m) * (x - m)).sum();
            (ss + dev, df + v.len() - 1)
        });
        let spread = if df > 0 { (ss / df as f64).sqrt() } else { 0.0 };
        // No degrees of freedom (one re-training each): nothing can be told apart.
        let critical = if df > 0 {
            t_quantile(1.0 - a.alpha / compared, df as f64)
        } else {
            f64::INFINITY
        };
        j.critical = critical;
        let mut shift = f64::INFINITY;
        for (r, v) in a.rows.iter().zip(&per_row) {
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
            let room = critical * scale - better;
            shift = shift.min(room.max(0.0));
            j.findings.push(Finding {
                group: r.group,
                model_id: r.model_id,
                epoch: r.epoch,
                value: kind,
                recorded: rec,
                mean: m,
                scale,
                z,
                agrees: z <= critical,
            });
        }
        j.power.push(Power {
            value: kind,
            shift,
            spread,
            df: df as u32,
        });
    }
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

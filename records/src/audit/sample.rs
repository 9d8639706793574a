//! An `audit.h5` held against the records it names: its sample is the one the run digest and
//! its draw give (the drawn trials and the trial holding the best accuracy), and every
//! recorded figure it shows is the record's. An audit whose rows are not these records'
//! is not their audit, however well sealed.

use super::{sample, sample_seed, Audit, AuditRow};
use crate::digest::{parse_hex, Wanted};
use crate::reader::Run;

/// The trial (index into `run.trials`) holding the run's best validation accuracy and the
/// first epoch that reached it: ties go to the first in record order, trial by trial, epoch
/// by epoch.
pub fn best_trial(run: &Run) -> Option<(usize, u32)> {
    let mut best: Option<(usize, u32, f64)> = None;
    for (i, t) in run.trials.iter().enumerate() {
        let Some(g) = run.groups.iter().find(|g| g.group == t.group) else {
            continue;
        };
        for e in g.epochs.iter().filter(|e| e.model_id == t.model_id) {
            if best.is_none_or(|(_, _, a)| e.val_accuracy > a) {
                best = Some((i, e.epoch, e.val_accuracy));
            }
        }
    }
    best.map(|(i, e, _)| (i, e))
}

/// Whether the recorded half of `r` is the record's epoch row.
fn shows_the_record(r: &AuditRow, run: &Run) -> bool {
    let Some(e) = (run.groups.iter())
        .filter(|g| g.group == r.group)
        .flat_map(|g| &g.epochs)
        .find(|e| e.model_id == r.model_id && e.epoch == r.epoch)
    else {
        return false;
    };
    let bits = |a: f64, b: f64| a.to_bits() == b.to_bits();
    [
        e.train_images,
        e.steps,
        e.val_images,
        e.train_ops,
        e.val_ops,
    ] == [
        r.train_images[0],
        r.steps[0],
        r.val_images[0],
        r.train_ops[0],
        r.val_ops[0],
    ] && bits(e.train_loss, r.train_loss[0])
        && bits(e.val_loss, r.val_loss[0])
        && bits(e.val_accuracy, r.val_accuracy[0])
}

/// Why `a` is not the audit of `run`'s records (empty: its sample and rows are theirs).
pub fn against_records(a: &Audit, run: &Run) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(digest) = parse_hex(&a.run_digest, Wanted::Run) else {
        return out;
    };
    let seed = sample_seed(&digest, a.draw);
    if seed != a.sample_seed {
        out.push(format!(
            "audit.h5: its sample seed {:#018x} is not the one its draw {:#018x} and the run digest give ({seed:#018x}): the audit was altered",
            a.sample_seed, a.draw
        ));
    }
    let mut audited: Vec<u64> = a.rows.iter().map(|r| r.model_id).collect();
    audited.dedup();
    let best = best_trial(run).map(|(i, _)| i);
    // `trials` counts the drawn ones plus the best one when it was not drawn.
    let fits = [a.trials as usize, (a.trials as usize).saturating_sub(1)]
        .iter()
        .any(|&n| {
            let mut want = sample(&run.trials, n, seed);
            if let Some(b) = best.filter(|b| !want.contains(b)) {
                want.push(b);
                want.sort_unstable();
            }
            let ids: Vec<u64> = want.iter().map(|&i| run.trials[i].model_id).collect();
            ids == audited && want.len() == a.trials as usize
        });
    if !fits {
        out.push(format!(
            "audit.h5 re-trained models {audited:?}, which are not the sample its draw gives these records (with the trial holding the best accuracy): it is not their audit"
        ));
    }
    if let Some(r) = a.rows.iter().find(|r| !shows_the_record(r, run)) {
        out.push(format!(
            "audit.h5 group {} model {} epoch {}: its recorded figures are not the records' epoch row: it is not their audit",
            r.group, r.model_id, r.epoch
        ));
    }
    out
}

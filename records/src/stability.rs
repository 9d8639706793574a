//! The stability figures of docs/design.md §5, reported beside the score (which stays OPS at the
//! run's end): the warm-up end, the steady-state OPS after it, and the convergence test of
//! the cumulative OPS.

use serde::Serialize;

use crate::schema::{EpochRow, TrialRow, TrialStatus};

/// Rounds of warm-up (budgets ¼, ½, ¾ of the full one): a group's warm-up ends with its
/// third trial.
pub const WARMUP_TRIALS: u32 = 3;
/// The convergence window: at least this many seconds (0.1 h)…
pub const MIN_WINDOW_S: f64 = 360.0;
/// …and at least this fraction of the duration.
pub const WINDOW_FRACTION: f64 = 0.10;
/// Cumulative OPS has converged when it moved by at most this fraction over the window.
pub const CONVERGENCE_TOLERANCE: f64 = 0.02;

/// The stability figures of one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stability {
    /// t_w − t0: the latest end, over groups, of a group's third trial; `None` when a group
    /// never finished its warm-up.
    pub warmup_end_s: Option<f64>,
    /// Groups that never finished their warm-up (when `warmup_end_s` is `None`).
    pub groups_in_warmup: Vec<u32>,
    /// Σ ops of epochs completed in (t_w, t_end] / (t_end − t_w).
    pub steady_ops_per_s: Option<f64>,
    /// The convergence window w, seconds.
    pub window_s: f64,
    /// OPS(t_end − w): cumulative OPS one window before the end (`None`: the run is shorter
    /// than the window).
    pub ops_per_s_window_before: Option<f64>,
    /// |OPS(t_end) − OPS(t_end − w)| ≤ 2 % of OPS(t_end) (`None`: untestable).
    pub converged: Option<bool>,
}

/// Operations of the epochs completed in `(from, to]`, in absolute Unix seconds.
fn ops_between(epochs: &[&EpochRow], from: f64, to: f64) -> u128 {
    epochs
        .iter()
        .filter(|e| e.time_s > from && e.time_s <= to)
        .map(|e| u128::from(e.train_ops) + u128::from(e.val_ops))
        .sum()
}

/// The warm-up end (absolute) over `groups` (each with its epoch rows), or the groups that
/// had not finished it. A group's warm-up ends with the last epoch row of its first three
/// trials (rounds 0–2), once its trial rows show the third finished (not stopped): the
/// time comes from the sealed, consistency-checked epoch rows, not the trial rows' times.
fn warmup_end(trials: &[TrialRow], groups: &[(u32, &[EpochRow])]) -> Result<f64, Vec<u32>> {
    let mut end = f64::NEG_INFINITY;
    let mut unfinished = Vec::new();
    for &(g, rows) in groups {
        let third = trials.iter().any(|t| {
            t.group == g && t.round == WARMUP_TRIALS - 1 && t.status != TrialStatus::Stopped
        });
        let last = rows
            .iter()
            .filter(|e| e.trial < u64::from(WARMUP_TRIALS))
            .map(|e| e.time_s)
            .fold(f64::NEG_INFINITY, f64::max);
        if third && last.is_finite() {
            end = end.max(last);
        } else {
            unfinished.push(g);
        }
    }
    if unfinished.is_empty() && end.is_finite() {
        Ok(end)
    } else {
        Err(unfinished)
    }
}

/// The stability figures over `epochs` (any order) of a run from `t0` to `t_end`, whose
/// `groups` (each with its epoch rows) trained `trials`.
pub fn stability(
    t0: f64,
    t_end: f64,
    epochs: &[&EpochRow],
    trials: &[TrialRow],
    groups: &[(u32, &[EpochRow])],
) -> Stability {
    let duration = t_end - t0;
    let window_s = MIN_WINDOW_S.max(WINDOW_FRACTION * duration);
    let end_ops = ops_between(epochs, f64::NEG_INFINITY, t_end) as f64 / duration;
    let before = t_end - window_s;
    let ops_per_s_window_before = (before > t0)
        .then(|| ops_between(epochs, f64::NEG_INFINITY, before) as f64 / (before - t0));
    let converged = ops_per_s_window_before
        .filter(|_| end_ops > 0.0)
        .map(|b| (end_ops - b).abs() <= CONVERGENCE_TOLERANCE * end_ops);
    let (warmup_end_s, groups_in_warmup, steady_ops_per_s) = match warmup_end(trials, groups) {
        Ok(t_w) => {
            let steady =
                (t_w < t_end).then(|| ops_between(epochs, t_w, t_end) as f64 / (t_end - t_w));
            (Some(t_w - t0), Vec::new(), steady)
        }
        Err(unfinished) => (None, unfinished, None),
    };
    Stability {
        warmup_end_s,
        groups_in_warmup,
        steady_ops_per_s,
        window_s,
        ops_per_s_window_before,
        converged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epoch(t: f64, ops: u64) -> EpochRow {
        EpochRow {
            time_s: t,
            trial: 0,
            model_id: 0,
            epoch: 1,
            train_images: 1,
            steps: 1,
            val_images: 1,
            train_ops: ops,
            val_ops: 0,
            train_loss: 1.0,
            val_loss: 1.0,
            val_accuracy: 0.5,
            compute_s: 0.0,
            allreduce_s: 0.0,
            allreduce_bytes: 0,
            data_wait_s: 0.0,
            digest: [0; 32],
        }
    }

    fn trial(group: u32, round: u32, end_s: f64, status: TrialStatus) -> TrialRow {
        TrialRow {
            model_id: 0,
            father: -1,
            group,
            round,
            batch_size: 32,
            kernel_size: 3,
            epochs: 1,
            best_accuracy: 0.5,
            reported_accuracy: 0.5,
            start_s: 0.0,
            end_s,
            status,
            digest: [0; 32],
        }
    }

    /// A group's rows of rounds 0–2 (the last at `warmup_end`) and a later one.
    fn group_rows(warmup_end: f64) -> Vec<EpochRow> {
        let mut later = epoch(warmup_end + 50.0, 1);
        later.trial = 3;
        let mut third = epoch(warmup_end, 1);
        third.trial = 2;
        vec![epoch(warmup_end - 50.0, 1), third, later]
    }

    #[test]
    fn warm_up_ends_with_the_latest_third_trial_and_steady_ops_count_after_it() {
        // t0 = 0, end 4000 s; 100 ops every 100 s.
        let rows: Vec<_> = (1..=40).map(|k| epoch(100.0 * k as f64, 100)).collect();
        let e: Vec<&EpochRow> = rows.iter().collect();
        // The trial rows' end times are not what decides: the epoch rows are.
        let trials = [
            trial(0, 2, 1.0, TrialStatus::Finished),
            trial(1, 2, 2.0, TrialStatus::Failed),
            trial(1, 1, 3000.0, TrialStatus::Finished),
        ];
        let (g0, g1) = (group_rows(1000.0), group_rows(1500.0));
        let s = stability(0.0, 4000.0, &e, &trials, &[(0, &g0), (1, &g1)]);
        assert_eq!(s.warmup_end_s, Some(1500.0));
        // Epochs at 1600..=4000: 25 × 100 ops over 2500 s.
        assert_eq!(s.steady_ops_per_s, Some(1.0));
        // w = max(360, 400) = 400: OPS(3600) = 3600/3600 = 1 = OPS(4000).
        assert_eq!(s.window_s, 400.0);
        assert_eq!(s.converged, Some(true));
    }

    #[test]
    fn a_group_still_in_warm_up_leaves_it_undefined_and_growth_is_not_convergence() {
        // Accelerating work: 10 ops per epoch for the first half, then 1000.
        let rows: Vec<_> = (1..=40)
            .map(|k| epoch(100.0 * k as f64, if k <= 20 { 10 } else { 1000 }))
            .collect();
        let e: Vec<&EpochRow> = rows.iter().collect();
        let trials = [
            trial(0, 2, 1000.0, TrialStatus::Finished),
            trial(1, 2, 3900.0, TrialStatus::Stopped),
        ];
        let (g0, g1) = (group_rows(1000.0), group_rows(3900.0));
        let s = stability(0.0, 4000.0, &e, &trials, &[(0, &g0), (1, &g1)]);
        assert_eq!(s.warmup_end_s, None);
        assert_eq!(s.groups_in_warmup, vec![1]);
        assert_eq!(s.steady_ops_per_s, None);
        assert_eq!(s.converged, Some(false));
    }

    #[test]
    fn a_run_shorter_than_the_window_cannot_be_tested() {
        let rows = [epoch(100.0, 5)];
        let e: Vec<&EpochRow> = rows.iter().collect();
        let s = stability(0.0, 300.0, &e, &[], &[(0, &rows)]);
        assert_eq!(s.window_s, 360.0);
        assert_eq!(s.ops_per_s_window_before, None);
        assert_eq!(s.converged, None);
    }
}

//! The training rules of docs/design.md §3 as pure functions: the learning rate as a function of
//! (epoch, step), the epoch budget and patience of each round, early stopping on validation
//! loss, and the predicted final accuracy reported to the search during warm-up rounds.

use serde::{Deserialize, Serialize};

/// Learning rate: linear warm-up from 0 over `warmup_epochs`, then cosine decay to 0 at
/// `total_epochs`. A pure function of (epoch, step), so every rank and every restart agrees.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LrSchedule {
    /// Peak learning rate.
    pub base_lr: f64,
    /// Epochs of linear warm-up.
    pub warmup_epochs: f64,
    /// Epochs until the rate reaches 0.
    pub total_epochs: f64,
}

impl LrSchedule {
    /// The rate at `step` (0-based) of `steps_per_epoch` in `epoch` (0-based).
    pub fn lr(&self, epoch: u32, step: u32, steps_per_epoch: u32) -> f64 {
        let t = f64::from(epoch) + f64::from(step) / f64::from(steps_per_epoch.max(1));
        if t < self.warmup_epochs {
            return self.base_lr * t / self.warmup_epochs;
        }
        let span = (self.total_epochs - self.warmup_epochs).max(f64::MIN_POSITIVE);
        let progress = ((t - self.warmup_epochs) / span).clamp(0.0, 1.0);
        self.base_lr * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
    }
}

/// A group's first rounds are its warm-up (0-based rounds 0..3; docs/design.md §2–§3): they
/// train part of the epoch budget ([`epoch_budget`]), take their father's (or the default)
/// hyperparameters instead of TPE's, and report a predicted final accuracy to the search.
pub const WARMUP_ROUNDS: u32 = 3;

/// Whether 0-based `round` is a warm-up round ([`WARMUP_ROUNDS`]).
pub fn in_warm_up(round: u32) -> bool {
    round < WARMUP_ROUNDS
}

/// The epoch budget of a group's `round` (1-based): the reference's warm-up rounds train
/// 15, 30 and 45 of 60 epochs, i.e. ¼, ½ and ¾ of the full budget; later rounds the full one.
pub fn epoch_budget(round: u32, full_epochs: u32) -> u32 {
    let quarters = round.clamp(1, WARMUP_ROUNDS + 1);
    (full_epochs * quarters).div_ceil(4).max(1)
}

/// Patience in epochs of `round`: min(6 + 2·round, 20), scaled by the preset (`scale` = its
/// full budget / 60) and at least 1.
pub fn patience(round: u32, scale: f64) -> u32 {
    let base = (6 + 2 * round).min(20);
    ((f64::from(base) * scale).round() as u32).max(1)
}

/// Early stopping on validation loss: stop after `patience` epochs without an improvement of
/// at least `min_delta` (0.001 by docs/design.md).
#[derive(Clone, Debug, PartialEq)]
pub struct EarlyStopping {
    best: f64,
    bad_epochs: u32,
    patience: u32,
    min_delta: f64,
}

impl EarlyStopping {
    /// A fresh stopper.
    pub fn new(patience: u32, min_delta: f64) -> Self {
        EarlyStopping {
            best: f64::INFINITY,
            bad_epochs: 0,
            patience,
            min_delta,
        }
    }

    /// Records an epoch's validation loss; `true` when training should stop.
    pub fn update(&mut self, val_loss: f64) -> bool {
        if val_loss < self.best - self.min_delta {
            self.best = val_loss;
            self.bad_epochs = 0;
        } else {
            self.bad_epochs += 1;
        }
        self.bad_epochs >= self.patience
    }
}

/// Least squares for y ≈ a·f(x) + c with f fixed; returns (a, c, squared error).
fn linear_fit(f: &[f64], y: &[f64]) -> (f64, f64, f64) {
    let n = f.len() as f64;
    let (mf, my) = (f.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let sff: f64 = f.iter().map(|v| (v - mf).powi(2)).sum();
    let sfy: f64 = f.iter().zip(y).map(|(a, b)| (a - mf) * (b - my)).sum();
    let a = if sff > 0.0 { sfy / sff } else { 0.0 };
    let c = my - a * mf;
    let err = f.iter().zip(y).map(|(v, t)| (a * v + c - t).powi(2)).sum();
    (a, c, err)
}

/// The predicted final accuracy for the search in warm-up rounds: fits
/// acc(x) = a·log2(x + b) + c to the validation curve (x = 1, 2, … epochs; b ≥ 0 searched on a
/// log grid then refined, a and c by least squares) and evaluates it at `final_epoch`. Never
/// below the best observed accuracy, never above 1; with fewer than 3 points, the best.
pub fn predict_final_accuracy(curve: &[f64], final_epoch: u32) -> f64 {
    let best = curve.iter().copied().fold(0.0, f64::max);
    if curve.len() < 3 || final_epoch as usize <= curve.len() {
        return best;
    }
    let xs: Vec<f64> = (1..=curve.len()).map(|x| x as f64).collect();
    let fit = |b: f64| {
        let f: Vec<f64> = xs.iter().map(|x| (x + b).log2()).collect();
        linear_fit(&f, curve)
    };
    // Coarse log grid over b, then golden-section refinement around the best.
    let grid: Vec<f64> = std::iter::once(0.0)
        .chain((0..40).map(|i| 10f64.powf(-2.0 + 4.0 * f64::from(i) / 39.0)))
        .collect();
    let (mut lo, mut hi) = {
        let k = (0..grid.len())
            .min_by(|&i, &j| fit(grid[i]).2.total_cmp(&fit(grid[j]).2))
            .expect("grid");
        (grid[k.saturating_sub(1)], grid[(k + 1).min(grid.len() - 1)])
    };
    let phi = (5f64.sqrt() - 1.0) / 2.0;
    for _ in 0..60 {
        let (m1, m2) = (hi - phi * (hi - lo), lo + phi * (hi - lo));
        if fit(m1).2 <= fit(m2).2 {
            hi = m2;
        } else {
            lo = m1;
        }
    }
    let b = 0.5 * (lo + hi);
    let (a, c, _) = fit(b);
    let predicted = a * (f64::from(final_epoch) + b).log2() + c;
    if predicted.is_finite() {
        predicted.min(1.0).max(best)
    } else {
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lr_warms_up_linearly_then_decays_by_cosine() {
        let s = LrSchedule {
            base_lr: 0.4,
            warmup_epochs: 2.0,
            total_epochs: 10.0,
        };
        assert_eq!(s.lr(0, 0, 100), 0.0);
        assert!((s.lr(1, 0, 100) - 0.2).abs() < 1e-12);
        assert!((s.lr(0, 50, 100) - 0.1).abs() < 1e-12);
        assert!((s.lr(2, 0, 100) - 0.4).abs() < 1e-12);
        assert!((s.lr(6, 0, 100) - 0.2).abs() < 1e-12); // half-way through the decay
        assert!(s.lr(10, 0, 100).abs() < 1e-12 && s.lr(12, 0, 100).abs() < 1e-12);
        // Pure: the same arguments, the same rate.
        assert_eq!(s.lr(3, 17, 50).to_bits(), s.lr(3, 17, 50).to_bits());
    }

    #[test]
    fn budgets_and_patience_follow_the_reference() {
        assert_eq!(
            (1..=5).map(|r| epoch_budget(r, 60)).collect::<Vec<_>>(),
            vec![15, 30, 45, 60, 60]
        );
        assert_eq!(epoch_budget(1, 6), 2);
        assert_eq!(
            (1..=8).map(|r| patience(r, 1.0)).collect::<Vec<_>>(),
            vec![8, 10, 12, 14, 16, 18, 20, 20]
        );
        assert_eq!(patience(1, 0.1), 1);
    }

    #[test]
    fn early_stopping_needs_real_improvement() {
        let mut s = EarlyStopping::new(2, 0.001);
        assert!(!s.update(1.0));
        assert!(!s.update(0.9995)); // within min_delta: a bad epoch
        assert!(s.update(0.9991)); // second bad epoch: stop
        let mut s = EarlyStopping::new(2, 0.001);
        assert!(!s.update(1.0) && !s.update(1.1) && !s.update(0.8) && !s.update(0.9));
        assert!(s.update(0.85));
    }

    #[test]
    fn predicted_accuracy_extrapolates_a_log_curve() {
        // Exactly a·log2(x + b) + c with a = 0.1, b = 1.5, c = 0.3.
        let truth = |x: f64| 0.1 * (x + 1.5).log2() + 0.3;
        let curve: Vec<f64> = (1..=8).map(|x| truth(f64::from(x))).collect();
        let p = predict_final_accuracy(&curve, 30);
        assert!((p - truth(30.0)).abs() < 1e-4, "{p} vs {}", truth(30.0));
        // Never below the best observed, never above 1; short curves give the best.
        let noisy = [0.5, 0.62, 0.58, 0.6];
        assert!(predict_final_accuracy(&noisy, 40) >= 0.62);
        assert_eq!(predict_final_accuracy(&[0.3, 0.4], 60), 0.4);
        let steep: Vec<f64> = (1..=5).map(|x| 0.15 * f64::from(x)).collect();
        assert_eq!(predict_final_accuracy(&steep, 100), 1.0);
    }
}

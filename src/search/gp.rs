//! The Gaussian process over architectures. NNI fits with an RBF kernel on a Bourgain
//! embedding of the edit distances but predicts with exp(−d²) on raw distances — two
//! kernels, and the second need not be positive semi-definite. Here one kernel serves both:
//! every architecture is embedded by Bourgain's construction (coordinate = distance to the
//! nearest member of a random subset of the training architectures), and the kernel is the
//! RBF on those vectors, k(x, y) = exp(−γ‖φ(x) − φ(y)‖²), plus noise σ² on the diagonal. An
//! RBF on real vectors is positive semi-definite, so the factorisation exists for any
//! training set. Unlike NNI (fixed γ = 1/dimensions, raw targets, which leaves every
//! neighbour at prior uncertainty), targets are standardised and (γ, σ²) maximise the log
//! marginal likelihood over a grid around the median-distance heuristic.

use nalgebra::{Cholesky, DMatrix, DVector, Dyn};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use crate::arch::Descriptor;

use super::distance::edit_distance;

/// Candidate noise variances (of standardised targets).
const NOISES: [f64; 3] = [1e-4, 1e-2, 1e-1];
/// Candidate γ as multiples of the median heuristic.
const GAMMA_FACTORS: [f64; 7] = [0.0625, 0.25, 0.5, 1.0, 2.0, 4.0, 16.0];

/// One grid point's fit.
struct Fitted {
    /// Log marginal likelihood (up to a constant).
    lml: f64,
    /// The kernel's γ.
    gamma: f64,
    /// The kernel matrix's Cholesky factor.
    cholesky: Cholesky<f64, Dyn>,
    /// The weights K⁻¹·y.
    alpha: DVector<f64>,
}

/// A fitted process.
pub struct Gp {
    /// Training descriptors (the reference points of the embedding).
    train: Vec<Descriptor>,
    /// For each embedding coordinate, the training indices of its subset.
    subsets: Vec<Vec<usize>>,
    /// The training points' embedding, one row each.
    embedding: Vec<Vec<f64>>,
    gamma: f64,
    cholesky: Cholesky<f64, Dyn>,
    alpha: DVector<f64>,
    y_mean: f64,
    y_scale: f64,
}

/// Bourgain's subsets for `n` points: for each scale i = 0..=⌈log2 n − 1⌉, ⌈ln n⌉ subsets of
/// 2^i points drawn with replacement.
fn bourgain_subsets(n: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let scales = ((n as f64).log2() - 1.0).ceil().max(0.0) as u32;
    let per_scale = (n as f64).ln().ceil().max(1.0) as usize;
    let mut subsets = Vec::new();
    for i in 0..=scales {
        for _ in 0..per_scale {
            subsets.push((0..1usize << i).map(|_| rng.random_range(0..n)).collect());
        }
    }
    subsets
}

/// A point's embedding from its distances to the training points.
fn embed(subsets: &[Vec<usize>], distances: &[f64]) -> Vec<f64> {
    subsets
        .iter()
        .map(|s| {
            s.iter()
                .map(|&j| distances[j])
                .fold(f64::INFINITY, f64::min)
        })
        .collect()
}

fn rbf(gamma: f64, a: &[f64], b: &[f64]) -> f64 {
    (-gamma * a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f64>()).exp()
}

impl Gp {
    /// Fits the process to `train` with targets `y` (same length, at least 1). Distances are
    /// computed on the current rayon pool. `seed` fixes the embedding's subsets.
    pub fn fit(train: Vec<Descriptor>, y: &[f64], seed: u64) -> Gp {
        let n = train.len();
        // The upper triangle in parallel (n(n−1)/2 distances), mirrored.
        let upper: Vec<Vec<f64>> = (0..n)
            .into_par_iter()
            .map(|i| {
                (i + 1..n)
                    .map(|j| edit_distance(&train[i], &train[j]))
                    .collect()
            })
            .collect();
        let mut rows = vec![vec![0.0; n]; n];
        for (i, row) in upper.iter().enumerate() {
            for (k, &d) in row.iter().enumerate() {
                rows[i][i + 1 + k] = d;
                rows[i + 1 + k][i] = d;
            }
        }
        Gp::fit_with_distances(train, y, &rows, seed)
    }

    /// Fits with the training points' pairwise edit distances given (`rows[i][j]`), e.g. from
    /// a cache kept across fits.
    pub fn fit_with_distances(
        train: Vec<Descriptor>,
        y: &[f64],
        rows: &[Vec<f64>],
        seed: u64,
    ) -> Gp {
        let n = train.len();
        assert!(
            n > 0 && n == y.len() && rows.len() == n,
            "one target and one distance row per training point"
        );
        let subsets = bourgain_subsets(n, seed);
        let embedding: Vec<Vec<f64>> = rows.iter().map(|d| embed(&subsets, d)).collect();
        let sq =
            |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f64>();
        let mut pair_sq: Vec<f64> = (0..n)
            .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
            .map(|(i, j)| sq(&embedding[i], &embedding[j]))
            .filter(|&d| d > 0.0)
            .collect();
        pair_sq.sort_by(f64::total_cmp);
        let median = pair_sq.get(pair_sq.len() / 2).copied().unwrap_or(1.0);
        let y_mean = y.iter().sum::<f64>() / n as f64;
        let var = y.iter().map(|v| (v - y_mean).powi(2)).sum::<f64>() / n as f64;
        let y_scale = if var > 0.0 { var.sqrt() } else { 1.0 };
        let targets = DVector::from_iterator(n, y.iter().map(|v| (v - y_mean) / y_scale));
        // Log marginal likelihood (up to a constant) of each (γ, σ²) on the grid; keep the best.
        let mut best: Option<Fitted> = None;
        for factor in GAMMA_FACTORS {
            let gamma = factor / median;
            let base = DMatrix::from_fn(n, n, |i, j| rbf(gamma, &embedding[i], &embedding[j]));
            for noise in NOISES {
                let k = &base + DMatrix::identity(n, n) * noise;
                let Some(chol) = Cholesky::new(k) else {
                    continue;
                };
                let alpha = chol.solve(&targets);
                let log_det: f64 = chol.l().diagonal().iter().map(|d| d.ln()).sum::<f64>() * 2.0;
                let lml = -0.5 * targets.dot(&alpha) - 0.5 * log_det;
                if best.as_ref().is_none_or(|b| lml > b.lml) {
                    best = Some(Fitted {
                        lml,
                        gamma,
                        cholesky: chol,
                        alpha,
                    });
                }
            }
        }
        let Fitted {
            gamma,
            cholesky,
            alpha,
            ..
        } = best.expect("an RBF kernel plus noise is positive definite");
        Gp {
            train,
            subsets,
            embedding,
            gamma,
            cholesky,
            alpha,
            y_mean,
            y_scale,
        }
    }

    /// Number of training points.
    pub fn len(&self) -> usize {
        self.train.len()
    }

    /// Whether there are no training points (never, after `fit`).
    pub fn is_empty(&self) -> bool {
        self.train.is_empty()
    }

    /// Posterior mean and standard deviation at `x` (one edit distance per training point).
    pub fn predict(&self, x: &Descriptor) -> (f64, f64) {
        let d: Vec<f64> = self.train.iter().map(|t| edit_distance(x, t)).collect();
        let phi = embed(&self.subsets, &d);
        let k_star = DVector::from_iterator(
            self.len(),
            self.embedding.iter().map(|e| rbf(self.gamma, &phi, e)),
        );
        let mean = k_star.dot(&self.alpha) * self.y_scale + self.y_mean;
        let v = self
            .cholesky
            .l()
            .solve_lower_triangular(&k_star)
            .expect("L is invertible");
        // Latent-function variance (the noise is not added: UCB scores the architecture).
        let var = (1.0 - v.dot(&v)).max(0.0);
        (mean, var.sqrt() * self.y_scale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{cifar_resnet, CifarResnetConfig, Shape};
    use crate::search::{random_morphism, Limits};

    fn descriptors(n: usize) -> Vec<Descriptor> {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut g = cifar_resnet(&CifarResnetConfig::resnet20(), Shape::new(3, 32, 32), 10);
        let mut out = vec![g.descriptor()];
        while out.len() < n {
            let (_, next) = random_morphism(&g, 3, &Limits::default(), &mut rng, 20).unwrap();
            if !out.contains(&next.descriptor()) {
                out.push(next.descriptor());
            }
            g = next;
        }
        out
    }

    /// A smooth function of the architecture: deeper and more skips score higher.
    fn score(d: &Descriptor) -> f64 {
        0.6 + 0.004 * d.layers.len() as f64 + 0.01 * d.skips.len() as f64
    }

    #[test]
    fn predicts_held_out_architectures_better_than_the_mean() {
        let d = descriptors(60);
        let y: Vec<f64> = d.iter().map(score).collect();
        let gp = Gp::fit(d[..45].to_vec(), &y[..45], 1);
        let mean = y[..45].iter().sum::<f64>() / 45.0;
        let (mut err_gp, mut err_mean) = (0.0, 0.0);
        for (x, &t) in d[45..].iter().zip(&y[45..]) {
            let (m, s) = gp.predict(x);
            assert!(s.is_finite() && s >= 0.0);
            err_gp += (m - t).powi(2);
            err_mean += (mean - t).powi(2);
        }
        assert!(
            err_gp < 0.5 * err_mean,
            "GP squared error {err_gp} vs the mean's {err_mean}"
        );
        // Close to the data the process is sure; at a training point, more than far away.
        let (m0, s0) = gp.predict(&d[0]);
        assert!((m0 - y[0]).abs() < 0.01, "{m0} vs {}", y[0]);
        let far = gp.predict(&d[59]).1;
        assert!(s0 < far, "std {s0} at a training point, {far} away from it");
    }

    #[test]
    fn kernel_matrix_is_positive_semi_definite_for_any_training_set() {
        // Many random training sets: the Cholesky factorisation always succeeds, and the
        // posterior variance never goes negative.
        let d = descriptors(40);
        for seed in 0..20u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let idx: Vec<usize> = (0..rng.random_range(1..30))
                .map(|_| rng.random_range(0..40))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let train: Vec<Descriptor> = idx.iter().map(|&i| d[i].clone()).collect();
            let y: Vec<f64> = idx.iter().map(|&i| (i as f64 * 0.37).sin()).collect();
            let gp = Gp::fit(train, &y, seed);
            for x in &d {
                let (m, s) = gp.predict(x);
                assert!(m.is_finite() && s.is_finite() && s >= 0.0);
            }
        }
    }
}

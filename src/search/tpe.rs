//! Tree-structured Parzen estimator for the trial hyperparameters, with hyperopt's semantics
//! (`hyperopt/tpe.py`): γ = 0.25 and ⌈γ√n⌉ "good" observations capped at 25; adaptive Parzen
//! estimators with a prior of weight 1 and linear forgetting over 25; 24 candidates drawn
//! from the good model, the one maximising log l(x) − log g(x) chosen, per hyperparameter.
//! The space: `batch_size` as `hp.uniformint(lo, hi)` (a quantised uniform, q = 1) and
//! `kernel_size` as `hp.choice([3, 5, 7])`. One instance keeps learning across every
//! group's results (the reference implementation rebuilt it per trial: random search). It
//! models the most recent [`TPE_WINDOW`] observations, where hyperopt models all: a
//! suggestion's cost is then bounded however long the run (the oldest observations of a
//! full window already weigh 1/window under linear forgetting).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use serde::{Deserialize, Serialize};
use statrs::function::erf::erf;

/// hyperopt's `EPS`.
const EPS: f64 = 1e-12;

/// TPE settings (hyperopt's defaults, but startup trials 10 as docs/design.md §3 asks).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TpeConfig {
    /// Fraction of observations modelled as good.
    pub gamma: f64,
    /// Random suggestions before the model is used.
    pub startup: usize,
    /// Candidates drawn per suggestion.
    pub ei_candidates: usize,
    /// Weight of the prior component.
    pub prior_weight: f64,
    /// Observations beyond this many are down-weighted, oldest most (and the good set's cap).
    pub linear_forgetting: usize,
    /// The most recent observations modelled ([`TPE_WINDOW`]).
    pub window: usize,
    /// Seed.
    pub seed: u64,
}

impl Default for TpeConfig {
    fn default() -> Self {
        TpeConfig {
            gamma: 0.25,
            startup: 10,
            ei_candidates: 24,
            prior_weight: 1.0,
            linear_forgetting: 25,
            window: TPE_WINDOW,
            seed: 0,
        }
    }
}

/// Observations a suggestion models, the most recent: bounds its work (sorting, and 24
/// candidates against a mixture of one component per observation) at any history.
pub const TPE_WINDOW: usize = 1000;

/// The searched hyperparameters' ranges.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Space {
    /// Per-accelerator batch size, inclusive range.
    pub batch_size: (u32, u32),
    /// Kernel sizes of the deeper morphism.
    pub kernel_sizes: Vec<u32>,
}

impl Default for Space {
    fn default() -> Self {
        Space {
            batch_size: (16, 128),
            kernel_sizes: vec![3, 5, 7],
        }
    }
}

/// One trial's hyperparameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Hparams {
    /// Per-accelerator batch size.
    pub batch_size: u32,
    /// Deeper-morphism kernel size.
    pub kernel_size: u32,
}

/// A Gaussian mixture (weights sum to 1).
#[derive(Clone, Debug, PartialEq)]
struct Gmm {
    weights: Vec<f64>,
    mus: Vec<f64>,
    sigmas: Vec<f64>,
}

/// hyperopt's `linear_forgetting_weights`: ones, or a ramp 1/N..1 for the oldest N − LF.
fn forgetting_weights(n: usize, lf: usize) -> Vec<f64> {
    if n < lf {
        return vec![1.0; n];
    }
    let ramp = n - lf;
    let mut w: Vec<f64> = (0..ramp)
        .map(|i| {
            if ramp == 1 {
                1.0 / n as f64
            } else {
                1.0 / n as f64 + (1.0 - 1.0 / n as f64) * i as f64 / (ramp - 1) as f64
            }
        })
        .collect();
    w.extend(std::iter::repeat_n(1.0, lf));
    w
}

/// hyperopt's `adaptive_parzen_normal`: one component per observation plus the prior,
/// sorted; each sigma the larger gap to a neighbour, clipped to
/// [prior_sigma / min(100, 1 + components), prior_sigma].
fn adaptive_parzen(obs: &[f64], cfg: &TpeConfig, prior_mu: f64, prior_sigma: f64) -> Gmm {
    let n = obs.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| obs[a].total_cmp(&obs[b]));
    let sorted: Vec<f64> = order.iter().map(|&i| obs[i]).collect();
    let (mus, mut sigmas, prior_pos) = match n {
        0 => (vec![prior_mu], vec![prior_sigma], 0),
        1 if prior_mu < obs[0] => (
            vec![prior_mu, obs[0]],
            vec![prior_sigma, 0.5 * prior_sigma],
            0,
        ),
        1 => (
            vec![obs[0], prior_mu],
            vec![0.5 * prior_sigma, prior_sigma],
            1,
        ),
        _ => {
            let pos = sorted.partition_point(|&m| m < prior_mu);
            let mut mus = sorted.clone();
            mus.insert(pos, prior_mu);
            let m = mus.len();
            let mut s = vec![0.0; m];
            for i in 1..m - 1 {
                s[i] = (mus[i] - mus[i - 1]).max(mus[i + 1] - mus[i]);
            }
            s[0] = mus[1] - mus[0];
            s[m - 1] = mus[m - 1] - mus[m - 2];
            (mus, s, pos)
        }
    };
    let mut weights = if cfg.linear_forgetting < n {
        let unsorted = forgetting_weights(n, cfg.linear_forgetting);
        let mut w: Vec<f64> = order.iter().map(|&i| unsorted[i]).collect();
        w.insert(prior_pos, cfg.prior_weight);
        w
    } else {
        let mut w = vec![1.0; mus.len()];
        w[prior_pos] = cfg.prior_weight;
        w
    };
    let min_sigma = prior_sigma / (1.0 + mus.len() as f64).min(100.0);
    for s in sigmas.iter_mut() {
        *s = s.clamp(min_sigma, prior_sigma);
    }
    sigmas[prior_pos] = prior_sigma;
    let total: f64 = weights.iter().sum();
    weights.iter_mut().for_each(|w| *w /= total);
    Gmm {
        weights,
        mus,
        sigmas,
    }
}

/// Normal CDF with hyperopt's guard on sigma.
fn normal_cdf(x: f64, mu: f64, sigma: f64) -> f64 {
    0.5 * (1.0 + erf((x - mu) / (std::f64::consts::SQRT_2 * sigma).max(EPS)))
}

impl Gmm {
    /// A draw truncated to [low, high) and rounded to a multiple of q = 1. Rejection
    /// sampling, bounded: after `MAX_DRAWS` draws outside the range (a component far
    /// outside it, or low = high) the component's mean clamped into the range is taken.
    fn sample(&self, low: f64, high: f64, rng: &mut ChaCha8Rng) -> f64 {
        const MAX_DRAWS: usize = 1000;
        let mut k = 0;
        for _ in 0..MAX_DRAWS {
            let u: f64 = rng.random();
            k = 0;
            let mut acc = self.weights[0];
            while u >= acc && k + 1 < self.weights.len() {
                k += 1;
                acc += self.weights[k];
            }
            let x = Normal::new(self.mus[k], self.sigmas[k])
                .expect("positive sigma")
                .sample(rng);
            if low <= x && x < high {
                return x.round();
            }
        }
        self.mus[k].clamp(low, high).round()
    }

    /// hyperopt's quantised `GMM1_lpdf` (q = 1) truncated to [low, high].
    fn log_pdf_q1(&self, x: f64, low: f64, high: f64) -> f64 {
        let mut accept = 0.0;
        let mut mass = 0.0;
        for ((w, m), s) in self.weights.iter().zip(&self.mus).zip(&self.sigmas) {
            accept += w * (normal_cdf(high, *m, *s) - normal_cdf(low, *m, *s));
            mass += w
                * (normal_cdf((x + 0.5).min(high), *m, *s)
                    - normal_cdf((x - 0.5).max(low), *m, *s));
        }
        mass.ln() - accept.ln()
    }
}

/// hyperopt's categorical posterior: counts (with forgetting weights) plus the prior weight
/// per category, normalised.
fn categorical(obs: &[usize], k: usize, cfg: &TpeConfig) -> Vec<f64> {
    let w = forgetting_weights(obs.len(), cfg.linear_forgetting);
    let mut p = vec![cfg.prior_weight; k];
    for (&o, &wi) in obs.iter().zip(&w) {
        p[o] += wi;
    }
    let total: f64 = p.iter().sum();
    p.iter().map(|v| v / total).collect()
}

/// The TPE state: every observation, in arrival order.
#[derive(Clone, Debug)]
pub struct Tpe {
    cfg: TpeConfig,
    space: Space,
    observations: Vec<(Hparams, f64)>,
    rng: ChaCha8Rng,
}

impl Tpe {
    /// A fresh estimator over `space`.
    pub fn new(cfg: TpeConfig, space: Space) -> Result<Tpe, String> {
        let (lo, hi) = space.batch_size;
        if lo == 0 || lo > hi || space.kernel_sizes.is_empty() {
            return Err(format!("TPE space: need 1 <= batch_size.min <= batch_size.max and some kernel sizes (got {space:?})"));
        }
        if !(cfg.gamma > 0.0 && cfg.gamma <= 1.0) || cfg.ei_candidates == 0 {
            return Err(format!(
                "TPE: need 0 < gamma <= 1 and at least one candidate (got {cfg:?})"
            ));
        }
        let rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        Ok(Tpe {
            cfg,
            space,
            observations: Vec::new(),
            rng,
        })
    }

    /// Records a finished trial; `loss` is minimised (1 − accuracy).
    pub fn observe(&mut self, h: Hparams, loss: f64) {
        self.observations.push((
            h,
            if loss.is_finite() {
                loss
            } else {
                f64::INFINITY
            },
        ));
    }

    /// Observations so far, in arrival order.
    pub fn observations(&self) -> &[(Hparams, f64)] {
        &self.observations
    }

    fn kernel_index(&self, k: u32) -> usize {
        self.space
            .kernel_sizes
            .iter()
            .position(|&x| x == k)
            .unwrap_or(0)
    }

    /// The next hyperparameters: random during start-up, then TPE.
    pub fn suggest(&mut self) -> Hparams {
        let (lo, hi) = (
            f64::from(self.space.batch_size.0),
            f64::from(self.space.batch_size.1),
        );
        let nk = self.space.kernel_sizes.len();
        if self.observations.len() < self.cfg.startup {
            // hyperopt's random uniformint: round(uniform(lo, hi)).
            let b = self.rng.random_range(lo..=hi).round();
            let k = self.rng.random_range(0..nk);
            return Hparams {
                batch_size: b as u32,
                kernel_size: self.space.kernel_sizes[k],
            };
        }
        let all = &self.observations;
        let obs = &all[all.len() - all.len().min(self.cfg.window.max(1))..];
        let n = obs.len();
        let n_below =
            ((self.cfg.gamma * (n as f64).sqrt()).ceil() as usize).min(self.cfg.linear_forgetting);
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| obs[a].1.total_cmp(&obs[b].1));
        let mut is_below = vec![false; n];
        for &i in &order[..n_below] {
            is_below[i] = true;
        }
        let split = |f: &dyn Fn(&Hparams) -> f64| -> (Vec<f64>, Vec<f64>) {
            let (mut b, mut a) = (Vec::new(), Vec::new());
            for (i, (h, _)) in obs.iter().enumerate() {
                if is_below[i] {
                    b.push(f(h))
                } else {
                    a.push(f(h))
                }
            }
            (b, a)
        };
        // batch_size: quantised uniform, prior N((lo+hi)/2, hi−lo).
        let (b_below, b_above) = split(&|h| f64::from(h.batch_size));
        let (prior_mu, prior_sigma) = (0.5 * (lo + hi), (hi - lo).max(1.0));
        let below = adaptive_parzen(&b_below, &self.cfg, prior_mu, prior_sigma);
        let above = adaptive_parzen(&b_above, &self.cfg, prior_mu, prior_sigma);
        let mut best_b = (f64::NEG_INFINITY, lo);
        // One fixed batch size (low = high) leaves nothing to choose.
        let candidates = if lo < hi { self.cfg.ei_candidates } else { 0 };
        for _ in 0..candidates {
            let x = below.sample(lo, hi, &mut self.rng);
            let score = below.log_pdf_q1(x, lo, hi) - above.log_pdf_q1(x, lo, hi);
            if score > best_b.0 {
                best_b = (score, x);
            }
        }
        // kernel_size: categorical.
        let (k_below, k_above) = split(&|h| self.kernel_index(h.kernel_size) as f64);
        let to_idx = |v: Vec<f64>| v.into_iter().map(|x| x as usize).collect::<Vec<_>>();
        let (p_below, p_above) = (
            categorical(&to_idx(k_below), nk, &self.cfg),
            categorical(&to_idx(k_above), nk, &self.cfg),
        );
        let mut best_k = (f64::NEG_INFINITY, 0);
        for _ in 0..self.cfg.ei_candidates {
            let u: f64 = self.rng.random();
            let mut k = 0;
            let mut acc = p_below[0];
            while u >= acc && k + 1 < nk {
                k += 1;
                acc += p_below[k];
            }
            let score = p_below[k].ln() - p_above[k].ln();
            if score > best_k.0 {
                best_k = (score, k);
            }
        }
        Hparams {
            batch_size: best_b.1.clamp(lo, hi) as u32,
            kernel_size: self.space.kernel_sizes[best_k.1],
        }
    }
}

#[cfg(test)]
mod tests;

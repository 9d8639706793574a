//! Bayesian optimisation over architectures (Auto-Keras/NNI): a Gaussian process on the
//! edit distance predicts each candidate's accuracy, UCB (mean + β·std, β = 2.576) scores it,
//! and simulated annealing over the search tree (T from 1.0, ×0.5 per step, down to 1e-4;
//! 8 neighbours per expansion) picks the best unseen neighbour. Neighbours, distances and the
//! fit run on a rayon pool of configurable size; the process is fitted on at most
//! [`MAX_FIT`] trained models (`fitset`), so a proposal's work stays bounded as the
//! history grows to the paper's thousands; every random draw is seeded per step and
//! neighbour, so the result depends only on the seed, never on the pool size.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::seeds::mix;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::arch::{Descriptor, Graph};

use super::distance::edit_distance;
use super::gp::Gp;
use super::morphism::{random_morphism, Limits, Morphism};

/// A trained architecture the search knows.
#[derive(Clone, Debug)]
pub struct Observed {
    /// Global model id.
    pub id: u64,
    /// The architecture.
    pub graph: Arc<Graph>,
    /// Its search descriptor.
    pub descriptor: Descriptor,
    /// The value the search maximises (measured or predicted accuracy).
    pub accuracy: f64,
}

/// Settings of the optimiser (docs/design.md §3 defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BayesConfig {
    /// UCB exploration weight.
    pub beta: f64,
    /// Initial annealing temperature.
    pub t_start: f64,
    /// Annealing stops at or below this temperature.
    pub t_min: f64,
    /// Temperature factor per annealing step.
    pub cooling: f64,
    /// Neighbours per expansion (twice as many morphisms are tried, as NNI does).
    pub neighbours: usize,
    /// Threads of the search's rayon pool.
    pub threads: usize,
    /// Seed of every random choice.
    pub seed: u64,
    /// Growth limits of the morphisms.
    pub limits: Limits,
    /// Most trained models the Gaussian process is fitted on (`src/search/bayes/fitset.rs`): bounds a
    /// proposal's work at paper-scale histories.
    pub max_fit: usize,
}

/// Default bound of the fitting set: a fit of 500 models factorises in well under a second
/// (`make bench-search`, the history-size sweep).
pub const MAX_FIT: usize = 500;

impl Default for BayesConfig {
    fn default() -> Self {
        BayesConfig {
            beta: 2.576,
            t_start: 1.0,
            t_min: 1e-4,
            cooling: 0.5,
            neighbours: 8,
            threads: 1,
            seed: 0,
            limits: Limits::default(),
            max_fit: MAX_FIT,
        }
    }
}

/// How much work one proposal took (to compare with other implementations).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchStats {
    /// Annealing steps (queue pops).
    pub annealing_steps: u64,
    /// Steps whose element was accepted and expanded.
    pub expansions: u64,
    /// Neighbours generated (valid morphisms).
    pub neighbours: u64,
    /// Neighbours dropped as duplicates of a seen architecture.
    pub duplicates: u64,
    /// Acquisition (GP) evaluations.
    pub acquisitions: u64,
    /// Edit distances computed (new history pairs + predictions).
    pub distances: u64,
    /// Trained models the Gaussian process was fitted on.
    pub fitted: u64,
}

/// The optimiser's choice.
#[derive(Clone, Debug)]
pub struct Proposal {
    /// The new architecture.
    pub graph: Graph,
    /// The trained model it descends from.
    pub father: u64,
    /// The morphisms from the father, in order.
    pub morphisms: Vec<Morphism>,
    /// Predicted accuracy (GP mean).
    pub mean: f64,
    /// Predicted standard deviation.
    pub std: f64,
    /// UCB value.
    pub acquisition: f64,
    /// Work done.
    pub stats: SearchStats,
}

/// A search-tree element in the annealing queue.
struct Elem {
    value: f64,
    seq: u64,
    father: u64,
    graph: Arc<Graph>,
    morphisms: Vec<Morphism>,
}

impl Elem {
    /// A trained model as a starting point of the annealing.
    fn trained(o: &Observed, seq: u64) -> Self {
        Elem {
            value: o.accuracy,
            seq,
            father: o.id,
            graph: Arc::clone(&o.graph),
            morphisms: vec![],
        }
    }
}

impl PartialEq for Elem {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Elem {}
impl PartialOrd for Elem {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Elem {
    /// Highest value first; among equals, the earliest pushed.
    fn cmp(&self, other: &Self) -> Ordering {
        self.value
            .total_cmp(&other.value)
            .then(other.seq.cmp(&self.seq))
    }
}

/// The architecture generator's optimiser, with its own thread pool and a cache of the
/// edit distances between the models of the fitting set (keyed by model id), so that each
/// proposal computes only the distances involving models it has not fitted before — as
/// NNI's incremental GP fit. Pairs that leave the fitting set leave the cache.
pub struct BayesOptimizer {
    cfg: BayesConfig,
    pool: rayon::ThreadPool,
    distances: Mutex<HashMap<(u64, u64), f64>>,
}

impl BayesOptimizer {
    /// Creates the optimiser and its pool.
    pub fn new(cfg: BayesConfig) -> Result<Self, String> {
        if !(cfg.cooling > 0.0 && cfg.cooling < 1.0) || cfg.t_min <= 0.0 || cfg.neighbours == 0 {
            return Err(format!(
                "search: need 0 < cooling < 1, t_min > 0, neighbours >= 1 (got {}, {}, {})",
                cfg.cooling, cfg.t_min, cfg.neighbours
            ));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(cfg.threads.max(1))
            .thread_name(|i| format!("search-{i}"))
            .build()
            .map_err(|e| format!("search: cannot start {} threads: {e}", cfg.threads))?;
        Ok(BayesOptimizer {
            cfg,
            pool,
            distances: Mutex::new(HashMap::new()),
        })
    }

    /// The settings.
    pub fn config(&self) -> &BayesConfig {
        &self.cfg
    }

    /// The pairwise distance rows of the models `fit` (indices into `history`), computing
    /// (in parallel) only the pairs not cached yet and dropping cached pairs of models no
    /// longer fitted; returns the rows and how many were computed.
    fn history_distances(&self, history: &[Observed], fit: &[usize]) -> (Vec<Vec<f64>>, u64) {
        let n = fit.len();
        let id = |i: usize| history[fit[i]].id;
        let pair = |i: usize, j: usize| (id(i).min(id(j)), id(i).max(id(j)));
        let mut cache = self.distances.lock().expect("distance cache");
        let fitted: HashSet<u64> = (0..n).map(id).collect();
        cache.retain(|(a, b), _| fitted.contains(a) && fitted.contains(b));
        let missing: Vec<(usize, usize)> = (0..n)
            .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
            .filter(|&(i, j)| !cache.contains_key(&pair(i, j)))
            .collect();
        let computed: Vec<f64> = self.pool.install(|| {
            missing
                .par_iter()
                .map(|&(i, j)| {
                    edit_distance(&history[fit[i]].descriptor, &history[fit[j]].descriptor)
                })
                .collect()
        });
        for (&(i, j), &d) in missing.iter().zip(&computed) {
            cache.insert(pair(i, j), d);
        }
        let mut rows = vec![vec![0.0; n]; n];
        for i in 0..n {
            for j in i + 1..n {
                let d = cache[&pair(i, j)];
                rows[i][j] = d;
                rows[j][i] = d;
            }
        }
        (rows, missing.len() as u64)
    }

    /// Up to `neighbours` unseen one-morphism neighbours of `graph`, drawn in parallel from
    /// seeds of the search's `base` seed and the annealing `step`; each is added to `seen`.
    fn neighbours(
        &self,
        graph: &Graph,
        kernel: u32,
        base: u64,
        step: u64,
        seen: &mut HashSet<Descriptor>,
        stats: &mut SearchStats,
    ) -> Vec<(Morphism, Graph, Descriptor)> {
        let cfg = &self.cfg;
        let tries: Vec<Option<(Morphism, Graph)>> = self.pool.install(|| {
            (0..2 * cfg.neighbours as u64)
                .into_par_iter()
                .map(|k| {
                    let mut rng = ChaCha8Rng::seed_from_u64(mix(base
                        ^ mix(step)
                        ^ mix(k.wrapping_add(0x51))));
                    random_morphism(graph, kernel, &cfg.limits, &mut rng, 1)
                })
                .collect()
        });
        let mut fresh = Vec::new();
        for (m, g) in tries.into_iter().flatten().take(cfg.neighbours) {
            stats.neighbours += 1;
            let d = g.descriptor();
            if seen.insert(d.clone()) {
                fresh.push((m, g, d));
            } else {
                stats.duplicates += 1;
            }
        }
        fresh
    }

    /// Proposes an unseen architecture from the trained `history` (model ids must identify
    /// architectures: the distance cache is keyed by them). `seen` holds every
    /// descriptor to avoid besides the history's (e.g. candidates still in training);
    /// `kernel` is the deeper morphism's kernel size; `call` varies the draws between calls.
    /// `None` when the history is empty or no unseen neighbour was found.
    pub fn propose(
        &self,
        history: &[Observed],
        seen: &HashSet<Descriptor>,
        kernel: u32,
        call: u64,
    ) -> Option<Proposal> {
        if history.is_empty() {
            return None;
        }
        let cfg = &self.cfg;
        let base = mix(cfg.seed ^ mix(call));
        let fit = fitset::fitting_set(history, cfg.max_fit);
        let (rows, computed) = self.history_distances(history, &fit);
        let mut stats = SearchStats {
            distances: computed,
            fitted: fit.len() as u64,
            ..SearchStats::default()
        };
        let y: Vec<f64> = fit.iter().map(|&i| history[i].accuracy).collect();
        let train = fit.iter().map(|&i| history[i].descriptor.clone()).collect();
        let gp = Gp::fit_with_distances(train, &y, &rows, base);
        let mut seen_here: HashSet<Descriptor> = seen.clone();
        seen_here.extend(history.iter().map(|o| o.descriptor.clone()));
        // The annealing starts from every trained model, valued by its accuracy.
        let mut queue: BinaryHeap<Elem> = (history.iter().enumerate())
            .map(|(i, o)| Elem::trained(o, i as u64))
            .collect();
        let mut seq = history.len() as u64;
        let mut accept_rng = ChaCha8Rng::seed_from_u64(base);
        let (mut t, mut best_acq) = (cfg.t_start, f64::NEG_INFINITY);
        let mut best: Option<Proposal> = None;
        while t > cfg.t_min {
            let Some(elem) = queue.pop() else { break };
            stats.annealing_steps += 1;
            let accept = ((elem.value - best_acq) / t).min(1.0).exp();
            if accept >= accept_rng.random::<f64>() {
                stats.expansions += 1;
                let fresh = self.neighbours(
                    &elem.graph,
                    kernel,
                    base,
                    stats.annealing_steps,
                    &mut seen_here,
                    &mut stats,
                );
                let scored: Vec<(f64, f64)> = self
                    .pool
                    .install(|| fresh.par_iter().map(|(_, _, d)| gp.predict(d)).collect());
                stats.acquisitions += fresh.len() as u64;
                stats.distances += fresh.len() as u64 * stats.fitted;
                for ((m, g, _), (mean, std)) in fresh.into_iter().zip(scored) {
                    let acq = mean + cfg.beta * std;
                    let mut morphisms = elem.morphisms.clone();
                    morphisms.push(m);
                    if acq > best_acq {
                        best_acq = acq;
                        best = Some(Proposal {
                            graph: g.clone(),
                            father: elem.father,
                            morphisms: morphisms.clone(),
                            mean,
                            std,
                            acquisition: acq,
                            stats,
                        });
                    }
                    queue.push(Elem {
                        value: acq,
                        seq,
                        father: elem.father,
                        graph: Arc::new(g),
                        morphisms,
                    });
                    seq += 1;
                }
            }
            t *= cfg.cooling;
        }
        best.map(|p| Proposal { stats, ..p })
    }
}

pub mod fitset;
#[cfg(test)]
mod tests;

//! `aiperf search-sim`: the architecture search and TPE run against a synthetic accuracy
//! model instead of training, so the search can be watched and tested in seconds.
//!
//! The synthetic model rewards depth, skip connections and moderate size with diminishing
//! returns, prefers a batch size near 64 and 5×5 kernels, and adds a small deterministic
//! per-architecture noise. It is a stand-in for training, not a claim about real networks.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::arch::{Graph, LayerKind};
use crate::ops::OpCount;

use super::bayes::{BayesOptimizer, Observed, SearchStats};
use super::morphism::Morphism;
use super::tpe::{Hparams, Tpe};

/// The synthetic validation accuracy of `g` trained with `h`.
pub fn synthetic_accuracy(g: &Graph, h: Hparams, seed: u64) -> f64 {
    let d = g.descriptor();
    let convs = d
        .layers
        .iter()
        .filter(|l| l.kind == LayerKind::Conv2d)
        .count() as f64;
    let params = OpCount::of(g).map_or(1.0, |c| c.params as f64).max(1.0);
    let skips = d.skips.len() as f64;
    let capacity = 0.93 - 0.30 * (-convs / 10.0).exp() - 0.04 * (-skips / 4.0).exp()
        + 0.015 * (params / 2e5).ln().clamp(-2.0, 2.0)
        - 0.02 * (params / 2e7).max(0.0);
    let b = (f64::from(h.batch_size) - 64.0) / 128.0;
    let hp = -0.05 * b * b - if h.kernel_size == 5 { 0.0 } else { 0.004 };
    let mut hasher = DefaultHasher::new();
    (d, seed).hash(&mut hasher);
    let noise = (hasher.finish() % 10_000) as f64 / 10_000.0 - 0.5;
    (capacity + hp + 0.006 * noise).clamp(0.0, 1.0)
}

/// One simulated trial.
#[derive(Clone, Debug, Serialize)]
pub struct SimTrial {
    /// Trial number (also the model id).
    pub trial: u64,
    /// Model id of the father (`None` for the initial model).
    pub father: Option<u64>,
    /// Morphisms applied to the father.
    pub morphisms: Vec<Morphism>,
    /// Hyperparameters from TPE.
    pub hparams: Hparams,
    /// The GP's prediction (mean, std) when the optimiser proposed it.
    pub predicted: Option<(f64, f64)>,
    /// The synthetic accuracy observed.
    pub accuracy: f64,
    /// Forward operations per image.
    pub fp_per_image: u64,
    /// Parameters.
    pub params: u64,
    /// Seconds the optimiser took to propose it.
    pub generate_s: f64,
    /// Search work for it.
    pub stats: SearchStats,
}

/// Runs `trials` trials from `start`; calls `each` after every trial.
pub fn simulate(
    start: &Graph,
    trials: u64,
    optimizer: &BayesOptimizer,
    tpe: &mut Tpe,
    seed: u64,
    mut each: impl FnMut(&SimTrial),
) -> Vec<SimTrial> {
    let mut history: Vec<Observed> = Vec::new();
    let mut out = Vec::new();
    for trial in 0..trials {
        let h = tpe.suggest();
        let t = Instant::now();
        let proposal = if history.is_empty() {
            None
        } else {
            optimizer.propose(&history, &HashSet::new(), h.kernel_size, trial)
        };
        let generate_s = t.elapsed().as_secs_f64();
        let (graph, father, morphisms, predicted, stats) = match proposal {
            Some(p) => (
                p.graph,
                Some(p.father),
                p.morphisms,
                Some((p.mean, p.std)),
                p.stats,
            ),
            None if history.is_empty() => {
                (start.clone(), None, vec![], None, SearchStats::default())
            }
            None => break, // the neighbourhood is exhausted
        };
        let accuracy = synthetic_accuracy(&graph, h, seed);
        tpe.observe(h, 1.0 - accuracy);
        let count = OpCount::of(&graph).expect("the optimiser only proposes valid graphs");
        let record = SimTrial {
            trial,
            father,
            morphisms,
            hparams: h,
            predicted,
            accuracy,
            fp_per_image: count.fp_per_image,
            params: count.params,
            generate_s,
            stats,
        };
        each(&record);
        history.push(Observed {
            id: trial,
            descriptor: graph.descriptor(),
            graph: Arc::new(graph),
            accuracy,
        });
        out.push(record);
    }
    out
}

/// Short text for a morphism list: `deeper(stem.relu,k5) + wider(stage1.block0.1.conv)`.
pub fn describe(morphisms: &[Morphism]) -> String {
    if morphisms.is_empty() {
        return "(initial model)".into();
    }
    morphisms
        .iter()
        .map(|m| match m {
            Morphism::Deeper { after, kernel } => format!("deeper({after},k{kernel})"),
            Morphism::Wider { layer } => format!("wider({layer})"),
            Morphism::Skip { from, to } => format!("skip({from}->{to})"),
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{cifar_resnet, CifarResnetConfig, Shape};
    use crate::search::{BayesConfig, Space, TpeConfig};

    #[test]
    fn the_search_improves_on_its_start_and_trees_are_consistent() {
        let start = cifar_resnet(
            &CifarResnetConfig {
                blocks: vec![1, 1, 1],
                width: 16,
            },
            Shape::new(3, 32, 32),
            10,
        );
        let opt = BayesOptimizer::new(BayesConfig {
            seed: 3,
            ..BayesConfig::default()
        })
        .unwrap();
        let mut tpe = Tpe::new(
            TpeConfig {
                seed: 3,
                ..TpeConfig::default()
            },
            Space::default(),
        )
        .unwrap();
        let trials = simulate(&start, 25, &opt, &mut tpe, 3, |_| {});
        assert_eq!(trials.len(), 25);
        assert!(trials[0].father.is_none());
        for t in &trials[1..] {
            let f = t.father.unwrap();
            assert!(f < t.trial, "father {f} of trial {} is earlier", t.trial);
            assert!(!t.morphisms.is_empty());
            assert!(t.predicted.is_some());
        }
        let best = trials.iter().map(|t| t.accuracy).fold(0.0, f64::max);
        assert!(
            best > trials[0].accuracy + 0.01,
            "best {best} vs start {}",
            trials[0].accuracy
        );
        // Every architecture is new.
        let mut fps: Vec<(u64, u64)> = trials.iter().map(|t| (t.fp_per_image, t.params)).collect();
        fps.dedup();
        assert!(fps.len() > 20);
    }
}

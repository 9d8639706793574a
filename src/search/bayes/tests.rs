//! Optimiser tests: determinism across pool sizes, de-duplication, bookkeeping.

use super::*;
use crate::arch::{cifar_resnet, CifarResnetConfig, Shape};
use crate::search::morphism::random_morphism;

/// A history of `n` distinct morphs of a small ResNet, with accuracies from `score`.
fn history(n: usize, score: impl Fn(&Graph) -> f64) -> Vec<Observed> {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let start = cifar_resnet(
        &CifarResnetConfig {
            blocks: vec![1, 1, 1],
            width: 8,
        },
        Shape::new(3, 16, 16),
        10,
    );
    let mut out: Vec<Observed> = Vec::new();
    let mut g = start.clone();
    while out.len() < n {
        let d = g.descriptor();
        if !out.iter().any(|o| o.descriptor == d) {
            out.push(Observed {
                id: out.len() as u64,
                accuracy: score(&g),
                graph: Arc::new(g.clone()),
                descriptor: d,
            });
        }
        g = random_morphism(&g, 3, &Limits::default(), &mut rng, 20)
            .map(|(_, g)| g)
            .unwrap_or_else(|| start.clone());
        if rng.random_bool(0.2) {
            g = start.clone();
        }
    }
    out
}

fn depth_score(g: &Graph) -> f64 {
    0.5 + 0.01 * g.nodes.len() as f64
        - 0.000_001 * crate::ops::OpCount::of(g).unwrap().params as f64
}

#[test]
fn same_seed_same_proposal_whatever_the_pool_size() {
    let h = history(25, depth_score);
    let run = |threads| {
        let opt = BayesOptimizer::new(BayesConfig {
            threads,
            seed: 7,
            ..BayesConfig::default()
        })
        .unwrap();
        opt.propose(&h, &HashSet::new(), 5, 3).unwrap()
    };
    let (a, b) = (run(1), run(2));
    assert_eq!(a.graph, b.graph);
    assert_eq!((a.father, &a.morphisms), (b.father, &b.morphisms));
    assert_eq!(a.stats, b.stats);
    assert_eq!(a.mean.to_bits(), b.mean.to_bits());
    // Another call number draws differently.
    let opt = BayesOptimizer::new(BayesConfig {
        seed: 7,
        ..BayesConfig::default()
    })
    .unwrap();
    let c = opt.propose(&h, &HashSet::new(), 5, 4).unwrap();
    assert!(c.graph != a.graph || c.stats != a.stats);
}

#[test]
fn proposals_are_unseen_and_replay_from_their_father() {
    let h = history(15, depth_score);
    let opt = BayesOptimizer::new(BayesConfig::default()).unwrap();
    let mut seen = HashSet::new();
    for call in 0..6 {
        let p = opt.propose(&h, &seen, 3, call).unwrap();
        let d = p.graph.descriptor();
        assert!(
            h.iter().all(|o| o.descriptor != d),
            "call {call}: proposed a trained model"
        );
        assert!(!seen.contains(&d), "call {call}: proposed a pending model");
        // The morphisms replayed on the father give the proposal.
        let father = h.iter().find(|o| o.id == p.father).unwrap();
        let mut g = (*father.graph).clone();
        for m in &p.morphisms {
            g = m.apply(&g, &Limits::default()).unwrap();
        }
        assert_eq!(g, p.graph);
        assert!((p.acquisition - (p.mean + 2.576 * p.std)).abs() < 1e-12);
        seen.insert(d);
    }
}

#[test]
fn stats_add_up_and_annealing_follows_the_schedule() {
    let h = history(10, depth_score);
    let opt = BayesOptimizer::new(BayesConfig::default()).unwrap();
    let p = opt.propose(&h, &HashSet::new(), 3, 0).unwrap();
    let s = p.stats;
    // T = 1, 0.5, 0.25, ... stays above 1e-4 for 14 steps.
    assert_eq!(s.annealing_steps, 14);
    assert!(s.expansions >= 1 && s.expansions <= s.annealing_steps);
    assert!(s.neighbours <= 8 * s.expansions);
    assert_eq!(s.acquisitions, s.neighbours - s.duplicates);
    assert_eq!(s.distances, 10 * 9 / 2 + 10 * s.acquisitions);
    // A second proposal reuses the cached history distances.
    let q = opt.propose(&h, &HashSet::new(), 3, 1).unwrap();
    assert_eq!(q.stats.distances, 10 * q.stats.acquisitions);
}

#[test]
fn nothing_to_propose_from_an_empty_history() {
    let opt = BayesOptimizer::new(BayesConfig::default()).unwrap();
    assert!(opt.propose(&[], &HashSet::new(), 3, 0).is_none());
    assert!(BayesOptimizer::new(BayesConfig {
        cooling: 1.0,
        ..BayesConfig::default()
    })
    .is_err());
}

#[test]
fn the_fit_is_bounded_and_the_cache_follows_the_fitting_set() {
    let h = history(30, depth_score);
    let opt = BayesOptimizer::new(BayesConfig {
        max_fit: 12,
        ..BayesConfig::default()
    })
    .unwrap();
    let p = opt.propose(&h[..29], &HashSet::new(), 3, 0).unwrap();
    let s = p.stats;
    assert_eq!(s.fitted, 12);
    // The fit's pairs, then 12 distances per acquisition, not 29.
    assert_eq!(s.distances, 12 * 11 / 2 + 12 * s.acquisitions);
    // The annealing still starts from every trained model: the father may be unfitted.
    assert!(h[..29].iter().any(|o| o.id == p.father));
    // One more model: only the pairs of the models that entered the set are computed, and
    // the cache holds no pair outside it.
    let q = opt.propose(&h, &HashSet::new(), 3, 1).unwrap();
    let entered = q.stats.distances - 12 * q.stats.acquisitions;
    assert!(
        entered > 0 && entered <= 3 * 11,
        "{entered} new pairs of 66"
    );
    assert_eq!(opt.distances.lock().unwrap().len(), 12 * 11 / 2);
    // Unbounded, the same history fits all 30.
    let all = BayesOptimizer::new(BayesConfig::default()).unwrap();
    assert_eq!(
        all.propose(&h, &HashSet::new(), 3, 1).unwrap().stats.fitted,
        30
    );
}

//! The leader's copy of the primary's view against the whole history: up to the view's
//! bound the generator proposes exactly what it would from every trained model; beyond it,
//! its Gaussian process is fitted on the same models.

use std::collections::HashSet;
use std::sync::Arc;

use rand::SeedableRng;

use super::Known;
use crate::arch::{by_name, Shape};
use crate::roles::primary::view::View;
use crate::search::bayes::fitset::fitting_set;
use crate::search::{random_morphism, BayesConfig, BayesOptimizer, Observed};
use crate::world::protocol::HistoryEntry;

/// `n` trained models, a random walk of morphisms from ResNet-8 (every one a new
/// architecture), with ids out of order and accuracies with ties.
fn history(n: usize) -> Vec<HistoryEntry> {
    let start = by_name("resnet8", Shape::new(1, 28, 28), 10).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let (mut current, mut seen, mut out) = (start.clone(), HashSet::new(), Vec::new());
    while out.len() < n {
        let Some((_, next)) = random_morphism(&current, 3, &Default::default(), &mut rng, 5) else {
            current = start.clone();
            continue;
        };
        current = next.clone();
        if !seen.insert(next.descriptor()) {
            continue;
        }
        let k = out.len() as u64;
        out.push(HistoryEntry {
            model_id: (k * 31) % 101,
            father: None,
            graph: Arc::new(next),
            accuracy: ((k * 7) % 5) as f64 / 5.0,
            position: 0,
        });
    }
    out
}

fn observed(e: &HistoryEntry) -> Observed {
    Observed {
        id: e.model_id,
        descriptor: e.graph.descriptor(),
        graph: Arc::clone(&e.graph),
        accuracy: e.accuracy,
    }
}

fn optimizer(bound: usize) -> BayesOptimizer {
    BayesOptimizer::new(BayesConfig {
        max_fit: bound,
        seed: 7,
        ..BayesConfig::default()
    })
    .unwrap()
}

#[test]
fn up_to_the_bound_the_generator_proposes_what_it_would_from_the_whole_history() {
    let bound = 10;
    let (mut view, mut known, mut full) = (View::new(bound, 1), Known::default(), Vec::new());
    let (from_full, from_view) = (optimizer(bound), optimizer(bound));
    for (k, e) in history(24).into_iter().enumerate() {
        full.push(observed(&e));
        view.push(e);
        known.apply(view.delta(0));
        let mine = known.models();
        let none = HashSet::new();
        let ids = |h: &[Observed]| h.iter().map(|o| o.id).collect::<Vec<_>>();
        if full.len() <= bound {
            assert_eq!(ids(&mine), ids(&full), "the whole history, in its order");
            let proposal = |o: &BayesOptimizer, h: &[Observed]| {
                o.propose(h, &none, 3, k as u64)
                    .map(|p| (p.graph.descriptor(), p.father, p.acquisition))
            };
            assert_eq!(
                proposal(&from_full, &full),
                proposal(&from_view, &mine),
                "model {k}"
            );
        } else {
            // What the process is fitted on, in the order it is fitted.
            let fitted: Vec<u64> = (fitting_set(&full, bound).into_iter())
                .map(|i| full[i].id)
                .collect();
            assert_eq!(ids(&mine), fitted, "model {k}");
        }
    }
}

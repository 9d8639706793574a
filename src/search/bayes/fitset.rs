//! The Gaussian process's fitting set: at most `max_fit` trained models of the history.
//! A fit costs O(m²) distances and O(m³) factorisations and every prediction O(m)
//! distances, so at the paper's scale (thousands of trained models) an unbounded set would
//! make one proposal take minutes. Past the bound the set keeps, in this order: the best
//! half by accuracy (where the annealing searches), the most recent quarter (what the other
//! groups just learned), and a stable sample of the rest — each model has a fixed rank
//! from its id, so the sample changes little as the history grows and the distance cache
//! stays useful.

use std::collections::HashSet;

use super::Observed;
use crate::seeds::mix;

/// A model's fixed place in the stable sample of the rest: a function of its id alone, so
/// the sample changes little as the history grows.
pub fn rank(id: u64) -> u64 {
    mix(id ^ 0x6669_7473_6574)
}

/// Indices into `history` of the models the process is fitted on, in history order: every
/// model while the history has at most `max_fit` (at least 1), else `max_fit` of them.
pub fn fitting_set(history: &[Observed], max_fit: usize) -> Vec<usize> {
    let (n, max) = (history.len(), max_fit.max(1));
    if n <= max {
        return (0..n).collect();
    }
    let mut chosen: HashSet<usize> = HashSet::with_capacity(max);
    // The best half; among equal accuracies, the earlier model.
    let mut by_accuracy: Vec<usize> = (0..n).collect();
    by_accuracy.sort_by(|&a, &b| {
        (history[b].accuracy)
            .total_cmp(&history[a].accuracy)
            .then(history[a].id.cmp(&history[b].id))
    });
    chosen.extend(by_accuracy.into_iter().take(max / 2));
    // The most recent quarter not chosen yet.
    let mut by_id: Vec<usize> = (0..n).collect();
    by_id.sort_by_key(|&i| std::cmp::Reverse(history[i].id));
    let recent: Vec<usize> = by_id
        .into_iter()
        .filter(|i| !chosen.contains(i))
        .take(max / 4)
        .collect();
    chosen.extend(recent);
    // The rest by each model's fixed rank.
    let mut others: Vec<usize> = (0..n).filter(|i| !chosen.contains(i)).collect();
    others.sort_by_key(|&i| (rank(history[i].id), history[i].id));
    let room = max - chosen.len();
    chosen.extend(others.into_iter().take(room));
    let mut out: Vec<usize> = chosen.into_iter().collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::arch::{cifar_resnet, CifarResnetConfig, Shape};

    /// `n` models with accuracy a function of the id (not monotone), sharing one graph (the
    /// selection looks only at ids and accuracies).
    fn models(n: u64) -> Vec<Observed> {
        let g = Arc::new(cifar_resnet(
            &CifarResnetConfig {
                blocks: vec![1],
                width: 4,
            },
            Shape::new(3, 8, 8),
            10,
        ));
        let d = g.descriptor();
        (0..n)
            .map(|id| Observed {
                id,
                graph: Arc::clone(&g),
                descriptor: d.clone(),
                accuracy: ((id * 37) % 101) as f64 / 101.0,
            })
            .collect()
    }

    #[test]
    fn small_histories_are_fitted_whole() {
        let h = models(40);
        assert_eq!(fitting_set(&h, 40), (0..40).collect::<Vec<_>>());
        assert_eq!(fitting_set(&h, 500), (0..40).collect::<Vec<_>>());
    }

    #[test]
    fn large_histories_keep_the_best_the_newest_and_a_stable_sample() {
        let h = models(2000);
        let set = fitting_set(&h, 100);
        assert_eq!(set.len(), 100);
        assert!(
            set.windows(2).all(|w| w[0] < w[1]),
            "history order, no repeats"
        );
        // The best 50 by accuracy are all in.
        let mut best: Vec<usize> = (0..h.len()).collect();
        best.sort_by(|&a, &b| h[b].accuracy.total_cmp(&h[a].accuracy).then(a.cmp(&b)));
        for i in &best[..50] {
            assert!(set.contains(i), "best model {i} left out");
        }
        // So is the newest model, whatever its accuracy.
        assert!(set.contains(&1999));
        // One more model changes the set only a little: the cache keeps most pairs.
        let bigger = models(2001);
        let next = fitting_set(&bigger, 100);
        let kept = next.iter().filter(|i| set.contains(i)).count();
        assert!(kept >= 90, "only {kept} of 100 kept after one new model");
        // And the selection is a function of the history alone.
        assert_eq!(fitting_set(&h, 100), set);
    }
}

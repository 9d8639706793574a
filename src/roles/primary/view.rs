//! What the groups' generators see of the history: not every trained model, but the ones
//! their Gaussian process is fitted on — the fitting set's rule
//! ([`crate::search::bayes::fitset`]: the best half by accuracy, the most recent quarter, a
//! stable sample of the rest, at most the bound) applied to the whole history here, once per
//! trained model, at a cost that grows with the bound and not with the history. Each group
//! is sent only what changed in that view since its last reply (models that entered, ids
//! that left), so a reply is bounded by the view whatever the number of groups or models.
//! A reply's entries share the history's graphs (`Arc`): a ResNet-50-sized graph is a few
//! hundred nodes, each with its own allocations, which copying and releasing for every
//! reply cost more than encoding them.
//! The annealing starts from the best trained models, all of them in the view; a proposal
//! duplicating a model outside it is caught by the primary's de-duplication.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeSet, HashMap, HashSet};

use crate::search::bayes::fitset::rank as fitset_rank;
use crate::world::protocol::{HistoryEntry, ViewDelta};

/// An accuracy ordered by [`f64::total_cmp`], as the fitting set orders them.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Accuracy(f64);

impl Eq for Accuracy {}

impl PartialOrd for Accuracy {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Accuracy {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// The history, the view chosen from it, and what each group holds of the view.
#[derive(Debug)]
pub struct View {
    bound: usize,
    /// Every trained model, by id; `position` is its place in the history.
    models: HashMap<u64, HistoryEntry>,
    /// Best first; among equal accuracies, the lower id.
    by_accuracy: BTreeSet<(Reverse<Accuracy>, u64)>,
    /// Every id (the newest last).
    ids: BTreeSet<u64>,
    /// The stable sample's order: each model's fixed rank, then its id.
    by_rank: BTreeSet<(u64, u64)>,
    /// The view's ids, ascending.
    chosen: Vec<u64>,
    /// The ids each group was last sent, ascending.
    held: Vec<Vec<u64>>,
}

impl View {
    /// An empty history whose view holds at most `bound` models (at least 1), for `groups`
    /// groups.
    pub fn new(bound: usize, groups: usize) -> Self {
        View {
            bound: bound.max(1),
            models: HashMap::new(),
            by_accuracy: BTreeSet::new(),
            ids: BTreeSet::new(),
            by_rank: BTreeSet::new(),
            chosen: Vec::new(),
            held: vec![Vec::new(); groups],
        }
    }

    /// A resumed run's history, in its order (positions are renumbered from 0).
    pub fn restored(history: Vec<HistoryEntry>, bound: usize, groups: usize) -> Self {
        let mut v = View::new(bound, groups);
        for e in history {
            v.insert(e);
        }
        v.choose();
        v
    }

    /// Trained models in the history.
    pub fn len(&self) -> usize {
        self.models.len()
    }

    /// Whether no model was trained yet.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// Adds a trained model at the end of the history and updates the view.
    pub fn push(&mut self, entry: HistoryEntry) {
        self.insert(entry);
        self.choose();
    }

    fn insert(&mut self, mut entry: HistoryEntry) {
        let id = entry.model_id;
        entry.position = self.models.len() as u64;
        self.by_accuracy
            .insert((Reverse(Accuracy(entry.accuracy)), id));
        self.ids.insert(id);
        self.by_rank.insert((fitset_rank(id), id));
        self.models.insert(id, entry);
    }

    /// Chooses the view from the history, as the fitting set chooses from it.
    fn choose(&mut self) {
        let n = self.models.len();
        if n <= self.bound {
            self.chosen = self.ids.iter().copied().collect();
            return;
        }
        let max = self.bound;
        let mut chosen: HashSet<u64> = HashSet::with_capacity(max);
        chosen.extend(self.by_accuracy.iter().take(max / 2).map(|&(_, id)| id));
        let recent: Vec<u64> = (self.ids.iter().rev())
            .filter(|id| !chosen.contains(*id))
            .take(max / 4)
            .copied()
            .collect();
        chosen.extend(recent);
        let room = max - chosen.len();
        let sample: Vec<u64> = (self.by_rank.iter())
            .filter(|(_, id)| !chosen.contains(id))
            .take(room)
            .map(|&(_, id)| id)
            .collect();
        chosen.extend(sample);
        self.chosen = chosen.into_iter().collect();
        self.chosen.sort_unstable();
    }

    /// The view's ids, ascending.
    pub fn chosen(&self) -> &[u64] {
        &self.chosen
    }

    /// What `group` has not been sent of the view (in history order) and the ids it holds
    /// that left it; afterwards the group holds the view.
    pub fn delta(&mut self, group: u32) -> ViewDelta {
        let held = &mut self.held[group as usize];
        let (mut added, mut removed) = (Vec::new(), Vec::new());
        let (mut i, mut j) = (0, 0);
        while i < self.chosen.len() || j < held.len() {
            match (self.chosen.get(i), held.get(j)) {
                (Some(a), Some(b)) if a == b => (i, j) = (i + 1, j + 1),
                (Some(a), Some(b)) if a < b => {
                    added.push(self.models[a].clone());
                    i += 1;
                }
                (Some(a), None) => {
                    added.push(self.models[a].clone());
                    i += 1;
                }
                (_, Some(b)) => {
                    removed.push(*b);
                    j += 1;
                }
                (None, None) => break,
            }
        }
        added.sort_by_key(|e| e.position);
        held.clone_from(&self.chosen);
        ViewDelta { added, removed }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::arch::{cifar_resnet, CifarResnetConfig, Graph, Shape};
    use crate::search::bayes::fitset::fitting_set;
    use crate::search::Observed;

    fn graph() -> Graph {
        cifar_resnet(
            &CifarResnetConfig {
                blocks: vec![1],
                width: 4,
            },
            Shape::new(3, 8, 8),
            10,
        )
    }

    /// Model `k` of a history: ids out of order (registered before others ended) and
    /// accuracies with ties.
    fn entry(k: u64, g: &Graph) -> HistoryEntry {
        HistoryEntry {
            model_id: (k * 7919) % 10_007,
            father: None,
            graph: Arc::new(g.clone()),
            accuracy: ((k * 37) % 23) as f64 / 23.0,
            position: 0,
        }
    }

    #[test]
    fn the_view_is_the_fitting_set_of_the_whole_history_at_every_size() {
        let g = graph();
        let d = g.descriptor();
        let shared = Arc::new(g.clone());
        for bound in [1, 8, 40] {
            let mut view = View::new(bound, 1);
            let mut history: Vec<Observed> = Vec::new();
            for k in 0..300 {
                let e = entry(k, &g);
                history.push(Observed {
                    id: e.model_id,
                    graph: Arc::clone(&shared),
                    descriptor: d.clone(),
                    accuracy: e.accuracy,
                });
                view.push(e);
                let mut want: Vec<u64> = fitting_set(&history, bound)
                    .into_iter()
                    .map(|i| history[i].id)
                    .collect();
                want.sort_unstable();
                assert_eq!(view.chosen(), &want[..], "bound {bound}, {} models", k + 1);
            }
        }
    }

    #[test]
    fn a_group_is_sent_what_changed_since_its_last_reply_and_holds_the_view() {
        let g = graph();
        let mut view = View::new(8, 2);
        for k in 0..5 {
            view.push(entry(k, &g));
        }
        // Below the bound: everything, in history order, then nothing new.
        let first = view.delta(0);
        let positions: Vec<u64> = first.added.iter().map(|e| e.position).collect();
        assert_eq!(positions, [0, 1, 2, 3, 4]);
        assert!(first.removed.is_empty());
        assert_eq!(view.delta(0), ViewDelta::default());
        for k in 5..200 {
            view.push(entry(k, &g));
        }
        // Far past the bound: at most the view, and what the group ends up holding is it.
        let mut held: Vec<u64> = first.added.iter().map(|e| e.model_id).collect();
        let later = view.delta(0);
        assert!(later.added.len() <= 8);
        held.retain(|id| !later.removed.contains(id));
        held.extend(later.added.iter().map(|e| e.model_id));
        held.sort_unstable();
        assert_eq!(held, view.chosen());
        // Another group, never sent anything, gets the whole view and nothing to remove.
        let other = view.delta(1);
        assert_eq!(other.added.len(), 8);
        assert!(other.removed.is_empty());
        // Replies share the history's graphs, not copies of them: building and releasing
        // a reply costs no allocation per layer.
        let stored = &view.models[&other.added[0].model_id].graph;
        assert!(Arc::ptr_eq(stored, &other.added[0].graph));
    }

    #[test]
    fn a_restored_history_gives_the_view_the_run_had() {
        let g = graph();
        let history: Vec<HistoryEntry> = (0..100).map(|k| entry(k, &g)).collect();
        let mut live = View::new(16, 1);
        for e in history.clone() {
            live.push(e);
        }
        let restored = View::restored(history, 16, 1);
        assert_eq!(restored.chosen(), live.chosen());
        assert_eq!(restored.len(), 100);
    }
}

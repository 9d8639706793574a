//! A group leader's architecture generator: a background thread that runs the Bayesian
//! optimiser (on its own rayon pool) over the latest history snapshot the leader gave it and
//! keeps a small bounded buffer of candidates filled, so that the group's accelerators only
//! wait for the search when the buffer is empty. Before the group has any history it offers
//! the start architecture (group 0's first trial) or random neighbours of it. With a budget
//! file, each proposal is made holding an exclusive lock on it, so the leaders sharing a
//! machine search one at a time instead of all slowing each other down.

use std::collections::HashSet;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::arch::{Descriptor, Graph};
use crate::search::{random_morphism, BayesConfig, BayesOptimizer, Limits, Observed};

/// A proposed architecture.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The architecture.
    pub graph: Graph,
    /// The trained model it descends from (`None`: the start or a neighbour of it before
    /// any history).
    pub father: Option<u64>,
    /// Kernel size of the deeper morphisms that made it.
    pub kernel: u32,
    /// History entries the proposal saw.
    pub history_len: usize,
}

/// What the leader last told the generator.
struct Snapshot {
    history: Arc<Vec<Observed>>,
    kernel: u32,
}

/// The running generator; dropping it stops the thread.
pub struct Generator {
    snapshot: Arc<Mutex<Snapshot>>,
    rx: Option<Receiver<Candidate>>,
    handle: Option<JoinHandle<()>>,
    /// Seconds the leader spent waiting on an empty buffer.
    waited_s: f64,
}

impl Generator {
    /// Starts generating for `group` from `start`, with kernel size `kernel` until told
    /// otherwise; `buffer` candidates are kept ready.
    pub fn start(
        cfg: BayesConfig,
        start: Graph,
        group: u32,
        seed: u64,
        kernel: u32,
        buffer: usize,
        budget: Option<std::fs::File>,
    ) -> Result<Generator, String> {
        let optimizer = BayesOptimizer::new(cfg)?;
        let snapshot = Arc::new(Mutex::new(Snapshot {
            history: Arc::new(Vec::new()),
            kernel,
        }));
        let (tx, rx) = sync_channel(buffer.max(1));
        let shared = Arc::clone(&snapshot);
        let handle = std::thread::Builder::new()
            .name(format!("generator-{group}"))
            .spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_add(u64::from(group)));
                let mut proposed: HashSet<Descriptor> = HashSet::new();
                let mut offered_start = false;
                for call in 1u64.. {
                    let (history, kernel) = {
                        let s = shared.lock().expect("generator state");
                        (Arc::clone(&s.history), s.kernel)
                    };
                    // The machine's search budget: one proposal at a time (an advisory
                    // lock; a failure to lock only loses the budget, never the search).
                    let held = budget.as_ref().is_some_and(|f| f.lock().is_ok());
                    let (graph, father) = match optimizer.propose(&history, &proposed, kernel, call)
                    {
                        Some(p) => (p.graph, Some(p.father)),
                        None if group == 0 && !offered_start && history.is_empty() => {
                            offered_start = true;
                            (start.clone(), None)
                        }
                        None => {
                            match random_morphism(&start, kernel, &Limits::default(), &mut rng, 50)
                            {
                                Some((_, g)) => (g, None),
                                None => (start.clone(), None),
                            }
                        }
                    };
                    if held {
                        let _ = budget.as_ref().map(std::fs::File::unlock);
                    }
                    proposed.insert(graph.descriptor());
                    let candidate = Candidate {
                        graph,
                        father,
                        kernel,
                        history_len: history.len(),
                    };
                    if tx.send(candidate).is_err() {
                        return; // the leader is done
                    }
                }
            })
            .map_err(|e| format!("starting the generator thread: {e}"))?;
        Ok(Generator {
            snapshot,
            rx: Some(rx),
            handle: Some(handle),
            waited_s: 0.0,
        })
    }

    /// Hands the generator a new history and kernel size for its next proposals.
    pub fn update(&self, history: Vec<Observed>, kernel: u32) {
        let mut s = self.snapshot.lock().expect("generator state");
        s.history = Arc::new(history);
        s.kernel = kernel;
    }

    /// The next candidate, waiting only if the buffer is empty, or `None` once `over()`
    /// says the run has ended: asked before taking and every 100 ms while the buffer is
    /// empty, so that a leader whose generator is still searching at the deadline ends then
    /// instead of after the search.
    pub fn take_unless(&mut self, over: impl Fn() -> bool) -> Result<Option<Candidate>, String> {
        let started = Instant::now();
        let taken = loop {
            if over() {
                break Ok(None);
            }
            let Some(rx) = self.rx.as_ref() else {
                break Err(());
            };
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(c) => break Ok(Some(c)),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break Err(()),
            }
        };
        self.waited_s += started.elapsed().as_secs_f64();
        taken.map_err(|()| "the architecture generator thread died".to_string())
    }

    /// Seconds spent waiting for candidates so far.
    pub fn waited_s(&self) -> f64 {
        self.waited_s
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        self.rx = None; // a blocked send fails, and the thread returns
        if let Some(h) = self.handle.take() {
            // A thread still in a proposal returns when it tries to hand it over: it is
            // left to finish alone rather than waited for (the search of one ResNet-50
            // proposal takes seconds, minutes on an oversubscribed node).
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{cifar_resnet, CifarResnetConfig, Shape};

    /// The generator's next candidate, in a run that never ends.
    fn next(g: &mut Generator) -> Candidate {
        g.take_unless(|| false).unwrap().expect("a candidate")
    }

    fn start() -> Graph {
        cifar_resnet(
            &CifarResnetConfig {
                blocks: vec![1, 1],
                width: 8,
            },
            Shape::new(3, 16, 16),
            10,
        )
    }

    #[test]
    fn a_run_that_is_over_takes_nothing_and_loses_nothing() {
        let cfg = BayesConfig {
            threads: 1,
            ..BayesConfig::default()
        };
        let mut g = Generator::start(cfg, start(), 0, 7, 3, 1, None).unwrap();
        // Over before taking: nothing is taken, even with a candidate ready.
        assert!(g.take_unless(|| true).unwrap().is_none());
        // The first candidate is still the start: the refusal consumed nothing.
        let first = next(&mut g);
        assert_eq!(first.graph, start());
    }

    #[test]
    fn a_wait_on_a_search_that_never_ends_stops_when_the_run_is_over() {
        // A generator whose thread is still searching: its channel stays empty.
        let (tx, rx) = sync_channel::<Candidate>(1);
        let mut g = Generator {
            snapshot: Arc::new(Mutex::new(Snapshot {
                history: Arc::new(Vec::new()),
                kernel: 3,
            })),
            rx: Some(rx),
            handle: None,
            waited_s: 0.0,
        };
        let asked = std::cell::Cell::new(0);
        let over = || {
            asked.set(asked.get() + 1);
            asked.get() > 3
        };
        assert!(g.take_unless(over).unwrap().is_none());
        assert_eq!(
            asked.get(),
            4,
            "asked before taking and after each empty wait"
        );
        // A thread that died is an error, not a wait.
        drop(tx);
        let err = g.take_unless(|| false).unwrap_err();
        assert!(err.contains("generator thread died"), "{err}");
    }

    #[test]
    fn group_zero_starts_from_the_start_then_descends_from_the_history() {
        let cfg = BayesConfig {
            threads: 1,
            ..BayesConfig::default()
        };
        let mut g = Generator::start(cfg.clone(), start(), 0, 7, 3, 1, None).unwrap();
        let first = next(&mut g);
        assert_eq!(first.graph, start());
        assert_eq!(first.father, None);
        // Without history, further candidates are neighbours of the start.
        let second = next(&mut g);
        assert_ne!(second.graph.descriptor(), start().descriptor());
        let trained = Observed {
            id: 41,
            descriptor: start().descriptor(),
            graph: Arc::new(start()),
            accuracy: 0.8,
        };
        g.update(vec![trained], 5);
        // At most `buffer` + 1 stale candidates (one queued, one being sent) precede one
        // generated from the new snapshot.
        let fresh = (0..3)
            .map(|_| next(&mut g))
            .find(|c| c.history_len == 1)
            .expect("a candidate from the new history");
        assert_eq!(fresh.father, Some(41));
        assert_eq!(fresh.kernel, 5);
        // Another group never offers the start itself.
        let mut other = Generator::start(cfg, start(), 1, 7, 3, 1, None).unwrap();
        assert_ne!(next(&mut other).graph.descriptor(), start().descriptor());
    }
}

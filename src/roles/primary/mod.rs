//! The primary (rank 0) as a state machine: model history, global model ids and
//! machine-wide de-duplication, the search tree, TPE, every group's round, and the run's end.
//! [`Primary::handle`] takes one message and the rank that sent it and returns the reply;
//! it never reads the clock or MPI, so it is tested without `mpirun` (see `tests.rs`).
//! State is indexed by the sender's rank, never by what a message claims. The MPI loop
//! around it is in `serve`.

pub mod resume;
mod serve;
pub mod served;
#[cfg(test)]
mod tests;
pub mod view;

use std::collections::{HashMap, HashSet};

use aiperf_records::digest::GroupChain;
use aiperf_records::schema::{TpeRow, TrialRow, TrialStatus};
use aiperf_records::writer::PrimaryWriter;
use aiperf_records::RecordError;

pub use super::status::{Totals, Trials};
pub use serve::{serve, ServeConfig, ServeError, ServeOutcome};

use crate::arch::{Descriptor, Graph};
use crate::ops::OpCount;
use crate::search::{Hparams, Space, Tpe, TpeConfig};
use crate::world::protocol::{HistoryEntry, ToGroup, ToPrimary, ViewDelta};
use resume::Resumed;
use view::View;

pub use crate::train::schedule::WARMUP_ROUNDS;

/// Where the primary's records go: `primary.h5`, or memory in tests.
pub trait RecordSink {
    /// A registered architecture.
    fn architecture(&mut self, model_id: u64, json: &str) -> Result<(), RecordError>;
    /// A TPE observation.
    fn tpe(&mut self, row: &TpeRow) -> Result<(), RecordError>;
    /// A finished, stopped or failed trial.
    fn trial(&mut self, row: &TrialRow) -> Result<(), RecordError>;
}

impl RecordSink for PrimaryWriter {
    fn architecture(&mut self, model_id: u64, json: &str) -> Result<(), RecordError> {
        self.append_architecture(model_id, json)
    }
    fn tpe(&mut self, row: &TpeRow) -> Result<(), RecordError> {
        self.append_tpe(row)
    }
    fn trial(&mut self, row: &TrialRow) -> Result<(), RecordError> {
        self.append_trial(row)
    }
}

/// Records kept in memory (tests, benchmarks).
#[derive(Debug, Default)]
pub struct MemorySink {
    /// Architectures by model id, in arrival order.
    pub architectures: Vec<(u64, String)>,
    /// TPE observations.
    pub tpe: Vec<TpeRow>,
    /// Trials.
    pub trials: Vec<TrialRow>,
}

impl RecordSink for MemorySink {
    fn architecture(&mut self, model_id: u64, json: &str) -> Result<(), RecordError> {
        self.architectures.push((model_id, json.to_string()));
        Ok(())
    }
    fn tpe(&mut self, row: &TpeRow) -> Result<(), RecordError> {
        self.tpe.push(*row);
        Ok(())
    }
    fn trial(&mut self, row: &TrialRow) -> Result<(), RecordError> {
        self.trials.push(*row);
        Ok(())
    }
}

/// A message the primary refuses: a protocol violation, fatal for the run.
#[derive(Debug, thiserror::Error)]
pub enum PrimaryError {
    /// Only group leaders talk to the primary.
    #[error("rank {rank} is not a group leader, yet sent a request (mismatched launch or aiperf builds?)")]
    NotALeader {
        /// The sender.
        rank: i32,
    },
    /// A message claiming another group than the sender's.
    #[error("rank {rank}, leader of group {actual}, sent a message for group {claimed}")]
    WrongGroup {
        /// The sender.
        rank: i32,
        /// The group in the message.
        claimed: u32,
        /// The sender's group.
        actual: u32,
    },
    /// A model the group never registered.
    #[error("group {group} reported model {model_id}, which it did not register")]
    Unregistered {
        /// The group.
        group: u32,
        /// The model id.
        model_id: u64,
    },
    /// A registered architecture that does not infer.
    #[error("group {group} registered an invalid architecture: {message}")]
    BadGraph {
        /// The group.
        group: u32,
        /// Why.
        message: String,
    },
    /// A record could not be written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The search space is unusable.
    #[error("{0}")]
    Space(String),
}

/// What the primary needs to know at the start.
#[derive(Clone, Debug)]
pub struct PrimaryConfig {
    /// World rank of each group's leader.
    pub leaders: Vec<usize>,
    /// The hyperparameter space.
    pub space: Space,
    /// Hyperparameters of warm-up trials without a trained father.
    pub defaults: Hparams,
    /// Seed of TPE.
    pub seed: u64,
    /// The run's end on the common clock.
    pub deadline_s: f64,
    /// The run ends once this many epochs are reported over all groups, if it comes before
    /// the deadline (`--stop-after-epochs`).
    pub stop_after_epochs: Option<u64>,
    /// The run ends once this many trials ended (trained, failed or stopped) over all
    /// groups, if it comes before the deadline (`--stop-after-trials`).
    pub stop_after_trials: Option<u64>,
    /// Most models of the history the groups' generators are sent: the search's fitting
    /// set ([`crate::search::bayes::MAX_FIT`] in a run).
    pub view_bound: usize,
}

#[derive(Clone, Debug, Default)]
struct GroupState {
    round: u32,
    bye: bool,
    chain: Option<GroupChain>,
}

#[derive(Clone, Debug)]
struct Registered {
    father: Option<u64>,
    graph: Graph,
    group: u32,
    start_s: f64,
}

/// The primary's state.
pub struct Primary<S: RecordSink> {
    sink: S,
    tpe: Tpe,
    cfg: PrimaryConfig,
    group_of_rank: HashMap<i32, u32>,
    groups: Vec<GroupState>,
    view: View,
    seen: HashSet<Descriptor>,
    registered: HashMap<u64, Registered>,
    done: HashMap<u64, Hparams>,
    next_id: u64,
    end: Option<f64>,
    totals: Totals,
}

impl<S: RecordSink> Primary<S> {
    /// A fresh primary writing to `sink`.
    pub fn new(sink: S, cfg: PrimaryConfig) -> Result<Self, PrimaryError> {
        let tpe = Tpe::new(
            TpeConfig {
                seed: cfg.seed,
                ..TpeConfig::default()
            },
            cfg.space.clone(),
        )
        .map_err(PrimaryError::Space)?;
        let group_of_rank = (cfg.leaders.iter().enumerate())
            .map(|(g, &r)| (r as i32, g as u32))
            .collect();
        Ok(Primary {
            sink,
            tpe,
            groups: vec![GroupState::default(); cfg.leaders.len()],
            view: View::new(cfg.view_bound, cfg.leaders.len()),
            cfg,
            group_of_rank,
            seen: HashSet::new(),
            registered: HashMap::new(),
            done: HashMap::new(),
            next_id: 0,
            end: None,
            totals: Totals::default(),
        })
    }

    /// Takes over a stopped run's state (`--resume`).
    pub fn restore(&mut self, r: Resumed) {
        self.view = View::restored(r.history, self.cfg.view_bound, self.groups.len());
        self.seen = r.seen;
        self.next_id = r.next_id;
        for (g, round) in self.groups.iter_mut().zip(r.rounds) {
            g.round = round;
        }
        for (h, loss) in r.tpe {
            self.tpe.observe(h, loss);
        }
        self.done = r.hparams;
        self.totals = r.totals;
    }

    /// The group whose leader is `rank`.
    pub fn group_of(&self, rank: i32) -> Option<u32> {
        self.group_of_rank.get(&rank).copied()
    }

    /// The run's end, once it was decided (the deadline, or the moment it was stopped).
    pub fn end(&self) -> Option<f64> {
        self.end
    }

    /// The status line's totals.
    pub fn totals(&self) -> Totals {
        self.totals
    }

    /// Trials finished (over the whole run) and running (registered in this session and
    /// not finished).
    pub fn trial_counts(&self) -> Trials {
        Trials {
            finished: self.view.len(),
            running: self.registered.len(),
        }
    }

    /// The digest chains of the groups that said goodbye, in group order (recorded at a
    /// clean stop).
    pub fn chains(&self) -> Vec<GroupChain> {
        self.groups.iter().filter_map(|g| g.chain.clone()).collect()
    }

    /// The record sink (to close it).
    pub fn into_sink(self) -> S {
        self.sink
    }

    /// Handles one message from world rank `sender` at `now` on the common clock; `halt`
    /// says the run must stop before its deadline (a signal, a stalled group). Returns the
    /// reply to send, if any.
    pub fn handle(
        &mut self,
        sender: i32,
        msg: ToPrimary,
        now: f64,
        halt: bool,
    ) -> Result<Option<ToGroup>, PrimaryError> {
        let group = self
            .group_of(sender)
            .ok_or(PrimaryError::NotALeader { rank: sender })?;
        let claimed = msg.group();
        if claimed != group {
            return Err(PrimaryError::WrongGroup {
                rank: sender,
                claimed,
                actual: group,
            });
        }
        // Once the end is decided, every later request is told to stop.
        let stopping = halt || now >= self.cfg.deadline_s || self.end.is_some() || self.enough();
        if stopping && self.end.is_none() {
            self.end = Some(now.min(self.cfg.deadline_s));
        }
        let stop_or = |reply: ToGroup| if stopping { ToGroup::Stop } else { reply };
        Ok(match msg {
            ToPrimary::Hello { .. } => Some(ToGroup::Welcome {
                history: self.delta(group),
                round: self.groups[group as usize].round,
            }),
            ToPrimary::Register { father, graph, .. } => Some(if stopping {
                ToGroup::Stop
            } else {
                self.register(group, father, graph, now)?
            }),
            ToPrimary::Suggest { father, .. } => {
                Some(stop_or(ToGroup::Hparams(self.suggest(group, father))))
            }
            ToPrimary::Progress {
                model_id,
                val_accuracy,
                ops,
                ..
            } => {
                self.progress(group, model_id, val_accuracy, ops)?;
                if self.enough() && self.end.is_none() {
                    self.end = Some(now.min(self.cfg.deadline_s));
                }
                Some(if self.end.is_some() {
                    ToGroup::Stop
                } else {
                    ToGroup::Continue
                })
            }
            ToPrimary::Result {
                model_id,
                accuracy,
                reported,
                epochs,
                hparams,
                failed,
                ..
            } => {
                let outcome = Outcome {
                    accuracy,
                    reported,
                    epochs,
                    hparams,
                    failed,
                };
                self.result(group, model_id, outcome, stopping, now)?;
                if self.enough() && self.end.is_none() {
                    // The group's next request is told to stop.
                    self.end = Some(now.min(self.cfg.deadline_s));
                }
                Some(if stopping {
                    ToGroup::Stop
                } else {
                    ToGroup::History(self.delta(group))
                })
            }
            ToPrimary::Bye { chain, .. } => {
                let g = &mut self.groups[group as usize];
                g.bye = true;
                // The sender's group, whatever the message says (docs/design.md §2).
                g.chain = Some(GroupChain { group, ..chain });
                None
            }
        })
    }

    /// An epoch of `group`'s model `model_id` ended: counted in the run's totals.
    fn progress(
        &mut self,
        group: u32,
        model_id: u64,
        val_accuracy: f64,
        ops: u64,
    ) -> Result<(), PrimaryError> {
        self.owned(group, model_id)?;
        self.totals.epochs += 1;
        self.totals.ops += u128::from(ops);
        self.totals.best = self.totals.best.max(val_accuracy);
        Ok(())
    }

    /// Whether the epochs `--stop-after-epochs` or the trials `--stop-after-trials` asks
    /// for have been reported.
    fn enough(&self) -> bool {
        (self.cfg.stop_after_epochs).is_some_and(|n| self.totals.epochs >= n)
            || (self.cfg.stop_after_trials).is_some_and(|n| self.done.len() as u64 >= n)
    }

    /// What changed in the view since this group's last reply.
    fn delta(&mut self, group: u32) -> ViewDelta {
        self.view.delta(group)
    }

    fn register(
        &mut self,
        group: u32,
        father: Option<u64>,
        graph: Graph,
        now: f64,
    ) -> Result<ToGroup, PrimaryError> {
        OpCount::of(&graph).map_err(|e| PrimaryError::BadGraph {
            group,
            message: e.to_string(),
        })?;
        // The primary derives the descriptor itself: it never trusts the sender's.
        if !self.seen.insert(graph.descriptor()) {
            // What the others trained meanwhile, so the next proposal can differ.
            return Ok(ToGroup::Duplicate {
                history: self.delta(group),
            });
        }
        let id = self.next_id;
        self.next_id += 1;
        self.sink.architecture(id, &graph.to_json())?;
        self.registered.insert(
            id,
            Registered {
                father,
                graph,
                group,
                start_s: now,
            },
        );
        Ok(ToGroup::Registered { model_id: id })
    }

    /// Warm-up rounds take the father's hyperparameters (or the preset's defaults); from
    /// the fourth round on, TPE suggests.
    fn suggest(&mut self, group: u32, father: Option<u64>) -> Hparams {
        if crate::train::schedule::in_warm_up(self.groups[group as usize].round) {
            return father
                .and_then(|f| self.done.get(&f).copied())
                .unwrap_or(self.cfg.defaults);
        }
        self.tpe.suggest()
    }

    fn owned(&self, group: u32, model_id: u64) -> Result<(), PrimaryError> {
        let mine = self
            .registered
            .get(&model_id)
            .is_some_and(|r| r.group == group)
            || self.done.contains_key(&model_id);
        if mine {
            Ok(())
        } else {
            Err(PrimaryError::Unregistered { group, model_id })
        }
    }

    fn result(
        &mut self,
        group: u32,
        model_id: u64,
        o: Outcome,
        stopped: bool,
        now: f64,
    ) -> Result<(), PrimaryError> {
        if self.done.contains_key(&model_id) {
            // A repeated result: answered, not recorded twice.
            log::warn!("group {group} reported model {model_id} again: ignored");
            return Ok(());
        }
        let Some(reg) = self
            .registered
            .remove(&model_id)
            .filter(|r| r.group == group)
        else {
            return Err(PrimaryError::Unregistered { group, model_id });
        };
        let state = &mut self.groups[group as usize];
        let round = state.round;
        state.round += 1;
        // A failed trial tells TPE its hyperparameters are the worst.
        let loss = if o.failed { 1.0 } else { 1.0 - o.reported };
        self.tpe.observe(o.hparams, loss);
        self.sink.tpe(&TpeRow {
            time_s: now,
            batch_size: o.hparams.batch_size,
            kernel_size: o.hparams.kernel_size,
            loss,
            digest: [0; 32],
        })?;
        self.sink.trial(&TrialRow {
            model_id,
            father: reg.father.map_or(-1, |f| f as i64),
            group,
            round,
            batch_size: o.hparams.batch_size,
            kernel_size: o.hparams.kernel_size,
            epochs: o.epochs,
            best_accuracy: o.accuracy,
            reported_accuracy: o.reported,
            start_s: reg.start_s,
            end_s: now,
            status: match (o.failed, stopped) {
                (true, _) => TrialStatus::Failed,
                (false, true) => TrialStatus::Stopped,
                (false, false) => TrialStatus::Finished,
            },
            digest: [0; 32],
        })?;
        self.done.insert(model_id, o.hparams);
        if o.epochs > 0 {
            self.view.push(HistoryEntry {
                model_id,
                father: reg.father,
                graph: std::sync::Arc::new(reg.graph),
                accuracy: o.reported,
                position: 0, // the view numbers it
            });
        }
        Ok(())
    }
}

/// A trial's result as the leader reported it.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    accuracy: f64,
    reported: f64,
    epochs: u32,
    hparams: Hparams,
    failed: bool,
}

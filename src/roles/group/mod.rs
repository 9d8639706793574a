//! A replica group's side of the run: the leader (registers candidates from its background
//! generator, asks for hyperparameters, broadcasts each trial, records every epoch, reports
//! results) and the members (train what the leader broadcasts), both over one
//! [`crate::train::Trainer`].

#[cfg(test)]
mod tests;
mod trial;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use aiperf_records::writer::GroupWriter;
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;
use serde::{Deserialize, Serialize};

use super::context::RunContext;
use super::generator::Generator;
use crate::monitor::Monitor;
use crate::search::{BayesConfig, Observed};
use crate::seeds::mix;
use crate::train::schedule::{epoch_budget, predict_final_accuracy};
use crate::train::{TrainError, TrialSpec};
use crate::world::protocol::{ToGroup, ToPrimary, ViewDelta};
use crate::world::transport::{ask, broadcast_value, tell, TransportError};
use trial::{run_trial, LeaderSide, TrialId, TrialOutcome};

/// What a group's other ranks say when their leader tells them the primary stopped
/// answering.
const LOST_PRIMARY: &str = "the group's leader lost the primary";

/// Why a group rank failed (fatal for the run).
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// Talking to the primary or the group failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The trainer failed.
    #[error(transparent)]
    Train(#[from] TrainError),
    /// The records could not be written.
    #[error(transparent)]
    Record(#[from] aiperf_records::RecordError),
    /// The architecture does not infer.
    #[error(transparent)]
    Arch(#[from] crate::arch::ArchError),
    /// The ranks' parameters differ after the exchange.
    #[error("model {model_id}, epoch {epoch}: the ranks of the group hold different parameters after the gradient exchange (run `aiperf dp-check` under the same launcher to diagnose)")]
    Diverged {
        /// The model.
        model_id: u64,
        /// The epoch.
        epoch: u32,
    },
    /// An epoch's operation count does not fit the records' u64.
    #[error("model {model_id}: the epoch's {what} exceed 2^64 (use fewer images per epoch)")]
    OpsOverflow {
        /// The model.
        model_id: u64,
        /// Which count.
        what: &'static str,
    },
    /// The generator failed.
    #[error("architecture generator: {0}")]
    Generator(String),
    /// The primary stopped answering the leader (the leader's message); every rank of the
    /// group was told, and each ends the job.
    #[error("{0}")]
    PrimaryGone(String),
    /// A rank's traced spans did not arrive whole.
    #[error("rank {rank} of the group sent an unreadable trace: {message}")]
    Trace {
        /// The rank within the group.
        rank: usize,
        /// What was wrong.
        message: String,
    },
    /// The leader broadcast a verdict byte this rank does not know (a build mismatch
    /// between the group's ranks).
    #[error("model {model_id}: the group's leader sent the unknown epoch verdict {verdict} (every rank of a job must run the same aiperf)")]
    UnknownVerdict {
        /// The trial.
        model_id: u64,
        /// The byte received.
        verdict: u8,
    },
    /// The results folder is another job's, or cannot be created
    /// (`aiperf_records::folder::confirm`).
    #[error("{0}")]
    Claim(String),
}

/// What a leader tells its group before each trial.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum GroupOrder {
    /// Train this trial.
    Train {
        /// Global model id.
        model_id: u64,
        /// The group's round (0-based).
        round: u32,
        /// What to train.
        spec: TrialSpec,
    },
    /// The run is over.
    End,
    /// The primary stopped answering: every rank ends the job at once.
    Abandon,
}

/// The leader's copy of the primary's view of the history (the search's fitting set), by
/// place in the history: what its generator proposes from.
#[derive(Default)]
struct Known {
    by_position: BTreeMap<u64, Observed>,
    position_of: HashMap<u64, u64>,
}

impl Known {
    /// Applies what changed in the view.
    fn apply(&mut self, delta: ViewDelta) {
        for id in delta.removed {
            if let Some(p) = self.position_of.remove(&id) {
                self.by_position.remove(&p);
            }
        }
        for e in delta.added {
            self.position_of.insert(e.model_id, e.position);
            let o = Observed {
                id: e.model_id,
                descriptor: e.graph.descriptor(),
                graph: e.graph,
                accuracy: e.accuracy,
            };
            self.by_position.insert(e.position, o);
        }
    }

    /// The models in history order.
    fn models(&self) -> Vec<Observed> {
        self.by_position.values().cloned().collect()
    }
}

/// Applies a view delta from the primary to the leader's copy; false when the reply held
/// none (the run is over).
fn absorb(reply: ToGroup, known: &mut Known) -> bool {
    match reply {
        ToGroup::History(delta) | ToGroup::Welcome { history: delta, .. } => {
            known.apply(delta);
            true
        }
        _ => false,
    }
}

/// The leader's running figures for its closing log line.
#[derive(Default)]
struct Busy {
    trials: u32,
    busy_s: f64,
    in_trials_s: f64,
    epochs: u32,
    warm: Option<(Instant, f64)>,
}

impl Busy {
    fn add(&mut self, out: &TrialOutcome) {
        self.trials += 1;
        self.busy_s += out.busy_s;
        self.in_trials_s += out.wall_s;
        self.epochs += out.epochs;
        // From the end of the first trial on, the generator's buffer is warm.
        match self.warm {
            Some((_, ref mut b)) => *b += out.busy_s,
            None => self.warm = Some((Instant::now(), 0.0)),
        }
    }
}

/// A group leader: registers candidates from its background generator, has the group
/// train them, and reports results until told to stop. When the primary stops answering
/// (gone, frozen, or cut off from this host), the group's ranks are told and the error says
/// so: the group must not go on training and writing records alone.
pub fn leader<C: Communicator>(
    world: &C,
    group_comm: &SimpleCommunicator,
    group: u32,
    ctx: &RunContext,
) -> Result<(), GroupError> {
    match lead(world, group_comm, group, ctx) {
        Err(GroupError::Transport(e @ TransportError::PrimarySilent { .. })) => {
            // Outside a trial the other ranks wait for the next order.
            broadcast_value(group_comm, Some(&GroupOrder::Abandon))?;
            Err(GroupError::PrimaryGone(e.to_string()))
        }
        r => r,
    }
}

fn lead<C: Communicator>(
    world: &C,
    group_comm: &SimpleCommunicator,
    group: u32,
    ctx: &RunContext,
) -> Result<(), GroupError> {
    let first_kernel = ctx.kernel_sizes.first().copied().unwrap_or(3);
    let mut generator = start_generator(ctx, group, first_kernel)?;
    let mut history = Known::default();
    let host = ctx
        .hosts
        .get(world.rank() as usize)
        .cloned()
        .unwrap_or_default();
    let ranks = group_comm.size() as u32;
    let welcome = ask(
        world,
        &ToPrimary::Hello { group, ranks, host },
        &ctx.patience,
    )?;
    // A resumed run goes on from the group's round (budgets, patience, predictions).
    let mut round = match welcome {
        ToGroup::Welcome { round, .. } => round,
        _ => 0,
    };
    let running = absorb(welcome, &mut history);
    // After the welcome: the primary has read a resumed run's records by then. The folder
    // may be node-local (no shared filesystem needed): confirming the claim creates it.
    let folder = aiperf_records::folder::confirm(&ctx.results, &ctx.claim)
        .map_err(|e| GroupError::Claim(format!("{e:#}")))?;
    let writer = if ctx.resume {
        GroupWriter::open_or_create(&folder, group, ranks)
    } else {
        GroupWriter::create(&folder, group, ranks)
    }?;
    generator.update(history.models(), first_kernel);
    let clock = ctx.clock;
    let monitor = Monitor::start(Duration::from_secs_f64(ctx.monitor_interval_s), move || {
        clock.now()
    });
    let side = LeaderSide {
        world,
        writer: &writer,
        group,
        monitor: &monitor,
    };
    let began = Instant::now();
    let mut busy = Busy::default();
    if running {
        while let Some(out) =
            lead_trial(&side, group_comm, ctx, &mut generator, &mut history, round)?
        {
            busy.add(&out);
            round += 1;
            if out.stop_run {
                break;
            }
        }
    }
    broadcast_value(group_comm, Some(&GroupOrder::End))?;
    log_busy(group, &busy, began, generator.waited_s());
    log_checked(ctx, group, group_comm.size(), busy.epochs);
    drop(generator);
    side.flush_monitor()?;
    drop(monitor);
    // Close the records before saying goodbye: rank 0 reads them once every group has.
    let chain = writer.chain();
    drop(writer);
    tell(world, &ToPrimary::Bye { group, chain });
    Ok(())
}

/// Says what was found bit-identical on the group's `ranks` ranks after each of `epochs`
/// epochs — checked after every epoch, a mismatch ends the run: real parameters, or the
/// emulated trainer's exchanged sums (the simulated trainer exchanges nothing).
fn log_checked(ctx: &RunContext, group: u32, ranks: i32, epochs: u32) {
    let what = match ctx.trainer.name() {
        "real" => "parameters",
        "emulated" => "exchanged sums",
        _ => return,
    };
    log::info!(
        "group {group}: {what} bit-identical on all {ranks} ranks after each of {epochs} epochs"
    );
}

/// The leader's background architecture generator (its own rayon pool and seed).
fn start_generator(ctx: &RunContext, group: u32, kernel: u32) -> Result<Generator, GroupError> {
    let bayes = BayesConfig {
        threads: ctx.search_threads,
        seed: ctx.seed ^ u64::from(group),
        ..BayesConfig::default()
    };
    let lock = match &ctx.search_lock {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| GroupError::Generator(format!("{}: {e}", path.display())))?,
        ),
        None => None,
    };
    Generator::start(bayes, ctx.start.clone(), group, ctx.seed, kernel, 1, lock)
        .map_err(GroupError::Generator)
}

/// One trial led by the leader: a candidate the primary accepts, its hyperparameters, the
/// group's training, the result. `None` when the primary says the run is over.
fn lead_trial<C: Communicator>(
    side: &LeaderSide<'_, C>,
    group_comm: &SimpleCommunicator,
    ctx: &RunContext,
    generator: &mut Generator,
    history: &mut Known,
    round: u32,
) -> Result<Option<TrialOutcome>, GroupError> {
    let (world, group) = (side.world, side.group);
    let (model_id, candidate) = loop {
        // At the deadline (or a signal) the leader ends without waiting for the search.
        let Some(c) = generator
            .take_unless(|| ctx.over())
            .map_err(GroupError::Generator)?
        else {
            return Ok(None);
        };
        let register = ToPrimary::Register {
            group,
            father: c.father,
            graph: c.graph.clone(),
        };
        match ask(world, &register, &ctx.patience)? {
            ToGroup::Registered { model_id } => break (model_id, c),
            ToGroup::Duplicate { history: delta } => {
                // Another group registered it first: propose from what they trained.
                if delta != ViewDelta::default() {
                    absorb(ToGroup::History(delta), history);
                    generator.update(history.models(), c.kernel);
                }
            }
            _ => return Ok(None),
        }
    };
    let suggest = ToPrimary::Suggest {
        group,
        round,
        father: candidate.father,
    };
    let ToGroup::Hparams(mut h) = ask(world, &suggest, &ctx.patience)? else {
        return Ok(None);
    };
    generator.update(history.models(), h.kernel_size);
    // The kernel size that really shaped the candidate is the one recorded.
    h.kernel_size = candidate.kernel;
    let spec = TrialSpec {
        graph: candidate.graph,
        hparams: h,
        seed: mix(ctx.seed ^ mix(model_id)),
        epochs: epoch_budget(round + 1, ctx.epochs),
    };
    let order = GroupOrder::Train {
        model_id,
        round,
        spec: spec.clone(),
    };
    broadcast_value(group_comm, Some(&order))?;
    let id = TrialId { model_id, round };
    let mut out = run_trial(group_comm, ctx, id, &spec, Some(side))?;
    let reported = if crate::train::schedule::in_warm_up(round) && !out.failed {
        predict_final_accuracy(&out.curve, ctx.epochs)
    } else {
        out.best
    };
    let result = ToPrimary::Result {
        group,
        model_id,
        accuracy: out.best,
        reported,
        epochs: out.epochs,
        hparams: h,
        failed: out.failed,
    };
    let reply = ask(world, &result, &ctx.patience)?;
    out.stop_run |= !absorb(reply, history);
    generator.update(history.models(), h.kernel_size);
    Ok(Some(out))
}

fn log_busy(group: u32, b: &Busy, began: Instant, waited_s: f64) {
    let wall = began.elapsed().as_secs_f64().max(1e-9);
    let warm_pct = b.warm.map_or(0.0, |(t, busy)| {
        100.0 * busy / t.elapsed().as_secs_f64().max(1e-9)
    });
    log::info!(
        "group {group}: {} trials; leader busy in train/eval steps and exchanges {:.1}% of the run, {warm_pct:.1}% after the first trial, {:.1}% of trial time; waited {waited_s:.2} s for the generator",
        b.trials,
        100.0 * b.busy_s / wall,
        100.0 * b.busy_s / b.in_trials_s.max(1e-9),
    );
}

/// A non-leader rank of a group: trains each trial the leader broadcasts until the end.
pub fn member(group_comm: &SimpleCommunicator, ctx: &RunContext) -> Result<(), GroupError> {
    loop {
        match broadcast_value::<_, GroupOrder>(group_comm, None)? {
            GroupOrder::End => return Ok(()),
            GroupOrder::Abandon => return Err(GroupError::PrimaryGone(LOST_PRIMARY.into())),
            GroupOrder::Train {
                model_id,
                round,
                spec,
            } => {
                let id = TrialId { model_id, round };
                run_trial::<SimpleCommunicator>(group_comm, ctx, id, &spec, None)?;
            }
        }
    }
}

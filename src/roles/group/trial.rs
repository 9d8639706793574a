//! One trial on every rank of a group: the trainer's epochs, the per-epoch parameter check,
//! and the leader's verdict after each epoch (go on, early stop, trial failed, run over),
//! broadcast so the group moves together. The leader records every completed epoch and
//! reports it to the primary.

use std::time::Instant;

use aiperf_records::schema::{EpochRow, StepRow, TraceRow};
use aiperf_records::writer::GroupWriter;
use mpi::collective::{CommunicatorCollectives, Root};
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;

use super::GroupError;
use crate::monitor::Monitor;
use crate::ops::OpCount;
use crate::roles::context::RunContext;
use crate::train::schedule::{patience, EarlyStopping};
use crate::train::{EpochStats, TrialRun, TrialSpec};
use crate::world::protocol::{ToGroup, ToPrimary};
use crate::world::transport::{all_gather_strings, ask, TransportError};

/// The leader's per-epoch verdict, broadcast to the group.
const STOP_TRIAL: u8 = 0;
const GO_ON: u8 = 1;
const STOP_RUN: u8 = 2;
const FAILED: u8 = 3;
const ABANDON: u8 = 4;

/// The leader's side of a trial: records and the primary.
pub struct LeaderSide<'a, C: Communicator> {
    /// The world (to reach the primary).
    pub world: &'a C,
    /// The group's records.
    pub writer: &'a GroupWriter,
    /// The group.
    pub group: u32,
    /// Resource samples to write with each epoch.
    pub monitor: &'a Monitor,
}

impl<C: Communicator> LeaderSide<'_, C> {
    /// Writes the resource samples taken since the last call.
    pub fn flush_monitor(&self) -> Result<(), GroupError> {
        for row in self.monitor.drain() {
            self.writer.append_monitor(&row)?;
        }
        Ok(())
    }
}

/// How a trial ended.
#[derive(Clone, Debug, Default)]
pub struct TrialOutcome {
    /// Best validation accuracy of its completed epochs.
    pub best: f64,
    /// Validation accuracy after each completed epoch.
    pub curve: Vec<f64>,
    /// Completed epochs.
    pub epochs: u32,
    /// The run is over.
    pub stop_run: bool,
    /// The loss became non-finite.
    pub failed: bool,
    /// Seconds inside train/eval steps and exchanges (abandoned epochs included).
    pub busy_s: f64,
    /// The trial's wall time.
    pub wall_s: f64,
}

/// Identifies the trial being trained.
#[derive(Clone, Copy, Debug)]
pub struct TrialId {
    /// Global model id.
    pub model_id: u64,
    /// The group's round (0-based).
    pub round: u32,
}

/// Trains one trial on every rank of the group; the leader (with `lead`) records each
/// epoch, reports progress and decides whether to go on, and the group follows its verdict.
pub fn run_trial<C: Communicator>(
    comm: &SimpleCommunicator,
    ctx: &RunContext,
    id: TrialId,
    spec: &TrialSpec,
    lead: Option<&LeaderSide<'_, C>>,
) -> Result<TrialOutcome, GroupError> {
    let started = Instant::now();
    let mut run = ctx.trainer.start(comm, spec, id.round)?;
    let count = OpCount::of(&spec.graph)?;
    let mut stopper = EarlyStopping::new(patience(id.round + 1, ctx.patience_scale), 0.001);
    let mut out = TrialOutcome::default();
    for epoch in 1..=spec.epochs {
        // The leader watches the clock and the signals; with the real trainer its flag
        // reaches every rank inside the gradient exchange, so the group stops together.
        let e = run.epoch(epoch, &|| lead.is_some() && ctx.over())?;
        out.busy_s += e.compute_s + e.allreduce_s;
        if ctx.trace_steps > 0 {
            gather_trace(comm, ctx, lead.map(|l| l.writer), id, epoch, &e.spans)?;
        }
        if !e.abandoned && !e.non_finite && !replicas_agree(comm, run.as_ref()) {
            return Err(GroupError::Diverged {
                model_id: id.model_id,
                epoch,
            });
        }
        let mut verdict = [GO_ON];
        let mut gone = None;
        if let Some(l) = lead {
            let done = Finished {
                id,
                epoch,
                of: spec.epochs,
                stats: &e,
                count: &count,
            };
            verdict[0] = match lead_verdict(l, ctx, &done, &mut out, &mut stopper) {
                Err(GroupError::Transport(e @ TransportError::PrimarySilent { .. })) => {
                    gone = Some(e.to_string());
                    ABANDON
                }
                v => v?,
            };
        }
        comm.process_at_rank(0).broadcast_into(&mut verdict[..]);
        match verdict[0] {
            GO_ON => {}
            ABANDON => {
                let why = gone.unwrap_or_else(|| super::LOST_PRIMARY.into());
                return Err(GroupError::PrimaryGone(why));
            }
            STOP_RUN => {
                out.stop_run = true;
                break;
            }
            FAILED => {
                out.failed = true;
                break;
            }
            STOP_TRIAL => break,
            verdict => {
                return Err(GroupError::UnknownVerdict {
                    model_id: id.model_id,
                    verdict,
                })
            }
        }
    }
    out.wall_s = started.elapsed().as_secs_f64();
    Ok(out)
}

/// One epoch of a trial as the leader judges and records it: which trial, its number of
/// the trial's `of`, what training it gave and the trial's operation counts.
struct Finished<'a> {
    id: TrialId,
    epoch: u32,
    of: u32,
    stats: &'a EpochStats,
    count: &'a OpCount,
}

/// The leader's verdict on a finished (or abandoned) epoch: the run is over, the trial
/// failed, or the epoch is recorded and reported and early stopping decides.
fn lead_verdict<C: Communicator>(
    l: &LeaderSide<'_, C>,
    ctx: &RunContext,
    done: &Finished<'_>,
    out: &mut TrialOutcome,
    stopper: &mut EarlyStopping,
) -> Result<u8, GroupError> {
    let (id, epoch, e) = (done.id, done.epoch, done.stats);
    if e.abandoned || ctx.over() {
        // Abandoned, or completed after the deadline: it does not count.
        log::info!(
            "group {} model {} epoch {epoch}: abandoned after {:.1} s, the run ended during it (not counted)",
            l.group,
            id.model_id,
            e.wall_s
        );
        return Ok(STOP_RUN);
    }
    if e.non_finite {
        log::warn!(
            "group {} model {}: loss non-finite in epoch {epoch}: the trial fails; its {} completed epoch(s) count",
            l.group,
            id.model_id,
            out.epochs
        );
        return Ok(FAILED);
    }
    let row = record_epoch(l, ctx, done)?;
    out.epochs = epoch;
    out.best = out.best.max(e.figures.val_accuracy);
    out.curve.push(e.figures.val_accuracy);
    log_epoch(l.group, done);
    let progress = ToPrimary::Progress {
        group: l.group,
        model_id: id.model_id,
        epoch,
        val_accuracy: e.figures.val_accuracy,
        ops: row.train_ops.saturating_add(row.val_ops),
    };
    Ok(
        if !matches!(ask(l.world, &progress, &ctx.patience)?, ToGroup::Continue) {
            STOP_RUN
        } else if stopper.update(e.figures.val_loss) {
            STOP_TRIAL
        } else {
            GO_ON
        },
    )
}

/// Collective over the group: every rank's spans of this epoch, on the common clock, to the
/// leader, which records them (`--trace-steps`).
fn gather_trace(
    comm: &SimpleCommunicator,
    ctx: &RunContext,
    writer: Option<&GroupWriter>,
    id: TrialId,
    epoch: u32,
    spans: &[crate::train::Span],
) -> Result<(), GroupError> {
    let offset = ctx.clock.offset_s;
    let mine: Vec<(u32, u8, u32, f64, f64)> = spans
        .iter()
        .map(|s| {
            (
                s.step,
                s.kind as u8,
                s.bucket,
                s.start_s - offset,
                s.end_s - offset,
            )
        })
        .collect();
    let all = all_gather_strings(comm, &serde_json::to_string(&mine).expect("plain data"));
    let Some(writer) = writer else {
        return Ok(());
    };
    let mut rows = Vec::new();
    for (rank, text) in all.iter().enumerate() {
        let theirs: Vec<(u32, u8, u32, f64, f64)> =
            serde_json::from_str(text).map_err(|e| GroupError::Trace {
                rank,
                message: e.to_string(),
            })?;
        rows.extend(
            theirs
                .into_iter()
                .map(|(step, kind, bucket, start_s, end_s)| TraceRow {
                    rank: rank as u32,
                    model_id: id.model_id,
                    epoch,
                    step,
                    kind,
                    bucket,
                    start_s,
                    end_s,
                }),
        );
    }
    Ok(writer.append_trace(&rows)?)
}

/// Whether every rank of the group holds the same parameters (collective when the trainer
/// has parameters).
fn replicas_agree(comm: &SimpleCommunicator, run: &dyn TrialRun) -> bool {
    let Some(mine) = run.params_hash() else {
        return true;
    };
    let mut all = vec![0u64; comm.size() as usize];
    comm.all_gather_into(&mine, &mut all[..]);
    all.iter().all(|&h| h == mine)
}

/// Appends the epoch's row (and the monitor samples) to the group's records.
fn record_epoch<C: Communicator>(
    l: &LeaderSide<'_, C>,
    ctx: &RunContext,
    done: &Finished<'_>,
) -> Result<EpochRow, GroupError> {
    let (id, epoch, e, count) = (done.id, done.epoch, done.stats, done.count);
    let ops = |v: u128, what: &'static str| {
        u64::try_from(v).map_err(|_| GroupError::OpsOverflow {
            model_id: id.model_id,
            what,
        })
    };
    let f = &e.figures;
    let row = EpochRow {
        time_s: ctx.clock.now(),
        trial: u64::from(id.round),
        model_id: id.model_id,
        epoch,
        train_images: f.train_images,
        steps: f.steps,
        val_images: f.val_images,
        train_ops: ops(count.train_epoch(f.train_images, f.steps), "train_ops")?,
        val_ops: ops(count.eval_epoch(f.val_images), "val_ops")?,
        train_loss: f.train_loss,
        val_loss: f.val_loss,
        val_accuracy: f.val_accuracy,
        compute_s: e.compute_s,
        allreduce_s: e.allreduce_s,
        allreduce_bytes: e.allreduce_bytes,
        data_wait_s: e.data_wait_s,
        // Sealed into the group's chain by the writer.
        digest: [0; 32],
    };
    let steps: Vec<StepRow> = (e.early_losses.iter().enumerate())
        .map(|(step, &train_loss)| StepRow {
            model_id: id.model_id,
            step: step as u32,
            train_loss,
            digest: [0; 32],
        })
        .collect();
    l.writer.append_steps(&steps)?;
    l.writer.append_epoch(&row)?;
    l.flush_monitor()?;
    Ok(row)
}

fn log_epoch(group: u32, done: &Finished<'_>) {
    let (model_id, epoch, of, e) = (done.id.model_id, done.epoch, done.of, done.stats);
    log::info!(
        "group {group} model {model_id} epoch {epoch}/{of}: val acc {:.4}, loss {:.4}, {:.0} img/s, compute {:.1} s, all-reduce {:.2} s, data wait {:.2} s",
        e.figures.val_accuracy,
        e.figures.val_loss,
        e.figures.train_images as f64 / e.wall_s.max(1e-9),
        e.compute_s,
        e.allreduce_s,
        e.data_wait_s
    );
}

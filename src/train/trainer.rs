//! The libtorch trainer of one trial on one rank of a replica group: every rank builds the
//! same model from the trial's seed (then takes the group leader's parameters, so devices
//! whose initialisation differs still agree), trains on its share of every seeded global
//! batch with SGD (momentum, weight decay, label smoothing, the learning rate a pure function
//! of (epoch, step)), exchanges gradients over the group communicator after every step,
//! averages batch-norm statistics before validating, and validates on its shard of the
//! validation split, the sums reduced over the group. Each epoch reports its time split:
//! compute (forward, backward, update, validation), gradient exchange (with bytes) and
//! waiting for data.

use std::sync::Arc;
use std::time::Instant;

use mpi::collective::{CommunicatorCollectives, SystemOperation};
use serde::{Deserialize, Serialize};
use tch::nn::ModuleT;
use tch::{nn, Device, Kind, Reduction, Tensor};

use aiperf_records::schema::EARLY_STEPS;

use super::amp::Precision;
use super::memory_format::MemoryFormat;
use super::scaler::{LossScaler, StepAction};
use super::schedule::LrSchedule;
use super::{
    exchange_spans, synchronize, EpochStats, Span, SpanKind, TrainError, Trainer, TrialRun,
};
use crate::arch::Graph;
use crate::data::{Augment, Loader, Output, Pack};
use crate::exchange::{Exchange, ExchangeConfig, Gradients, RawComm, Share, SyncStats};
use crate::model::Net;
use crate::search::Hparams;

/// How every trial of a run trains (from the preset and the command line).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// Peak learning rate for a global batch of 256; scaled linearly with the global batch
    /// (Goyal et al., "Accurate, large minibatch SGD", 2017).
    pub lr_per_256: f64,
    /// SGD momentum (docs/design.md §3: 0.9).
    pub momentum: f64,
    /// L2 weight decay.
    pub weight_decay: f64,
    /// Label smoothing of the training loss (docs/design.md §3: 0.1).
    pub label_smoothing: f64,
    /// Epochs of linear learning-rate warm-up at the start of each trial.
    pub warmup_epochs: f64,
    /// Training images per epoch (a fresh random subset each epoch); `None` = all.
    pub train_images: Option<usize>,
    /// Validation images (the first ones of the split); `None` = all.
    pub val_images: Option<usize>,
    /// Training augmentation.
    pub augment: Augment,
    /// Validation transform.
    pub val_augment: Augment,
    /// Validation images per rank per batch.
    pub val_batch: usize,
    /// Loader threads per rank.
    pub loader_workers: usize,
    /// Batches each loader thread prepares ahead.
    pub prefetch: usize,
    /// Arithmetic (`auto` is resolved at start-up and recorded as what it chose).
    pub precision: Precision,
    /// Memory format of parameters and batches (`auto` is resolved at start-up and recorded
    /// as what it chose; absent from older records: `nchw`).
    #[serde(default)]
    pub memory_format: MemoryFormat,
    /// The gradient exchange (`--exchange`, `--bucket-bytes`; DDP-like buckets by default).
    #[serde(default)]
    pub exchange: ExchangeConfig,
    /// Steps of each epoch whose spans are traced on every rank (`--trace-steps`; 0: none).
    #[serde(default)]
    pub trace_steps: u32,
    /// Where the augmentation runs (`--augment-on`; absent from older records: `auto`).
    #[serde(default)]
    pub augment_on: AugmentOn,
}

/// Where the loader's augmentation runs.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AugmentOn {
    /// On the device when it is CUDA, else on the loader threads.
    #[default]
    Auto,
    /// On the loader threads (into pinned memory for CUDA).
    Cpu,
    /// On the training device from the stored images (crop-flip stays on the threads).
    Device,
}

impl AugmentOn {
    /// The loader output for training on `device`.
    pub fn output(self, device: Device) -> Output {
        match (self, device.is_cuda()) {
            (AugmentOn::Device, _) | (AugmentOn::Auto, true) => Output::Device,
            (AugmentOn::Cpu, true) => Output::Pinned,
            (_, false) => Output::Host,
        }
    }
}

/// What every rank of the group trains in one trial.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialSpec {
    /// The architecture.
    pub graph: Graph,
    /// Its hyperparameters (batch size per rank).
    pub hparams: Hparams,
    /// Seed of the initial parameters, the shuffle and the augmentation.
    pub seed: u64,
    /// Epochs the learning-rate schedule spans (the round's budget).
    pub epochs: u32,
}

/// How a training step ended.
enum Step {
    /// The update was applied; the step's weighted loss.
    Applied(f64),
    /// fp16: the gradients overflowed; the update was skipped and the scale lowered (the
    /// step's weighted loss).
    Skipped(f64),
    /// The run ended: the group abandons the epoch.
    Abandoned,
    /// The loss or gradients are non-finite for good.
    NonFinite,
}

/// One training step of this rank: its number in the epoch, this rank's share of the global
/// batch, and whether this rank asks the group to stop.
#[derive(Clone, Copy)]
struct StepAt {
    step: u32,
    weight: f32,
    stop: bool,
}

/// When a step's computing began: on the monotonic clock, and in Unix seconds when the
/// step is traced.
#[derive(Clone, Copy)]
struct Began {
    at: Instant,
    unix: Option<f64>,
}

/// One trial being trained on this rank.
pub struct TrialTrainer<'c, C: RawComm> {
    pub(super) comm: &'c C,
    /// The group's exchange (its reducer holds the node-aware exchange's communicators).
    pub(super) exchange: Exchange<'c>,
    pub(super) cfg: TrainConfig,
    pub(super) device: Device,
    pub(super) vs: nn::VarStore,
    pub(super) net: Net,
    pub(super) opt: nn::Optimizer,
    pub(super) buffers: Vec<Tensor>,
    pub(super) train: Loader,
    pub(super) val: Loader,
    pub(super) schedule: LrSchedule,
    pub(super) scaler: Option<LossScaler>,
    /// The trainable variables' gradients and their exchange (views, hooks).
    pub(super) grads: Gradients,
}

/// The libtorch trainer: data-parallel over the group, on this rank's device.
pub struct RealTrainer {
    /// How every trial trains.
    pub cfg: TrainConfig,
    /// This rank's device.
    pub device: Device,
    /// The training split.
    pub train_pack: Arc<Pack>,
    /// The validation split.
    pub val_pack: Arc<Pack>,
}

impl Trainer for RealTrainer {
    fn start<'c>(
        &'c self,
        comm: &'c mpi::topology::SimpleCommunicator,
        spec: &TrialSpec,
        _round: u32,
    ) -> Result<Box<dyn TrialRun + 'c>, TrainError> {
        Ok(Box::new(TrialTrainer::new(comm, self, spec)?))
    }

    fn name(&self) -> &'static str {
        "real"
    }
}

impl<C: RawComm> TrialRun for TrialTrainer<'_, C> {
    fn epoch(&mut self, epoch: u32, stop: &dyn Fn() -> bool) -> Result<EpochStats, TrainError> {
        TrialTrainer::epoch(self, epoch, stop)
    }

    fn params_hash(&self) -> Option<u64> {
        Some(TrialTrainer::params_hash(self))
    }
}

impl<'c, C: RawComm> TrialTrainer<'c, C> {
    /// Trains and validates epoch `epoch` (1-based); collective over the group. `stop` is
    /// asked before every step; when it says yes on any rank, the group abandons the epoch
    /// together (after that step's exchange) and returns its time split so far, marked
    /// `abandoned`: only completed epochs count.
    pub fn epoch(&mut self, epoch: u32, stop: &dyn Fn() -> bool) -> Result<EpochStats, TrainError> {
        let started = Instant::now();
        let mut stats = EpochStats::default();
        let steps = self.train.batches_per_epoch();
        let steps_u32 = u32::try_from(steps).unwrap_or(u32::MAX);
        let (mut loss_sum, mut applied) = (0f64, 0usize);
        // The trial's first steps, recorded for the audit (this rank's weighted shares).
        let early = usize::from(epoch == 1) * steps.min(EARLY_STEPS as usize);
        let mut early_losses = Vec::with_capacity(early);
        let mut batches = self.train.epoch(u64::from(epoch - 1));
        for step in 0..steps {
            let step_u32 = u32::try_from(step).unwrap_or(u32::MAX);
            let traced = step_u32 < self.cfg.trace_steps;
            let waited = Instant::now();
            let waited_unix = traced.then(crate::host::unix_s);
            let batch = batches
                .next()
                .ok_or_else(|| TrainError::Config("the loader ended an epoch early".into()))??;
            let (x, y) = batch.to_tensors(self.device)?;
            let x = self.cfg.memory_format.apply(&x)?;
            stats.data_wait_s += waited.elapsed().as_secs_f64();
            if let Some(t) = waited_unix {
                stats
                    .spans
                    .push(Span::until_now(step_u32, SpanKind::DataWait, t));
            }
            let weight = batch.len() as f32 / batch.global_size as f32;
            self.opt
                .set_lr(self.schedule.lr(epoch - 1, step_u32, steps_u32));
            let at = StepAt {
                step: step_u32,
                weight,
                stop: stop(),
            };
            let stepped = self.step(&x, &y, at, &mut stats)?;
            if let (Step::Applied(loss) | Step::Skipped(loss), true) = (&stepped, step < early) {
                early_losses.push(*loss);
            }
            match stepped {
                Step::Applied(loss) => {
                    loss_sum += loss;
                    applied += 1;
                }
                Step::Skipped(_) => {}
                Step::Abandoned => {
                    stats.abandoned = true;
                    stats.wall_s = started.elapsed().as_secs_f64();
                    return Ok(stats);
                }
                Step::NonFinite => return Ok(self.failed(stats, started)),
            }
        }
        drop(batches);
        // Every rank's running statistics saw only its shards: take the group's average
        // (they are moving averages, so averaging once equals averaging every step).
        let weight = 1.0 / self.comm.size() as f32;
        let s = self
            .grads
            .average_buffers(&self.exchange, &self.buffers, weight)?;
        stats.allreduce_s += s.seconds;
        stats.allreduce_bytes += s.bytes;
        let (val_loss, correct, seen) = self.validate(&mut stats)?;
        let local = [loss_sum, val_loss, correct, seen];
        let mut total = [0f64; 4];
        let reducing = Instant::now();
        self.comm
            .all_reduce_into(&local[..], &mut total[..], SystemOperation::sum());
        // Epoch 1 alone has early steps, as many on every rank: no empty collective after.
        if !early_losses.is_empty() {
            stats.early_losses = vec![0f64; early_losses.len()];
            self.comm.all_reduce_into(
                &early_losses[..],
                &mut stats.early_losses[..],
                SystemOperation::sum(),
            );
        }
        stats.allreduce_s += reducing.elapsed().as_secs_f64();
        // Optimizer steps (fp16 skips the updates of overflowing steps; their images were
        // still trained forward and backward).
        let f = &mut stats.figures;
        f.steps = applied as u64;
        f.train_images = self.train.samples_per_epoch() as u64;
        f.val_images = total[3] as u64;
        // The per-step losses are already weighted by shard; summed over ranks they are the
        // global batches' mean losses (of the steps applied).
        f.train_loss = total[0] / applied.max(1) as f64;
        f.val_loss = total[1] / total[3].max(1.0);
        f.val_accuracy = total[2] / total[3].max(1.0);
        stats.wall_s = started.elapsed().as_secs_f64();
        Ok(stats)
    }

    /// One training step on this rank's shard `x`, `y` (weight: its share of the global
    /// batch): forward, backward (through the scaled loss under fp16), the gradient
    /// exchange carrying the stop flag, and the update unless the step is skipped.
    fn step(
        &mut self,
        x: &Tensor,
        y: &Tensor,
        at: StepAt,
        stats: &mut EpochStats,
    ) -> Result<Step, TrainError> {
        let StepAt { step, weight, .. } = at;
        let traced = step < self.cfg.trace_steps;
        let began = Began {
            at: Instant::now(),
            unix: traced.then(crate::host::unix_s),
        };
        let smoothing = self.cfg.label_smoothing;
        self.grads.zero(&mut self.opt)?;
        // The loss in float32 from the logits, as autocast's own policy computes it.
        let loss = self
            .cfg
            .precision
            .autocast(self.device, || self.net.forward_t(x, true))
            .f_to_kind(Kind::Float)?
            .f_cross_entropy_loss::<Tensor>(y, None, Reduction::Mean, -100, smoothing)?;
        let step_loss = loss.f_double_value(&[])? * f64::from(weight);
        let (s, abandon) = self.backward_exchange(&loss, at, began, stats)?;
        stats.allreduce_s += s.seconds;
        stats.allreduce_bytes += s.bytes;
        if traced {
            stats.spans.extend(exchange_spans(step, &s.buckets));
        }
        if abandon {
            return Ok(Step::Abandoned);
        }
        match self.scaler.as_mut().map(|sc| sc.update(s.finite)) {
            None if !s.finite => return Ok(Step::NonFinite),
            Some(StepAction::GiveUp) => return Ok(Step::NonFinite),
            Some(StepAction::Skip) => return Ok(Step::Skipped(step_loss)),
            _ => {}
        }
        let updating = Instant::now();
        let updating_unix = traced.then(crate::host::unix_s);
        self.opt.step();
        synchronize(self.device);
        stats.compute_s += updating.elapsed().as_secs_f64();
        if let Some(t) = updating_unix {
            stats
                .spans
                .push(Span::until_now(step, SpanKind::Optimizer, t));
        }
        Ok(Step::Applied(step_loss))
    }

    /// Backward (through the scaled loss under fp16, unscaled inside the exchange's weight)
    /// and the gradient exchange carrying the stop flag — during backward where
    /// [`Gradients::overlaps`], else after it — with forward and backward booked as compute
    /// (`began`: when the step began) and the exchange's exposed time as all-reduce.
    /// Returns the exchange's figures and whether any rank raised the stop flag.
    fn backward_exchange(
        &mut self,
        loss: &Tensor,
        at: StepAt,
        began: Began,
        stats: &mut EpochStats,
    ) -> Result<(SyncStats, bool), TrainError> {
        let scale = self.scaler.as_ref().map_or(1.0, LossScaler::scale);
        let scaled = if scale == 1.0 {
            loss.shallow_clone()
        } else {
            loss.f_mul_scalar(scale)?
        };
        let weight = (f64::from(at.weight) / scale) as f32;
        let device = self.device;
        // Backward's kernels count as compute, overlapped or not.
        let backward = || -> Result<(), TrainError> {
            scaled.f_backward()?;
            synchronize(device);
            Ok(())
        };
        let (s, raised) = self.grads.backward_and_sum(
            &self.exchange,
            Share {
                weight,
                stop: at.stop,
            },
            backward,
        )?;
        let compute_s = began.at.elapsed().as_secs_f64() - s.seconds;
        stats.compute_s += compute_s;
        if let Some(start_s) = began.unix {
            let end_s = start_s + compute_s;
            stats
                .spans
                .push(Span::between(at.step, SpanKind::Compute, start_s, end_s));
        }
        Ok((s, raised))
    }

    /// Validation on this rank's shard: (summed loss, correct, images).
    fn validate(&mut self, stats: &mut EpochStats) -> Result<(f64, f64, f64), TrainError> {
        let (precision, device) = (self.cfg.precision, self.device);
        let (mut val_loss, mut correct, mut seen) = (0f64, 0f64, 0f64);
        let mut batches = self.val.epoch(0);
        loop {
            let waited = Instant::now();
            let Some(batch) = batches.next() else { break };
            let batch = batch?;
            if batch.is_empty() {
                stats.data_wait_s += waited.elapsed().as_secs_f64();
                continue;
            }
            // Delivery to the device counts as data, as in training.
            let (x, y) = batch.to_tensors(self.device)?;
            let x = self.cfg.memory_format.apply(&x)?;
            stats.data_wait_s += waited.elapsed().as_secs_f64();
            let computing = Instant::now();
            let (l, c) = tch::no_grad(|| -> Result<(f64, f64), TrainError> {
                let logits = precision
                    .autocast(device, || self.net.forward_t(&x, false))
                    .f_to_kind(Kind::Float)?;
                let l = logits
                    .f_cross_entropy_loss::<Tensor>(&y, None, Reduction::Sum, -100, 0.0)?
                    .f_double_value(&[])?;
                let c = logits
                    .f_argmax(1, false)?
                    .f_eq_tensor(&y)?
                    .f_sum(Kind::Double)?
                    .f_double_value(&[])?;
                Ok((l, c))
            })?;
            stats.compute_s += computing.elapsed().as_secs_f64();
            val_loss += l;
            correct += c;
            seen += batch.len() as f64;
        }
        Ok((val_loss, correct, seen))
    }

    /// The epoch's statistics so far, marked as failed by a non-finite loss.
    fn failed(&self, mut stats: EpochStats, started: Instant) -> EpochStats {
        log::warn!(
            "rank {}: the training loss became non-finite{}: the trial fails",
            self.comm.rank(),
            if self.scaler.is_some() {
                " and stayed so down to the smallest loss scale"
            } else {
                ""
            }
        );
        stats.non_finite = true;
        stats.wall_s = started.elapsed().as_secs_f64();
        stats
    }

    /// A hash of every variable's bits in name order: equal on every rank of the group when
    /// the data-parallel exchange works.
    pub fn params_hash(&self) -> u64 {
        super::check::params_hash(&self.vs)
    }
}

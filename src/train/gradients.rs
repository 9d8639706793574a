//! A trial's gradients and their exchange, as the trainer and `dp-check` run a step: the
//! gradients as views of the buckets where MPI reads their memory ([`GradViews`]), else
//! copied through the host buffer ([`super::sync`]); the exchange overlapped with backward
//! where MPI's thread level and the method allow it ([`super::overlap`], on the CPU and on
//! CUDA alike), else after backward.

use tch::{nn, Device, Tensor};

use super::exchange::ExchangeConfig;
use super::hooks::GradHooks;
use super::overlap;
use super::staging::ExchangeBuffer;
use super::sync::{self, SyncStats};
use super::views::GradViews;
use super::TrainError;

/// The gradients of one trial's trainable variables.
pub struct Gradients {
    /// The trainable variables in backward order (reversed): the buckets' order on every
    /// path, so that the first bucket is the first one backward completes and every path
    /// sums the same buckets with the same calls.
    order: Vec<Tensor>,
    /// The gradients as views of the buckets, where MPI reads their memory.
    views: Option<GradViews>,
    /// Hooks reporting each gradient as backward accumulates it, where the exchange
    /// overlaps with backward.
    hooks: Option<GradHooks>,
}

impl Gradients {
    /// The gradients of `vars` (on `device`) exchanged as `cfg` says.
    pub fn new(vars: &[Tensor], device: Device, cfg: &ExchangeConfig) -> Result<Self, TrainError> {
        let order: Vec<Tensor> = vars.iter().rev().map(Tensor::shallow_clone).collect();
        let views = GradViews::usable(device, cfg.staging)?.then(GradViews::default);
        let hooks = overlap::overlaps(cfg)
            .then(|| GradHooks::add(&order))
            .transpose()?;
        Ok(Gradients {
            order,
            views,
            hooks,
        })
    }

    /// Before a step's backward: zeroes the gradients (where they lie, once bound).
    pub fn zero(&self, opt: &mut nn::Optimizer) -> Result<(), TrainError> {
        match &self.views {
            Some(v) => v.zero(opt),
            None => {
                opt.zero_grad();
                Ok(())
            }
        }
    }

    /// Whether the next step's exchange overlaps with its backward pass: the hooks are in
    /// place, and the gradients are bound to the buckets or go through the host buffer
    /// (views are bound by the first exchange, which therefore follows backward).
    pub fn overlaps(&self) -> bool {
        self.hooks.is_some() && self.views.as_ref().is_none_or(GradViews::bound)
    }

    /// Runs `backward` with the exchange overlapped ([`Gradients::overlaps`] must hold):
    /// every gradient becomes Σ_ranks weight_rank · gradient_rank. Returns the exchange's
    /// figures (its seconds: what the step waited for after backward) and whether any rank
    /// raised `flag`.
    pub fn backward_during<C: super::inplace::RawComm>(
        &mut self,
        comm: &C,
        cfg: &ExchangeConfig,
        (weight, flag): (f32, bool),
        buf: &mut ExchangeBuffer,
        backward: impl FnOnce() -> Result<(), TrainError>,
    ) -> Result<(SyncStats, bool), TrainError> {
        let hooks = self
            .hooks
            .as_ref()
            .expect("backward_during runs where overlaps()");
        match &mut self.views {
            Some(v) => v.sync_during(comm, cfg, hooks, (weight, flag), backward),
            None => sync::sync_copied_during(
                comm,
                cfg,
                hooks,
                &self.order,
                (weight, flag),
                buf,
                backward,
            ),
        }
    }

    /// The exchange after backward: every gradient becomes Σ_ranks weight_rank ·
    /// gradient_rank (binding the views on first use). Returns its figures and whether any
    /// rank raised `flag`.
    pub fn after<C: super::inplace::RawComm>(
        &mut self,
        comm: &C,
        cfg: &ExchangeConfig,
        (weight, flag): (f32, bool),
        buf: &mut ExchangeBuffer,
    ) -> Result<(SyncStats, bool), TrainError> {
        match &mut self.views {
            Some(v) => v.sync(comm, cfg, &self.order, weight, flag),
            None => sync::sync_gradients_with_flag(comm, cfg, &self.order, weight, flag, buf),
        }
    }
}

/// Waits for the device's queued work, so that wall-clock intervals measure it.
pub(super) fn synchronize(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

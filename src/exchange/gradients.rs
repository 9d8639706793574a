//! A trial's gradients and their exchange, as the trainer and `dp-check` run a step: the
//! gradients as views of the buckets where MPI reads their memory ([`GradViews`]), else
//! copied through the exchange's buffer ([`super::copied`]); summed during backward where
//! the exchange overlaps ([`super::Exchange::overlaps`]) and the hooks report each gradient,
//! else after backward. Also the batch-norm statistics' average
//! ([`Gradients::average_buffers`]), through the same buffer.

use tch::{nn, Device, Tensor};

use super::copied::{self, Through, Values, Weighting};
use super::hooks::GradHooks;
use super::staging::{ExchangeBuffer, Resolved};
use super::views::GradViews;
use super::{Exchange, ExchangeError, Progress, Share, SyncStats};

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
    /// Where the copying path's buffer lies: the configuration's staging resolved once for
    /// the gradients' device.
    staging: Resolved,
    /// The buffer the copying path goes through, reused.
    buf: ExchangeBuffer,
}

impl Gradients {
    /// The gradients of `vars` (on `device`) exchanged by `ex`.
    pub fn new(vars: &[Tensor], device: Device, ex: &Exchange<'_>) -> Result<Self, ExchangeError> {
        let order: Vec<Tensor> = vars.iter().rev().map(Tensor::shallow_clone).collect();
        let asked = ex.config().staging;
        let staging = asked.resolve(device)?;
        let views = GradViews::usable(device, asked, staging).then(GradViews::default);
        let hooks = ex.overlaps().then(|| GradHooks::add(&order)).transpose()?;
        Ok(Gradients {
            order,
            views,
            hooks,
            staging,
            buf: ExchangeBuffer::default(),
        })
    }

    /// Before a step's backward: zeroes the gradients (where they lie, once bound).
    pub fn zero(&self, opt: &mut nn::Optimizer) -> Result<(), ExchangeError> {
        match &self.views {
            Some(v) => v.zero(opt),
            None => {
                opt.zero_grad();
                Ok(())
            }
        }
    }

    /// Whether the next step's exchange overlaps with its backward pass: the hooks are in
    /// place, and the gradients are bound to the buckets or go through the buffer (views
    /// are bound by the first exchange, which therefore follows backward).
    pub fn overlaps(&self) -> bool {
        self.hooks.is_some() && self.views.as_ref().is_none_or(GradViews::bound)
    }

    /// Runs `backward` and the exchange — during it where [`Gradients::overlaps`], else
    /// after it: every gradient becomes Σ_ranks weight_rank · gradient_rank (this rank's
    /// weight: `share`'s). Returns the exchange's figures (its seconds: what the step waited
    /// for once backward had returned) and whether any rank raised its stop flag (it rides
    /// in the last element).
    pub fn backward_and_sum<E: From<ExchangeError>>(
        &mut self,
        ex: &Exchange<'_>,
        share: Share,
        backward: impl FnOnce() -> Result<(), E>,
    ) -> Result<(SyncStats, bool), E> {
        let overlaps = self.overlaps();
        let Gradients {
            order,
            views,
            hooks,
            staging,
            buf,
        } = self;
        // The flag, the last piece, is known before backward.
        let flag_piece = order.len();
        let mut sum = |progress: Progress<'_, '_>| match views {
            Some(v) => v.sum(ex, order, share, progress),
            None => {
                let weighting = Weighting {
                    weight: share.weight,
                    extra: Some(f32::from(u8::from(share.stop))),
                };
                let values = Values::GradientsOf(order);
                let through = Through {
                    staging: *staging,
                    buf,
                };
                copied::weighted_sum(ex, values, weighting, through, progress)
                    .map(|(stats, raised)| (stats, raised > 0.5))
            }
        };
        match hooks.as_ref().filter(|_| overlaps) {
            Some(hooks) => {
                let summed = hooks.overlap(backward, |run| {
                    sum(Progress::During {
                        backward: run,
                        known: Some(flag_piece),
                    })
                })?;
                Ok(summed?)
            }
            None => {
                backward()?;
                Ok(sum(Progress::After)?)
            }
        }
    }

    /// Replaces each of `buffers` (batch-norm running statistics: non-trainable float
    /// variables) by Σ_ranks weight_rank · buffer_rank, so every rank holds the group's
    /// weighted average, as if the statistics had been gathered over the global batch. Call
    /// with the buffers in the same order on every rank (e.g. sorted by name).
    pub fn average_buffers(
        &mut self,
        ex: &Exchange<'_>,
        buffers: &[Tensor],
        weight: f32,
    ) -> Result<SyncStats, ExchangeError> {
        let values = Values::Tensors(buffers);
        let weighting = Weighting {
            weight,
            extra: None,
        };
        let through = Through {
            staging: self.staging,
            buf: &mut self.buf,
        };
        copied::weighted_sum(ex, values, weighting, through, Progress::After).map(|r| r.0)
    }
}

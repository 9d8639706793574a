//! Gradients as views of the exchange's buckets (PyTorch DDP's `gradient_as_bucket_view`).
//! After a trial's first backward every parameter's gradient is rebound to its slice of one
//! flat f32 tensor on the gradients' device, in exchange order, with the stop flag's element
//! last. From then on autograd accumulates straight into the buckets, the exchange scales
//! and reduces them in place where they lie, and the optimizer reads the sums there: no
//! copy in, no copy out. Host memory is advised to huge pages where the kernel allows.
//! Used where MPI can read the gradients' memory: on the CPU (unless host staging is asked
//! for), and on CUDA with device staging (a CUDA-aware MPI); otherwise the copying path of
//! [`super::sync`] stays.

use tch::{nn, Device, Kind, Tensor};

use super::exchange::{ExchangeConfig, ExchangeTimes};
use super::hooks::GradHooks;
use super::inplace::RawComm;
use super::overlap;
use super::staging::{Resolved, Staging};
use super::sync::{self, SyncStats};
use super::TrainError;

/// A trial's gradient buckets.
#[derive(Default)]
pub struct GradViews {
    /// Σ parameters + 1 elements on the gradients' device, once bound.
    flat: Option<Tensor>,
    /// Each parameter's elements, then 1 (the flag).
    sizes: Vec<usize>,
}

impl GradViews {
    /// Whether the gradients of `device` are views of the buckets under `staging`: where MPI
    /// reads the buffer where they lie — on CUDA with device staging, on the CPU unless
    /// host staging is asked for (which keeps the copying path CUDA takes without a
    /// CUDA-aware MPI, so that the CPU exercises it too).
    pub fn usable(device: Device, staging: Staging) -> Result<bool, TrainError> {
        Ok(match staging.resolve(device)? {
            Resolved::Device(_) => true,
            Resolved::Host { .. } => device == Device::Cpu && staging != Staging::Host,
        })
    }

    /// Whether the gradients are bound to the buckets.
    pub fn bound(&self) -> bool {
        self.flat.is_some()
    }

    /// Before a step's backward: zero the gradients where they lie once bound (keeping the
    /// binding); before that, the optimizer drops them.
    pub fn zero(&self, opt: &mut nn::Optimizer) -> Result<(), TrainError> {
        match &self.flat {
            Some(flat) => {
                let values = self.values() as i64;
                tch::no_grad(|| flat.f_narrow(0, 0, values)?.f_zero_().map(|_| ()))?;
            }
            None => opt.zero_grad(),
        }
        Ok(())
    }

    fn values(&self) -> usize {
        self.sizes.iter().sum::<usize>() - 1
    }

    /// Rebinds every gradient of `vars` (all defined, after a backward) to its slice of a
    /// new flat tensor, values kept.
    fn bind(&mut self, vars: &[Tensor]) -> Result<(), TrainError> {
        let grads = super::sync::gradients(vars)?;
        let (sizes, total) = sync::piece_sizes(&grads, true)?;
        let device = grads.first().map_or(Device::Cpu, Tensor::device);
        let flat = Tensor::f_zeros([total as i64], (Kind::Float, device))?;
        if device == Device::Cpu {
            crate::platform::advise_huge_pages(flat.data_ptr().cast(), total * 4);
        }
        tch::no_grad(|| -> Result<(), TrainError> {
            let mut offset = 0i64;
            for (g, &n) in grads.iter().zip(&sizes) {
                let size = g.size();
                // The gradient's own layout (autograd gives a channels-last parameter a
                // channels-last gradient and accumulates into one only if it stays so).
                let strides = if super::layout::is_channels_last(g) && !g.is_contiguous() {
                    g.stride()
                } else {
                    contiguous_strides(&size)
                };
                flat.f_as_strided(&size, &strides, Some(offset))?
                    .f_copy_(g)?;
                let mut grad = g.shallow_clone();
                let _ = grad.f_set_source_tensor_storage_offset_(&flat, offset, &size, strides)?;
                offset += n as i64;
            }
            Ok(())
        })?;
        self.flat = Some(flat);
        self.sizes = sizes;
        Ok(())
    }

    /// Replaces every gradient by Σ_ranks weight_rank · gradient_rank in place (binding them
    /// first if need be), and tells whether any rank raised `flag` (it rides in the last
    /// element). The same sums, bit for bit, as the copying path.
    pub fn sync<C: RawComm>(
        &mut self,
        comm: &C,
        cfg: &ExchangeConfig,
        vars: &[Tensor],
        weight: f32,
        flag: bool,
    ) -> Result<(SyncStats, bool), TrainError> {
        if self.flat.is_none() {
            self.bind(vars)?;
        }
        let values = self.values();
        let flat = self.flat.as_ref().expect("bound above");
        sync::scale_and_mark(flat, values, weight, Some(f32::from(u8::from(flag))))?;
        let times = sync::reduce_flat(comm, cfg, &self.sizes, flat);
        let finite = sync::finite_sums(flat, values)?;
        let raised = flat.f_double_value(&[values as i64])? > 0.5;
        Ok((SyncStats::of(comm, values + 1, times, finite), raised))
    }

    /// [`GradViews::sync`] overlapped with the backward pass that `backward` runs: each
    /// bucket is scaled, flagged and its reduction started (on the communication thread, or
    /// by the pipelined exchange's non-blocking call) as soon as the hooks report all its
    /// gradients accumulated ([`super::overlap`]). The gradients must be bound already; on
    /// CUDA the scaling runs on the device and the device is waited for before MPI reads
    /// the bucket (by the communication thread; by the gradient report itself, stalling
    /// backward's launches, for the pipelined exchange). Returns the exchange's figures (its seconds: what the
    /// step waited for after backward) and whether any rank raised `flag`. A rank whose
    /// scaling fails still takes part in every reduction and returns the error after.
    pub fn sync_during<C: RawComm>(
        &mut self,
        comm: &C,
        cfg: &ExchangeConfig,
        hooks: &GradHooks,
        (weight, flag): (f32, bool),
        backward: impl FnOnce() -> Result<(), TrainError>,
    ) -> Result<(SyncStats, bool), TrainError> {
        let values = self.values();
        let flat = self
            .flat
            .as_ref()
            .expect("sync_during runs on bound gradients");
        let flag_piece = self.sizes.len() - 1;
        let mut failed = None;
        let mut fill = |pieces: std::ops::Range<usize>, elems: std::ops::Range<usize>| {
            let flagged = pieces.end > flag_piece;
            let scaled = elems.len() - usize::from(flagged);
            let done = tch::no_grad(|| -> Result<(), TrainError> {
                let _ = flat
                    .f_narrow(0, elems.start as i64, scaled as i64)?
                    .f_mul_scalar_(f64::from(weight))?;
                if flagged {
                    let _ = flat
                        .f_narrow(0, values as i64, 1)?
                        .f_fill_(f64::from(u8::from(flag)))?;
                }
                Ok(())
            });
            if let Err(e) = done {
                failed.get_or_insert(e);
            }
        };
        let (times, waited) = hooks.overlap(backward, |run| {
            // SAFETY: the flat tensor this struct owns: autograd writes a bucket's gradients
            // before its hooks hand it over, `fill` scales it before the communication
            // thread takes it, and nothing else touches it until this returns; on CUDA the
            // staging resolved to device memory, which the MPI takes.
            let target = unsafe { overlap::Target::tensor(flat) };
            // The flag is known before backward.
            let pieces = (&self.sizes[..], Some(flag_piece));
            overlap::overlapped_in(comm, cfg, pieces, target, &mut fill, run)
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        let finite = sync::finite_sums(flat, values)?;
        let raised = flat.f_double_value(&[values as i64])? > 0.5;
        // Its seconds: what the step waited for after backward.
        let exposed = ExchangeTimes {
            seconds: waited,
            buckets: times.buckets,
        };
        Ok((SyncStats::of(comm, values + 1, exposed, finite), raised))
    }
}

/// The strides of a contiguous tensor of `size`.
fn contiguous_strides(size: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; size.len()];
    for i in (0..size.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * size[i + 1].max(1);
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::nn::OptimizerConfig;

    #[test]
    fn strides_are_row_major() {
        assert_eq!(contiguous_strides(&[4, 3, 2]), vec![6, 2, 1]);
        assert_eq!(contiguous_strides(&[5]), vec![1]);
        assert!(contiguous_strides(&[]).is_empty());
    }

    /// After binding, backward accumulates into the bucket: a gradient is its slice.
    #[test]
    fn gradients_become_views_of_the_bucket_and_backward_writes_there() {
        let vs = nn::VarStore::new(Device::Cpu);
        let w = vs.root().var("w", &[3, 2], nn::Init::Const(1.0));
        let b = vs.root().var("b", &[2], nn::Init::Const(0.0));
        let vars = vec![w.shallow_clone(), b.shallow_clone()];
        let mut opt = nn::Sgd::default().build(&vs, 0.1).unwrap();
        let mut views = GradViews::default();
        let x = Tensor::from_slice(&[1f32, 2., 3.]).reshape([1, 3]);
        for round in 0..3 {
            views.zero(&mut opt).unwrap();
            let y = (x.matmul(&w) + &b).sum(Kind::Float);
            y.backward();
            if round == 0 {
                assert!(!views.bound());
                views.bind(&vars).unwrap();
            }
            let flat = views.flat.as_ref().unwrap();
            // The flat bucket holds dy/dw (x repeated per column) then dy/db (ones).
            let got: Vec<f32> = Vec::try_from(flat.narrow(0, 0, 8)).unwrap();
            assert_eq!(got, vec![1., 1., 2., 2., 3., 3., 1., 1.], "round {round}");
            // Writing the bucket writes the gradient: they share memory.
            let _ = flat.narrow(0, 0, 1).fill_(7.0);
            assert_eq!(w.grad().double_value(&[0, 0]), 7.0);
        }
    }

    #[test]
    fn a_channels_last_gradient_is_bound_in_its_own_layout() {
        let vs = nn::VarStore::new(Device::Cpu);
        let conv = nn::conv2d(vs.root() / "c", 2, 4, 3, Default::default());
        super::super::MemoryFormat::ChannelsLast
            .apply_to(&vs)
            .unwrap();
        let vars = vs.trainable_variables();
        let mut opt = nn::Sgd::default().build(&vs, 0.1).unwrap();
        let mut views = GradViews::default();
        let x = Tensor::ones([2, 2, 5, 5], (Kind::Float, Device::Cpu));
        let mut first = None;
        for round in 0..2 {
            views.zero(&mut opt).unwrap();
            x.apply(&conv).sum(Kind::Float).backward();
            if round == 0 {
                first = Some(conv.ws.grad().copy());
                views.bind(&vars).unwrap();
            }
            let g = conv.ws.grad();
            assert_eq!(
                g.stride(),
                conv.ws.stride(),
                "round {round}: the parameter's layout"
            );
            assert!(
                g.equal(first.as_ref().unwrap()),
                "round {round}: same values"
            );
            let flat = views.flat.as_ref().unwrap();
            let (lo, hi) = (
                flat.data_ptr() as usize,
                flat.data_ptr() as usize + 4 * flat.numel(),
            );
            assert!(
                (lo..hi).contains(&(g.data_ptr() as usize)),
                "round {round}: in the bucket"
            );
        }
    }
}

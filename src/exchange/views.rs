//! Gradients as views of the exchange's buckets (PyTorch DDP's `gradient_as_bucket_view`).
//! After a trial's first backward every parameter's gradient is rebound to its slice of one
//! flat f32 tensor on the gradients' device, in exchange order, with the stop flag's element
//! last. From then on autograd accumulates straight into the buckets, the exchange scales
//! and reduces them in place where they lie, and the optimizer reads the sums there: no
//! copy in, no copy out. Host memory is advised to huge pages where the kernel allows.
//! Used where MPI can read the gradients' memory: on the CPU (unless host staging is asked
//! for), and on CUDA with device staging (a CUDA-aware MPI); otherwise the copying path of
//! [`super::copied`] stays.

use tch::{nn, Device, Kind, Tensor};

use super::copied::{gradients, piece_sizes};
use super::staging::{Resolved, Staging};
use super::{Exchange, ExchangeError, ExchangeTimes, Progress, SyncStats, Target};

/// A trial's gradient buckets.
#[derive(Default)]
pub(super) struct GradViews {
    /// Σ parameters + 1 elements on the gradients' device, once bound.
    flat: Option<Tensor>,
    /// Each parameter's elements, then 1 (the flag).
    sizes: Vec<usize>,
}

impl GradViews {
    /// Whether the gradients of `device` are views of the buckets under staging `asked`
    /// (`resolved` for the device): where MPI
    /// reads the buffer where they lie — on CUDA with device staging, on the CPU unless
    /// host staging is asked for (which keeps the copying path CUDA takes without a
    /// CUDA-aware MPI, so that the CPU exercises it too).
    pub(super) fn usable(device: Device, asked: Staging, resolved: Resolved) -> bool {
        match resolved {
            Resolved::Device(_) => true,
            Resolved::Host { .. } => device == Device::Cpu && asked != Staging::Host,
        }
    }

    /// Whether the gradients are bound to the buckets.
    pub(super) fn bound(&self) -> bool {
        self.flat.is_some()
    }

    /// Before a step's backward: zero the gradients where they lie once bound (keeping the
    /// binding); before that, the optimizer drops them.
    pub(super) fn zero(&self, opt: &mut nn::Optimizer) -> Result<(), ExchangeError> {
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
    fn bind(&mut self, vars: &[Tensor]) -> Result<(), ExchangeError> {
        let grads = gradients(vars)?;
        let (sizes, total) = piece_sizes(&grads, true)?;
        let device = grads.first().map_or(Device::Cpu, Tensor::device);
        let flat = Tensor::f_zeros([total as i64], (Kind::Float, device))?;
        if device == Device::Cpu {
            crate::host::advise_huge_pages(flat.data_ptr().cast(), total * 4);
        }
        tch::no_grad(|| -> Result<(), ExchangeError> {
            let mut offset = 0i64;
            for (g, &n) in grads.iter().zip(&sizes) {
                let size = g.size();
                // The gradient's own layout (autograd gives a channels-last parameter a
                // channels-last gradient and accumulates into one only if it stays so).
                let strides = if !g.is_contiguous() && dense(&size, &g.stride()) {
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

    /// Replaces every gradient by Σ_ranks weight_rank · gradient_rank where it lies, and
    /// tells whether any rank raised its stop flag (it rides in the last element): each bucket
    /// is scaled by `share`'s weight (and flagged) as it goes, then reduced, at the time `progress`
    /// says. The gradients are bound to the buckets by the first call, which must come
    /// after a backward ([`Progress::After`]). On CUDA the scaling runs on the device and
    /// the device is waited for before MPI reads the bucket. A rank whose scaling fails
    /// still takes part in every reduction and returns the error after. The same sums, bit
    /// for bit, as the copying path.
    pub(super) fn sum(
        &mut self,
        ex: &Exchange<'_>,
        vars: &[Tensor],
        share: super::Share,
        progress: Progress<'_, '_>,
    ) -> Result<(SyncStats, bool), ExchangeError> {
        if self.flat.is_none() {
            self.bind(vars)?;
        }
        let values = self.values();
        let flat = self.flat.as_ref().expect("bound above");
        let flag_piece = self.sizes.len() - 1;
        let super::Share { weight, stop: flag } = share;
        let mut failed = None;
        let mut fill = |pieces: std::ops::Range<usize>, elems: std::ops::Range<usize>| {
            let flagged = pieces.end > flag_piece;
            let scaled = elems.len() - usize::from(flagged);
            let done = tch::no_grad(|| -> Result<(), ExchangeError> {
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
        // SAFETY: the flat tensor this struct owns: autograd writes a bucket's gradients
        // before its hooks hand it over, `fill` scales it before it is reduced, and nothing
        // else touches it until this returns; on CUDA the staging resolved to device memory,
        // which the MPI takes.
        let target = unsafe { Target::tensor(flat) };
        let summed = ex.sum(&self.sizes, target, &mut fill, progress);
        if let Some(e) = failed {
            return Err(e);
        }
        let finite = bool::try_from(flat.f_narrow(0, 0, values as i64)?.f_isfinite()?.f_all()?)?;
        let raised = flat.f_double_value(&[values as i64])? > 0.5;
        // Its seconds: what the step waited for once the gradients were there.
        let exposed = ExchangeTimes {
            seconds: summed.waited_s,
            buckets: summed.times.buckets,
        };
        Ok((SyncStats::of(ex, values + 1, exposed, finite), raised))
    }
}

/// Whether `stride` lays the elements of `size` out densely, in some order of the
/// dimensions (a channels-last tensor's, for one): no gaps, no overlaps.
fn dense(size: &[i64], stride: &[i64]) -> bool {
    let mut dims: Vec<(i64, i64)> = (stride.iter().copied())
        .zip(size.iter().copied())
        .filter(|&(_, n)| n > 1)
        .collect();
    dims.sort_unstable();
    let mut expected = 1;
    for (st, n) in dims {
        if st != expected {
            return false;
        }
        expected *= n;
    }
    true
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
        // Channels-last (N, C, H, W) = (2, 3, 4, 5) is dense; a slice with gaps is not.
        assert!(dense(&[2, 3, 4, 5], &[60, 1, 15, 3]));
        assert!(dense(&[2, 3, 4, 5], &[60, 20, 5, 1]));
        assert!(!dense(&[2, 3, 4, 5], &[120, 1, 15, 3]));
        assert!(!dense(&[2, 2], &[1, 1]));
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
        // The weight in channels-last order, as `--memory-format channels-last` sets it.
        let mut ws = conv.ws.shallow_clone();
        let cl = ws.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2]);
        tch::no_grad(|| ws.set_data(&cl));
        assert!(!conv.ws.is_contiguous(), "the weight is channels-last");
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

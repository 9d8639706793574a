//! Tensors summed by copy: their values copied into the exchange's buffer bucket by bucket,
//! scaled by this rank's weight, summed ([`super::Exchange::sum`]) and copied back — through
//! host memory (page-locked for CUDA tensors, so each copy is one DMA transfer) or one flat
//! tensor on their device ([`super::staging::Staging`]). The gradients' path where MPI cannot
//! read them where they lie (CUDA without a CUDA-aware MPI, `--exchange-staging host`), and
//! the batch-norm statistics' path everywhere.

use std::ops::Range;
use std::time::Instant;

use tch::Tensor;

use super::staging::{host_view, ExchangeBuffer, Resolved};
use super::{Exchange, ExchangeError, ExchangeTimes, Progress, Summed, SyncStats, Target};

/// The values a copied sum reads, and where the sums go.
#[derive(Clone, Copy)]
pub(super) enum Values<'a> {
    /// The gradients of these variables (read when their bucket goes, so during backward
    /// once accumulated; the sums replace them).
    GradientsOf(&'a [Tensor]),
    /// These tensors themselves (the sums replace them).
    Tensors(&'a [Tensor]),
}

impl Values<'_> {
    fn tensors(&self) -> &[Tensor] {
        match self {
            Values::GradientsOf(t) | Values::Tensors(t) => t,
        }
    }

    /// Piece `i`'s values, `None` past the tensors (the extra value's piece).
    fn get(&self, i: usize) -> Option<Result<Tensor, ExchangeError>> {
        let t = self.tensors().get(i)?;
        Some(match self {
            Values::GradientsOf(_) => gradient(t, i),
            Values::Tensors(_) => Ok(t.shallow_clone()),
        })
    }

    /// The tensors the sums are written into.
    fn destinations(&self) -> Result<Vec<Tensor>, ExchangeError> {
        match self {
            Values::GradientsOf(vars) => gradients(vars),
            Values::Tensors(t) => Ok(t.iter().map(Tensor::shallow_clone).collect()),
        }
    }
}

/// This rank's weight, and one more value that rides unscaled after the tensors (the stop
/// flag), if any.
#[derive(Clone, Copy)]
pub(super) struct Weighting {
    pub(super) weight: f32,
    pub(super) extra: Option<f32>,
}

/// Where the copies go: the staging resolved for the tensors' device, and the buffer
/// reused from step to step.
pub(super) struct Through<'b> {
    pub(super) staging: Resolved,
    pub(super) buf: &'b mut ExchangeBuffer,
}

/// Replaces each of `values`' tensors by Σ_ranks weight_rank · tensor_rank, at the time
/// `progress` says. With an extra value, it rides unscaled at the end; its sum is
/// returned. A rank whose copies fail still takes part in every reduction (with zeros) and
/// returns the error after, so no rank is left waiting. The figures' seconds are what the
/// caller waited for once the values were there, the copies back included.
pub(super) fn weighted_sum(
    ex: &Exchange<'_>,
    values: Values<'_>,
    weighting: Weighting,
    through: Through<'_>,
    progress: Progress<'_, '_>,
) -> Result<(SyncStats, f32), ExchangeError> {
    let Weighting { weight, extra } = weighting;
    let Through { staging, buf } = through;
    let tensors = values.tensors();
    let (sizes, total) = piece_sizes(tensors, extra.is_some())?;
    let job = Job {
        values,
        sizes: &sizes,
        weight,
        extra,
    };
    let done = match staging {
        Resolved::Host { pinned } => job.via_host(ex, buf.host(total, pinned)?, progress)?,
        Resolved::Device(d) => job.via_device(ex, &buf.device(total, d)?, progress)?,
    };
    let exposed = ExchangeTimes {
        seconds: done.summed.waited_s + done.copying_s,
        buckets: done.summed.times.buckets,
    };
    Ok((
        SyncStats::of(ex, total, exposed, done.finite),
        done.extra_sum,
    ))
}

/// One copied sum: what is summed, the pieces' sizes (the tensors', then 1 for the extra
/// value if any), this rank's weight and the extra value riding unscaled.
struct Job<'a> {
    values: Values<'a>,
    sizes: &'a [usize],
    weight: f32,
    extra: Option<f32>,
}

/// How a copied sum went.
struct Done {
    /// The exchange's times and the seconds waited for it.
    summed: Summed,
    /// Whether every sum is finite.
    finite: bool,
    /// The extra value's sum (0 without one).
    extra_sum: f32,
    /// The seconds the copies back took.
    copying_s: f64,
}

impl Job<'_> {
    /// Through the host slice `host`: each bucket filled by libtorch copies into views of
    /// it, scaled, summed; the sums copied back.
    fn via_host(
        &self,
        ex: &Exchange<'_>,
        host: &mut [f32],
        progress: Progress<'_, '_>,
    ) -> Result<Done, ExchangeError> {
        let mut failed = None;
        let mut fill = |pieces: Range<usize>, dst: &mut [f32]| {
            let tensor = |i: usize| self.values.get(i);
            if let Err(e) = fill_host(pieces, dst, self.sizes, tensor, self.weight, self.extra) {
                dst.fill(0.0);
                failed.get_or_insert(e);
            }
        };
        let summed = ex.sum_host(self.sizes, host, &mut fill, progress);
        if let Some(e) = failed {
            return Err(e);
        }
        let copying = Instant::now();
        copy_back(&self.values.destinations()?, self.sizes, host)?;
        let (finite, extra_sum) = host_outcome(host, self.extra.is_some());
        Ok(Done {
            summed,
            finite,
            extra_sum,
            copying_s: copying.elapsed().as_secs_f64(),
        })
    }

    /// In the flat tensor `flat` on the tensors' device, handed to MPI as it is.
    fn via_device(
        &self,
        ex: &Exchange<'_>,
        flat: &Tensor,
        progress: Progress<'_, '_>,
    ) -> Result<Done, ExchangeError> {
        let mut failed = None;
        let mut fill = |pieces: Range<usize>, elems: Range<usize>| {
            if let Err(e) = self.fill_tensor(flat, pieces, elems.clone()) {
                let _ = flat
                    .narrow(0, elems.start as i64, elems.len() as i64)
                    .f_zero_();
                failed.get_or_insert(e);
            }
        };
        // SAFETY: the buffer's flat tensor, which only `fill` writes until this returns; on
        // CUDA the staging resolved to device memory, which the MPI takes.
        let target = unsafe { Target::tensor(flat) };
        let summed = ex.sum(self.sizes, target, &mut fill, progress);
        if let Some(e) = failed {
            return Err(e);
        }
        let copying = Instant::now();
        let (finite, extra_sum) = tensor_outcome(
            &self.values.destinations()?,
            self.sizes,
            flat,
            self.extra.is_some(),
        )?;
        Ok(Done {
            summed,
            finite,
            extra_sum,
            copying_s: copying.elapsed().as_secs_f64(),
        })
    }

    /// Fills the elements `elems` of `flat` with the pieces `pieces`: each tensor's values
    /// copied in and scaled by the weight on its device, or the extra value.
    fn fill_tensor(
        &self,
        flat: &Tensor,
        pieces: Range<usize>,
        elems: Range<usize>,
    ) -> Result<(), ExchangeError> {
        tch::no_grad(|| {
            let mut offset = elems.start as i64;
            for i in pieces {
                let n = self.sizes[i] as i64;
                let mut part = flat.f_narrow(0, offset, n)?;
                match self.values.get(i) {
                    Some(t) => {
                        part.f_copy_(&t?.f_reshape([-1])?)?;
                        let _ = part.f_mul_scalar_(f64::from(self.weight))?;
                    }
                    None => {
                        let _ = part.f_fill_(f64::from(self.extra.unwrap_or(0.0)))?;
                    }
                }
                offset += n;
            }
            Ok(())
        })
    }
}

/// The exchange's pieces for `tensors` (their element counts, then 1 for an extra value
/// if `extra`) and their total, which MPI's int counts must hold.
pub(super) fn piece_sizes(
    tensors: &[Tensor],
    extra: bool,
) -> Result<(Vec<usize>, usize), ExchangeError> {
    let mut sizes: Vec<usize> = tensors.iter().map(Tensor::numel).collect();
    if extra {
        sizes.push(1);
    }
    let total = sizes.iter().sum();
    if i32::try_from(total).is_err() {
        return Err(ExchangeError::TooLarge(total));
    }
    Ok((sizes, total))
}

/// Fills `dst` with the pieces `pieces` of `sizes`, one after another: the values of each
/// tensor `tensor(i)` gives, scaled by `weight` (copied by libtorch into a view of `dst`:
/// one DMA transfer from CUDA into page-locked memory), or, where it gives none, the extra
/// value unscaled.
fn fill_host(
    pieces: Range<usize>,
    dst: &mut [f32],
    sizes: &[usize],
    tensor: impl Fn(usize) -> Option<Result<Tensor, ExchangeError>>,
    weight: f32,
    extra: Option<f32>,
) -> Result<(), ExchangeError> {
    let mut offset = 0;
    for i in pieces {
        let n = sizes[i];
        let part = &mut dst[offset..offset + n];
        match tensor(i) {
            Some(t) => {
                // SAFETY: `part` is borrowed for this statement only and not used otherwise
                // while the view is written.
                let mut view = unsafe { host_view(part.as_mut_ptr(), n)? };
                view.f_copy_(&t?.f_reshape([-1])?)?;
                part.iter_mut().for_each(|x| *x *= weight);
            }
            None => part[0] = extra.unwrap_or(0.0),
        }
        offset += n;
    }
    Ok(())
}

/// Copies the sums in `host` back into `tensors` (pieces of `sizes`, one after another).
fn copy_back(tensors: &[Tensor], sizes: &[usize], host: &mut [f32]) -> Result<(), ExchangeError> {
    let mut offset = 0;
    tch::no_grad(|| -> Result<(), ExchangeError> {
        for (t, &n) in tensors.iter().zip(sizes) {
            // SAFETY: the view only reads `host`, which nothing writes meanwhile.
            let summed = unsafe { host_view(host[offset..].as_mut_ptr(), n)? };
            t.shallow_clone().f_copy_(&summed.f_view_as(t)?)?;
            offset += n;
        }
        Ok(())
    })
}

/// Whether every summed value in `host` is finite, and the extra value's sum (the last
/// element, `extra`) or 0.
fn host_outcome(host: &[f32], extra: bool) -> (bool, f32) {
    let values = host.len() - usize::from(extra);
    let finite = host[..values].iter().all(|x| x.is_finite());
    (finite, if extra { host[values] } else { 0.0 })
}

/// Copies the sums in the flat tensor `flat` back into `tensors`; whether every summed
/// value is finite, and the extra value's sum or 0.
fn tensor_outcome(
    tensors: &[Tensor],
    sizes: &[usize],
    flat: &Tensor,
    extra: bool,
) -> Result<(bool, f32), ExchangeError> {
    let mut offset = 0;
    tch::no_grad(|| -> Result<(), ExchangeError> {
        for (t, &n) in tensors.iter().zip(sizes) {
            let summed = flat.f_narrow(0, offset as i64, n as i64)?;
            t.shallow_clone().f_copy_(&summed.f_view_as(t)?)?;
            offset += n;
        }
        Ok(())
    })?;
    let finite = bool::try_from(flat.f_narrow(0, 0, offset as i64)?.f_isfinite()?.f_all()?)?;
    let summed = match extra {
        true => flat.f_double_value(&[offset as i64])? as f32,
        false => 0.0,
    };
    Ok((finite, summed))
}

/// Variable `i`'s gradient, or an error naming its index.
fn gradient(var: &Tensor, i: usize) -> Result<Tensor, ExchangeError> {
    let g = var.grad();
    if g.defined() {
        Ok(g)
    } else {
        Err(ExchangeError::NoGradient(i))
    }
}

/// Every variable's gradient: `grad()` returns a handle on the gradient's storage, so
/// writing it writes the gradient. A variable without one is an error naming its index.
pub(super) fn gradients(vars: &[Tensor]) -> Result<Vec<Tensor>, ExchangeError> {
    vars.iter()
        .enumerate()
        .map(|(i, v)| gradient(v, i))
        .collect()
}

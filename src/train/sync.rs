//! The gradient exchange. Gradients are flattened into f32 buckets, scaled by this rank's
//! share of the global batch, summed over the group ([`super::exchange`]: bucketed,
//! pipelined `MPI_Iallreduce`, or reduce + broadcast), then copied into the gradient
//! tensors; the buffer is on the host (pinned for CUDA) or on the device ([`super::staging::Staging`]).
//! Every rank must end with the same sums: the per-epoch parameter hash checks it
//! under the MPI in use (reduce + broadcast guarantees it by construction).

use std::ops::Range;
use std::time::Instant;

use tch::{Device, Tensor};

use super::exchange::{exchange, exchange_resident, ExchangeConfig, ExchangeTimes};
use super::hooks::GradHooks;
use super::inplace::RawComm;
use super::overlap::overlapped;
use super::staging::{host_view, ExchangeBuffer, Resolved};
use super::TrainError;

/// What one exchange cost.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SyncStats {
    /// Bytes sent by this rank (the bucket, once).
    pub bytes: u64,
    /// Seconds in MPI.
    pub seconds: f64,
    /// Whether every exchanged value's sum is finite (the same on every rank).
    pub finite: bool,
    /// Each bucket's (start, end), Unix seconds (for `--trace-steps`).
    pub buckets: Vec<(f64, f64)>,
}

impl SyncStats {
    /// The figures of an exchange of `elems` f32s over `comm` (a group of one rank sends
    /// nothing, whatever the call costs). `finite` is the same on every rank, as the sums are.
    pub(super) fn of<C: RawComm>(
        comm: &C,
        elems: usize,
        times: ExchangeTimes,
        finite: bool,
    ) -> SyncStats {
        let sent = if comm.size() > 1 { elems } else { 0 };
        SyncStats {
            bytes: (sent * std::mem::size_of::<f32>()) as u64,
            seconds: times.seconds,
            buckets: times.buckets,
            finite,
        }
    }
}

/// Scales the first `values` elements of the flat exchange tensor `flat` by `weight` and
/// writes `extra`, if any, right after them.
pub(super) fn scale_and_mark(
    flat: &Tensor,
    values: usize,
    weight: f32,
    extra: Option<f32>,
) -> Result<(), TrainError> {
    tch::no_grad(|| -> Result<(), TrainError> {
        let _ = flat
            .f_narrow(0, 0, values as i64)?
            .f_mul_scalar_(f64::from(weight))?;
        if let Some(x) = extra {
            let _ = flat.f_narrow(0, values as i64, 1)?.f_fill_(f64::from(x))?;
        }
        Ok(())
    })
}

/// Sums the flat exchange tensor `flat` (pieces of `sizes`) over `comm` in place, where it
/// lies; on CUDA after every kernel writing it has completed.
pub(super) fn reduce_flat<C: RawComm>(
    comm: &C,
    cfg: &ExchangeConfig,
    sizes: &[usize],
    flat: &Tensor,
) -> ExchangeTimes {
    if let Device::Cuda(i) = flat.device() {
        // MPI reads the memory directly: every kernel writing it must have completed.
        tch::Cuda::synchronize(i as i64);
    }
    // SAFETY: `flat` is a contiguous f32 tensor of Σ `sizes` elements that only this call
    // uses; on CUDA the MPI said it takes device memory and the device is synchronised.
    unsafe { exchange_resident(comm, cfg, sizes, flat.data_ptr().cast::<f32>()) }
}

/// Whether the first `values` sums of `flat` are all finite.
pub(super) fn finite_sums(flat: &Tensor, values: usize) -> Result<bool, TrainError> {
    Ok(bool::try_from(
        flat.f_narrow(0, 0, values as i64)?.f_isfinite()?.f_all()?,
    )?)
}

/// Every variable of `vs` (parameters and buffers) in name order: the VarStore's map
/// iterates in a different order in every process, and the exchange needs one order.
pub(super) fn all_variables(vs: &tch::nn::VarStore) -> Vec<(String, Tensor)> {
    let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named
}

/// The float buffers of `vs` (batch-norm running statistics) in name order.
pub(super) fn float_buffers(vs: &tch::nn::VarStore) -> Vec<Tensor> {
    all_variables(vs)
        .into_iter()
        .filter(|(_, t)| !t.requires_grad() && t.kind() == tch::Kind::Float)
        .map(|(_, t)| t)
        .collect()
}

/// Replaces each tensor of `tensors` in place by Σ_ranks weight_rank · tensor_rank: flattened
/// and scaled into the exchange's buffer (on the host, or on the tensors' device:
/// [`super::staging::Staging`]), summed in place ([`exchange`]), copied back. With `extra`, one more value
/// rides unscaled at the end; its sum is returned.
fn weighted_sum<C: RawComm>(
    comm: &C,
    cfg: &ExchangeConfig,
    tensors: &[Tensor],
    weight: f32,
    extra: Option<f32>,
    buf: &mut ExchangeBuffer,
) -> Result<(SyncStats, f32), TrainError> {
    let (sizes, total) = piece_sizes(tensors, extra.is_some())?;
    let device = tensors.first().map_or(Device::Cpu, Tensor::device);
    let parts = Parts {
        tensors,
        sizes: &sizes,
        weight,
        extra,
    };
    let (times, finite, summed) = match cfg.staging.resolve(device)? {
        Resolved::Host { pinned } => parts.via_host(comm, cfg, buf.host(total, pinned)?)?,
        Resolved::Device(d) => parts.in_place(comm, cfg, &buf.device(total, d)?)?,
    };
    Ok((SyncStats::of(comm, total, times, finite), summed))
}

/// The exchange's pieces for `tensors` (their element counts, then 1 for an extra value
/// if `extra`) and their total, which MPI's int counts must hold.
pub(super) fn piece_sizes(
    tensors: &[Tensor],
    extra: bool,
) -> Result<(Vec<usize>, usize), TrainError> {
    let mut sizes: Vec<usize> = tensors.iter().map(Tensor::numel).collect();
    if extra {
        sizes.push(1);
    }
    let total = sizes.iter().sum();
    if i32::try_from(total).is_err() {
        return Err(TrainError::TooLarge(total));
    }
    Ok((sizes, total))
}

/// What a staged exchange returns: its times, whether every summed value is finite, and the
/// sum of the extra value.
type Summed = (ExchangeTimes, bool, f32);

/// What one weighted sum exchanges: the tensors, the pieces' sizes (the tensors', then 1 for
/// the extra value if any), this rank's weight, and the extra value riding unscaled.
struct Parts<'a> {
    tensors: &'a [Tensor],
    sizes: &'a [usize],
    weight: f32,
    extra: Option<f32>,
}

impl Parts<'_> {
    /// [`weighted_sum`] through the host slice `host` (Σ `sizes` long): each bucket is filled
    /// by libtorch copies into views of it (DMA from CUDA when it is pinned), scaled, summed.
    fn via_host<C: RawComm>(
        &self,
        comm: &C,
        cfg: &ExchangeConfig,
        host: &mut [f32],
    ) -> Result<Summed, TrainError> {
        let (tensors, sizes, weight, extra) = (self.tensors, self.sizes, self.weight, self.extra);
        let mut fill = |pieces: Range<usize>, dst: &mut [f32]| {
            let tensor = |i: usize| tensors.get(i).map(|t| Ok(t.shallow_clone()));
            fill_host(pieces, dst, sizes, tensor, weight, extra)
        };
        let times = exchange(comm, cfg, sizes, &mut fill, host)?;
        copy_back(tensors, sizes, host)?;
        let (finite, summed) = host_outcome(host, extra.is_some());
        Ok((times, finite, summed))
    }

    /// [`weighted_sum`] in the flat tensor `flat` on the tensors' device, handed to MPI as it
    /// is. A rank whose copies fail still takes part in every collective (with zeros) and
    /// returns the error after, so no rank is left waiting.
    fn in_place<C: RawComm>(
        &self,
        comm: &C,
        cfg: &ExchangeConfig,
        flat: &Tensor,
    ) -> Result<Summed, TrainError> {
        let (tensors, sizes, weight, extra) = (self.tensors, self.sizes, self.weight, self.extra);
        let values: usize = sizes[..tensors.len()].iter().sum();
        let filled = tch::no_grad(|| -> Result<(), TrainError> {
            let mut offset = 0;
            for (t, &n) in tensors.iter().zip(sizes) {
                flat.f_narrow(0, offset as i64, n as i64)?
                    .f_copy_(&t.f_reshape([-1])?)?;
                offset += n;
            }
            scale_and_mark(flat, values, weight, extra)
        });
        if filled.is_err() {
            let _ = flat.shallow_clone().f_zero_();
        }
        let times = reduce_flat(comm, cfg, sizes, flat);
        filled?;
        let mut offset = 0;
        tch::no_grad(|| -> Result<(), TrainError> {
            for (t, &n) in tensors.iter().zip(sizes) {
                let summed = flat.f_narrow(0, offset as i64, n as i64)?;
                t.shallow_clone().f_copy_(&summed.f_view_as(t)?)?;
                offset += n;
            }
            Ok(())
        })?;
        let summed = match extra {
            Some(_) => flat.f_double_value(&[values as i64])? as f32,
            None => 0.0,
        };
        Ok((times, finite_sums(flat, values)?, summed))
    }
}

/// Fills `dst` with the pieces `pieces` of `sizes`, one after another: the values of each
/// tensor `tensor(i)` gives, scaled by `weight` (copied by libtorch into a view of `dst`:
/// one DMA transfer from CUDA into page-locked memory), or, where it gives none, the extra
/// value unscaled.
fn fill_host(
    pieces: Range<usize>,
    dst: &mut [f32],
    sizes: &[usize],
    tensor: impl Fn(usize) -> Option<Result<Tensor, TrainError>>,
    weight: f32,
    extra: Option<f32>,
) -> Result<(), TrainError> {
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
fn copy_back(tensors: &[Tensor], sizes: &[usize], host: &mut [f32]) -> Result<(), TrainError> {
    let mut offset = 0;
    tch::no_grad(|| -> Result<(), TrainError> {
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

/// [`sync_gradients_with_flag`] overlapped with the backward pass `backward` runs, through
/// the host buffer (page-locked for CUDA: the path without a CUDA-aware MPI). `order` is
/// the variables in the hooks' (backward) order; each bucket's gradients are copied in,
/// scaled and their reduction started ([`super::overlap`]) as soon as the hooks report them all
/// accumulated — on CUDA the copy waits for the kernels that wrote them, on the thread
/// running backward — and the sums are copied back after. The seconds reported are what
/// the step waited for after backward, the copies back included. A rank whose copies fail
/// still takes part in every reduction (with zeros) and returns the error after.
pub(super) fn sync_copied_during<C: RawComm>(
    comm: &C,
    cfg: &ExchangeConfig,
    hooks: &GradHooks,
    order: &[Tensor],
    (weight, flag): (f32, bool),
    buf: &mut ExchangeBuffer,
    backward: impl FnOnce() -> Result<(), TrainError>,
) -> Result<(SyncStats, bool), TrainError> {
    let (sizes, total) = piece_sizes(order, true)?;
    let cuda = order.first().is_some_and(|t| t.device().is_cuda());
    let host = buf.host(total, cuda)?;
    let flag = f32::from(u8::from(flag));
    let mut failed = None;
    let mut fill = |pieces: Range<usize>, dst: &mut [f32]| {
        let tensor = |i: usize| order.get(i).map(|v| gradient(v, i));
        if let Err(e) = fill_host(pieces, dst, &sizes, tensor, weight, Some(flag)) {
            dst.fill(0.0);
            failed.get_or_insert(e);
        }
    };
    // The flag (the last piece) is known before backward.
    let pieces = (&sizes[..], Some(order.len()));
    let (times, waited) = hooks.overlap(backward, |run| {
        overlapped(comm, cfg, pieces, host, &mut fill, run)
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    let copying = Instant::now();
    copy_back(&gradients(order)?, &sizes, host)?;
    let (finite, raised) = host_outcome(host, true);
    let exposed = ExchangeTimes {
        seconds: waited + copying.elapsed().as_secs_f64(),
        buckets: times.buckets,
    };
    Ok((SyncStats::of(comm, total, exposed, finite), raised > 0.5))
}

/// Variable `i`'s gradient, or an error naming its index.
fn gradient(var: &Tensor, i: usize) -> Result<Tensor, TrainError> {
    let g = var.grad();
    if g.defined() {
        Ok(g)
    } else {
        Err(TrainError::NoGradient(i))
    }
}

/// Every variable's gradient: `grad()` returns a handle on the gradient's storage, so
/// writing it writes the gradient. A variable without one is an error naming its index.
pub(super) fn gradients(vars: &[Tensor]) -> Result<Vec<Tensor>, TrainError> {
    vars.iter()
        .enumerate()
        .map(|(i, v)| gradient(v, i))
        .collect()
}

/// Replaces each buffer (batch-norm running statistics: non-trainable float variables) by
/// Σ_ranks weight_rank · buffer_rank, so every rank holds the group's weighted average, as if
/// the statistics had been gathered over the global batch. Call after each step, with the
/// buffers in the same order on every rank (e.g. sorted by name).
pub fn average_buffers<C: RawComm>(
    comm: &C,
    cfg: &ExchangeConfig,
    buffers: &[Tensor],
    weight: f32,
    buf: &mut ExchangeBuffer,
) -> Result<SyncStats, TrainError> {
    weighted_sum(comm, cfg, buffers, weight, None, buf).map(|r| r.0)
}

/// Replaces every variable's gradient by Σ_ranks weight_rank · gradient_rank, where `weight`
/// is this rank's share of the global batch (its samples / all samples), so the result is
/// the gradient of the global batch's mean loss. Every variable needs a gradient (a rank
/// with an empty shard runs backward on a zero loss). `buf` is reused.
pub fn sync_gradients<C: RawComm>(
    comm: &C,
    cfg: &ExchangeConfig,
    vars: &[Tensor],
    weight: f32,
    buf: &mut ExchangeBuffer,
) -> Result<SyncStats, TrainError> {
    sync_gradients_with_flag(comm, cfg, vars, weight, false, buf).map(|r| r.0)
}

/// [`sync_gradients`], also telling every rank whether any rank raised `flag` — in the same
/// message, so a group can agree to stop mid-epoch without an extra collective per step.
pub fn sync_gradients_with_flag<C: RawComm>(
    comm: &C,
    cfg: &ExchangeConfig,
    vars: &[Tensor],
    weight: f32,
    flag: bool,
    buf: &mut ExchangeBuffer,
) -> Result<(SyncStats, bool), TrainError> {
    let grads = gradients(vars)?;
    let (stats, raised) = weighted_sum(
        comm,
        cfg,
        &grads,
        weight,
        Some(f32::from(u8::from(flag))),
        buf,
    )?;
    Ok((stats, raised > 0.5))
}

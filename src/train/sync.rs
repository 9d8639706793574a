//! The gradient exchange. Gradients are flattened into f32 buckets, scaled by this rank's
//! share of the global batch, summed over the group ([`super::exchange`]: bucketed,
//! pipelined `MPI_Iallreduce`, or reduce + broadcast), then copied into the gradient
//! tensors. Every rank must end with the same sums: the per-epoch parameter hash checks it
//! under the MPI in use (reduce + broadcast guarantees it by construction).

use tch::Tensor;

use super::exchange::{exchange, ExchangeConfig};
use super::inplace::RawComm;
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
/// into `buf` and scaled, bucket by bucket, summed in place ([`exchange`]), copied back.
/// With `extra`, one more value rides unscaled at the end; its sum is returned.
fn weighted_sum<C: RawComm>(
    comm: &C,
    cfg: &ExchangeConfig,
    tensors: &[Tensor],
    weight: f32,
    extra: Option<f32>,
    buf: &mut Vec<f32>,
) -> Result<(SyncStats, f32), TrainError> {
    let mut sizes: Vec<usize> = tensors.iter().map(|t| t.numel()).collect();
    let values: usize = sizes.iter().sum();
    if extra.is_some() {
        sizes.push(1);
    }
    let total = values + usize::from(extra.is_some());
    if i32::try_from(total).is_err() {
        return Err(TrainError::TooLarge(total));
    }
    buf.clear();
    buf.resize(total, 0.0);
    let mut fill = |pieces: std::ops::Range<usize>, dst: &mut [f32]| -> Result<(), TrainError> {
        let mut offset = 0;
        for i in pieces {
            let n = sizes[i];
            match tensors.get(i) {
                Some(t) => {
                    t.f_contiguous()?
                        .f_copy_data(&mut dst[offset..offset + n], n)?;
                    dst[offset..offset + n]
                        .iter_mut()
                        .for_each(|x| *x *= weight);
                }
                None => dst[offset] = extra.unwrap_or(0.0),
            }
            offset += n;
        }
        Ok(())
    };
    let times = exchange(comm, cfg, &sizes, &mut fill, buf)?;
    let reduced = &buf[..];
    let mut offset = 0;
    tch::no_grad(|| -> Result<(), TrainError> {
        for (t, &n) in tensors.iter().zip(&sizes) {
            let summed = Tensor::f_from_slice(&reduced[offset..offset + n])?.f_view_as(t)?;
            t.shallow_clone().f_copy_(&summed)?;
            offset += n;
        }
        Ok(())
    })?;
    let summed = extra.map_or(0.0, |_| reduced[values]);
    // A group of one rank exchanges nothing, whatever the call costs.
    let sent = if comm.size() > 1 { total } else { 0 };
    Ok((
        SyncStats {
            bytes: (sent * std::mem::size_of::<f32>()) as u64,
            seconds: times.seconds,
            buckets: times.buckets,
            // The sum is the same on every rank, so is this verdict.
            finite: reduced[..values].iter().all(|x| x.is_finite()),
        },
        summed,
    ))
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
    buf: &mut Vec<f32>,
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
    buf: &mut Vec<f32>,
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
    buf: &mut Vec<f32>,
) -> Result<(SyncStats, bool), TrainError> {
    // `grad()` returns a handle on the gradient's storage: writing it writes the gradient.
    let grads: Vec<Tensor> = vars
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let g = v.grad();
            if g.defined() {
                Ok(g)
            } else {
                Err(TrainError::NoGradient(i))
            }
        })
        .collect::<Result<_, _>>()?;
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

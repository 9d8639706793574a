//! `aiperf dp-check`: data-parallel training on a tiny model, to check on a new machine or
//! interconnect that every rank of the group keeps bit-identical parameters. Every rank
//! builds the same ResNet from the same seed, trains on its share of seeded global batches
//! (13 samples, so shards differ in size), exchanges gradients through [`Gradients`] and
//! batch-norm statistics with [`Gradients::average_buffers`], and compares a hash of all its variables'
//! bytes with every other rank's after each SGD step. The exchange runs as in training:
//! overlapped with backward where it can be ([`Gradients`]).

use std::hash::{Hash, Hasher};

use mpi::collective::{CommunicatorCollectives, SystemOperation};
use serde::Serialize;
use tch::nn::{ModuleT, OptimizerConfig};
use tch::{nn, Device, Kind, Tensor};

use super::{all_variables, float_buffers, synchronize, TrainError};
use crate::arch::{cifar_resnet, CifarResnetConfig, Shape};
use crate::data::shard_range;
use crate::exchange::{
    Exchange, ExchangeConfig, ExchangeMethod, Gradients, RawComm, RunChoice, Share,
};
use crate::model::Net;

/// The outcome, the same on every rank.
#[derive(Clone, Debug, Serialize)]
pub struct DpReport {
    /// Ranks in the group.
    pub ranks: usize,
    /// The device this rank (rank 0 where printed) trained on: `cpu` or `cuda:N`.
    pub device: String,
    /// Whether all ranks held bit-identical parameters and buffers after every step.
    pub identical: bool,
    /// Sum of all parameters at the end (compare across group sizes).
    pub param_sum: f64,
    /// Global-batch mean loss per step.
    pub losses: Vec<f64>,
    /// Bytes each rank exchanged per step.
    pub bytes_per_step: u64,
    /// Steps whose exchange ran overlapped with backward (gradient views: from the second,
    /// once the first exchange has bound them; the copying path: from the first).
    pub overlapped_steps: u32,
    /// Steps in which rank 0 started a reduction before its backward pass had returned:
    /// the overlap at work (timing, so it varies from run to run).
    pub during_backward: u32,
    /// The exchange that ran (`auto` resolved).
    pub exchange: ExchangeMethod,
    /// What `auto` measured and chose, when it was asked for (set by the caller that
    /// resolved it).
    pub choice: Option<RunChoice>,
}

/// A hash of every parameter's bits, in name order.
pub(super) fn params_hash(vs: &nn::VarStore) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (name, t) in all_variables(vs) {
        let n = t.numel();
        let mut buf = vec![0f32; n];
        t.to_device(Device::Cpu).contiguous().copy_data(&mut buf, n);
        name.hash(&mut h);
        buf.iter().for_each(|v| v.to_bits().hash(&mut h));
    }
    h.finish()
}

/// One step's backward pass and gradient exchange, as training runs them: the bytes sent,
/// whether the exchange overlapped with backward, and whether a reduction started before
/// backward had returned.
fn backward_and_exchange(
    ex: &Exchange<'_>,
    grads: &mut Gradients,
    loss: &Tensor,
    weight: f32,
) -> Result<(u64, bool, bool), TrainError> {
    let mut backward_end = f64::INFINITY;
    let backward = || -> Result<(), TrainError> {
        loss.f_backward()?;
        // Backward has ended when its kernels have.
        synchronize(loss.device());
        backward_end = crate::host::unix_s();
        Ok(())
    };
    let overlapped = grads.overlaps();
    let (stats, _) = grads.backward_and_sum(
        ex,
        Share {
            weight,
            stop: false,
        },
        backward,
    )?;
    let early = stats.buckets.iter().any(|&(start, _)| start < backward_end);
    Ok((stats.bytes, overlapped, early))
}

/// The check's small ResNet, built on the CPU from a fixed seed and moved to `device`: the
/// same initial values on every rank and device.
fn check_model(device: Device) -> (nn::VarStore, Net) {
    tch::manual_seed(0);
    let g = cifar_resnet(
        &CifarResnetConfig {
            blocks: vec![1, 1],
            width: 4,
        },
        Shape::new(3, 8, 8),
        3,
    );
    let mut vs = nn::VarStore::new(Device::Cpu);
    let net = Net::build(&vs.root(), &g).expect("the built-in model is valid");
    vs.set_device(device);
    (vs, net)
}

/// Runs `steps` data-parallel SGD steps over `comm` (collective: every rank must call it).
/// With `frozen_bn`, batch norm uses its running statistics instead of each shard's batch
/// statistics, so the group's update equals the single-process one on the global batch (up
/// to summation order) — the check that the gradient weighting is right. Each rank trains
/// on `device`; the batches are drawn on the CPU (the same on every device) and moved there.
pub fn dp_check<C: RawComm>(
    comm: &C,
    steps: u32,
    frozen_bn: bool,
    cfg: &ExchangeConfig,
    device: Device,
) -> Result<DpReport, TrainError> {
    let (rank, size) = (comm.rank() as usize, comm.size() as usize);
    let ex = Exchange::new(comm, cfg)?;
    let (vs, net) = check_model(device);
    let mut opt = nn::Sgd {
        momentum: 0.9,
        wd: 5e-4,
        ..Default::default()
    }
    .build(&vs, 0.05)?;
    let vars = vs.trainable_variables();
    let buffers = float_buffers(&vs);
    // The training's path: gradients as views of the buckets where MPI reads their memory,
    // the exchange overlapped with backward where it can be.
    let mut grads = Gradients::new(&vars, device, &ex)?;
    let global = 13usize;
    let (mut losses, mut identical, mut bytes) = (Vec::new(), true, 0);
    let (mut overlapped_steps, mut during_backward) = (0, 0);
    for step in 0..i64::from(steps) {
        tch::manual_seed(1000 + step);
        let x = Tensor::randn([global as i64, 3, 8, 8], (Kind::Float, Device::Cpu)).to(device);
        let y = Tensor::randint(3, [global as i64], (Kind::Int64, Device::Cpu)).to(device);
        let mine = shard_range(global, size, rank);
        let (start, len) = (mine.start as i64, mine.len() as i64);
        grads.zero(&mut opt)?;
        let loss = net
            .forward_t(&x.narrow(0, start, len), !frozen_bn)
            .cross_entropy_for_logits(&y.narrow(0, start, len));
        let weight = mine.len() as f32 / global as f32;
        let (sent, overlapped, early) = backward_and_exchange(&ex, &mut grads, &loss, weight)?;
        bytes = sent;
        overlapped_steps += u32::from(overlapped);
        during_backward += u32::from(early);
        opt.step();
        grads.average_buffers(&ex, &buffers, weight)?;
        let local = [loss.f_double_value(&[])? * f64::from(weight)];
        let mut total = [0f64];
        comm.all_reduce_into(&local[..], &mut total[..], SystemOperation::sum());
        losses.push(total[0]);
        let mine_hash = params_hash(&vs);
        let mut all = vec![0u64; size];
        comm.all_gather_into(&mine_hash, &mut all[..]);
        identical &= all.iter().all(|&h| h == mine_hash);
    }
    let param_sum = vars
        .iter()
        .map(|t| t.sum(Kind::Double).double_value(&[]))
        .sum();
    Ok(DpReport {
        ranks: size,
        device: crate::host::device_label(device),
        identical,
        param_sum,
        losses,
        bytes_per_step: bytes,
        overlapped_steps,
        during_backward,
        exchange: ex.config().method,
        choice: None,
    })
}

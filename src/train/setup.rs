//! What a trial's training starts from on one rank: the group leader's initial parameters,
//! and this rank's loaders of its shard of every global batch.

use std::sync::Arc;

use mpi::collective::Root;
use mpi::traits::Communicator;
use tch::{nn, Device, Kind, Tensor};

use super::layout::MemoryFormat;
use super::trainer::{RealTrainer, TrialSpec};
use super::{all_variables, TrainError};
use crate::data::{Loader, LoaderConfig, Pack};

/// Broadcasts the group leader's initial parameter and buffer values to every rank.
pub(super) fn broadcast_initial<C: Communicator>(
    comm: &C,
    vs: &nn::VarStore,
    device: Device,
) -> Result<(), TrainError> {
    for (_, t) in &all_variables(vs) {
        if t.kind() != Kind::Float {
            continue;
        }
        let n = t.numel();
        let mut host = vec![0f32; n];
        t.to_device(Device::Cpu)
            .contiguous()
            .copy_data(&mut host, n);
        comm.process_at_rank(0).broadcast_into(&mut host[..]);
        tch::no_grad(|| -> Result<(), TrainError> {
            let v = Tensor::f_from_slice(&host)?
                .f_view_as(t)?
                .f_to_device(device)?;
            t.shallow_clone().f_copy_(&v)?;
            Ok(())
        })?;
    }
    Ok(())
}

/// This rank's training and validation loaders: its shard of every global batch of the
/// trial's batch size.
pub(super) fn loaders<C: Communicator>(
    real: &RealTrainer,
    comm: &C,
    spec: &TrialSpec,
) -> Result<(Loader, Loader), TrainError> {
    let (cfg, device) = (&real.cfg, real.device);
    let (train_pack, val_pack) = (&real.train_pack, &real.val_pack);
    let (rank, size) = (comm.rank() as usize, comm.size() as usize);
    let global = spec.hparams.batch_size as usize * size;
    let loader = |pack: &Arc<Pack>, lc: LoaderConfig| Loader::new(Arc::clone(pack), lc);
    let train = loader(
        train_pack,
        LoaderConfig {
            global_batch: global,
            rank,
            group_size: size,
            seed: spec.seed,
            shuffle: true,
            drop_last: true,
            augment: cfg.augment.clone(),
            mean: None,
            std: None,
            workers: cfg.loader_workers,
            prefetch: cfg.prefetch,
            output: cfg.augment_on.output(device),
            channels_last: cfg.memory_format == MemoryFormat::ChannelsLast,
            limit: cfg.train_images,
        },
    )?;
    if train.batches_per_epoch() == 0 {
        return Err(TrainError::Config(format!(
                "{} training images per epoch make no global batch of {global} (batch size {} × {size} ranks): use more training images or a smaller batch-size range",
                train.samples_per_epoch().max(cfg.train_images.unwrap_or(0)),
                spec.hparams.batch_size
            )));
    }
    // Validation normalises with the training split's statistics.
    let h = train_pack.header();
    let val = loader(
        val_pack,
        LoaderConfig {
            global_batch: cfg.val_batch.max(1) * size,
            rank,
            group_size: size,
            seed: spec.seed,
            shuffle: false,
            drop_last: false,
            augment: cfg.val_augment.clone(),
            mean: Some(h.channel_mean.iter().map(|&m| m as f32).collect()),
            std: Some(h.channel_std.iter().map(|&s| s as f32).collect()),
            workers: cfg.loader_workers,
            prefetch: cfg.prefetch,
            output: cfg.augment_on.output(device),
            channels_last: cfg.memory_format == MemoryFormat::ChannelsLast,
            limit: cfg.val_images,
        },
    )?;
    Ok((train, val))
}

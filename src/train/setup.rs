//! What a trial's training starts from on one rank: the model built from the trial's
//! architecture, the group leader's initial parameters, the optimizer and schedule, and this
//! rank's loaders of its shard of every global batch ([`TrialTrainer::new`]).

use std::sync::Arc;

use mpi::collective::Root;
use mpi::traits::Communicator;
use tch::nn::OptimizerConfig;
use tch::{nn, Device, Kind, Tensor};

use super::amp::Precision;
use super::memory_format::MemoryFormat;
use super::scaler::LossScaler;
use super::schedule::LrSchedule;
use super::trainer::{RealTrainer, TrainConfig, TrialSpec, TrialTrainer};
use super::{all_variables, float_buffers, TrainError};
use crate::data::{Loader, LoaderConfig, Pack};
use crate::exchange::{Exchange, Gradients, RawComm};
use crate::model::Net;

/// Broadcasts the group leader's initial parameter and buffer values to every rank.
fn broadcast_initial<C: Communicator>(
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
fn loaders<C: Communicator>(
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

impl<'c, C: RawComm> TrialTrainer<'c, C> {
    /// Builds the model on `real`'s device from `spec` (collective over `comm`: the
    /// leader's initial parameters are broadcast) and the loaders of this rank's shards.
    pub fn new(comm: &'c C, real: &RealTrainer, spec: &TrialSpec) -> Result<Self, TrainError> {
        let (cfg, device) = (&real.cfg, real.device);
        match cfg.precision {
            Precision::Auto => return Err(TrainError::Config(
                "precision auto reached the trainer unresolved (the run resolves it at start-up)"
                    .into(),
            )),
            Precision::Fp16 if !device.is_cuda() => {
                return Err(TrainError::Config(
                    "fp16 autocast needs a CUDA device; use --precision bf16 or fp32 on CPU".into(),
                ))
            }
            _ => {}
        }
        let size = comm.size() as usize;
        // Collective over the group, like everything else here.
        let exchange = Exchange::new(comm, &cfg.exchange)?;
        tch::manual_seed(spec.seed as i64);
        let vs = nn::VarStore::new(device);
        let net = Net::build(&vs.root(), &spec.graph)?;
        // The leader's initial values everywhere (bit-identical start on any devices).
        broadcast_initial(comm, &vs, device)?;
        if cfg.memory_format == MemoryFormat::Auto {
            return Err(TrainError::Config(
                "memory format auto reached the trainer unresolved (the run resolves it at start-up)".into(),
            ));
        }
        cfg.memory_format.apply_to(&vs)?;
        let global = spec.hparams.batch_size as usize * size;
        let lr = cfg.lr_per_256 * global as f64 / 256.0;
        let opt = nn::Sgd {
            momentum: cfg.momentum,
            wd: cfg.weight_decay,
            ..Default::default()
        }
        .build(&vs, lr)?;
        let (train, val) = loaders(real, comm, spec)?;
        let grads = Gradients::new(&vs.trainable_variables(), device, &exchange)?;
        Ok(TrialTrainer {
            comm,
            cfg: TrainConfig {
                exchange: *exchange.config(),
                ..cfg.clone()
            },
            exchange,
            device,
            grads,
            buffers: float_buffers(&vs),
            vs,
            net,
            opt,
            train,
            val,
            schedule: LrSchedule {
                base_lr: lr,
                warmup_epochs: cfg.warmup_epochs,
                total_epochs: f64::from(spec.epochs.max(1)),
            },
            scaler: (cfg.precision == Precision::Fp16).then(LossScaler::default),
        })
    }
}

//! The training half of `aiperf audit` (docs/design.md §5): each planned trial rebuilt from
//! its recorded architecture, hyperparameters and rank count and trained again with its
//! recorded seed — and, in statistical mode, with further seeds; under `--timed`, again with
//! the same seed — each epoch's figures and duration sent to rank 0.

use std::time::{Duration, Instant};

use aiperf_records::audit::Retrained;
use anyhow::bail;
use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::{Communicator, Destination};

use super::plan::{Plan, Planned};
use crate::arch::Graph;
use crate::cli::AuditArgs;
use crate::config::RecordedConfig;
use crate::data::open_split;
use crate::ops::OpCount;
use crate::search::Hparams;
use crate::seeds::mix;
use crate::train::{RealTrainer, Trainer, TrialSpec};
use crate::world::transport::receive_any;

/// The seed of re-training `k` of a trial whose recorded seed is `seed`: the recorded one
/// for k = 0 and whenever `same` (timed repeats), else a seed derived from it.
pub(super) fn seed_of(seed: u64, k: u32, same: bool) -> u64 {
    if k == 0 || same {
        seed
    } else {
        mix(seed ^ mix(0x6175_6469_7400_0000 | u64::from(k)))
    }
}

/// This rank's libtorch trainer over the run's dataset, checked against its identity.
pub(super) fn trainer(
    args: &AuditArgs,
    config: &RecordedConfig,
    plan: &Plan,
    rank: usize,
) -> anyhow::Result<RealTrainer> {
    let dir = args.data.clone().unwrap_or_else(|| config.data_dir());
    let train = open_split(&dir, "train")?;
    let val = open_split(&dir, "val")?;
    let identity: aiperf_records::rules::DatasetIdentity =
        serde_json::from_str(&plan.dataset_json)?;
    let have = [train.header().crc32, val.header().crc32];
    if identity.crc32.is_some_and(|want| want != have) {
        bail!(
            "--data {}: its packs' CRC-32 {:08x?} are not the run's {:08x?}: give the dataset the run trained on",
            dir.display(),
            have,
            identity.crc32.unwrap_or_default()
        );
    }
    let device = if tch::Cuda::is_available() {
        tch::Device::Cuda(rank.saturating_sub(1) % tch::Cuda::device_count().max(1) as usize)
    } else {
        tch::Device::Cpu
    };
    Ok(RealTrainer {
        cfg: config.preset.train.clone(),
        device,
        train_pack: train,
        val_pack: val,
    })
}

/// One re-training of a trial: what each epoch gave, and its early steps' global training
/// losses.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Retraining {
    /// Each re-trained epoch.
    pub epochs: Vec<Retrained>,
    /// The first epoch's early steps.
    pub early: Vec<f64>,
}

/// One planned trial's re-trainings, on rank 0.
pub(super) struct TrialResult {
    /// Training ranks used.
    pub ranks: u32,
    /// Every re-training (the recorded seed first).
    pub runs: Vec<Retraining>,
}

/// Trains `t` again with `seed` on `comm`; what each epoch gave, with its duration (epoch
/// 1's from the trial's start, as the records time it), and the early steps.
fn retrain(
    comm: &SimpleCommunicator,
    trainer: &RealTrainer,
    t: &Planned,
    seed: u64,
) -> anyhow::Result<Retraining> {
    let size = comm.size() as u32;
    let global = t.batch_size * t.ranks;
    if !global.is_multiple_of(size) {
        bail!(
            "trial of model {}: its global batch of {global} ({} × {} ranks) cannot be split over {size} ranks: audit with {} training ranks",
            t.model_id, t.batch_size, t.ranks, t.ranks
        );
    }
    let graph = Graph::from_json(&t.graph_json)?;
    let count = OpCount::of(&graph)?;
    let spec = TrialSpec {
        graph,
        hparams: Hparams {
            batch_size: global / size,
            kernel_size: t.kernel_size,
        },
        seed,
        epochs: t.budget,
    };
    let mut since = Instant::now();
    let mut run = trainer.start(comm, &spec, 0)?;
    let mut out = Retraining::default();
    for epoch in 1..=t.epochs {
        let e = run.epoch(epoch, &|| false)?;
        if epoch == 1 {
            out.early = e.early_losses.clone();
        }
        let ops = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
        let f = e.figures;
        out.epochs.push(Retrained {
            figures: f,
            train_ops: ops(count.train_epoch(f.train_images, f.steps)),
            val_ops: ops(count.eval_epoch(f.val_images)),
            seconds: since.elapsed().as_secs_f64(),
        });
        since = Instant::now();
    }
    Ok(out)
}

/// Rank 0: the leader's figures, waited for without spinning a core (rank 0 shares the
/// first node with training ranks, and the audit may run for hours).
fn from_leader(world: &SimpleCommunicator, leader: i32) -> anyhow::Result<Vec<u8>> {
    loop {
        let got = receive_any(world, Duration::from_secs(60), 1 << 30)?;
        match got {
            Some((bytes, from)) if from == leader => return Ok(bytes),
            Some((_, from)) => bail!("audit: rank 0 got a message from rank {from}, expected the figures of rank {leader}"),
            None => continue,
        }
    }
}

/// Every planned trial re-trained `seeds` times (seed `k` from [`seed_of`]) on the training
/// ranks `trainers`; on rank 0, per trial, the ranks used and each re-training.
pub(super) fn all(
    world: &SimpleCommunicator,
    plan: &Plan,
    trainer: Option<&RealTrainer>,
    trainers: &[usize],
    seeds: u32,
    same_seed: bool,
) -> anyhow::Result<Vec<TrialResult>> {
    let rank = world.rank() as usize;
    let mut results = Vec::new();
    for t in &plan.trials {
        let used = &trainers[..(t.ranks as usize).min(trainers.len())];
        let color = if used.contains(&rank) {
            Color::with_value(0)
        } else {
            Color::undefined()
        };
        let comm = world.split_by_color(color);
        let leader = used[0] as i32;
        let mut mine: Vec<Retraining> = Vec::new();
        if let (Some(c), Some(tr)) = (&comm, trainer) {
            for k in 0..seeds {
                match retrain(c, tr, t, seed_of(t.seed, k, same_seed)) {
                    Ok(v) => mine.push(v),
                    Err(e) => {
                        eprintln!("aiperf: error: audit: rank {rank}: {e:#}");
                        world.abort(1);
                    }
                }
            }
        }
        if rank == leader as usize && leader != 0 {
            let bytes = bincode::serde::encode_to_vec(&mine, bincode::config::standard())?;
            world.process_at_rank(0).send(&bytes[..]);
        }
        if rank == 0 {
            let got = if leader == 0 {
                mine
            } else {
                let bytes = from_leader(world, leader)?;
                let (v, _): (Vec<Retraining>, usize) =
                    bincode::serde::decode_from_slice(&bytes, bincode::config::standard())?;
                v
            };
            results.push(TrialResult {
                ranks: used.len() as u32,
                runs: got,
            });
        }
    }
    Ok(results)
}

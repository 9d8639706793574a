//! What `aiperf run` trains with on this rank: the trainer the configuration names (the
//! libtorch trainer over the dataset's packs, or a stand-in on a synthetic dataset), the
//! start architecture and the dataset's identity, with every check that must pass before
//! anything runs.

use std::path::Path;

use aiperf_records::rules::DatasetIdentity;
use anyhow::{bail, Context};
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;

use super::Given;
use crate::arch::{self, Graph};
use crate::config::{RecordedConfig, TrainerKind};
use crate::data::open_split;
use crate::ops::OpCount;
use crate::train::emulated::EmulatedTrainer;
use crate::train::fault::FaultyTrainer;
use crate::train::simulated::{SimDevice, SimulatedTrainer};
use crate::train::{RealTrainer, Trainer};
use crate::world::bootstrap::Placement;

/// `--train-images` and `--val-images` as given.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Images {
    pub(super) train: Option<usize>,
    pub(super) val: Option<usize>,
}

/// This rank's trainer, the run's start architecture and the dataset's identity.
pub(super) struct Built {
    pub(super) trainer: Box<dyn Trainer>,
    pub(super) start: Graph,
    pub(super) dataset: DatasetIdentity,
}

/// This rank's trainer, the start architecture and the dataset's identity.
pub(super) fn trainer(
    world: &SimpleCommunicator,
    config: &RecordedConfig,
    place: &Placement,
    given: &Given,
) -> anyhow::Result<Built> {
    let built = match config.trainer {
        TrainerKind::Simulated | TrainerKind::Emulated => synthetic_trainer(config)?,
        TrainerKind::Real => {
            // Lines every trainer would log alike are logged by the first one only.
            let rank = world.rank() as usize;
            let first = place.layout.group_of.iter().position(Option::is_some) == Some(rank);
            real_trainer(config, place, first, given.images)?
        }
    };
    let trainer = match given.fault {
        Some(fault) => {
            let rank = world.rank() as usize;
            Box::new(FaultyTrainer {
                inner: built.trainer,
                fault,
                world_rank: rank as u32,
                group: place.layout.group_of[rank].unwrap_or(u32::MAX),
            })
        }
        None => built.trainer,
    };
    Ok(Built { trainer, ..built })
}

/// The simulated or emulated trainer, on the synthetic dataset the flags describe.
fn synthetic_trainer(config: &RecordedConfig) -> anyhow::Result<Built> {
    let p = &config.preset;
    let input = config.sim_input().map_err(anyhow::Error::msg)?;
    let start = start_graph(&p.start, input, config.sim.classes)?;
    let images = (config.sim.train_images, config.sim.val_images);
    let trainer: Box<dyn Trainer> = if config.trainer == TrainerKind::Emulated {
        Box::new(EmulatedTrainer {
            ops_per_s: config.sim.ops,
            images,
            exchange: p.train.exchange,
            seed: config.seed,
            trace_steps: p.train.trace_steps,
        })
    } else {
        Box::new(SimulatedTrainer {
            device: SimDevice {
                ops_per_s: config.sim.ops,
                accelerators: 1,
            },
            images,
            speedup: config.sim.speedup,
            seed: config.seed,
        })
    };
    let identity = DatasetIdentity {
        name: "synthetic".into(),
        train_images: images.0,
        val_images: images.1,
        classes: config.sim.classes,
        stored: [input.c, input.h, input.w],
        input: [input.h, input.w, input.c],
        subset: None,
        crc32: None,
    };
    Ok(Built {
        trainer,
        start,
        dataset: identity,
    })
}

/// The run's first architecture on its dataset (for the start-up probe).
pub(super) fn first_graph(config: &RecordedConfig) -> anyhow::Result<Graph> {
    let p = &config.preset;
    let dir = config.data_dir();
    let h = open_split(&dir, "train")?.header().clone();
    let (oh, ow) = input_size(p, &h, &dir)?;
    start_graph(
        &p.start,
        arch::Shape::new(h.channels, oh, ow),
        h.num_classes,
    )
}

fn start_graph(name: &str, input: arch::Shape, classes: u32) -> anyhow::Result<Graph> {
    let start = arch::by_name(name, input, classes).ok_or_else(|| {
        anyhow::anyhow!(
            "start architecture {name:?}: use one of {}",
            crate::config::STARTS.join(", ")
        )
    })?;
    OpCount::of(&start).with_context(|| format!("start {name} does not fit the {input} input"))?;
    Ok(start)
}

/// The libtorch trainer over the dataset's packs; the node's first training rank verifies
/// their checksums before anything trains.
fn real_trainer(
    config: &RecordedConfig,
    place: &Placement,
    first: bool,
    images: Images,
) -> anyhow::Result<Built> {
    let p = &config.preset;
    let dir = config.data_dir();
    let train = open_split(&dir, "train")?;
    let val = open_split(&dir, "val")?;
    if place.local == Some(0) {
        train.verify()?;
        val.verify()?;
    }
    let h = train.header().clone();
    let (oh, ow) = input_size(p, &h, &dir)?;
    let start = start_graph(
        &p.start,
        arch::Shape::new(h.channels, oh, ow),
        h.num_classes,
    )?;
    crate::data::same_shape(&dir, &h, val.header())?;
    check_counts(images, &dir, h.num_samples, val.header().num_samples)?;
    check_batch_fits(config, place, h.num_samples)?;
    let v = val.header();
    let identity = DatasetIdentity {
        name: h.source.dataset.clone(),
        train_images: h.num_samples,
        val_images: v.num_samples,
        classes: h.num_classes,
        stored: [h.channels, h.height, h.width],
        input: [oh, ow, h.channels],
        subset: h.source.subset.zip(v.source.subset).map(|(a, b)| a || b),
        crc32: Some([h.crc32, v.crc32]),
    };
    // A staging the device cannot use fails here, before any trial runs.
    let staging = p.train.exchange.staging.resolve(place.device)?;
    if first {
        log::info!("gradient exchange on {}", staging.describe());
    }
    let real = RealTrainer {
        cfg: p.train.clone(),
        device: place.device,
        train_pack: train,
        val_pack: val,
    };
    Ok(Built {
        trainer: Box::new(real),
        start,
        dataset: identity,
    })
}

/// The inputs' height and width after the preset's augmentation of the images of `dir`
/// (header `h`): both augmentations must fit the images and give the same size.
fn input_size(
    p: &crate::config::Preset,
    h: &crate::data::Header,
    dir: &Path,
) -> anyhow::Result<(u32, u32)> {
    p.train.augment.check_fits(h.height, h.width).map_err(|e| {
        anyhow::anyhow!(
            "train.augment of preset {}: {e} of {}",
            p.name,
            dir.display()
        )
    })?;
    p.train
        .val_augment
        .check_fits(h.height, h.width)
        .map_err(|e| {
            anyhow::anyhow!(
                "train.val_augment of preset {}: {e} of {}",
                p.name,
                dir.display()
            )
        })?;
    let (oh, ow) = p.train.augment.output_hw(h.height, h.width);
    let val_hw = p.train.val_augment.output_hw(h.height, h.width);
    if val_hw != (oh, ow) {
        bail!(
            "preset {}: train.augment makes {oh}x{ow} inputs but train.val_augment {}x{} from the {}x{} images of {}: validation must see the training's input size",
            p.name,
            val_hw.0,
            val_hw.1,
            h.height,
            h.width,
            dir.display()
        );
    }
    Ok((oh, ow))
}

/// The images an epoch is asked for by flag must exist in the packs — checked before
/// anything runs. (A preset's own counts are caps: the built-in presets' subsets of the
/// official datasets, taken whole from a smaller pack.)
fn check_counts(images: Images, dir: &Path, train: u64, val: u64) -> anyhow::Result<()> {
    let asked = [
        ("--train-images", "train", images.train, train),
        ("--val-images", "val", images.val, val),
    ];
    for (flag, split, n, have) in asked {
        if let Some(n) = n.filter(|&n| n as u64 > have) {
            bail!(
                "{flag} {n} is more than the {have} images of {}: use at most {have}, or leave it out for all of them",
                dir.join(format!("{split}.aipk")).display()
            );
        }
    }
    Ok(())
}

/// Every batch size TPE may draw must make at least one global batch of the group from
/// the epoch's training images — checked before anything runs.
fn check_batch_fits(
    config: &RecordedConfig,
    place: &Placement,
    samples: u64,
) -> anyhow::Result<()> {
    let p = &config.preset;
    let images = p
        .train
        .train_images
        .map_or(samples, |n| (n as u64).min(samples));
    let ranks = (0..place.layout.groups())
        .map(|g| place.layout.ranks_of(g))
        .max()
        .unwrap_or(1) as u64;
    let global = u64::from(p.batch_size.1) * ranks;
    if global > images {
        bail!(
            "batch sizes up to {} per rank × {ranks} ranks per group make a global batch of {global}, more than the {images} training images per epoch: lower the batch-size range (--batch-size) or use more training images (--train-images)",
            p.batch_size.1
        );
    }
    Ok(())
}

//! `aiperf run`'s start-up decisions about the arithmetic (docs/design.md §7), collective
//! and before anything is recorded: the precision (`auto`: the fastest every training rank
//! computes natively; a precision some rank would only emulate is refused, naming it), the
//! memory format (`auto`: the start-up probe's faster one), and each training rank's
//! ceiling measured in the resolved precision (sealed with the records).

use aiperf_records::ceiling::Ceiling;
use mpi::collective::{CommunicatorCollectives, SystemOperation};
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;

use super::agree;
use crate::cluster::bootstrap::{Common, Placement};
use crate::config::{RecordedConfig, TrainerKind};
use crate::train::{native, probe, MemoryFormat, Precision};

/// The precisions in the order `auto` prefers them, and their bits in the agreed mask.
const PREFERRED: [Precision; 3] = [Precision::Bf16, Precision::Fp16, Precision::Fp32];

/// Resolves the precision and memory format of `config` on every rank alike and measures
/// the training ranks' ceilings (returned on every rank). `first` builds the run's first
/// architecture (for the probe). The simulated and emulated trainers compute nothing:
/// fp32, NCHW, no ceilings.
pub(super) fn resolve(
    world: &SimpleCommunicator,
    place: &Placement,
    common: &Common,
    config: &mut RecordedConfig,
    first: impl FnOnce(&RecordedConfig) -> anyhow::Result<crate::arch::Graph>,
) -> anyhow::Result<Vec<Ceiling>> {
    if config.trainer != TrainerKind::Real {
        let t = &mut config.preset.train;
        if t.precision == Precision::Auto {
            t.precision = Precision::Fp32;
        }
        if t.memory_format == MemoryFormat::Auto {
            t.memory_format = MemoryFormat::Nchw;
        }
        return Ok(Vec::new());
    }
    let rank = world.rank() as usize;
    let training = place.local.is_some();
    let fp = &common.platform[rank];
    let asked = config.preset.train.precision;
    let resolved = precision(world, asked, training.then_some((place.device, fp)))?;
    config.preset.train.precision = resolved;
    if config.preset.train.memory_format == MemoryFormat::Auto {
        let mine = if training {
            first(config).and_then(|g| {
                let batch = config.preset.default_hparams().batch_size;
                Ok(probe::formats(&g, batch, resolved, place.device)?)
            })
        } else {
            Ok([0.0; 2])
        };
        crate::cluster::transport::quiet_barrier(world);
        let mine = agree(world, mine)?;
        let mut sum = [0f64; 2];
        world.all_reduce_into(&mine[..], &mut sum[..], SystemOperation::sum());
        let chosen = probe::faster(sum);
        config.preset.train.memory_format = chosen;
        if rank == 0 {
            log::info!(
                "memory format auto: {} (probe: {:.2} ms per step in nchw, {:.2} ms in channels-last, summed over the training ranks)",
                chosen.name(),
                1e3 * sum[0],
                1e3 * sum[1]
            );
        }
    }
    crate::cluster::transport::quiet_barrier(world);
    let mine = if training {
        crate::ceiling::measure(place.device, resolved, rank as u32, &common.hosts[rank])
            .map(|c| serde_json::to_string(&c).expect("plain data"))
            .map_err(anyhow::Error::msg)
    } else {
        Ok(String::new())
    };
    // Nobody spins while the others measure (the primary shares a node's cores).
    crate::cluster::transport::quiet_barrier(world);
    let mine = agree(world, mine)?;
    let all = crate::cluster::transport::all_gather_strings(world, &mine);
    Ok(all
        .iter()
        .filter(|j| !j.is_empty())
        .map(|j| serde_json::from_str(j).expect("every rank runs this aiperf"))
        .collect())
}

/// The run's precision: `auto` becomes the first of [`PREFERRED`] native on every training
/// rank (`me`: this rank's device and fingerprint, `None` on the primary); any other must
/// be native on every training rank.
fn precision(
    world: &SimpleCommunicator,
    asked: Precision,
    me: Option<(tch::Device, &aiperf_records::platform::Fingerprint)>,
) -> anyhow::Result<Precision> {
    if asked != Precision::Auto {
        let mine = match me {
            Some((device, fp)) => native::resolve(asked, device, fp).map_err(anyhow::Error::msg),
            None => Ok(asked),
        };
        return agree(world, mine);
    }
    let mask = |v: &[Precision]| {
        PREFERRED
            .iter()
            .enumerate()
            .filter(|(_, p)| v.contains(p))
            .fold(0u32, |m, (i, _)| m | 1 << i)
    };
    let mine = me.map_or(mask(&PREFERRED), |(device, fp)| {
        mask(&native::natives(device, fp))
    });
    let mut all = 0u32;
    world.all_reduce_into(&mine, &mut all, SystemOperation::bitwise_and());
    let chosen = PREFERRED
        .iter()
        .enumerate()
        .find(|(i, _)| all & (1 << i) != 0)
        .map_or(Precision::Fp32, |(_, p)| *p);
    if world.rank() == 0 {
        log::info!(
            "precision auto: {} (the fastest every training rank computes natively)",
            chosen.name()
        );
    }
    Ok(chosen)
}

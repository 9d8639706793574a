//! `aiperf run`'s start-up decisions about the arithmetic (docs/design.md §7), collective
//! and before anything is recorded: the precision and memory format (`auto` is measured: the
//! start-up probe times the first architecture's training step in every precision native on
//! every training rank and, where the format is `auto`, in both formats, and the run takes
//! the fastest; a named precision some rank would only emulate is refused, naming it), and
//! each training rank's ceiling in every precision it computes natively (sealed with the
//! records; the score's efficiency is against the fastest).

use aiperf_records::ceiling::Ceiling;
use mpi::collective::{CommunicatorCollectives, SystemOperation};
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;

use super::agree;
use crate::config::{RecordedConfig, TrainerKind};
use crate::train::probe::{self, ProbeTime};
use crate::train::{native, MemoryFormat, Precision};
use crate::world::bootstrap::{Common, Placement};

/// The precisions a run may train in, in the order ties are broken, and their bits in the
/// agreed mask.
const PRECISIONS: [Precision; 3] = [Precision::Bf16, Precision::Fp16, Precision::Fp32];

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
    let me = place
        .local
        .is_some()
        .then(|| (place.device, &common.platform[rank]));
    let precisions = precisions(world, config.preset.train.precision, me)?;
    let formats = match config.preset.train.memory_format {
        MemoryFormat::Auto => vec![MemoryFormat::Nchw, MemoryFormat::ChannelsLast],
        f => vec![f],
    };
    let candidates: Vec<(Precision, MemoryFormat)> = precisions
        .iter()
        .flat_map(|&p| formats.iter().map(move |&f| (p, f)))
        .collect();
    let (precision, format) = if candidates.len() == 1 {
        candidates[0]
    } else {
        let chosen = measure_candidates(world, place, config, first, &candidates)?;
        candidates[chosen]
    };
    config.preset.train.precision = precision;
    config.preset.train.memory_format = format;
    ceilings(
        world,
        me.map(|(d, fp)| (d, fp, common.hosts[rank].as_str())),
    )
}

/// The start-up probe over `candidates` (collective): each training rank times them all,
/// the times are summed over the ranks, recorded in `config` and logged; returns the
/// fastest's index.
fn measure_candidates(
    world: &SimpleCommunicator,
    place: &Placement,
    config: &mut RecordedConfig,
    first: impl FnOnce(&RecordedConfig) -> anyhow::Result<crate::arch::Graph>,
    candidates: &[(Precision, MemoryFormat)],
) -> anyhow::Result<usize> {
    let mine = if place.local.is_some() {
        first(config).and_then(|g| {
            let batch = config.preset.default_hparams().batch_size;
            Ok(probe::candidates(&g, batch, candidates, place.device)?)
        })
    } else {
        Ok(vec![0.0; candidates.len()])
    };
    crate::world::transport::quiet_barrier(world);
    let mine = agree(world, mine)?;
    let mut sum = vec![0f64; candidates.len()];
    world.all_reduce_into(&mine[..], &mut sum[..], SystemOperation::sum());
    let chosen = probe::fastest(&sum).ok_or_else(|| {
        anyhow::anyhow!("the start-up probe measured no usable step time ({sum:?} s): set --precision and --memory-format explicitly")
    })?;
    config.arithmetic_probe = candidates
        .iter()
        .zip(&sum)
        .map(|(&(precision, memory_format), &s)| ProbeTime {
            precision,
            memory_format,
            seconds_per_step: s,
        })
        .collect();
    if world.rank() == 0 {
        log::info!("{}", probe_line(&config.arithmetic_probe, chosen));
    }
    Ok(chosen)
}

/// The log line of the probe: the choice, then every candidate's time.
fn probe_line(times: &[ProbeTime], chosen: usize) -> String {
    let name = |t: &ProbeTime| format!("{} {}", t.precision.name(), t.memory_format.name());
    let all: Vec<String> = times
        .iter()
        .map(|t| format!("{} {:.2} ms", name(t), 1e3 * t.seconds_per_step))
        .collect();
    format!(
        "arithmetic auto: {} (the fastest training step measured at start-up, per step summed over the training ranks: {})",
        name(&times[chosen]),
        all.join(", ")
    )
}

/// Every training rank's ceilings, one per precision it computes natively (collective;
/// `me`: this rank's device, fingerprint and host, `None` on the primary).
fn ceilings(
    world: &SimpleCommunicator,
    me: Option<(tch::Device, &aiperf_records::platform::Fingerprint, &str)>,
) -> anyhow::Result<Vec<Ceiling>> {
    crate::world::transport::quiet_barrier(world);
    let rank = world.rank() as u32;
    let mine = match me {
        Some((device, fp, host)) => native::natives(device, fp)
            .into_iter()
            .map(|p| crate::ceiling::measure(device, p, rank, host))
            .collect::<Result<Vec<_>, String>>()
            .map(|v| serde_json::to_string(&v).expect("plain data"))
            .map_err(anyhow::Error::msg),
        None => Ok(String::new()),
    };
    // Nobody spins while the others measure (the primary shares a node's cores).
    crate::world::transport::quiet_barrier(world);
    let mine = agree(world, mine)?;
    let all = crate::world::transport::all_gather_strings(world, &mine);
    Ok(all
        .iter()
        .filter(|j| !j.is_empty())
        .flat_map(|j| serde_json::from_str::<Vec<Ceiling>>(j).expect("every rank runs this aiperf"))
        .collect())
}

/// The precisions the run may train in (collective): for `auto`, those every training rank
/// computes natively (`me`: this rank's device and fingerprint, `None` on the primary), in
/// [`PRECISIONS`]' order; any other must be native on every training rank.
fn precisions(
    world: &SimpleCommunicator,
    asked: Precision,
    me: Option<(tch::Device, &aiperf_records::platform::Fingerprint)>,
) -> anyhow::Result<Vec<Precision>> {
    if asked != Precision::Auto {
        let mine = match me {
            Some((device, fp)) => native::resolve(asked, device, fp).map_err(anyhow::Error::msg),
            None => Ok(asked),
        };
        return Ok(vec![agree(world, mine)?]);
    }
    let mask = |v: &[Precision]| {
        PRECISIONS
            .iter()
            .enumerate()
            .filter(|(_, p)| v.contains(p))
            .fold(0u32, |m, (i, _)| m | 1 << i)
    };
    let mine = me.map_or(mask(&PRECISIONS), |(device, fp)| {
        mask(&native::natives(device, fp))
    });
    let mut all = 0u32;
    world.all_reduce_into(&mine, &mut all, SystemOperation::bitwise_and());
    let common: Vec<Precision> = PRECISIONS
        .iter()
        .enumerate()
        .filter(|(i, _)| all & (1 << i) != 0)
        .map(|(_, p)| *p)
        .collect();
    // fp32 is native everywhere, so the list is never empty.
    Ok(if common.is_empty() {
        vec![Precision::Fp32]
    } else {
        common
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_line_names_the_choice_and_every_candidate() {
        let t = |precision, memory_format, s| ProbeTime {
            precision,
            memory_format,
            seconds_per_step: s,
        };
        let times = [
            t(Precision::Bf16, MemoryFormat::Nchw, 0.020),
            t(Precision::Fp32, MemoryFormat::Nchw, 0.0105),
        ];
        let line = probe_line(&times, 1);
        assert!(line.starts_with("arithmetic auto: fp32 nchw ("), "{line}");
        assert!(
            line.contains("bf16 nchw 20.00 ms, fp32 nchw 10.50 ms"),
            "{line}"
        );
    }
}

//! The MPI tools `doctor` (what each rank sees) and `dp-check` (bit-identical data-parallel
//! training); `comm-bench` has its own module.

use anyhow::bail;
use mpi::traits::Communicator;

use super::init_mpi;
use crate::platform::Platform;

/// `aiperf doctor`: what this build and machine provide, per rank.
pub fn doctor(json: bool, device: crate::platform::DeviceChoice) -> anyhow::Result<()> {
    // The doctor reports what it finds: collectives the other commands refuse are a warning.
    let (universe, _) = super::start_mpi()?;
    let world = universe.world();
    if let Err(e) = crate::exchange::check_collectives() {
        if world.rank() == 0 {
            log::warn!("{e}");
        }
    }
    let p = Platform::probe(crate::version::mpi_library(), world.size(), world.rank());
    // Every rank or none: `--device cuda` without CUDA is an error, not a fall-back.
    let arith = super::agree(
        &world,
        super::doctor_arithmetic::Arithmetic::probe(&world, device),
    )?;
    let mine = if json {
        serde_json::to_string(&arith.with(&p))?
    } else {
        format!(
            "{}\nrank {}/{}: {}",
            platform_line(&p),
            p.mpi_rank,
            p.mpi_world_size,
            arith.line()
        )
    };
    // Rank 0 prints every rank's report in rank order: lines written by several ranks at
    // once can be interleaved mid-line by the launcher's output forwarding.
    let all = crate::world::transport::all_gather_strings(&world, &mine);
    if world.rank() == 0 {
        for text in all {
            println!("{text}");
        }
    }
    // What `aiperf run` would refuse, the doctor reports as its error (after the report).
    super::agree(
        &world,
        crate::gpu::usable(device).map_err(anyhow::Error::msg),
    )
}

/// The doctor's first line for one rank: its host, aiperf, libtorch, accelerators, MPI and
/// HDF5.
fn platform_line(p: &Platform) -> String {
    let a = &p.accelerators;
    let gpus = if a.names.is_empty() {
        format!("none named ({})", a.nvml)
    } else {
        format!(
            "{} (driver {})",
            a.names.join(", "),
            a.driver.as_deref().unwrap_or("unknown")
        )
    };
    format!(
        "rank {}/{} on {} ({} cpus): aiperf {}, libtorch {} (cuda: {}, {} device(s), cudnn: {}, {} threads), accelerators: {gpus}, MPI {} (CUDA-aware: {}), HDF5 {}",
        p.mpi_rank,
        p.mpi_world_size,
        p.host,
        p.cpus,
        p.aiperf_version,
        p.libtorch_lib,
        p.cuda_available,
        p.cuda_devices,
        p.cudnn_available,
        p.torch_threads,
        p.mpi_library,
        p.mpi_cuda_aware,
        p.hdf5_version
    )
}

/// `aiperf dp-check`: every rank trains a tiny model with gradient exchange; all must
/// keep bit-identical parameters.
pub fn dp_check(a: &crate::cli::DpCheckArgs) -> anyhow::Result<()> {
    let (universe, level) = init_mpi()?;
    let world = universe.world();
    tch::set_num_threads(1);
    let mut cfg = a.exchange.config()?.within(level);
    // The node-local index, as `aiperf run` places ranks on devices.
    let local = world.split_shared(0).rank() as usize;
    let device = super::agree(&world, a.device.resolve(local).map_err(anyhow::Error::msg))?;
    // `auto`, as `aiperf run` resolves it: the world is the one group.
    let choice = crate::exchange::resolve_auto(&world, Some(&world), &mut cfg);
    let mut report = crate::train::dp_check(&world, a.steps, a.frozen_bn, &cfg, device)?;
    report.choice = choice;
    if world.rank() == 0 {
        println!("{}", serde_json::to_string(&report)?);
    }
    if !report.identical {
        bail!(
            "rank {}: parameters differ between ranks after gradient exchange",
            world.rank()
        );
    }
    Ok(())
}

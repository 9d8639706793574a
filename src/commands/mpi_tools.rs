//! The MPI tools: `doctor` (what each rank sees), `dp-check` (bit-identical data-parallel
//! training) and `comm-bench` (the interconnect profile).

use anyhow::{bail, Context};
use mpi::collective::CommunicatorCollectives;
use mpi::traits::Communicator;

use super::init_mpi;
use crate::cli::CommBenchArgs;
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
    let arith = super::agree(&world, super::arithmetic::Arithmetic::probe(&world, device))?;
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
    let all = crate::cluster::transport::all_gather_strings(&world, &mine);
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

/// `aiperf comm-bench`: all-reduce and exchange bandwidth over a sweep of sizes.
pub fn comm_bench(a: CommBenchArgs) -> anyhow::Result<()> {
    use crate::cluster::commbench;
    use mpi::topology::Color;
    if a.min_bytes == 0 || a.min_bytes > a.max_bytes || a.iters == 0 {
        bail!("--min-bytes must be in 1..=--max-bytes and --iters at least 1");
    }
    let (universe, _) = init_mpi()?;
    let world = universe.world();
    let sizes = commbench::sizes(a.min_bytes, a.max_bytes);
    let mut scopes = vec![(
        "world".to_string(),
        commbench::sweep(&world, &sizes, a.iters, a.warmup, &a.exchange_config()),
    )];
    if let Some(g) = a.group_size {
        if g == 0 || !(world.size() as usize).is_multiple_of(g) {
            // Every rank finds it alike: said once, by rank 0.
            let bad = anyhow::anyhow!("--group-size {g} must divide the {} ranks", world.size());
            return super::once(&world, Err(bad));
        }
        let color = Color::with_value(world.rank() / g as i32);
        let group = world
            .split_by_color(color)
            .context("splitting the world into groups")?;
        let rows = commbench::sweep(&group, &sizes, a.iters, a.warmup, &a.exchange_config());
        scopes.push((format!("groups of {g} ranks (group 0 shown)"), rows));
    }
    scopes.extend(node_scopes(&world, &sizes, &a)?);
    if world.rank() == 0 {
        for (scope, rows) in &scopes {
            if a.json {
                for r in rows {
                    let mut v = serde_json::to_value(r)?;
                    v["scope"] = serde_json::json!(scope);
                    println!("{v}");
                }
            } else {
                print!("{}", commbench::table(scope, rows));
            }
        }
    }
    Ok(())
}

/// When the world spans several nodes: the sweep within each node (shared memory; node 0
/// shown) and across nodes with one rank per node (the interconnect alone; the ranks of
/// local index 0 shown), so inter-node figures stand apart from intra-node ones.
fn node_scopes(
    world: &mpi::topology::SimpleCommunicator,
    sizes: &[u64],
    a: &CommBenchArgs,
) -> anyhow::Result<Vec<(String, Vec<crate::cluster::commbench::CommRow>)>> {
    use crate::cluster::commbench;
    use mpi::topology::Color;
    let node = world.split_shared(world.rank());
    let mut nodes = 0i32;
    world.all_reduce_into(
        &i32::from(node.rank() == 0),
        &mut nodes,
        mpi::collective::SystemOperation::sum(),
    );
    if nodes < 2 {
        return Ok(Vec::new());
    }
    let within = commbench::sweep(&node, sizes, a.iters, a.warmup, &a.exchange_config());
    let across = world
        .split_by_color(Color::with_value(node.rank()))
        .context("splitting the world into one rank per node")?;
    let over = commbench::sweep(&across, sizes, a.iters, a.warmup, &a.exchange_config());
    Ok(vec![
        (
            format!("within a node ({} ranks, node 0 shown)", node.size()),
            within,
        ),
        (format!("across {nodes} nodes (one rank per node)"), over),
    ])
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

//! Setting a run up across the world: which node each rank is on (shared-memory split), the
//! layout of roles, each training rank's device and threads, the common clock, every
//! rank's host and device name (variable-size gathers), and the run's start time t0.

use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;

use super::clock::{self, Clock};
use super::ranks::{layout, Layout};
use super::transport::all_gather_strings;
use crate::config::TrainerKind;

/// Where this rank runs and on what.
#[derive(Clone, Debug)]
pub struct Placement {
    /// Every rank's role.
    pub layout: Layout,
    /// This rank's index among its node's training ranks (`None` for the primary).
    pub local: Option<usize>,
    /// CPU threads of this rank's libtorch.
    pub threads: usize,
    /// This rank's device.
    pub device: tch::Device,
    /// Its name for the records.
    pub device_name: String,
}

/// Collective: finds every rank's node and places this rank. The same error on every rank
/// when the layout does not fit.
pub fn place(
    world: &SimpleCommunicator,
    config: &crate::config::RecordedConfig,
    choice: crate::platform::DeviceChoice,
) -> Result<Placement, String> {
    let (trainer, group_size) = (config.trainer, config.group_size);
    let (threads, sim_ops) = (config.threads, config.sim.ops);
    let rank = world.rank() as usize;
    // Node of every rank: the lowest world rank sharing its memory.
    let node = world.split_shared(0);
    let mut lowest = 0i32;
    node.all_reduce_into(&world.rank(), &mut lowest, SystemOperation::min());
    let mut nodes = vec![0i32; world.size() as usize];
    world.all_gather_into(&lowest, &mut nodes[..]);
    let nodes: Vec<u64> = nodes.iter().map(|&n| n as u64).collect();
    let layout = layout(&nodes, group_size)?;
    // This rank's place among the node's training ranks: its GPU, or its share of the cores.
    let trainers_on_node: Vec<usize> = (0..nodes.len())
        .filter(|&r| nodes[r] == nodes[rank] && layout.group_of[r].is_some())
        .collect();
    let local = trainers_on_node.iter().position(|&r| r == rank);
    if local.is_some() {
        check_threads(threads)?;
        crate::train::native::check_switches()?;
    }
    let threads = threads.unwrap_or_else(|| default_threads(trainers_on_node.len()));
    let device = match local {
        Some(i) if trainer == TrainerKind::Real => choice.resolve(i)?,
        _ => tch::Device::Cpu,
    };
    let device_name = match (trainer, local, device) {
        (_, None, _) => "primary".to_string(),
        (TrainerKind::Simulated, _, _) => format!("simulated {sim_ops:.3e} OPS"),
        (TrainerKind::Emulated, _, _) => format!("emulated {sim_ops:.3e} OPS"),
        (TrainerKind::Real, _, d @ tch::Device::Cuda(_)) => crate::host::device_label(d),
        (TrainerKind::Real, _, _) => format!("cpu ({threads} threads)"),
    };
    Ok(Placement {
        layout,
        local,
        threads,
        device,
        device_name,
    })
}

/// `--threads N` beyond the processors this rank may run on (its affinity, its cgroup)
/// would only make libtorch's threads wait on each other: refused, naming how many it has.
fn check_threads(threads: Option<usize>) -> Result<(), String> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match threads {
        Some(t) if t > cores => Err(format!(
            "--threads {t}: this rank may run on {cores} processor(s) of {} (its binding and cgroup): give at most {cores}, or leave --threads out for the default",
            host_name()
        )),
        _ => Ok(()),
    }
}

/// A training rank's default libtorch threads: the cores it is bound to where a launcher
/// bound it to fewer than the node has (srun --cpus-per-task with --cpu-bind=cores, mpirun
/// --map-by …:PE=N); else, inside a SLURM job, the CPUs per task it asked for
/// (`SLURM_CPUS_PER_TASK`, where the cluster binds nothing); else the node's cores shared by
/// its `trainers` training ranks.
pub fn default_threads(trainers: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let slurm = std::env::var("SLURM_CPUS_PER_TASK").ok();
    threads_for(
        crate::host::bound_cpus(),
        crate::host::online_cpus(),
        slurm.as_deref(),
        cores,
        trainers,
    )
}

/// [`default_threads`] from its inputs: the processors the rank is bound to and those
/// online, SLURM's CPUs per task, the cores usable and the node's training ranks.
fn threads_for(
    bound: Option<usize>,
    online: Option<usize>,
    slurm_cpus_per_task: Option<&str>,
    cores: usize,
    trainers: usize,
) -> usize {
    if let (Some(b), Some(o)) = (bound, online) {
        if b < o {
            return b.max(1);
        }
    }
    let per_task = slurm_cpus_per_task.and_then(|v| v.trim().parse::<usize>().ok());
    match per_task {
        Some(n) if n > 0 => n.min(cores),
        _ => (cores / trainers.max(1)).max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::threads_for;

    #[test]
    fn threads_follow_the_binding_then_slurm_then_the_share_of_the_node() {
        // Bound to 2 of 64 cores: 2, whatever SLURM or the share say.
        assert_eq!(threads_for(Some(2), Some(64), Some("8"), 2, 4), 2);
        // Not bound (the mask is the whole node): SLURM's CPUs per task.
        assert_eq!(threads_for(Some(64), Some(64), Some("8"), 64, 4), 8);
        // … never more than the cores usable.
        assert_eq!(threads_for(Some(4), Some(4), Some("8"), 4, 1), 4);
        // Neither: the node's cores shared by its training ranks, at least 1.
        assert_eq!(threads_for(Some(64), Some(64), None, 64, 4), 16);
        assert_eq!(threads_for(None, None, Some("x"), 2, 4), 1);
        assert_eq!(threads_for(None, None, Some("0"), 8, 2), 4);
    }
}

/// What every rank knows about the others after set-up.
#[derive(Clone, Debug)]
pub struct Common {
    /// This rank's view of rank 0's clock.
    pub clock: Clock,
    /// Every rank's (offset, uncertainty) to rank 0, seconds.
    pub offsets: Vec<(f64, f64)>,
    /// Every rank's host name.
    pub hosts: Vec<String>,
    /// Every rank's device name.
    pub devices: Vec<String>,
    /// Every rank's platform fingerprint (docs/design.md §6).
    pub platform: Vec<aiperf_records::platform::Fingerprint>,
    /// The run's start on the common clock (a resumed run's original start).
    pub t0_s: f64,
}

pub use aiperf_records::folder::host_name;

/// Collective: the common clock, hosts, devices, platform fingerprints and t0 (rank 0's now, or `resumed_t0`).
pub fn common(world: &SimpleCommunicator, place: &Placement, resumed_t0: Option<f64>) -> Common {
    let (clock, offsets) = clock::synchronise(world);
    let hosts = all_gather_strings(world, &host_name());
    let devices = all_gather_strings(world, &place.device_name);
    let mine = crate::fingerprint::this_rank(place.threads);
    let platform = all_gather_strings(world, &serde_json::to_string(&mine).expect("plain data"))
        .iter()
        .map(|j| {
            // Every rank runs this aiperf, so this cannot fail unless a rank runs another.
            serde_json::from_str(j).unwrap_or_else(|e| aiperf_records::platform::Fingerprint {
                cpu_model: format!(
                    "unreadable fingerprint ({e}): every rank must run the same aiperf"
                ),
                ..Default::default()
            })
        })
        .collect();
    let mut t0 = [resumed_t0.unwrap_or_else(|| clock.now())];
    world.process_at_rank(0).broadcast_into(&mut t0[..]);
    Common {
        clock,
        offsets,
        hosts,
        devices,
        platform,
        t0_s: t0[0],
    }
}

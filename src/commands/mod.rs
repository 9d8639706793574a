//! The subcommands of `aiperf`, each a function of its parsed arguments: `run` (the
//! benchmark), the MPI tools (`doctor`, `dp-check`, `comm-bench`) and the offline ones
//! (`ops`, `search-sim`, `data-check`). Also what every MPI command shares: one
//! initialisation, a panic hook that aborts the whole job, and errors printed once.

mod arithmetic;
mod audit;
mod comm_bench;
mod doctor_arithmetic;
mod mpi_tools;
mod offline;
mod run;

use mpi::environment::Universe;

pub use audit::{audit, AuditFailed, DataDiffers};
pub use comm_bench::comm_bench;
pub use mpi_tools::{doctor, dp_check};
pub use offline::{data_check, ops, search_sim};
pub use run::run;

/// A failure rank 0 reports (it fails too, with the message and the status): this rank
/// exits silently and leaves the job's status to rank 0.
#[derive(Debug, thiserror::Error)]
#[error("failed (another rank reported why)")]
pub struct Silent;

/// This process's rank as its launcher announces it (OpenMPI, PMIx, MPICH's PMI, SLURM),
/// read before MPI is initialised; `None` outside a launched job.
pub fn launcher_rank() -> Option<u32> {
    [
        "OMPI_COMM_WORLD_RANK",
        "PMIX_RANK",
        "PMI_RANK",
        "SLURM_PROCID",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

/// Collective: each rank's outcome of a set-up step. If any failed, rank 0 prints each
/// distinct error once, naming the ranks (and hosts) that found it, and every rank fails —
/// the others silently; no rank waits for a collective.
pub(crate) fn agree<T>(
    world: &mpi::topology::SimpleCommunicator,
    mine: anyhow::Result<T>,
) -> anyhow::Result<T> {
    use mpi::collective::{CommunicatorCollectives, SystemOperation};
    use mpi::traits::Communicator;
    let ok = i32::from(mine.is_ok());
    let mut all_ok = 0i32;
    world.all_reduce_into(&ok, &mut all_ok, SystemOperation::min());
    if all_ok == 1 {
        return mine;
    }
    let text = mine.as_ref().err().map(|e| format!("{e:#}"));
    let host = crate::world::bootstrap::host_name();
    // "host NUL error", or nothing when this rank succeeded.
    let entry = text.map_or(String::new(), |t| format!("{host}\0{t}"));
    let all = crate::world::transport::all_gather_strings(world, &entry);
    if world.rank() != 0 {
        return Err(Silent.into());
    }
    Err(anyhow::Error::msg(merge_errors(&all)))
}

/// Each distinct error once, in rank order of first appearance, prefixed by who found it:
/// `rank 2 on node-b: …`, `ranks 1, 2 on node-a: …`, `ranks 1 on node-a, 3 on node-b: …`.
fn merge_errors(entries: &[String]) -> String {
    let mut found: Vec<(&str, Vec<(usize, &str)>)> = Vec::new();
    for (rank, e) in entries.iter().enumerate() {
        let Some((host, msg)) = e.split_once('\0') else {
            continue;
        };
        match found.iter_mut().find(|(m, _)| *m == msg) {
            Some((_, who)) => who.push((rank, host)),
            None => found.push((msg, vec![(rank, host)])),
        }
    }
    found
        .iter()
        .map(|(msg, who)| {
            let one_host = who.iter().all(|(_, h)| *h == who[0].1);
            let names = if one_host {
                let ranks: Vec<String> = who.iter().map(|(r, _)| r.to_string()).collect();
                format!("{} on {}", ranks.join(", "), who[0].1)
            } else {
                let each: Vec<String> = who.iter().map(|(r, h)| format!("{r} on {h}")).collect();
                each.join(", ")
            };
            let noun = if who.len() == 1 { "rank" } else { "ranks" };
            format!("{noun} {names}: {msg}")
        })
        .collect::<Vec<_>>()
        .join("\naiperf: error: ")
}

/// Initialises MPI ([`start_mpi`]) and refuses collectives that would crash on aiperf's
/// in-place buffers ([`crate::exchange::check_collectives`]), agreed over every rank:
/// MCA parameter files are per node, so ranks may find it differently. Returns the thread
/// level MPI provides too (the exchange's overlap needs `MPI_THREAD_SERIALIZED`:
/// [`crate::exchange::ExchangeConfig::within`]).
pub fn init_mpi() -> anyhow::Result<(Universe, mpi::Threading)> {
    let (universe, level) = start_mpi()?;
    let checked = crate::exchange::check_collectives().map_err(anyhow::Error::msg);
    agree(&universe.world(), checked)?;
    Ok((universe, level))
}

/// Initialises MPI once and installs the panic hook: a panic on any thread of any rank
/// prints its message and the rank, then calls `MPI_Abort`, so the job ends at once
/// instead of leaving the other ranks waiting in a collective. Returns the thread level
/// MPI provides.
pub fn start_mpi() -> anyhow::Result<(Universe, mpi::Threading)> {
    // Serialized: the exchange overlapped with backward calls MPI from its communication
    // thread while the step's thread makes no MPI call; a library that offers less turns the
    // overlap off (each command settles it with the level provided).
    let Some((universe, level)) = mpi::initialize_with_threading(mpi::Threading::Serialized) else {
        anyhow::bail!("MPI was already initialised");
    };
    use mpi::traits::Communicator;
    abort_on_panic(universe.world().rank(), None);
    Ok((universe, level))
}

/// Installs the panic hook: a panic on any thread prints its message (std's own hook) and
/// the rank, with how to continue from `records` where the run has them, then calls
/// `MPI_Abort`. Installed again once the run knows its records folder.
fn abort_on_panic(rank: i32, records: Option<&std::path::Path>) {
    let resume = records.map_or(String::new(), |dir| {
        let dir = dir.display();
        format!("; the records in {dir} stay readable: continue with `aiperf run --resume {dir}`")
    });
    // The hook in place is this function's, or std's before the first call: take it, and
    // take again to get std's default (which `take_hook` leaves in place).
    drop(std::panic::take_hook());
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        eprintln!(
            "aiperf: error: rank {rank} panicked: aborting the whole job (MPI_Abort){resume}"
        );
        // MPI is initialised: the hook is installed after it.
        crate::world::transport::abort_job(70)
    }));
}

/// The panic hook with the run's records folder in its message.
fn set_results_hint(rank: i32, dir: &std::path::Path) {
    abort_on_panic(rank, Some(dir));
}

/// A result every rank computed alike: rank 0 prints the error, the others exit silently.
pub(crate) fn once<T>(
    world: &mpi::topology::SimpleCommunicator,
    r: anyhow::Result<T>,
) -> anyhow::Result<T> {
    use mpi::traits::Communicator;
    match r {
        Ok(v) => Ok(v),
        Err(e) if world.rank() == 0 => Err(e),
        Err(_) => Err(Silent.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::merge_errors;

    #[test]
    fn one_line_per_distinct_error_naming_its_ranks_and_hosts() {
        let e = |h: &str, m: &str| format!("{h}\0{m}");
        let all = [
            String::new(),
            e("a", "no data"),
            e("a", "no data"),
            e("b", "no GPU"),
            e("b", "no data"),
        ];
        assert_eq!(
            merge_errors(&all),
            "ranks 1 on a, 2 on a, 4 on b: no data\naiperf: error: rank 3 on b: no GPU"
        );
        assert_eq!(merge_errors(&all[..3]), "ranks 1, 2 on a: no data");
    }
}

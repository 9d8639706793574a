//! The subcommands of `aiperf`, each a function of its parsed arguments: `run` (the
//! benchmark), the MPI tools (`doctor`, `dp-check`, `comm-bench`) and the offline ones
//! (`ops`, `search-sim`, `data-check`). Also what every MPI command shares: one
//! initialisation, a panic hook that aborts the whole job, and errors printed once.

mod audit;
mod mpi_tools;
mod offline;
mod run;

use std::sync::OnceLock;

use mpi::environment::Universe;

pub use audit::{audit, AuditArgs, AuditFailed};
pub use mpi_tools::{comm_bench, doctor, dp_check};
pub use offline::{data_check, ops, search_sim};
pub use run::run;

/// An error another rank has already printed: the process exits non-zero, silently.
#[derive(Debug, thiserror::Error)]
#[error("failed (another rank reported why)")]
pub struct Silent;

/// Collective: each rank's outcome of a set-up step; if any failed, each failing rank
/// names itself (and its host) in its error and the others fail silently (no rank waits for
/// a collective).
pub(crate) fn agree<T>(
    world: &mpi::topology::SimpleCommunicator,
    mine: anyhow::Result<T>,
) -> anyhow::Result<T> {
    use mpi::collective::{CommunicatorCollectives, SystemOperation};
    use mpi::traits::Communicator;
    let ok = i32::from(mine.is_ok());
    let mut all = 0i32;
    world.all_reduce_into(&ok, &mut all, SystemOperation::min());
    match mine {
        Err(e) => Err(e.context(format!(
            "rank {} on {}",
            world.rank(),
            crate::cluster::bootstrap::host_name()
        ))),
        Ok(_) if all == 0 => Err(Silent.into()),
        Ok(v) => Ok(v),
    }
}

/// The records folder of the run in progress, for the panic hook's message.
static RESULTS: OnceLock<String> = OnceLock::new();

/// Initialises MPI once and installs the panic hook: a panic on any thread of any rank
/// prints its message and the rank, then calls `MPI_Abort`, so the job ends at once
/// instead of leaving the other ranks waiting in a collective.
pub fn init_mpi() -> anyhow::Result<Universe> {
    let Some(universe) = mpi::initialize() else {
        anyhow::bail!("MPI was already initialised");
    };
    use mpi::traits::Communicator;
    let rank = universe.world().rank();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        let resume = RESULTS.get().map_or(String::new(), |dir| {
            format!(
                "; the records in {dir} stay readable: continue with `aiperf run --resume {dir}`"
            )
        });
        eprintln!(
            "aiperf: error: rank {rank} panicked: aborting the whole job (MPI_Abort){resume}"
        );
        // SAFETY: MPI is initialised (above) and MPI_Abort may be called from any thread
        // under MPI_THREAD_MULTIPLE; it does not return.
        unsafe {
            mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, 70);
        }
    }));
    Ok(universe)
}

/// Remembers the records folder for the panic hook's message.
fn set_results_hint(dir: &std::path::Path) {
    let _ = RESULTS.set(dir.display().to_string());
}

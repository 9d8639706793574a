//! The versions this binary was built with and runs with: aiperf's and its commit, the
//! libtorch headers', the MPI library's (what `aiperf --version` prints, with the platform
//! fingerprint: [`crate::cli::long_version`]).

pub use aiperf_records::version::{hdf5, COMMIT, VERSION};

/// The libtorch version of the headers this binary was compiled against.
pub const LIBTORCH_VERSION: &str = env!("AIPERF_LIBTORCH_VERSION");

/// The MPI library's own version line (`MPI_Get_library_version`, which MPI allows before
/// `MPI_Init`): for OpenMPI `Open MPI v4.1.4`, the part before the first comma.
pub fn mpi_library() -> String {
    let full = mpi::environment::library_version().unwrap_or_else(|_| "unknown".into());
    full.split([',', '\n'])
        .next()
        .unwrap_or("")
        .trim()
        .to_string()
}

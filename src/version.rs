//! What `aiperf --version` prints: the version, the commit it was built from, and the
//! libtorch, MPI and HDF5 libraries this binary runs with, and the platform fingerprint (what
//! a submitted result names).

use aiperf_records::version::{hdf5, COMMIT, VERSION};

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

/// `aiperf --version`, line by line: version, commit, libtorch (version, the folder loaded,
/// CUDA), MPI, HDF5, and this machine's platform fingerprint as a run records it
/// (docs/design.md §6; with libtorch's default thread count), as one line of JSON.
pub fn long() -> String {
    let libtorch_dir =
        crate::platform::loaded_libtorch().unwrap_or_else(|| crate::platform::LIBTORCH_LIB.into());
    let cuda = if tch::Cuda::is_available() {
        format!("CUDA, {} device(s)", tch::Cuda::device_count())
    } else {
        "no CUDA device".into()
    };
    let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1);
    let fingerprint = crate::fingerprint::this_rank(threads);
    format!(
        "{VERSION}\ncommit {COMMIT}\nlibtorch {LIBTORCH_VERSION} ({libtorch_dir}; {cuda})\nMPI {}\nHDF5 {}\nplatform {}\nfingerprint {}",
        mpi_library(),
        hdf5(),
        fingerprint.summary(),
        serde_json::to_string(&fingerprint).expect("plain data")
    )
}

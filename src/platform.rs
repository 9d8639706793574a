//! What this build and machine provide — libtorch and its devices, the MPI library and
//! world, HDF5 — reported by `aiperf doctor` so a user can check a cluster build at a glance.

use serde::Serialize;

/// What [`keep_freed_memory`] sets both glibc thresholds to: 1 GiB.
pub const MALLOC_KEEP_BYTES: i32 = 1 << 30;

/// Keeps large freed blocks in the process for reuse instead of handing them back to the
/// kernel. By default glibc maps every allocation over 32 MiB afresh — each page faulted in
/// and zeroed by the kernel on first touch — and unmaps it when freed: for the loader's
/// batches (64 × 3 × 224 × 224 floats are 38 MiB) and libtorch's large activations that
/// is paid on every step, about half the loader's time at ImageNet size (README, `make
/// bench-data`). Sets `M_MMAP_THRESHOLD` and `M_TRIM_THRESHOLD` to [`MALLOC_KEEP_BYTES`]
/// unless the user chose them (`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`); the
/// process keeps up to that much freed memory mapped. Returns whether both were set.
pub fn keep_freed_memory() -> bool {
    #[cfg(target_env = "gnu")]
    {
        let chosen = |name: &str| std::env::var_os(name).is_some();
        if chosen("MALLOC_MMAP_THRESHOLD_") || chosen("MALLOC_TRIM_THRESHOLD_") {
            return false;
        }
        // SAFETY: mallopt only adjusts the allocator's thresholds; called before other
        // threads allocate (at the start of main).
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_KEEP_BYTES) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, MALLOC_KEEP_BYTES) == 1
        }
    }
    #[cfg(not(target_env = "gnu"))]
    false
}

/// The directory of the libtorch this binary was linked against (its rpath).
pub const LIBTORCH_LIB: &str = env!("AIPERF_LIBTORCH_LIB");

/// A snapshot of the platform, as seen from one rank.
#[derive(Clone, Debug, Serialize)]
pub struct Platform {
    /// aiperf's version.
    pub aiperf_version: String,
    /// The libtorch library directory linked in.
    pub libtorch_lib: String,
    /// Whether libtorch sees a CUDA device.
    pub cuda_available: bool,
    /// Number of CUDA devices visible to this process.
    pub cuda_devices: i64,
    /// libtorch's intra-op thread count.
    pub torch_threads: i32,
    /// The MPI library's own version string.
    pub mpi_library: String,
    /// MPI world size.
    pub mpi_world_size: i32,
    /// This process's MPI rank.
    pub mpi_rank: i32,
    /// Whether the MPI library takes CUDA device memory (`yes`, `no`, `unknown`; asked at
    /// run time, `AIPERF_MPI_CUDA_AWARE` overrides) — `auto` exchange staging follows it.
    pub mpi_cuda_aware: String,
    /// Whether the MPI headers compiled against describe a CUDA-aware build.
    pub mpi_cuda_aware_compiled: bool,
    /// The HDF5 library version.
    pub hdf5_version: String,
    /// Host name.
    pub host: String,
    /// Logical CPUs available to this process.
    pub cpus: usize,
}

impl Platform {
    /// Probes libtorch, HDF5 and the host; MPI facts come from the caller's world (call
    /// after `MPI_Init`).
    pub fn probe(mpi_library: String, mpi_world_size: i32, mpi_rank: i32) -> Self {
        let (a, b, c) = hdf5::library_version();
        Platform {
            aiperf_version: env!("CARGO_PKG_VERSION").into(),
            libtorch_lib: LIBTORCH_LIB.into(),
            cuda_available: tch::Cuda::is_available(),
            cuda_devices: tch::Cuda::device_count(),
            torch_threads: tch::get_num_threads(),
            mpi_library,
            mpi_world_size,
            mpi_rank,
            mpi_cuda_aware: format!("{:?}", crate::train::inplace::cuda_aware()).to_lowercase(),
            mpi_cuda_aware_compiled: crate::train::inplace::cuda_aware_compiled(),
            hdf5_version: format!("{a}.{b}.{c}"),
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

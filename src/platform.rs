//! What this build and machine provide — libtorch and its devices, the MPI library and
//! world, HDF5 — reported by `aiperf doctor` so a user can check a cluster build at a glance.

use serde::Serialize;

/// What [`keep_freed_memory`] sets both glibc thresholds to: 1 GiB.
pub const MALLOC_KEEP_BYTES: i32 = 1 << 30;

/// Keeps large freed blocks in the process for reuse instead of handing them back to the
/// kernel. By default glibc maps every allocation over 32 MiB afresh — each page faulted in
/// and zeroed by the kernel on first touch — and unmaps it when freed: for the loader's
/// batches (64 × 3 × 224 × 224 floats are 38 MiB) and libtorch's large activations that
/// is paid on every step, about half the loader's time at ImageNet size (docs/performance.md,
/// `make bench-data`). Sets `M_MMAP_THRESHOLD` and `M_TRIM_THRESHOLD` to [`MALLOC_KEEP_BYTES`]
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

/// The device a tool trains on (`--device` of `dp-check` and the trainer benchmark).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceChoice {
    /// CUDA when libtorch sees a device, else the CPU.
    Auto,
    /// The CPU.
    Cpu,
    /// CUDA; an error when libtorch sees no device.
    Cuda,
}

impl DeviceChoice {
    /// The device of the process with node-local index `local`: CUDA device `local` modulo
    /// the node's count (so ranks beyond it share devices, as `aiperf run` places them), or
    /// the CPU.
    pub fn resolve(self, local: usize) -> Result<tch::Device, String> {
        let count = tch::Cuda::device_count().max(0) as usize;
        let cuda = tch::Cuda::is_available() && count > 0;
        match self {
            DeviceChoice::Cpu => Ok(tch::Device::Cpu),
            DeviceChoice::Auto if !cuda => Ok(tch::Device::Cpu),
            DeviceChoice::Cuda if !cuda => Err(format!(
                "--device cuda: libtorch sees no CUDA device (this build links {LIBTORCH_LIB}; a CPU-only libtorch, no driver or CUDA_VISIBLE_DEVICES empty?); use --device cpu or auto"
            )),
            DeviceChoice::Auto | DeviceChoice::Cuda => Ok(tch::Device::Cuda(local % count)),
        }
    }
}

/// The directory of the libtorch this binary was linked against (its rpath).
pub const LIBTORCH_LIB: &str = env!("AIPERF_LIBTORCH_LIB");

/// A snapshot of the platform, as seen from one rank.
#[derive(Clone, Debug, Serialize)]
pub struct Platform {
    /// aiperf's version.
    pub aiperf_version: String,
    /// The directory of the libtorch loaded now (from /proc/self/maps; a relocated build, such
    /// as scripts/gpu-bundle's, loads the machine's own).
    pub libtorch_lib: String,
    /// The libtorch directory the build linked against.
    pub libtorch_built: String,
    /// Whether libtorch sees a CUDA device.
    pub cuda_available: bool,
    /// Number of CUDA devices visible to this process.
    pub cuda_devices: i64,
    /// Whether libtorch finds cuDNN.
    pub cudnn_available: bool,
    /// The node's accelerators as NVML sees them (names, driver), which is also what the
    /// monitor records utilisation and memory from.
    pub accelerators: crate::monitor::Accelerators,
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

/// Advises the kernel to back the 2 MiB-aligned interior of `len` bytes at `data` with
/// transparent huge pages (`madvise(MADV_HUGEPAGE)`): fewer TLB misses when MPI and the
/// optimizer stream through large buffers. A hint: where the kernel does not allow it
/// (THP off, not anonymous memory), nothing changes. Returns whether the kernel took it.
pub fn advise_huge_pages(data: *mut u8, len: usize) -> bool {
    const HUGE: usize = 2 << 20;
    let start = (data as usize).next_multiple_of(HUGE);
    let end = (data as usize + len) / HUGE * HUGE;
    if end <= start {
        return false;
    }
    // SAFETY: the range lies inside the caller's allocation; MADV_HUGEPAGE changes how it
    // is backed, never its contents.
    unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) == 0 }
}

/// Whether this process may create entries in the folder `dir` (`access(W_OK | X_OK)`).
pub fn writable(dir: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

/// The path of the first file mapped into this process (/proc/self/maps) whose path
/// `matches`: how a library loaded from wherever the dynamic loader found it is located.
pub fn mapped_file(matches: impl Fn(&str) -> bool) -> Option<std::path::PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| matches(p))
        .map(std::path::PathBuf::from)
}

/// The folder of the `libtorch_cpu.so` mapped into this process, resolved through links.
pub fn loaded_libtorch() -> Option<String> {
    let path = mapped_file(|p| p.ends_with("/libtorch_cpu.so"))?;
    let dir = path.parent()?;
    Some(
        std::fs::canonicalize(dir)
            .unwrap_or_else(|_| dir.to_path_buf())
            .display()
            .to_string(),
    )
}

/// A device as the reports write it: `cpu` or `cuda:N`.
pub fn device_label(d: tch::Device) -> String {
    match d {
        tch::Device::Cuda(i) => format!("cuda:{i}"),
        _ => "cpu".into(),
    }
}

impl Platform {
    /// Probes libtorch, HDF5 and the host; MPI facts come from the caller's world (call
    /// after `MPI_Init`).
    pub fn probe(mpi_library: String, mpi_world_size: i32, mpi_rank: i32) -> Self {
        let (a, b, c) = hdf5::library_version();
        Platform {
            aiperf_version: aiperf_records::version::short(),
            libtorch_lib: loaded_libtorch().unwrap_or_else(|| LIBTORCH_LIB.into()),
            libtorch_built: LIBTORCH_LIB.into(),
            cuda_available: tch::Cuda::is_available(),
            cuda_devices: tch::Cuda::device_count(),
            cudnn_available: tch::Cuda::cudnn_is_available(),
            accelerators: crate::monitor::accelerators(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loaded_libtorch_is_the_one_linked_here() {
        let loaded = loaded_libtorch().expect("libtorch_cpu.so is mapped");
        let linked = std::fs::canonicalize(LIBTORCH_LIB).unwrap();
        assert_eq!(loaded, linked.display().to_string());
    }

    #[test]
    fn device_choices_resolve_or_say_why_not() {
        // The tests' build links the CPU libtorch.
        assert_eq!(DeviceChoice::Cpu.resolve(3), Ok(tch::Device::Cpu));
        assert_eq!(DeviceChoice::Auto.resolve(0), Ok(tch::Device::Cpu));
        let err = DeviceChoice::Cuda.resolve(0).unwrap_err();
        assert!(
            err.contains("no CUDA device") && err.contains(LIBTORCH_LIB),
            "{err}"
        );
        assert_eq!(device_label(tch::Device::Cuda(2)), "cuda:2");
        assert_eq!(device_label(tch::Device::Cpu), "cpu");
    }
}

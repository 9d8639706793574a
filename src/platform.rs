//! What this build and machine provide — libtorch and its devices, the MPI library and
//! world, HDF5 — reported by `aiperf doctor` so a user can check a cluster build at a glance.

use serde::Serialize;

/// The device a tool trains on (`--device` of `dp-check` and the trainer benchmark).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceChoice {
    /// CUDA when libtorch sees a device, else the CPU.
    #[default]
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
    /// as scripts/tools/gpu-bundle's, loads the machine's own).
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

impl Platform {
    /// Probes libtorch, HDF5 and the host; MPI facts come from the caller's world (call
    /// after `MPI_Init`).
    pub fn probe(mpi_library: String, mpi_world_size: i32, mpi_rank: i32) -> Self {
        let (a, b, c) = hdf5::library_version();
        Platform {
            aiperf_version: aiperf_records::version::short(),
            libtorch_lib: crate::host::loaded_libtorch().unwrap_or_else(|| LIBTORCH_LIB.into()),
            libtorch_built: LIBTORCH_LIB.into(),
            cuda_available: tch::Cuda::is_available(),
            cuda_devices: tch::Cuda::device_count(),
            cudnn_available: tch::Cuda::cudnn_is_available(),
            accelerators: crate::monitor::accelerators(),
            torch_threads: tch::get_num_threads(),
            mpi_library,
            mpi_world_size,
            mpi_rank,
            mpi_cuda_aware: format!("{:?}", crate::exchange::cuda_aware()).to_lowercase(),
            mpi_cuda_aware_compiled: crate::exchange::cuda_aware_compiled(),
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
    use crate::host::{device_label, loaded_libtorch};

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

//! A node's NVIDIA GPUs seen without libtorch (docs/design.md §7): whether any are visible
//! (NVML's device count, or the driver's `/dev/nvidia0`), each CUDA device's compute
//! capability (the CUDA driver API, loaded at run time, in the ordinals libtorch uses; which
//! precisions it makes native, the trainer's native-precision table decides), and the
//! refusal of a node whose GPUs a CPU-only libtorch would leave idle.

/// Forces whether this node counts as having visible GPUs (`0` or `1`), for tests of the
/// refusal on machines without a GPU (and the opposite on a node whose GPUs are reserved
/// for something else).
pub const FORCE_GPU_NODE: &str = "AIPERF_GPU_NODE";

/// A CUDA device's compute capability, `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Capability {
    /// The architecture generation (7 Volta/Turing, 8 Ampere/Ada, 9 Hopper, 10+ Blackwell).
    pub major: u32,
    /// The revision within it.
    pub minor: u32,
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The CUDA driver library's file name (the driver installs it; no toolkit is needed).
const LIBCUDA: &str = "libcuda.so.1";
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR` and `_MINOR` (cuda.h's `CUdevice_attribute`).
const ATTR_MAJOR: i32 = 75;
const ATTR_MINOR: i32 = 76;

/// The compute capability of CUDA device `ordinal` (the ordinal libtorch's `cuda:N` uses:
/// the driver API numbers devices as the runtime does, after `CUDA_VISIBLE_DEVICES`).
pub fn capability(ordinal: usize) -> Result<Capability, String> {
    let ordinal =
        i32::try_from(ordinal).map_err(|_| format!("CUDA device {ordinal}: no such ordinal"))?;
    // SAFETY: loading the driver runs its initialisers, which have no preconditions; each
    // symbol is called with its signature in cuda.h (CUresult = int, CUdevice = int).
    unsafe {
        let lib = libloading::Library::new(LIBCUDA)
            .map_err(|e| format!("the CUDA driver ({LIBCUDA}) is not loadable: {e}"))?;
        let init: libloading::Symbol<unsafe extern "C" fn(u32) -> i32> =
            lib.get(b"cuInit\0").map_err(|e| e.to_string())?;
        let get: libloading::Symbol<unsafe extern "C" fn(*mut i32, i32) -> i32> =
            lib.get(b"cuDeviceGet\0").map_err(|e| e.to_string())?;
        let attr: libloading::Symbol<unsafe extern "C" fn(*mut i32, i32, i32) -> i32> = lib
            .get(b"cuDeviceGetAttribute\0")
            .map_err(|e| e.to_string())?;
        let rc = init(0);
        if rc != 0 {
            return Err(format!("cuInit failed (CUresult {rc})"));
        }
        let mut dev = 0i32;
        let rc = get(&mut dev, ordinal);
        if rc != 0 {
            return Err(format!("cuDeviceGet({ordinal}) failed (CUresult {rc})"));
        }
        let (mut major, mut minor) = (0i32, 0i32);
        if attr(&mut major, ATTR_MAJOR, dev) != 0 || attr(&mut minor, ATTR_MINOR, dev) != 0 {
            return Err(format!(
                "CUDA device {ordinal}: its compute capability could not be read"
            ));
        }
        Ok(Capability {
            major: u32::try_from(major).unwrap_or(0),
            minor: u32::try_from(minor).unwrap_or(0),
        })
    }
}

/// Whether GPUs are visible on this node, and how that was seen (`None`: none).
pub fn visible() -> Option<String> {
    match std::env::var(FORCE_GPU_NODE).as_deref() {
        Ok("1") => return Some(format!("forced by {FORCE_GPU_NODE}=1")),
        Ok("0") => return None,
        _ => {}
    }
    let nvml = crate::monitor::accelerators();
    if !nvml.names.is_empty() {
        return Some(format!(
            "NVML lists {} GPU(s): {}",
            nvml.names.len(),
            nvml.names.join(", ")
        ));
    }
    std::path::Path::new("/dev/nvidia0")
        .exists()
        .then(|| "/dev/nvidia0 exists (the NVIDIA driver's device node)".to_string())
}

/// Whether this libtorch can use CUDA at all: its CUDA library is loaded (a CPU-only
/// libtorch has none; a CUDA one maps `libtorch_cuda.so` at start-up).
pub fn libtorch_has_cuda() -> bool {
    tch::Cuda::is_available()
        || crate::host::mapped_file(|p| p.contains("/libtorch_cuda")).is_some()
}

/// The command that gets a CUDA build of aiperf on a GPU node.
pub const CUDA_BUILD: &str = "make build AIPERF_TORCH=cuda";

/// [`refusal`] for this node and libtorch: `Err` with the message when a run on `device`
/// would train a GPU node's work on its processors without being asked to.
pub fn usable(device: crate::platform::DeviceChoice) -> Result<(), String> {
    let cpu_asked = device == crate::platform::DeviceChoice::Cpu;
    match refusal(visible().as_deref(), libtorch_has_cuda(), cpu_asked) {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// The refusal of a run (or doctor) on a node whose GPUs this libtorch cannot use:
/// `gpus` is what [`visible`] saw, `cuda` whether the libtorch has CUDA, `cpu_asked` whether
/// the user asked for CPU training (`--device cpu`). `None`: go ahead.
pub fn refusal(gpus: Option<&str>, cuda: bool, cpu_asked: bool) -> Option<String> {
    let seen = gpus?;
    if cuda || cpu_asked {
        return None;
    }
    Some(format!(
        "this node has GPUs ({seen}) but aiperf was built against a libtorch without CUDA ({}): it would train on the host's processors. Rebuild with the CUDA libtorch ('{CUDA_BUILD}', or set LIBTORCH to a CUDA libtorch 2.13.0 and 'make build'), or pass --device cpu to train on the processors on purpose",
        crate::platform::LIBTORCH_LIB
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_node_with_a_cpu_libtorch_is_refused_unless_cpu_is_asked() {
        let seen = Some("NVML lists 4 GPU(s)");
        let e = refusal(seen, false, false).unwrap();
        assert!(
            e.contains(CUDA_BUILD) && e.contains("--device cpu") && e.contains("4 GPU"),
            "{e}"
        );
        assert_eq!(refusal(seen, false, true), None);
        assert_eq!(refusal(seen, true, false), None);
        assert_eq!(refusal(None, false, false), None);
    }

    #[test]
    fn without_a_driver_the_capability_is_an_error_that_says_so() {
        if std::path::Path::new("/dev/nvidia0").exists() {
            return; // a GPU node answers with a capability (scripts/tools/gpu-check runs there)
        }
        let e = capability(0).unwrap_err();
        assert!(e.contains(LIBCUDA) || e.contains("cuInit"), "{e}");
    }
}

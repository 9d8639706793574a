//! This rank's platform fingerprint (docs/design.md §6): the processor and the instruction
//! sets its kernels use, libtorch's own account of its kernels and build, accelerators,
//! threads, the kernel-pinning environment and the MPI library — gathered here, recorded by
//! the run, compared by the audit and printed by `aiperf --version`.

use std::collections::BTreeMap;
use std::ffi::c_char;

use aiperf_records::platform::{Fingerprint, KERNEL_PINS};

extern "C" {
    /// `src/torch_info.cpp`.
    fn aiperf_torch_info(what: i32, buf: *mut c_char, len: usize) -> std::ffi::c_long;
}

/// The x86 and Arm extensions the CPU kernels of libtorch, oneDNN and MKL dispatch on, in
/// the order a fingerprint lists them (as `/proc/cpuinfo` names them).
const FEATURES: &[&str] = &[
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512dq",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
    "sve2",
    "bf16",
];

/// libtorch's text `what` (see `src/torch_info.cpp`), or `unknown`.
fn torch_info(what: i32) -> String {
    let mut buf = vec![0u8; 1 << 16];
    // SAFETY: the shim writes at most `buf.len()` bytes, NUL-terminated, into `buf`.
    let n = unsafe { aiperf_torch_info(what, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).trim().to_string()
}

/// The value of `key` (the first `key : value` line) in `/proc/cpuinfo`'s text.
fn cpuinfo_field<'a>(text: &'a str, keys: &[&str]) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        keys.contains(&k.trim()).then(|| v.trim())
    })
}

/// Vendor, model and the [`FEATURES`] present, from `/proc/cpuinfo`'s text.
fn cpu(text: &str) -> (String, String, Vec<String>) {
    let vendor = cpuinfo_field(text, &["vendor_id", "CPU implementer"]).unwrap_or("unknown");
    let model = cpuinfo_field(text, &["model name", "Model", "CPU part"]).unwrap_or("unknown");
    let flags: Vec<&str> = cpuinfo_field(text, &["flags", "Features"])
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let features = FEATURES
        .iter()
        .filter(|f| flags.contains(f))
        .map(|f| f.to_string())
        .collect();
    (vendor.into(), model.into(), features)
}

/// oneDNN's highest instruction set: its pin (`ONEDNN_MAX_CPU_ISA`, or the older
/// `DNNL_MAX_CPU_ISA`) when set, else the best level these features give (oneDNN's names).
fn onednn_isa(features: &[String], pins: &BTreeMap<String, String>) -> String {
    if let Some(p) = pins
        .get("ONEDNN_MAX_CPU_ISA")
        .or(pins.get("DNNL_MAX_CPU_ISA"))
    {
        return p.to_lowercase();
    }
    let has = |f: &str| features.iter().any(|x| x == f);
    let level = if has("amx_bf16") && has("amx_tile") {
        "avx512_core_amx"
    } else if has("avx512_bf16") {
        "avx512_core_bf16"
    } else if has("avx512_vnni") {
        "avx512_core_vnni"
    } else if has("avx512f") && has("avx512bw") && has("avx512vl") {
        "avx512_core"
    } else if has("avx2") {
        "avx2"
    } else if has("asimd") {
        "asimd"
    } else {
        "default"
    };
    level.into()
}

/// libtorch's version and build: `cpu`, or the CUDA runtime and cuDNN of its build
/// configuration (`at::show_config`).
fn libtorch_build() -> String {
    let config = torch_info(3);
    let part = |key: &str| {
        config.lines().find_map(|l| {
            let l = l.trim().trim_start_matches("- ").trim();
            l.strip_prefix(key).map(|v| v.trim().to_string())
        })
    };
    let mut s = crate::version::LIBTORCH_VERSION.to_string();
    match part("CUDA Runtime") {
        Some(cuda) => {
            s += &format!(" cuda {cuda}");
            if let Some(cudnn) = part("CuDNN") {
                s += &format!(" cudnn {cudnn}");
            }
        }
        None => s += " cpu",
    }
    s
}

/// The kernel pins set in this process's environment.
pub fn pins() -> BTreeMap<String, String> {
    KERNEL_PINS
        .iter()
        .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
        .collect()
}

/// This process's fingerprint with `threads` intra-op threads (the ones it trains with).
pub fn this_rank(threads: usize) -> Fingerprint {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let (cpu_vendor, cpu_model, cpu_features) = cpu(&text);
    let pins = pins();
    let accel = crate::monitor::accelerators();
    Fingerprint {
        onednn_isa: onednn_isa(&cpu_features, &pins),
        cpu_vendor,
        cpu_model,
        cpu_features,
        aten_capability: torch_info(0),
        blas: torch_info(1),
        onednn: torch_info(2),
        libtorch: libtorch_build(),
        accelerators: accel.names,
        driver: accel.driver.unwrap_or_default(),
        threads: u32::try_from(threads).unwrap_or(u32::MAX),
        pins,
        mpi: crate::version::mpi_library(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_is_read_for_x86_and_arm_and_pins_win_over_the_hardware() {
        let x86 = "vendor_id\t: GenuineIntel\nmodel name\t: Xeon X\nflags\t\t: fpu avx2 fma avx512f avx512bw avx512vl amx_tile amx_bf16\n";
        let (v, m, f) = cpu(x86);
        assert_eq!((v.as_str(), m.as_str()), ("GenuineIntel", "Xeon X"));
        assert_eq!(
            f,
            ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "amx_tile", "amx_bf16"]
        );
        assert_eq!(onednn_isa(&f, &BTreeMap::new()), "avx512_core_amx");
        let pinned = BTreeMap::from([("ONEDNN_MAX_CPU_ISA".to_string(), "AVX2".to_string())]);
        assert_eq!(onednn_isa(&f, &pinned), "avx2");
        let without: Vec<String> = f.iter().filter(|x| !x.starts_with("a")).cloned().collect();
        assert_eq!(onednn_isa(&without, &BTreeMap::new()), "default");
        let arm = "CPU implementer\t: 0x41\nCPU part\t: 0xd40\nFeatures\t: fp asimd sve bf16\n";
        let (v, _, f) = cpu(arm);
        assert_eq!(v, "0x41");
        assert_eq!(f, ["asimd", "sve", "bf16"]);
    }

    #[test]
    fn libtorch_reports_its_kernel_level_and_versions() {
        let f = this_rank(1);
        assert!(
            ["DEFAULT", "AVX2", "AVX512", "NO AVX", "ZVECTOR", "SVE256"]
                .iter()
                .any(|c| f.aten_capability.contains(c)),
            "{f:?}"
        );
        assert_ne!(f.onednn, "unknown");
        assert!(f.libtorch.starts_with(crate::version::LIBTORCH_VERSION));
    }
}

//! The platform in the seal (docs/design.md §6, schema 4): everything about a rank's machine
//! and libraries that decides how its arithmetic rounds — processor, the instruction sets the
//! kernels use, BLAS and oneDNN, libtorch and CUDA, accelerators and driver, threads, the
//! environment variables that pin kernels, the MPI library — as one [`Fingerprint`]. A run
//! records one [`PlatformEntry`] per distinct fingerprint (attribute `platform`), and the
//! audit compares the reviewer's fingerprint with the run's to choose between its exact and
//! its statistical mode (docs/design.md §5).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Environment variables that change which kernels libtorch, oneDNN, MKL, OpenMP or cuBLAS
/// choose, or how they round; recorded when set.
pub const KERNEL_PINS: &[&str] = &[
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "ONEDNN_DEFAULT_FPMATH_MODE",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "MKL_DEBUG_CPU_TYPE",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CUBLAS_WORKSPACE_CONFIG",
    "NVIDIA_TF32_OVERRIDE",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "CUDA_VISIBLE_DEVICES",
    "AIPERF_NATIVE_BF16",
];

/// One rank's platform, as far as it decides the numerics.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Fingerprint {
    /// The processor's vendor (`GenuineIntel`, `AuthenticAMD`, …).
    pub cpu_vendor: String,
    /// The processor's model name.
    pub cpu_model: String,
    /// The instruction-set extensions present that the kernels dispatch on (`avx2`,
    /// `avx512f`, `avx512_bf16`, `amx_bf16`, …), in this order.
    pub cpu_features: Vec<String>,
    /// The vector level ATen's CPU kernels use (`at::get_cpu_capability`: `DEFAULT`, `AVX2`,
    /// `AVX512`, …).
    pub aten_capability: String,
    /// The highest instruction set oneDNN may use: its pin when one is set, else the best
    /// the processor has (`avx2`, `avx512_core`, `avx512_core_bf16`, `avx512_core_amx`).
    pub onednn_isa: String,
    /// The BLAS libtorch uses and its version (`at::get_mkl_version`).
    pub blas: String,
    /// oneDNN's version (`at::get_mkldnn_version`).
    pub onednn: String,
    /// libtorch's version and build: `2.13.0 cpu` or `2.13.0 cuda 12.8 cudnn 91000`.
    pub libtorch: String,
    /// The accelerators this rank sees (NVML names), empty on CPU.
    pub accelerators: Vec<String>,
    /// The accelerator driver's version, empty on CPU.
    pub driver: String,
    /// libtorch's intra-op threads on this rank.
    pub threads: u32,
    /// The variables of [`KERNEL_PINS`] that are set, with their values.
    pub pins: BTreeMap<String, String>,
    /// The MPI library's version line.
    pub mpi: String,
}

/// The ranks (and their hosts) that share one fingerprint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlatformEntry {
    /// World ranks, ascending.
    pub ranks: Vec<u32>,
    /// Their distinct host names, sorted.
    pub hosts: Vec<String>,
    /// The fingerprint.
    pub fingerprint: Fingerprint,
}

/// Groups every rank's fingerprint (`per_rank[r]`, with `hosts[r]`) into one entry per
/// distinct fingerprint, in order of each fingerprint's first rank.
pub fn entries(per_rank: &[Fingerprint], hosts: &[String]) -> Vec<PlatformEntry> {
    let mut out: Vec<PlatformEntry> = Vec::new();
    for (r, f) in per_rank.iter().enumerate() {
        let host = hosts.get(r).cloned().unwrap_or_default();
        match out.iter_mut().find(|e| &e.fingerprint == f) {
            Some(e) => {
                e.ranks.push(r as u32);
                if !e.hosts.contains(&host) {
                    e.hosts.push(host);
                    e.hosts.sort();
                }
            }
            None => out.push(PlatformEntry {
                ranks: vec![r as u32],
                hosts: vec![host],
                fingerprint: f.clone(),
            }),
        }
    }
    out
}

impl Fingerprint {
    /// One line: processor, vector level, libraries, accelerators, threads and pins.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} ({}; ATen {}, oneDNN {}), libtorch {}",
            self.cpu_model,
            self.cpu_features.join(" "),
            self.aten_capability,
            self.onednn_isa,
            self.libtorch
        );
        if !self.accelerators.is_empty() {
            s += &format!(
                ", {} (driver {})",
                self.accelerators.join(", "),
                self.driver
            );
        }
        s += &format!(", {} threads, {}", self.threads, self.mpi);
        if !self.pins.is_empty() {
            let pins: Vec<String> = self.pins.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s += &format!(", pinned {}", pins.join(" "));
        }
        s
    }

    /// Each field in which `other` differs from `self`, as `name: ours ≠ theirs`.
    pub fn differences(&self, other: &Fingerprint) -> Vec<String> {
        let a = serde_json::to_value(self).expect("plain data");
        let b = serde_json::to_value(other).expect("plain data");
        let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
            return Vec::new();
        };
        a.iter()
            .filter(|(k, v)| b.get(*k) != Some(v))
            .map(|(k, v)| format!("{k}: {v} ≠ {}", b.get(k).cloned().unwrap_or_default()))
            .collect()
    }
}

/// The run's platform as recorded: `None` before schema 4 (unknown).
pub fn parse(json: &str) -> Result<Vec<PlatformEntry>, String> {
    serde_json::from_str(json).map_err(|e| format!("not a JSON list of platform entries ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(model: &str, threads: u32) -> Fingerprint {
        Fingerprint {
            cpu_vendor: "GenuineIntel".into(),
            cpu_model: model.into(),
            cpu_features: vec!["avx2".into()],
            aten_capability: "AVX2".into(),
            onednn_isa: "avx2".into(),
            blas: "MKL".into(),
            onednn: "3.7".into(),
            libtorch: "2.13.0 cpu".into(),
            accelerators: vec![],
            driver: String::new(),
            threads,
            pins: BTreeMap::new(),
            mpi: "Open MPI v4.1.4".into(),
        }
    }

    #[test]
    fn ranks_sharing_a_fingerprint_make_one_entry_and_differences_are_named() {
        let hosts: Vec<String> = ["a", "a", "b", "b"].map(String::from).into();
        let e = entries(&[fp("X", 1), fp("X", 2), fp("X", 2), fp("Y", 2)], &hosts);
        assert_eq!(e.len(), 3);
        assert_eq!(e[1].ranks, vec![1, 2]);
        assert_eq!(e[1].hosts, vec!["a".to_string(), "b".to_string()]);
        let d = fp("X", 1).differences(&fp("Y", 2));
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].starts_with("cpu_model") && d[1].starts_with("threads"));
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(parse(&json).unwrap(), e);
    }
}

//! `aiperf doctor` under a real `mpirun` with two ranks: every rank's report, in rank order;
//! on a node that counts as having GPUs, a CPU-only libtorch refused unless `--device cpu`
//! asks for the processors.

use std::path::Path;

mod common;
use common::mpirun;

#[test]
fn doctor_under_mpirun_reports_every_rank() {
    let out = mpirun(2)
        .args(["doctor", "--json"])
        .output()
        .unwrap_or_else(|e| {
            panic!("mpi-launch/mpirun-local: {e} (is OpenMPI installed? run scripts/dev/setup)")
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut ranks: Vec<i64> = stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
            assert_eq!(v["mpi_world_size"], 2);
            assert!(v["hdf5_version"].as_str().unwrap().starts_with("1."));
            assert!(Path::new(v["libtorch_lib"].as_str().unwrap())
                .join("libtorch_cpu.so")
                .exists());
            // NVML's devices, or why there are none (this machine has no GPU driver).
            let acc = &v["accelerators"];
            let names = acc["names"].as_array().unwrap();
            assert_eq!(acc["nvml"] == "loaded", !names.is_empty(), "{acc}");
            assert!(!acc["nvml"].as_str().unwrap().is_empty(), "{acc}");
            v["mpi_rank"].as_i64().unwrap()
        })
        .collect();
    ranks.sort();
    assert_eq!(ranks, vec![0, 1]);
}

/// The doctor on a node that counts as having GPUs (`AIPERF_GPU_NODE=1`) with this CPU-only
/// libtorch: it reports, then fails naming the command that gets a CUDA build — unless
/// `--device cpu` asks for the processors.
#[test]
fn doctor_refuses_a_cpu_libtorch_on_a_gpu_node_unless_cpu_is_asked() {
    let doctor = |extra: &[&str]| {
        let out = mpirun(2)
            .env("AIPERF_GPU_NODE", "1")
            .arg("doctor")
            .args(extra)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text.into_owned())
    };
    let (ok, text) = doctor(&[]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("computes natively")
            && text.contains("this node has GPUs (forced by AIPERF_GPU_NODE=1)")
            && text.contains("make build AIPERF_TORCH=cuda"),
        "{text}"
    );
    let (ok, text) = doctor(&["--device", "cpu"]);
    assert!(ok && text.contains("computes natively"), "{text}");
    // Asking for CUDA where libtorch has none is an error, not a quiet fall-back.
    let (ok, text) = doctor(&["--device", "cuda"]);
    assert!(
        !ok && text.contains("--device cuda: libtorch sees no CUDA device"),
        "{text}"
    );
}

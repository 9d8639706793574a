//! `scripts/tools/gpu-check` rehearsed on the CPU (`CPU_OK=1`) against this build: every step
//! runs (doctor, three dp-checks, the data, a scored run, the three trainers, augmentation
//! on both sides), the checks pass, the GPU-only ones say so instead of passing, and the
//! figures file holds what the GPU table of docs/centre.md is filled from. It also refuses
//! to start without a GPU unless asked, and refuses a bundle built for another torch. The
//! GPU itself is checked on a GPU node (docs/centre.md, "On a GPU").
//!
//! Needs `AIPERF_TORCH_PYTHON` (a Python with torch) and `AIPERF_BENCH_TRAIN_BIN` (the
//! built benches/trainer.rs); `make test` sets both.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn required(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the tests with `make test` (scripts/dev/test sets it)")
    })
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/tools/gpu-check")
}

/// A bundle-shaped folder of this build's binaries.
fn bundle(dir: &Path) -> PathBuf {
    let b = dir.join("bundle");
    std::fs::create_dir(&b).unwrap();
    let aiperf = Path::new(env!("CARGO_BIN_EXE_aiperf"));
    symlink(aiperf, b.join("aiperf")).unwrap();
    let prep = aiperf.with_file_name("aiperf-data-prep");
    assert!(prep.exists(), "{} missing: make build", prep.display());
    symlink(prep, b.join("aiperf-data-prep")).unwrap();
    symlink(
        required("AIPERF_BENCH_TRAIN_BIN"),
        b.join("aiperf-bench-train"),
    )
    .unwrap();
    b
}

/// gpu-check rehearsing on the CPU with this build, writing to `out_dir`.
fn rehearsal(tmp: &Path, out_dir: &Path) -> Command {
    let mut c = Command::new(script());
    c.arg(out_dir)
        .env("BUNDLE", bundle(tmp))
        .env("TORCH_PYTHON", required("AIPERF_TORCH_PYTHON"))
        .env("FMNIST_SRC", "/usr/share/datasets/fashion-mnist")
        .env("TMPDIR", tmp)
        .env("CPU_OK", "1");
    c
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn rehearsed_on_the_cpu_every_step_runs_and_the_gpu_checks_say_not_run() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    let out = rehearsal(tmp.path(), &out_dir)
        // Epochs of 128 images (a few steps of batch 16–64) and 64 validation images: 30 s
        // hold many of them even when another process takes one of the two cores (the
        // 15-s run of 512 images once finished none under load).
        .env("RUN_S", "30")
        .env("RUN_ARGS", "--train-images 128 --val-images 64")
        .env("BENCH_BATCH", "32")
        .env("BENCH_STEPS", "8")
        .env("BENCH_REPS", "2")
        .env("AUG_SIZE", "32")
        .output()
        .unwrap();
    let log = std::fs::read_to_string(out_dir.join("log.txt")).unwrap_or_default();
    assert!(out.status.success(), "{}\nlog:\n{log}", text(&out));
    let fig: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("figures.json")).unwrap())
            .unwrap();
    assert_eq!(fig["passed"], true);
    assert_eq!(fig["gpu"], false);
    let check = |name: &str| -> String {
        fig["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == name)
            .unwrap_or_else(|| panic!("no check {name:?}: {}", fig["checks"]))["result"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(check("every step ran to completion"), "pass");
    assert_eq!(check("doctor: libtorch sees CUDA"), "n/a (no GPU)");
    assert_eq!(
        check("run fp32: NVML monitor rows (utilisation, memory)"),
        "n/a (no GPU)"
    );
    for dp in ["dp-host", "dp-auto", "dp-frozen-bn"] {
        assert_eq!(check(&format!("{dp}: 2 ranks bit-identical")), "pass");
        assert_eq!(
            check(&format!("{dp}: exchange overlapped with backward")),
            "pass"
        );
        assert_eq!(fig["dp_check"][dp]["device"], "cpu");
    }
    assert_eq!(
        check("dp-host: overlapped trains as after backward"),
        "pass"
    );
    assert_eq!(fig["dp_check"]["dp-host-after"]["overlapped_steps"], 0);
    assert!(
        fig["dp_check"]["dp-device"].is_null(),
        "not CUDA-aware here"
    );
    let run = &fig["runs"]["fp32"];
    assert!(run["ops_per_s"].as_f64().unwrap() > 0.0, "{run}");
    assert!(run["epochs"].as_u64().unwrap() > 0, "{run}");
    assert_eq!(run["records"], "intact");
    assert!(run["resources"]["samples"].as_u64().unwrap() > 0, "{run}");
    assert!(fig["runs"]["fp16"].is_null());
    for imp in ["aiperf", "bare-tch", "pytorch-eager"] {
        let v = fig["bench"]["fp32"]["images_per_s"][imp].as_f64();
        assert!(v.unwrap_or(0.0) > 0.0, "{imp}: {}", fig["bench"]);
    }
    assert!(fig["augment"]["device_over_cpu"].as_f64().unwrap() > 0.0);
    let summary = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
    assert!(summary.contains("CPU rehearsal"), "{summary}");
    assert!(summary.contains("| fp16 | not run |"), "{summary}");
    assert!(log.contains("=== run-fp32"), "{log}");
    assert!(out_dir.join("records.tar.gz").metadata().unwrap().len() > 0);
    // The temporary folder it worked in is gone; what it keeps is in OUTDIR.
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with("aiperf-gpu-check"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn without_a_gpu_it_stops_unless_asked_to_rehearse() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(script())
        .arg(tmp.path().join("out"))
        .env("BUNDLE", bundle(tmp.path()))
        .env("TORCH_PYTHON", required("AIPERF_TORCH_PYTHON"))
        .env("TMPDIR", tmp.path())
        .env_remove("CPU_OK")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sees no CUDA device") && err.contains("CPU_OK=1"),
        "{err}"
    );
}

#[test]
fn a_bundle_for_another_torch_or_an_unknown_precision_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let b = tmp.path().join("b");
    std::fs::create_dir(&b).unwrap();
    for name in ["aiperf", "aiperf-data-prep", "aiperf-bench-train"] {
        std::fs::write(b.join(name), "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(b.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(b.join("TORCH_VERSION"), "1.0.0\n").unwrap();
    let out = Command::new(script())
        .arg(tmp.path().join("out"))
        .env("BUNDLE", &b)
        .env("TORCH_PYTHON", required("AIPERF_TORCH_PYTHON"))
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the bundle is built for torch 1.0.0")
            && err.contains("TARGET_TORCH=")
            && err.contains("scripts/tools/gpu-bundle"),
        "{err}"
    );
    assert!(!b.join("torch-lib").exists());
    // A precision it cannot run is refused before any step.
    let out = Command::new(script())
        .arg(tmp.path().join("out2"))
        .env("BUNDLE", &b)
        .env("RUN_PRECISIONS", "fp32 fp8")
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("RUN_PRECISIONS: fp8 is not fp32, fp16 or bf16"),
        "{err}"
    );
}

#[test]
fn a_step_that_outlasts_the_budget_is_cut_and_the_summary_still_written() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    let started = std::time::Instant::now();
    let out = rehearsal(tmp.path(), &out_dir)
        .env("RUN_S", "120")
        .env("BUDGET_S", "40")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    // The budget is the point: 40 s against a run of 120 s plus the steps before it. A
    // generous bound, for a busy machine; without the budget the script takes over 360 s.
    assert!(started.elapsed().as_secs() < 200, "{:?}", started.elapsed());
    let fig: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("figures.json")).unwrap())
            .unwrap();
    assert_eq!(fig["passed"], false);
    // Which step the budget cuts depends on how fast the machine is: a step running when
    // it runs out is cut ("timed out after"); one that cannot fit in what is left is not
    // started ("… is spent"). Some step is cut or left out, whichever it is.
    let steps = fig["steps"].as_object().unwrap();
    assert!(
        steps.values().any(|s| s[0].as_str().is_some_and(|t| {
            t.starts_with("timed out after") || t.contains("(BUDGET_S) is spent")
        })),
        "{fig}"
    );
    let bench = fig["steps"]["bench-arch"][0].as_str().unwrap();
    assert!(bench.contains("BUDGET_S"), "{bench}");
    let summary = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
    assert!(
        summary.contains("| every step ran to completion | FAIL |"),
        "{summary}"
    );
}

//! The `aiperf` binary as users run it: `data-check` on a prepared split, `doctor` under
//! a real `mpirun` with two ranks, and mistakes on the command line under a launcher.

use std::path::Path;
use std::process::Command;

use aiperf_data_prep::{split_path, PackWriter, Source};

fn aiperf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_aiperf"))
}

fn write_split(dir: &Path, split: &str, n: usize) {
    let path = split_path(dir, split);
    let mut w = PackWriter::create(&path, split, [3, 6, 6], 4).unwrap();
    for i in 0..n {
        let img: Vec<u8> = (0..108).map(|p| ((i * 13 + p * 5) % 256) as u8).collect();
        w.push(&img, (i % 4) as u32, &path).unwrap();
    }
    let src = Source {
        kind: "test".into(),
        dataset: "tiny".into(),
        inputs: vec![],
        processing: String::new(),
        subset: Some(false),
    };
    w.finish((0..4).map(|c| format!("c{c}")).collect(), src, 0)
        .unwrap();
}

#[test]
fn data_check_runs_every_sample_through_the_loader() {
    let tmp = tempfile::tempdir().unwrap();
    write_split(tmp.path(), "train", 100);
    let out = aiperf()
        .args([
            "data-check",
            "--batch",
            "16",
            "--epochs",
            "2",
            "--augment",
            "crop-flip:1",
            "--data",
        ])
        .arg(tmp.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("100 tiny images 3x6x6, 4 classes, checksum ok"),
        "{stdout}"
    );
    assert!(
        stdout.contains("epoch 0: 100 images") && stdout.contains("epoch 1: 100 images"),
        "{stdout}"
    );
}

#[test]
fn data_check_delivers_to_the_device_asked_for_or_says_why_not() {
    let tmp = tempfile::tempdir().unwrap();
    write_split(tmp.path(), "train", 40);
    let run = |device: &str| {
        aiperf()
            .args(["data-check", "--batch", "8", "--augment-on", "device"])
            .args(["--device", device, "--data"])
            .arg(tmp.path())
            .output()
            .unwrap()
    };
    let out = run("cpu");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("delivering to cpu (Device output)"),
        "{stdout}"
    );
    assert!(stdout.contains("epoch 0: 40 images"), "{stdout}");
    // The tests' build links the CPU libtorch: CUDA is refused by name, not ignored.
    let out = run("cuda");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--device cuda: libtorch sees no CUDA device") && err.contains("--device cpu"),
        "{err}"
    );
}

#[test]
fn data_check_reports_bad_input_and_exits_nonzero() {
    let tmp = tempfile::tempdir().unwrap();
    let out = aiperf()
        .args(["data-check", "--data"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("train.aipk not found") && err.contains("aiperf-data-prep"),
        "{err}"
    );

    write_split(tmp.path(), "train", 10);
    let out = aiperf()
        .args(["data-check", "--augment", "center-crop:9", "--data"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not fit the 6x6 images"));

    let out = aiperf()
        .args(["data-check", "--augment", "sharpen", "--data"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "clap usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown augmentation"));
}

#[test]
fn doctor_under_mpirun_reports_every_rank() {
    let launcher = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi-launch/mpirun-local");
    let out = Command::new(&launcher)
        .env("AIPERF_BIN", env!("CARGO_BIN_EXE_aiperf"))
        .args(["2", "doctor", "--json"])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (is OpenMPI installed? run scripts/dev/setup)",
                launcher.display()
            )
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
    let launcher = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi-launch/mpirun-local");
    let doctor = |extra: &[&str]| {
        let out = Command::new(&launcher)
            .env("AIPERF_BIN", env!("CARGO_BIN_EXE_aiperf"))
            .env("AIPERF_GPU_NODE", "1")
            .args(["2", "doctor"])
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

#[test]
fn ops_prints_the_resnet50_reference_counts() {
    let out = aiperf()
        .args([
            "ops",
            "--arch",
            "resnet50",
            "--input",
            "224x224x3",
            "--classes",
            "1000",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("stage2.block0.1.conv"), "{stdout}");
    let total = stdout
        .lines()
        .find(|l| l.starts_with("FP per image"))
        .unwrap();
    assert!(total.ends_with("7,806,583,495"), "{total}");
    let params = stdout
        .lines()
        .find(|l| l.starts_with("parameters"))
        .unwrap();
    assert!(params.ends_with("25,557,032"), "{params}");

    let out = aiperf()
        .args(["ops", "--arch", "resnet50", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["fp_per_image"], 7_806_583_495u64);
    assert_eq!(
        v["layers"].as_array().unwrap().len(),
        1 + 53 + 53 + 1 + 49 + 16 + 2
    );
}

#[test]
fn ops_reads_an_architecture_file_and_rejects_bad_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let builtin = aiperf()
        .args([
            "ops",
            "--arch",
            "resnet20",
            "--input",
            "32x32x3",
            "--classes",
            "10",
            "--json",
        ])
        .output()
        .unwrap();
    let builtin: serde_json::Value = serde_json::from_slice(&builtin.stdout).unwrap();
    let g = aiperf::arch::by_name("resnet20", aiperf::arch::Shape::new(3, 32, 32), 10).unwrap();
    let file = tmp.path().join("model.json");
    std::fs::write(&file, g.to_json()).unwrap();
    let out = aiperf()
        .args(["ops", "--json", "--arch"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let from_file: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(from_file, builtin);

    let mut broken = g.clone();
    broken.nodes[3].inputs = vec![7];
    std::fs::write(&file, broken.to_json()).unwrap();
    let out = aiperf()
        .args(["ops", "--arch"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("model.json is not a valid architecture") && err.contains("node 3"),
        "{err}"
    );

    let out = aiperf()
        .args(["ops", "--arch", "resnet51"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("neither a built-in architecture"));

    let out = aiperf()
        .args(["ops", "--arch", "resnet50", "--input", "224x224"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected HxWxC"));
}

#[test]
fn search_sim_prints_a_consistent_trajectory() {
    let out = aiperf()
        .args([
            "search-sim",
            "--trials",
            "8",
            "--threads",
            "2",
            "--seed",
            "4",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trials: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(trials.len(), 8);
    assert!(trials[0]["father"].is_null());
    for (i, t) in trials.iter().enumerate().skip(1) {
        assert!(t["father"].as_u64().unwrap() < i as u64);
        assert!(!t["morphisms"].as_array().unwrap().is_empty());
        let acc = t["accuracy"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&acc));
        assert!(
            t["fp_per_image"].as_u64().unwrap() > trials[0]["fp_per_image"].as_u64().unwrap() / 2
        );
    }
    // Same seed, same trajectory (whatever the threads).
    let again = aiperf()
        .args([
            "search-sim",
            "--trials",
            "8",
            "--threads",
            "1",
            "--seed",
            "4",
            "--json",
        ])
        .output()
        .unwrap();
    let strip = |s: &[u8]| -> Vec<serde_json::Value> {
        String::from_utf8_lossy(s)
            .lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                v.as_object_mut().unwrap().remove("generate_s");
                v
            })
            .collect()
    };
    assert_eq!(strip(&out.stdout), strip(&again.stdout));

    let bad = aiperf()
        .args(["search-sim", "--start", "vgg"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr)
        .contains("use one of resnet8, resnet20, resnet18, resnet50"));
}

/// Runs `aiperf ARGS` (a singleton MPI process where the command uses MPI) and expects a
/// clean failure: exit 1, no panic, a message containing every `expected` piece.
fn refused(args: &[&str], expected: &[&str]) {
    let out = aiperf()
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    for e in expected {
        assert!(err.contains(e), "{args:?}: expected {e:?} in {err}");
    }
}

/// Regression: these flags panicked or aborted (or hung) instead of failing cleanly.
#[test]
fn regression_flags_that_panicked_are_clean_errors_naming_the_flag() {
    refused(&["search-sim", "--trials", "0"], &["--trials"]);
    refused(
        &["comm-bench", "--max-bytes", "18446744073709551615"],
        &["--max-bytes"],
    );
    refused(
        &[
            "ops",
            "--arch",
            "resnet50",
            "--input",
            "4000000000x4000000000x3",
        ],
        &["exceeds 2^64"],
    );
    refused(&["run", "--duration", "1e20"], &["--duration"]);
    refused(&["run", "--threads", "0"], &["--threads"]);
    refused(
        &["run", "--monitor-interval", "inf"],
        &["--monitor-interval"],
    );
    refused(&["run", "--batch-size", "0:8"], &["--batch-size"]);
    refused(
        &["run", "--resume", "/nonexistent", "--epochs", "3"],
        &["--epochs", "cannot change"],
    );
    refused(&["dp-check", "--steps", "0"], &["--steps"]);
}

#[test]
fn regression_data_check_crop_flip_padding_beyond_the_images_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    write_split(tmp.path(), "train", 10);
    refused(
        &[
            "data-check",
            "--augment",
            "crop-flip:40",
            "--data",
            tmp.path().to_str().unwrap(),
        ],
        &["crop-flip padding 40", "6x6"],
    );
}

/// `data-check --split test` says which splits there are, with clap's usage status 2.
#[test]
fn regression_data_check_names_the_splits_it_knows() {
    let tmp = tempfile::tempdir().unwrap();
    write_split(tmp.path(), "train", 10);
    let out = aiperf()
        .args(["data-check", "--split", "test", "--data"])
        .arg(tmp.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("'test'") && err.contains("possible values: train, val"),
        "{err}"
    );
}

/// One message per mistake under a launcher — clap's parse errors, and the range
/// errors of the MPI tools, are printed by rank 0 alone, with clap's exit status 2.
///
/// The failure guarded against: the other ranks exit 2 at once, `mpirun` kills the job, and
/// rank 0 dies before printing. Here rank 0 starts late (a wrapper sleeps first), so a rank
/// that fails the job before rank 0 has spoken would lose the message every time.
#[test]
fn regression_parse_and_range_errors_are_printed_once_under_mpirun() {
    let launcher = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi-launch/mpirun-local");
    let tmp = tempfile::tempdir().unwrap();
    let late = tmp.path().join("rank0-late");
    wrapper(&late, "[ \"${OMPI_COMM_WORLD_RANK:-0}\" = 0 ] && sleep 2");
    let cases: [(&[&str], &str, i32); 4] = [
        (
            &["run", "--no-such-flag"],
            "unexpected argument '--no-such-flag'",
            2,
        ),
        (&["run", "--duration", "soon"], "invalid value 'soon'", 2),
        (&["dp-check", "--steps", "0"], "--steps", 1),
        (&["comm-bench", "--iters", "0"], "--iters", 1),
    ];
    for (args, says, status) in cases {
        let out = Command::new(&launcher)
            .env("AIPERF_BIN", &late)
            .arg("3")
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "{args:?}: {err}");
        assert_eq!(err.matches(says).count(), 1, "{args:?}: {err}");
    }
    // --help is printed once too.
    let out = Command::new(&launcher)
        .env("AIPERF_BIN", env!("CARGO_BIN_EXE_aiperf"))
        .args(["3", "run", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let once = "Print the resolved configuration";
    assert_eq!(text.matches(once).count(), 1, "{text}");
}

/// An executable shell script at `path` that runs `before`, then execs aiperf with its
/// arguments (a stand-in for `AIPERF_BIN` that changes one rank's conditions).
fn wrapper(path: &Path, before: &str) {
    use std::os::unix::fs::PermissionsExt;
    let bin = env!("CARGO_BIN_EXE_aiperf");
    std::fs::write(path, format!("#!/bin/sh\n{before}\nexec '{bin}' \"$@\"\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Regression (review, 2026-12-03): every rank reads `--config` from its own disk. Where
/// only rank 0 could, the others failed silently and rank 0 went on into a collective
/// alone; now the ranks agree, and rank 0 names the ranks that could not read it. Each rank
/// runs in its own folder here, the preset file only in rank 0's.
#[test]
fn regression_a_preset_file_missing_on_some_ranks_is_named_not_waited_for() {
    let tmp = tempfile::tempdir().unwrap();
    let preset = aiperf().args(["run", "--print-config"]).output().unwrap();
    assert!(preset.status.success());
    for rank in 0..3 {
        std::fs::create_dir(tmp.path().join(format!("rank{rank}"))).unwrap();
    }
    std::fs::write(tmp.path().join("rank0/preset.json"), &preset.stdout).unwrap();
    let bin = tmp.path().join("in-own-folder");
    let cd = format!(
        "cd '{}'/rank\"$OMPI_COMM_WORLD_RANK\"",
        tmp.path().display()
    );
    wrapper(&bin, &cd);
    let launcher = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi-launch/mpirun-local");
    // `timeout`: the old behaviour was a hang; a bound far above the seconds it takes.
    let out = Command::new("timeout")
        .arg("300")
        .arg(&launcher)
        .env("AIPERF_BIN", &bin)
        .args([
            "3",
            "run",
            "--trainer",
            "simulated",
            "--config",
            "preset.json",
        ])
        .args(["--duration", "5", "--results"])
        .arg(tmp.path().join("results"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("preset.json").count(), 1, "{err}");
    assert!(err.contains("ranks 1, 2 on "), "{err}");
    assert!(!tmp.path().join("results/primary.h5").exists(), "{err}");
}

/// Regression: comm-bench over a size range holding no power of two measured nothing and
/// exited 0; its `--group-size` refusal was printed by every rank.
#[test]
fn regression_comm_bench_refuses_a_range_that_measures_nothing_and_says_it_once() {
    for (lo, hi) in [("1", "1"), ("3", "3"), ("5", "7")] {
        refused(
            &["comm-bench", "--min-bytes", lo, "--max-bytes", hi],
            &["nothing would be measured", "--min-bytes"],
        );
    }
    let launcher = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi-launch/mpirun-local");
    let out = Command::new(&launcher)
        .env("AIPERF_BIN", env!("CARGO_BIN_EXE_aiperf"))
        .args([
            "3",
            "comm-bench",
            "--group-size",
            "2",
            "--max-bytes",
            "1024",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(
        err.matches("--group-size 2 must divide the 3 ranks")
            .count(),
        1,
        "{err}"
    );
}

/// Regression: a part of a flag value out of range was answered with the expected form;
/// a preset of the wrong shape with serde's "trailing characters", naming no key.
#[test]
fn regression_the_part_out_of_range_and_the_key_of_the_wrong_shape_are_named() {
    let out = aiperf()
        .args(["run", "--batch-size", "16:4294967296"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("4294967296 is too large (at most 65536)"),
        "{err}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let printed = aiperf().args(["run", "--print-config"]).output().unwrap();
    let mut preset: serde_json::Value = serde_json::from_slice(&printed.stdout).unwrap();
    preset["batch_size"] = serde_json::json!([16, 32, 64]);
    let file = tmp.path().join("preset.json");
    std::fs::write(&file, serde_json::to_string_pretty(&preset).unwrap()).unwrap();
    refused(
        &["run", "--print-config", "--config", file.to_str().unwrap()],
        &["at `batch_size`", "expected a [min, max] pair of integers"],
    );
}

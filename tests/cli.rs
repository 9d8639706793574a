//! The `aiperf` binary as users run it, one process: `data-check` on a prepared split, `ops`,
//! `search-sim`, and mistakes on the command line named by flag. `doctor` has its own file,
//! and so has a mistake made under a launcher (said once).

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

/// Regression: comm-bench over a size range holding no power of two measured nothing and
/// exited 0.
#[test]
fn regression_comm_bench_refuses_a_range_that_measures_nothing() {
    for (lo, hi) in [("1", "1"), ("3", "3"), ("5", "7")] {
        refused(
            &["comm-bench", "--min-bytes", lo, "--max-bytes", hi],
            &["nothing would be measured", "--min-bytes"],
        );
    }
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

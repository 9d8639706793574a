//! What `aiperf run` refuses before anything trains, under a real `mpirun` with the real
//! trainer: missing or corrupted data, images of two shapes, counts beyond the packs,
//! batch sizes and augmentations the images cannot give, a precision the device does not
//! compute, threads beyond the processors and a bad platform switch, a `--results` that is a
//! file. Each is said once (however many ranks found it), names its flag or file, exits
//! non-zero, records nothing and gives no resume hint.

use std::path::Path;
use std::process::Command;

mod common;
use common::{mpirun, output, quadrants, run_failing, text, write_split};

#[test]
fn missing_data_is_a_clear_error_on_every_rank() {
    let tmp = tempfile::tempdir().unwrap();
    let out = output(
        mpirun(3)
            .args(["run", "--data"])
            .arg(tmp.path().join("nothing-here"))
            .arg("--results")
            .arg(tmp.path().join("r")),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("nothing-here") && err.contains("aiperf-data-prep"),
        "{err}"
    );
}

/// A run refused before it starts: nothing recorded, one error line (said once, however
/// many ranks found it), and no resume hint (there is nothing to resume).
fn refused(data: &Path, results: &Path, extra: &[&str]) -> String {
    let err = run_failing(data, results, extra);
    assert!(
        !results.join("primary.h5").exists(),
        "nothing recorded: {err}"
    );
    assert_eq!(err.matches("aiperf: error:").count(), 1, "said once: {err}");
    assert!(!err.contains("--resume"), "no resume hint: {err}");
    err
}

#[test]
fn regression_batch_size_range_too_large_for_train_images_is_refused_before_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let data = quadrants(tmp.path(), 200);
    let err = refused(
        &data,
        &tmp.path().join("r"),
        &["--batch-size", "8:256", "--train-images", "100"],
    );
    assert!(
        err.contains("--batch-size") && err.contains("--train-images"),
        "{err}"
    );
    assert!(!tmp.path().join("r/group-0.h5").exists(), "nothing trained");
}

#[test]
fn fp16_is_refused_on_a_cpu_rank_by_name() {
    // bf16 is refused only where the processor would emulate it: tests/precision.rs.
    let tmp = tempfile::tempdir().unwrap();
    let data = quadrants(tmp.path(), 200);
    let err = refused(&data, &tmp.path().join("fp16"), &["--precision", "fp16"]);
    assert!(
        err.contains("--precision fp16 needs a CUDA device (CPU autocast is bf16 only)"),
        "{err}"
    );
}

#[test]
fn regression_a_corrupted_pack_is_refused_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let data = quadrants(tmp.path(), 200);
    let path = data.join("train.aipk");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[4096 + 77] ^= 0x10;
    std::fs::write(&path, bytes).unwrap();
    let err = refused(&data, &tmp.path().join("r"), &["--duration", "20"]);
    assert!(
        err.contains("checksum mismatch") && err.contains("train.aipk"),
        "{err}"
    );
}

#[test]
fn regression_crop_flip_padding_larger_than_the_images_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let data = quadrants(tmp.path(), 200);
    let printed =
        output(Command::new(env!("CARGO_BIN_EXE_aiperf")).args(["run", "--print-config"]));
    let mut preset: serde_json::Value = serde_json::from_slice(&printed.stdout).unwrap();
    preset["train"]["augment"] = serde_json::json!({"crop_flip": {"pad": 40}});
    let file = tmp.path().join("pad40.json");
    std::fs::write(&file, preset.to_string()).unwrap();
    let err = refused(
        &data,
        &tmp.path().join("r"),
        &["--config", file.to_str().unwrap()],
    );
    assert!(
        err.contains("train.augment") && err.contains("crop-flip padding 40"),
        "{err}"
    );
}

/// Counts beyond the pack, a validation crop that cannot fit and a `--results` that is a
/// file are refused before the run starts, once, without a resume hint.
#[test]
fn regression_what_the_data_and_the_folder_cannot_give_is_refused_before_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let data = quadrants(tmp.path(), 200);
    let r = tmp.path().join("r");
    let err = refused(&data, &r, &["--train-images", "100000000"]);
    assert!(
        err.contains("--train-images 100000000")
            && err.contains("more than the 200 images")
            && err.contains("train.aipk")
            && err.contains("use at most 200"),
        "{err}"
    );
    let err = refused(&data, &r, &["--val-images", "49"]);
    assert!(
        err.contains("--val-images 49") && err.contains("val.aipk"),
        "{err}"
    );
    let printed =
        output(Command::new(env!("CARGO_BIN_EXE_aiperf")).args(["run", "--print-config"]));
    let mut preset: serde_json::Value = serde_json::from_slice(&printed.stdout).unwrap();
    preset["train"]["val_augment"] = serde_json::json!({"center_crop": {"size": 64}});
    let file = tmp.path().join("crop64.json");
    std::fs::write(&file, preset.to_string()).unwrap();
    let err = refused(&data, &r, &["--config", file.to_str().unwrap()]);
    assert!(
        err.contains("train.val_augment") && err.contains("center-crop 64"),
        "{err}"
    );
    let file_not_folder = tmp.path().join("a-file");
    std::fs::write(&file_not_folder, "x").unwrap();
    let err = refused(&data, &file_not_folder.join("sub"), &[]);
    assert!(
        err.contains("--results") && err.contains("is not a folder"),
        "{err}"
    );
}

/// More threads than the rank's processors, or a platform switch that is neither 0 nor 1,
/// are refused before the run, naming the flag or the variable (`auto` took a bad switch
/// for "not native" without a word).
#[test]
fn regression_threads_beyond_the_processors_and_a_bad_platform_switch_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let data = quadrants(tmp.path(), 200);
    let run = |threads: &str, env: (&str, &str)| {
        let r = tmp.path().join(format!("r-{threads}-{}", env.1));
        let out = output(
            mpirun(3)
                .env(env.0, env.1)
                .args(["run", "--trainer", "real", "--precision", "auto"])
                .args(["--threads", threads, "--duration", "4", "--data"])
                .arg(&data)
                .arg("--results")
                .arg(&r),
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{err}");
        assert!(!r.join("primary.h5").exists(), "nothing recorded: {err}");
        err
    };
    let cores = std::thread::available_parallelism().unwrap().get();
    let many = (cores + 1).to_string();
    let err = run(&many, ("AIPERF_UNUSED", "0"));
    assert!(
        err.contains(&format!(
            "--threads {many}: this rank may run on {cores} processor(s)"
        )) && err.contains(&format!("give at most {cores}")),
        "{err}"
    );
    let err = run("1", ("AIPERF_NATIVE_BF16", "yes"));
    assert!(
        err.contains("AIPERF_NATIVE_BF16=yes is neither 0 nor 1: unset it, or set 0 or 1"),
        "{err}"
    );
}

#[test]
fn regression_validation_images_of_another_shape_are_refused_naming_both() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    write_split(&data, "train", 64, 1);
    // Validation images 12×12 beside the 8×8 training images.
    let path = data.join("val.aipk");
    let mut w =
        aiperf_data_prep::PackWriter::create(&path, "val", [1, 12, 12], common::CLASSES).unwrap();
    for i in 0..16u32 {
        w.push(&[(i * 7 % 255) as u8; 144], i % common::CLASSES, &path)
            .unwrap();
    }
    common::finish_quadrants(w);
    let dir = tmp.path().join("r");
    let out = output(
        mpirun(3)
            .args(["run", "--trainer", "real", "--duration", "4", "--data"])
            .arg(&data)
            .arg("--results")
            .arg(&dir),
    );
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains(
            "train.aipk holds 8x8x1 images, val.aipk 12x12x1: both splits must have one shape"
        ),
        "{t}"
    );
    assert!(!dir.join("primary.h5").exists(), "nothing recorded");
}

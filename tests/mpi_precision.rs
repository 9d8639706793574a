//! The arithmetic of `aiperf run` under a real `mpirun`, with the processor's bf16 check
//! forced both ways (`AIPERF_NATIVE_BF16`), so that the test means the same on any machine:
//! where bf16 is native, `auto` trains in bf16 and a memory format the probe chose, the
//! records hold both and each training rank's measured ceiling, the score reports the
//! efficiency against it, and the run audits exactly on its platform; where it is not,
//! `auto` trains in fp32 and `--precision bf16` is refused before anything is recorded,
//! naming what is missing.

use std::path::Path;
use std::process::Command;

use aiperf_records::schema::attr;

mod common;
use common::{output, write_noisy_split};

/// `aiperf ARGS` under `mpirun -np 3` with `AIPERF_NATIVE_BF16=native` (and no kernel pins):
/// (exit code, stdout + stderr).
fn aiperf(args: &[&str], native: &str) -> (i32, String) {
    let mut cmd =
        Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi-launch/mpirun-local"));
    cmd.env("AIPERF_BIN", env!("CARGO_BIN_EXE_aiperf"))
        .arg("3")
        .args(args)
        .env("AIPERF_NATIVE_BF16", native);
    for k in [
        "ATEN_CPU_CAPABILITY",
        "ONEDNN_MAX_CPU_ISA",
        "DNNL_MAX_CPU_ISA",
    ] {
        cmd.env_remove(k);
    }
    let out = output(&mut cmd);
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text.into_owned())
}

/// `aiperf run` on the quadrants data in `dir/data` into `dir/name`: (code, output).
fn run(dir: &Path, name: &str, native: &str, extra: &[&str]) -> (i32, String) {
    let data = dir.join("data");
    if !data.exists() {
        std::fs::create_dir_all(&data).unwrap();
        write_noisy_split(&data, "train", 384, 1, 7);
        write_noisy_split(&data, "val", 480, 2, 7);
    }
    let results = dir.join(name);
    let mut args = vec![
        "run",
        "--trainer",
        "real",
        "--data",
        data.to_str().unwrap(),
        "--results",
        results.to_str().unwrap(),
        "--epochs",
        "3",
        "--batch-size",
        "8:24",
        "--threads",
        "1",
    ];
    if !extra.contains(&"--duration") {
        args.extend(["--duration", "12"]);
    }
    args.extend_from_slice(extra);
    aiperf(&args, native)
}

/// The recorded configuration's training settings and the ceilings attribute.
fn recorded(dir: &Path) -> (serde_json::Value, Vec<aiperf_records::ceiling::Ceiling>) {
    let f = hdf5::File::open(dir.join("primary.h5")).unwrap();
    let text = |name: &str| -> String {
        f.attr(name)
            .unwrap()
            .read_scalar::<hdf5::types::VarLenUnicode>()
            .unwrap()
            .to_string()
    };
    let config: serde_json::Value = serde_json::from_str(&text(attr::CONFIG)).unwrap();
    let ceilings = aiperf_records::ceiling::parse(&text(attr::CEILINGS)).unwrap();
    (config["preset"]["train"].clone(), ceilings)
}

fn score(dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_aiperf"))
        .arg("score")
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn where_bf16_is_native_auto_takes_it_records_the_ceiling_and_audits_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, text) = run(tmp.path(), "bf16", "1", &[]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("precision auto: bf16"), "{text}");
    let dir = tmp.path().join("bf16");
    let (train, ceilings) = recorded(&dir);
    assert_eq!(train["precision"], "bf16");
    let format = train["memory_format"].as_str().unwrap().to_string();
    assert!(format == "nchw" || format == "channels-last", "{train}");
    assert!(
        text.contains(&format!("memory format auto: {format} (probe:")),
        "{text}"
    );
    // One ceiling per training rank, in the run's precision.
    let ranks: Vec<u32> = ceilings.iter().map(|c| c.rank).collect();
    assert_eq!(ranks, [1, 2]);
    assert!(ceilings
        .iter()
        .all(|c| c.precision == "bf16" && c.gemm_ops_per_s > 0.0 && c.threads == 1));
    let s = score(&dir);
    let line = s
        .lines()
        .find(|l| l.trim_start().starts_with("efficiency"))
        .expect(&s);
    assert!(
        line.contains("% of the measured ceiling") && line.contains("bf16 matrix products n=2048"),
        "{line}"
    );
    // The reviewer's scorer divides the same recorded figures.
    let json = Command::new(env!("CARGO_BIN_EXE_aiperf"))
        .args(["score", "--json"])
        .arg(&dir)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let v = &v[0];
    let total: f64 = ceilings.iter().map(|c| c.gemm_ops_per_s).sum();
    let want = v["ops_per_s"].as_f64().unwrap() / total;
    assert_eq!(v["efficiency"].as_f64().unwrap(), want);

    // Audited on its own platform (the same forced answer is in the fingerprint's pins):
    // exact, in bf16 and the recorded format, and PASSED.
    let data = tmp.path().join("data");
    let (code, text) = aiperf(
        &[
            "audit",
            dir.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "--trials",
            "1",
        ],
        "1",
    );
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("mode                     exact"), "{text}");
}

#[test]
fn where_bf16_is_not_native_auto_takes_fp32_and_bf16_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, text) = run(tmp.path(), "refused", "0", &["--precision", "bf16"]);
    assert_ne!(code, 0, "{text}");
    assert!(
        text.contains("--precision bf16 is not native here: forced off by AIPERF_NATIVE_BF16=0 (bf16 would be emulated, slower than fp32)"),
        "{text}"
    );
    assert!(
        !tmp.path().join("refused/primary.h5").exists(),
        "nothing recorded"
    );

    let (code, text) = run(
        tmp.path(),
        "fp32",
        "0",
        &["--memory-format", "channels-last", "--duration", "6"],
    );
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("precision auto: fp32"), "{text}");
    let (train, ceilings) = recorded(&tmp.path().join("fp32"));
    assert_eq!(
        (train["precision"].as_str(), train["memory_format"].as_str()),
        (Some("fp32"), Some("channels-last")),
        "a format given is kept, no probe"
    );
    assert!(!text.contains("memory format auto"), "{text}");
    assert!(ceilings.iter().all(|c| c.precision == "fp32"));
}

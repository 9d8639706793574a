//! What the audit tests share: a short real run recorded under `mpirun` (optionally with
//! kernel pins that make another platform of this machine), copies of its records, and the
//! audit and the scorer run on them.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::Path;
use std::process::Command;

use crate::common::{mpirun, output, write_noisy_split};

/// The kernel pins that emulate another processor: AVX2 where this one has AVX-512, else
/// the generic level; either way a fingerprint unlike the native one.
pub const PINS_AVX2: [(&str, &str); 3] = [
    ("ATEN_CPU_CAPABILITY", "avx2"),
    ("ONEDNN_MAX_CPU_ISA", "AVX2"),
    ("MKL_ENABLE_INSTRUCTIONS", "AVX2"),
];
pub const PINS_DEFAULT: [(&str, &str); 2] = [
    ("ATEN_CPU_CAPABILITY", "default"),
    ("ONEDNN_MAX_CPU_ISA", "SSE41"),
];

/// `aiperf ARGS` under `mpirun -np NP` with `env` set: (exit code, stdout + stderr).
pub fn aiperf(np: usize, args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = mpirun(np);
    cmd.args(args);
    for (k, _) in PINS_AVX2.iter().chain(&PINS_DEFAULT) {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    let out = output(&mut cmd);
    (out.status.code().unwrap_or(-1), crate::common::text(&out))
}

/// A short real run on the quadrants data in `dir/data` (every `wrong`-th label wrong),
/// recorded in `dir/name` with `env`.
pub fn record(dir: &Path, name: &str, env: &[(&str, &str)], wrong: usize) -> std::path::PathBuf {
    record_on(
        dir,
        name,
        env,
        Recording {
            wrong,
            train: 384,
            epochs: "8",
        },
    )
}

/// What [`record_on`] records.
pub struct Recording<'a> {
    /// Every `wrong`-th label is wrong.
    pub wrong: usize,
    /// Training images (the data of the first call in a folder stays).
    pub train: usize,
    /// Epochs recorded over the run before it ends (`--stop-after-epochs`): trials of 1,
    /// 2 and 3 epochs make 6.
    pub epochs: &'a str,
}

/// [`record`] as `r` says.
pub fn record_on(dir: &Path, name: &str, env: &[(&str, &str)], r: Recording) -> std::path::PathBuf {
    let Recording {
        wrong,
        train,
        epochs,
    } = r;
    let data = dir.join("data");
    if !data.exists() {
        std::fs::create_dir_all(&data).unwrap();
        write_noisy_split(&data, "train", train, 1, wrong);
        write_noisy_split(&data, "val", 480, 2, wrong);
    }
    let run = dir.join(name);
    let args = [
        "run",
        "--trainer",
        "real",
        "--data",
        data.to_str().unwrap(),
        "--results",
        run.to_str().unwrap(),
        "--duration",
        "3600",
        "--stop-after-epochs",
        epochs,
        "--epochs",
        "4",
        "--batch-size",
        "8:24",
        "--threads",
        "1",
        // The arithmetic every processor has, in the default layout: the same evidence on
        // any machine (bf16 and channels-last runs audit in tests/precision.rs).
        "--precision",
        "fp32",
        "--memory-format",
        "nchw",
    ];
    let (code, text) = aiperf(3, &args.map(std::ffi::OsStr::new), env);
    assert_eq!(code, 0, "{text}");
    run
}

/// A copy of the records in `from` (without any audit) at `to`.
pub fn copy_run(from: &Path, to: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(to).unwrap();
    for f in ["primary.h5", "group-0.h5"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
    to.to_path_buf()
}

/// `aiperf audit DIR EXTRA` under `mpirun -np NP` on the data beside the run.
pub fn audit(np: usize, dir: &Path, extra: &[&str]) -> (i32, String) {
    audit_with(np, dir, extra, &[])
}

/// [`audit`] with `env` set (kernel pins).
pub fn audit_with(np: usize, dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let data = dir.parent().unwrap().join("data");
    let mut args: Vec<&std::ffi::OsStr> = vec!["audit".as_ref(), dir.as_os_str()];
    args.extend(["--data".as_ref(), data.as_os_str()]);
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    aiperf(np, &args, env)
}

/// `aiperf score DIR ARGS`: stdout.
pub fn score(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_aiperf"))
        .arg("score")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The pins that make a fingerprint unlike this machine's native one.
pub fn other_platform() -> &'static [(&'static str, &'static str)] {
    let avx512 = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .contains(" avx512f");
    if avx512 {
        &PINS_AVX2
    } else {
        &PINS_DEFAULT
    }
}

//! `scripts/dev/setup` as a non-root user on a machine without the system libraries: it must
//! first check Rust (none, or one older than Cargo.toml's rust-version: say how to get it
//! with rustup), then name each missing library and how to provide it, and exit non-zero —
//! not fail obscurely. The machine is simulated with a PATH that lacks the MPI and HDF5
//! tools, a pkg-config search path with nothing in it, an `id` that reports an ordinary
//! user, and `cargo`/`rustc` scripts that report the version a test chooses.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;

/// Tools the script uses that a bare login node has.
const TOOLS: &[&str] = &[
    "bash",
    "dirname",
    "grep",
    "tr",
    "ls",
    "cat",
    "printf",
    "mktemp",
    "rm",
    "mv",
    "touch",
    "env",
    "pkg-config",
    "sed",
    "awk",
    "sort",
    "head",
];

fn which(tool: &str) -> Option<std::path::PathBuf> {
    ["/usr/bin", "/bin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.exists())
}

/// A script `name` in `bin` that prints `text`.
fn fake(bin: &Path, name: &str, text: &str) {
    let path = bin.join(name);
    std::fs::write(&path, format!("#!/bin/sh\necho '{text}'\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The oldest Rust the workspace builds with (Cargo.toml's rust-version).
fn rust_version() -> String {
    let toml =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let line = toml
        .lines()
        .find(|l| l.starts_with("rust-version"))
        .unwrap();
    line.split('"').nth(1).unwrap().to_string()
}

/// Runs scripts/dev/setup as an ordinary user on a bare PATH; `rustc` reports `rustc` if given.
/// Returns the exit success, stderr, and whether anything was put in the cache.
fn setup_with(rustc: Option<&str>) -> (bool, String, bool) {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for tool in TOOLS {
        if let Some(p) = which(tool) {
            symlink(p, bin.join(tool)).unwrap();
        }
    }
    fake(&bin, "id", "1000");
    if let Some(version) = rustc {
        fake(
            &bin,
            "rustc",
            &format!("rustc {version} (0000000 2026-01-01)"),
        );
        fake(&bin, "cargo", &format!("cargo {version}"));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/dev/setup");
    let out = Command::new(which("bash").unwrap())
        .arg(&script)
        .env_clear()
        .env("PATH", &bin)
        .env("HOME", tmp.path())
        .env("PKG_CONFIG_LIBDIR", tmp.path().join("no-pkgconfig"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    (
        out.status.success(),
        err,
        tmp.path().join(".cache/aiperf").exists(),
    )
}

#[test]
fn setup_without_rust_says_how_to_get_it_before_anything_else() {
    let need = rust_version();
    let (ok, err, cached) = setup_with(None);
    assert!(!ok, "setup must fail without Rust: {err}");
    assert!(err.contains("Rust not found"), "{err}");
    assert!(err.contains(&format!("Rust >= {need}")), "{err}");
    assert!(err.contains("https://sh.rustup.rs"), "{err}");
    // Rust comes first: no package or library was looked at.
    assert!(!err.contains("checking libraries directly"), "{err}");
    assert!(!cached);
}

#[test]
fn setup_with_an_old_rust_names_both_versions() {
    let need = rust_version();
    let (ok, err, cached) = setup_with(Some("1.63.0"));
    assert!(!ok, "setup must fail with Rust 1.63: {err}");
    assert!(
        err.contains("rustc 1.63.0 is older than the") && err.contains(&need),
        "{err}"
    );
    assert!(err.contains("rustup update stable"), "{err}");
    assert!(!err.contains("checking libraries directly"), "{err}");
    assert!(!cached);
}

#[test]
fn setup_without_root_names_missing_libraries_and_fixes() {
    // A Rust exactly as old as required passes the first check.
    let (ok, err, cached) = setup_with(Some(&rust_version()));
    assert!(!ok, "setup must fail here: {err}");
    assert!(
        !err.contains("Rust not found") && !err.contains("older than"),
        "{err}"
    );
    // No dpkg on this PATH: it says it cannot install and checks the libraries directly.
    assert!(err.contains("checking libraries directly"), "{err}");
    assert!(
        err.contains("MPI: no mpicc on PATH") && err.contains("MPICC=/path/to/mpicc"),
        "{err}"
    );
    assert!(err.contains("module load openmpi"), "{err}");
    assert!(
        err.contains("HDF5 >= 1.10: not found") && err.contains("HDF5_DIR="),
        "{err}"
    );
    assert!(err.contains("re-run 'make'"), "{err}");
    // Nothing was downloaded or unpacked.
    assert!(!cached);
}

/// `scripts/dev/setup --which-libtorch` with `env`: its exit success and output.
fn which_libtorch(env: &[(&str, &str)]) -> (bool, String) {
    let tmp = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/dev/setup");
    let mut cmd = Command::new(which("bash").unwrap());
    cmd.arg(&script)
        .arg("--which-libtorch")
        .env_remove("LIBTORCH")
        .env_remove("LIBTORCH_USE_PYTORCH")
        .env_remove("AIPERF_TORCH")
        .env("HOME", tmp.path())
        .env_remove("AIPERF_CACHE")
        .env_remove("XDG_CACHE_HOME");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn a_gpu_node_builds_against_the_cuda_libtorch_unless_told_otherwise() {
    let (ok, out) = which_libtorch(&[("AIPERF_GPU_NODE", "1")]);
    assert!(ok, "{out}");
    assert!(
        out.starts_with("cuda: CUDA libtorch") && out.contains("torch-2.13.0-cuda/torch"),
        "{out}"
    );
    assert!(out.contains("forced by AIPERF_GPU_NODE=1"), "{out}");
    let (ok, out) = which_libtorch(&[("AIPERF_GPU_NODE", "0")]);
    assert!(
        ok && out.starts_with("cpu: cached slim CPU libtorch"),
        "{out}"
    );
    let (ok, out) = which_libtorch(&[("AIPERF_GPU_NODE", "0"), ("AIPERF_TORCH", "cuda")]);
    assert!(
        ok && out.starts_with("cuda: ") && out.contains("AIPERF_TORCH=cuda"),
        "{out}"
    );
    let (ok, out) = which_libtorch(&[("AIPERF_GPU_NODE", "1"), ("AIPERF_TORCH", "cpu")]);
    assert!(ok && out.starts_with("cpu: "), "{out}");
    let (ok, out) = which_libtorch(&[("LIBTORCH", "/opt/libtorch"), ("AIPERF_GPU_NODE", "1")]);
    assert!(
        ok && out.starts_with("given: LIBTORCH=/opt/libtorch"),
        "{out}"
    );
    let (ok, out) = which_libtorch(&[("AIPERF_TORCH", "rocm")]);
    assert!(
        !ok && out.contains("AIPERF_TORCH must be auto, cpu or cuda, got 'rocm'"),
        "{out}"
    );
}

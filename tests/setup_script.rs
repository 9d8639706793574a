//! `scripts/setup` as a non-root user on a machine without the system libraries: it must
//! name each missing library and how to provide it, and exit non-zero — not fail obscurely.
//! The machine is simulated with a PATH that lacks the MPI and HDF5 tools, a pkg-config
//! search path with nothing in it, and an `id` that reports an ordinary user.

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
];

fn which(tool: &str) -> Option<std::path::PathBuf> {
    ["/usr/bin", "/bin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.exists())
}

#[test]
fn setup_without_root_names_missing_libraries_and_fixes() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for tool in TOOLS {
        if let Some(p) = which(tool) {
            symlink(p, bin.join(tool)).unwrap();
        }
    }
    let id = bin.join("id");
    std::fs::write(&id, "#!/bin/sh\necho 1000\n").unwrap();
    std::fs::set_permissions(&id, std::fs::Permissions::from_mode(0o755)).unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/setup");
    let out = Command::new(which("bash").unwrap())
        .arg(&script)
        .env_clear()
        .env("PATH", &bin)
        .env("HOME", tmp.path())
        .env("PKG_CONFIG_LIBDIR", tmp.path().join("no-pkgconfig"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "setup must fail here: {err}");
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
    assert!(err.contains("cargo: not found"), "{err}");
    assert!(err.contains("re-run 'make'"), "{err}");
    // Nothing was downloaded or unpacked.
    assert!(!tmp.path().join(".cache/aiperf").exists());
}

//! Build-time facts for `--version`: the commit the workspace was built from, and whether the
//! sources the binaries are built from differed from it (`AIPERF_COMMIT`, e.g.
//! `0937888a1b2c` or `0937888a1b2c+modified`; `unknown` outside a git checkout, e.g. from a
//! source tarball).

use std::path::Path;
use std::process::Command;

/// What the binaries are built from, relative to the workspace: an uncommitted change to any
/// of these marks the commit `+modified` (docs, tests and scripts do not).
const BUILD_INPUTS: [&str; 11] = [
    "src",
    "build.rs",
    "Cargo.toml",
    "Cargo.lock",
    "ir/src",
    "ir/Cargo.toml",
    "records/src",
    "records/build.rs",
    "records/Cargo.toml",
    "data-prep/src",
    "data-prep/Cargo.toml",
];

/// `git` with `args` in `dir`, its trimmed output when it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let workspace = Path::new(&manifest).join("..");
    // Rerun when the commit moves (HEAD, the branch refs) or a build input changes, so that
    // the "+modified" mark is never stale.
    if let Some(git_dir) = git(&workspace, &["rev-parse", "--absolute-git-dir"]) {
        for p in ["HEAD", "refs/heads", "packed-refs"] {
            println!("cargo:rerun-if-changed={git_dir}/{p}");
        }
    }
    for p in BUILD_INPUTS {
        println!("cargo:rerun-if-changed={}", workspace.join(p).display());
    }
    let commit = match git(&workspace, &["rev-parse", "--short=12", "HEAD"]) {
        Some(c) => {
            let mut status = vec!["status", "--porcelain", "--untracked-files=no", "--"];
            status.extend(BUILD_INPUTS);
            if git(&workspace, &status).is_some_and(|s| !s.is_empty()) {
                format!("{c}+modified")
            } else {
                c
            }
        }
        None => "unknown".into(),
    };
    println!("cargo:rustc-env=AIPERF_COMMIT={commit}");
    println!(
        "cargo:rustc-env=AIPERF_BUILD_INPUTS={}",
        BUILD_INPUTS.join(" ")
    );
}

//! The reviewer's one-file scorer: `make score-static` builds `aiperf-score`
//! statically linked with HDF5 built in. Here it runs in a root that holds nothing but
//! itself and record sets (a chroot: no loader, no libraries, no /proc), and every output
//! and exit status equals the normal build's on the same records.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn static_binary() -> PathBuf {
    let path = std::env::var_os("AIPERF_STATIC_SCORE").unwrap_or_else(|| {
        panic!("AIPERF_STATIC_SCORE is not set: run the tests with `make test` (scripts/dev/test builds it with scripts/dev/build-static-score)")
    });
    PathBuf::from(path)
}

/// The committed record sets (results/run-*), each as the folder name.
fn record_sets() -> Vec<PathBuf> {
    let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results");
    let mut sets: Vec<PathBuf> = std::fs::read_dir(&results)
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.join("primary.h5").is_file())
        .collect();
    sets.sort();
    assert!(
        !sets.is_empty(),
        "no record set under {}",
        results.display()
    );
    sets
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\n{}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn static_aiperf_score_runs_alone_in_a_chroot_and_agrees_with_the_normal_build() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc_geteuid() },
        0,
        "chroot needs root: run `make test` as root (the virtual-cluster tests need it too)"
    );
    let root = tempfile::tempdir().unwrap();
    std::fs::copy(static_binary(), root.path().join("aiperf-score")).unwrap();
    let mut names = Vec::new();
    for set in record_sets() {
        let name = set.file_name().unwrap().to_str().unwrap().to_string();
        copy_dir(&set, &root.path().join(&name));
        names.push(name);
    }
    // The root holds the binary and the records, nothing else.
    let mut entries: Vec<String> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    entries.sort();
    let mut expected = names.clone();
    expected.push("aiperf-score".into());
    expected.sort();
    assert_eq!(entries, expected);
    let normal = env!("CARGO_BIN_EXE_aiperf-score");
    let wrong = "0".repeat(64);
    for name in &names {
        let cases: [Vec<&str>; 4] = [
            vec![name],
            vec![name, "--json"],
            vec![name, "--digest", &wrong],
            vec![name, "--no-such-flag"],
        ];
        for args in &cases {
            let alone = Command::new("chroot")
                .arg(root.path())
                .arg("/aiperf-score")
                .args(args)
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .output()
                .unwrap();
            let usual = Command::new(normal)
                .args(args)
                .current_dir(root.path())
                .env_remove("RUST_LOG")
                .output()
                .unwrap();
            assert_eq!(show(&alone), show(&usual), "{args:?}");
            assert!(alone.status.code().is_some(), "{args:?}: {}", show(&alone));
        }
    }
    // The verdicts are real ones: the records score (exit 0, 3 or 4) and a wrong digest is
    // ALTERED (5).
    let scored = Command::new("chroot")
        .arg(root.path())
        .args(["/aiperf-score", &names[0]])
        .output()
        .unwrap();
    assert!(
        matches!(scored.status.code(), Some(0 | 3 | 4)),
        "{}",
        show(&scored)
    );
    assert!(String::from_utf8_lossy(&scored.stdout).contains("score (sustained)"));
    let altered = Command::new("chroot")
        .arg(root.path())
        .args(["/aiperf-score", &names[0], "--digest", &wrong])
        .output()
        .unwrap();
    assert_eq!(altered.status.code(), Some(5), "{}", show(&altered));
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

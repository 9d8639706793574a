//! `aiperf-score --version` names the version, the commit and the HDF5 it runs with (the
//! scorer needs nothing else).

use std::process::Command;

#[test]
fn score_version_names_the_commit_and_hdf5() {
    let out = Command::new(env!("CARGO_BIN_EXE_aiperf-score"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        format!("aiperf-score {}", env!("CARGO_PKG_VERSION")),
        "{text}"
    );
    let commit = lines[1].strip_prefix("commit ").expect(&text);
    assert_eq!(commit, aiperf_records::version::COMMIT, "{text}");
    let hex = commit.trim_end_matches("+modified");
    assert!(
        commit == "unknown" || (hex.len() == 12 && hex.chars().all(|c| c.is_ascii_hexdigit())),
        "{text}"
    );
    assert!(lines[2].starts_with("HDF5 1."), "{text}");
}

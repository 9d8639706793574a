//! One job, one message: a mistake on the command line of an MPI command (a parse or range
//! error, a preset file some ranks cannot read, a comm-bench range that measures nothing) is
//! said once, by rank 0, and the job fails instead of waiting.

use std::path::Path;
use std::process::Command;

mod common;
use common::{bounded, mpirun, mpirun_bin};

fn aiperf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_aiperf"))
}

/// One message per mistake under a launcher — clap's parse errors, and the range
/// errors of the MPI tools, are printed by rank 0 alone, with clap's exit status 2.
///
/// The failure guarded against: the other ranks exit 2 at once, `mpirun` kills the job, and
/// rank 0 dies before printing. Here rank 0 starts late (a wrapper sleeps first), so a rank
/// that fails the job before rank 0 has spoken would lose the message every time.
#[test]
fn regression_parse_and_range_errors_are_printed_once_under_mpirun() {
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
        let out = mpirun_bin(&late, 3).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "{args:?}: {err}");
        assert_eq!(err.matches(says).count(), 1, "{args:?}: {err}");
    }
    // --help is printed once too.
    let out = mpirun(3).args(["run", "--help"]).output().unwrap();
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

/// Regression: every rank reads `--config` from its own disk. Where
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
    // `timeout`: the old behaviour was a hang; a bound far above the seconds it takes.
    let out = bounded(300, &mpirun_bin(&bin, 3))
        .args(["run", "--trainer", "simulated", "--config", "preset.json"])
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

/// Regression: comm-bench's `--group-size` refusal was printed by every rank.
#[test]
fn regression_comm_bench_says_its_group_size_refusal_once() {
    let out = mpirun(3)
        .args(["comm-bench", "--group-size", "2", "--max-bytes", "1024"])
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

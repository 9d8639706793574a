//! The ReFrame check end to end: `scripts/dev/test-reframe` runs mpi-launch/reframe/aiperf_check.py
//! on the local partition (mpirun) and on a private single-node SLURM (srun, and mpirun in the
//! job), and checks that ReFrame's performance log holds exactly the figures `aiperf-score
//! --json` gives for the same records; a run that ends in warm-up logs a steady state of 0,
//! and a placement the check cannot make fails. Needs root (SLURM daemons) and ReFrame from
//! PyPI: under `make test` (every prerequisite installed) a missing one is a failure.

use std::path::Path;
use std::process::Command;

#[test]
fn reframe_perflog_holds_the_scorers_figures_under_mpirun_and_slurm() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let required = std::env::var("AIPERF_REQUIRE_PREREQS").as_deref() == Ok("1");
    let uid = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        assert!(
            !required,
            "the ReFrame test starts SLURM daemons and needs root"
        );
        eprintln!("SKIP: the ReFrame test starts SLURM daemons and needs root");
        return;
    }
    let venv = Command::new(root.join("scripts/dev/setup-reframe-venv"))
        .output()
        .unwrap();
    if !venv.status.success() {
        let why = String::from_utf8_lossy(&venv.stderr);
        assert!(!required, "ReFrame could not be installed: {why}");
        eprintln!("SKIP: ReFrame could not be installed: {why}");
        return;
    }
    let out = Command::new(root.join("scripts/dev/test-reframe"))
        .env("AIPERF_BIN", env!("CARGO_BIN_EXE_aiperf"))
        .output()
        .unwrap();
    let log =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    for run in [
        "local",
        "local-no-steady-state",
        "slurm-srun",
        "slurm-mpirun",
    ] {
        assert!(
            log.contains(&format!("{run}: perflog matches aiperf-score")),
            "{run}: {log}"
        );
    }
    assert!(
        log.contains("local-misplaced: the check failed as it should"),
        "{log}"
    );
    assert!(!log.contains("MISMATCH"), "{log}");
}

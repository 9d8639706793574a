//! `mpi-launch/weak-scaling.sbatch` refuses a malformed setting before its first run: the
//! message names the variable, the value and what to set, exit status 2, and no study folder
//! is made (a setting met only after hours of runs, or as a shell's `unbound variable` or a
//! Python traceback, loses the study).

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the job script directly (the mpirun form, over this host) with `vars` set, in a
/// fresh study folder that must not be made.
fn job(vars: &[(&str, &str)]) -> (i32, String, bool) {
    let tmp = tempfile::tempdir().unwrap();
    let study = tmp.path().join("study");
    let mut cmd = Command::new("bash");
    cmd.arg(root().join("mpi-launch/weak-scaling.sbatch"))
        .current_dir(root())
        .env("AIPERF_ROOT", root())
        .env("NODES", "localhost")
        .env("LAUNCHER", "mpirun")
        .env("RANKS_PER_NODE", "1")
        .env("STUDY", &study)
        .env_remove("SLURM_JOB_ID");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("bash runs the job script");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), err, study.exists())
}

#[test]
fn a_malformed_setting_is_refused_before_the_first_run_naming_variable_value_and_fix() {
    let cases = [
        ("IMAGES_PER_RANK", "abc", "IMAGES_PER_RANK=1024"),
        ("VAL_IMAGES_PER_RANK", "0", "VAL_IMAGES_PER_RANK=128"),
        ("LINK_GBIT", "abc", "LINK_GBIT=100"),
        ("LINK_GBIT", "-5", "LINK_GBIT=100"),
        ("EMULATED_OPS", "1e", "EMULATED_OPS=1e13"),
        ("DURATION", "0.0", "DURATION=300"),
        ("BUCKET_BYTES", "12k", "BUCKET_BYTES=131072"),
        ("REPS", "two", "REPS=3"),
        ("COMM_BENCH", "yes", "COMM_BENCH"),
    ];
    for (var, value, fix) in cases {
        let (code, err, made) = job(&[(var, value)]);
        assert_eq!(code, 2, "{var}={value}: exit {code}\n{err}");
        assert!(
            err.contains(&format!("{var} must be")) && err.contains(&format!("'{value}'")),
            "{var}={value}: the message names neither the variable nor the value:\n{err}"
        );
        assert!(
            err.contains(fix),
            "{var}={value}: no fix ({fix}) named:\n{err}"
        );
        assert!(
            !err.contains("unbound variable") && !err.contains("Traceback"),
            "{err}"
        );
        assert!(
            !made,
            "{var}={value}: the study folder was made before the refusal"
        );
    }
}

#[test]
fn well_formed_numbers_pass_the_checks() {
    // Every form a user may write passes the checks; the job then stops at the next check
    // (the launcher, checked after every number), which shows the numbers were accepted.
    let (code, err, made) = job(&[
        ("IMAGES_PER_RANK", "64"),
        ("LINK_GBIT", "2.5"),
        ("EMULATED_OPS", "1.5e13"),
        ("DURATION", "30"),
        ("COMM_BENCH", "0"),
        ("BUCKET_BYTES", "65536"),
        ("LAUNCHER", "pbs"),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("LAUNCHER must be srun or mpirun, got 'pbs'"),
        "{err}"
    );
    assert!(!made);
}

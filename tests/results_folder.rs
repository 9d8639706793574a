//! Nothing lost, nothing miscounted, under a real `mpirun`: a results folder belongs to one
//! job (two jobs started together with HDF5's file locking off leave one intact run and one
//! refusal, in either order; two resumes of one killed run leave one resumed run; a resume
//! of a live run is refused and the run goes on intact), and a folder holding any aiperf
//! record (an audit included) is refused.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{mpirun, output, spawn, text};

/// `aiperf run --trainer simulated` on 3 ranks into `dir`, HDF5's file locking off (as on
/// many cluster filesystems).
fn simulated(dir: &Path, extra: &[&str]) -> Command {
    let mut c = mpirun(3);
    c.env("HDF5_USE_FILE_LOCKING", "FALSE")
        .args([
            "run",
            "--trainer",
            "simulated",
            "--group-size",
            "1",
            "--results",
        ])
        .arg(dir)
        .args(extra);
    c
}

/// `aiperf score DIR`: its exit status and output.
fn score(dir: &Path) -> (Option<i32>, String) {
    let out = output(
        Command::new(env!("CARGO_BIN_EXE_aiperf"))
            .arg("score")
            .arg(dir),
    );
    (out.status.code(), text(&out))
}

/// One job's outcome: the one that ran must have intact records, the other a refusal that
/// names the folder's claim; returns which ran.
fn one_ran_one_refused(a: &Output, b: &Output, dir: &Path) -> usize {
    let ran: Vec<usize> = [a, b]
        .iter()
        .enumerate()
        .filter(|(_, o)| o.status.success())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        ran.len(),
        1,
        "exactly one job runs:\nA: {}\nB: {}",
        text(a),
        text(b)
    );
    let refused = if ran[0] == 0 { b } else { a };
    let t = text(refused);
    assert!(
        t.contains(&format!(
            "--results {}: claimed by another job",
            dir.display()
        )) || t.contains("holds the records of a run"),
        "{t}"
    );
    assert_eq!(
        t.matches("claimed by another job").count().min(1),
        t.matches("aiperf: error").count().min(1),
        "{t}"
    );
    let (code, s) = score(dir);
    assert_eq!(
        code,
        Some(4),
        "the simulated run scores INVALID, records intact: {s}"
    );
    assert!(s.contains("records                  intact"), "{s}");
    ran[0]
}

#[test]
fn regression_two_jobs_started_together_on_one_results_folder_leave_one_intact_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shared");
    let a = spawn(&mut simulated(&dir, &["--duration", "4"]));
    let b = spawn(&mut simulated(&dir, &["--duration", "4"]));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    one_ran_one_refused(&a, &b, &dir);
}

#[test]
fn regression_a_job_started_on_a_claimed_folder_is_refused_and_the_first_keeps_its_records() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("claimed");
    let first = spawn(&mut simulated(&dir, &["--duration", "8"]));
    // The second job starts once the first has claimed the folder (before or after its
    // first record: it must not matter).
    let limit = Instant::now() + Duration::from_secs(120);
    while !dir.join(".aiperf-claim").exists() {
        assert!(
            Instant::now() < limit,
            "the first job never claimed {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let second = output(&mut simulated(&dir, &["--duration", "4"]));
    let first = first.wait_with_output().unwrap();
    assert!(!second.status.success(), "{}", text(&second));
    assert!(
        text(&second).contains(&format!(
            "--results {}: claimed by another job (aiperf run on",
            dir.display()
        )),
        "{}",
        text(&second)
    );
    assert_eq!(one_ran_one_refused(&first, &second, &dir), 0);
}

#[test]
fn regression_results_holding_only_an_audit_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audited");
    std::fs::create_dir_all(&dir).unwrap();
    let audit = b"another run's audit".to_vec();
    std::fs::write(dir.join("audit.h5"), &audit).unwrap();
    let out = output(&mut simulated(&dir, &["--duration", "4"]));
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert_eq!(
        t.matches("holds the records of a run (audit.h5)").count(),
        1,
        "{t}"
    );
    assert_eq!(std::fs::read(dir.join("audit.h5")).unwrap(), audit);
    assert!(!dir.join(".aiperf-claim").exists() && !dir.join("primary.h5").exists());
}

/// Starts a 3-rank simulated run into `dir` and SIGKILLs one rank once it has recorded a few
/// epochs: a run to resume, its claim left by a job that is gone.
fn killed_run(dir: &Path) {
    let mut child =
        spawn(simulated(dir, &["--duration", "60"]).stderr(std::process::Stdio::piped()));
    let log = common::StderrLog::follow(&mut child);
    log.wait_for(Duration::from_secs(120), |l| {
        l.matches(" epoch ").count() >= 4
    });
    common::kill_a_rank(dir, &mut child, log);
}

/// `aiperf run --resume DIR` on 3 ranks, HDF5's file locking off.
fn resume(dir: &Path) -> Command {
    let mut c = mpirun(3);
    c.env("HDF5_USE_FILE_LOCKING", "FALSE")
        .args(["run", "--resume"])
        .arg(dir);
    c
}

#[test]
fn regression_two_resumes_of_one_killed_run_at_once_leave_one_run_and_one_refusal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("killed");
    killed_run(&dir);
    let a = spawn(&mut resume(&dir));
    let b = spawn(&mut resume(&dir));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let ran: Vec<&Output> = [&a, &b]
        .into_iter()
        .filter(|o| o.status.success())
        .collect();
    assert_eq!(
        ran.len(),
        1,
        "exactly one resume runs:\nA: {}\nB: {}",
        text(&a),
        text(&b)
    );
    let refused = text(if a.status.success() { &b } else { &a });
    // Whichever way the two met: the other took the folder over first, was taking it
    // over, or already runs in it.
    assert!(
        refused.contains("claimed by another job")
            || refused.contains("another resume is taking the folder over")
            || refused.contains("its job still runs"),
        "{refused}"
    );
    assert!(
        text(ran[0]).contains("the job that held it is gone (its process"),
        "the takeover is said: {}",
        text(ran[0])
    );
    let (code, s) = score(&dir);
    assert_eq!(code, Some(4), "{s}");
    assert!(
        s.contains("records                  intact (run digest"),
        "{s}"
    );
    assert!(s.contains("resumed                  1 time(s)"), "{s}");
}

#[test]
fn regression_a_resume_of_a_live_run_is_refused_naming_its_job_and_the_run_goes_on_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("live");
    let mut child =
        spawn(simulated(&dir, &["--duration", "20"]).stderr(std::process::Stdio::piped()));
    let log = common::StderrLog::follow(&mut child);
    log.wait_for(Duration::from_secs(120), |l| {
        l.matches(" epoch ").count() >= 2
    });
    let refused = output(&mut resume(&dir));
    let t = text(&refused);
    assert!(!refused.status.success(), "{t}");
    assert!(
        t.contains(&format!(
            "--resume {}: its job still runs (aiperf run on",
            dir.display()
        )) && t.contains("wait for that job, or stop it"),
        "{t}"
    );
    assert!(child.wait().unwrap().success(), "{}", log.finish());
    let (code, s) = score(&dir);
    assert_eq!(code, Some(4), "{s}");
    assert!(
        s.contains("records                  intact (run digest"),
        "{s}"
    );
    assert!(!s.contains("resumed"), "{s}");
}

//! `aiperf run --trainer simulated` under a real `mpirun`: the records it leaves are complete
//! and consistent — every group's epochs in time order, every epoch's operations equal to the
//! op counter's prediction for its architecture, images and steps, trials whose fathers are
//! earlier models — and the scoring step reads them.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use aiperf::ops::OpCount;
use aiperf::roles::primary::served::KINDS;
use aiperf_records::score;

mod common;
use common::{
    mpirun, output, rank_pids, read_run, read_with_architectures, spawn, wait_released, StderrLog,
};

/// The 32-rank run takes the machine alone (its 31 generators share the two cores); the
/// other runs share it with each other.
static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(|e| e.into_inner())
}

fn run(np: usize, extra: &[&str], dir: &Path) -> String {
    let _turn = (np < 32).then(shared);
    let out = output(
        mpirun(np)
            .args(["run", "--trainer", "simulated", "--results"])
            .arg(dir)
            .args(extra),
    );
    // The report (stdout) and the log (stderr, where rank 0 names the run digest).
    let text = common::text(&out);
    assert!(out.status.success(), "np={np}: {text}");
    text
}

/// Checks a run's records; returns (groups, epochs).
fn check_records(dir: &Path, ranks_per_group: u64) -> (usize, usize) {
    let (run, archs, batch_of) = read_with_architectures(dir);
    // The reviewers' recount agrees with every row the runtime wrote.
    let recount = aiperf_records::recount::recount(&run);
    assert!(recount.is_empty(), "{recount:?}");
    assert!(run.warnings.is_empty(), "{:?}", run.warnings);
    let mut epochs = 0;
    for g in &run.groups {
        assert!(
            !g.epochs.is_empty(),
            "group {} recorded no epoch; epochs per group {:?}; its trials {:?}; end {:?}, start {}",
            g.group,
            run.groups.iter().map(|g| g.epochs.len()).collect::<Vec<_>>(),
            run.trials.iter().filter(|t| t.group == g.group).collect::<Vec<_>>(),
            run.info.end_time_s,
            run.info.start_time_s
        );
        assert!(
            g.epochs.windows(2).all(|w| w[0].time_s <= w[1].time_s),
            "group {}: times go back",
            g.group
        );
        for e in &g.epochs {
            let count = OpCount::of(&archs[&e.model_id]).unwrap();
            let Some(&batch) = batch_of.get(&e.model_id) else {
                continue;
            }; // trial cut at the deadline
            let steps = e.train_images.div_ceil(u64::from(batch) * ranks_per_group);
            assert_eq!(
                u128::from(e.train_ops),
                count.train_epoch(e.train_images, steps),
                "model {}",
                e.model_id
            );
            assert_eq!(u128::from(e.val_ops), count.eval_epoch(e.val_images));
            epochs += 1;
        }
    }
    let ids: Vec<u64> = run.trials.iter().map(|t| t.model_id).collect();
    for t in &run.trials {
        assert!(
            t.father < t.model_id as i64,
            "model {}'s father {} is not earlier",
            t.model_id,
            t.father
        );
        assert!(archs.contains_key(&t.model_id));
    }
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "a model was reported twice");
    let s = score(&run, 1.0).unwrap();
    assert!(s.ops_per_s > 0.0 && s.best_accuracy > 0.1);
    // Every group's chain is whole and ends where the group said it did at its goodbye.
    assert_eq!(s.integrity.records, "intact", "{:?}", s.integrity);
    let chains = run
        .info
        .group_chains
        .as_ref()
        .expect("a clean stop records the chains");
    assert_eq!(chains.len(), run.groups.len());
    for (c, g) in chains.iter().zip(&run.groups) {
        assert_eq!((c.group, c.epochs()), (g.group, g.epochs.len() as u64));
    }
    (run.groups.len(), epochs)
}

#[test]
fn three_ranks_one_group_of_two() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(3, &["--duration", "5"], &tmp.path().join("r"));
    assert!(out.contains("score (sustained)"), "{out}");
    let (groups, epochs) = check_records(&tmp.path().join("r"), 2);
    assert_eq!(groups, 1);
    assert!(epochs > 5, "{epochs} epochs");
    // Rank 0's closing log names the run digest; the reviewer's scorer checks it.
    let digest = out
        .split("run digest ")
        .nth(1)
        .and_then(|rest| rest.get(..64))
        .unwrap_or_else(|| panic!("no run digest in the log: {out}"));
    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_aiperf"))
        .args(["score", "--digest", digest])
        .arg(tmp.path().join("r"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&checked.stdout);
    assert!(text.contains("matches --digest"), "{text}");
}

#[test]
fn four_ranks_three_groups_share_one_history() {
    let tmp = tempfile::tempdir().unwrap();
    run(
        4,
        &["--duration", "5", "--group-size", "1"],
        &tmp.path().join("r"),
    );
    let (groups, _) = check_records(&tmp.path().join("r"), 1);
    assert_eq!(groups, 3);
    // Groups learn from each other: some model's father was trained by another group.
    let run = read_run(&tmp.path().join("r")).unwrap();
    let group_of: HashMap<u64, u32> = run.trials.iter().map(|t| (t.model_id, t.group)).collect();
    assert!(run.trials.iter().any(|t| t.father >= 0
        && group_of
            .get(&(t.father as u64))
            .is_some_and(|&g| g != t.group)));
}

#[test]
fn thirty_two_ranks_simulated() {
    let _alone = MACHINE.write().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let out = run(
        32,
        &["--duration", "30", "--group-size", "1"],
        &tmp.path().join("r"),
    );
    let (groups, _) = check_records(&tmp.path().join("r"), 1);
    assert_eq!(groups, 31);
    primary_lines_agree_with_the_records(&out, &tmp.path().join("r"), 31);
}

/// The primary's last lines (what serving cost, for comparison with `make bench-primary`)
/// count the requests its records imply: a hello and a goodbye from every group, a Result
/// for every trial row, a Register or duplicate for each of them, and the history's models.
fn primary_lines_agree_with_the_records(log: &str, dir: &Path, groups: u64) {
    let run = read_run(dir).unwrap();
    let line = |what: &str| log.lines().find(|l| l.contains(what)).expect(what);
    let (served, cost) = (line("primary: served"), line("primary: CPU per request"));
    let count = |kind: &str| -> u64 {
        let counts = cost.rsplit("; ").nth(1).unwrap();
        let hit = counts
            .split(", ")
            .find(|c| c.ends_with(&format!(" {kind}")));
        hit.and_then(|c| c.split(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {kind} count in {cost}"))
    };
    assert_eq!((count("hello"), count("bye")), (groups, groups), "{cost}");
    let trials = run.trials.len() as u64;
    assert_eq!(count("result"), trials, "{cost}");
    assert!(count("register") + count("duplicate") >= trials, "{cost}");
    // The history holds the trials that trained an epoch or more.
    let history = run.trials.iter().filter(|t| t.epochs > 0).count();
    assert!(
        cost.ends_with(&format!("history {history} models")),
        "{cost}"
    );
    let all: u64 = KINDS.iter().map(|k| count(k)).sum();
    assert!(
        served.contains(&format!("served {all} requests from {groups} groups")),
        "{served}"
    );
}

#[test]
fn a_bad_layout_is_refused_by_name() {
    let _turn = shared();
    let tmp = tempfile::tempdir().unwrap();
    let out = output(
        mpirun(4)
            .args([
                "run",
                "--trainer",
                "simulated",
                "--group-size",
                "2",
                "--results",
            ])
            .arg(tmp.path().join("r")),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a multiple of --group-size 2"));
}

#[test]
fn sigterm_stops_the_run_cleanly_with_records_intact() {
    let _turn = shared();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let child = spawn(
        mpirun(3)
            .args([
                "run",
                "--trainer",
                "simulated",
                "--duration",
                "300",
                "--group-size",
                "1",
                "--results",
            ])
            .arg(&dir),
    );
    // Wait for the run to be under way: some epochs on record.
    let started = std::time::Instant::now();
    while !(dir.join("group-1.h5").exists() && started.elapsed().as_secs_f64() > 3.0) {
        assert!(started.elapsed().as_secs() < 60, "the run did not start");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // SIGTERM to every rank, as SLURM does at a time limit.
    let pids = rank_pids(&dir);
    assert_eq!(pids.len(), 3, "{pids:?}");
    assert!(output(Command::new("kill").arg("-TERM").args(&pids))
        .status
        .success());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed().as_secs() < 120, "stopping took too long");
    let run = read_run(&dir).unwrap();
    assert!(run.warnings.is_empty(), "{:?}", run.warnings);
    let end = run.info.end_time_s.unwrap();
    assert!(
        end - run.info.start_time_s < 100.0,
        "ended at the signal, not the deadline"
    );
    check_records(&dir, 1);
}

#[test]
fn a_stalled_group_is_named_and_the_run_ends_with_what_was_recorded() {
    let _turn = shared();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let started = std::time::Instant::now();
    let out = output(
        mpirun(4)
            .args(["run", "--trainer", "simulated", "--group-size", "1"])
            .args(["--fault", "hang:1"])
            .args(["--duration", "300", "--stall-timeout", "4", "--results"])
            .arg(&dir),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a stalled run must not exit 0");
    assert!(
        stderr.contains("group 1 (leader rank 2 on") && stderr.contains("made no progress"),
        "{stderr}"
    );
    assert!(stderr.contains("aiperf-score"), "{stderr}");
    assert!(
        started.elapsed().as_secs() < 200,
        "stopped at the stall, not at the deadline"
    );
    // Once the aborted ranks are gone (their file locks with them), every group's completed
    // epochs are readable and the primary's records are closed.
    wait_released(&dir, std::time::Duration::from_secs(60));
    let run = read_run(&dir).unwrap();
    assert!(run.info.end_time_s.is_some());
    assert_eq!(run.groups.len(), 3);
    assert!(run.groups.iter().all(|g| !g.epochs.is_empty()));
    assert!(score(&run, 1.0).unwrap().ops_per_s > 0.0);
}

#[test]
fn a_killed_run_resumes_from_its_records_and_counts_every_row() {
    let _turn = shared();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let mut child = spawn(
        mpirun(3)
            .args(["run", "--trainer", "simulated", "--group-size", "1"])
            .args(["--duration", "40", "--stall-timeout", "10", "--results"])
            .arg(&dir),
    );
    let log = StderrLog::follow(&mut child);
    log.wait_for(std::time::Duration::from_secs(60), |l| {
        l.matches(" epoch ").count() >= 6
    });
    // Regression: a run older than --stall-timeout at its resume had every group declared
    // stalled at once (the watch started at the run's t0). Make it older than that.
    std::thread::sleep(std::time::Duration::from_secs(11));
    common::kill_a_rank(&dir, &mut child, log);
    let before = read_run(&dir).unwrap();
    assert!(
        before.info.end_time_s.is_none(),
        "a crash leaves no end time"
    );
    let rows: usize = before.groups.iter().map(|g| g.epochs.len()).sum();
    assert!(rows > 0);
    // Resume with the same launcher: same layout, the rest from the records.
    let out = output(mpirun(3).args(["run", "--resume"]).arg(&dir));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("resuming"), "{stderr}");
    assert!(!stderr.contains("made no progress"), "{stderr}");
    assert!(!stdout.contains("not counted"), "{stdout}");
    assert!(
        stdout.contains("resumed                  1 time(s)"),
        "{stdout}"
    );
    let after = read_run(&dir).unwrap();
    assert!(after.warnings.is_empty(), "{:?}", after.warnings);
    assert_eq!(after.info.start_time_s, before.info.start_time_s);
    assert_eq!(after.info.resumes.len(), 1);
    for (b, a) in before.groups.iter().zip(&after.groups) {
        assert_eq!(
            a.epochs[..b.epochs.len()],
            b.epochs[..],
            "rows before the kill kept"
        );
        assert!(a.epochs.len() > b.epochs.len(), "group {} went on", a.group);
    }
    assert_eq!(after.trials[..before.trials.len()], before.trials[..]);
    // Rounds go on: the resumed groups' next trials carry later round numbers.
    for g in 0..2u32 {
        let rounds: Vec<u32> = after
            .trials
            .iter()
            .filter(|t| t.group == g)
            .map(|t| t.round)
            .collect();
        assert!(rounds.windows(2).all(|w| w[1] == w[0] + 1), "{rounds:?}");
    }
    // Every row is counted, over the whole wall time including the down time.
    let s = score(&after, 5.0).unwrap();
    let total: u128 = after
        .groups
        .iter()
        .flat_map(|g| &g.epochs)
        .map(|e| u128::from(e.train_ops) + u128::from(e.val_ops))
        .sum();
    let duration = after.info.end_time_s.unwrap() - after.info.start_time_s;
    assert!((s.ops_per_s - total as f64 / duration).abs() <= 1e-9 * s.ops_per_s);
    assert!(s.down_time_s > 0.0);
    assert!(
        after.info.end_time_s.unwrap() - after.info.start_time_s > 39.0,
        "the resumed run went on to its deadline"
    );
    check_records(&dir, 1);
    // Regression: resuming a run that already ended at its deadline rewrote its score.
    let again = output(mpirun(3).args(["run", "--resume"]).arg(&dir));
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success());
    assert!(
        err.contains("already ended at its deadline") && err.contains("aiperf score"),
        "{err}"
    );
    assert_eq!(
        err.matches("already ended").count(),
        1,
        "printed once: {err}"
    );
    assert_eq!(
        read_run(&dir).unwrap().info.end_time_s,
        after.info.end_time_s
    );
}

#[test]
fn regression_a_panic_on_one_rank_ends_the_job_within_seconds() {
    let _turn = shared();
    let tmp = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let out = output(
        mpirun(3)
            .args(["run", "--trainer", "simulated", "--group-size", "1"])
            .args(["--duration", "300", "--fault", "panic:2", "--results"])
            .arg(tmp.path().join("r")),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    // The documented status of a panic (docs/centre.md, "Exit status"): MPI_Abort's 70.
    assert_eq!(out.status.code(), Some(70), "{err}");
    assert!(
        err.contains("rank 2 panicked") && err.contains("MPI_Abort"),
        "{err}"
    );
    assert!(err.contains("--resume"), "{err}");
    // A generous bound: the run is 300 s long; the abort takes seconds.
    assert!(
        started.elapsed().as_secs() < 150,
        "ended in {:?}",
        started.elapsed()
    );
}

#[test]
fn a_trial_with_non_finite_loss_is_recorded_failed_and_its_group_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let out = run(
        3,
        &["--duration", "6", "--group-size", "1", "--fault", "nan:1"],
        &dir,
    );
    assert!(out.contains("score (sustained)"), "{out}");
    let run = read_run(&dir).unwrap();
    for g in 0..2u32 {
        let trials: Vec<_> = run.trials.iter().filter(|t| t.group == g).collect();
        assert!(trials.len() >= 3, "group {g} went on: {trials:?}");
        assert_eq!(
            trials[1].status,
            aiperf_records::schema::TrialStatus::Failed
        );
        assert_eq!(trials[1].epochs, 1, "its completed epoch is kept");
        assert!(trials
            .iter()
            .skip(2)
            .all(|t| t.status != aiperf_records::schema::TrialStatus::Failed));
    }
    // The failed trials' completed epochs are on record and counted.
    let failed: Vec<u64> = run
        .trials
        .iter()
        .filter(|t| t.epochs == 1 && t.round == 1)
        .map(|t| t.model_id)
        .collect();
    assert!(run
        .groups
        .iter()
        .flat_map(|g| &g.epochs)
        .any(|e| failed.contains(&e.model_id)));
}

#[test]
fn regression_a_run_whose_every_loss_is_non_finite_names_the_settings() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("diverged");
    let out = output(
        mpirun(3)
            .args(["run", "--trainer", "simulated", "--group-size", "1"])
            .args(["--duration", "4", "--fault", "nan:all", "--results"])
            .arg(&dir),
    );
    let t = common::text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(t.contains("no completed epoch in any group"), "{t}");
    assert!(t.contains("every trial's loss was non-finite"), "{t}");
    for setting in [
        "train.lr_per_256 ",
        "train.weight_decay ",
        "train.momentum ",
        "precision ",
    ] {
        assert!(t.contains(setting), "{setting} not named: {t}");
    }
}

#[test]
fn regression_a_configuration_error_is_printed_once_not_per_rank() {
    let _turn = shared();
    let tmp = tempfile::tempdir().unwrap();
    let out = output(
        mpirun(3)
            .args([
                "run",
                "--trainer",
                "simulated",
                "--status-interval",
                "0",
                "--results",
            ])
            .arg(tmp.path().join("r")),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.matches("--status-interval").count(), 1, "{err}");
}

/// `--results` naming a folder that holds a run's records is refused before
/// anything is written — once, by rank 0, naming the folder and the way on — and the records
/// stay as they were.
#[test]
fn regression_results_holding_a_run_are_never_overwritten() {
    let _turn = shared();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("finished");
    std::fs::create_dir_all(&dir).unwrap();
    let before = b"the records of a finished run".to_vec();
    std::fs::write(dir.join("primary.h5"), &before).unwrap();
    std::fs::write(dir.join("group-0.h5"), &before).unwrap();
    let out = output(
        mpirun(3)
            .args([
                "run",
                "--trainer",
                "simulated",
                "--duration",
                "5",
                "--results",
            ])
            .arg(&dir),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.matches("never overwrites them").count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "--results {}: holds the records of a run (group-0.h5, …)",
            dir.display()
        )) && err.contains("aiperf run --resume"),
        "{err}"
    );
    assert_eq!(std::fs::read(dir.join("primary.h5")).unwrap(), before);
    assert_eq!(std::fs::read(dir.join("group-0.h5")).unwrap(), before);
}

/// A group's members see the leader's stop at the deadline within one step, with
/// the simulated trainer too. Here one simulated epoch lasts days (a 1024×1024 input at
/// 10⁹ ops/s); a member that slept through it while the leader waited for it would hang the
/// job until killed.
#[test]
fn regression_members_of_a_simulated_group_stop_at_the_deadline() {
    let _turn = shared();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let mut child = spawn(
        mpirun(3)
            .args(["run", "--trainer", "simulated", "--group-size", "2"])
            .args([
                "--duration",
                "5",
                "--input",
                "1024x1024x3",
                "--speedup",
                "1",
            ])
            .args(["--sim-ops", "1e9", "--results"])
            .arg(&dir),
    );
    // A generous bound: the run's own length is 5 s; a hang lasts the epoch (days).
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed().as_secs() > 300 {
            let pids = rank_pids(&dir);
            let _ = Command::new("kill").arg("-KILL").args(&pids).status();
            let _ = child.kill();
            panic!("the group's member slept through the stop: killed after 300 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let out = child.wait_with_output().unwrap();
    // The one trial was cut by the deadline: no epoch finished, so the run closed cleanly
    // with nothing to score (exit 1, said once).
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("nothing to score").count(), 1, "{err}");
    assert!(err.contains("abandoned after"), "{err}");
    let run = read_run(&dir).unwrap();
    assert!(run.warnings.is_empty(), "{:?}", run.warnings);
    assert!(run.groups.iter().all(|g| g.epochs.is_empty()));
    assert!(run.info.end_time_s.is_some() && run.info.run_digest.is_some());
}

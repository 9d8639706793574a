//! `aiperf run --trainer simulated` under a real `mpirun`: the records it leaves are complete
//! and consistent — every group's epochs in time order, every epoch's operations equal to the
//! op counter's prediction for its architecture, images and steps, trials whose fathers are
//! earlier models — and the scoring step reads them.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use aiperf::arch::Graph;
use aiperf::ops::OpCount;
use aiperf_records::{read_architectures, read_run, score};

mod common;
use common::rank_pids;

fn run(np: usize, extra: &[&str], dir: &Path) -> String {
    let launcher = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi-launch/mpirun-local");
    let out = Command::new(&launcher)
        .env("AIPERF_BIN", env!("CARGO_BIN_EXE_aiperf"))
        .args([
            np.to_string().as_str(),
            "run",
            "--trainer",
            "simulated",
            "--results",
        ])
        .arg(dir)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "np={np}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Checks a run's records; returns (groups, epochs).
fn check_records(dir: &Path, ranks_per_group: u64) -> (usize, usize) {
    let run = read_run(dir).unwrap();
    assert!(run.warnings.is_empty(), "{:?}", run.warnings);
    let archs: HashMap<u64, Graph> = read_architectures(dir)
        .unwrap()
        .into_iter()
        .map(|(id, json)| (id, Graph::from_json(&json).unwrap()))
        .collect();
    let batch_of: HashMap<u64, u32> = run
        .trials
        .iter()
        .map(|t| (t.model_id, t.batch_size))
        .collect();
    let mut epochs = 0;
    for g in &run.groups {
        assert!(!g.epochs.is_empty(), "group {} recorded no epoch", g.group);
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
    let tmp = tempfile::tempdir().unwrap();
    run(
        32,
        &["--duration", "8", "--group-size", "1"],
        &tmp.path().join("r"),
    );
    let (groups, _) = check_records(&tmp.path().join("r"), 1);
    assert_eq!(groups, 31);
}

#[test]
fn a_bad_layout_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let launcher = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi-launch/mpirun-local");
    let out = Command::new(&launcher)
        .env("AIPERF_BIN", env!("CARGO_BIN_EXE_aiperf"))
        .args([
            "4",
            "run",
            "--trainer",
            "simulated",
            "--group-size",
            "2",
            "--results",
        ])
        .arg(tmp.path().join("r"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a multiple of --group-size 2"));
}

#[test]
fn sigterm_stops_the_run_cleanly_with_records_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let launcher = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi-launch/mpirun-local");
    let child = Command::new(&launcher)
        .env("AIPERF_BIN", env!("CARGO_BIN_EXE_aiperf"))
        .args([
            "3",
            "run",
            "--trainer",
            "simulated",
            "--duration",
            "300",
            "--group-size",
            "1",
            "--results",
        ])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the run to be under way: some epochs on record.
    let started = std::time::Instant::now();
    while !(dir.join("group-1.h5").exists() && started.elapsed().as_secs_f64() > 3.0) {
        assert!(started.elapsed().as_secs() < 60, "the run did not start");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // SIGTERM to every rank, as SLURM does at a time limit.
    let pids = rank_pids(&dir);
    assert_eq!(pids.len(), 3, "{pids:?}");
    Command::new("kill")
        .arg("-TERM")
        .args(&pids)
        .status()
        .unwrap();
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
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let launcher = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi-launch/mpirun-local");
    let started = std::time::Instant::now();
    let out = Command::new(&launcher)
        .env("AIPERF_BIN", env!("CARGO_BIN_EXE_aiperf"))
        .env("AIPERF_FAULT_HANG_GROUP", "1")
        .args(["4", "run", "--trainer", "simulated", "--group-size", "1"])
        .args(["--duration", "300", "--stall-timeout", "4", "--results"])
        .arg(&dir)
        .output()
        .unwrap();
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
    while !rank_pids(&dir).is_empty() {
        assert!(
            started.elapsed().as_secs() < 260,
            "ranks linger after the abort"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let run = read_run(&dir).unwrap();
    assert!(run.info.end_time_s.is_some());
    assert_eq!(run.groups.len(), 3);
    assert!(run.groups.iter().all(|g| !g.epochs.is_empty()));
    assert!(score(&run, 1.0).unwrap().ops_per_s > 0.0);
}

//! `aiperf run` with the real libtorch trainer under a real `mpirun`, on a tiny learnable
//! dataset written here (a bright quadrant tells the class): the records hold every epoch
//! in time order, each epoch's operations equal the op counter's prediction for its
//! architecture and the images and optimizer steps it ran, the time split and exchanged
//! bytes are filled in, the model learns, and every rank of a group held bit-identical
//! parameters after every epoch (the run aborts otherwise).

use std::path::Path;
use std::process::Command;

use aiperf::ops::OpCount;
use aiperf_records::score;

mod common;
use common::{
    mpirun, output, quadrants, rank_pids, read_run, read_with_architectures, run_failing, spawn,
    wait_released, write_split, StderrLog,
};

fn run(np: usize, data: &Path, results: &Path, extra: &[&str]) -> (String, String) {
    let out = output(
        mpirun(np)
            .args(["run", "--trainer", "real", "--data"])
            .arg(data)
            .arg("--results")
            .arg(results)
            .args([
                "--epochs",
                "4",
                "--batch-size",
                "8:24",
                "--threads",
                "1",
                "--score-interval",
                "2",
                "--status-interval",
                "1",
                "--monitor-interval",
                "1",
            ])
            .args(extra),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "np={np}: {stdout}{stderr}");
    (stdout, stderr)
}

/// Checks the records of a run whose groups have `ranks` ranks; returns the epochs counted.
fn check_records(dir: &Path, ranks: u64, train: u64, val: u64) -> usize {
    let (run, archs, batch_of) = read_with_architectures(dir);
    // The reviewers' recount agrees with every row the runtime wrote.
    let recount = aiperf_records::recount::recount(&run);
    assert!(recount.is_empty(), "{recount:?}");
    let mut epochs = 0;
    for g in &run.groups {
        assert!(!g.epochs.is_empty(), "group {} recorded no epoch", g.group);
        // Resource samples (no NVML here: accelerator fields NaN or measured), one a second
        // while the group runs (its monitor starts before its first epoch): how many
        // depends on how long 4 epochs take — none on a machine that trains them all within
        // a second, at least one where its epochs span two.
        let at = |e: Option<&aiperf_records::schema::EpochRow>| e.map_or(0.0, |e| e.time_s);
        let span_s = at(g.epochs.last()) - at(g.epochs.first());
        assert!(
            span_s < 2.0 || !g.monitor.is_empty(),
            "no monitor sample over epochs {span_s} s apart"
        );
        assert!(g.monitor.windows(2).all(|w| w[0].time_s < w[1].time_s));
        for m in &g.monitor {
            assert!(m.cpu_util > 0.0 && m.cpu_util <= 1.0, "cpu {}", m.cpu_util);
            assert!(m.host_mem_bytes > 0.0);
            assert!(m.accel_util.is_nan() || (0.0..=1.0).contains(&m.accel_util));
        }
        assert!(
            g.epochs.windows(2).all(|w| w[0].time_s < w[1].time_s),
            "group {}: times must increase",
            g.group
        );
        assert!(g.epochs.iter().all(|e| e.time_s >= run.info.start_time_s));
        for e in &g.epochs {
            let count = OpCount::of(&archs[&e.model_id]).unwrap();
            let Some(&batch) = batch_of.get(&e.model_id) else {
                continue; // the trial the deadline cut has no trial row
            };
            // Whole global batches only (drop-last): the steps follow from the images.
            let global = u64::from(batch) * ranks;
            assert_eq!(
                e.train_images,
                train / global * global,
                "model {}",
                e.model_id
            );
            let steps = e.train_images / global;
            assert_eq!(
                u128::from(e.train_ops),
                count.train_epoch(e.train_images, steps),
                "model {} epoch {}",
                e.model_id,
                e.epoch
            );
            assert_eq!(e.val_images, val);
            assert_eq!(u128::from(e.val_ops), count.eval_epoch(val));
            assert!(e.compute_s > 0.0 && e.data_wait_s >= 0.0 && e.allreduce_s >= 0.0);
            // Every step sends the whole gradient bucket: 4 bytes per trainable parameter.
            assert!(
                e.allreduce_bytes >= steps * 4 * count.params,
                "{} bytes for {steps} steps of {} parameters",
                e.allreduce_bytes,
                count.params
            );
            assert!((0.0..=1.0).contains(&e.val_accuracy) && e.train_loss.is_finite());
            epochs += 1;
        }
    }
    // The dataset identity comes from the packs' headers.
    let id: aiperf_records::rules::DatasetIdentity =
        serde_json::from_str(&run.info.dataset_json).unwrap();
    assert_eq!(
        (id.name.as_str(), id.train_images, id.val_images, id.classes),
        ("quadrants", 384, 96, 4)
    );
    assert_eq!(
        (id.stored, id.input, id.subset),
        ([1, 8, 8], [8, 8, 1], Some(false))
    );
    // --trace-steps 2: every rank's data wait, forward+backward, exchange and optimizer
    // spans of the first two steps of each epoch, on the common clock within the run.
    for g in &run.groups {
        for rank in 0..ranks as u32 {
            let kinds: std::collections::BTreeSet<u8> = g
                .trace
                .iter()
                .filter(|t| t.rank == rank)
                .map(|t| t.kind)
                .collect();
            assert_eq!(kinds, [0, 1, 2, 3].into(), "group {} rank {rank}", g.group);
        }
        assert!(g.trace.iter().all(|t| t.step < 2 && t.end_s >= t.start_s));
        // The exchange overlaps with backward: on every rank, some step has a
        // bucket's reduction starting before its forward+backward span ends (asked of one
        // step at least: a starved communication thread may start late in others).
        for rank in 0..ranks as u32 {
            let key = |t: &aiperf_records::schema::TraceRow| (t.model_id, t.epoch, t.step);
            let overlapped = g
                .trace
                .iter()
                .filter(|c| c.rank == rank && c.kind == 1)
                .any(|c| {
                    g.trace.iter().any(|e| {
                        e.rank == rank && e.kind == 2 && key(e) == key(c) && e.start_s < c.end_s
                    })
                });
            assert!(
                overlapped,
                "group {} rank {rank}: no reduction during backward",
                g.group
            );
        }
        assert!(g
            .trace
            .iter()
            .all(|t| t.start_s > run.info.start_time_s - 1.0));
    }
    let s = score(&run, 2.0).unwrap();
    assert!(s.ops_per_s > 0.0);
    assert_eq!(s.integrity.records, "intact");
    // Epochs cut by the deadline are abandoned, not recorded late.
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    assert!(
        s.best_accuracy > 0.6,
        "the quadrant task is easy; best accuracy {}",
        s.best_accuracy
    );
    epochs
}

#[test]
fn real_training_under_mpirun_with_groups_of_two_and_three_ranks() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("quadrants");
    std::fs::create_dir_all(&data).unwrap();
    write_split(&data, "train", 384, 1);
    write_split(&data, "val", 96, 2);
    // The 2-rank group copies the gradients through a host buffer (the path CUDA takes
    // without a CUDA-aware MPI), overlapped as well. The 3-rank group runs the device paths
    // on the CPU: augmentation by libtorch from the stored images, and the gradients as
    // views of one tensor handed to MPI in place.
    let host = ["--exchange-staging", "host"];
    let device = ["--augment-on", "device", "--exchange-staging", "device"];
    for (np, ranks, paths) in [(3usize, 2u64, &host[..]), (4, 3, &device[..])] {
        let results = tmp.path().join(format!("np{np}"));
        // Buckets of 4 KiB: several per step, so the exchange can overlap with backward.
        let flags = [
            &[
                "--duration",
                "600",
                "--stop-after-epochs",
                "4",
                "--trace-steps",
                "2",
                "--bucket-bytes",
                "4096",
            ][..],
            paths,
        ]
        .concat();
        let (out, err) = run(np, &data, &results, &flags);
        assert!(out.contains("score (sustained)"), "{out}");
        // An info line every trainer would log alike appears once.
        assert_eq!(err.matches("gradient exchange on").count(), 1, "{err}");
        assert!(
            err.contains(&format!("bit-identical on all {ranks} ranks")),
            "{err}"
        );
        // Rank 0's status line for batch logs.
        let status = err
            .lines()
            .find(|l| l.contains("status: 00:00:"))
            .unwrap_or_else(|| panic!("no status line: {err}"));
        assert!(
            status.contains("trials finished") && status.contains("OPS"),
            "{status}"
        );
        // Every group recorded epochs (checked there); the run ends once 4 are recorded,
        // however fast the machine.
        check_records(&results, ranks, 384, 96);
    }
}

#[test]
fn sigterm_abandons_the_epoch_in_progress_and_closes_the_records() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("quadrants");
    std::fs::create_dir_all(&data).unwrap();
    // Long epochs (750 steps), so the signal lands inside one.
    write_split(&data, "train", 12_000, 3);
    write_split(&data, "val", 96, 4);
    let dir = tmp.path().join("r");
    let child = spawn(
        mpirun(3)
            .args(["run", "--trainer", "real", "--data"])
            .arg(&data)
            .args([
                "--duration",
                "300",
                "--batch-size",
                "8",
                "--threads",
                "1",
                "--results",
            ])
            .arg(&dir),
    );
    let mut child = child;
    // The ranks' log, line by line (the records are open for writing, hence locked).
    let log = StderrLog::follow(&mut child);
    log.wait_for(std::time::Duration::from_secs(120), |l| {
        l.contains("epoch 1/")
    });
    std::thread::sleep(std::time::Duration::from_millis(700));
    let pids = rank_pids(&dir);
    assert_eq!(pids.len(), 3, "{pids:?}");
    assert!(output(Command::new("kill").arg("-TERM").args(&pids))
        .status
        .success());
    let signalled = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    let stderr = log.finish();
    assert!(out.status.success(), "{stderr}");
    assert!(
        signalled.elapsed().as_secs() < 60,
        "the group should stop inside the epoch, not finish the run"
    );
    wait_released(&dir, std::time::Duration::from_secs(60));
    let run = read_run(&dir).unwrap();
    assert!(run.warnings.is_empty(), "{:?}", run.warnings);
    let end = run
        .info
        .end_time_s
        .expect("a clean stop writes the end time");
    let last = run.groups[0].epochs.last().unwrap();
    assert!(last.time_s <= end, "an epoch after the end was recorded");
    assert!(String::from_utf8_lossy(&out.stdout).contains("score (sustained)"));
    // The epoch in progress at the signal was started and abandoned: the log says which,
    // and the records stop at the epoch before it.
    let abandoned = stderr
        .lines()
        .find(|l| l.contains("abandoned after"))
        .unwrap_or_else(|| panic!("no epoch was abandoned: {stderr}"));
    let model = last.model_id;
    let recorded = run.groups[0]
        .epochs
        .iter()
        .filter(|e| e.model_id == model)
        .count() as u32;
    assert!(
        abandoned.contains(&format!("model {model} epoch {}: abandoned", recorded + 1)),
        "{abandoned} (model {model}, {recorded} epochs recorded)"
    );
    assert!(
        stderr.contains(&format!("model {model} epoch {}/", recorded)),
        "the last recorded epoch completed before the signal"
    );
}

#[test]
fn regression_one_rank_groups_exchange_no_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let data = quadrants(tmp.path(), 384);
    let results = tmp.path().join("r");
    run(
        3,
        &data,
        &results,
        &[
            "--duration",
            "600",
            "--stop-after-epochs",
            "2",
            "--group-size",
            "1",
        ],
    );
    let run = read_run(&results).unwrap();
    let rows: Vec<_> = run.groups.iter().flat_map(|g| &g.epochs).collect();
    assert!(!rows.is_empty());
    assert!(
        rows.iter().all(|e| e.allreduce_bytes == 0),
        "one rank exchanges nothing"
    );
}

/// Settings that make every loss non-finite (within the bounds a preset admits): each trial ends `failed`, is
/// recorded, and the group goes on to the next one until the deadline.
#[test]
fn non_finite_losses_fail_trials_and_the_run_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    // Enough steps per epoch for the weights to overflow within the first one.
    let data = quadrants(tmp.path(), 6144);
    let printed =
        output(Command::new(env!("CARGO_BIN_EXE_aiperf")).args(["run", "--print-config"]));
    let mut preset: serde_json::Value = serde_json::from_slice(&printed.stdout).unwrap();
    // The largest rate and decay a preset admits (at most 100 and 1): each step multiplies
    // the weights by about 1 - lr·decay, so they overflow single precision within tens of
    // steps.
    preset["train"]["lr_per_256"] = serde_json::json!(100.0);
    preset["train"]["weight_decay"] = serde_json::json!(1.0);
    preset["train"]["momentum"] = serde_json::json!(0.99);
    let file = tmp.path().join("diverge.json");
    std::fs::write(&file, preset.to_string()).unwrap();
    let results = tmp.path().join("r");
    let config = file.to_str().unwrap();
    let flags = [
        "--duration",
        "600",
        "--stop-after-trials",
        "2",
        "--config",
        config,
    ];
    let err = run_failing(&data, &results, &flags);
    // Every trial diverges in its first epoch, so the run completes no epoch: it ends
    // cleanly once two trials ended, with nothing to score.
    assert!(
        err.contains("non-finite") && err.contains("nothing to score"),
        "{err}"
    );
    // The message names the settings that diverge, with their values.
    assert!(
        err.contains("every trial's loss was non-finite") && err.contains("train.lr_per_256 100"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let run = read_run(&results).unwrap();
    let failed = run
        .trials
        .iter()
        .filter(|t| t.status == aiperf_records::schema::TrialStatus::Failed)
        .count();
    assert!(
        failed >= 2,
        "{failed} failed trials: the group must go on after one"
    );
}

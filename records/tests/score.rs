//! The scoring step on record sets written by the writer, with answers computed by hand,
//! and on damaged or incomplete records.

mod common;

use std::process::Command;

use aiperf_records::schema::{EpochRow, MonitorRow, TpeRow};
use aiperf_records::score::Status;
use aiperf_records::writer::{GroupWriter, PrimaryWriter};
use aiperf_records::{read_run, score, RecordError};
use common::{close, epoch, held, meta, missing_prerequisite, serial, write_run, T0};

#[test]
fn golden_timeline_computed_by_hand() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    let run = read_run(tmp.path()).unwrap();
    let s = score(&run, 360.0).unwrap();
    // Grid 360, 720, then the end at 1000.
    let t: Vec<f64> = s.timeline.iter().map(|p| p.elapsed_s).collect();
    assert_eq!(t, vec![360.0, 720.0, 1000.0]);
    // 360 s: epochs at 100 (1100) and 350 (550).
    assert_eq!(s.timeline[0].ops, 1650);
    assert!(close(s.timeline[0].ops_per_s, 1650.0 / 360.0));
    assert!(close(s.timeline[0].error, 0.3));
    assert!(close(
        s.timeline[0].regulated,
        1650.0 / 360.0 * -(0.3f64).ln()
    ));
    // 720 s: + 2200 + 3300 (the epoch exactly on the grid point counts).
    assert_eq!(s.timeline[1].ops, 7150);
    // End: + 4400; the epoch at 1100 s is after the end and does not count.
    assert_eq!(s.timeline[2].ops, 11_550);
    assert!(close(s.ops_per_s, 11.55));
    assert!(close(s.regulated, 11.55 * -(0.2f64).ln()));
    assert!(close(s.ops_per_s_per_accelerator, 11.55 / 4.0));
    // Against the machine's ceiling: 4 accelerators × 30 operations per second (bf16, each
    // one's fastest), though the run trained in fp32 (4 × 10 beside it).
    assert!(close(s.efficiency.unwrap(), 11.55 / 120.0));
    assert_eq!(s.ceiling_run_precision, Some(40.0));
    assert_eq!(
        (s.train_ops, s.val_ops, s.epochs, s.trials),
        (10_500, 1050, 5, 1)
    );
    assert!(close(s.best_accuracy, 0.8));
    assert!(close(s.allreduce_bytes_per_s.unwrap(), 5000.0 / 5.0));
    assert!(s
        .warnings
        .iter()
        .any(|w| w.contains("1 epoch(s) recorded after the run's end")));
    // Not ImageNet and under an hour: invalid, with both reasons.
    assert_eq!(s.verdict.status, Status::Invalid);
    let why = s.verdict.reasons.join("\n");
    assert!(
        why.contains("1000.0, at least 3600 [/measured/duration_s]"),
        "{why}"
    );
    assert!(
        why.contains("\"fashion-mnist\", official \"imagenet\" [/dataset/name]"),
        "{why}"
    );
    assert_eq!(s.integrity.records, "intact");
}

#[test]
fn a_crashed_run_is_scored_to_its_last_epoch_with_a_warning() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), None);
    let s = score(&read_run(tmp.path()).unwrap(), 360.0).unwrap();
    assert_eq!(s.timeline.last().unwrap().elapsed_s, 1100.0);
    assert_eq!(s.timeline.last().unwrap().ops, 11_550 + 10_008);
    assert!(s
        .warnings
        .iter()
        .any(|w| w.contains("did not stop cleanly")));
    // With a digest from a job log, records without a run digest are not
    // "altered" (nothing was), but cannot match it: INVALID for want of a seal.
    let given =
        aiperf_records::digest::parse_hex(&"ab".repeat(32), aiperf_records::digest::Wanted::Run)
            .unwrap();
    let s = aiperf_records::score::score_with_digest(
        &read_run(tmp.path()).unwrap(),
        360.0,
        Some(&given),
        None,
    )
    .unwrap();
    assert_eq!(
        (s.integrity.records, s.integrity.digest_matches),
        ("incomplete", Some(false))
    );
    let line = aiperf_records::report::records_line(&s);
    assert_eq!(line, "incomplete: what is present is intact; no run digest");
    assert_eq!(
        aiperf_records::cli::Outcome::of(&s),
        aiperf_records::cli::Outcome::Invalid
    );
}

#[test]
fn a_missing_group_file_makes_the_run_invalid_naming_it() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    std::fs::remove_file(tmp.path().join("group-1.h5")).unwrap();
    let s = score(&read_run(tmp.path()).unwrap(), 360.0).unwrap();
    assert_eq!(s.timeline.last().unwrap().ops, 6600);
    assert_eq!(s.verdict.status, Status::Invalid);
    assert!(
        s.verdict
            .reasons
            .iter()
            .any(|w| w.contains("group-1.h5 is missing (primary.h5 records 2 groups)")),
        "{:?}",
        s.verdict.reasons
    );
    // The run digest is there: the reason is the missing file, never "no run digest".
    assert!(read_run(tmp.path()).unwrap().info.run_digest.is_some());
    assert!(
        !s.verdict
            .reasons
            .iter()
            .any(|w| w.starts_with("no run digest"))
            && s.verdict
                .reasons
                .iter()
                .any(|w| w.starts_with("a group file the run recorded is missing")),
        "{:?}",
        s.verdict.reasons
    );
    // The integrity line says what is known, naming the file.
    assert_eq!(
        aiperf_records::report::records_line(&s),
        "incomplete: what is present is intact; group-1.h5 is missing"
    );
    // With the only group file missing, the error names it.
    std::fs::remove_file(tmp.path().join("group-0.h5")).unwrap();
    let e = score(&read_run(tmp.path()).unwrap(), 360.0)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no completed epoch to score") && e.contains("group-0.h5 is missing"),
        "{e}"
    );
}

#[test]
fn damaged_records_give_clear_errors() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    // Not a run.
    let e = read_run(tmp.path()).unwrap_err();
    assert!(matches!(e, RecordError::NotARun(_)), "{e}");
    // Not HDF5.
    std::fs::write(tmp.path().join("primary.h5"), b"hello").unwrap();
    let e = read_run(tmp.path()).unwrap_err().to_string();
    assert!(
        e.contains("primary.h5") && e.contains("cannot open as HDF5"),
        "{e}"
    );
    // A schema this build does not know, and a group file of another schema than its run.
    let dir = tmp.path().join("current");
    write_run(&dir, Some(1000.0));
    for (version, expected) in [
        (8u32, "schema version 8"),
        (1, "\"schema_version\": 1, but primary.h5 has 7"),
    ] {
        {
            let f = hdf5::File::append(dir.join("group-0.h5")).unwrap();
            f.attr("schema_version")
                .unwrap()
                .write_scalar(&version)
                .unwrap();
        }
        let e = read_run(&dir).unwrap_err().to_string();
        assert!(e.contains("group-0.h5") && e.contains(expected), "{e}");
    }
    // NaN accuracy.
    let dir = tmp.path().join("nan");
    PrimaryWriter::create(&held(&dir), &meta(1))
        .unwrap()
        .finish(T0 + 10.0, &[])
        .unwrap();
    GroupWriter::create(&held(&dir), 0, 2)
        .unwrap()
        .append_epoch(&epoch(5.0, 1, 1, f64::NAN))
        .unwrap();
    let e = read_run(&dir).unwrap_err().to_string();
    assert!(
        e.contains("group-0.h5")
            && e.contains("epochs row 0, field val_accuracy")
            && e.contains("NaN"),
        "{e}"
    );
    // No epoch at all.
    let dir = tmp.path().join("empty");
    PrimaryWriter::create(&held(&dir), &meta(1))
        .unwrap()
        .finish(T0 + 10.0, &[])
        .unwrap();
    GroupWriter::create(&held(&dir), 0, 2).unwrap();
    let e = score(&read_run(&dir).unwrap(), 360.0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no completed epoch"), "{e}");
}

#[test]
fn a_truncated_file_is_an_error_naming_it() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cut");
    write_run(&dir, Some(1000.0));
    let bytes = std::fs::read(dir.join("group-1.h5")).unwrap();
    std::fs::write(dir.join("group-1.h5"), &bytes[..bytes.len() / 2]).unwrap();
    let e = read_run(&dir).unwrap_err().to_string();
    assert!(e.contains("group-1.h5"), "{e}");
}

#[test]
fn a_valid_official_run() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    common::official_run(tmp.path(), 3);
    let s = score(&read_run(tmp.path()).unwrap(), 360.0).unwrap();
    assert_eq!(s.verdict.status, Status::Valid, "{:?}", s.verdict.reasons);
    assert_eq!(s.timeline.len(), 11); // 10 grid points below 3700 s, then the end
    assert!(s.timeline[2].ops == 0 && s.timeline[3].ops > 0); // 1080 s, then 1440 s

    // One changed count, which alone would raise the score 440×: the recount refuses it and
    // names the row.
    let f = hdf5::File::open_rw(tmp.path().join("group-0.h5")).unwrap();
    let ds = f.dataset("epochs").unwrap();
    let mut rows: Vec<EpochRow> = ds.read_raw().unwrap();
    rows[1].train_ops *= 440;
    ds.write_raw(&rows).unwrap();
    drop((ds, f));
    let s = score(&read_run(tmp.path()).unwrap(), 360.0).unwrap();
    assert_eq!(s.verdict.status, Status::Invalid);
    let why = s.verdict.reasons.join("; ");
    assert!(
        why.contains("group-0.h5 epochs row 1 (model 0, epoch 2): train_ops")
            && why.contains("recomputed"),
        "{why}"
    );
    assert!(!why.contains("row 0 "), "the intact row passes: {why}");
}

#[test]
fn weak_scaling_table_over_runs() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    // One group (2 accelerators) and two groups (4) doing twice the work in the same time:
    // perfect weak scaling; then four groups at 90% per accelerator.
    for (name, groups, ops) in [("a", 1u32, 1000u64), ("b", 2, 1000), ("c", 4, 900)] {
        let dir = tmp.path().join(name);
        let p = PrimaryWriter::create(&held(&dir), &meta(groups)).unwrap();
        for g in 0..groups {
            GroupWriter::create(&held(&dir), g, 2)
                .unwrap()
                .append_epoch(&epoch(50.0, ops, 0, 0.5))
                .unwrap();
        }
        p.finish(T0 + 100.0, &[]).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_aiperf-score"))
        .args(["--scaling", "--interval", "60"])
        .args(["c", "a", "b"].map(|n| tmp.path().join(n)))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.code() == Some(4), // scored, INVALID (docs/reviewer.md, "Exit status")
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), 3);
    assert!(
        rows[0].trim_start().starts_with("2 ") && rows[0].contains("100.0%"),
        "{text}"
    );
    assert!(
        rows[1].trim_start().starts_with("4 ") && rows[1].contains("100.0%"),
        "{text}"
    );
    assert!(
        rows[2].trim_start().starts_with("8 ") && rows[2].contains("90.0%"),
        "{text}"
    );
}

#[test]
fn h5dump_reads_the_files() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    // h5dump only reads a closed file: no lock needed (a just-released one can linger).
    let Ok(out) = Command::new("h5dump")
        .env("HDF5_USE_FILE_LOCKING", "FALSE")
        .arg("-H")
        .arg(tmp.path().join("group-0.h5"))
        .output()
    else {
        return missing_prerequisite("h5dump", "hdf5-tools");
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("DATASET \"epochs\"") && text.contains("\"val_accuracy\""),
        "{text}"
    );
}

#[test]
fn missing_prerequisites_fail_when_make_test_requires_them() {
    // `h5dump_reads_the_files` again, in a child process that finds no h5dump on its PATH.
    let rerun = |require: bool| {
        let mut child = Command::new(std::env::current_exe().unwrap());
        child
            .args(["h5dump_reads_the_files", "--exact", "--nocapture"])
            .env("PATH", "/nonexistent");
        if require {
            child.env("AIPERF_REQUIRE_PREREQS", "1");
        } else {
            child.env_remove("AIPERF_REQUIRE_PREREQS");
        }
        let out = child.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text.into_owned())
    };
    let (passed, text) = rerun(true);
    assert!(
        !passed && text.contains("install the Debian package hdf5-tools"),
        "{text}"
    );
    let (passed, text) = rerun(false);
    assert!(passed && text.contains("SKIP: h5dump not found"), "{text}");
}

#[test]
fn the_cli_prints_the_summary_and_fails_cleanly() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    let bin = env!("CARGO_BIN_EXE_aiperf-score");
    let out = Command::new(bin)
        .arg(tmp.path())
        .arg("--csv")
        .arg(tmp.path().join("t.csv"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.code() == Some(4), // scored, INVALID (docs/reviewer.md, "Exit status")
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("score (sustained)        11.550 OPS"),
        "{text}"
    );
    assert!(text.contains("INVALID"), "{text}");
    let csv = std::fs::read_to_string(tmp.path().join("t.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4);
    let out = Command::new(bin)
        .arg(tmp.path())
        .arg("--json")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["timeline"][2]["ops"], 11_550);
    let out = Command::new(bin)
        .arg(tmp.path().join("nope"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no primary.h5 here"));
}

#[test]
fn report_folder_has_plots_and_a_page() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    let out_dir = tmp.path().join("report");
    let out = Command::new(env!("CARGO_BIN_EXE_aiperf-score"))
        .arg(tmp.path())
        .arg("--report")
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(
        out.status.code() == Some(4), // scored, INVALID (docs/reviewer.md, "Exit status")
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    assert!(
        html.contains("INVALID") && html.contains("<table>"),
        "{html}"
    );
    // The page says when plots.rs found no font (AIPERF_FONT or the standard paths).
    if html.contains("No plots") {
        return missing_prerequisite("a TrueType font for the plots", "fonts-dejavu-core");
    }
    for name in ["ops", "error", "trials", "utilisation"] {
        assert!(html.contains(&format!("<img src=\"{name}.svg\"")));
        let svg = std::fs::read_to_string(out_dir.join(format!("{name}.svg"))).unwrap();
        assert!(
            svg.starts_with("<svg") && (svg.contains("<polyline") || svg.contains("<rect")),
            "{name}.svg"
        );
        let png = std::fs::read(out_dir.join(format!("{name}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name}.png");
    }
    let ops_svg = std::fs::read_to_string(out_dir.join("ops.svg")).unwrap();
    assert!(ops_svg.contains("Sustained OPS and regulated score"));
}

#[test]
fn text_report_snapshot() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    let s = score(&read_run(tmp.path()).unwrap(), 360.0).unwrap();
    // Counted epochs: 40 s compute + 5 s all-reduce over 2 groups × 1000 s.
    assert!(
        (s.busy_fraction - 45.0 / 2000.0).abs() < 1e-12,
        "{}",
        s.busy_fraction
    );
    // The digest covers the run's start and every row: fixed here, checked in tests/trust.rs.
    let digest = s.integrity.run_digest.clone().unwrap();
    assert_eq!(digest.len(), 64);
    let text = aiperf_records::report::text(&s)
        .replace(&tmp.path().display().to_string(), "RUN")
        .replace(&digest, "DIGEST");
    assert_eq!(text, SNAPSHOT);
}

#[test]
fn the_monitor_samples_are_summarised_over_the_run_alone() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    // Group 0 has one sample without NVML (30 s, CPU 0.9, 1 GB); group 1 gets NVML ones,
    // two of them outside the run.
    let g1 = GroupWriter::open_or_create(&held(tmp.path()), 1, 2).unwrap();
    for (t, util, mem) in [
        (-5.0, 0.0, 1e9),
        (50.0, 0.5, 2e9),
        (60.0, 0.9, 3e9),
        (1001.0, 1.0, 9e9),
    ] {
        g1.append_monitor(&MonitorRow {
            time_s: T0 + t,
            accel_util: util,
            accel_mem_bytes: mem,
            cpu_util: 0.3,
            host_mem_bytes: 2e9,
        })
        .unwrap();
    }
    drop(g1);
    let s = score(&read_run(tmp.path()).unwrap(), 360.0).unwrap();
    let r = &s.resources;
    assert_eq!((r.samples, r.accel_samples), (3, 2), "{r:?}");
    assert!(close(r.accel_util_mean.unwrap(), 0.7), "{r:?}");
    assert_eq!(r.accel_util_max, Some(0.9));
    assert_eq!(r.accel_mem_peak_bytes, Some(3e9));
    assert!(close(r.cpu_util_mean.unwrap(), 0.5), "{r:?}");
    assert_eq!(r.host_mem_peak_bytes, Some(2e9));
    let text = aiperf_records::report::text(&s);
    assert!(
        text.contains("accelerator use          70.0% utilised (NVML, mean of 2 samples; max 90.0%), memory peak 3.000 GB"),
        "{text}"
    );
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["resources"]["accel_samples"], 2);
}

/// Values checked by hand in `golden_timeline_computed_by_hand` (e.g. 11.55 × −ln 0.2 = 18.589).
const SNAPSHOT: &str = "aiperf score: RUN
  score (sustained)        11.550 OPS
  regulated score          18.589 OPS
  per accelerator (  4)    2.888 OPS, regulated 4.647 OPS
  per node (  1)           11.550 OPS, regulated 18.589 OPS
  efficiency               9.6% of the machine's measured ceiling, 120.000 OPS (each accelerator's fastest precision); in the run's fp32 40.000 OPS, 28.9% of it (4 accelerator(s), each the best of 5 matrix products n=2048 at start-up on the run's ranks and threads: bf16 30.000 OPS (convolution 15.000 OPS); fp32 10.000 OPS (convolution 5.000 OPS))
  steady state             undefined: group(s) [0, 1] never finished their 3 warm-up trials
  converged                no: OPS 6.016 → 11.550 OPS over the last 360 s (+47.92%, tolerance ±2%)
  duration                 1000.0 s (0.28 h)
  best accuracy            0.8000 (error 20.00%)
  trials / epochs          1 / 5
  operations               train 10.500 k + validation 1.050 k
  time split               compute 80.0% / all-reduce 10.0% / data wait 10.0%
  accelerators busy        2.2% of the run (train/eval steps and exchanges, per group)
  all-reduce               5.000 kB in 5.0 s (1.000 kB/s per rank)
  exchange per epoch       1.000 kB/s median (min 1.000 kB/s, max 1.000 kB/s) per rank
  accelerator use          not monitored (no NVML sample among 1)
  host                     CPU 90.0% (mean of 1 samples), memory peak 1.000 GB
  records                  intact (run digest DIGEST)
  verdict (aiperf-rules-6)   INVALID
    - run length in seconds, at least 1 h (--duration): 1000.0, at least 3600 [/measured/duration_s]
    - model 0: recorded architecture: the graph must start with one Input node (found no nodes): the operations of its 6 epoch row(s) cannot be recomputed
    - no recorded architecture is the configured start architecture resnet8 (rebuilt for the dataset): the search did not start from it
    - group-0.h5 epochs row 0 (model 0, epoch 1): 100 training images in 4 steps and 10 validation images, but 20000 images per epoch in global batches of 64 (batch size 32 × 2 ranks) make 19968 in 312 steps, and the validation split gives 10000
    - group-0.h5 epochs row 1 (model 0, epoch 1): 100 training images in 4 steps and 10 validation images, but 20000 images per epoch in global batches of 64 (batch size 32 × 2 ranks) make 19968 in 312 steps, and the validation split gives 10000
    - group-0.h5 epochs row 2 (model 0, epoch 1): 100 training images in 4 steps and 10 validation images, but 20000 images per epoch in global batches of 64 (batch size 32 × 2 ranks) make 19968 in 312 steps, and the validation split gives 10000
    - group-1.h5 epochs row 0 (model 0, epoch 1): no trial row of group 1 trained model 0
    - group-1.h5 epochs row 1 (model 0, epoch 1): no trial row of group 1 trained model 0
    - and 1 more epoch rows whose images or steps do not follow
    - primary.h5 trials row 0 (group 0, model 0): 3 epochs of round 0, but group-0.h5 holds 3 rows of that model not numbered 1, 2, … in that round
    - group-0.h5 model 0: 0 early step(s) recorded, its first epoch of 4 steps needs steps 0 to 3 (32 at most): the audit compares them, so every trial records them
    - group-1.h5 model 0: 0 early step(s) recorded, its first epoch of 4 steps needs steps 0 to 3 (32 at most): the audit compares them, so every trial records them
    - dataset (--config, --data): \"fashion-mnist\", official \"imagenet\" [/dataset/name]
    - training images in the pack (--data): 60000, official 1281167 [/dataset/train_images]
    - validation images in the pack (--data): 10000, official 50000 [/dataset/val_images]
    - classes in the pack (--data): 10, official 1000 [/dataset/classes]
    - model input H×W×C (--config): [28,28,1], official [224,224,3] [/dataset/input]
    - training images per epoch, the whole split (--train-images): 20000, official: not set (the whole split) [/config/preset/train/train_images]
    - validation images per epoch, the whole split (--val-images): 10000, official: not set (the whole split) [/config/preset/train/val_images]
    - start architecture (--start): \"resnet8\", official \"resnet50\" [/config/preset/start]
    - epoch budget (--epochs): 8, official 60 [/config/preset/epochs]
  warning: 1 epoch(s) recorded after the run's end are not counted
  timeline (grid 360 s):
   elapsed s   error %             OPS       regulated
       360.0     30.00          4.583           5.518 
       720.0     30.00          9.931          11.956 
      1000.0     20.00         11.550          18.589 
";

#[test]
fn a_resumed_run_keeps_its_rows_counts_the_down_time_and_says_so() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    // A crashed run: no end time.
    write_run(tmp.path(), None);
    let before = read_run(tmp.path()).unwrap();
    assert!(before.info.end_time_s.is_none() && before.info.resumes.is_empty());
    // Resumed 200 s after its last record at T0 + 1100.
    {
        let p = PrimaryWriter::reopen(&held(tmp.path()), T0 + 1100.0, T0 + 1300.0).unwrap();
        let g0 = GroupWriter::open_or_create(&held(tmp.path()), 0, 2).unwrap();
        let g1 = GroupWriter::open_or_create(&held(tmp.path()), 1, 2).unwrap();
        g1.append_epoch(&epoch(1500.0, 7000, 700, 0.82)).unwrap();
        p.append_tpe(&TpeRow {
            time_s: T0 + 1500.0,
            batch_size: 64,
            kernel_size: 5,
            loss: 0.3,
            digest: [0; 32],
        })
        .unwrap();
        // The chains go on across the resumption.
        p.finish(T0 + 1600.0, &[g0.chain(), g1.chain()]).unwrap();
    }
    let after = read_run(tmp.path()).unwrap();
    assert_eq!(after.info.resumes, vec![(T0 + 1100.0, T0 + 1300.0)]);
    assert_eq!(after.info.end_time_s, Some(T0 + 1600.0));
    for (b, a) in before.groups.iter().zip(&after.groups) {
        assert_eq!(a.epochs[..b.epochs.len()], b.epochs[..], "rows kept");
    }
    assert_eq!(
        after.groups[1].epochs.len(),
        before.groups[1].epochs.len() + 1
    );
    assert_eq!(aiperf_records::read_tpe(tmp.path()).unwrap().len(), 2);
    let s = score(&after, 360.0).unwrap();
    // The down time is wall time: OPS over the whole 1600 s.
    assert_eq!(s.duration_s, 1600.0);
    assert_eq!((s.resumes, s.down_time_s), (1, 200.0));
    let total: u128 = after
        .groups
        .iter()
        .flat_map(|g| &g.epochs)
        .map(|e| u128::from(e.train_ops) + u128::from(e.val_ops))
        .sum();
    assert!((s.ops_per_s - total as f64 / 1600.0).abs() < 1e-9);
    let text = aiperf_records::report::text(&s);
    assert!(
        text.contains(
            "resumed                  1 time(s): 200.0 s of down time counted as wall time"
        ),
        "{text}"
    );
    // A second resumption appends to the list.
    PrimaryWriter::reopen(&held(tmp.path()), T0 + 1600.0, T0 + 1700.0)
        .unwrap()
        .finish(T0 + 1800.0, &[])
        .unwrap();
    assert_eq!(read_run(tmp.path()).unwrap().info.resumes.len(), 2);
}

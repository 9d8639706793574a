//! Regression tests named after the bugs they pin: unbounded grids and group loops from
//! damaged or absurd inputs, bandwidths computed from nothing exchanged, and rows the
//! reader must name precisely (NaN fields) or accept (failed trials).

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use aiperf_records::schema::{TrialRow, TrialStatus};
use aiperf_records::score::{grid, GridError, MAX_GRID_STEPS};
use aiperf_records::writer::{GroupWriter, PrimaryWriter};
use aiperf_records::{read_run, report, score};
use common::{epoch, held, meta, serial, trial, write_run, T0};

/// Runs `aiperf-score` with `args`, killing it after 20 s (a regression would hang).
fn aiperf_score(args: &[&std::ffi::OsStr]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_aiperf-score"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            panic!("aiperf-score {args:?} still runs after 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn interval_1e_300_is_refused_instead_of_an_unbounded_grid() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    let run = read_run(tmp.path()).unwrap();
    let e = score(&run, 1e-300).unwrap_err().to_string();
    assert!(
        e.contains("--interval 1e-300")
            && e.contains("run's 1000 s")
            && e.contains("use --interval 0.001 or more"),
        "{e}"
    );
    // The smallest step it suggests is accepted, and makes at most MAX_GRID_STEPS + 1 points.
    let s = score(&run, 0.001).unwrap();
    assert!(s.timeline.len() <= MAX_GRID_STEPS + 1);
    assert_eq!(s.timeline.last().unwrap().elapsed_s, 1000.0);
    let out = aiperf_score(&[
        tmp.path().as_os_str(),
        "--interval".as_ref(),
        "1e-300".as_ref(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--interval") && stderr.contains("1000 s"),
        "{stderr}"
    );
}

#[test]
fn nan_infinite_zero_and_negative_intervals_are_refused() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    let run = read_run(tmp.path()).unwrap();
    for bad in [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        -360.0,
    ] {
        let e = score(&run, bad).unwrap_err().to_string();
        assert!(
            e.contains("positive, finite number of seconds"),
            "{bad}: {e}"
        );
    }
    for bad in ["nan", "inf", "-inf", "0", "-5"] {
        let out = aiperf_score(&[tmp.path().as_os_str(), format!("--interval={bad}").as_ref()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bad}: {stderr}");
        assert!(stderr.contains("--interval"), "{bad}: {stderr}");
    }
}

#[test]
fn grid_is_bounded_whatever_it_is_given() {
    let started = Instant::now();
    for (duration, step) in [
        (1000.0, 1e-300),
        (1000.0, f64::MIN_POSITIVE),
        (f64::MAX, 1.0),
        (1e300, 1e-300),
    ] {
        assert!(
            matches!(grid(duration, step), Err(GridError::TooFine { .. })),
            "{duration} / {step}"
        );
    }
    for (duration, step) in [
        (f64::NAN, 1.0),
        (f64::INFINITY, 1.0),
        (-1.0, 1.0),
        (0.0, 1.0),
    ] {
        assert!(
            matches!(grid(duration, step), Err(GridError::Duration { .. })),
            "{duration}"
        );
    }
    assert_eq!(grid(1000.0, 360.0).unwrap(), vec![360.0, 720.0, 1000.0]);
    assert_eq!(grid(720.0, 360.0).unwrap(), vec![360.0, 720.0]);
    assert_eq!(grid(1.0, 360.0).unwrap(), vec![1.0]);
    // 999,999 steps before the end, then the end; one more step is refused.
    assert_eq!(grid(1e6, 1.0).unwrap().len(), MAX_GRID_STEPS);
    assert!(matches!(
        grid(1e6 + 2.0, 1.0),
        Err(GridError::TooFine { .. })
    ));
    // A generous bound (the defect took hours): milliseconds here, on a busy machine too.
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// Rewrites a scalar u32 attribute of `dir/primary.h5`.
fn set_u32(dir: &Path, name: &str, value: u32) {
    let f = hdf5::File::append(dir.join("primary.h5")).unwrap();
    f.attr(name).unwrap().write_scalar(&value).unwrap();
}

#[test]
fn a_groups_count_of_u32_max_is_refused_instead_of_four_billion_lookups() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    set_u32(tmp.path(), "groups", u32::MAX);
    let started = Instant::now();
    let e = read_run(tmp.path()).unwrap_err().to_string();
    // A generous bound (the defect took hours): milliseconds here, on a busy machine too.
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        e.contains("primary.h5")
            && e.contains("attribute \"groups\": 4294967295")
            && e.contains("4 accelerators make 1 to 4 groups"),
        "{e}"
    );
    set_u32(tmp.path(), "groups", 0);
    let e = read_run(tmp.path()).unwrap_err().to_string();
    assert!(e.contains("attribute \"groups\": 0"), "{e}");
}

#[test]
fn a_world_size_or_accelerator_count_that_disagrees_with_the_ranks_is_refused() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    // The accelerators bound the groups; the hosts and devices (one per rank) bound both.
    set_u32(tmp.path(), "accelerators", u32::MAX);
    let e = read_run(tmp.path()).unwrap_err().to_string();
    assert!(
        e.contains("attribute \"accelerators\"") && e.contains("a world of 5 ranks"),
        "{e}"
    );
    set_u32(tmp.path(), "accelerators", 4);
    set_u32(tmp.path(), "world_size", u32::MAX);
    let e = read_run(tmp.path()).unwrap_err().to_string();
    assert!(
        e.contains("primary.h5")
            && e.contains("attribute \"hosts\": 5 entries, but world_size is 4294967295"),
        "{e}"
    );
}

/// One group of `ranks` ranks whose epochs exchanged `bytes` in `seconds`.
fn exchange_run(dir: &Path, ranks: u32, bytes: u64, seconds: f64) {
    let p = PrimaryWriter::create(&held(dir), &meta(1)).unwrap();
    let g = GroupWriter::create(&held(dir), 0, ranks).unwrap();
    for t in [100.0, 200.0] {
        g.append_epoch(&aiperf_records::schema::EpochRow {
            allreduce_bytes: bytes,
            allreduce_s: seconds,
            ..epoch(t, 1000, 100, 0.5)
        })
        .unwrap();
    }
    p.finish(T0 + 300.0, &[]).unwrap();
}

#[test]
fn one_rank_groups_report_no_exchange_bandwidth() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    // Nothing exchanged, microseconds of call overhead; then records of an older aiperf
    // that counted a one-rank group's buffer as exchanged.
    for (name, bytes) in [("zero", 0u64), ("counted", 25_000_000)] {
        let dir = tmp.path().join(name);
        exchange_run(&dir, 1, bytes, 0.001_2);
        let s = score(&read_run(&dir).unwrap(), 60.0).unwrap();
        assert_eq!(s.allreduce_bytes_per_s, None, "{name}");
        assert_eq!(s.allreduce_epoch_bytes_per_s, None, "{name}");
        let text = report::text(&s);
        assert!(text.contains("(- B/s per rank)"), "{name}: {text}");
        assert!(!text.contains("exchange per epoch"), "{name}: {text}");
        let json: serde_json::Value = serde_json::to_value(&s).unwrap();
        assert!(json["allreduce_bytes_per_s"].is_null(), "{name}");
        assert!(json["allreduce_epoch_bytes_per_s"].is_null(), "{name}");
    }
    // A two-rank group does report its exchange.
    let dir = tmp.path().join("two");
    exchange_run(&dir, 2, 1000, 0.5);
    let s = score(&read_run(&dir).unwrap(), 60.0).unwrap();
    assert_eq!(s.allreduce_bytes_per_s, Some(2000.0));
    assert_eq!(
        s.allreduce_epoch_bytes_per_s,
        Some((2000.0, 2000.0, 2000.0))
    );
}

#[test]
fn zero_seconds_of_exchange_never_print_inf() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    exchange_run(tmp.path(), 2, 1000, 0.0);
    let s = score(&read_run(tmp.path()).unwrap(), 60.0).unwrap();
    assert_eq!(s.allreduce_bytes_per_s, None);
    let text = report::text(&s);
    assert!(!text.contains("inf") && !text.contains("NaN"), "{text}");
    assert!(text.contains("(- B/s per rank)"), "{text}");
}

#[test]
fn nan_in_an_epoch_row_names_the_file_the_row_and_the_field() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let p = PrimaryWriter::create(&held(tmp.path()), &meta(1)).unwrap();
    let g = GroupWriter::create(&held(tmp.path()), 0, 2).unwrap();
    g.append_epoch(&epoch(10.0, 1, 1, 0.5)).unwrap();
    g.append_epoch(&aiperf_records::schema::EpochRow {
        train_loss: f64::NAN,
        ..epoch(20.0, 1, 1, 0.5)
    })
    .unwrap();
    p.finish(T0 + 30.0, &[]).unwrap();
    let e = read_run(tmp.path()).unwrap_err().to_string();
    assert!(
        e.contains("group-0.h5: epochs row 1, field train_loss: NaN"),
        "{e}"
    );
}

#[test]
fn a_failed_trial_reads_back_and_its_completed_epochs_count() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let p = PrimaryWriter::create(&held(tmp.path()), &meta(1)).unwrap();
    let rows = [
        trial(),
        TrialRow {
            model_id: 1,
            epochs: 1,
            best_accuracy: f64::NAN, // a trial that failed may have no accuracy
            status: TrialStatus::Failed,
            ..trial()
        },
        TrialRow {
            model_id: 2,
            status: TrialStatus::Stopped,
            ..trial()
        },
    ];
    for row in &rows {
        p.append_trial(row).unwrap();
    }
    let g = GroupWriter::create(&held(tmp.path()), 0, 2).unwrap();
    g.append_epoch(&epoch(100.0, 1000, 100, 0.5)).unwrap();
    // The failed trial's one completed epoch.
    g.append_epoch(&aiperf_records::schema::EpochRow {
        trial: 1,
        model_id: 1,
        ..epoch(200.0, 2000, 200, 0.7)
    })
    .unwrap();
    p.finish(T0 + 400.0, &[]).unwrap();
    let run = read_run(tmp.path()).unwrap();
    assert_eq!(run.trials.len(), 3);
    assert_eq!(run.trials[1].status, TrialStatus::Failed);
    assert!(run.trials[1].best_accuracy.is_nan());
    assert_eq!(
        TrialRow {
            digest: [0; 32],
            ..run.trials[2]
        },
        rows[2]
    );
    let s = score(&run, 60.0).unwrap();
    assert_eq!((s.trials, s.trials_failed, s.trials_stopped), (3, 1, 1));
    assert_eq!((s.epochs, s.train_ops, s.val_ops), (2, 3000, 300));
    assert!((s.best_accuracy - 0.7).abs() < 1e-12);
    let text = report::text(&s);
    assert!(
        text.contains("trials / epochs          3 / 2 (1 failed, 1 cut by the run's end)"),
        "{text}"
    );
}

#[test]
fn an_unknown_trial_status_is_refused_naming_the_row_and_the_field() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let p = PrimaryWriter::create(&held(tmp.path()), &meta(1)).unwrap();
    let marked = TrialRow {
        model_id: 0x5eed_cafe_f00d_d00d,
        ..trial()
    };
    p.append_trial(&trial()).unwrap();
    p.append_trial(&marked).unwrap();
    GroupWriter::create(&held(tmp.path()), 0, 2)
        .unwrap()
        .append_epoch(&epoch(10.0, 1, 1, 0.5))
        .unwrap();
    p.finish(T0 + 30.0, &[]).unwrap();
    // The status is the row's byte 72 (after 9 fields of 8, 4 and 8 bytes).
    let path = tmp.path().join("primary.h5");
    let mut bytes = std::fs::read(&path).unwrap();
    let id = marked.model_id.to_le_bytes();
    let row = bytes.windows(8).position(|w| w == id).unwrap();
    assert_eq!(bytes[row + 72], 0);
    bytes[row + 72] = 7;
    std::fs::write(&path, bytes).unwrap();
    let e = read_run(tmp.path()).unwrap_err().to_string();
    assert!(
        e.contains("primary.h5: trials row 1, field status: 7 is not 0 (finished), 1 (stopped) or 2 (failed)"),
        "{e}"
    );
}

/// Regression: before the first completed epoch the report printed a regulated score of
/// "-0.000"; docs/design.md §5 says 0.
#[test]
fn regulated_score_before_any_epoch_is_zero_not_negative_zero() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    let s = score(&read_run(tmp.path()).unwrap(), 50.0).unwrap();
    let first = &s.timeline[0];
    assert_eq!((first.ops, first.error), (0, 1.0));
    assert!(first.regulated == 0.0 && first.regulated.is_sign_positive());
    assert!(!aiperf_records::report::text(&s).contains("-0.000"));
}

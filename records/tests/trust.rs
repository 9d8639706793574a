//! What a reviewer relies on: altered rows are found by the digest chains and
//! the recount, named by row; a digest copied from the job log is checked; missing fields
//! and files are errors or INVALID naming them; schema 1 reads as unverifiable; and the
//! edge cases of docs/design.md §5.

mod common;

use std::path::Path;
use std::process::Command;

use aiperf_records::schema::{EpochRow, MonitorRow, TrialStatus};
use aiperf_records::score::Status;
use aiperf_records::writer::{GroupWriter, PrimaryWriter};
use aiperf_records::{read_run, score};
use common::{epoch, held, meta, official_run, serial, trial, write_run, T0};

/// Rewrites the epochs of `group-0.h5` through HDF5, as an editor would.
fn edit_epochs(dir: &Path, edit: impl FnOnce(&mut Vec<EpochRow>)) {
    let f = hdf5::File::open_rw(dir.join("group-0.h5")).unwrap();
    let ds = f.dataset("epochs").unwrap();
    let mut rows: Vec<EpochRow> = ds.read_raw().unwrap();
    edit(&mut rows);
    ds.resize(rows.len()).unwrap();
    ds.write_raw(&rows).unwrap();
}

fn reasons(dir: &Path) -> (Status, String, &'static str) {
    let s = score(&read_run(dir).unwrap(), 360.0).unwrap();
    (
        s.verdict.status,
        s.verdict.reasons.join("\n"),
        s.integrity.records,
    )
}

/// `aiperf-score ARGS`: (exit status, stdout + stderr).
fn aiperf_score(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_aiperf-score"))
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text.into_owned())
}

#[test]
fn an_official_run_is_valid_and_its_records_intact() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    official_run(tmp.path(), 3);
    let (status, why, records) = reasons(tmp.path());
    assert_eq!((status, records), (Status::Valid, "intact"), "{why}");
}

#[test]
fn one_changed_op_count_is_found_by_the_chain_and_the_recount_naming_the_row() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    official_run(tmp.path(), 3);
    edit_epochs(tmp.path(), |rows| rows[1].train_ops *= 440);
    let (status, why, records) = reasons(tmp.path());
    assert_eq!((status, records), (Status::Invalid, "altered"));
    assert!(
        why.contains("group-0.h5 epochs row 1: its digest does not follow"),
        "{why}"
    );
    assert!(
        why.contains("group-0.h5 epochs row 1 (model 0, epoch 2): train_ops"),
        "{why}"
    );
    // The count restored and an accuracy raised instead: the chain breaks at that row.
    edit_epochs(tmp.path(), |rows| {
        rows[1].train_ops /= 440;
        rows[0].val_accuracy = 0.99;
    });
    let (_, why, _) = reasons(tmp.path());
    assert!(why.contains("epochs row 0: its digest"), "{why}");
}

#[test]
fn removed_or_resealed_rows_disagree_with_the_digests_primary_h5_recorded() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    official_run(tmp.path(), 3);
    // The last row dropped: the chain in the file is whole, but shorter than recorded.
    edit_epochs(tmp.path(), |rows| {
        rows.pop();
    });
    let (status, why, _) = reasons(tmp.path());
    assert_eq!(status, Status::Invalid);
    assert!(
        why.contains("group-0.h5 epochs: 2 rows") && why.contains("recorded 3"),
        "{why}"
    );
    // A row altered and the whole chain resealed with the public algorithm: the last digest
    // no longer matches the one primary.h5 recorded.
    let other = tempfile::tempdir().unwrap();
    official_run(other.path(), 3);
    edit_epochs(other.path(), |rows| {
        rows[2].val_accuracy = 0.9;
        let seed = aiperf_records::digest::chain_seed("group-0.h5", "epochs");
        aiperf_records::digest::seal(seed, rows);
    });
    let (status, why, _) = reasons(other.path());
    assert_eq!(status, Status::Invalid);
    assert!(
        why.contains("rows were removed, added or replaced"),
        "{why}"
    );
}

#[test]
fn an_edited_configuration_breaks_the_run_digest() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    official_run(tmp.path(), 2);
    let f = hdf5::File::open_rw(tmp.path().join("primary.h5")).unwrap();
    f.delete_attr("config").unwrap();
    let edited = common::OFFICIAL_CONFIG.replace("\"bf16\"", "\"fp32\"");
    let text: hdf5::types::VarLenUnicode = edited.parse().unwrap();
    f.new_attr::<hdf5::types::VarLenUnicode>()
        .create("config")
        .unwrap()
        .write_scalar(&text)
        .unwrap();
    drop(f);
    let (status, why, records) = reasons(tmp.path());
    assert_eq!((status, records), (Status::Invalid, "altered"));
    assert!(
        why.contains("primary.h5: its run digest does not match"),
        "{why}"
    );
}

#[test]
fn the_digest_from_the_job_log_is_checked() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    official_run(tmp.path(), 2);
    let s = score(&read_run(tmp.path()).unwrap(), 360.0).unwrap();
    let digest = s.integrity.run_digest.unwrap();
    let dir = tmp.path().as_os_str();
    let (code, text) = aiperf_score(&[dir, "--digest".as_ref(), digest.as_ref()]);
    assert_eq!(code, Some(0), "VALID, intact, matching: {text}");
    assert!(
        text.contains("intact (run digest") && text.contains("matches --digest"),
        "{text}"
    );
    assert!(
        text.contains("VALID") && !text.contains("INVALID"),
        "{text}"
    );
    let wrong = "0".repeat(64);
    let (code, text) = aiperf_score(&[dir, "--digest".as_ref(), wrong.as_ref()]);
    assert_eq!(code, Some(5), "scored, not the job's records: {text}");
    assert!(
        text.contains("INVALID") && text.contains("not the one given with --digest"),
        "{text}"
    );
    let (code, text) = aiperf_score(&[dir, "--digest".as_ref(), "abc".as_ref()]);
    assert!(
        code == Some(1) && text.contains("--digest") && text.contains("64 hex digits"),
        "{text}"
    );
    let (code, text) = aiperf_score(&[dir, dir, "--digest".as_ref(), digest.as_ref()]);
    assert!(code == Some(1) && text.contains("one run folder"), "{text}");
}

/// An epoch row without `train_ops`: a file from another producer.
#[derive(hdf5::H5Type, Clone, Copy)]
#[repr(C)]
struct NoTrainOps {
    time_s: f64,
    trial: u64,
    model_id: u64,
    epoch: u32,
    train_images: u64,
    steps: u64,
    val_images: u64,
    val_ops: u64,
    train_loss: f64,
    val_loss: f64,
    val_accuracy: f64,
    compute_s: f64,
    allreduce_s: f64,
    allreduce_bytes: u64,
    data_wait_s: f64,
    digest: [u8; 32],
}

/// A group file written by hand: its attributes, `epochs` of type `T`, no monitor rows.
fn hand_written_group<T: hdf5::H5Type>(dir: &Path, version: u32, rows: &[T]) {
    let f = hdf5::File::create(dir.join("group-0.h5")).unwrap();
    for (name, v) in [
        ("schema_version", version),
        ("group", 0),
        ("accelerators", 2),
    ] {
        f.new_attr::<u32>()
            .create(name)
            .unwrap()
            .write_scalar(&v)
            .unwrap();
    }
    f.new_dataset_builder()
        .with_data(rows)
        .create("epochs")
        .unwrap();
    f.new_dataset_builder()
        .with_data(&[] as &[MonitorRow])
        .create("monitor")
        .unwrap();
}

#[test]
fn a_missing_field_is_an_error_naming_the_file_and_the_field() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    PrimaryWriter::create(&held(tmp.path()), &meta(1))
        .unwrap()
        .finish(T0 + 10.0, &[])
        .unwrap();
    let row = NoTrainOps {
        time_s: T0 + 5.0,
        trial: 0,
        model_id: 0,
        epoch: 1,
        train_images: 1,
        steps: 1,
        val_images: 1,
        val_ops: 1,
        train_loss: 1.0,
        val_loss: 1.0,
        val_accuracy: 0.5,
        compute_s: 1.0,
        allreduce_s: 0.0,
        allreduce_bytes: 0,
        data_wait_s: 0.0,
        digest: [0; 32],
    };
    hand_written_group(tmp.path(), aiperf_records::schema::SCHEMA_VERSION, &[row]);
    let e = read_run(tmp.path()).unwrap_err().to_string();
    assert!(
        e.contains("group-0.h5")
            && e.contains("\"epochs\"")
            && e.contains("lacks the field(s) train_ops"),
        "{e}"
    );
    // A required attribute of primary.h5.
    let f = hdf5::File::open_rw(tmp.path().join("primary.h5")).unwrap();
    f.delete_attr("dataset_identity").unwrap();
    drop(f);
    let e = read_run(tmp.path()).unwrap_err().to_string();
    assert!(
        e.contains("primary.h5") && e.contains("dataset_identity"),
        "{e}"
    );
}

#[test]
fn a_group_file_beyond_the_recorded_groups_is_invalid_naming_it() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), Some(1000.0));
    std::fs::copy(tmp.path().join("group-1.h5"), tmp.path().join("group-2.h5")).unwrap();
    let (status, why, _) = reasons(tmp.path());
    assert_eq!(status, Status::Invalid);
    assert!(
        why.contains("group-2.h5 is present, but primary.h5 records 2 groups"),
        "{why}"
    );
}

/// A schema 1 epoch row (no steps, no digest).
#[derive(hdf5::H5Type, Clone, Copy)]
#[repr(C)]
struct V1Row {
    time_s: f64,
    trial: u64,
    model_id: u64,
    epoch: u32,
    train_images: u64,
    val_images: u64,
    train_ops: u64,
    val_ops: u64,
    train_loss: f64,
    val_loss: f64,
    val_accuracy: f64,
    compute_s: f64,
    allreduce_s: f64,
    allreduce_bytes: u64,
    data_wait_s: f64,
}

/// A trial row of schemas 1 and 2.
#[derive(hdf5::H5Type, Clone, Copy)]
#[repr(C)]
struct V1Trial {
    model_id: u64,
    father: i64,
    group: u32,
    round: u32,
    batch_size: u32,
    kernel_size: u32,
    epochs: u32,
    best_accuracy: f64,
    reported_accuracy: f64,
    start_s: f64,
    end_s: f64,
    status: TrialStatus,
}

/// A TPE row of schemas 1 and 2.
#[derive(hdf5::H5Type, Clone, Copy)]
#[repr(C)]
struct V1Tpe {
    time_s: f64,
    batch_size: u32,
    kernel_size: u32,
    loss: f64,
}

#[test]
fn schema_1_records_are_scored_but_reported_as_unverifiable() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let p = PrimaryWriter::create(&held(tmp.path()), &meta(1)).unwrap();
    p.finish(T0 + 1000.0, &[]).unwrap();
    let f = hdf5::File::open_rw(tmp.path().join("primary.h5")).unwrap();
    f.attr("schema_version")
        .unwrap()
        .write_scalar(&1u32)
        .unwrap();
    for name in [
        "dataset_identity",
        "search",
        "group_digests",
        "primary_digests",
        "run_digest",
    ] {
        f.delete_attr(name).unwrap();
    }
    // Schema 1's trials and TPE rows: no digests.
    for name in ["trials", "tpe"] {
        f.unlink(name).unwrap();
    }
    f.new_dataset_builder()
        .with_data(&[] as &[V1Trial])
        .create("trials")
        .unwrap();
    f.new_dataset_builder()
        .with_data(&[] as &[V1Tpe])
        .create("tpe")
        .unwrap();
    drop(f);
    let row = |t: f64, ops: u64, acc: f64| V1Row {
        time_s: T0 + t,
        trial: 0,
        model_id: 0,
        epoch: 1,
        train_images: 100,
        val_images: 10,
        train_ops: ops,
        val_ops: 0,
        train_loss: 1.0,
        val_loss: 1.0,
        val_accuracy: acc,
        compute_s: 1.0,
        allreduce_s: 0.0,
        allreduce_bytes: 0,
        data_wait_s: 0.0,
    };
    hand_written_group(
        tmp.path(),
        1,
        &[row(100.0, 4000, 0.5), row(500.0, 6000, 0.6)],
    );
    let s = score(&read_run(tmp.path()).unwrap(), 360.0).unwrap();
    assert_eq!(s.ops_per_s, 10.0);
    assert_eq!(s.integrity.records, "unverifiable");
    assert_eq!(s.verdict.status, Status::Invalid);
    let why = s.verdict.reasons.join("\n");
    assert!(why.contains("schema 1 records are not sealed"), "{why}");
    let text = aiperf_records::report::text(&s);
    assert!(text.contains("unverifiable (schema 1"), "{text}");
}

#[test]
fn edge_cases_of_the_score() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    // Accuracy 1, a grid point equal to the end (720 = 2 × 360), an epoch before t0, no
    // epoch by the first grid point.
    let p = PrimaryWriter::create(&held(tmp.path()), &meta(1)).unwrap();
    let g = GroupWriter::create(&held(tmp.path()), 0, 2).unwrap();
    g.append_epoch(&epoch(-5.0, 10, 0, 0.2)).unwrap();
    g.append_epoch(&epoch(500.0, 700, 0, 1.0)).unwrap();
    // Written after the row before it, completed before it: a clock that jumped back.
    g.append_epoch(&epoch(400.0, 10, 0, 0.3)).unwrap();
    let chain = g.chain();
    drop(g);
    p.finish(T0 + 720.0, &[chain]).unwrap();
    let s = score(&read_run(tmp.path()).unwrap(), 360.0).unwrap();
    let grid: Vec<f64> = s.timeline.iter().map(|p| p.elapsed_s).collect();
    assert_eq!(grid, vec![360.0, 720.0], "the end is not repeated");
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("before the run's start")),
        "{:?}",
        s.warnings
    );
    assert!(
        s.warnings.iter().any(|w| w.contains("error taken as 1e-9")),
        "{:?}",
        s.warnings
    );
    // The error shown is the floored one the regulated score uses.
    assert_eq!(s.timeline[1].error, 1e-9);
    assert!(
        (s.regulated - 1.0 * -(1e-9f64).ln()).abs() < 1e-9,
        "{}",
        s.regulated
    );
}

#[test]
fn the_default_grid_step_is_the_recorded_presets() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let m = aiperf_records::writer::RunMeta {
        platform: Vec::new(),
        ceilings: Vec::new(),
        config_json: common::SMALL_CONFIG
            .replace("\"score_interval_s\":360.0", "\"score_interval_s\":250.0"),
        ..meta(1)
    };
    let p = PrimaryWriter::create(&held(tmp.path()), &m).unwrap();
    let g = GroupWriter::create(&held(tmp.path()), 0, 2).unwrap();
    g.append_epoch(&epoch(600.0, 10, 0, 0.5)).unwrap();
    p.append_trial(&trial()).unwrap();
    let chain = g.chain();
    drop(g);
    p.finish(T0 + 1000.0, &[chain]).unwrap();
    let (code, text) = aiperf_score(&[tmp.path().as_os_str(), "--json".as_ref()]);
    assert_eq!(code, Some(4), "scored, INVALID: {text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v[0]["interval_s"], 250.0);
    let grid: Vec<f64> = v[0]["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["elapsed_s"].as_f64().unwrap())
        .collect();
    assert_eq!(grid, vec![250.0, 500.0, 750.0, 1000.0]);
    // The stability figures and per-node score are in the JSON too.
    assert_eq!(v[0]["nodes"], 1);
    assert!(v[0]["stability"]["window_s"].as_f64().unwrap() == 360.0);
    assert_eq!(trial().status, TrialStatus::Finished);
    let (code, text) = aiperf_score(&[
        tmp.path().as_os_str(),
        "--interval".as_ref(),
        "500".as_ref(),
        "--json".as_ref(),
    ]);
    assert_eq!(code, Some(4), "scored, INVALID: {text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v[0]["interval_s"], 500.0);
}

/// An epoch row written from a misread layout: `epoch` as u64.
#[derive(hdf5::H5Type, Clone, Copy)]
#[repr(C)]
struct WideEpoch {
    time_s: f64,
    trial: u64,
    model_id: u64,
    epoch: u64,
    train_images: u64,
    steps: u64,
    val_images: u64,
    train_ops: u64,
    val_ops: u64,
    train_loss: f64,
    val_loss: f64,
    val_accuracy: f64,
    compute_s: f64,
    allreduce_s: f64,
    allreduce_bytes: u64,
    data_wait_s: f64,
    digest: [u8; 32],
}

/// A file packed from the documentation but not as documented is refused with a message
/// that says what differs.
#[test]
fn a_layout_other_than_the_schemas_is_refused_saying_what_differs() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    PrimaryWriter::create(&held(tmp.path()), &meta(1))
        .unwrap()
        .finish(T0 + 10.0, &[])
        .unwrap();
    let row = WideEpoch {
        time_s: T0 + 1.0,
        trial: 0,
        model_id: 0,
        epoch: 1,
        train_images: 1,
        steps: 1,
        val_images: 1,
        train_ops: 1,
        val_ops: 1,
        train_loss: 1.0,
        val_loss: 1.0,
        val_accuracy: 0.5,
        compute_s: 1.0,
        allreduce_s: 0.0,
        allreduce_bytes: 0,
        data_wait_s: 0.0,
        digest: [0; 32],
    };
    hand_written_group(tmp.path(), aiperf_records::schema::SCHEMA_VERSION, &[row]);
    let e = read_run(tmp.path()).unwrap_err().to_string();
    assert!(
        e.contains("group-0.h5")
            && e.contains(&format!(
                "is not laid out as schema {} says",
                aiperf_records::schema::SCHEMA_VERSION
            ))
            && e.contains("member epoch at byte 24 as")
            && !e.contains("member train_images"),
        "{e}"
    );
}

/// The exit status is the verdict (docs/reviewer.md, "Exit status"): a script that gates on it
/// cannot pass altered records or a failed audit.
#[test]
fn the_exit_status_tells_valid_unofficial_invalid_altered_audit_failed_and_errors_apart() {
    let _serial = serial();
    let code = |dir: &Path, extra: &[&str]| {
        let mut args: Vec<&std::ffi::OsStr> = vec![dir.as_os_str()];
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        aiperf_score(&args).0
    };
    let valid = tempfile::tempdir().unwrap();
    let logged = aiperf_records::digest::hex(&official_run(valid.path(), 3));
    assert_eq!(code(valid.path(), &["--digest", &logged]), Some(0));
    // UNOFFICIAL: a 30-epoch budget, everything else official and consistent.
    let unofficial = tempfile::tempdir().unwrap();
    official_run(unofficial.path(), 3);
    let config = common::OFFICIAL_CONFIG.replace("\"epochs\":60", "\"epochs\":30");
    common::reseal::set_text(unofficial.path(), "config", &config);
    common::reseal::reseal(unofficial.path(), 1);
    assert_eq!(code(unofficial.path(), &[]), Some(3));
    // INVALID: a short run.
    let invalid = tempfile::tempdir().unwrap();
    write_run(invalid.path(), Some(1000.0));
    assert_eq!(code(invalid.path(), &[]), Some(4));
    // ALTERED: the digest from the job log does not match; or a row edited.
    assert_eq!(code(unofficial.path(), &["--digest", &logged]), Some(5));
    edit_epochs(valid.path(), |rows| rows[0].val_accuracy = 0.99);
    assert_eq!(code(valid.path(), &[]), Some(5));
    // The worst of several runs.
    assert_eq!(
        aiperf_score(&[unofficial.path().as_os_str(), valid.path().as_os_str()]).0,
        Some(5)
    );
    // A failed audit beside VALID records.
    let audited = tempfile::tempdir().unwrap();
    let hex = aiperf_records::digest::hex(&official_run(audited.path(), 3));
    let run = read_run(audited.path()).unwrap();
    let r = run.groups[0].epochs[0];
    let retrained = aiperf_records::audit::Retrained {
        figures: aiperf_records::schema::EpochFigures {
            val_accuracy: r.val_accuracy - 0.2,
            ..r.figures()
        },
        train_ops: r.train_ops,
        val_ops: r.val_ops,
        seconds: 1.0,
    };
    let audit = aiperf_records::audit::Audit {
        run_digest: hex.clone(),
        draw: 0,
        sample_seed: 1,
        trials: 1,
        epochs: 1,
        ranks: 2,
        threads: 1,
        mode: aiperf_records::audit::Mode::Exact,
        mode_reason: "the run's platform".into(),
        seeds: 1,
        alpha: 0.01,
        timed: false,
        platform_json: "{}".into(),
        verdict: "FAILED".into(),
        rows: vec![aiperf_records::audit::row(0, &r, &retrained, 1.0)],
        seed_rows: Vec::new(),
        step_rows: Vec::new(),
    };
    let sealed = audit.write(&audited.path().join("audit.h5")).unwrap();
    // Unverified, a failed audit does not decide the exit status; with its digest it does.
    assert_eq!(code(audited.path(), &["--digest", &hex]), Some(0));
    let audit_hex = aiperf_records::digest::hex(&sealed);
    assert_eq!(
        code(
            audited.path(),
            &["--digest", &hex, "--audit-digest", &audit_hex]
        ),
        Some(6)
    );
    // Errors: unreadable records 1, a command line clap refuses 2.
    assert_eq!(code(&audited.path().join("nope"), &[]), Some(1));
    assert_eq!(code(audited.path(), &["--no-such-flag"]), Some(2));
}

/// An audit is checked against the records it names: its rows must be the sample its draw
/// gives these records (with the best trial) and show the records' own figures. The
/// committed `make run` set's audit passes; the same audit rewritten without one trial, or
/// showing another figure as recorded, and resealed, is not theirs.
#[test]
fn an_audit_whose_sample_or_recorded_figures_are_not_the_records_is_not_trusted() {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/run-1796354114");
    let run = read_run(&committed).unwrap();
    let digest = aiperf_records::integrity::check(&run, None).run_digest;
    let s = aiperf_records::audit::summary_for(&run, digest.as_deref(), None).unwrap();
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    let original = aiperf_records::audit::read(&committed, digest.as_deref())
        .unwrap()
        .unwrap()
        .audit;
    let rewritten = |edit: &dyn Fn(&mut aiperf_records::audit::Audit)| {
        let tmp = tempfile::tempdir().unwrap();
        for f in ["primary.h5", "group-0.h5"] {
            std::fs::copy(committed.join(f), tmp.path().join(f)).unwrap();
        }
        let mut a = original.clone();
        edit(&mut a);
        a.verdict = aiperf_records::audit::judge(&a).verdict.into();
        a.write(&tmp.path().join("audit.h5")).unwrap();
        let run = read_run(tmp.path()).unwrap();
        let s = aiperf_records::audit::summary_for(&run, digest.as_deref(), None).unwrap();
        (s.verdict, s.problems.join("\n"))
    };
    let (verdict, why) = rewritten(&|a| {
        let last = a.rows.last().unwrap().model_id;
        a.rows.retain(|r| r.model_id != last);
    });
    assert_eq!(verdict, "NOT TRUSTED");
    assert!(
        why.contains("which are not the sample its draw gives these records"),
        "{why}"
    );
    let (verdict, why) = rewritten(&|a| a.rows[0].val_accuracy[0] += 0.01);
    assert_eq!(verdict, "NOT TRUSTED");
    assert!(
        why.contains("its recorded figures are not the records' epoch row"),
        "{why}"
    );
    let (verdict, why) = rewritten(&|a| a.sample_seed ^= 1);
    assert_eq!(verdict, "NOT TRUSTED");
    assert!(why.contains("is not the one its draw"), "{why}");
}

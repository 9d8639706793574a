//! What a reviewer reads off the scorer: the score's edge cases (docs/design.md §5), the
//! default grid step taken from the recorded preset, the exit status that tells valid,
//! unofficial, invalid, altered, audit-failed and errors apart, and an audit whose sample or
//! figures are not the records' own shown as not trusted.

mod common;

use std::path::Path;

use aiperf_records::schema::TrialStatus;
use aiperf_records::writer::{GroupWriter, PrimaryWriter};
use aiperf_records::{read_run, score};
use common::{
    aiperf_score, edit_epochs, epoch, held, meta, official_run, serial, trial, write_run, T0,
};

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

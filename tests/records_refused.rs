//! What every reader of a run's records refuses alike: a recorded setting whose value this
//! aiperf does not know is refused by `aiperf score`, `aiperf audit` and
//! `aiperf run --resume` with one message (one reader of the recorded configuration), and an
//! `audit.h5` that is a link to nothing is refused by `aiperf audit` before it re-trains.

use std::path::Path;
use std::process::Command;

use aiperf_records::writer::{PrimaryWriter, RunMeta};

/// One test at a time: HDF5 opens files without close-on-exec, so a child `aiperf` spawned
/// by one test while another holds a file open inherits that file's lock and keeps it.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A stopped run's `primary.h5` in `dir` whose recorded memory format is `format`.
fn stopped_run(dir: &Path, format: &str) {
    let config = serde_json::json!({
        "trainer": "real",
        "preset": {"name": "fashion-mnist", "duration_s": 60.0, "train": {"memory_format": format}}
    });
    let meta = RunMeta {
        program_version: "test".into(),
        config_json: config.to_string(),
        start_time_s: 1.0e9,
        world_size: 2,
        groups: 1,
        accelerators: 1,
        hosts: vec!["node0".into(); 2],
        devices: vec!["primary".into(), "cpu (1 threads)".into()],
        seed: 1,
        dataset: "fashion-mnist".into(),
        start_architecture: "resnet8".into(),
        precision: "fp32".into(),
        dataset_json: "{}".into(),
        platform: Vec::new(),
        ceilings: Vec::new(),
        search_json: "{}".into(),
    };
    drop(
        PrimaryWriter::create(
            &aiperf_records::folder::held_by(dir, "aiperf records test").expect("claim"),
            &meta,
        )
        .unwrap(),
    );
}

fn aiperf(args: &[&str], dir: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_aiperf"))
        .args(args)
        .arg(dir)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text.into_owned())
}

#[test]
fn regression_an_unknown_recorded_value_is_refused_by_score_audit_and_resume_alike() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    stopped_run(tmp.path(), "weird");
    let why = format!(
        "{}: attribute \"config\": train.memory_format is \"weird\", which this aiperf does not know (it knows auto, nchw, channels-last)",
        tmp.path().join("primary.h5").display()
    );
    for args in [&["score"][..], &["audit"], &["run", "--resume"]] {
        let (code, text) = aiperf(args, tmp.path());
        assert_eq!(code, Some(1), "{args:?}: {text}");
        assert!(text.contains(&why), "{args:?}: {text}");
    }
    // A known value passes the same reader (the score then reads on).
    let known = tempfile::tempdir().unwrap();
    stopped_run(known.path(), "channels-last");
    let (_, text) = aiperf(&["score"], known.path());
    assert!(!text.contains("does not know"), "{text}");
}

#[test]
fn regression_an_audit_h5_linking_to_nothing_is_refused_before_anything_is_retrained() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    stopped_run(tmp.path(), "nchw");
    std::os::unix::fs::symlink(tmp.path().join("moved.h5"), tmp.path().join("audit.h5")).unwrap();
    let (code, text) = aiperf(&["audit"], tmp.path());
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "{}: a link to {}, which does not exist",
            tmp.path().join("audit.h5").display(),
            tmp.path().join("moved.h5").display()
        )),
        "{text}"
    );
}

#[test]
fn regression_a_primary_of_another_schema_than_its_group_files_is_an_error_naming_both() {
    let _serial = serial();
    // A schema-3 primary.h5 beside group files of this schema: no run writes that (it would
    // also be the way to make a platform-naming run look like one that names none).
    let tmp = tempfile::tempdir().unwrap();
    stopped_run(tmp.path(), "nchw");
    drop(
        aiperf_records::writer::GroupWriter::create(
            &aiperf_records::folder::held_by(tmp.path(), "aiperf records test").expect("claim"),
            0,
            1,
        )
        .unwrap(),
    );
    let f = hdf5::File::open_rw(tmp.path().join("primary.h5")).unwrap();
    f.attr("schema_version")
        .unwrap()
        .write_scalar(&3u32)
        .unwrap();
    drop(f);
    let current = aiperf_records::schema::SCHEMA_VERSION;
    let (code, text) = aiperf(&["score"], tmp.path());
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("group-0.h5")
            && text.contains(&format!(
                "\"schema_version\": {current}, but primary.h5 has 3"
            ))
            && text.contains("come from two runs or were altered"),
        "{text}"
    );
}

//! What every reader of a run's records refuses alike: a recorded setting whose value this
//! aiperf does not know is refused by `aiperf score`, `aiperf audit` and
//! `aiperf run --resume` with one message (one reader of the recorded configuration), and an
//! `audit.h5` that is a link to nothing is refused by `aiperf audit` before it re-trains.

use std::path::Path;
use std::process::Command;

use aiperf_records::writer::{PrimaryWriter, RunMeta};

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
    drop(PrimaryWriter::create(dir, &meta).unwrap());
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

//! Physical consistency (rules-4): records edited as a dishonest submitter would,
//! every chain and the run digest resealed, are refused by what the records say of each
//! other — no digest from a job log needed — each reason naming the row.

mod common;

use std::path::Path;

use aiperf_records::schema::{attr, EpochRow, TrialRow};
use aiperf_records::score::Status;
use aiperf_records::{read_run, score, writer::PrimaryWriter};
use common::reseal::{edit_rows, reseal, set_number, set_text};
use common::{official_run, serial, small_run, IMAGENET, OFFICIAL_CONFIG, OFFICIAL_SEARCH, T0};

/// The verdict and its reasons, one per line; the records must verify (a complete reseal).
fn verdict(dir: &Path) -> (Status, String) {
    let s = score(&read_run(dir).unwrap(), 360.0).unwrap();
    assert_eq!(s.integrity.records, "intact", "{:?}", s.integrity);
    (s.verdict.status, s.verdict.reasons.join("\n"))
}

fn assert_has(why: &str, parts: &[&str]) {
    for p in parts {
        assert!(why.contains(p), "missing {p:?} in:\n{why}");
    }
}

#[test]
fn honest_fixtures_pass_every_consistency_rule() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    official_run(tmp.path(), 4);
    let (status, why) = verdict(tmp.path());
    assert_eq!(status, Status::Valid, "{why}");
    let small = tempfile::tempdir().unwrap();
    small_run(small.path(), 4);
    let run = read_run(small.path()).unwrap();
    assert!(aiperf_records::consistency::check(&run, 0.0).is_empty());
}

/// A relabelled run: a Fashion-MNIST run's records rewritten to the official configuration,
/// dataset identity and search record, its start moved back an hour, all resealed.
#[test]
fn a_small_run_relabelled_as_official_is_invalid_naming_the_rows() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    small_run(tmp.path(), 4);
    let config = OFFICIAL_CONFIG.replace("3700.0", "4600.0");
    set_text(tmp.path(), attr::CONFIG, &config);
    set_text(tmp.path(), attr::DATASET_IDENTITY, IMAGENET);
    set_text(tmp.path(), attr::SEARCH, OFFICIAL_SEARCH);
    set_text(tmp.path(), attr::START_ARCH, "resnet50");
    set_text(tmp.path(), attr::DATASET, "imagenet");
    set_number(tmp.path(), attr::START_TIME, T0 - 3600.0);
    reseal(tmp.path(), 1);
    let (status, why) = verdict(tmp.path());
    assert_eq!(status, Status::Invalid);
    assert_has(
        &why,
        &[
            "primary.h5 architectures row 0 (model 0): takes 28×28×1 inputs with 10 classes, but the dataset has 224×224×3 and 1000",
            "fewer than the start architecture's",
            "no recorded architecture is the configured start architecture resnet50",
            "group-0.h5 epochs row 0 (model 0, epoch 1): 19968 training images in 312 steps",
            "group-0.h5 epochs row 0: the group's first epoch completed 3850 s after the run's start",
        ],
    );
}

#[test]
fn a_moved_end_or_halved_accelerators_are_invalid() {
    let _serial = serial();
    // The end moved later: a short run made to look an hour long.
    let tmp = tempfile::tempdir().unwrap();
    official_run(tmp.path(), 4);
    set_number(tmp.path(), attr::END_TIME, T0 + 7200.0);
    reseal(tmp.path(), 1);
    let (status, why) = verdict(tmp.path());
    assert_eq!(status, Status::Invalid);
    assert_has(&why, &["end_time_s is 1800007200", "deadline"]);
    // The end moved to the last epoch's completion... and the configured duration with it:
    // the epochs no longer fill the run.
    let tmp = tempfile::tempdir().unwrap();
    official_run(tmp.path(), 4);
    set_text(
        tmp.path(),
        attr::CONFIG,
        &OFFICIAL_CONFIG.replace("3700.0", "7400.0"),
    );
    set_number(tmp.path(), attr::END_TIME, T0 + 7400.0);
    reseal(tmp.path(), 1);
    let (_, why) = verdict(tmp.path());
    assert_has(
        &why,
        &["group-0.h5 epochs row 3: the group's last epoch completed 3700 s before the run's end"],
    );
    // Accelerators halved (the per-accelerator score would double): the group file's ranks
    // no longer fit, and the reader refuses the records.
    let tmp = tempfile::tempdir().unwrap();
    official_run(tmp.path(), 4);
    set_number(tmp.path(), attr::ACCELERATORS, 1u32);
    set_number(tmp.path(), attr::WORLD_SIZE, 2u32);
    set_text(tmp.path(), attr::HOSTS, r#"["node0","node0"]"#);
    set_text(
        tmp.path(),
        attr::DEVICES,
        r#"["primary","cpu (1 threads)"]"#,
    );
    reseal(tmp.path(), 1);
    let e = read_run(tmp.path()).unwrap_err().to_string();
    assert!(
        e.contains("group-0.h5") && e.contains("accelerators"),
        "{e}"
    );
    // Accelerators that the group files do not hold.
    let tmp = tempfile::tempdir().unwrap();
    official_run(tmp.path(), 4);
    set_number(tmp.path(), attr::ACCELERATORS, 3u32);
    set_number(tmp.path(), attr::WORLD_SIZE, 4u32);
    set_text(tmp.path(), attr::HOSTS, r#"["n","n","n","n"]"#);
    set_text(
        tmp.path(),
        attr::DEVICES,
        r#"["primary","cpu (1 threads)","cpu (1 threads)","cpu (1 threads)"]"#,
    );
    reseal(tmp.path(), 1);
    let (_, why) = verdict(tmp.path());
    assert_has(
        &why,
        &["accelerators is 3, but the group files hold 2 ranks"],
    );
}

#[test]
fn simulated_devices_trial_rows_steps_and_times_that_disagree_are_invalid() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    official_run(tmp.path(), 4);
    set_text(
        tmp.path(),
        attr::DEVICES,
        r#"["primary","simulated 1e12 OPS","cpu (1 threads)"]"#,
    );
    edit_rows::<TrialRow>(tmp.path(), "primary.h5", "trials", |t| {
        t[0].best_accuracy = 0.99
    });
    edit_rows::<EpochRow>(tmp.path(), "group-0.h5", "epochs", |e| {
        e[1].steps += 1;
        // Epoch 3 squeezed into 20 s after epoch 2.
        e[2].time_s = e[1].time_s + 20.0;
    });
    reseal(tmp.path(), 1);
    let (status, why) = verdict(tmp.path());
    assert_eq!(status, Status::Invalid);
    assert_has(
        &why,
        &[
            "the trainer is real, but devices lists \"simulated 1e12 OPS\"",
            "primary.h5 trials row 0 (group 0, model 0): best accuracy 0.99, but its epoch rows' best is 0.74",
            "group-0.h5 epochs row 1 (model 0, epoch 2): 1281152 training images in 20019 steps",
            "group-0.h5 model 0:",
            "more than 10× apart",
        ],
    );
}

#[test]
fn trial_end_times_do_not_move_the_warm_up_end() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    official_run(tmp.path(), 4);
    // Three trials: rounds 0–2 all of model 0's rows is not possible, so the third trial's
    // rows are renumbered as round 2 and its trial row says it ended at the start.
    edit_rows::<EpochRow>(tmp.path(), "group-0.h5", "epochs", |e| {
        for r in e.iter_mut() {
            r.trial = 2;
        }
    });
    edit_rows::<TrialRow>(tmp.path(), "primary.h5", "trials", |t| {
        t[0].round = 2;
        t[0].status = aiperf_records::schema::TrialStatus::Finished;
        t[0].end_s = T0 + 1.0;
    });
    reseal(tmp.path(), 1);
    let s = score(&read_run(tmp.path()).unwrap(), 360.0).unwrap();
    // The last of the rows of rounds 0–2 completed at the end: the warm-up ends there.
    assert_eq!(s.stability.warmup_end_s, Some(3700.0));
}

#[test]
fn records_from_the_documentation_alone_and_records_without_a_run_digest_are_invalid() {
    let _serial = serial();
    // A "ResNet-50" of two convolutions on ImageNet, with matching op counts.
    let tmp = tempfile::tempdir().unwrap();
    official_run(tmp.path(), 4);
    let tiny = r#"{"nodes":[{"name":"input","layer":{"Input":{"shape":{"c":3,"h":224,"w":224}}},"inputs":[]}]}"#;
    let f = hdf5::File::open_rw(tmp.path().join("primary.h5")).unwrap();
    let json: Vec<hdf5::types::VarLenUnicode> = vec![tiny.parse().unwrap()];
    common::reseal::rewrite(&f, "architectures", &json);
    drop(f);
    reseal(tmp.path(), 1);
    let (status, why) = verdict(tmp.path());
    assert_eq!(status, Status::Invalid);
    assert_has(
        &why,
        &["no recorded architecture is the configured start architecture resnet50"],
    );
    // A run that never stopped cleanly holds no run digest: never VALID.
    let tmp = tempfile::tempdir().unwrap();
    official_run(tmp.path(), 4);
    let f = hdf5::File::open_rw(tmp.path().join("primary.h5")).unwrap();
    for name in [
        attr::RUN_DIGEST,
        attr::GROUP_DIGESTS,
        attr::PRIMARY_DIGESTS,
        attr::END_TIME,
    ] {
        f.delete_attr(name).unwrap();
    }
    drop(f);
    let s = score(&read_run(tmp.path()).unwrap(), 360.0).unwrap();
    assert_eq!(s.verdict.status, Status::Invalid);
    assert!(
        s.verdict
            .reasons
            .iter()
            .any(|r| r.starts_with("no run digest")),
        "{:?}",
        s.verdict.reasons
    );
    let _ = PrimaryWriter::create; // the writer is what made these records
}

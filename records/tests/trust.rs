//! What a reviewer relies on: altered rows are found by the digest chains and
//! the recount, named by row; a digest copied from the job log is checked; missing fields
//! and files are errors or INVALID naming them; schema 1 reads as unverifiable; a layout
//! other than the schema's is refused. What the scorer's verdicts and exit status say:
//! records/tests/verdicts.rs.

mod common;

use std::path::Path;

use aiperf_records::schema::{MonitorRow, TrialStatus};
use aiperf_records::score::Status;
use aiperf_records::writer::PrimaryWriter;
use aiperf_records::{read_run, score};
use common::{aiperf_score, edit_epochs, held, meta, official_run, serial, write_run, T0};

fn reasons(dir: &Path) -> (Status, String, &'static str) {
    let s = score(&read_run(dir).unwrap(), 360.0).unwrap();
    (
        s.verdict.status,
        s.verdict.reasons.join("\n"),
        s.integrity.records,
    )
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

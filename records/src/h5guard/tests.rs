//! The HDF5 guard against files it must refuse, and files it must accept.

use super::*;
use crate::writer::{PrimaryWriter, RunMeta};

/// One HDF5 file at a time (see `tests/common/mod.rs`: this HDF5 reports spurious lock
/// conflicts between threads).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn meta() -> RunMeta {
    RunMeta {
        platform: Vec::new(),
        ceilings: Vec::new(),
        program_version: "test".into(),
        config_json: "{}".into(),
        start_time_s: 1.8e9,
        world_size: 2,
        groups: 1,
        accelerators: 1,
        hosts: vec!["a".into(), "b".into()],
        devices: vec!["primary".into(), "cpu".into()],
        seed: 1,
        dataset: "d".into(),
        start_architecture: "s".into(),
        precision: "fp32".into(),
        dataset_json: "{}".into(),
        search_json: "{}".into(),
    }
}

#[test]
fn every_string_of_a_written_file_is_checked() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    // A configuration and architectures longer than a 4096-byte heap collection.
    let m = RunMeta {
        config_json: "x".repeat(10_000),
        ..meta()
    };
    let p = PrimaryWriter::create(
        &crate::folder::held_by(tmp.path(), "aiperf records test").expect("claim"),
        &m,
    )
    .unwrap();
    for id in 0..300 {
        let json = "{\"layers\": []}".repeat(id as usize % 7 + (id == 7) as usize * 3000);
        p.append_architecture(id, &json).unwrap();
    }
    p.finish(1.8e9 + 10.0, &[]).unwrap();
    let bytes = std::fs::read(tmp.path().join("primary.h5")).unwrap();
    // 15 text attributes (with the dataset identity, the search record, the platform, the
    // ceilings, the group and primary digests and the run digest) and 300 architectures
    // (two chunks of 256 rows).
    assert_eq!(check_file(&bytes), Ok(315));
}

#[test]
fn a_chunk_b_tree_of_several_levels_passes() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    // 40,000 rows: 157 chunks, more than one B-tree node holds (64).
    let row = crate::schema::EpochRow {
        time_s: 1.8e9,
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
    crate::writer::GroupWriter::create(
        &crate::folder::held_by(tmp.path(), "aiperf records test").expect("claim"),
        0,
        1,
    )
    .unwrap()
    .append_epochs(&vec![row; 40_000])
    .unwrap();
    let bytes = std::fs::read(tmp.path().join("group-0.h5")).unwrap();
    assert_eq!(check_file(&bytes), Ok(0));
}

#[test]
fn a_damaged_heap_index_is_refused_before_hdf5_reads_it() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    PrimaryWriter::create(
        &crate::folder::held_by(tmp.path(), "aiperf records test").expect("claim"),
        &meta(),
    )
    .unwrap()
    .finish(1.8e9 + 10.0, &[])
    .unwrap();
    let mut bytes = std::fs::read(tmp.path().join("primary.h5")).unwrap();
    // program_version "test": length 4, the first collection, object 1.
    let heap = bytes.windows(4).position(|w| w == b"GCOL").unwrap() as u64;
    let mut reference = 4u32.to_le_bytes().to_vec();
    reference.extend(heap.to_le_bytes());
    reference.extend(1u32.to_le_bytes());
    let at = bytes.windows(16).position(|w| w == reference).unwrap();
    bytes[at + 12..at + 16].copy_from_slice(&70_000u32.to_le_bytes());
    let e = check_file(&bytes).unwrap_err();
    assert!(e.contains("object 70000"), "{e}");
    bytes[at + 12..at + 16].copy_from_slice(&1u32.to_le_bytes());
    bytes[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
    let e = check_file(&bytes).unwrap_err();
    assert!(e.contains("length 1, its heap object 4 bytes"), "{e}");
}

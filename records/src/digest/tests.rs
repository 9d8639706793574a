use super::*;
use crate::schema::{MonitorRow, TrialStatus};

fn row(i: u64) -> EpochRow {
    EpochRow {
        time_s: 1000.0 + i as f64,
        trial: 0,
        model_id: i,
        epoch: 1,
        train_images: 10,
        steps: 2,
        val_images: 5,
        train_ops: 100,
        val_ops: 10,
        train_loss: 1.0,
        val_loss: 1.0,
        val_accuracy: 0.5,
        compute_s: 1.0,
        allreduce_s: 0.0,
        allreduce_bytes: 0,
        data_wait_s: 0.0,
        digest: [0; 32],
    }
}

/// The documented encoding, written out by hand: the members' little-endian bytes in
/// member order, without `digest` (results/README.md, "Digests").
#[test]
fn an_epoch_row_is_encoded_as_documented() {
    let r = row(3);
    let mut h = Sha256::new();
    let prev = [7u8; 32];
    h.update(prev);
    h.update(r.time_s.to_le_bytes());
    h.update(r.trial.to_le_bytes());
    h.update(r.model_id.to_le_bytes());
    h.update(r.epoch.to_le_bytes());
    for v in [
        r.train_images,
        r.steps,
        r.val_images,
        r.train_ops,
        r.val_ops,
    ] {
        h.update(v.to_le_bytes());
    }
    for v in [
        r.train_loss,
        r.val_loss,
        r.val_accuracy,
        r.compute_s,
        r.allreduce_s,
    ] {
        h.update(v.to_le_bytes());
    }
    h.update(r.allreduce_bytes.to_le_bytes());
    h.update(r.data_wait_s.to_le_bytes());
    let want: Digest = h.finalize().into();
    assert_eq!(row_digest(&prev, &r), want);
    // The stored digest is not part of the encoding.
    let mut with = r;
    with.digest = [9; 32];
    assert_eq!(row_digest(&prev, &with), want);
}

#[test]
fn a_trial_row_encodes_its_status_as_one_byte_and_a_scalar_row_as_itself() {
    let t = TrialRow {
        model_id: 1,
        father: -1,
        group: 2,
        round: 3,
        batch_size: 4,
        kernel_size: 5,
        epochs: 6,
        best_accuracy: 0.5,
        reported_accuracy: 0.25,
        start_s: 10.0,
        end_s: 20.0,
        status: TrialStatus::Stopped,
        digest: [0; 32],
    };
    let mut h = Sha256::new();
    h.update([0u8; 32]);
    h.update(1u64.to_le_bytes());
    h.update((-1i64).to_le_bytes());
    for v in [2u32, 3, 4, 5, 6] {
        h.update(v.to_le_bytes());
    }
    for v in [0.5f64, 0.25, 10.0, 20.0] {
        h.update(v.to_le_bytes());
    }
    h.update([1u8]);
    let want: Digest = h.finalize().into();
    assert_eq!(row_digest(&[0; 32], &t), want);
    let mut h = Sha256::new();
    h.update([0u8; 32]);
    h.update(42u64.to_le_bytes());
    let want: Digest = h.finalize().into();
    assert_eq!(row_digest(&[0; 32], &42u64), want);
}

#[test]
fn a_sealed_chain_is_intact_and_any_changed_field_breaks_it_at_that_row() {
    let seed = chain_seed("group-1.h5", "epochs");
    let mut rows: Vec<_> = (0..4).map(row).collect();
    let last_digest = seal(seed, &mut rows);
    assert_eq!(first_broken(seed, &rows), None);
    assert_eq!(chain(seed, &rows), last_digest);
    // Another file's seed: broken from the first row.
    assert_eq!(
        first_broken(chain_seed("group-2.h5", "epochs"), &rows),
        Some(0)
    );
    let edits: [fn(&mut EpochRow); 5] = [
        |r| r.train_ops += 1,
        |r| r.val_accuracy = 0.99,
        |r| r.time_s -= 1e-6,
        |r| r.steps = 1,
        |r| r.data_wait_s = 1.0,
    ];
    for edit in edits {
        let mut altered = rows.clone();
        edit(&mut altered[2]);
        assert_eq!(first_broken(seed, &altered), Some(2));
    }
    let mut cut = rows.clone();
    cut.remove(1);
    assert_eq!(first_broken(seed, &cut), Some(1));
    // A chain without carried digests still ends elsewhere after any edit.
    let m = |cpu_util| MonitorRow {
        time_s: 1.0,
        accel_util: f64::NAN,
        accel_mem_bytes: f64::NAN,
        cpu_util,
        host_mem_bytes: 1.0,
    };
    assert_ne!(chain(seed, &[m(0.5)]), chain(seed, &[m(0.25)]));
    assert_ne!(
        architecture_chain(seed, &[(0, "{}".into())]),
        architecture_chain(seed, &[(1, "{}".into())])
    );
}

#[test]
fn the_run_digest_covers_every_name_presence_and_value_and_hex_round_trips() {
    let base = run_digest(&[("a", Some(AttrValue::U32(1))), ("b", None)]);
    for other in [
        vec![("a", Some(AttrValue::U32(2))), ("b", None)],
        vec![("a", Some(AttrValue::U64(1))), ("b", None)],
        vec![("c", Some(AttrValue::U32(1))), ("b", None)],
        vec![
            ("a", Some(AttrValue::U32(1))),
            ("b", Some(AttrValue::Text("".into()))),
        ],
        vec![("a", Some(AttrValue::U32(1)))],
    ] {
        assert_ne!(base, run_digest(&other), "{other:?}");
    }
    assert_eq!(parse_hex(&hex(&base), Wanted::Run).unwrap(), base);
    assert_eq!(
        parse_hex(&hex(&base).to_uppercase(), Wanted::Run).unwrap(),
        base
    );
    let run = parse_hex("abc", Wanted::Run).unwrap_err();
    assert!(run.contains("64 hex digits of the \"run digest\""), "{run}");
    assert!(parse_hex(&"g".repeat(64), Wanted::Run).is_err());
    // Each flag names the digest it wants, not the other one.
    for bad in ["", "abc", &"g".repeat(64)] {
        let audit = parse_hex(bad, Wanted::Audit).unwrap_err();
        assert!(
            audit.contains("\"audit digest\" that `aiperf audit` printed"),
            "{audit}"
        );
        assert!(!audit.contains("run digest"), "{audit}");
    }
}

use super::*;
use crate::schema::TrialStatus;

fn trial(epochs: u32) -> TrialRow {
    TrialRow {
        model_id: 0,
        father: -1,
        group: 0,
        round: 0,
        batch_size: 8,
        kernel_size: 3,
        epochs,
        best_accuracy: 0.5,
        reported_accuracy: 0.5,
        start_s: 0.0,
        end_s: 1.0,
        status: TrialStatus::Finished,
        digest: [0; 32],
    }
}

fn epoch_row() -> EpochRow {
    EpochRow {
        time_s: 1.0,
        trial: 0,
        model_id: 4,
        epoch: 2,
        train_images: 64,
        steps: 2,
        val_images: 10,
        train_ops: 100,
        val_ops: 10,
        train_loss: 1.0,
        val_loss: 2.0,
        val_accuracy: 0.5,
        compute_s: 1.0,
        allreduce_s: 0.0,
        allreduce_bytes: 0,
        data_wait_s: 0.0,
        digest: [0; 32],
    }
}

fn retrained(r: &EpochRow) -> Retrained {
    Retrained {
        train_images: r.train_images,
        steps: r.steps,
        val_images: r.val_images,
        train_ops: r.train_ops,
        val_ops: r.val_ops,
        train_loss: r.train_loss,
        val_loss: r.val_loss,
        val_accuracy: r.val_accuracy,
    }
}

#[test]
fn the_sample_depends_only_on_the_seed_and_skips_trials_without_epochs() {
    let trials: Vec<TrialRow> = (0..20)
        .map(|i| trial(if i % 5 == 0 { 0 } else { 2 }))
        .collect();
    let a = sample(&trials, 4, 7);
    assert_eq!(a, sample(&trials, 4, 7));
    assert_eq!(a.len(), 4);
    assert!(a.windows(2).all(|w| w[0] < w[1]));
    assert!(a.iter().all(|&i| trials[i].epochs > 0));
    // Another seed draws another sample (for these seeds), and n beyond the eligible takes all.
    assert_ne!(a, sample(&trials, 4, 8));
    assert_eq!(sample(&trials, 100, 7).len(), 16);
    // The seed follows the run digest.
    assert_ne!(sample_seed(&[0; 32]), sample_seed(&[1; 32]));
}

#[test]
fn bit_exact_and_tolerant_comparisons() {
    let r = epoch_row();
    let same = retrained(&r);
    assert_eq!(compare(1, &r, &same, true).agrees, 1);
    let close = Retrained {
        val_accuracy: 0.52,
        train_loss: 1.05,
        ..same
    };
    assert_eq!(compare(1, &r, &close, true).agrees, 0);
    assert_eq!(compare(1, &r, &close, false).agrees, 1);
    let far = Retrained {
        val_accuracy: 0.6,
        ..same
    };
    assert_eq!(compare(1, &r, &far, false).agrees, 0);
    // Counts must be equal in either mode.
    let steps = Retrained { steps: 3, ..same };
    let row = compare(1, &r, &steps, false);
    assert_eq!(row.agrees, 0);
    assert_eq!(
        differences(&row),
        "group 1 model 4 epoch 2: steps recorded 2, re-trained 3"
    );
}

#[test]
fn an_audit_round_trips_sealed_and_an_edit_or_another_run_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let r = epoch_row();
    let audit = Audit {
        run_digest: "ab".repeat(32),
        sample_seed: 9,
        trials: 1,
        epochs: 1,
        ranks: 2,
        threads: 1,
        mode: "bit-exact".into(),
        verdict: "PASSED".into(),
        rows: vec![compare(0, &r, &retrained(&r), true)],
    };
    audit.write(&tmp.path().join(AUDIT_FILE)).unwrap();
    let written = std::fs::read(tmp.path().join(AUDIT_FILE)).unwrap();
    let back = read(tmp.path(), Some(&"AB".repeat(32))).unwrap().unwrap();
    assert!(back.problems.is_empty(), "{:?}", back.problems);
    assert_eq!(back.audit.verdict, "PASSED");
    assert_eq!(back.audit.rows[0].train_loss, [1.0, 1.0]);
    // Never replaced; written under a temporary name, renamed whole: none is left behind.
    let again = audit.write(&tmp.path().join(AUDIT_FILE)).unwrap_err();
    assert!(
        again.to_string().contains("an audit is never replaced"),
        "{again}"
    );
    assert_eq!(std::fs::read(tmp.path().join(AUDIT_FILE)).unwrap(), written);
    let names: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [AUDIT_FILE]);
    // The audit of other records.
    let other = read(tmp.path(), Some(&"cd".repeat(32))).unwrap().unwrap();
    assert!(
        other.problems[0].contains("another run's audit"),
        "{:?}",
        other.problems
    );
    // A verdict edited to hide a failed row.
    let f = hdf5::File::open_rw(tmp.path().join(AUDIT_FILE)).unwrap();
    let ds = f.dataset("epochs").unwrap();
    let mut rows: Vec<AuditRow> = ds.read_raw().unwrap();
    rows[0].val_accuracy[1] = 0.9;
    ds.write_raw(&rows).unwrap();
    drop((ds, f));
    let edited = read(tmp.path(), Some(&"ab".repeat(32))).unwrap().unwrap();
    assert!(
        edited.problems.iter().any(|p| p.contains("epochs row 0")),
        "{:?}",
        edited.problems
    );
}

use super::*;
use crate::schema::{EpochFigures, TrialStatus};

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
        figures: r.figures(),
        train_ops: r.train_ops,
        val_ops: r.val_ops,
        seconds: 2.0,
    }
}

fn audit(mode: Mode, rows: Vec<AuditRow>, seed_rows: Vec<SeedRow>) -> Audit {
    Audit {
        run_digest: "ab".repeat(32),
        draw: 3,
        sample_seed: 9,
        trials: 1,
        epochs: 1,
        ranks: 2,
        threads: 1,
        mode,
        mode_reason: "test".into(),
        seeds: 1 + seed_rows.len() as u32,
        alpha: 0.01,
        timed: false,
        platform_json: "{}".into(),
        verdict: "PASSED".into(),
        rows,
        seed_rows,
        step_rows: Vec::new(),
    }
}

/// A statistical audit of `n` epochs, each re-trained `s` times with accuracies spread
/// ±0.01 about the record plus `shift` on the record of epoch `raised`.
fn spread_audit(n: u32, s: u32, raised: u32, shift: f64) -> Audit {
    let mut rows = Vec::new();
    let mut seeds = Vec::new();
    for e in 1..=n {
        let mut r = EpochRow {
            epoch: e,
            ..epoch_row()
        };
        let sway = |k: u32| if k.is_multiple_of(2) { 0.01 } else { -0.01 };
        let mut first = retrained(&r);
        first.figures.val_accuracy += sway(0);
        first.figures.train_loss *= 1.0 + sway(1);
        first.figures.val_loss *= 1.0 + sway(0);
        if e == raised {
            r.val_accuracy += shift;
        }
        rows.push(row(0, &r, &first, 2.0));
        for k in 1..s {
            let mut other = retrained(&r);
            other.figures.val_accuracy = 0.5 + sway(k);
            other.figures.train_loss = 1.0 * (1.0 + sway(k + 1));
            other.figures.val_loss = 2.0 * (1.0 + sway(k));
            seeds.push(seed_row(0, &r, k, 100 + u64::from(k), &other));
        }
    }
    audit(Mode::Statistical, rows, seeds)
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
    // The seed follows the run digest and the reviewer's draw.
    assert_ne!(sample_seed(&[0; 32], 5), sample_seed(&[0; 32], 6));
    assert_ne!(sample_seed(&[0; 32], 5), sample_seed(&[1; 32], 5));
}

#[test]
fn exact_mode_wants_every_bit_and_counts_are_exact_in_any_mode() {
    let r = epoch_row();
    let same = retrained(&r);
    assert_eq!(
        judge(&audit(Mode::Exact, vec![row(1, &r, &same, 2.0)], vec![])).verdict,
        "PASSED"
    );
    let close = Retrained {
        figures: EpochFigures {
            val_accuracy: 0.5 + 1e-12,
            ..same.figures
        },
        ..same
    };
    let j = judge(&audit(Mode::Exact, vec![row(1, &r, &close, 2.0)], vec![]));
    assert_eq!(j.verdict, "FAILED");
    assert!(
        j.failures[0].starts_with(
            "group 1 model 4 epoch 2: val_accuracy recorded 0.5, re-trained 0.500000000001"
        ),
        "{:?}",
        j.failures
    );
    // A repeat (timed) that differs fails too: the platform is not deterministic.
    let repeat = seed_row(1, &r, 1, 7, &close);
    let j = judge(&audit(
        Mode::Exact,
        vec![row(1, &r, &same, 2.0)],
        vec![repeat],
    ));
    assert_eq!(j.verdict, "FAILED");
    let steps = Retrained {
        figures: EpochFigures {
            steps: 3,
            ..same.figures
        },
        ..same
    };
    let j = judge(&audit(
        Mode::Statistical,
        vec![row(1, &r, &steps, 2.0)],
        vec![],
    ));
    assert!(
        j.failures
            .contains(&"group 1 model 4 epoch 2: steps recorded 2, re-trained 3".to_string()),
        "{:?}",
        j.failures
    );
}

#[test]
fn statistical_mode_accepts_the_spread_and_names_a_raised_value_with_its_power() {
    // Eight epochs, four re-trainings each, spread ±0.01.
    let honest = judge(&spread_audit(8, 4, 0, 0.0));
    assert_eq!(honest.verdict, "PASSED", "{:?}", honest.failures);
    assert_eq!(honest.findings.len(), 24);
    // Each epoch its own stratum of 3 degrees of freedom (8 × 3 over the strata); one-sided,
    // Bonferroni over 24 values at α/2 = 0.005.
    let p = &honest.power[2];
    // (the stratum's spread a median, worth ⌈(2/π) · 3⌉ = 2 degrees of freedom).
    assert_eq!((p.value, p.df), ("val_accuracy", 16));
    let critical = stats::t_quantile(1.0 - 0.005 / 24.0, 2.0);
    assert!((honest.critical - critical).abs() < 1e-12);
    assert!(honest.findings.iter().all(|f| f.critical == critical));
    // The combined test: Bonferroni over the three kinds at α/2, over every stratum's df.
    let combined = stats::t_quantile(1.0 - 0.005 / 3.0, 16.0);
    assert!((p.combined_critical - combined).abs() < 1e-12);
    // The shift it would have caught: the narrowest room above any record.
    let caught = p.shift;
    assert!(caught > 0.0 && caught < 0.1, "{caught}");
    // Every recorded accuracy raised uniformly: just beyond the stated shift fails, just
    // under it passes.
    let uniform = |delta: f64| {
        let mut a = spread_audit(8, 4, 0, 0.0);
        for r in &mut a.rows {
            r.val_accuracy[0] += delta;
        }
        judge(&a).verdict
    };
    assert_eq!(uniform(caught * 1.001), "FAILED");
    assert_eq!(uniform(caught * 0.999), "PASSED");
    // Raising one epoch's accuracy far beyond the others fails: with two degrees of freedom
    // per stratum the combined test names it before that epoch's own interval does.
    let raised = judge(&spread_audit(8, 4, 3, 0.4));
    assert_eq!(raised.verdict, "FAILED");
    assert!(
        raised.failures.iter().any(|f| f
            .starts_with("val_accuracy: the recorded figures are better than their re-trainings on the whole by 0.050000")),
        "{:?}",
        raised.failures
    );
    // A figure far worse than its re-trainings claims nothing: shown, not failed.
    let worse = judge(&spread_audit(8, 4, 3, -0.3));
    assert_eq!(worse.verdict, "PASSED", "{:?}", worse.failures);
    let low = worse
        .findings
        .iter()
        .find(|f| f.value == "val_accuracy" && f.epoch == 3)
        .unwrap();
    assert!(low.z < -5.0, "{low:?}");
    // An epoch whose own re-trainings spread wider than the pool keeps its own spread.
    let mut wide = spread_audit(8, 4, 0, 0.0);
    for s in wide.seed_rows.iter_mut().filter(|s| s.epoch == 5) {
        s.val_accuracy += if s.index % 2 == 0 { 0.2 } else { -0.2 };
    }
    let j = judge(&wide);
    let e5 = j
        .findings
        .iter()
        .find(|f| f.value == "val_accuracy" && f.epoch == 5)
        .unwrap();
    let e6 = j
        .findings
        .iter()
        .find(|f| f.value == "val_accuracy" && f.epoch == 6)
        .unwrap();
    assert!(e5.scale > 2.5 * e6.scale, "{e5:?} {e6:?}");
    // Re-trainings that agree exactly still leave the floor's interval.
    let mut flat = spread_audit(2, 3, 0, 0.0);
    for r in &mut flat.rows {
        r.val_accuracy = [0.5; 2];
        r.train_loss = [1.0; 2];
        r.val_loss = [2.0; 2];
    }
    for s in &mut flat.seed_rows {
        (s.val_accuracy, s.train_loss, s.val_loss) = (0.5, 1.0, 2.0);
    }
    let j = judge(&flat);
    assert_eq!(j.verdict, "PASSED");
    let acc = j
        .findings
        .iter()
        .find(|f| f.value == "val_accuracy")
        .unwrap();
    assert!((acc.scale - judge::ACCURACY_FLOOR * (4.0f64 / 3.0).sqrt()).abs() < 1e-12);
}

#[test]
fn timed_fails_a_recorded_epoch_faster_than_this_machine() {
    let r = epoch_row();
    let mut slow = audit(Mode::Exact, vec![row(0, &r, &retrained(&r), 2.0)], vec![]);
    slow.timed = true;
    assert_eq!(judge(&slow).verdict, "PASSED");
    slow.rows[0].seconds[0] = 1.0;
    let j = judge(&slow);
    assert!(
        j.failures[0].contains("epoch time recorded 1.000 s, this machine needs at least 2.000 s"),
        "{:?}",
        j.failures
    );
    // Re-trainings so noisy that 3 × their coefficient of variation exceeds 1 (a busy
    // node) still fail an epoch recorded in well under half the fastest of them.
    slow.rows[0].seconds = [0.01, 2.0];
    for (k, t) in [(1, 9.0), (2, 40.0)] {
        let mut again = retrained(&r);
        again.seconds = t;
        slow.seed_rows.push(seed_row(0, &r, k, 7, &again));
    }
    let j = judge(&slow);
    assert!(j.failures[0].contains("slack 50%"), "{:?}", j.failures);
    slow.rows[0].seconds[0] = 1.1;
    assert_eq!(judge(&slow).verdict, "PASSED");
}

#[test]
fn an_audit_round_trips_sealed_and_is_verified_only_by_its_digest() {
    let tmp = tempfile::tempdir().unwrap();
    let r = epoch_row();
    let a = audit(Mode::Exact, vec![row(0, &r, &retrained(&r), 2.0)], vec![]);
    let sealed = a.write(&tmp.path().join(AUDIT_FILE)).unwrap();
    let written = std::fs::read(tmp.path().join(AUDIT_FILE)).unwrap();
    let run = "AB".repeat(32);
    let back = read(tmp.path(), Some(&run)).unwrap().unwrap();
    assert!(back.problems.is_empty(), "{:?}", back.problems);
    assert_eq!(
        (
            back.audit.draw,
            back.audit.mode,
            back.audit.rows[0].val_accuracy
        ),
        (3, Mode::Exact, [0.5, 0.5])
    );
    assert_eq!(back.audit_digest, digest::hex(&sealed));
    // Shown as verified only with its digest.
    let plain = summary(tmp.path(), Some(&run), None).unwrap();
    assert_eq!(
        (plain.verdict.as_str(), plain.verified, plain.checked),
        ("PASSED", false, false)
    );
    let given = summary(tmp.path(), Some(&run), Some(&sealed)).unwrap();
    assert!(given.verified);
    let other = summary(tmp.path(), Some(&run), Some(&[7; 32])).unwrap();
    assert_eq!(
        (other.verdict.as_str(), other.verified),
        ("NOT TRUSTED", false)
    );
    // Never replaced; written under a temporary name, renamed whole: none is left behind.
    let again = a.write(&tmp.path().join(AUDIT_FILE)).unwrap_err();
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
    // A re-trained figure edited: the chain breaks.
    let f = hdf5::File::open_rw(tmp.path().join(AUDIT_FILE)).unwrap();
    let ds = f.dataset("epochs").unwrap();
    let mut rows: Vec<AuditRow> = ds.read_raw().unwrap();
    rows[0].val_accuracy[1] = 0.9;
    ds.write_raw(&rows).unwrap();
    drop((ds, f));
    let edited = read(tmp.path(), Some(&run)).unwrap().unwrap();
    assert!(
        edited.problems.iter().any(|p| p.contains("epochs row 0")),
        "{:?}",
        edited.problems
    );
    // Its verdict is recomputed from the figures, whatever the file says.
    assert_eq!(edited.judgement.verdict, "FAILED");
}

#[test]
fn a_resealed_audit_whose_flag_contradicts_its_figures_is_not_trusted() {
    let tmp = tempfile::tempdir().unwrap();
    let r = epoch_row();
    let mut off = retrained(&r);
    off.figures.val_accuracy = 0.9;
    let mut a = audit(Mode::Exact, vec![row(0, &r, &off, 2.0)], vec![]);
    a.verdict = "PASSED".into();
    let sealed = a.write(&tmp.path().join(AUDIT_FILE)).unwrap();
    let s = summary(tmp.path(), Some(&"ab".repeat(32)), Some(&sealed)).unwrap();
    assert_eq!(s.verdict, "NOT TRUSTED");
    assert!(
        s.problems[0].contains("stored verdict PASSED is not what its figures give (FAILED)"),
        "{:?}",
        s.problems
    );
}

#[test]
fn an_audit_whose_mode_is_neither_exact_nor_statistical_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let r = epoch_row();
    let a = audit(Mode::Exact, vec![row(0, &r, &retrained(&r), 2.0)], vec![]);
    let sealed = a.write(&tmp.path().join(AUDIT_FILE)).unwrap();
    let path = tmp.path().join(AUDIT_FILE);
    let f = hdf5::File::open_rw(&path).unwrap();
    f.delete_attr(attr::MODE).unwrap();
    crate::writer::write_text_attr(&f, &path, attr::MODE, "lenient").unwrap();
    drop(f);
    let e = read(tmp.path(), Some(&"ab".repeat(32)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(attr::MODE) && e.contains("\"lenient\" is neither"),
        "{e}"
    );
    let s = summary(tmp.path(), Some(&"ab".repeat(32)), Some(&sealed)).unwrap();
    assert_eq!((s.verdict.as_str(), s.verified), ("NOT TRUSTED", false));
    assert!(s.problems[0].contains("lenient"), "{:?}", s.problems);
}

/// Trials of `epochs` epochs each: their rows of epoch e pooled across trials, spread
/// ±`sway` about the record, `s` re-trainings each.
fn trials_audit(trials: u64, epochs: u32, s: u32, sway: f64) -> Audit {
    let mut rows = Vec::new();
    let mut seeds = Vec::new();
    for m in 0..trials {
        for e in 1..=epochs {
            let r = EpochRow {
                model_id: m,
                epoch: e,
                ..epoch_row()
            };
            // Early epochs scatter ten times wider than later ones.
            let w = if e == 1 { 10.0 * sway } else { sway };
            let at = |k: u32| {
                if (k + m as u32).is_multiple_of(2) {
                    w
                } else {
                    -w
                }
            };
            let mut first = retrained(&r);
            first.figures.val_accuracy += at(0);
            rows.push(row(0, &r, &first, 2.0));
            for k in 1..s {
                let mut other = retrained(&r);
                other.figures.val_accuracy += at(k);
                seeds.push(seed_row(0, &r, k, u64::from(k), &other));
            }
        }
    }
    audit(Mode::Statistical, rows, seeds)
}

#[test]
fn strata_keep_late_epochs_narrow_and_the_combined_test_catches_a_small_uniform_gain() {
    let a = trials_audit(6, 4, 3, 0.003);
    let j = judge(&a);
    assert_eq!(j.verdict, "PASSED", "{:?}", j.failures);
    let scale = |e: u32| {
        j.findings
            .iter()
            .find(|f| f.value == "val_accuracy" && f.epoch == e)
            .unwrap()
            .scale
    };
    // Epoch 1's spread does not widen the later epochs' intervals.
    assert!(scale(1) > 5.0 * scale(3), "{} {}", scale(1), scale(3));
    // 6 trials × 2 degrees of freedom per stratum, worth ⌈(2/π) · 12⌉ = 8 as a median.
    let acc = &j.power[2];
    assert_eq!(acc.df, 4 * 8);
    // A gain smaller than any one figure's interval, on every figure, fails the combined
    // test by name.
    let one = j
        .findings
        .iter()
        .filter(|f| f.value == "val_accuracy")
        .map(|f| f.critical * f.scale)
        .fold(f64::INFINITY, f64::min);
    let gain = acc.shift * 1.01;
    assert!(gain < one, "{gain} {one}");
    let mut raised = a.clone();
    for r in &mut raised.rows {
        r.val_accuracy[0] += gain;
    }
    let jr = judge(&raised);
    assert_eq!(jr.verdict, "FAILED");
    assert!(jr.findings.iter().all(|f| f.agrees));
    assert!(
        jr.failures[0].starts_with(
            "val_accuracy: the recorded figures are better than their re-trainings on the whole"
        ),
        "{:?}",
        jr.failures
    );
    let mut under = a.clone();
    for r in &mut under.rows {
        r.val_accuracy[0] += acc.shift * 0.99;
    }
    assert_eq!(judge(&under).verdict, "PASSED");
}

fn steps(model: u64, recorded: &[f64], retrained: &[f64]) -> Vec<AuditStepRow> {
    recorded
        .iter()
        .zip(retrained)
        .enumerate()
        .map(|(i, (&a, &b))| AuditStepRow {
            group: 0,
            model_id: model,
            step: i as u32,
            train_loss: [a, b],
            digest: [0; 32],
        })
        .collect()
}

#[test]
fn early_steps_name_a_trial_that_is_not_the_recorded_training() {
    let re: Vec<f64> = (0..32).map(|i| 2.3 - 0.02 * f64::from(i)).collect();
    // Another platform: the first steps agree closely, parting later.
    let near: Vec<f64> = re
        .iter()
        .enumerate()
        .map(|(i, x)| x * (1.0 + 1e-7 * 1.5f64.powi(i as i32)))
        .collect();
    let mut a = spread_audit(1, 3, 0, 0.0);
    a.step_rows = steps(4, &near, &re);
    let j = judge(&a);
    assert_eq!(j.verdict, "PASSED", "{:?}", j.failures);
    assert_eq!((j.steps.compared, j.steps.trials), (32, 1));
    assert!(j.steps.largest_gap < judge::STEP_TOLERANCE);
    // In exact mode the same steps must be bit-identical.
    let mut e = a.clone();
    e.mode = Mode::Exact;
    e.seed_rows.clear();
    for r in &mut e.rows {
        (r.train_loss[1], r.val_loss[1], r.val_accuracy[1]) =
            (r.train_loss[0], r.val_loss[0], r.val_accuracy[0]);
    }
    assert!(judge(&e)
        .failures
        .iter()
        .any(|f| f.starts_with("group 0 model 4 step 0: early-step")));
    e.step_rows = steps(4, &re, &re);
    assert_eq!(judge(&e).verdict, "PASSED");
    // Another seed: about 1e-2 apart from the first step.
    let other: Vec<f64> = re
        .iter()
        .enumerate()
        .map(|(i, x)| x * (1.0 + if i % 2 == 0 { 0.012 } else { -0.009 }))
        .collect();
    a.step_rows = steps(4, &other, &re);
    let j = judge(&a);
    assert_eq!(j.verdict, "FAILED");
    assert!(
        j.failures[0].starts_with("group 0 model 4 step 0: early-step training loss recorded")
            && j.failures[0].contains("the first 2 steps judged, tolerance 1e-4"),
        "{:?}",
        j.failures
    );
    // A step the records lack fails, naming it.
    let mut gap = near.clone();
    gap[5] = f64::NAN;
    // Only the first steps are judged: later ones may part, as they do on other processors.
    let mut parted = near.clone();
    parted[7] *= 1.03;
    a.step_rows = steps(4, &parted, &re);
    assert_eq!(judge(&a).verdict, "PASSED");
    a.step_rows = steps(4, &gap, &re);
    let j = judge(&a);
    assert!(
        j.failures[0].starts_with("group 0 model 4 step 5: no training loss recorded"),
        "{:?}",
        j.failures
    );
}

//! `aiperf audit` under a real `mpirun`: a run audited on its own platform is exact, and
//! records forged and resealed as a forger would (an accuracy raised, an architecture swapped,
//! every trial copied under new model ids) fail naming trial and epoch; a run recorded on
//! another platform (the kernels held to AVX2, or to the generic level, by their pins)
//! audits PASSED in statistical mode and says why, while one epoch's accuracy raised by a
//! realistic amount fails there; records of the previous schema are audited statistically,
//! their platform unknown; other data is the audit's own verdict; `aiperf score` calls an
//! audit verified only with its digest.

use std::path::Path;
use std::process::Command;

use aiperf::arch::{cifar_resnet, CifarResnetConfig, Graph, Shape};
use aiperf::ops::OpCount;
use aiperf_records::schema::{EpochRow, TrialRow};

mod common;
use common::{output, write_split};

mod audit_common;
use audit_common::{aiperf, audit, copy_run, other_platform, record, score};

#[path = "../records/tests/common/reseal.rs"]
mod reseal;

/// The audit digest an audit printed.
fn audit_digest(text: &str) -> String {
    let at = text.find("audit digest ").expect(text) + "audit digest ".len();
    text[at..at + 64].to_string()
}

fn epochs(dir: &Path) -> Vec<EpochRow> {
    let f = hdf5::File::open(dir.join("group-0.h5")).unwrap();
    f.dataset("epochs").unwrap().read_raw().unwrap()
}

/// Raises model `model`'s epoch-1 accuracy by `by` (and its trial's best accuracy with it)
/// and reseals every chain, as a forger who read results/README.md would.
fn raise_accuracy(dir: &Path, model: u64, by: f64) -> f64 {
    let mut raised = 0.0;
    reseal::edit_rows::<EpochRow>(dir, "group-0.h5", "epochs", |r| {
        let e = r
            .iter_mut()
            .find(|e| e.model_id == model && e.epoch == 1)
            .unwrap();
        e.val_accuracy = (e.val_accuracy + by).min(0.99);
        raised = e.val_accuracy;
    });
    reseal::edit_rows::<TrialRow>(dir, "primary.h5", "trials", |t| {
        for t in t.iter_mut().filter(|t| t.model_id == model) {
            t.best_accuracy = t.best_accuracy.max(raised);
        }
    });
    reseal::reseal(dir, 1);
    raised
}

#[test]
fn on_its_own_platform_the_audit_is_exact_and_resealed_forgeries_fail() {
    let tmp = tempfile::tempdir().unwrap();
    let run = record(tmp.path(), "run", &[], 10);
    let forged_accuracy = copy_run(&run, &tmp.path().join("accuracy"));
    let forged_arch = copy_run(&run, &tmp.path().join("architecture"));
    let copies = copy_run(&run, &tmp.path().join("copies"));

    // The honest records: exact, audit.h5 written, verified only with the audit's digest.
    let (code, text) = audit(3, &run, &["--epochs", "2"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("mode                     exact (the run's platform, rank count and threads: bit-exact)"), "{text}");
    assert!(text.contains("verdict                  PASSED"), "{text}");
    let plain = score(&run, &[]);
    assert!(
        plain.contains("audit                    PASSED") && plain.contains("unverified"),
        "{plain}"
    );
    let verified = score(&run, &["--audit-digest", &audit_digest(&text)]);
    assert!(
        verified.contains("verified by its audit digest"),
        "{verified}"
    );
    let wrong = score(&run, &["--audit-digest", &"0".repeat(64)]);
    assert!(
        wrong.contains("audit                    NOT TRUSTED"),
        "{wrong}"
    );
    // A second audit never replaces the first.
    let (code, text) = audit(3, &run, &[]);
    assert!(code == 1 && text.contains("never replaced"), "{text}");

    // One epoch's accuracy raised, every chain resealed: the records verify, the audit fails.
    let model = epochs(&forged_accuracy)[0].model_id;
    raise_accuracy(&forged_accuracy, model, 0.2);
    let (code, text) = audit(3, &forged_accuracy, &["--trials", "1000"]);
    assert_eq!(code, 6, "{text}");
    assert!(
        text.contains(&format!(
            "group 0 model {model} epoch 1: val_accuracy recorded"
        )),
        "{text}"
    );

    // The first model's architecture swapped for a cheaper one, its op counts rewritten to
    // match, resealed: re-training the recorded architecture gives other losses.
    let recorded: Vec<(u64, String)> = aiperf_records::read_architectures(&forged_arch).unwrap();
    let original = Graph::from_json(&recorded[0].1).unwrap();
    let input: Shape = original.input_shape();
    let cheap_cfg = CifarResnetConfig {
        blocks: vec![1, 1, 1],
        width: 4,
    };
    let cheap = cifar_resnet(&cheap_cfg, input, original.num_classes());
    let count = OpCount::of(&cheap).unwrap();
    {
        let f = hdf5::File::open_rw(forged_arch.join("primary.h5")).unwrap();
        let mut json: Vec<hdf5::types::VarLenUnicode> =
            f.dataset("architectures").unwrap().read_raw().unwrap();
        json[0] = cheap.to_json().parse().unwrap();
        reseal::rewrite(&f, "architectures", &json);
    }
    reseal::edit_rows::<EpochRow>(&forged_arch, "group-0.h5", "epochs", |rows| {
        for r in rows.iter_mut().filter(|r| r.model_id == recorded[0].0) {
            r.train_ops = u64::try_from(count.train_epoch(r.train_images, r.steps)).unwrap();
            r.val_ops = u64::try_from(count.eval_epoch(r.val_images)).unwrap();
        }
    });
    reseal::reseal(&forged_arch, 1);
    let (code, text) = audit(3, &forged_arch, &["--trials", "1000"]);
    assert_eq!(code, 6, "{text}");
    assert!(
        text.contains(&format!(
            "group 0 model {} epoch 1: train_loss recorded",
            recorded[0].0
        )),
        "{text}"
    );

    // Every trial copied under a new model id (OPS × 2), resealed: a default draw of more
    // trials than the real ones must take a copy, whose re-training with its own seed
    // cannot match.
    let real = duplicate_trials(&copies);
    let n = (real + 1).to_string();
    let (code, text) = audit(3, &copies, &["--trials", &n]);
    assert_eq!(code, 6, "{text}");
    assert!(
        text.lines()
            .filter(|l| l.starts_with("  - group 0 model 10"))
            .count()
            > 0,
        "a copy (model id ≥ 1000) is named: {text}"
    );

    // A first epoch recorded as taking 10 ms (its trial's start moved up to just before it),
    // resealed: every figure is genuine, only the time is forged; the timed audit on site
    // re-trains it three times and fails it (no re-training takes 11 ms).
    let fast = copy_run(&run, &tmp.path().join("fast"));
    let first = epochs(&fast)[0];
    reseal::edit_rows::<TrialRow>(&fast, "primary.h5", "trials", |t| {
        for t in t.iter_mut().filter(|t| t.model_id == first.model_id) {
            t.start_s = first.time_s - 0.01;
        }
    });
    reseal::reseal(&fast, 1);
    let (code, text) = audit(3, &fast, &["--trials", "1000", "--timed"]);
    assert_eq!(code, 6, "{text}");
    let named = format!(
        "group 0 model {} epoch 1: epoch time recorded 0.010 s, this machine needs at least",
        first.model_id
    );
    assert!(text.contains(&named), "{text}");

    // Another rank count: statistical, and it says why.
    let other_ranks = copy_run(&run, &tmp.path().join("ranks"));
    let (_, text) = audit(2, &other_ranks, &["--trials", "1"]);
    assert!(
        text.contains(
            "mode                     statistical (re-trained on 1 ranks; the run trained model"
        ),
        "{text}"
    );
}

/// Copies every trial of `dir` (its trial row, architecture and epochs) under model id + 1000,
/// reseals; returns how many real trials completed an epoch.
fn duplicate_trials(dir: &Path) -> usize {
    let mut real = 0;
    reseal::edit_rows::<TrialRow>(dir, "primary.h5", "trials", |t| {
        real = t.iter().filter(|t| t.epochs > 0).count();
        let copies: Vec<TrialRow> = t
            .iter()
            .map(|r| TrialRow {
                model_id: r.model_id + 1000,
                ..*r
            })
            .collect();
        t.extend(copies);
    });
    {
        let f = hdf5::File::open_rw(dir.join("primary.h5")).unwrap();
        let mut ids: Vec<u64> = f.dataset("architecture_ids").unwrap().read_raw().unwrap();
        let mut json: Vec<hdf5::types::VarLenUnicode> =
            f.dataset("architectures").unwrap().read_raw().unwrap();
        let n = ids.len();
        for i in 0..n {
            ids.push(ids[i] + 1000);
            json.push(json[i].clone());
        }
        reseal::rewrite(&f, "architecture_ids", &ids);
        reseal::rewrite(&f, "architectures", &json);
    }
    reseal::edit_rows::<EpochRow>(dir, "group-0.h5", "epochs", |r| {
        let copies: Vec<EpochRow> = r
            .iter()
            .map(|e| EpochRow {
                model_id: e.model_id + 1000,
                ..*e
            })
            .collect();
        r.extend(copies);
    });
    reseal::reseal(dir, 1);
    real
}

#[test]
fn from_another_platform_the_audit_is_statistical_and_states_its_power() {
    let tmp = tempfile::tempdir().unwrap();
    let run = record(tmp.path(), "pinned", other_platform(), 3);
    let raised = copy_run(&run, &tmp.path().join("raised"));
    let old = copy_run(&run, &tmp.path().join("schema3"));
    let data = tmp.path().join("data");

    // Recorded under pins, audited natively: statistical, PASSED, and it says why.
    let (code, text) = audit(3, &run, &["--trials", "2"]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(
            "mode                     statistical (another platform than the run's (run ≠ here: "
        ),
        "{text}"
    );
    assert!(
        text.contains("aten_capability") || text.contains("pins"),
        "{text}"
    );
    assert!(
        text.contains("power                    would have caught a uniform shift of"),
        "{text}"
    );
    assert!(score(&run, &[]).contains("statistical mode"));

    // One epoch's accuracy raised by 0.3 on the best trial, resealed: with every trial's
    // first two epochs as evidence, the audit fails there.
    let best = epochs(&raised)
        .iter()
        .max_by(|a, b| a.val_accuracy.total_cmp(&b.val_accuracy))
        .map(|e| e.model_id)
        .unwrap();
    let first = epochs(&raised)
        .iter()
        .find(|e| e.model_id == best && e.epoch == 1)
        .unwrap()
        .val_accuracy;
    let by = (0.3f64).min(0.99 - first);
    assert!(by > 0.15, "the first epoch leaves room to raise: {first}");
    raise_accuracy(&raised, best, by);
    let (code, text) = audit(3, &raised, &["--trials", "1000", "--epochs", "2"]);
    assert_eq!(code, 6, "{text}");
    let named = format!("group 0 model {best} epoch 1: val_accuracy recorded");
    assert!(
        text.contains(&named) && text.contains("better by z = "),
        "{text}"
    );

    // The previous schema (no platform): statistical, the platform named unknown.
    {
        let f = hdf5::File::open_rw(old.join("primary.h5")).unwrap();
        f.delete_attr("platform").unwrap();
        f.delete_attr("ceilings").unwrap();
        f.attr("schema_version")
            .unwrap()
            .write_scalar(&3u32)
            .unwrap();
        let g = hdf5::File::open_rw(old.join("group-0.h5")).unwrap();
        g.attr("schema_version")
            .unwrap()
            .write_scalar(&3u32)
            .unwrap();
    }
    reseal::reseal(&old, 1);
    assert!(score(&old, &[]).contains("platform                 unknown"));
    let (code, text) = audit(3, &old, &["--trials", "1"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("mode                     statistical (the records (schema 3) do not name their platform"), "{text}");

    // --timed needs the exact mode: refused here, before anything is trained.
    let timed = copy_run(&run, &tmp.path().join("timed"));
    let (code, text) = audit(3, &timed, &["--timed"]);
    assert!(
        code == 1 && text.contains("--timed confirms throughput on the run's own machine"),
        "{text}"
    );

    // Other data is the audit's own verdict, naming both identities.
    let other = tmp.path().join("other-data");
    std::fs::create_dir_all(&other).unwrap();
    write_split(&other, "train", 384, 9);
    write_split(&other, "val", 480, 2);
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "audit".as_ref(),
        timed.as_os_str(),
        "--data".as_ref(),
        other.as_os_str(),
    ];
    args.push("--trials".as_ref());
    args.push("1".as_ref());
    let (code, text) = aiperf(3, &args, &[]);
    assert_eq!(code, 7, "{text}");
    assert!(
        text.contains("audit verdict DATA DIFFERS") && text.contains("CRC-32"),
        "{text}"
    );
    assert!(!timed.join("audit.h5").exists());
    let _ = data;
}

#[test]
fn a_record_set_forged_from_the_documentation_scores_valid_and_cannot_pass_its_audit() {
    let Some(python) = std::env::var_os("AIPERF_H5PY_PYTHON") else {
        assert!(
            std::env::var("AIPERF_REQUIRE_PREREQS").as_deref() != Ok("1"),
            "AIPERF_H5PY_PYTHON (scripts/dev/setup-h5py-venv) not set, and AIPERF_REQUIRE_PREREQS=1 requires it"
        );
        panic!(
            "set AIPERF_H5PY_PYTHON to a Python with h5py (scripts/dev/setup-h5py-venv prints one)"
        );
    };
    let tmp = tempfile::tempdir().unwrap();
    let forged = tmp.path().join("forged");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/tools/forge_official.py");
    let out = output(Command::new(python).arg(script).arg(&forged));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The rules alone cannot tell: VALID, records intact, exit 0.
    let scored = Command::new(env!("CARGO_BIN_EXE_aiperf"))
        .arg("score")
        .arg(&forged)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&scored.stdout);
    assert_eq!(scored.status.code(), Some(0), "{text}");
    assert!(
        text.contains("verdict (aiperf-rules-6)   VALID")
            && text.contains("records                  intact"),
        "{text}"
    );
    assert!(
        text.contains("NVIDIA H100"),
        "the forged platform is shown: {text}"
    );
    // Its audit cannot pass here: the packs at hand are not the ImageNet it claims.
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    write_split(&data, "train", 64, 1);
    write_split(&data, "val", 16, 2);
    let (code, text) = audit(3, &forged, &[]);
    assert_eq!(code, 7, "{text}");
    assert!(
        text.contains("audit verdict DATA DIFFERS: the run trained on imagenet"),
        "{text}"
    );
    assert!(!forged.join("audit.h5").exists());
}

#[test]
fn audit_settings_out_of_range_are_refused_before_any_work() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_aiperf"))
            .arg("audit")
            .arg("/nonexistent")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (args, want) in [
        (&["--seeds", "1"][..], "a spread needs two"),
        (&["--alpha", "0.7"][..], "--alpha 0.7"),
        (
            &["--timed", "--mode", "statistical"][..],
            "needs the exact mode",
        ),
    ] {
        let (code, err) = run(args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(
            err.contains(want) && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
    // A draw that is not hex is clap's to refuse (exit 2), naming what to give.
    let (code, err) = run(&["--draw", "xyz"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--draw") && err.contains("hex digits"),
        "{err}"
    );
}

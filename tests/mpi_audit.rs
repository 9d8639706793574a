//! `aiperf audit` under a real `mpirun` (issue 22): a real run's records re-trained from
//! what they record audit clean, bit-exact on the run's rank count; records in which one
//! epoch's accuracy was raised, or an architecture swapped for a cheaper one, and every
//! chain resealed as a forger would, fail their audit naming trial and epoch; an audit on
//! another rank count says which tolerance it applied; `aiperf score` shows the audit.

use std::path::Path;
use std::process::Command;

use aiperf::arch::{cifar_resnet, CifarResnetConfig, Graph, Shape};
use aiperf::ops::OpCount;
use aiperf_records::schema::EpochRow;

mod common;
use common::{output, write_split};

#[path = "../records/tests/common/reseal.rs"]
mod reseal;

fn launcher() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi-launch/mpirun-local")
}

/// `aiperf ARGS` under `mpirun -np NP`: (success, stdout + stderr).
fn aiperf(np: usize, args: &[&std::ffi::OsStr]) -> (bool, String) {
    let out = output(
        Command::new(launcher())
            .env("AIPERF_BIN", env!("CARGO_BIN_EXE_aiperf"))
            .arg(np.to_string())
            .args(args),
    );
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text.into_owned())
}

/// A copy of the records in `from` (without any audit) at `to`.
fn copy_run(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in ["primary.h5", "group-0.h5"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
}

fn audit(np: usize, dir: &Path, data: &Path, extra: &[&str]) -> (bool, String) {
    let mut args: Vec<&std::ffi::OsStr> = vec!["audit".as_ref(), dir.as_os_str()];
    args.extend(["--data".as_ref(), data.as_os_str()]);
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    aiperf(np, &args)
}

/// The first epoch row of group 0 (its model and epoch 1).
fn first_row(dir: &Path) -> EpochRow {
    let f = hdf5::File::open(dir.join("group-0.h5")).unwrap();
    let rows: Vec<EpochRow> = f.dataset("epochs").unwrap().read_raw().unwrap();
    rows[0]
}

#[test]
fn an_honest_run_audits_clean_and_forged_records_fail_naming_trial_and_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("quadrants");
    std::fs::create_dir_all(&data).unwrap();
    write_split(&data, "train", 384, 1);
    write_split(&data, "val", 96, 2);
    let run = tmp.path().join("run");
    let (ok, text) = aiperf(
        3,
        &[
            "run",
            "--trainer",
            "real",
            "--data",
            data.to_str().unwrap(),
            "--results",
            run.to_str().unwrap(),
            "--duration",
            "15",
            "--epochs",
            "4",
            "--batch-size",
            "8:24",
            "--threads",
            "1",
        ]
        .map(std::ffi::OsStr::new),
    );
    assert!(ok, "{text}");
    let forged_accuracy = tmp.path().join("accuracy");
    let forged_arch = tmp.path().join("architecture");
    let other_ranks = tmp.path().join("ranks");
    for d in [&forged_accuracy, &forged_arch, &other_ranks] {
        copy_run(&run, d);
    }

    // The honest records: every sampled epoch bit-exact, audit.h5 written, score shows it.
    let (ok, text) = audit(3, &run, &data, &["--trials", "3", "--epochs", "2"]);
    assert!(ok, "{text}");
    assert!(
        text.contains("bit-exact") && text.contains("verdict                  PASSED"),
        "{text}"
    );
    assert!(run.join("audit.h5").is_file());
    let score = Command::new(env!("CARGO_BIN_EXE_aiperf"))
        .args(["score".as_ref(), run.as_os_str()])
        .output()
        .unwrap();
    let score = String::from_utf8_lossy(&score.stdout);
    assert!(score.contains("audit                    PASSED"), "{score}");
    // A second audit never replaces the first.
    let (ok, text) = audit(3, &run, &data, &[]);
    assert!(
        !ok && text.contains("audit.h5") && text.contains("never replaced"),
        "{text}"
    );

    // One epoch's accuracy raised, every chain resealed: the records verify, the audit fails.
    let row = first_row(&forged_accuracy);
    reseal::edit_rows::<EpochRow>(&forged_accuracy, "group-0.h5", "epochs", |r| {
        r[0].val_accuracy = (r[0].val_accuracy + 0.2).min(0.99);
    });
    reseal::edit_rows::<aiperf_records::schema::TrialRow>(
        &forged_accuracy,
        "primary.h5",
        "trials",
        |t| {
            for t in t.iter_mut().filter(|t| t.model_id == row.model_id) {
                t.best_accuracy = t.best_accuracy.max((row.val_accuracy + 0.2).min(0.99));
            }
        },
    );
    reseal::reseal(&forged_accuracy, 1);
    let (ok, text) = audit(
        3,
        &forged_accuracy,
        &data,
        &["--trials", "1000", "--epochs", "1"],
    );
    assert!(!ok, "{text}");
    let named = format!(
        "group 0 model {} epoch 1: val_accuracy recorded",
        row.model_id
    );
    assert!(text.contains(&named) && text.contains("FAILED"), "{text}");

    // The first model's architecture swapped for a cheaper one, its op counts rewritten to
    // match (so the recount passes), resealed: re-training the recorded architecture gives
    // other losses.
    let recorded: Vec<(u64, String)> = aiperf_records::read_architectures(&forged_arch).unwrap();
    let original = Graph::from_json(&recorded[0].1).unwrap();
    let input: Shape = original.input_shape();
    let cheap = cifar_resnet(
        &CifarResnetConfig {
            blocks: vec![1, 1, 1],
            width: 4,
        },
        input,
        original.num_classes(),
    );
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
    let (ok, text) = audit(
        3,
        &forged_arch,
        &data,
        &["--trials", "1000", "--epochs", "1"],
    );
    assert!(!ok, "{text}");
    let named = format!("group 0 model {} epoch 1:", recorded[0].0);
    assert!(
        text.contains(&named) && text.contains("train_loss recorded"),
        "{text}"
    );

    // Another rank count: the audit says what it could not hold bit-exact and why.
    let (_, text) = audit(2, &other_ranks, &data, &["--trials", "1", "--epochs", "1"]);
    assert!(
        text.contains("tolerance |Δ accuracy| ≤ 0.05, |Δ loss| ≤ 0.15 relative (re-trained on 1 ranks × 1 threads; the run used 2 × 1)"),
        "{text}"
    );
}

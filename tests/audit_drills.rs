//! The forger's drills against `aiperf audit`, under a real `mpirun`, with the forger's tool
//! written from results/README.md alone (`scripts/tools/audit_drill.py`): from an honest short run
//! recorded under kernel pins, (a) every accuracy raised by 0.03 and every loss lowered by as
//! much, claiming the auditor's platform, fails the exact audit; (b) the same claiming another
//! processor fails the statistical audit; (c) a trial replaced by a copy of another under its
//! own id, claiming another processor, fails the statistical audit by its early steps, named.
//! The honest run passes both ways: natively (statistical, its early steps within tolerance)
//! and under its own pins (exact, every step bit-identical).

use std::path::{Path, PathBuf};

mod common;

mod audit_common;
use audit_common::{audit, audit_with, copy_run, other_platform, record_on, Recording};

/// `scripts/tools/audit_drill.py SRC DST ARGS` with the h5py venv's Python: the forged copy.
fn forge(src: &Path, name: &str, args: &[&str]) -> PathBuf {
    let python = std::env::var_os("AIPERF_H5PY_PYTHON").expect(
        "set AIPERF_H5PY_PYTHON to a Python with h5py (scripts/dev/setup-h5py-venv prints one; make test sets it)",
    );
    let dst = src.parent().unwrap().join(name);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/tools/audit_drill.py");
    let out = common::output(
        std::process::Command::new(python)
            .arg(script)
            .arg(src)
            .arg(&dst)
            .args(args),
    );
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("run digest "), "{text}");
    dst
}

#[test]
fn forgers_fail_the_audit_in_either_mode_and_an_honest_pinned_run_passes_in_both() {
    let tmp = tempfile::tempdir().unwrap();
    let pins = other_platform();
    // Every fifth label wrong, enough images that each trial's first epoch learns what can be
    // learnt (its re-trainings then agree closely, as later epochs of real runs do).
    let run = record_on(
        tmp.path(),
        "pinned",
        pins,
        Recording {
            wrong: 5,
            train: 2048,
            epochs: "5",
        },
    );
    let all = ["--trials", "1000", "--epochs", "1"];

    // Honest, audited natively: statistical, every trial's early steps within tolerance.
    let (code, text) = audit(3, &run, &all);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("mode                     statistical"),
        "{text}"
    );
    assert!(
        text.contains("early steps              ") && text.contains("tolerance 1e-4"),
        "{text}"
    );
    // Honest, audited under its own pins: exact, every step bit-identical.
    let again = copy_run(&run, &tmp.path().join("pinned-again"));
    let (code, text) = audit_with(3, &again, &all, pins);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("mode                     exact"), "{text}");
    assert!(
        text.contains("bit-identical required; largest relative gap 0.00e0"),
        "{text}"
    );

    // (a) Raised, claiming the auditor's platform (the run's own pins): exact, FAILED.
    let raised = forge(&run, "raised", &["--raise", "0.03"]);
    let (code, text) = audit_with(3, &raised, &all, pins);
    assert_eq!(code, 6, "{text}");
    assert!(text.contains("mode                     exact"), "{text}");
    assert!(text.contains("val_accuracy recorded"), "{text}");

    // (b) The same, claiming another processor: statistical, FAILED.
    let claimed = forge(
        &run,
        "raised-elsewhere",
        &["--raise", "0.03", "--claim-platform"],
    );
    let (code, text) = audit(3, &claimed, &all);
    assert!(
        text.contains("mode                     statistical (another platform than the run's"),
        "{text}"
    );
    assert_eq!(code, 6, "{text}");

    // (c) A trial replaced by a copy of another, claiming another processor: its early
    // steps are not its own seed's, whatever the platform.
    let copied = forge(&run, "copied", &["--copy-trial", "--claim-platform"]);
    let (code, text) = audit(3, &copied, &all);
    assert_eq!(code, 6, "{text}");
    assert!(
        text.contains("mode                     statistical"),
        "{text}"
    );
    assert!(
        text.contains("early-step training loss recorded")
            && text.contains("the records are not this trial's training"),
        "{text}"
    );
}

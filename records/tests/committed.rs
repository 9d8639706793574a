//! The tracked record sets are what the pages say of them. `results/run-1796615264`, a
//! `make run` of schema 7 (early steps recorded) with its audit at the default settings on
//! another platform (the kernels pinned): intact, audited statistically, every early step
//! re-trained, PASSED, the audit's sample and rows the records' own, and a power for
//! validation accuracy of at most one point — the figure docs/reviewer.md quotes.

use std::path::Path;

use aiperf_records::audit::{self, DEFAULT_ALPHA, DEFAULT_EPOCHS, DEFAULT_SEEDS, DEFAULT_TRIALS};
use aiperf_records::read_run;

const SET: &str = "run-1796615264";

#[test]
fn the_schema_7_set_passes_its_cross_platform_audit_at_the_defaults_with_power_under_a_point() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../results")
        .join(SET);
    let run = read_run(&dir).unwrap();
    assert_eq!(
        run.info.schema_version,
        aiperf_records::schema::SCHEMA_VERSION
    );
    let digest = aiperf_records::integrity::check(&run, None).run_digest;
    assert!(digest.is_some(), "sealed and intact");
    let s = audit::summary_for(&run, digest.as_deref(), None).unwrap();
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    assert_eq!(
        (s.verdict.as_str(), s.mode.as_str()),
        ("PASSED", "statistical")
    );
    let a = audit::read(&dir, digest.as_deref()).unwrap().unwrap().audit;
    assert_eq!(
        (a.epochs, a.seeds, a.alpha),
        (DEFAULT_EPOCHS, DEFAULT_SEEDS, DEFAULT_ALPHA),
        "audited at the defaults"
    );
    // Five drawn (the run has five trials), the best among them.
    assert_eq!(a.trials as usize, DEFAULT_TRIALS.min(run.trials.len()));
    assert_eq!(
        s.steps.trials, a.trials as usize,
        "every trial's early steps re-trained"
    );
    let accuracy = s.power.iter().find(|p| p.value == "val_accuracy").unwrap();
    assert!(accuracy.shift <= 0.01, "{accuracy:?}");
    let reviewer = std::fs::read_to_string(dir.join("../../docs/reviewer.md")).unwrap();
    let quoted = format!("+{:.4}", accuracy.shift);
    assert!(
        reviewer.contains(SET) && reviewer.contains(&quoted),
        "docs/reviewer.md quotes {SET}'s power {quoted}"
    );
}

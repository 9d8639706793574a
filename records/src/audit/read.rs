//! `audit.h5` read back (docs/design.md §5): its seal checked, its verdict recomputed from
//! its figures, and what `aiperf score` shows of it — verified only against the audit digest
//! its auditor printed.

use std::path::Path;

use serde::Serialize;

use super::{
    attr, judge, Audit, AuditRow, AuditStepRow, Judgement, Mode, SeedRow, AUDIT_ATTRS, AUDIT_FILE,
};
use crate::digest::{self, Digest};
use crate::error::RecordError;
use crate::source::Source;

/// An audit read back: what it says, its judgement recomputed, and whether its seal holds
/// for these records.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuditRecord {
    /// The audit.
    pub audit: Audit,
    /// Its judgement, recomputed from its figures.
    pub judgement: Judgement,
    /// The audit digest recomputed from the file (hex).
    pub audit_digest: String,
    /// Why it cannot be trusted (altered, or the audit of other records); empty: sound.
    pub problems: Vec<String>,
}

/// `dir/audit.h5`, if there is one, checked against its seal and `run_digest` (hex) of the
/// records in `dir`, its verdict recomputed.
pub fn read(dir: &Path, run_digest: Option<&str>) -> Result<Option<AuditRecord>, RecordError> {
    let path = dir.join(AUDIT_FILE);
    if !path.is_file() {
        return Ok(None);
    }
    let f = Source::open(&path)?;
    let version: u32 = f.attr(attr::SCHEMA_VERSION)?;
    if version < super::OLDEST_AUDIT_SCHEMA {
        return Err(RecordError::Hdf5 {
            path,
            message: format!("an audit of schema {version}, written by an older aiperf: move it away and audit again with this one"),
        });
    }
    let audit = read_audit(&f, &path, version)?;
    let judgement = judge(&audit);
    let (audit_digest, mut problems) = check_seal(&f, &audit, version)?;
    if audit.verdict != judgement.verdict {
        problems.push(format!(
            "audit.h5: its stored verdict {} is not what its figures give ({}): the audit was altered",
            audit.verdict, judgement.verdict
        ));
    }
    match run_digest {
        Some(d) if d.eq_ignore_ascii_case(&audit.run_digest) => {}
        _ => problems.push(format!(
            "audit.h5 audits the records with run digest {}, not these ({}): it is another run's audit",
            audit.run_digest,
            run_digest.unwrap_or("none: the records are not sealed")
        )),
    }
    Ok(Some(AuditRecord {
        audit,
        judgement,
        audit_digest,
        problems,
    }))
}

/// The audit's attributes and rows as stored in `f` (at `path`).
fn read_audit(f: &Source, path: &Path, version: u32) -> Result<Audit, RecordError> {
    let u32a = |name: &str| f.attr::<u32>(name);
    let mode = match f.text(attr::MODE)?.as_str() {
        "exact" => Mode::Exact,
        "statistical" => Mode::Statistical,
        other => {
            return Err(RecordError::Hdf5 {
                path: path.to_path_buf(),
                message: format!(
                    "attribute {}: {other:?} is neither \"exact\" nor \"statistical\": the audit was altered or written by another program",
                    attr::MODE
                ),
            })
        }
    };
    Ok(Audit {
        run_digest: f.text(attr::RUN_DIGEST)?,
        draw: f.attr(attr::DRAW)?,
        sample_seed: f.attr(attr::SAMPLE_SEED)?,
        trials: u32a(attr::TRIALS)?,
        epochs: u32a(attr::EPOCHS)?,
        ranks: u32a(attr::RANKS)?,
        threads: u32a(attr::THREADS)?,
        mode,
        mode_reason: f.text(attr::MODE_REASON)?,
        seeds: u32a(attr::SEEDS)?,
        alpha: f.attr(attr::ALPHA)?,
        timed: u32a(attr::TIMED)? == 1,
        platform_json: f.text(attr::PLATFORM)?,
        verdict: f.text(attr::VERDICT)?,
        rows: f.rows::<AuditRow>("epochs")?,
        seed_rows: f.rows::<SeedRow>("seeds")?,
        // Audits of schema 4 compared no early steps.
        step_rows: if version >= 5 {
            f.rows::<AuditStepRow>("steps")?
        } else {
            Vec::new()
        },
    })
}

/// The audit digest recomputed from `f`'s attributes (hex), and what breaks its seal: a row
/// whose chained digest does not follow, or a stored digest or chain end that does not match.
fn check_seal(
    f: &Source,
    audit: &Audit,
    version: u32,
) -> Result<(String, Vec<String>), RecordError> {
    let values = AUDIT_ATTRS
        .iter()
        .filter(|s| s.since <= version)
        .map(|s| Ok((s.name, f.attr_value(s)?)))
        .collect::<Result<Vec<_>, RecordError>>()?;
    let mut problems = Vec::new();
    for (name, broken) in [
        (
            "epochs",
            digest::first_broken(digest::chain_seed(AUDIT_FILE, "epochs"), &audit.rows),
        ),
        (
            "seeds",
            digest::first_broken(digest::chain_seed(AUDIT_FILE, "seeds"), &audit.seed_rows),
        ),
        (
            "steps",
            digest::first_broken(digest::chain_seed(AUDIT_FILE, "steps"), &audit.step_rows),
        ),
    ] {
        if let Some(row) = broken {
            problems.push(format!(
                "audit.h5 {name} row {row}: its digest does not follow: the audit was altered"
            ));
        }
    }
    let stored = f.text(attr::AUDIT_DIGEST)?;
    let recomputed = digest::hex(&digest::run_digest(&values));
    let ends = [
        (attr::ROWS_DIGEST, audit.end("epochs", &audit.rows)),
        (attr::SEEDS_DIGEST, audit.end("seeds", &audit.seed_rows)),
        (attr::STEPS_DIGEST, audit.end("steps", &audit.step_rows)),
    ];
    let ends = &ends[..if version >= 5 { 3 } else { 2 }];
    let ends_hold = ends
        .iter()
        .map(|(name, e)| Ok(f.text(name)? == serde_json::to_string(e).expect("plain data")))
        .collect::<Result<Vec<bool>, RecordError>>()?;
    if !stored.eq_ignore_ascii_case(&recomputed) || ends_hold.contains(&false) {
        problems.push("audit.h5: its audit digest does not match its attributes and rows: the audit was altered".into());
    }
    Ok((recomputed, problems))
}

/// What `aiperf score` shows of an audit beside the run's verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuditSummary {
    /// `PASSED` or `FAILED` as recomputed from its figures, or `NOT TRUSTED` (altered,
    /// another run's, unreadable, or not the audit whose digest was given).
    pub verdict: String,
    /// Whether an audit digest was given (`--audit-digest`): then a failed, altered or other
    /// audit decides the exit status.
    pub checked: bool,
    /// Whether the audit's digest was given and matched: only then does the audit prove
    /// anything to whoever reads the score.
    pub verified: bool,
    /// `exact` or `statistical`.
    pub mode: String,
    /// Why that mode.
    pub mode_reason: String,
    /// Trials re-trained.
    pub trials: u32,
    /// Epochs compared.
    pub epochs: usize,
    /// Family-wise α (statistical mode).
    pub alpha: f64,
    /// Re-trainings per epoch.
    pub seeds: u32,
    /// What the evidence could detect (statistical mode).
    pub power: Vec<judge::Power>,
    /// The early steps compared.
    pub steps: judge::Steps,
    /// Each disagreement, in words.
    pub failures: Vec<String>,
    /// Why the audit cannot be trusted (empty: sound).
    pub problems: Vec<String>,
}

/// The summary of `dir/audit.h5` against the records' run digest and, when given, the
/// audit digest its auditor printed; `None` without an audit.
pub fn summary(
    dir: &Path,
    run_digest: Option<&str>,
    audit_digest: Option<&Digest>,
) -> Option<AuditSummary> {
    summarise(dir, None, run_digest, audit_digest)
}

/// [`summary`] of the audit beside `run`'s records, also held against their trials and
/// figures ([`super::against_records`]): what `aiperf score` shows.
pub fn summary_for(
    run: &crate::reader::Run,
    run_digest: Option<&str>,
    audit_digest: Option<&Digest>,
) -> Option<AuditSummary> {
    summarise(&run.dir, Some(run), run_digest, audit_digest)
}

fn summarise(
    dir: &Path,
    run: Option<&crate::reader::Run>,
    run_digest: Option<&str>,
    audit_digest: Option<&Digest>,
) -> Option<AuditSummary> {
    let empty = |problems: Vec<String>| AuditSummary {
        verdict: "NOT TRUSTED".into(),
        checked: audit_digest.is_some(),
        verified: false,
        mode: String::new(),
        mode_reason: String::new(),
        trials: 0,
        epochs: 0,
        alpha: 0.0,
        seeds: 0,
        power: Vec::new(),
        steps: judge::Steps::default(),
        failures: Vec::new(),
        problems,
    };
    match read(dir, run_digest) {
        // Verification asked for is verification done: no audit is a failed one.
        Ok(None) if audit_digest.is_some() => {
            let path = dir.join(AUDIT_FILE);
            let what = match std::fs::read_link(&path) {
                Ok(target) => format!("is a link to {}, which does not exist", target.display()),
                Err(_) => "is missing".into(),
            };
            Some(empty(vec![format!(
                "{} {what}: --audit-digest asks to verify the audit, and there is none to verify (audit the run with `aiperf audit {}`, or score without --audit-digest)",
                path.display(),
                dir.display()
            )]))
        }
        Ok(None) => None,
        Err(e) => Some(empty(vec![e.to_string()])),
        Ok(Some(r)) => {
            let mut problems = r.problems;
            if let Some(run) = run.filter(|_| problems.is_empty()) {
                problems.extend(super::against_records(&r.audit, run));
            }
            let verified = audit_digest.is_some_and(|d| digest::hex(d) == r.audit_digest);
            if audit_digest.is_some() && !verified {
                problems.push(format!(
                    "audit.h5 has audit digest {}, not the one given: it is not the audit you ran",
                    r.audit_digest
                ));
            }
            Some(AuditSummary {
                verdict: if problems.is_empty() {
                    r.judgement.verdict.to_string()
                } else {
                    "NOT TRUSTED".into()
                },
                checked: audit_digest.is_some(),
                verified: verified && problems.is_empty(),
                mode: r.audit.mode.as_str().into(),
                mode_reason: r.audit.mode_reason.clone(),
                trials: r.audit.trials,
                epochs: r.audit.rows.len(),
                alpha: r.audit.alpha,
                seeds: r.audit.seeds,
                power: r.judgement.power,
                steps: r.judgement.steps,
                failures: r.judgement.failures,
                problems,
            })
        }
    }
}

//! The audit's records (docs/design.md §5–§6): which trials a reviewer re-trains (a sample drawn
//! from a seed derived from the run digest, so the submitter cannot pick it), how each
//! re-trained epoch is compared with the recorded one (bit-exact where the rank count and
//! threads match, within [`ACCURACY_TOLERANCE`] and [`LOSS_TOLERANCE`] otherwise; counts
//! always exactly), and `audit.h5`, sealed like the run's records: its rows are one chain
//! and an audit digest covers every attribute of [`AUDIT_ATTRS`] and the chain's end.
//! `aiperf score` reads it back beside the run's verdict. The re-training itself needs
//! libtorch and MPI and lives in `aiperf audit`.

use std::path::Path;

use hdf5::{File, H5Type};
use serde::Serialize;
use sha2::{Digest as _, Sha256};

use crate::digest::{self, Digest};
use crate::error::RecordError;
use crate::outputs;
use crate::schema::{AttrKind, AttrSpec, AttrValue, EpochRow, TrialRow, Written, SCHEMA_VERSION};
use crate::source::Source;
use crate::writer::{write_attr, write_text_attr};

/// The audit's file, in the run's folder.
pub const AUDIT_FILE: &str = "audit.h5";
/// Largest |audited − recorded| validation accuracy accepted when the audit cannot be
/// bit-exact (another rank count or thread count: batch-norm statistics over other shards
/// and sums in another order).
pub const ACCURACY_TOLERANCE: f64 = 0.05;
/// Largest relative |audited − recorded| loss accepted likewise.
pub const LOSS_TOLERANCE: f64 = 0.15;

/// One re-trained epoch beside the recorded one (`audit.h5`, dataset `epochs`).
#[derive(H5Type, Clone, Copy, Debug, PartialEq, Serialize)]
#[repr(C)]
pub struct AuditRow {
    /// The trial's group.
    pub group: u32,
    /// Its model id.
    pub model_id: u64,
    /// The epoch (from 1).
    pub epoch: u32,
    /// Training images recorded / re-trained.
    pub train_images: [u64; 2],
    /// Optimizer steps recorded / re-trained.
    pub steps: [u64; 2],
    /// Validation images recorded / re-evaluated.
    pub val_images: [u64; 2],
    /// Training operations recorded / recomputed from the re-trained images and steps.
    pub train_ops: [u64; 2],
    /// Validation operations recorded / recomputed.
    pub val_ops: [u64; 2],
    /// Mean training loss recorded / re-trained.
    pub train_loss: [f64; 2],
    /// Validation loss recorded / re-trained.
    pub val_loss: [f64; 2],
    /// Validation accuracy recorded / re-trained.
    pub val_accuracy: [f64; 2],
    /// 1 when the epoch agrees (under the audit's mode), else 0.
    pub agrees: u8,
    /// Running SHA-256 of the previous row's digest and this row's fields.
    pub digest: [u8; 32],
}

impl digest::Carried for AuditRow {
    fn digest(&self) -> Digest {
        self.digest
    }
    fn set_digest(&mut self, d: Digest) {
        self.digest = d;
    }
}

/// Attribute names of `audit.h5`.
pub mod attr {
    /// u32: the records' schema version.
    pub const SCHEMA_VERSION: &str = "schema_version";
    /// string: the aiperf that audited.
    pub const PROGRAM_VERSION: &str = "program_version";
    /// string: the audited run's run digest (hex).
    pub const RUN_DIGEST: &str = "run_digest";
    /// u64: the sample's seed, derived from the run digest ([`super::sample_seed`]).
    pub const SAMPLE_SEED: &str = "sample_seed";
    /// u32: trials re-trained.
    pub const TRIALS: &str = "trials";
    /// u32: epochs re-trained per trial (at most).
    pub const EPOCHS: &str = "epochs";
    /// u32: training ranks the audit used.
    pub const RANKS: &str = "ranks";
    /// u32: CPU threads per rank the audit used.
    pub const THREADS: &str = "threads";
    /// string: `bit-exact` or the tolerance applied and why.
    pub const MODE: &str = "mode";
    /// string: `PASSED` or `FAILED`.
    pub const VERDICT: &str = "verdict";
    /// string: JSON [`crate::digest::ChainEnd`] of the `epochs` rows.
    pub const ROWS_DIGEST: &str = "rows_digest";
    /// string: the audit digest over every other attribute, hex.
    pub const AUDIT_DIGEST: &str = "audit_digest";
}

const fn spec(name: &'static str, kind: AttrKind) -> AttrSpec {
    AttrSpec {
        name,
        kind,
        written: Written::AtStart,
    }
}

/// Every attribute of `audit.h5` but its digest, in the order the audit digest covers them.
pub const AUDIT_ATTRS: &[AttrSpec] = &[
    spec(attr::SCHEMA_VERSION, AttrKind::U32),
    spec(attr::PROGRAM_VERSION, AttrKind::Text),
    spec(attr::RUN_DIGEST, AttrKind::Text),
    spec(attr::SAMPLE_SEED, AttrKind::U64),
    spec(attr::TRIALS, AttrKind::U32),
    spec(attr::EPOCHS, AttrKind::U32),
    spec(attr::RANKS, AttrKind::U32),
    spec(attr::THREADS, AttrKind::U32),
    spec(attr::MODE, AttrKind::Text),
    spec(attr::VERDICT, AttrKind::Text),
    spec(attr::ROWS_DIGEST, AttrKind::Text),
];

/// The sample's seed: the first 8 bytes (little-endian) of SHA-256 of
/// `aiperf-audit-sample-1`, NUL and the run digest's 32 bytes.
pub fn sample_seed(run_digest: &Digest) -> u64 {
    let mut h = Sha256::new();
    h.update(b"aiperf-audit-sample-1\0");
    h.update(run_digest);
    let d: Digest = h.finalize().into();
    u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
}

/// SplitMix64, the sample's generator (documented, so another scorer draws the same).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The trials (indices into `trials`) the audit re-trains: of those with at least one
/// completed epoch, in record order, a seeded Fisher–Yates shuffle's first `n`, returned in
/// record order. `n` ≥ the eligible count takes them all.
pub fn sample(trials: &[TrialRow], n: usize, seed: u64) -> Vec<usize> {
    let mut eligible: Vec<usize> = (0..trials.len())
        .filter(|&i| trials[i].epochs > 0)
        .collect();
    let mut state = seed;
    for i in (1..eligible.len()).rev() {
        let j = (splitmix(&mut state) % (i as u64 + 1)) as usize;
        eligible.swap(i, j);
    }
    eligible.truncate(n);
    eligible.sort_unstable();
    eligible
}

/// What the re-training gave for one epoch (its ops recomputed by the caller).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Retrained {
    /// Training images.
    pub train_images: u64,
    /// Optimizer steps.
    pub steps: u64,
    /// Validation images.
    pub val_images: u64,
    /// Training operations from the recorded architecture, these images and steps.
    pub train_ops: u64,
    /// Validation operations likewise.
    pub val_ops: u64,
    /// Mean training loss.
    pub train_loss: f64,
    /// Validation loss.
    pub val_loss: f64,
    /// Validation accuracy.
    pub val_accuracy: f64,
}

/// Whether `b` is within `rel` of `a` relatively (or both are the same bits).
fn near(a: f64, b: f64, rel: f64) -> bool {
    a.to_bits() == b.to_bits() || (a - b).abs() <= rel * a.abs().max(b.abs())
}

/// The row comparing recorded `r` with re-trained `a` of `group`'s model; `exact`: every
/// value must be bit-identical. Counts and ops must be equal in either mode.
pub fn compare(group: u32, r: &EpochRow, a: &Retrained, exact: bool) -> AuditRow {
    let counts = [
        r.train_images,
        r.steps,
        r.val_images,
        r.train_ops,
        r.val_ops,
    ] == [
        a.train_images,
        a.steps,
        a.val_images,
        a.train_ops,
        a.val_ops,
    ];
    let floats = [
        (r.train_loss, a.train_loss),
        (r.val_loss, a.val_loss),
        (r.val_accuracy, a.val_accuracy),
    ];
    let values = if exact {
        floats.iter().all(|(x, y)| x.to_bits() == y.to_bits())
    } else {
        near(r.train_loss, a.train_loss, LOSS_TOLERANCE)
            && near(r.val_loss, a.val_loss, LOSS_TOLERANCE)
            && (r.val_accuracy - a.val_accuracy).abs() <= ACCURACY_TOLERANCE
    };
    AuditRow {
        group,
        model_id: r.model_id,
        epoch: r.epoch,
        train_images: [r.train_images, a.train_images],
        steps: [r.steps, a.steps],
        val_images: [r.val_images, a.val_images],
        train_ops: [r.train_ops, a.train_ops],
        val_ops: [r.val_ops, a.val_ops],
        train_loss: [r.train_loss, a.train_loss],
        val_loss: [r.val_loss, a.val_loss],
        val_accuracy: [r.val_accuracy, a.val_accuracy],
        agrees: u8::from(counts && values),
        digest: [0; 32],
    }
}

/// What differs in a row that does not agree, in words.
pub fn differences(row: &AuditRow) -> String {
    let mut out = Vec::new();
    for (name, [rec, got]) in [
        ("train_images", row.train_images),
        ("steps", row.steps),
        ("val_images", row.val_images),
        ("train_ops", row.train_ops),
        ("val_ops", row.val_ops),
    ] {
        if rec != got {
            out.push(format!("{name} recorded {rec}, re-trained {got}"));
        }
    }
    for (name, [rec, got]) in [
        ("train_loss", row.train_loss),
        ("val_loss", row.val_loss),
        ("val_accuracy", row.val_accuracy),
    ] {
        if rec.to_bits() != got.to_bits() {
            out.push(format!("{name} recorded {rec}, re-trained {got}"));
        }
    }
    format!(
        "group {} model {} epoch {}: {}",
        row.group,
        row.model_id,
        row.epoch,
        out.join(", ")
    )
}

/// The audit as `aiperf audit` writes it and `aiperf score` reads it back.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Audit {
    /// The audited run's digest (hex).
    pub run_digest: String,
    /// The sample's seed.
    pub sample_seed: u64,
    /// Trials re-trained.
    pub trials: u32,
    /// Epochs re-trained per trial (at most).
    pub epochs: u32,
    /// Training ranks used.
    pub ranks: u32,
    /// Threads per rank used.
    pub threads: u32,
    /// `bit-exact` or the tolerance applied.
    pub mode: String,
    /// `PASSED` or `FAILED`.
    pub verdict: String,
    /// One row per re-trained epoch.
    pub rows: Vec<AuditRow>,
}

impl Audit {
    /// The attributes' values in [`AUDIT_ATTRS`] order, the rows' chain end included.
    fn attrs(&self) -> Vec<(&'static str, Option<AttrValue>)> {
        let end = self.rows_end();
        let text = |s: &str| Some(AttrValue::Text(s.into()));
        vec![
            (attr::SCHEMA_VERSION, Some(AttrValue::U32(SCHEMA_VERSION))),
            (attr::PROGRAM_VERSION, text(&crate::version::short())),
            (attr::RUN_DIGEST, text(&self.run_digest)),
            (attr::SAMPLE_SEED, Some(AttrValue::U64(self.sample_seed))),
            (attr::TRIALS, Some(AttrValue::U32(self.trials))),
            (attr::EPOCHS, Some(AttrValue::U32(self.epochs))),
            (attr::RANKS, Some(AttrValue::U32(self.ranks))),
            (attr::THREADS, Some(AttrValue::U32(self.threads))),
            (attr::MODE, text(&self.mode)),
            (attr::VERDICT, text(&self.verdict)),
            (
                attr::ROWS_DIGEST,
                text(&serde_json::to_string(&end).expect("plain data")),
            ),
        ]
    }

    fn rows_end(&self) -> digest::ChainEnd {
        let seed = digest::chain_seed(AUDIT_FILE, "epochs");
        digest::ChainEnd::new(
            "epochs",
            self.rows.len() as u64,
            &digest::chain(seed, &self.rows),
        )
    }

    /// Writes `path` (refusing to replace an existing file), sealed; returns the audit
    /// digest. The file is written under a temporary name in the same folder and appears
    /// under `path` only once complete and closed ([`outputs::Staged::commit_new`]), so that
    /// a failure part way leaves no half audit behind (HDF5 records no file name: the
    /// bytes are the same).
    pub fn write(&self, path: &Path) -> Result<Digest, RecordError> {
        let exists = || RecordError::Hdf5 {
            path: path.into(),
            message: "exists: an audit is never replaced; move it away to audit again".into(),
        };
        let io = |error: std::io::Error| RecordError::Io {
            path: path.into(),
            error,
        };
        if path.exists() {
            return Err(exists());
        }
        let (staged, reserved) = outputs::Staged::new(path).map_err(io)?;
        drop(reserved);
        let sealed = self.write_file(staged.path(), path)?;
        match staged.commit_new() {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(exists()),
            Err(e) => Err(io(e)),
            Ok(()) => Ok(sealed),
        }
    }

    /// Writes the sealed audit into the HDF5 file `tmp` and closes it; errors name `path`,
    /// the file it is written for.
    fn write_file(&self, tmp: &Path, path: &Path) -> Result<Digest, RecordError> {
        let h5 = |e: hdf5::Error| RecordError::Hdf5 {
            path: path.into(),
            message: e.to_string(),
        };
        let file = File::create(tmp).map_err(h5)?;
        let mut rows = self.rows.clone();
        digest::seal(digest::chain_seed(AUDIT_FILE, "epochs"), &mut rows);
        file.new_dataset_builder()
            .with_data(&rows)
            .create("epochs")
            .map_err(h5)?;
        let attrs = self.attrs();
        for (name, value) in &attrs {
            match value {
                Some(AttrValue::U32(v)) => write_attr(&file, path, name, v)?,
                Some(AttrValue::U64(v)) => write_attr(&file, path, name, v)?,
                Some(AttrValue::F64(v)) => write_attr(&file, path, name, v)?,
                Some(AttrValue::Text(t)) => write_text_attr(&file, path, name, t)?,
                None => {}
            }
        }
        let sealed = digest::run_digest(&attrs);
        write_text_attr(&file, path, attr::AUDIT_DIGEST, &digest::hex(&sealed))?;
        file.flush().map_err(h5)?;
        file.close().map_err(h5)?;
        Ok(sealed)
    }
}

/// An audit read back: what it says and whether its seal holds for these records.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuditRecord {
    /// The audit.
    pub audit: Audit,
    /// Why it cannot be trusted (altered, or the audit of other records); empty: sound.
    pub problems: Vec<String>,
}

/// `dir/audit.h5`, if there is one, checked against its seal and `run_digest` (hex) of the
/// records in `dir`.
pub fn read(dir: &Path, run_digest: Option<&str>) -> Result<Option<AuditRecord>, RecordError> {
    let path = dir.join(AUDIT_FILE);
    if !path.is_file() {
        return Ok(None);
    }
    let f = Source::open(&path)?;
    let values = AUDIT_ATTRS
        .iter()
        .map(|s| Ok((s.name, f.attr_value(s)?)))
        .collect::<Result<Vec<_>, RecordError>>()?;
    let get_u32 = |name: &str| f.attr::<u32>(name);
    let rows = f.rows::<AuditRow>("epochs")?;
    let audit = Audit {
        run_digest: f.text(attr::RUN_DIGEST)?,
        sample_seed: f.attr(attr::SAMPLE_SEED)?,
        trials: get_u32(attr::TRIALS)?,
        epochs: get_u32(attr::EPOCHS)?,
        ranks: get_u32(attr::RANKS)?,
        threads: get_u32(attr::THREADS)?,
        mode: f.text(attr::MODE)?,
        verdict: f.text(attr::VERDICT)?,
        rows,
    };
    let mut problems = Vec::new();
    let seed = digest::chain_seed(AUDIT_FILE, "epochs");
    if let Some(row) = digest::first_broken(seed, &audit.rows) {
        problems.push(format!(
            "audit.h5 epochs row {row}: its digest does not follow: the audit was altered"
        ));
    }
    let stored = f.text(attr::AUDIT_DIGEST)?;
    let recomputed = digest::hex(&digest::run_digest(&values));
    let end = serde_json::to_string(&audit.rows_end()).expect("plain data");
    if !stored.eq_ignore_ascii_case(&recomputed) || f.text(attr::ROWS_DIGEST)? != end {
        problems.push("audit.h5: its audit digest does not match its attributes and rows: the audit was altered".into());
    }
    let failed = audit.rows.iter().any(|r| r.agrees == 0);
    if (audit.verdict == "PASSED") == failed {
        problems.push(format!(
            "audit.h5: verdict {} contradicts its rows",
            audit.verdict
        ));
    }
    match run_digest {
        Some(d) if d.eq_ignore_ascii_case(&audit.run_digest) => {}
        _ => problems.push(format!(
            "audit.h5 audits the records with run digest {}, not these ({}): it is another run's audit",
            audit.run_digest,
            run_digest.unwrap_or("no run digest")
        )),
    }
    Ok(Some(AuditRecord { audit, problems }))
}

/// What `aiperf score` shows of an audit beside the run's verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuditSummary {
    /// `PASSED`, `FAILED`, or `NOT TRUSTED` (altered, another run's, unreadable).
    pub verdict: String,
    /// `bit-exact` or the tolerance applied.
    pub mode: String,
    /// Trials re-trained.
    pub trials: u32,
    /// Epochs compared.
    pub epochs: usize,
    /// Each epoch that did not agree, in words.
    pub failures: Vec<String>,
    /// Why the audit cannot be trusted (empty: sound).
    pub problems: Vec<String>,
}

/// The summary of `dir/audit.h5` against the records' run digest; `None` without one.
pub fn summary(dir: &Path, run_digest: Option<&str>) -> Option<AuditSummary> {
    match read(dir, run_digest) {
        Ok(None) => None,
        Ok(Some(r)) => Some(AuditSummary {
            verdict: if r.problems.is_empty() {
                r.audit.verdict.clone()
            } else {
                "NOT TRUSTED".into()
            },
            mode: r.audit.mode.clone(),
            trials: r.audit.trials,
            epochs: r.audit.rows.len(),
            failures: r
                .audit
                .rows
                .iter()
                .filter(|row| row.agrees == 0)
                .map(differences)
                .collect(),
            problems: r.problems,
        }),
        Err(e) => Some(AuditSummary {
            verdict: "NOT TRUSTED".into(),
            mode: String::new(),
            trials: 0,
            epochs: 0,
            failures: Vec::new(),
            problems: vec![e.to_string()],
        }),
    }
}

#[cfg(test)]
mod tests;

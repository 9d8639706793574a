//! The audit's records (docs/design.md §5–§6): which trials a reviewer re-trains (a sample
//! drawn from the reviewer's randomness combined with the run digest, so that neither side
//! alone chooses it, plus the trial that holds the best accuracy), what each re-training gave
//! beside the record, and `audit.h5`, sealed like the run's records: its datasets are chains
//! and an audit digest covers every attribute of [`AUDIT_ATTRS`] and the chains' ends. The
//! verdict is recomputed from the figures by [`judge::judge`], by the audit and by every
//! scorer; `aiperf score` calls an audit verified only when given its digest. The
//! re-training itself needs libtorch and MPI and lives in `aiperf audit`.

use std::path::Path;

use hdf5::{File, H5Type};
use serde::Serialize;
use sha2::{Digest as _, Sha256};

use crate::digest::{self, Digest};
use crate::error::RecordError;
use crate::outputs;
use crate::schema::{AttrKind, AttrSpec, AttrValue, EpochRow, TrialRow, Written};

/// The schema of `audit.h5` (its own numbering: 5 added the early steps, with the run's
/// records' schema 7).
pub const AUDIT_SCHEMA: u32 = 5;
/// The oldest `audit.h5` schema read: 4, which differs only in comparing no early steps.
pub const OLDEST_AUDIT_SCHEMA: u32 = 4;
use crate::writer::{write_attr, write_text_attr};

pub mod judge;
mod read;
mod sample;
mod stats;

pub use judge::{judge, Judgement};
pub use read::{read, summary, summary_for, AuditRecord, AuditSummary};
pub use sample::{against_records, best_trial};

pub use crate::schema::AUDIT_FILE;
/// Trials drawn by default besides the best one: with a fraction f of the trials copies of
/// others, a draw of n misses every copy with probability about (1 − f)^n — 3 % for n = 5
/// when half are copies (docs/reviewer.md).
pub const DEFAULT_TRIALS: usize = 5;
/// Epochs re-trained per drawn trial by default, from its first. A first epoch's validation
/// accuracy scatters widely from seed to seed (±0.04 on the `make run` preset) and the later
/// ones narrowly (±0.005), so the statistical mode's power rests on the later epochs: with one
/// epoch per drawn trial only the best trial's carried it (docs/reviewer.md measures both).
pub const DEFAULT_EPOCHS: u32 = 3;
/// Re-trainings per sampled epoch in statistical mode by default (the recorded seed and two
/// more).
pub const DEFAULT_SEEDS: u32 = 3;
/// Family-wise false-alarm rate of the statistical mode by default.
pub const DEFAULT_ALPHA: f64 = 0.01;

/// How the audit compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum Mode {
    /// Same platform, ranks and threads: every figure bit-identical.
    Exact,
    /// Elsewhere: each recorded figure inside the re-trainings' prediction interval.
    Statistical,
}

impl Mode {
    /// As stored: `exact` or `statistical`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Exact => "exact",
            Mode::Statistical => "statistical",
        }
    }
}

/// One re-trained epoch beside the recorded one (`audit.h5`, dataset `epochs`): the
/// re-training with the trial's recorded seed.
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
    /// The epoch's duration recorded / re-trained, seconds (NaN unless `--timed`).
    pub seconds: [f64; 2],
    /// Running SHA-256 of the previous row's digest and this row's fields.
    pub digest: [u8; 32],
}

/// A further re-training of a sampled epoch (`audit.h5`, dataset `seeds`): another seed in
/// statistical mode, a repeat of the recorded seed under `--timed`.
#[derive(H5Type, Clone, Copy, Debug, PartialEq, Serialize)]
#[repr(C)]
pub struct SeedRow {
    /// The trial's group.
    pub group: u32,
    /// Its model id.
    pub model_id: u64,
    /// The epoch (from 1).
    pub epoch: u32,
    /// Which re-training (from 1; 0 is the `epochs` row's).
    pub index: u32,
    /// The seed it trained with.
    pub seed: u64,
    /// Mean training loss.
    pub train_loss: f64,
    /// Validation loss.
    pub val_loss: f64,
    /// Validation accuracy.
    pub val_accuracy: f64,
    /// The epoch's duration, seconds.
    pub seconds: f64,
    /// Running SHA-256 of the previous row's digest and this row's fields.
    pub digest: [u8; 32],
}

/// One of a trial's early steps beside its re-training with the recorded seed (`audit.h5`,
/// dataset `steps`, audit schema 5): the global training loss of step `step` of the trial's
/// first epoch. A step the records lack is recorded as NaN (and fails).
#[derive(H5Type, Clone, Copy, Debug, PartialEq, Serialize)]
#[repr(C)]
pub struct AuditStepRow {
    /// The trial's group.
    pub group: u32,
    /// Its model id.
    pub model_id: u64,
    /// The step (from 0).
    pub step: u32,
    /// The step's global training loss recorded / re-trained.
    pub train_loss: [f64; 2],
    /// Running SHA-256 of the previous row's digest and this row's fields.
    pub digest: [u8; 32],
}

macro_rules! carried {
    ($t:ty) => {
        impl digest::Carried for $t {
            fn digest(&self) -> Digest {
                self.digest
            }
            fn set_digest(&mut self, d: Digest) {
                self.digest = d;
            }
        }
    };
}
carried!(AuditRow);
carried!(SeedRow);
carried!(AuditStepRow);

/// Attribute names of `audit.h5`.
pub mod attr {
    /// u32: the records' schema version.
    pub const SCHEMA_VERSION: &str = "schema_version";
    /// string: the aiperf that audited.
    pub const PROGRAM_VERSION: &str = "program_version";
    /// string: the audited run's run digest (hex).
    pub const RUN_DIGEST: &str = "run_digest";
    /// u64: the reviewer's draw (fresh randomness unless `--draw` repeats one).
    pub const DRAW: &str = "draw";
    /// u64: the sample's seed, from the run digest and the draw ([`super::sample_seed`]).
    pub const SAMPLE_SEED: &str = "sample_seed";
    /// u32: trials re-trained.
    pub const TRIALS: &str = "trials";
    /// u32: epochs re-trained per drawn trial (at most).
    pub const EPOCHS: &str = "epochs";
    /// u32: training ranks the audit used.
    pub const RANKS: &str = "ranks";
    /// u32: CPU threads per rank the audit used.
    pub const THREADS: &str = "threads";
    /// string: `exact` or `statistical`.
    pub const MODE: &str = "mode";
    /// string: why that mode.
    pub const MODE_REASON: &str = "mode_reason";
    /// u32: re-trainings per sampled epoch.
    pub const SEEDS: &str = "seeds";
    /// f64: family-wise false-alarm rate of the statistical mode.
    pub const ALPHA: &str = "alpha";
    /// u32: 1 when epoch times were compared (`--timed`).
    pub const TIMED: &str = "timed";
    /// string: JSON [`crate::platform::Fingerprint`] of the auditing ranks.
    pub const PLATFORM: &str = "platform";
    /// string: the verdict at writing (`PASSED`, `FAILED`); readers recompute it.
    pub const VERDICT: &str = "verdict";
    /// string: JSON [`crate::digest::ChainEnd`] of the `epochs` rows.
    pub const ROWS_DIGEST: &str = "rows_digest";
    /// string: JSON [`crate::digest::ChainEnd`] of the `seeds` rows.
    pub const SEEDS_DIGEST: &str = "seeds_digest";
    /// string: JSON [`crate::digest::ChainEnd`] of the `steps` rows (audit schema 5).
    pub const STEPS_DIGEST: &str = "steps_digest";
    /// string: the audit digest over every other attribute, hex.
    pub const AUDIT_DIGEST: &str = "audit_digest";
}

const fn spec(name: &'static str, kind: AttrKind) -> AttrSpec {
    AttrSpec {
        name,
        kind,
        written: Written::AtStart,
        since: 4,
    }
}

/// Every attribute of `audit.h5` but its digest, in the order the audit digest covers them.
pub const AUDIT_ATTRS: &[AttrSpec] = &[
    spec(attr::SCHEMA_VERSION, AttrKind::U32),
    spec(attr::PROGRAM_VERSION, AttrKind::Text),
    spec(attr::RUN_DIGEST, AttrKind::Text),
    spec(attr::DRAW, AttrKind::U64),
    spec(attr::SAMPLE_SEED, AttrKind::U64),
    spec(attr::TRIALS, AttrKind::U32),
    spec(attr::EPOCHS, AttrKind::U32),
    spec(attr::RANKS, AttrKind::U32),
    spec(attr::THREADS, AttrKind::U32),
    spec(attr::MODE, AttrKind::Text),
    spec(attr::MODE_REASON, AttrKind::Text),
    spec(attr::SEEDS, AttrKind::U32),
    spec(attr::ALPHA, AttrKind::F64),
    spec(attr::TIMED, AttrKind::U32),
    spec(attr::PLATFORM, AttrKind::Text),
    spec(attr::VERDICT, AttrKind::Text),
    spec(attr::ROWS_DIGEST, AttrKind::Text),
    spec(attr::SEEDS_DIGEST, AttrKind::Text),
    AttrSpec {
        since: 5,
        ..spec(attr::STEPS_DIGEST, AttrKind::Text)
    },
];

/// The sample's seed: the first 8 bytes (little-endian) of SHA-256 of
/// `aiperf-audit-sample-2`, NUL, the run digest's 32 bytes and the draw (8 bytes,
/// little-endian).
pub fn sample_seed(run_digest: &Digest, draw: u64) -> u64 {
    let mut h = Sha256::new();
    h.update(b"aiperf-audit-sample-2\0");
    h.update(run_digest);
    h.update(draw.to_le_bytes());
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
    /// What the epoch learned.
    pub figures: crate::schema::EpochFigures,
    /// Training operations from the recorded architecture, these images and steps.
    pub train_ops: u64,
    /// Validation operations likewise.
    pub val_ops: u64,
    /// The epoch's duration, seconds.
    pub seconds: f64,
}

/// The row setting recorded epoch `r` (of `group`, its duration `recorded_s`) beside its
/// re-training `a` with the recorded seed.
pub fn row(group: u32, r: &EpochRow, a: &Retrained, recorded_s: f64) -> AuditRow {
    let f = &a.figures;
    AuditRow {
        group,
        model_id: r.model_id,
        epoch: r.epoch,
        train_images: [r.train_images, f.train_images],
        steps: [r.steps, f.steps],
        val_images: [r.val_images, f.val_images],
        train_ops: [r.train_ops, a.train_ops],
        val_ops: [r.val_ops, a.val_ops],
        train_loss: [r.train_loss, f.train_loss],
        val_loss: [r.val_loss, f.val_loss],
        val_accuracy: [r.val_accuracy, f.val_accuracy],
        seconds: [recorded_s, a.seconds],
        digest: [0; 32],
    }
}

/// The row of a further re-training (`index` ≥ 1, with `seed`) of recorded epoch `r`.
pub fn seed_row(group: u32, r: &EpochRow, index: u32, seed: u64, a: &Retrained) -> SeedRow {
    SeedRow {
        group,
        model_id: r.model_id,
        epoch: r.epoch,
        index,
        seed,
        train_loss: a.figures.train_loss,
        val_loss: a.figures.val_loss,
        val_accuracy: a.figures.val_accuracy,
        seconds: a.seconds,
        digest: [0; 32],
    }
}

/// The audit as `aiperf audit` writes it and `aiperf score` reads it back.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Audit {
    /// The audited run's digest (hex).
    pub run_digest: String,
    /// The reviewer's draw.
    pub draw: u64,
    /// The sample's seed ([`sample_seed`] of the run digest and the draw).
    pub sample_seed: u64,
    /// Trials re-trained.
    pub trials: u32,
    /// Epochs re-trained per drawn trial (at most; the best trial up to its best epoch).
    pub epochs: u32,
    /// Training ranks used.
    pub ranks: u32,
    /// Threads per rank used.
    pub threads: u32,
    /// How it compares.
    pub mode: Mode,
    /// Why that mode, in words.
    pub mode_reason: String,
    /// Re-trainings per sampled epoch (statistical: seeds; exact: 1, or repeats if timed).
    pub seeds: u32,
    /// Family-wise false-alarm rate (statistical mode).
    pub alpha: f64,
    /// Whether epoch times were compared.
    pub timed: bool,
    /// The auditing ranks' platform fingerprint, JSON.
    pub platform_json: String,
    /// `PASSED` or `FAILED`, as [`judge::judge`] gives it.
    pub verdict: String,
    /// One row per re-trained epoch (recorded seed).
    pub rows: Vec<AuditRow>,
    /// The further re-trainings.
    pub seed_rows: Vec<SeedRow>,
    /// The early steps compared (trials re-trained on their group's rank count).
    pub step_rows: Vec<AuditStepRow>,
}

impl Audit {
    /// The attributes' values in [`AUDIT_ATTRS`] order, the chains' ends included.
    fn attrs(&self) -> Vec<(&'static str, Option<AttrValue>)> {
        let text = |s: &str| Some(AttrValue::Text(s.into()));
        let end = |e: digest::ChainEnd| text(&serde_json::to_string(&e).expect("plain data"));
        let u32v = |v: u32| Some(AttrValue::U32(v));
        vec![
            (attr::SCHEMA_VERSION, u32v(AUDIT_SCHEMA)),
            (attr::PROGRAM_VERSION, text(&crate::version::short())),
            (attr::RUN_DIGEST, text(&self.run_digest)),
            (attr::DRAW, Some(AttrValue::U64(self.draw))),
            (attr::SAMPLE_SEED, Some(AttrValue::U64(self.sample_seed))),
            (attr::TRIALS, u32v(self.trials)),
            (attr::EPOCHS, u32v(self.epochs)),
            (attr::RANKS, u32v(self.ranks)),
            (attr::THREADS, u32v(self.threads)),
            (attr::MODE, text(self.mode.as_str())),
            (attr::MODE_REASON, text(&self.mode_reason)),
            (attr::SEEDS, u32v(self.seeds)),
            (attr::ALPHA, Some(AttrValue::F64(self.alpha))),
            (attr::TIMED, u32v(u32::from(self.timed))),
            (attr::PLATFORM, text(&self.platform_json)),
            (attr::VERDICT, text(&self.verdict)),
            (attr::ROWS_DIGEST, end(self.end("epochs", &self.rows))),
            (attr::SEEDS_DIGEST, end(self.end("seeds", &self.seed_rows))),
            (attr::STEPS_DIGEST, end(self.end("steps", &self.step_rows))),
        ]
    }

    fn end<T: H5Type>(&self, dataset: &'static str, rows: &[T]) -> digest::ChainEnd {
        let seed = digest::chain_seed(AUDIT_FILE, dataset);
        digest::ChainEnd::new(dataset, rows.len() as u64, &digest::chain(seed, rows))
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
        let mut seeds = self.seed_rows.clone();
        digest::seal(digest::chain_seed(AUDIT_FILE, "seeds"), &mut seeds);
        let mut steps = self.step_rows.clone();
        digest::seal(digest::chain_seed(AUDIT_FILE, "steps"), &mut steps);
        file.new_dataset_builder()
            .with_data(&steps)
            .create("steps")
            .map_err(h5)?;
        file.new_dataset_builder()
            .with_data(&rows)
            .create("epochs")
            .map_err(h5)?;
        file.new_dataset_builder()
            .with_data(&seeds)
            .create("seeds")
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

#[cfg(test)]
mod tests;

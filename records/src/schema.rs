//! The record schema (docs/design.md §6, a contract): row types of the HDF5 datasets, the
//! attributes of each file as a table ([`PRIMARY_ATTRS`], [`GROUP_ATTRS`]) and the datasets
//! of each file ([`PRIMARY_DATASETS`], [`GROUP_DATASETS`]), and the versions. The tables are
//! what the seal covers ([`crate::digest`]): an attribute or dataset added to the schema is
//! added here, and is then sealed. Documented for reviewers in `results/README.md`.

use hdf5::H5Type;

/// Version of this schema; readers refuse others.
pub const SCHEMA_VERSION: u32 = 7;
/// Version of the scoring and validity rules (docs/design.md §5).
pub const RULES_VERSION: &str = "aiperf-rules-6";
/// File name of the primary's records.
pub const PRIMARY_FILE: &str = "primary.h5";
/// File name of a reviewer's audit of the run, in the run's folder.
pub const AUDIT_FILE: &str = "audit.h5";

/// File name of group `g`'s records.
pub fn group_file(g: u32) -> String {
    format!("group-{g}.h5")
}

/// One completed epoch of one trial in one group (`group-<g>.h5`, dataset `epochs`).
#[derive(H5Type, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct EpochRow {
    /// Completion time, Unix seconds on the common clock.
    pub time_s: f64,
    /// Trial number within the group.
    pub trial: u64,
    /// Global model id.
    pub model_id: u64,
    /// Epoch number within the trial (from 1).
    pub epoch: u32,
    /// Training images processed in the epoch (all ranks of the group).
    pub train_images: u64,
    /// Optimizer steps of the epoch (each an update of every parameter; schema 2).
    pub steps: u64,
    /// Validation images evaluated.
    pub val_images: u64,
    /// Training operations (FP + BP per image, plus updates per step; docs/design.md §4).
    pub train_ops: u64,
    /// Validation operations (FP per image).
    pub val_ops: u64,
    /// Mean training loss.
    pub train_loss: f64,
    /// Validation loss.
    pub val_loss: f64,
    /// Validation accuracy in [0, 1].
    pub val_accuracy: f64,
    /// Seconds in forward/backward/update.
    pub compute_s: f64,
    /// Seconds in gradient all-reduce.
    pub allreduce_s: f64,
    /// Bytes all-reduced per rank.
    pub allreduce_bytes: u64,
    /// Seconds waiting for data.
    pub data_wait_s: f64,
    /// Running SHA-256 of the previous row's digest and this row's fields
    /// ([`crate::digest`]).
    pub digest: [u8; 32],
}

/// What one epoch of a trial learned, the same on every rank of its group: the figures the
/// trainer reports, the audit's re-training repeats, and a recorded row holds beside its
/// operations, time split and digest ([`EpochRow`], whose layout is the schema's).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EpochFigures {
    /// Training images of the epoch over the group (optimizer steps × global batch).
    pub train_images: u64,
    /// Optimizer steps.
    pub steps: u64,
    /// Validation images over the group.
    pub val_images: u64,
    /// Mean training loss (with label smoothing) over the epoch's global batches.
    pub train_loss: f64,
    /// Mean validation cross-entropy.
    pub val_loss: f64,
    /// Validation top-1 accuracy in [0, 1].
    pub val_accuracy: f64,
}

impl EpochRow {
    /// The row's learning figures.
    pub fn figures(&self) -> EpochFigures {
        EpochFigures {
            train_images: self.train_images,
            steps: self.steps,
            val_images: self.val_images,
            train_loss: self.train_loss,
            val_loss: self.val_loss,
            val_accuracy: self.val_accuracy,
        }
    }
}

/// Optimizer steps at the start of every trial whose global training loss is recorded
/// ([`StepRow`], schema 7): enough for the audit to tell the same trial re-trained on
/// another processor (its first steps agree to 1e-7–1e-5 relative, parting to about 1e-3
/// by step 30) from another seed, architecture or batch (about 1e-2 from the first step;
/// docs/reviewer.md).
pub const EARLY_STEPS: u32 = 32;

/// The global training loss of one of the first [`EARLY_STEPS`] optimizer steps of a trial
/// (`group-<g>.h5`, dataset `steps`, schema 7): the loss of the step's global batch, the
/// weighted sum of every rank's shard loss, in the order the steps ran. Written once the
/// trial's first epoch completed, before its epoch row.
#[derive(H5Type, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct StepRow {
    /// Global model id.
    pub model_id: u64,
    /// The step within the trial's first epoch (from 0).
    pub step: u32,
    /// The global batch's training loss (with label smoothing), before the step's update.
    pub train_loss: f64,
    /// Running SHA-256 of the previous row's digest and this row's fields
    /// ([`crate::digest`]).
    pub digest: [u8; 32],
}

/// One monitoring sample (`group-<g>.h5`, dataset `monitor`). NaN where not measured.
#[derive(H5Type, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct MonitorRow {
    /// Unix seconds.
    pub time_s: f64,
    /// Accelerator utilisation in [0, 1].
    pub accel_util: f64,
    /// Accelerator memory in use, bytes.
    pub accel_mem_bytes: f64,
    /// CPU utilisation in [0, 1].
    pub cpu_util: f64,
    /// Host memory in use, bytes.
    pub host_mem_bytes: f64,
}

/// One traced span of a step on one rank (`group-<g>.h5`, dataset `trace`; rows only with
/// `aiperf run --trace-steps N`). Diagnostics: not part of the score or of the digests.
#[derive(H5Type, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct TraceRow {
    /// The rank within the group (0: the leader).
    pub rank: u32,
    /// Global model id.
    pub model_id: u64,
    /// Epoch within the trial (from 1).
    pub epoch: u32,
    /// Step within the epoch (from 0).
    pub step: u32,
    /// 0 data wait, 1 forward + backward (emulated: the wait), 2 a bucket's exchange,
    /// 3 optimizer.
    pub kind: u8,
    /// The bucket, for an exchange.
    pub bucket: u32,
    /// Start, Unix seconds on the common clock.
    pub start_s: f64,
    /// End, Unix seconds on the common clock.
    pub end_s: f64,
}

/// How a trial ended.
#[derive(H5Type, Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum TrialStatus {
    /// Trained to its epoch budget or early stop.
    Finished = 0,
    /// Cut by the deadline (its completed epochs still count).
    Stopped = 1,
    /// Failed.
    Failed = 2,
}

/// One trial (`primary.h5`, dataset `trials`).
#[derive(H5Type, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct TrialRow {
    /// Global model id.
    pub model_id: u64,
    /// Father's model id, −1 for an initial model.
    pub father: i64,
    /// Group that trained it.
    pub group: u32,
    /// The group's round (trials it had finished before).
    pub round: u32,
    /// Per-accelerator batch size.
    pub batch_size: u32,
    /// Deeper-morphism kernel size.
    pub kernel_size: u32,
    /// Epochs completed.
    pub epochs: u32,
    /// Best measured validation accuracy.
    pub best_accuracy: f64,
    /// Value reported to the search (predicted final accuracy in warm-up rounds).
    pub reported_accuracy: f64,
    /// Start, Unix seconds.
    pub start_s: f64,
    /// End, Unix seconds.
    pub end_s: f64,
    /// How it ended.
    pub status: TrialStatus,
    /// Running SHA-256 of the previous row's digest and this row's fields (schema 3).
    pub digest: [u8; 32],
}

/// Attribute names of `primary.h5`.
pub mod attr {
    /// u32: [`super::SCHEMA_VERSION`].
    pub const SCHEMA_VERSION: &str = "schema_version";
    /// string: aiperf's version.
    pub const PROGRAM_VERSION: &str = "program_version";
    /// string: [`super::RULES_VERSION`].
    pub const RULES_VERSION: &str = "rules_version";
    /// string: the resolved configuration as JSON.
    pub const CONFIG: &str = "config";
    /// f64: the run's start (t0), Unix seconds on the common clock.
    pub const START_TIME: &str = "start_time_s";
    /// f64: the run's end; written at a clean stop, absent after a crash.
    pub const END_TIME: &str = "end_time_s";
    /// u32: MPI world size.
    pub const WORLD_SIZE: &str = "world_size";
    /// u32: replica groups.
    pub const GROUPS: &str = "groups";
    /// u32: accelerators (training ranks).
    pub const ACCELERATORS: &str = "accelerators";
    /// string: JSON list of host names.
    pub const HOSTS: &str = "hosts";
    /// string: JSON list of devices.
    pub const DEVICES: &str = "devices";
    /// u64: the run's seed.
    pub const SEED: &str = "seed";
    /// string: the dataset (`imagenet` is the official one).
    pub const DATASET: &str = "dataset";
    /// string: the start architecture (`resnet50` is the official one).
    pub const START_ARCH: &str = "start_architecture";
    /// string: training precision (`fp32`, `bf16`, `fp16`).
    pub const PRECISION: &str = "precision";
    /// string: JSON [`crate::rules::DatasetIdentity`], from the packs' headers.
    pub const DATASET_IDENTITY: &str = "dataset_identity";
    /// string: JSON [`crate::rules::SearchRecord`], the algorithms and schedules used.
    pub const SEARCH: &str = "search";
    /// string, at a clean stop: JSON list of [`crate::digest::GroupChain`], one per group.
    pub const GROUP_DIGESTS: &str = "group_digests";
    /// string, at a clean stop: JSON list of [`crate::digest::ChainEnd`], one per dataset
    /// of `primary.h5` ([`super::PRIMARY_DATASETS`]).
    pub const PRIMARY_DIGESTS: &str = "primary_digests";
    /// string, at a clean stop: the run digest over every other attribute, 64 hex digits.
    pub const RUN_DIGEST: &str = "run_digest";
    /// string, optional: JSON list of `[stopped_s, resumed_s]` pairs, one per
    /// `aiperf run --resume` — the last record before the stop and the moment the run went
    /// on. The down time between them counts as wall time.
    pub const RESUMES: &str = "resumes";
    /// string (schema 4): JSON list of [`crate::platform::PlatformEntry`], one per distinct
    /// platform fingerprint among the ranks.
    pub const PLATFORM: &str = "platform";
    /// string (schema 5): JSON list of [`crate::ceiling::Ceiling`]: from schema 6 one per
    /// accelerator and native precision, in schema 5 one per accelerator in the run's
    /// precision.
    pub const CEILINGS: &str = "ceilings";
}

/// One TPE observation (`primary.h5`, dataset `tpe`), in the order the primary learned them.
#[derive(H5Type, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct TpeRow {
    /// Unix seconds.
    pub time_s: f64,
    /// Batch size tried.
    pub batch_size: u32,
    /// Kernel size tried.
    pub kernel_size: u32,
    /// Loss observed (1 − reported accuracy).
    pub loss: f64,
    /// Running SHA-256 of the previous row's digest and this row's fields (schema 3).
    pub digest: [u8; 32],
}

/// An attribute's stored type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// 64-bit float.
    F64,
    /// Variable-length UTF-8 string.
    Text,
}

/// When an attribute is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// When the file is created.
    AtStart,
    /// At a clean stop (absent after a crash, removed by a resume).
    AtStop,
    /// By the first `aiperf run --resume` (absent for a run never resumed).
    OnResume,
}

/// One attribute of the schema.
#[derive(Clone, Copy, Debug)]
pub struct AttrSpec {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub kind: AttrKind,
    /// When it is written.
    pub written: Written,
    /// The first schema version that has it (older records are sealed without it).
    pub since: u32,
}

/// An attribute's value as stored.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// [`AttrKind::U32`].
    U32(u32),
    /// [`AttrKind::U64`].
    U64(u64),
    /// [`AttrKind::F64`].
    F64(f64),
    /// [`AttrKind::Text`].
    Text(String),
}

const fn spec(name: &'static str, kind: AttrKind, written: Written) -> AttrSpec {
    AttrSpec {
        name,
        kind,
        written,
        since: 1,
    }
}

/// The attributes of [`PRIMARY_ATTRS`] that records of schema `version` have, in order.
pub fn primary_attrs(version: u32) -> impl Iterator<Item = &'static AttrSpec> + Clone {
    PRIMARY_ATTRS.iter().filter(move |s| s.since <= version)
}

/// Every attribute of `primary.h5` but the run digest, in the order the run digest
/// covers them: all of them are sealed.
#[rustfmt::skip]
pub const PRIMARY_ATTRS: &[AttrSpec] = {
    use AttrKind::{Text, F64, U32, U64};
    use Written::{AtStart, AtStop, OnResume};
    &[
        spec(attr::SCHEMA_VERSION, U32, AtStart),
        spec(attr::PROGRAM_VERSION, Text, AtStart),
        spec(attr::RULES_VERSION, Text, AtStart),
        spec(attr::CONFIG, Text, AtStart),
        spec(attr::START_TIME, F64, AtStart),
        spec(attr::END_TIME, F64, AtStop),
        spec(attr::WORLD_SIZE, U32, AtStart),
        spec(attr::GROUPS, U32, AtStart),
        spec(attr::ACCELERATORS, U32, AtStart),
        spec(attr::HOSTS, Text, AtStart),
        spec(attr::DEVICES, Text, AtStart),
        spec(attr::SEED, U64, AtStart),
        spec(attr::DATASET, Text, AtStart),
        spec(attr::START_ARCH, Text, AtStart),
        spec(attr::PRECISION, Text, AtStart),
        spec(attr::DATASET_IDENTITY, Text, AtStart),
        spec(attr::SEARCH, Text, AtStart),
        AttrSpec { since: 4, ..spec(attr::PLATFORM, Text, AtStart) },
        AttrSpec { since: 5, ..spec(attr::CEILINGS, Text, AtStart) },
        spec(attr::RESUMES, Text, OnResume),
        spec(attr::GROUP_DIGESTS, Text, AtStop),
        spec(attr::PRIMARY_DIGESTS, Text, AtStop),
    ]
};

/// Every attribute of `group-<g>.h5`. Sealed through the primary's `group_digests`: the
/// schema version must be the primary's, `group` the file's number and `accelerators` the
/// recorded ranks.
pub const GROUP_ATTRS: &[AttrSpec] = &[
    spec(attr::SCHEMA_VERSION, AttrKind::U32, Written::AtStart),
    spec("group", AttrKind::U32, Written::AtStart),
    spec(attr::ACCELERATORS, AttrKind::U32, Written::AtStart),
];

/// The datasets of `primary.h5`, each one chain (`architectures` chains each model id of
/// `architecture_ids` with its JSON).
pub const PRIMARY_DATASETS: &[&str] = &["trials", "architectures", "tpe"];

/// The datasets of `group-<g>.h5`, each one chain (`steps` from schema 7).
pub const GROUP_DATASETS: &[&str] = &["epochs", "monitor", "trace", "steps"];

/// The datasets of `group-<g>.h5` that records of schema `version` have.
pub fn group_datasets(version: u32) -> &'static [&'static str] {
    if version >= 7 {
        GROUP_DATASETS
    } else {
        &GROUP_DATASETS[..3]
    }
}

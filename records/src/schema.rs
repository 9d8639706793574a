//! The record schema (DESIGN.md §6, a contract): row types of the HDF5 datasets, attribute
//! names, and the versions. Documented for reviewers in `results/README.md`.

use hdf5::H5Type;

/// Version of this schema; readers refuse others.
pub const SCHEMA_VERSION: u32 = 2;
/// Version of the scoring and validity rules (DESIGN.md §5).
pub const RULES_VERSION: &str = "aiperf-rules-3";
/// File name of the primary's records.
pub const PRIMARY_FILE: &str = "primary.h5";

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
    /// Training operations (FP + BP per image, plus updates per step; DESIGN.md §4).
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
    /// Running SHA-256 of the previous row's digest and this row's fields (schema 2;
    /// [`crate::digest`]).
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
    /// string, at a clean stop: JSON list of [`crate::digest::GroupChain`].
    pub const GROUP_DIGESTS: &str = "group_digests";
    /// string, at a clean stop: the run digest, 64 hex digits.
    pub const RUN_DIGEST: &str = "run_digest";
    /// string, optional: JSON list of `[stopped_s, resumed_s]` pairs, one per
    /// `aiperf run --resume` — the last record before the stop and the moment the run went
    /// on. The down time between them counts as wall time.
    pub const RESUMES: &str = "resumes";
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
}

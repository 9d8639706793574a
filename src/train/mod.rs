//! Training on a replica group: the libtorch trainer of a trial ([`TrialTrainer`]), which
//! sums its gradients over the group through the exchange ([`crate::exchange`]); `aiperf
//! dp-check`, which verifies under MPI that every rank keeps bit-identical parameters; the
//! precision, memory format and their start-up probe; the training rules (learning-rate
//! schedule, budgets, patience, early stopping, predicted accuracy) as pure functions; and
//! the simulated and emulated trainers.

pub mod amp;
mod check;
pub mod emulated;
pub mod fault;
pub mod memory_format;
pub mod native;
pub mod probe;
pub mod scaler;
pub mod schedule;
mod setup;
pub mod simulated;
mod trainer;

use mpi::topology::SimpleCommunicator;

pub use amp::Precision;
pub use check::{dp_check, DpReport};
pub use memory_format::MemoryFormat;
pub use trainer::{AugmentOn, RealTrainer, TrainConfig, TrialSpec, TrialTrainer};

/// What a traced span of a step was (`aiperf run --trace-steps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[repr(u8)]
pub enum SpanKind {
    /// Waiting for the loader's batch.
    DataWait = 0,
    /// Forward and backward (the emulated trainer: its wait).
    Compute = 1,
    /// One bucket's reduction.
    Exchange = 2,
    /// The optimizer's update.
    Optimizer = 3,
}

/// One traced span of a step on this rank, in Unix seconds of this machine.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Span {
    /// The step (from 0).
    pub step: u32,
    /// What it was.
    pub kind: SpanKind,
    /// The bucket, for an exchange (else 0).
    pub bucket: u32,
    /// Start.
    pub start_s: f64,
    /// End.
    pub end_s: f64,
}

impl Span {
    /// A span of `kind` from `start_s` to `end_s`.
    pub fn between(step: u32, kind: SpanKind, start_s: f64, end_s: f64) -> Span {
        Span {
            step,
            kind,
            bucket: 0,
            start_s,
            end_s,
        }
    }

    /// A span of `kind` from `start_s` to now.
    pub fn until_now(step: u32, kind: SpanKind, start_s: f64) -> Span {
        Span {
            step,
            kind,
            bucket: 0,
            start_s,
            end_s: crate::host::unix_s(),
        }
    }
}

/// The exchange spans of one step's buckets.
pub fn exchange_spans(step: u32, buckets: &[(f64, f64)]) -> impl Iterator<Item = Span> + '_ {
    buckets
        .iter()
        .enumerate()
        .map(move |(b, &(start_s, end_s))| Span {
            step,
            kind: SpanKind::Exchange,
            bucket: b as u32,
            start_s,
            end_s,
        })
}

/// What one epoch of a trial did, the same on every rank of the group except for the time
/// split and the spans, which are this rank's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EpochStats {
    /// What the epoch learned (the same on every rank of the group).
    pub figures: aiperf_records::schema::EpochFigures,
    /// Seconds of forward, backward, update and validation arithmetic.
    pub compute_s: f64,
    /// Seconds in the gradient, statistics and metric exchanges.
    pub allreduce_s: f64,
    /// Bytes this rank sent in those exchanges.
    pub allreduce_bytes: u64,
    /// Seconds waiting for the loader.
    pub data_wait_s: f64,
    /// Wall-clock seconds of the whole epoch.
    pub wall_s: f64,
    /// The run ended during the epoch: it was abandoned (the time split so far is filled
    /// in; nothing else counts).
    pub abandoned: bool,
    /// The loss or the gradients became non-finite and stayed so (fp32: at once; fp16: the
    /// loss scale fell to its floor): the epoch does not count and the trial fails.
    pub non_finite: bool,
    /// The first `--trace-steps` steps' spans (empty unless traced).
    pub spans: Vec<Span>,
    /// Epoch 1 of the real trainer: the global training loss of each of its first
    /// [`aiperf_records::schema::EARLY_STEPS`] steps (summed over the group's ranks; empty
    /// otherwise, and for the stand-in trainers).
    pub early_losses: Vec<f64>,
}

/// One trial being trained on this rank of a group.
pub trait TrialRun {
    /// Trains and validates epoch `epoch` (1-based); collective over the group. `stop` is
    /// asked during the epoch; when it says yes on the leader the group abandons the epoch.
    fn epoch(&mut self, epoch: u32, stop: &dyn Fn() -> bool) -> Result<EpochStats, TrainError>;
    /// A hash of the parameters (equal on every rank of the group when the exchange
    /// works); `None` for a trainer without parameters.
    fn params_hash(&self) -> Option<u64>;
}

/// How the ranks of a group train trials: `real` (libtorch), `simulated`, or a test double.
pub trait Trainer {
    /// Starts a trial of the group's `round` (0-based) on this rank (collective over
    /// `comm`, the group).
    fn start<'c>(
        &'c self,
        comm: &'c SimpleCommunicator,
        spec: &TrialSpec,
        round: u32,
    ) -> Result<Box<dyn TrialRun + 'c>, TrainError>;
    /// The trainer's name as recorded (`real`, `simulated`).
    fn name(&self) -> &'static str;
}

/// Why a training step failed.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// libtorch refused an operation.
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
    /// The exchange failed.
    #[error(transparent)]
    Exchange(#[from] crate::exchange::ExchangeError),
    /// The data could not be loaded.
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    /// The model could not be built.
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    /// The settings do not fit the data or the device.
    #[error("{0}")]
    Config(String),
}

/// Every variable of `vs` (parameters and buffers) in name order: the VarStore's map
/// iterates in a different order in every process, and the exchange needs one order.
pub(crate) fn all_variables(vs: &tch::nn::VarStore) -> Vec<(String, tch::Tensor)> {
    let mut named: Vec<(String, tch::Tensor)> = vs.variables().into_iter().collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named
}

/// The float buffers of `vs` (batch-norm running statistics) in name order.
pub(crate) fn float_buffers(vs: &tch::nn::VarStore) -> Vec<tch::Tensor> {
    all_variables(vs)
        .into_iter()
        .filter(|(_, t)| !t.requires_grad() && t.kind() == tch::Kind::Float)
        .map(|(_, t)| t)
        .collect()
}

/// Waits for the device's queued work, so that wall-clock intervals measure it.
pub(crate) fn synchronize(device: tch::Device) {
    if let tch::Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

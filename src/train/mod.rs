//! Training on a replica group. So far: the data-parallel exchange — every rank's gradients
//! (and batch-norm statistics), weighted by its share of the global batch, summed over the
//! group communicator so that every rank applies the same update and holds bit-identical
//! parameters and buffers; `aiperf dp-check`, which verifies that under MPI; and the
//! training rules (learning-rate schedule, budgets, patience, early stopping, predicted
//! accuracy) as pure functions; and the simulated trainer's model of a trial.

mod check;
pub mod schedule;
pub mod simulated;
mod sync;

pub use check::{dp_check, DpReport};
pub use sync::{average_buffers, sync_gradients, SyncStats};

/// Why a training step failed.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// libtorch refused an operation.
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
    /// A variable has no gradient yet.
    #[error("trainable variable {0} has no gradient: run backward before synchronising")]
    NoGradient(usize),
    /// The gradient buffer does not fit MPI's i32 counts.
    #[error("{0} gradient values exceed what one MPI message can carry (2^31 − 1)")]
    TooLarge(usize),
}

//! The stored forms the reader needs besides the schema's own row types: a trial's status
//! as any byte (so that damage is reported, not decoded into an invalid enum), and the row
//! layouts of schemas 1 and 2, converted to schema 3's with what they did not record
//! zeroed.

use hdf5::types::TypeDescriptor;
use hdf5::H5Type;

use crate::schema::{EpochRow, TpeRow, TrialStatus};

/// A trial's status as stored: the schema's enum type, but any byte, so that a damaged
/// value is reported instead of becoming an invalid [`TrialStatus`].
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub(super) struct StoredStatus(pub(super) u8);

// SAFETY: `StoredStatus` is a transparent `u8`, the size of the enum's base type
// (`TrialStatus` is `repr(u8)`), and every byte HDF5 writes into it is a valid `u8`.
unsafe impl H5Type for StoredStatus {
    fn type_descriptor() -> TypeDescriptor {
        TrialStatus::type_descriptor()
    }
}

/// [`TrialRow`] as stored; same layout and member names, so HDF5 reads it without conversion.
#[derive(H5Type, Clone, Copy, Debug)]
#[repr(C)]
pub(super) struct StoredTrial {
    pub(super) model_id: u64,
    pub(super) father: i64,
    pub(super) group: u32,
    pub(super) round: u32,
    pub(super) batch_size: u32,
    pub(super) kernel_size: u32,
    pub(super) epochs: u32,
    pub(super) best_accuracy: f64,
    pub(super) reported_accuracy: f64,
    pub(super) start_s: f64,
    pub(super) end_s: f64,
    pub(super) status: StoredStatus,
    pub(super) digest: [u8; 32],
}

/// [`StoredTrial`] of schemas 1 and 2: no digest.
#[derive(H5Type, Clone, Copy, Debug)]
#[repr(C)]
pub(super) struct StoredTrialV2 {
    pub(super) model_id: u64,
    pub(super) father: i64,
    pub(super) group: u32,
    pub(super) round: u32,
    pub(super) batch_size: u32,
    pub(super) kernel_size: u32,
    pub(super) epochs: u32,
    pub(super) best_accuracy: f64,
    pub(super) reported_accuracy: f64,
    pub(super) start_s: f64,
    pub(super) end_s: f64,
    pub(super) status: StoredStatus,
}

impl From<StoredTrialV2> for StoredTrial {
    /// A zero digest: what schemas 1 and 2 did not record.
    fn from(t: StoredTrialV2) -> StoredTrial {
        StoredTrial {
            model_id: t.model_id,
            father: t.father,
            group: t.group,
            round: t.round,
            batch_size: t.batch_size,
            kernel_size: t.kernel_size,
            epochs: t.epochs,
            best_accuracy: t.best_accuracy,
            reported_accuracy: t.reported_accuracy,
            start_s: t.start_s,
            end_s: t.end_s,
            status: t.status,
            digest: [0; 32],
        }
    }
}

/// [`TpeRow`] of schemas 1 and 2: no digest.
#[derive(H5Type, Clone, Copy, Debug)]
#[repr(C)]
pub(super) struct TpeRowV2 {
    pub(super) time_s: f64,
    pub(super) batch_size: u32,
    pub(super) kernel_size: u32,
    pub(super) loss: f64,
}

/// An epoch row of schema 1: no optimizer steps, no digest.
#[derive(H5Type, Clone, Copy, Debug)]
#[repr(C)]
pub(super) struct EpochRowV1 {
    pub(super) time_s: f64,
    pub(super) trial: u64,
    pub(super) model_id: u64,
    pub(super) epoch: u32,
    pub(super) train_images: u64,
    pub(super) val_images: u64,
    pub(super) train_ops: u64,
    pub(super) val_ops: u64,
    pub(super) train_loss: f64,
    pub(super) val_loss: f64,
    pub(super) val_accuracy: f64,
    pub(super) compute_s: f64,
    pub(super) allreduce_s: f64,
    pub(super) allreduce_bytes: u64,
    pub(super) data_wait_s: f64,
}

impl From<EpochRowV1> for EpochRow {
    /// Steps 0 and a zero digest: what schema 1 did not record.
    fn from(r: EpochRowV1) -> EpochRow {
        EpochRow {
            time_s: r.time_s,
            trial: r.trial,
            model_id: r.model_id,
            epoch: r.epoch,
            train_images: r.train_images,
            steps: 0,
            val_images: r.val_images,
            train_ops: r.train_ops,
            val_ops: r.val_ops,
            train_loss: r.train_loss,
            val_loss: r.val_loss,
            val_accuracy: r.val_accuracy,
            compute_s: r.compute_s,
            allreduce_s: r.allreduce_s,
            allreduce_bytes: r.allreduce_bytes,
            data_wait_s: r.data_wait_s,
            digest: [0; 32],
        }
    }
}

impl From<TpeRowV2> for TpeRow {
    /// A zero digest: what schemas 1 and 2 did not record.
    fn from(r: TpeRowV2) -> TpeRow {
        TpeRow {
            time_s: r.time_s,
            batch_size: r.batch_size,
            kernel_size: r.kernel_size,
            loss: r.loss,
            digest: [0; 32],
        }
    }
}

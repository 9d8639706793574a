//! Errors of writing and reading records, each naming the file and what to do.

use std::path::PathBuf;

/// Why records could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A file-system error (the OS error is in the message, not a `source`, so that a
    /// chain printer does not say it twice).
    #[error("{path}: {error}")]
    Io {
        /// The path concerned.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
    /// The HDF5 library refused (not an HDF5 file, truncated, missing dataset...).
    #[error("{path}: {message}")]
    Hdf5 {
        /// The file concerned.
        path: PathBuf,
        /// HDF5's message.
        message: String,
    },
    /// A record file may not grow by another append ([`crate::headroom`]): the run stops
    /// while every file is whole.
    #[error("{path}: {problem}")]
    NoRoom {
        /// The file that would have grown.
        path: PathBuf,
        /// The room left and what to do.
        problem: String,
    },
    /// The folder is not a run.
    #[error("{0}: no primary.h5 here; give the folder of one run (results/<run-id>/)")]
    NotARun(PathBuf),
    /// The records use another schema.
    #[error("{path}: schema version {found}, this aiperf reads version {expected}; use the aiperf release that wrote the run")]
    Schema {
        /// The file concerned.
        path: PathBuf,
        /// The version found.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },
    /// An attribute holds an impossible value.
    #[error("{path}: attribute {name:?}: {problem}")]
    BadAttribute {
        /// The file concerned.
        path: PathBuf,
        /// The attribute.
        name: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// A row holds an impossible value.
    #[error("{path}: {dataset} row {row}, field {field}: {problem}")]
    BadRow {
        /// The file concerned.
        path: PathBuf,
        /// The dataset.
        dataset: &'static str,
        /// The row index (from 0).
        row: usize,
        /// The field.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// The grid step cannot be used for this run.
    #[error("{run}: {problem}")]
    BadInterval {
        /// The run folder.
        run: PathBuf,
        /// What is wrong, and the steps that work.
        problem: crate::grid::GridError,
    },
    /// Nothing to score.
    #[error("{0}: no completed epoch in any group: there is nothing to score")]
    Empty(PathBuf),
}

//! Dataset preparation for aiperf: converters from public dataset formats (IDX, CIFAR-10
//! binary, ImageNet JPEG folders) into the packed `.aipk` format, and the reader that the
//! training loader maps. This crate needs neither libtorch nor MPI.

#![warn(missing_docs)]

pub mod cifar;
pub mod cli;
pub mod error;
pub mod idx;
pub mod imagenet;
pub mod pack;

pub use error::{PrepError, Result};
pub use pack::{
    check_targets, commit_all, split_path, Header, Pack, PackWriter, Source, StagedPack,
};

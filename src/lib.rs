//! aiperf: the AIPerf benchmark (AutoML on every accelerator of a machine, scored in
//! sustained operations per second) as an MPI + libtorch program. This library holds the
//! logic; `src/main.rs` only parses the command line and dispatches.

#![warn(missing_docs)]

pub use aiperf_ir::{arch, ops};

pub mod ceiling;
pub mod cli;
pub mod commands;
pub mod config;
pub mod data;
pub mod exchange;
pub mod fingerprint;
pub mod gpu;
pub mod host;
pub mod model;
pub mod monitor;
pub mod platform;
pub mod roles;
pub mod search;
pub mod seeds;
pub mod stats;
pub mod train;
pub mod version;
pub mod world;

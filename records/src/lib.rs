//! aiperf's run records and scoring step: the HDF5 schema of docs/design.md §6, its writer (used
//! by `aiperf run`) and reader, the score of docs/design.md §5 and its reports. Depends on HDF5
//! only, so reviewers can build `aiperf-score` without libtorch or MPI.

#![warn(missing_docs)]

pub mod audit;
pub mod ceiling;
pub mod cli;
pub mod consistency;
pub mod digest;
pub mod error;
pub mod folder;
pub mod grid;
mod h5guard;
mod h5msg;
pub mod headroom;
pub mod integrity;
pub mod outputs;
pub mod platform;
pub mod plots;
pub mod reader;
pub mod recorded;
pub mod recount;
pub mod report;
pub mod resources;
pub mod rules;
pub mod schema;
pub mod score;
mod source;
pub mod stability;
pub mod tail;
pub mod trace;
pub mod units;
pub mod version;
pub mod writer;

pub use error::RecordError;
pub use reader::{read_architectures, read_config, read_run, read_tpe, Run};
pub use score::{score, Score};

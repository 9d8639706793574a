//! The architecture IR and its analytical operation counts: the layer DAG with shape
//! inference, serde (JSON and bincode), the start models, search descriptors (`arch`), and
//! the per-layer FP/BP/update counts of docs/design.md §4 (`ops`). A crate of its own, without
//! libtorch or MPI, so that the runtime and the reviewers' scorer count alike.

#![warn(missing_docs)]

pub mod arch;
pub mod ops;

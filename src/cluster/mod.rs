//! The MPI side of the benchmark: the layout of roles (primary, groups, leaders), the
//! versioned message protocol between the primary and the leaders, and the run itself (so
//! far with the simulated trainer).

pub mod layout;
pub mod protocol;
pub mod run;

//! The MPI side of the benchmark: the layout of roles (primary, groups, leaders), the common
//! clock, the interconnect profile (`comm-bench`), the versioned message protocol between
//! the primary and the leaders, each leader's background architecture generator, and the
//! run itself.

pub mod clock;
pub mod commbench;
pub mod generator;
pub mod layout;
pub mod protocol;
pub mod run;

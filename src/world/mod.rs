//! The MPI plumbing under the roles: setting a run up across the world (`bootstrap`:
//! placement, threads, hosts, t0), which rank does what (`ranks`), the common `clock`,
//! moving bytes and values between ranks (`transport`) and the messages between the
//! primary and the group leaders (`protocol`). Nothing here knows what a trial is.

pub mod bootstrap;
pub mod clock;
pub mod protocol;
pub mod ranks;
pub mod transport;

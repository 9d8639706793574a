//! The MPI side of the benchmark: roles and the messages between the primary (rank 0) and the
//! replica groups' leaders. So far: the versioned, size-limited message protocol.

pub mod protocol;

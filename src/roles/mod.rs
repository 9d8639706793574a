//! The two roles of a run and what serves them: the primary on rank 0 (a state machine, its
//! serve loop and its resumption from records), the replica groups (leader, members,
//! trials) with each leader's background `generator`, the primary's stall `watchdog` and
//! `status` line, what every rank of a run shares (`context`), and the dispatch of each
//! rank to its role (`dispatch`). The MPI plumbing they stand on is [`crate::world`].

pub mod context;
pub mod dispatch;
pub mod generator;
pub mod group;
pub mod primary;
pub mod status;
pub mod watchdog;

//! The MPI side of the benchmark: set-up across the world (`bootstrap`: layout, placement,
//! clock, hosts), the results folder's `claim` by one job, moving messages (`transport`, `protocol`), the primary (a state machine
//! and its serve loop), the stall `watchdog`, the `status` line, `resume` from records, the
//! groups (leader, members, trials), each leader's background `generator`, the interconnect
//! profile (`commbench`), and the dispatch of ranks to roles (`run`).

pub mod bootstrap;
pub mod claim;
pub mod clock;
pub mod commbench;
pub mod generator;
pub mod group;
pub mod layout;
pub mod primary;
pub mod protocol;
pub mod resume;
pub mod run;
pub mod status;
pub mod transport;
pub mod watchdog;

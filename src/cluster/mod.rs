//! The MPI side of the benchmark: set-up across the world (`bootstrap`: layout, placement,
//! clock, hosts), moving messages (`transport`,
//! `protocol`), the primary (a state machine, its serve loop and its resumption from
//! records), the stall `watchdog`, the `status` line, the groups (leader, members, trials),
//! each leader's background `generator`, the interconnect profile (`commbench`), what every
//! rank shares (`context`), and the dispatch of ranks to roles (`run`).

pub mod bootstrap;
pub mod clock;
pub mod commbench;
pub mod context;
pub mod generator;
pub mod group;
pub mod layout;
pub mod primary;
pub mod protocol;
pub mod run;
pub mod status;
pub mod transport;
pub mod watchdog;

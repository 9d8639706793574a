//! What every rank of a run shares once it is set up: the records' folder and claim, the
//! start architecture, the trainer, the budgets and seeds, the common clock and deadline.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::arch::Graph;
use crate::train::Trainer;
use crate::world::clock::Clock;

/// Settings and shared objects of a run, on every rank.
pub struct RunContext {
    /// Where the records go.
    pub results: PathBuf,
    /// This job's claim on `results`, checked before the first record.
    pub claim: aiperf_records::folder::Claim,
    /// The start architecture.
    pub start: Graph,
    /// How this rank trains.
    pub trainer: Box<dyn Trainer>,
    /// Full epoch budget.
    pub epochs: u32,
    /// Scale of the patience rule min(6 + 2·round, 20) (docs/design.md §3).
    pub patience_scale: f64,
    /// Kernel sizes of the deeper morphism.
    pub kernel_sizes: Vec<u32>,
    /// Seed of everything.
    pub seed: u64,
    /// Threads of each leader's search pool.
    pub search_threads: usize,
    /// Steps of each epoch traced on every rank (`--trace-steps`; 0: none).
    pub trace_steps: u32,
    /// A lock file that every leader on this machine holds while it searches (stand-in
    /// trainers: many groups share the cores, so one search runs at a time); `None`: none.
    pub search_lock: Option<PathBuf>,
    /// Host of every rank.
    pub hosts: Vec<String>,
    /// This rank's view of the common clock.
    pub clock: Clock,
    /// The run's start on the common clock.
    pub t0_s: f64,
    /// The run's end on the common clock (t0 + duration).
    pub deadline_s: f64,
    /// Seconds between resource samples written to the records.
    pub monitor_interval_s: f64,
    /// Set by SIGTERM/SIGINT.
    pub interrupted: Arc<AtomicBool>,
    /// Go on with the records already in `results` (`--resume`).
    pub resume: bool,
    /// How long a leader waits for the primary's answer (--stall-timeout).
    pub patience: crate::world::transport::Patience,
}

impl RunContext {
    /// Whether the run is over for this rank: past the deadline or interrupted.
    pub fn over(&self) -> bool {
        self.clock.now() >= self.deadline_s || self.interrupted.load(Ordering::Relaxed)
    }
}

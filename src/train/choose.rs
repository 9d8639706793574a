//! `--exchange auto`, the default: the node-aware exchange where it measures faster on the
//! group, the flat one elsewhere. The choice is made once per group communicator, on its
//! first trial (or check, or sweep), collectively: where the group has one node, or one rank
//! per node, the node-aware exchange is the flat one with extra calls and the flat one is
//! taken unmeasured; otherwise both are timed on a probe the size of the run's buckets,
//! interleaved, and the slower rank's time decides — a figure every rank holds, so every
//! rank takes the same side. The choice and its figures go to the log (and dp-check's
//! report), so a run's exchange can be traced back to what was measured.

use std::cell::RefCell;
use std::time::Instant;

use mpi::collective::{CommunicatorCollectives, SystemOperation};
use mpi::ffi;
use mpi::traits::Communicator;
use serde::Serialize;

use super::exchange::{exchange_flat, ExchangeConfig, ExchangeMethod};
use super::hierarchy;
use super::inplace::RawComm;

/// The probe's small bucket, bytes: the size of the last bucket a step waits for.
const SMALL_BYTES: u64 = 64 << 10;
/// The probe's large bucket is the run's bucket size, at most this many bytes (the probe
/// stays well under a second on a 10 Gbit/s link).
const LARGE_BYTES_MAX: u64 = 8 << 20;
/// Timed repetitions of each exchange (after one untimed).
const REPS: usize = 5;

/// What `auto` chose for one group communicator, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Choice {
    /// The exchange taken.
    pub method: ExchangeMethod,
    /// Nodes the group spans.
    pub nodes: u32,
    /// The most ranks any one of them holds.
    pub ranks_per_node: u32,
    /// The probe's bytes (its small and its large bucket), where both were timed.
    pub probe_bytes: Option<u64>,
    /// Median seconds of the flat exchange of the probe (the slowest rank's), where timed.
    pub flat_s: Option<f64>,
    /// The same for the node-aware exchange.
    pub hierarchical_s: Option<f64>,
}

impl Choice {
    /// One line for the log.
    pub fn describe(&self) -> String {
        let layout = format!(
            "{} node(s), at most {} rank(s) per node",
            self.nodes, self.ranks_per_node
        );
        match (self.flat_s, self.hierarchical_s, self.probe_bytes) {
            (Some(f), Some(h), Some(b)) => format!(
                "exchange auto on {layout}: a {b}-byte probe took {:.3} ms flat, {:.3} ms node-aware (medians of {REPS}, slowest rank) -> {}",
                f * 1e3,
                h * 1e3,
                self.method.name()
            ),
            _ => format!(
                "exchange auto on {layout}: the node-aware exchange is the flat one there -> {}",
                self.method.name()
            ),
        }
    }
}

thread_local! {
    /// The choices made on this thread, by the group communicator's handle (a group's
    /// communicator lives for the whole run, so its first trial's choice holds for all).
    static CHOSEN: RefCell<Vec<(ffi::MPI_Comm, Choice)>> = const { RefCell::new(Vec::new()) };
}

/// The exchange `cfg` asks for, with `auto` resolved over `comm` (collective over `comm`
/// the first time for a communicator: every rank of the group calls it at the same point),
/// and the node-aware exchange's communicators registered where it is the one. The
/// returned guard keeps them registered.
pub fn prepare<C: RawComm>(
    comm: &C,
    cfg: &ExchangeConfig,
) -> (ExchangeConfig, Option<hierarchy::Registered>) {
    let mut resolved = *cfg;
    if cfg.method == ExchangeMethod::Auto {
        resolved.method = choice(comm, cfg).method;
    }
    let guard = hierarchy::register(comm, &resolved);
    (resolved, guard)
}

/// `auto`'s choice for `comm`: the one made before for it, or made now (collective, and
/// logged by the group's first rank).
pub fn choice<C: RawComm>(comm: &C, cfg: &ExchangeConfig) -> Choice {
    let handle = comm.as_raw();
    let known = CHOSEN.with(|c| {
        (c.borrow().iter())
            .find(|(h, _)| *h == handle)
            .map(|(_, k)| k.clone())
    });
    if let Some(k) = known {
        return k;
    }
    let made = choose(comm, cfg);
    if comm.rank() == 0 {
        log::info!("{}", made.describe());
    }
    CHOSEN.with(|c| c.borrow_mut().push((handle, made.clone())));
    made
}

/// Nodes and the most ranks on one of them (collective over `comm`).
fn layout<C: Communicator>(comm: &C) -> (u32, u32) {
    let node = comm.split_shared(comm.rank());
    let first = i32::from(node.rank() == 0);
    let (mut nodes, mut most) = (0i32, 0i32);
    comm.all_reduce_into(&first, &mut nodes, SystemOperation::sum());
    comm.all_reduce_into(&node.size(), &mut most, SystemOperation::max());
    (nodes as u32, most as u32)
}

/// Makes the choice (collective over `comm`).
fn choose<C: RawComm>(comm: &C, cfg: &ExchangeConfig) -> Choice {
    let (nodes, ranks_per_node) = layout(comm);
    let mut made = Choice {
        method: ExchangeMethod::Allreduce,
        nodes,
        ranks_per_node,
        probe_bytes: None,
        flat_s: None,
        hierarchical_s: None,
    };
    if nodes < 2 || ranks_per_node < 2 {
        return made;
    }
    let large = cfg.bucket_bytes.clamp(SMALL_BYTES, LARGE_BYTES_MAX);
    let (flat, hier) = time_both(comm, cfg, large);
    made.probe_bytes = Some(SMALL_BYTES + large);
    made.flat_s = Some(flat);
    made.hierarchical_s = Some(hier);
    if hier < flat {
        made.method = ExchangeMethod::Hierarchical;
    }
    made
}

/// Median seconds (the slowest rank's) of the flat and the node-aware exchange of a probe of
/// two buckets, `SMALL_BYTES` and `large` bytes, timed in turns that alternate which goes
/// first.
fn time_both<C: RawComm>(comm: &C, cfg: &ExchangeConfig, large: u64) -> (f64, f64) {
    let probe = ExchangeConfig {
        method: ExchangeMethod::Allreduce,
        first_bucket_bytes: SMALL_BYTES,
        bucket_bytes: large,
        overlap: false,
        ..*cfg
    };
    let node_aware = ExchangeConfig {
        method: ExchangeMethod::Hierarchical,
        ..probe
    };
    let _topology = hierarchy::register(comm, &node_aware);
    let sizes = [(SMALL_BYTES / 4) as usize, (large / 4) as usize];
    let src = vec![1e-3f32; sizes.iter().sum()];
    let mut buf = vec![0f32; src.len()];
    let mut times = [Vec::with_capacity(REPS), Vec::with_capacity(REPS)];
    for rep in 0..=REPS {
        for turn in 0..2 {
            let which = (rep + turn) % 2;
            let method = [&probe, &node_aware][which];
            comm.barrier();
            let t = Instant::now();
            exchange_flat(comm, method, &sizes, &src, &mut buf).expect("a copy cannot fail");
            let mine = t.elapsed().as_secs_f64();
            let mut slowest = 0f64;
            comm.all_reduce_into(&mine, &mut slowest, SystemOperation::max());
            if rep > 0 {
                times[which].push(slowest);
            }
        }
    }
    let [flat, hier] = times.map(median);
    (flat, hier)
}

/// The median of a non-empty list (the mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_takes_the_middle() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn the_log_line_names_both_figures_and_the_choice() {
        let c = Choice {
            method: ExchangeMethod::Hierarchical,
            nodes: 4,
            ranks_per_node: 2,
            probe_bytes: Some(1 << 20),
            flat_s: Some(0.002),
            hierarchical_s: Some(0.001),
        };
        let line = c.describe();
        assert!(
            line.contains("2.000 ms flat, 1.000 ms node-aware"),
            "{line}"
        );
        assert!(line.ends_with("-> hierarchical"), "{line}");
    }
}

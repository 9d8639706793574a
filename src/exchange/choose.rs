//! `--exchange auto`, the default: the node-aware exchange where it measures faster, the
//! flat one elsewhere. `aiperf run` and `dp-check` resolve it once at start-up, over the
//! whole job ([`for_run`]), before the configuration is recorded: every group times both
//! exchanges on a probe the size of the run's buckets, in turns, the slowest rank's medians
//! counting (a figure every rank of the group holds); a group on one node, or with one rank
//! per node, has nothing to choose (there the node-aware exchange is the flat one plus
//! calls) and is not timed. The groups' figures are gathered to every rank, summed in the
//! same order everywhere, and the faster exchange taken for the whole run — so the recorded
//! configuration names the exchange that ran, and an audit replays it without measuring.
//! Each timed group's first rank logs its figures, rank 0 the sums and the choice
//! (dp-check reports them).

use std::time::Instant;

use mpi::collective::{CommunicatorCollectives, SystemOperation};
use mpi::traits::Communicator;
use serde::Serialize;

use super::calls::RawComm;
use super::node_aware;
use super::{Exchange, ExchangeConfig, ExchangeMethod};

/// The probe's small bucket, bytes: the size of the last bucket a step waits for.
const SMALL_BYTES: u64 = 64 << 10;
/// The probe's large bucket is the run's bucket size, at most this many bytes (the probe
/// stays well under a second on a 10 Gbit/s link).
const LARGE_BYTES_MAX: u64 = 8 << 20;
/// Timed repetitions of each exchange (after one untimed).
const REPS: usize = 5;

/// What `auto` measured on one group communicator, and which exchange that favoured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Choice {
    /// The exchange this group's probe favoured (flat where it was not timed); the run
    /// takes [`RunChoice::method`].
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
                "exchange auto, a group on {layout}: a {b}-byte probe took {:.3} ms flat, {:.3} ms node-aware (medians of {REPS}, slowest rank) -> {}",
                f * 1e3,
                h * 1e3,
                self.method.name()
            ),
            _ => format!(
                "exchange auto, a group on {layout}: the node-aware exchange is the flat one there -> {}",
                self.method.name()
            ),
        }
    }
}

/// `auto` resolved for a whole run: the exchange taken and every group's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunChoice {
    /// The exchange every group uses.
    pub method: ExchangeMethod,
    /// Each group's layout and probe times, in group order.
    pub groups: Vec<Choice>,
}

impl RunChoice {
    /// One line for the log.
    pub fn describe(&self) -> String {
        let timed: Vec<&Choice> = self.groups.iter().filter(|g| g.flat_s.is_some()).collect();
        if timed.is_empty() {
            return format!(
                "exchange auto: none of the {} group(s) spans several nodes with several ranks on one, where the node-aware exchange would differ -> {}",
                self.groups.len(),
                self.method.name()
            );
        }
        let sum = |f: fn(&Choice) -> Option<f64>| timed.iter().filter_map(|g| f(g)).sum::<f64>();
        format!(
            "exchange auto: {} of {} group(s) timed both on a probe the size of the run's buckets (medians of {REPS}, slowest rank); in all {:.3} ms flat, {:.3} ms node-aware -> {}",
            timed.len(),
            self.groups.len(),
            sum(|g| g.flat_s) * 1e3,
            sum(|g| g.hierarchical_s) * 1e3,
            self.method.name()
        )
    }
}

/// Resolves `auto` in `cfg` for a whole job, once, before anything is recorded (collective
/// over `world`: every rank calls it at the same point; `group` is this rank's replica group,
/// `None` on ranks in none): `cfg.method` becomes the method taken, and the figures behind
/// the choice are returned. Any other method is left as it is, with no collective call and
/// `None`. The choice is logged by `world`'s rank 0 and each timed group's first rank.
pub fn resolve_auto<W: Communicator, C: RawComm>(
    world: &W,
    group: Option<&C>,
    cfg: &mut ExchangeConfig,
) -> Option<RunChoice> {
    let made = for_run(world, group, cfg)?;
    cfg.method = made.method;
    Some(made)
}

/// [`resolve_auto`]'s choice, leaving `cfg` as it is.
fn for_run<W: Communicator, C: RawComm>(
    world: &W,
    group: Option<&C>,
    cfg: &ExchangeConfig,
) -> Option<RunChoice> {
    if cfg.method != ExchangeMethod::Auto {
        return None;
    }
    let mine = group.map(|g| (g.rank() == 0, for_group(g, cfg)));
    if let Some((true, c)) = &mine {
        if c.flat_s.is_some() {
            log::info!("{}", c.describe());
        }
    }
    let leader = mine.as_ref().filter(|(leads, _)| *leads).map(|(_, c)| c);
    let mut all = vec![0f64; ROW * world.size() as usize];
    world.all_gather_into(&to_row(leader)[..], &mut all[..]);
    let groups = from_rows(&all);
    // The same rows in the same order on every rank: the same sums, the same choice.
    let made = RunChoice {
        method: decide(&groups),
        groups,
    };
    if world.rank() == 0 {
        log::info!("{}", made.describe());
    }
    Some(made)
}

/// f64s per rank in [`for_run`]'s gather.
const ROW: usize = 6;

/// A rank's row for the gather: a group's first rank speaks for it — [1, nodes, ranks per
/// node, probe bytes, flat s, node-aware s], NaN where not timed — and every other rank
/// sends zeros.
fn to_row(leader: Option<&Choice>) -> [f64; ROW] {
    let or_nan = |x: Option<f64>| x.unwrap_or(f64::NAN);
    match leader {
        Some(c) => [
            1.0,
            f64::from(c.nodes),
            f64::from(c.ranks_per_node),
            or_nan(c.probe_bytes.map(|b| b as f64)),
            or_nan(c.flat_s),
            or_nan(c.hierarchical_s),
        ],
        None => [0.0; ROW],
    }
}

/// The groups' choices from every rank's row, in rank order (so in group order), each with
/// the exchange its own probe favoured.
fn from_rows(all: &[f64]) -> Vec<Choice> {
    let some = |x: f64| Some(x).filter(|x| x.is_finite());
    all.chunks_exact(ROW)
        .filter(|r| r[0] == 1.0)
        .map(|r| {
            let mut c = Choice {
                method: ExchangeMethod::Allreduce,
                nodes: r[1] as u32,
                ranks_per_node: r[2] as u32,
                probe_bytes: some(r[3]).map(|b| b as u64),
                flat_s: some(r[4]),
                hierarchical_s: some(r[5]),
            };
            c.method = decide(std::slice::from_ref(&c));
            c
        })
        .collect()
}

/// The node-aware exchange if the timed groups' probes took less with it in all (a tie
/// keeps the flat one); the flat one where no group was timed.
fn decide(groups: &[Choice]) -> ExchangeMethod {
    let (flat, hier) = groups.iter().fold((0.0, 0.0), |(f, h), g| {
        (
            f + g.flat_s.unwrap_or(0.0),
            h + g.hierarchical_s.unwrap_or(0.0),
        )
    });
    if hier < flat {
        ExchangeMethod::Hierarchical
    } else {
        ExchangeMethod::Allreduce
    }
}

/// The choice for one group (collective over `comm`), which [`for_run`] gathers.
fn for_group<C: RawComm>(comm: &C, cfg: &ExchangeConfig) -> Choice {
    let node_aware::Layout { nodes, most, .. } = node_aware::layout(comm);
    let mut made = Choice {
        method: ExchangeMethod::Allreduce,
        nodes,
        ranks_per_node: most,
        probe_bytes: None,
        flat_s: None,
        hierarchical_s: None,
    };
    if nodes >= 2 && most >= 2 {
        let large = cfg.bucket_bytes.clamp(SMALL_BYTES, LARGE_BYTES_MAX);
        let (flat, hier) = time_both(comm, cfg, large);
        made.probe_bytes = Some(SMALL_BYTES + large);
        made.flat_s = Some(flat);
        made.hierarchical_s = Some(hier);
    }
    made.method = decide(std::slice::from_ref(&made));
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
    // Both exchanges built once (the node-aware one splits `comm` by node, collectively).
    let hierarchical = ExchangeConfig {
        method: ExchangeMethod::Hierarchical,
        ..probe
    };
    let exchanges = [&probe, &hierarchical]
        .map(|c| Exchange::new(comm, c).expect("both methods are named, neither is auto"));
    let sizes = [(SMALL_BYTES / 4) as usize, (large / 4) as usize];
    let src = vec![1e-3f32; sizes.iter().sum()];
    let mut buf = vec![0f32; src.len()];
    let mut times = [Vec::with_capacity(REPS), Vec::with_capacity(REPS)];
    for rep in 0..=REPS {
        for turn in 0..2 {
            let which = (rep + turn) % 2;
            comm.barrier();
            let t = Instant::now();
            exchanges[which].sum_copied(&sizes, &src, &mut buf);
            let mine = t.elapsed().as_secs_f64();
            let mut slowest = 0f64;
            comm.all_reduce_into(&mine, &mut slowest, SystemOperation::max());
            if rep > 0 {
                times[which].push(slowest);
            }
        }
    }
    let [flat, hier] = times.map(crate::stats::median);
    (flat, hier)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn the_run_takes_what_its_timed_groups_took_less_time_with_in_all() {
        let group = |f: Option<f64>, h: Option<f64>| Choice {
            method: ExchangeMethod::Allreduce,
            nodes: 2,
            ranks_per_node: 2,
            probe_bytes: f.map(|_| 1 << 20),
            flat_s: f,
            hierarchical_s: h,
        };
        // One group faster node-aware, one slower by more: flat in all.
        let mixed = [group(Some(2.0), Some(1.5)), group(Some(1.0), Some(2.0))];
        assert_eq!(decide(&mixed), ExchangeMethod::Allreduce);
        let faster = [group(Some(2.0), Some(1.5)), group(None, None)];
        assert_eq!(decide(&faster), ExchangeMethod::Hierarchical);
        // A tie, or nothing timed: flat.
        assert_eq!(
            decide(&[group(Some(1.0), Some(1.0))]),
            ExchangeMethod::Allreduce
        );
        assert_eq!(decide(&[group(None, None)]), ExchangeMethod::Allreduce);
        assert_eq!(decide(&[]), ExchangeMethod::Allreduce);
        let run = RunChoice {
            method: ExchangeMethod::Hierarchical,
            groups: faster.to_vec(),
        };
        let line = run.describe();
        assert!(line.contains("1 of 2 group(s)"), "{line}");
        assert!(line.contains("2000.000 ms flat, 1500.000 ms node-aware -> hierarchical"));
        let none = RunChoice {
            method: ExchangeMethod::Allreduce,
            groups: vec![group(None, None)],
        };
        assert!(none.describe().contains("none of the 1 group(s)"));
    }

    #[test]
    fn the_gathered_rows_give_back_every_groups_figures_in_place() {
        let timed = Choice {
            method: ExchangeMethod::Hierarchical,
            nodes: 4,
            ranks_per_node: 2,
            probe_bytes: Some(196_608),
            flat_s: Some(0.002),
            hierarchical_s: Some(0.001),
        };
        let untimed = Choice {
            method: ExchangeMethod::Allreduce,
            nodes: 1,
            ranks_per_node: 3,
            probe_bytes: None,
            flat_s: None,
            hierarchical_s: None,
        };
        // The primary, a timed group's leader and member, an untimed group's leader.
        let rows: Vec<f64> = [None, Some(&timed), None, Some(&untimed)]
            .into_iter()
            .flat_map(to_row)
            .collect();
        let groups = from_rows(&rows);
        assert_eq!(groups, vec![timed, untimed]);
        // Flat and node-aware stay in their columns: the faster one wins.
        assert_eq!(decide(&groups), ExchangeMethod::Hierarchical);
    }
}
